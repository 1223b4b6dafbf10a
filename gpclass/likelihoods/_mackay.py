"""MacKay's closed-form approximation to the averaged sigmoid."""

import jax
import jax.numpy as jnp


def mackay_probability(mean, var):
    """sigma(kappa(s^2) mean) with kappa(s^2) = (1 + pi s^2 / 8)^-1/2  (Gibbs & MacKay eq. 23; MacKay 1992).

    An approximation to int sigma(f) N(f|mean, s^2) df, accurate to about 0.02.
    """
    return jax.nn.sigmoid(mean / jnp.sqrt(1.0 + jnp.pi * var / 8.0))
