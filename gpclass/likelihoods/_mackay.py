"""MacKay's closed-form approximation to the averaged sigmoid."""

import jax
import jax.numpy as jnp


def mackay_probability(mean, var):
    """sigma(kappa(s^2) mean) with kappa(s^2) = (1 + pi s^2 / 8)^-1/2  (Gibbs & MacKay eq. 23; MacKay 1992).

    An approximation to int sigma(f) N(f|mean, s^2) df, accurate to about 0.02.

    Example::

        >>> p = gpc.likelihoods.mackay_probability(jnp.array([0.0, 2.0, 2.0]), jnp.array([1.0, 1.0, 0.0]))
        >>> print(np.asarray(p).round(3))  # at variance 0 it is sigma(mean) itself
        [0.5   0.845 0.881]
    """
    return jax.nn.sigmoid(mean / jnp.sqrt(1.0 + jnp.pi * var / 8.0))
