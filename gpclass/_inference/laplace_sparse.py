"""Laplace's method under a sparse prior K~ = Q + s diag(g) (GPML ``infLaplace`` with ``apxSparse``).

The mode of Psi(a) = log p(y|K~ a) - 1/2 a^T K~ a is found by the same
safeguarded Newton iteration as the dense method (GPML Algorithm 3.1), each
step a Woodbury solve in O(n m^2):

    a_new = (I + W K~)^-1 b,   b = W f + grad log p(y|f),

taken as the step a_new - a = (I + W K~)^-1 (grad log p(y|f) - a).

log q(y|X) = log p(y|f^) - 1/2 a^T f^ - ldB2 with GPML's power-EP log
determinant ldB2 (``SparseFactor.power_log_det``): 1/2 log|I + W^1/2 K~ W^1/2|
for FITC, plus the trace term 1/2 tr(W (K - Q)) for VFE.  Gradients flow
through the mode by the implicit function theorem, as in ``laplace.py``.
"""

import functools

import jax
import jax.numpy as jnp
from jax import lax

from .._sparse import LowRankCovariance
from ._newton import better_start, mode_residual, newton
from ._posterior import SolverInfo, SparseSolution


def solve_sparse_laplace(method, op: LowRankCovariance, likelihood, y, init=None) -> SparseSolution:
    """The sparse Laplace approximation: the mode, log q(y|X) and the predictive form."""
    psi = lambda a: _psi(op, likelihood, y, a)
    a0 = jnp.zeros(op.shape[0], op.dtype) if init is None else better_start(psi, init, op.dtype)
    f, num_steps, status, a, max_change = _mode(method, op, likelihood, y, a0)
    log_lik, grad, W = likelihood.derivatives(y, f)
    factor = op.factor(W)
    # At the mode a = K~^-1 f^ = grad log p(y|f^) (GPML eq. 3.17), as in the dense method.
    log_marginal = jnp.sum(log_lik) - 0.5 * jnp.dot(grad, f) - factor.power_log_det(op)
    return SparseSolution(
        alpha=op.inducing_weights(grad),
        chol_uu=op.chol_uu,
        chol_u=factor.chol,
        mean=f,
        log_marginal=log_marginal,
        info=SolverInfo(num_steps=num_steps, status=status, max_change=max_change),
        warm_start=lax.stop_gradient(a),
    )


def _psi(op, likelihood, y, a):
    f = op.mv(a)
    return jnp.sum(likelihood.log_prob(y, f)) - 0.5 * jnp.dot(a, f), f


def _direction(op, likelihood, y, a, f):
    """The Newton step in a and the rounding level of Psi (as ``laplace._newton_direction``)."""
    log_lik, grad, W = likelihood.derivatives(y, f)
    # GPML's a_new = (I + W K~)^-1 (W f + grad) as the step a_new - a = (I + W K~)^-1 (grad - a) (K~ a = f):
    # its right-hand side, the gradient of Psi in f, vanishes at the mode, instead of cancelling against a.
    da = op.factor(W).solve_i_plus_wk(op, grad - a)
    noise = jnp.finfo(op.dtype).eps * (
        jnp.sum(jnp.abs(log_lik)) + jnp.sum((jnp.abs(grad) + jnp.abs(a)) * jnp.abs(f)) + jnp.dot(a * a, op.diagonal())
    )
    return da, noise


def _residual(op, abs_phi, likelihood, y, f):
    """The residual of f = K~ grad log p(y|f) (``_newton.mode_residual``); ``abs_phi`` is |Phi|."""
    grad = likelihood.derivatives(y, f)[1]
    return mode_residual(f, op.mv(grad), op.abs_mv(jnp.abs(grad), abs_phi))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _mode(method, op, likelihood, y, a0):
    """f^(K~, likelihood), differentiable by the implicit function theorem (no Newton step is stored)."""
    abs_phi = jnp.abs(op.Phi)  # formed once, not in every step
    f, a, steps, status, change = newton(
        lambda a: _psi(op, likelihood, y, a),
        lambda a, f: _direction(op, likelihood, y, a, f),
        lambda f: _residual(op, abs_phi, likelihood, y, f),
        a0,
        tol=method.tol,
        residual_tol=method.residual_tol,
        max_steps=method.max_steps,
        max_halvings=method.max_halvings,
    )
    return f, steps, status, a, change


def _mode_fwd(method, op, likelihood, y, a0):
    out = _mode(method, op, likelihood, y, a0)
    return out, (op, likelihood, y, out[0])


def _mode_bwd(method, residuals, cotangents):
    """f^ = K~ grad log p(y|f^): u = (I + W K~)^-1 f_bar, theta_bar = (d(K~ grad log p)/d theta)^T u."""
    op, likelihood, y, f = residuals
    _, _, W = likelihood.derivatives(y, f)
    u = op.factor(W).solve_i_plus_wk(op, cotangents[0])
    _, vjp = jax.vjp(lambda op, likelihood: op.mv(likelihood.derivatives(y, f)[1]), op, likelihood)
    op_bar, likelihood_bar = vjp(u)
    return op_bar, likelihood_bar, jnp.zeros_like(y), jnp.zeros_like(f)


_mode.defvjp(_mode_fwd, _mode_bwd)
