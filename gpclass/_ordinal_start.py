"""Where ML-II of an ordinal model starts, shared by the scikit-learn estimator and the CSV job.

The noise sigma is held at 1 (:func:`noise_held`) and the cutpoints start where the prior predictive gives the
classes their training frequencies: with v the prior variance k(x, x), P(y <= k) = Phi(b_k / sqrt(1 + v)) exactly
for the probit and about sigma(b_k / sqrt(1 + pi v / 8)) for the logit (MacKay's approximation of the averaged
sigmoid), so b_k = :func:`prior_scale` (v) x :func:`link_quantiles` (c_k) for the cumulative frequencies c_k.
"""

from statistics import NormalDist

import equinox as eqx
import jax
import numpy as np


def link_quantiles(cumulative, link: str) -> np.ndarray:
    """The link's quantiles of cumulative class frequencies in (0, 1): Phi^-1 (probit) or logit."""
    cumulative = np.asarray(cumulative, np.float64)
    if link == "logit":
        return np.log(cumulative) - np.log1p(-cumulative)
    return np.array([NormalDist().inv_cdf(c) for c in cumulative])


def prior_scale(variance: float, link: str) -> float:
    """sqrt(1 + v) for the probit, sqrt(1 + pi v / 8) for the logit (module docstring)."""
    return np.sqrt(1.0 + (np.pi / 8.0 if link == "logit" else 1.0) * variance)


def noise_held(likelihood):
    """``gpc.fit``'s ``trainable`` for an Ordinal likelihood: the cutpoints fitted, the noise sigma held at its
    value.  The model is unchanged when f, the cutpoints and sigma are scaled together, so with a kernel that
    has a signal variance one of the two must be held; holding sigma = 1 works for every kernel (nothing to
    find inside a kernel expression), is the probit's scale (K = 2: ``Probit`` with a fitted threshold), and
    reached the same optima as holding the variance at 1 and fitting sigma on Chu & Ghahramani's data sets."""
    return eqx.tree_at(lambda lik: lik.noise, jax.tree.map(lambda _: True, likelihood), False)
