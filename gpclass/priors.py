"""Log densities of hyperpriors for :func:`gpclass.fit`'s ``log_prior``."""

import jax.numpy as jnp
from jax.scipy.special import gammaln

__all__ = ["log_gamma"]


def log_gamma(x, shape, rate):
    """Sum of log Gamma(x | shape, rate) = shape log rate - log Gamma(shape) + (shape - 1) log x - rate x.

    Gibbs & MacKay (2000, section 5) put gamma priors on the length scales and
    signal variance.  Note that :func:`gpclass.fit` optimises log parameters
    and adds this density as given (a MAP estimate for the parameter with
    this prior, not for its logarithm).

    Example: ``gpc.fit(method, kernel, likelihood, X, y, log_prior=log_prior)`` adds such a function of the
    kernel and likelihood to its objective::

        >>> round(float(gpc.priors.log_gamma(1.0, shape=2.0, rate=1.0)), 6)  # log(1 * e^-1)
        -1.0
        >>> def log_prior(kernel, likelihood):  # gamma priors on the length scales (Gibbs & MacKay)
        ...     return gpc.priors.log_gamma(kernel.lengthscale, shape=2.0, rate=1.0)
        >>> round(float(log_prior(gpc.kernels.SquaredExponential(lengthscale=jnp.ones(3)), None)), 6)
        -3.0
    """
    x = jnp.asarray(x)
    return jnp.sum(shape * jnp.log(rate) - gammaln(shape) + (shape - 1.0) * jnp.log(x) - rate * x)
