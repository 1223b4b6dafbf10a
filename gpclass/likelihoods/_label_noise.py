"""Label noise: a fraction of labels flipped at random (Kim & Ghahramani 2006, eq. 9)."""

import equinox as eqx
import jax.numpy as jnp

from .._types import Array, Float
from ._base import AbstractLikelihood


class LabelNoise(AbstractLikelihood):
    """p(y|f) = epsilon + (1 - 2 epsilon) p_base(y|f)  (Kim & Ghahramani eq. 9 with p_base = Phi).

    ``epsilon`` in [0, 1/2) is the label-flip rate and a differentiable
    hyperparameter.  The likelihood is not log-concave (W = -d^2 log p / df^2
    can be negative), so Laplace's method refuses it; EP handles it exactly
    through the closed-form mixture moments of :meth:`tilted_moments`.
    """

    base: AbstractLikelihood
    epsilon: Float[Array, ""] = eqx.field(converter=jnp.asarray, default=0.05)
    log_concave = False

    def log_prob(self, y, f):
        return jnp.logaddexp(jnp.log(self.epsilon), jnp.log1p(-2.0 * self.epsilon) + self.base.log_prob(y, f))

    def tilted_moments(self, y, mean, var):
        """The tilted distribution is the mixture eps N(mean, var) + (1 - 2 eps) p_base(y|f) N(mean, var)."""
        log_zb, mean_b, var_b = self.base.tilted_moments(y, mean, var)
        log_a = jnp.log(self.epsilon) + jnp.zeros_like(log_zb)
        log_b = jnp.log1p(-2.0 * self.epsilon) + log_zb
        log_z = jnp.logaddexp(log_a, log_b)
        pa, pb = jnp.exp(log_a - log_z), jnp.exp(log_b - log_z)
        tilted_mean = pa * mean + pb * mean_b
        tilted_var = pa * (var + (mean - tilted_mean) ** 2) + pb * (var_b + (mean_b - tilted_mean) ** 2)
        return log_z, tilted_mean, tilted_var

    def predictive_probability(self, mean, var):
        return self.epsilon + (1.0 - 2.0 * self.epsilon) * self.base.predictive_probability(mean, var)
