"""The probit (cumulative Gaussian) likelihood."""

import jax.numpy as jnp
from jax.scipy.special import log_ndtr, ndtr
from jax.scipy.stats import norm

from ._base import AbstractLikelihood


class Probit(AbstractLikelihood):
    """p(y|f) = Phi(y f)  (GPML eq. 3.4 with the cumulative Gaussian).

    log Phi(z) uses ``log_ndtr`` (an asymptotic series keeps it finite for very
    negative z) and log1p(-Phi(-z)) for z > 0, which keeps full relative
    accuracy where log Phi(z) is tiny.  The ratio phi(z)/Phi(z) is formed in
    log space, so the derivatives stay accurate deep in both tails.
    """

    def log_prob(self, y, f):
        z = y * f
        positive = z > 0
        # Each branch sees only arguments where it is finite, so gradients stay finite too.
        upper = jnp.log1p(-ndtr(-jnp.where(positive, z, 1.0)))
        lower = log_ndtr(jnp.where(positive, -1.0, z))
        return jnp.where(positive, upper, lower)

    def derivatives(self, y, f):
        """GPML Table 3.1: d log p = y r, W = r (z + r) with z = y f and r = phi(z) / Phi(z)."""
        z = y * f
        log_p = self.log_prob(y, f)
        r = jnp.exp(norm.logpdf(z) - log_p)
        return log_p, y * r, r * (z + r)

    def tilted_moments(self, y, mean, var):
        """GPML eq. 3.58 with z = y mean / sqrt(1 + var) and r = N(z) / Phi(z) formed in log space."""
        scale = jnp.sqrt(1.0 + var)
        z = y * mean / scale
        log_z = self.log_prob(jnp.ones_like(z), z)
        r = jnp.exp(norm.logpdf(z) - log_z)
        tilted_mean = mean + y * var * r / scale
        tilted_var = var - var**2 * r * (z + r) / (1.0 + var)
        return log_z, tilted_mean, tilted_var

    def predictive_probability(self, mean, var):
        """Exact: int Phi(f) N(f|mean, var) df = Phi(mean / sqrt(1 + var))  (GPML eq. 3.82)."""
        return ndtr(mean / jnp.sqrt(1.0 + var))
