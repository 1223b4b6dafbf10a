"""Case weights for a binary likelihood: the power likelihood p(y|f)^w.

``gpc.infer(..., weights=w)`` and ``gpc.fit(..., weights=w)`` multiply each case's label (+-1) by its weight
and wrap the likelihood in :class:`Weighted`, for which a label y stands for the class sign(y) with the weight
|y|: log p_w(y|f) = |y| log p(sign y | f).  Keyed on the label, like ``likelihoods._masked``, the weight
survives EP's per-site slicing and ``vmap``; a weight of 0 (label 0, the binary ``left_out_label``) is a
left-out case, exactly as ``mask``.

* Laplace: log p, its slope and W = -d^2 log p / df^2 scaled by w (exact; W >= 0 stays so).  A whole number
  w = k gives the same mode, log q and predictions as k copies of the case (the copies share one latent
  value; by Sylvester's determinant identity |I + W^1/2 K W^1/2| is that of the copies).
* KL: E_q[log p] scaled by w (exact), again k copies for w = k.
* EP: power EP (Minka 2004, "Power EP"): the site approximates the factor p(y|f)^w as a whole, its tilted
  distribution p(y|f)^w q_-i(f) / Z.  For w = 1 the base likelihood's closed form, for w = 0 the cavity
  itself; for any other w (Phi(z)^w has no closed form) quadrature (:func:`tilted_by_quadrature`).  Unlike
  Laplace and KL, EP with w = 2 is *not* EP with two copies of the case (two sites, each matched to its own
  tilted distribution): on one case EP with w = 2 is exact, two sites are not.
"""

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import logsumexp

from ._base import _Z_RANGE, AbstractLikelihood

# Gauss-Legendre nodes per panel for tilted moments by quadrature (:func:`tilted_by_quadrature`).
_TILTED_NODES, _TILTED_WEIGHTS = np.polynomial.legendre.leggauss(64)
_MODE_STEPS = 40  # safeguarded Newton steps for the tilted mode (bisection alone would halve the bracket 40 times)


def tilted_mode(derivatives, mean, var):
    """The mode of log_lik(f) - (f - mean)^2 / (2 var) and the curvature there, for a log-concave log_lik whose
    ``derivatives(f)`` are (log_lik, slope, W = -curvature) elementwise: Newton steps safeguarded by
    bisection in the bracket [mean, mean + var slope(mean)] (ordered), where the gradient changes sign."""
    _, slope0, _ = derivatives(mean)
    end = mean + var * slope0
    lo, hi = jnp.minimum(mean, end), jnp.maximum(mean, end)

    def step(_, state):
        x, lo, hi = state
        _, slope, w = derivatives(x)
        g = slope - (x - mean) / var
        h = jnp.maximum(w, 0.0) + 1.0 / var
        lo, hi = jnp.where(g > 0, x, lo), jnp.where(g > 0, hi, x)
        newton = x + g / h
        x = jnp.where((newton > lo) & (newton < hi), newton, 0.5 * (lo + hi))
        return x, lo, hi

    x, _, _ = lax.fori_loop(0, _MODE_STEPS, step, (mean, lo, hi))
    _, _, w = derivatives(x)
    return x, jnp.maximum(w, 0.0) + 1.0 / var


def tilted_by_quadrature(log_lik, derivatives, transitions, mean, var):
    """(log Z, mean, variance) of exp(log_lik(f)) N(f|mean, var) / Z by Gauss-Legendre panels in f.

    ``log_lik`` maps latent values f of shape (n, nodes) to log-likelihoods of that shape (per case: the rows of
    ``mean``), ``derivatives`` maps f of shape (n,) to (log_lik, slope, W) (as ``AbstractLikelihood.derivatives``)
    and ``transitions`` (n, P) are the values of f where log_lik bends (``AbstractLikelihood.transitions``).

    The tilted distribution need not lie where the cavity does (a cavity mean of -20 with variance 1 and
    Phi(f)^2: the tilted mean is near -7.6, 12 cavity standard deviations away), so the panels follow it:
    from its mode c and the curvature h there (:func:`tilted_mode`), the range
    [min(c, mean) - 10 std, max(c, mean) + 10 std] (std the cavity's: a log-concave tilted distribution is
    no wider than the cavity) split at c +- 10 / sqrt(h), at c and at the transitions, 64 nodes a panel.
    The nodes are placed without derivatives (``stop_gradient``: the integral does not depend on them); sums
    in log space (finite far in the tail), the variance from the spread about the mode (no cancellation).
    """
    dtype = mean.dtype
    nodes = jnp.asarray(_TILTED_NODES, dtype)
    weights = jnp.asarray(_TILTED_WEIGHTS, dtype)
    std = jnp.sqrt(var)
    c, h = lax.stop_gradient(tilted_mode(derivatives, mean, var))
    width = 1.0 / jnp.sqrt(h)
    lo = lax.stop_gradient(jnp.minimum(c, mean) - _Z_RANGE * std)
    hi = lax.stop_gradient(jnp.maximum(c, mean) + _Z_RANGE * std)
    points = jnp.concatenate([jnp.stack([lo, c - _Z_RANGE * width, c, c + _Z_RANGE * width, hi], axis=-1),
                              transitions.astype(dtype)], axis=-1)
    points = jnp.sort(jnp.clip(points, lo[:, None], hi[:, None]), axis=-1)
    a, b = points[:, :-1], points[:, 1:]
    half = 0.5 * (b - a)  # (n, panels)
    f = half[..., None] * nodes + (0.5 * (a + b))[..., None]  # (n, panels, nodes)
    n = mean.shape[0]
    f, log_node = f.reshape(n, -1), (jnp.log(jnp.where(half > 0, half, 1.0))[..., None] + jnp.log(weights))
    log_node = jnp.where((half > 0)[..., None], log_node, -jnp.inf).reshape(n, -1)  # empty panels
    u = f - c[:, None]  # about the mode
    log_w = log_node - 0.5 * (f - mean[:, None]) ** 2 / var[:, None] - 0.5 * jnp.log(2.0 * jnp.pi * var)[:, None]
    log_w = log_w + log_lik(f)
    log_z = logsumexp(log_w, axis=-1)
    p = jnp.exp(log_w - log_z[:, None])
    u_mean = jnp.sum(p * u, axis=-1)
    return log_z, c + u_mean, jnp.sum(p * (u - u_mean[:, None]) ** 2, axis=-1)


class Weighted(AbstractLikelihood):
    """``base`` raised to the power |y| for the label sign(y): log p = |y| log base(sign y | f) (module docstring).

    A label 0 (weight 0) contributes nothing: no log p, slope or curvature, tilted moments the cavity's.
    """

    base: AbstractLikelihood

    @property
    def left_out_label(self):
        return self.base.left_out_label

    @property
    def log_concave(self):
        return self.base.log_concave

    @staticmethod
    def _split(y):
        """(class +-1, weight >= 0) of each label."""
        return jnp.where(y >= 0, 1.0, -1.0).astype(y.dtype), jnp.abs(y)

    def log_prob(self, y, f):
        label, w = self._split(y)
        return jnp.where(w > 0, w * self.base.log_prob(label, f), 0.0)

    def derivatives(self, y, f):
        label, w = self._split(y)
        lp, slope, curvature = self.base.derivatives(label, f)
        kept = w > 0
        return jnp.where(kept, w * lp, 0.0), jnp.where(kept, w * slope, 0.0), jnp.where(kept, w * curvature, 0.0)

    def log_prob_scale(self, y, f, log_prob):
        return jnp.abs(log_prob)

    def transitions(self, y):
        return self.base.transitions(self._split(y)[0])

    def tilted_moments(self, y, mean, var):
        """Power EP's tilted moments of p(y|f)^w N(f|mean, var): the base's closed form for w = 1, the cavity's
        for w = 0, else :func:`tilted_by_quadrature` (against adaptive quadrature, probit and logistic, w in
        {0.3, 2, 4.5}, cavity means in [-20, 3], variances in [1e-3, 1e3]: log Z to 1e-9, the mean to 1e-8
        tilted standard deviations, the variance to 1e-8 relative; ``tests/test_weights.py``)."""
        label, w = self._split(y)
        exact = self.base.tilted_moments(label, mean, var)

        def log_lik(f):
            return jnp.where(w[:, None] > 0, w[:, None] * self.base.log_prob(label[:, None], f), 0.0)

        quad = tilted_by_quadrature(log_lik, lambda f: self.derivatives(y, f), self.base.transitions(label),
                                    mean, var)
        one, zero = w == 1, w == 0
        return (jnp.where(one, exact[0], jnp.where(zero, 0.0, quad[0])),
                jnp.where(one, exact[1], jnp.where(zero, mean, quad[1])),
                jnp.where(one, exact[2], jnp.where(zero, var, quad[2])))

    def expected_log_prob(self, y, mean, var):
        label, w = self._split(y)
        return jnp.where(w > 0, w * self.base.expected_log_prob(label, mean, var), 0.0)

    def predictive_probability(self, mean, var):
        return self.base.predictive_probability(mean, var)

    def parameter_checks(self, checks):
        self.base.parameter_checks(checks)

    @property
    def integrator(self):
        return self.base.integrator
