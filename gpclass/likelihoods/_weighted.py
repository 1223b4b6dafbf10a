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
  itself; for any other w (Phi(z)^w has no closed form) quadrature
  (:func:`gpclass.likelihoods._tilted_quadrature.tilted_by_quadrature`).  Unlike
  Laplace and KL, EP with w = 2 is *not* EP with two copies of the case (two sites, each matched to its own
  tilted distribution): on one case EP with w = 2 is exact, two sites are not.
"""

import jax.numpy as jnp

from ._base import AbstractLikelihood
from ._tilted_quadrature import select_moments, tilted_by_quadrature


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

    @property
    def finite_expected_log_prob(self):
        return self.base.finite_expected_log_prob

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
        cavity = (jnp.zeros_like(mean), mean, var)
        return select_moments([(w == 1, exact), (w == 0, cavity)], quad)

    def expected_log_prob(self, y, mean, var):
        label, w = self._split(y)
        return jnp.where(w > 0, w * self.base.expected_log_prob(label, mean, var), 0.0)

    def expected_log_prob_derivatives(self, y, mean, var):
        label, w = self._split(y)
        return tuple(jnp.where(w > 0, w * d, 0.0) for d in self.base.expected_log_prob_derivatives(label, mean, var))

    def predictive_probability(self, mean, var):
        return self.base.predictive_probability(mean, var)

    def mackay_probability(self, mean, var):
        return self.base.mackay_probability(mean, var)

    def parameter_checks(self, checks):
        self.base.parameter_checks(checks)

    @property
    def integrator(self):
        return self.base.integrator
