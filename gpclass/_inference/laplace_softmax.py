"""Laplace's method for multi-class GP classification with the softmax likelihood (GPML section 3.5).

The C latent functions have independent GP priors: K is block diagonal with
blocks K_c (one shared n x n matrix, or a (C, n, n) stack from
``gpc.kernels.PerClass``).  Latents are stored as F of shape (n, C), labels as
the 0/1 indicator matrix Y of shape (n, C).

Newton's method (eq. 3.39) needs (K^-1 + W)^-1 with the non-diagonal
W = diag(pi) - Pi Pi^T (eq. 3.38).  Section 3.5.1 reduces it to C Cholesky
factorisations of n x n matrices and one more for sum_c E_c:

    E_c = D_c^1/2 (I + D_c^1/2 K_c D_c^1/2)^-1 D_c^1/2,   D_c = diag(pi^c),
    (K + W^-1)^-1 = E - E R (sum_c E_c)^-1 R^T E            (eq. 3.47),

never a Cn x Cn factorisation.  The mode is differentiated by the implicit
function theorem, as in the binary case.
"""

import functools

import jax
import jax.numpy as jnp

from .. import _dense as dense
from .._linalg import factor_b, half_log_det, sqrt_precision
from .._types import Array, Float
from ._newton import newton


def class_matmul(K: Float[Array, "n n"] | Float[Array, "C n n"], V: Float[Array, "n C"]) -> Float[Array, "n C"]:
    """The block-diagonal product K v: column c of the result is K_c v^c."""
    if K.ndim == 2:
        return K @ V
    return jnp.einsum("cij,jc->ic", K, V)


def softmax_blocks(K, pi: Float[Array, "n C"]):
    """The factors of Algorithm 3.3, lines 5-10: (L, E, M) with L (C, n, n), E (C, n, n), M (n, n).

    L_c = cholesky(I + D_c^1/2 K_c D_c^1/2), E_c = D_c^1/2 L_c^-T (L_c^-1 D_c^1/2),
    M = cholesky(sum_c E_c).  E_c is formed by two triangular solves, which on
    CPU is about a third faster than one solve and the product V^T V.
    """
    sqrt_d = sqrt_precision(pi)

    def per_class(K_c, s):
        L = factor_b(K_c, s)
        V = dense.solve_triangular(L, jnp.diag(s), lower=True)
        return L, s[:, None] * dense.solve_triangular(L, V, lower=True, trans=1)

    L, E = jax.vmap(per_class, in_axes=(0 if K.ndim == 3 else None, 1))(K, sqrt_d)
    M = dense.cholesky(jnp.sum(E, axis=0))
    return L, E, M


def solve_i_plus_wk_softmax(K, E, M, v: Float[Array, "n C"]) -> Float[Array, "n C"]:
    """(I + W K)^-1 v = v - E K v + E R (sum_c E_c)^-1 R^T E K v  (Algorithm 3.3, lines 12-13).

    With v = W f + y - pi it is the Newton update a = K^-1 f_new (eq. 3.39 via
    eqs. 3.45 and 3.47); with v a cotangent it is the adjoint solve at the mode.
    R^T sums over classes and R copies an n-vector to every class.
    """
    c = jnp.einsum("cij,jc->ic", E, class_matmul(K, v))
    shared = dense.cho_solve(M, jnp.sum(c, axis=1))
    return v - c + jnp.einsum("cij,j->ic", E, shared)


def _precision_times(pi, F):
    """W F with W = diag(pi) - Pi Pi^T (eq. 3.38), case by case: pi_i * (f_i - pi_i^T f_i)."""
    return pi * (F - jnp.sum(pi * F, axis=1, keepdims=True))


def _log_lik(Y, F):
    return jnp.sum(Y * F) - jnp.sum(jax.nn.logsumexp(F, axis=1))


def _psi(K, Y, a):
    """Psi(a) = y^T f - sum_i log sum_c exp f_i^c - 1/2 a^T f with f = K a  (eq. 3.35 without constants)."""
    F = class_matmul(K, a)
    return _log_lik(Y, F) - 0.5 * jnp.sum(a * F), F


def _newton_direction(K, Y, a, F):
    """The Newton step in a (Algorithm 3.3, lines 4-13) and the rounding level of Psi at a."""
    pi = jax.nn.softmax(F, axis=1)
    _, E, M = softmax_blocks(K, pi)
    b = _precision_times(pi, F) + Y - pi
    a_new = solve_i_plus_wk_softmax(K, E, M, b)
    eps = jnp.finfo(F.dtype).eps
    log_lik_scale = jnp.sum(jnp.abs(Y * F)) + jnp.sum(jnp.abs(jax.nn.logsumexp(F, axis=1)))
    noise = eps * (log_lik_scale + jnp.sum((jnp.abs(Y - pi) + jnp.abs(a)) * class_matmul(jnp.abs(K), jnp.abs(a))))
    return a_new - a, noise


def better_start(K, Y, a_init):
    """A warm start a_init unless f = 0 is better (as for the binary case)."""
    a_init = jnp.asarray(a_init, dtype=K.dtype)
    psi_init, _ = _psi(K, Y, a_init)
    psi_zero, _ = _psi(K, Y, jnp.zeros_like(a_init))
    return jnp.where(psi_init > psi_zero, a_init, jnp.zeros_like(a_init))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def softmax_mode(method, K, Y, a0):
    """The posterior mode F^ (n, C), differentiable by the implicit function theorem.

    ``method`` carries the static Newton settings (tol, max_steps, max_halvings).
    Returns (F^, steps, status, a^, size of the last full Newton step).
    """
    F, a, steps, status, change = newton(
        lambda a: _psi(K, Y, a),
        lambda a, F: _newton_direction(K, Y, a, F),
        a0,
        tol=method.tol,
        max_steps=method.max_steps,
        max_halvings=method.max_halvings,
    )
    return F, steps, status, a, change


def _mode_fwd(method, K, Y, a0):
    out = softmax_mode(method, K, Y, a0)
    return out, (K, Y, out[0])


def _mode_bwd(method, residuals, cotangents):
    """Adjoint of F^ = K (Y - pi(F^)) (eq. 3.36 at the maximum).

    With R(F, theta) = F - K (Y - pi(F)), dR/dF = I + K W, so the
    vector-Jacobian product is theta_bar = (d(K (Y - pi))/d theta)^T u with
    u = (I + W K)^-1 F_bar, solved with the same blocks as a Newton step.
    """
    K, Y, F = residuals
    pi = jax.nn.softmax(F, axis=1)
    _, E, M = softmax_blocks(K, pi)
    u = solve_i_plus_wk_softmax(K, E, M, cotangents[0])
    _, vjp = jax.vjp(lambda K: class_matmul(K, Y - pi), K)
    (K_bar,) = vjp(u)
    return K_bar, jnp.zeros_like(Y), jnp.zeros_like(F)


softmax_mode.defvjp(_mode_fwd, _mode_bwd)


def softmax_log_marginal(Y, F, L, M):
    """log q(y|X) at the mode (eq. 3.44), from the factors of the last Newton step.

    log|I + W^1/2 K W^1/2| = log|I + K W| = sum_c log|B_c| + log|sum_c E_c|, so

        log q = y^T f - sum_i log sum_c exp f_i^c - 1/2 a^T f - sum_c sum_i log L_c,ii - sum_i log M_ii,

    with a = K^-1 f = y - pi.  Derivation: I + K W = (I + K D) - K Pi Pi^T, and by
    the determinant lemma |I + K W| = |I + K D| |I - Pi^T (I + K D)^-1 K Pi|;
    the first factor is prod_c |B_c|, and since Pi_c = D_c, sum_c D_c = I and
    D_c (K_c^-1 + D_c)^-1 D_c = D_c - E_c, the second is |sum_c E_c|.
    (Algorithm 3.3, line 16, as printed omits log|M| and has the wrong sign on
    the log-sum-exp term; eq. 3.44 is right.)
    """
    pi = jax.nn.softmax(F, axis=1)
    half_log_det_blocks = jnp.sum(jax.vmap(half_log_det)(L))
    return _log_lik(Y, F) - 0.5 * jnp.sum((Y - pi) * F) - half_log_det_blocks - half_log_det(M)
