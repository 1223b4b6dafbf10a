"""The probit (cumulative Gaussian) likelihood."""

import jax.numpy as jnp
from jax.scipy.special import log_ndtr, ndtr

from ._base import AbstractLikelihood


class Probit(AbstractLikelihood):
    """p(y|f) = Phi(y f)  (GPML eq. 3.4 with the cumulative Gaussian).

    ``log_ndtr`` keeps log Phi(z) finite for very negative z (its asymptotic
    series), and its derivative phi(z)/Phi(z) is computed in log space, so the
    gradient and W stay accurate deep in the tail.
    """

    def log_prob(self, y, f):
        return log_ndtr(y * f)

    def predictive_probability(self, mean, var):
        """Exact: int Phi(f) N(f|mean, var) df = Phi(mean / sqrt(1 + var))  (GPML eq. 3.82)."""
        return ndtr(mean / jnp.sqrt(1.0 + var))
