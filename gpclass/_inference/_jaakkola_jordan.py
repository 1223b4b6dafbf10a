"""The Jaakkola-Jordan bound's lambda(nu) and its derivative (Gibbs & MacKay eq. 11), shared by the lower and upper
bounds' code."""

import jax.numpy as jnp

from .._exceptions import GPClassError
from ..likelihoods import Logistic


def check_logistic(likelihood):
    """Jaakkola-Jordan bounds bound the logistic sigmoid: any other likelihood is an error."""
    if not isinstance(likelihood, Logistic):
        raise GPClassError(
            f"Jaakkola-Jordan bounds are bounds on the logistic sigmoid; got {type(likelihood).__name__}. "
            "Use gpc.likelihoods.Logistic()."
        )


def jj_lambda(nu):
    """lambda(nu) = (g(nu) - 1/2) / (2 nu) = tanh(nu/2) / (4 nu)  (Gibbs & MacKay eq. 11); 1/8 at nu = 0."""
    small = jnp.abs(nu) < 1e-4
    safe = jnp.where(small, 1.0, nu)
    return jnp.where(small, 0.125 - nu**2 / 96.0, jnp.tanh(0.5 * safe) / (4.0 * safe))


def jj_lambda_derivative(nu):
    """lambda'(nu) = (nu sech^2(nu/2) / 2 - tanh(nu/2)) / (4 nu^2), < 0 for nu > 0; -nu/48 + nu^3/240 near 0."""
    small = jnp.abs(nu) < 1e-3
    safe = jnp.where(small, 1.0, nu)
    t = jnp.tanh(0.5 * safe)
    return jnp.where(small, -nu / 48.0 + nu**3 / 240.0, (0.5 * safe * (1.0 - t**2) - t) / (4.0 * safe**2))
