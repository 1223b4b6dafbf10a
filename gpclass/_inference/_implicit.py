"""Converged fixed points differentiated by the implicit function theorem: the one adjoint of the site methods.

EP, KL and the Jaakkola-Jordan lower bound differentiate their log marginal
likelihood (or bound) with their converged parameters held fixed, which the
envelope theorem (or the stationarity of log Z_EP) makes exact.  Their
posterior (predictions), and log Z_EP of a likelihood that is not log-concave,
depend on those parameters' own derivative: at the fixed point
p = T(p; theta), dp = (I - dT/dp)^-1 dT.  Reverse mode solves the transposed
system only when the parameters receive a cotangent (a custom VJP with
symbolic zeros), with the method's description of I - dT/dp
(``_linear_solve``: LU where the prior is a matrix, GMRES where it is not).
Without this the gradient of a prediction missed that term (10-40 % off,
measured on 60-case pima).  Laplace has its own adjoint at its mode (``laplace._mode``).
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax

from .._symbolic_zeros import instantiated, primal_values
from ._linear_solve import Krylov, solve

# The adjoint's GMRES under a sparse prior: restarted every ``restart`` products (the method's krylov_steps), to a
# relative residual of 1e-10, at most 20 restarts.
ADJOINT_RESTARTS = 20
ADJOINT_TOL = 1e-10


def implicit_fixed_point(system, params, converged, prior, likelihood, y, krylov_steps: int):
    """``params``, converged to p = T(p; prior, likelihood), differentiable in the prior and the likelihood.

    ``system(prior, likelihood, y, params) -> (T(p), I - dT/dp)``: T(p) a tree like ``params``, I - dT/dp a
    :class:`~gpclass._inference._linear_solve.LinearMap`.  Reverse mode solves (I - dT/dp)^T lambda = p_bar
    and pulls lambda back through T, only when the parameters receive a cotangent (symbolic zeros otherwise:
    log q alone, held fixed by the envelope theorem, costs nothing).  An unconverged solve gets lambda = p_bar
    (its gradient is meaningless, and gpc.fit discards it).
    """
    return _implicit(system, krylov_steps, lax.stop_gradient(params), converged, prior, likelihood, y)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _implicit(system, krylov_steps, params, converged, prior, likelihood, y):
    return params


def _implicit_fwd(system, krylov_steps, params, converged, prior, likelihood, y):
    params, converged, prior, likelihood, y = primal_values((params, converged, prior, likelihood, y))
    return params, (params, converged, prior, likelihood, y)


def _implicit_bwd(system, krylov_steps, residuals, cotangent):
    params, converged, prior, likelihood, y = residuals
    p_bar = instantiated(cotangent, params)
    if p_bar is None:
        return None, None, None, None, None
    _, i_minus_j = system(prior, likelihood, y, params)
    lam = solve(i_minus_j, p_bar, Krylov(krylov_steps, ADJOINT_RESTARTS, ADJOINT_TOL), transpose=True)
    lam = jax.tree.map(lambda a, b: jnp.where(converged, a, b), lam, p_bar)
    _, pull = jax.vjp(lambda prior, likelihood: system(prior, likelihood, y, params)[0], prior, likelihood)
    prior_bar, likelihood_bar = pull(lam)
    return None, None, prior_bar, likelihood_bar, None


_implicit.defvjp(_implicit_fwd, _implicit_bwd, symbolic_zeros=True)
