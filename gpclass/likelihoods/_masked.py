"""A binary likelihood with some cases left out: the padding of ragged data sets batched together.

``gpc.infer(..., mask=m)`` and ``gpc.fit(..., mask=m)`` set the label of every
case with ``m == False`` to the likelihood's ``left_out_label`` (0 for the binary likelihoods, whose checked
labels are otherwise +-1; -1 for ``Ordinal``, whose labels are 0..K-1) and wrap the
likelihood in :class:`Masked`, for which a case with that label has p(y|f) = 1:
log p = 0, no slope, no curvature (W = 0), tilted moments equal to the cavity's
(so EP's site stays at zero precision), and no expected log-likelihood.  Such
a case changes neither the posterior of the other cases nor log q(y|X): its
latent value is marginalised out.  Being keyed on the label, not on a position,
it survives EP's per-site slicing and ``vmap``.
"""

import jax.numpy as jnp

from ._base import AbstractLikelihood


class Masked(AbstractLikelihood):
    """``base`` for its labels; the constant likelihood 1 for ``base.left_out_label`` (a left-out case)."""

    base: AbstractLikelihood

    @property
    def left_out_label(self):
        return self.base.left_out_label

    def _kept(self, y):
        return y != self.base.left_out_label

    @property
    def log_concave(self):
        return self.base.log_concave

    @property
    def finite_expected_log_prob(self):
        return self.base.finite_expected_log_prob

    @property
    def closed_form_tilted(self):
        return self.base.closed_form_tilted

    def log_prob(self, y, f):
        kept = self._kept(y)
        return jnp.where(kept, self.base.log_prob(jnp.where(kept, y, 1.0), f), 0.0)

    def derivatives(self, y, f):
        kept = self._kept(y)
        lp, slope, w = self.base.derivatives(jnp.where(kept, y, 1.0), f)
        return jnp.where(kept, lp, 0.0), jnp.where(kept, slope, 0.0), jnp.where(kept, w, 0.0)

    def tilted_moments(self, y, mean, var):
        kept = self._kept(y)
        log_z, m_hat, v_hat = self.base.tilted_moments(jnp.where(kept, y, 1.0), mean, var)
        return jnp.where(kept, log_z, 0.0), jnp.where(kept, m_hat, mean), jnp.where(kept, v_hat, var)

    def expected_log_prob(self, y, mean, var):
        kept = self._kept(y)
        return jnp.where(kept, self.base.expected_log_prob(jnp.where(kept, y, 1.0), mean, var), 0.0)

    def expected_log_prob_derivatives(self, y, mean, var):
        kept = self._kept(y)
        derivatives = self.base.expected_log_prob_derivatives(jnp.where(kept, y, 1.0), mean, var)
        return tuple(jnp.where(kept, d, 0.0) for d in derivatives)

    def predictive_probability(self, mean, var):
        return self.base.predictive_probability(mean, var)

    def mackay_probability(self, mean, var):
        return self.base.mackay_probability(mean, var)
