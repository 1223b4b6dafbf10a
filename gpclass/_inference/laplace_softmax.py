"""Laplace's method for multi-class GP classification with the softmax likelihood (GPML section 3.5).

The C latent functions have independent GP priors: K is block diagonal with
blocks K_c (one shared n x n matrix, or a (C, n, n) stack from
``gpc.kernels.PerClass``).  Latents are stored as F of shape (n, C), labels as
the 0/1 indicator matrix Y of shape (n, C).

Newton's method (eq. 3.39) needs (I + W K)^-1 with the non-diagonal
W = diag(pi) - Pi Pi^T (eq. 3.38).  W = S^T S with S = (I - P P^T) D^1/2
(``_times_s``), so eq. 3.27's identity holds with S in place of W^1/2 and each
Newton step solves with B = I + S K S^T, symmetric with eigenvalues >= 1, by
conjugate gradients: a product with B is one product with K, no
factorisation per step.  Section 3.5.1's factors are formed once, at the mode,
for log q (eq. 3.44) and for predictions:

    E_c = D_c^1/2 (I + D_c^1/2 K_c D_c^1/2)^-1 D_c^1/2,   D_c = diag(pi^c),
    (K + W^-1)^-1 = E - E R (sum_c E_c)^-1 R^T E            (eq. 3.47),

C Cholesky factorisations of n x n matrices and one more for sum_c E_c, never
a Cn x Cn factorisation.  The mode is differentiated by the implicit function
theorem, as in the binary case, and log|I + K W| by a hand-written reverse
mode from the same factors (``_half_log_det_bwd``).
"""

import functools

import jax
import jax.numpy as jnp

from .. import _dense as dense
from .._cg import conjugate_gradients
from .._iterate import tolerance
from .._linalg import factor_b, half_log_det, sqrt_precision
from .._types import Array, Float
from ._newton import mode_residual, newton


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


def _log_lik(Y, F):
    return jnp.sum(Y * F) - jnp.sum(jax.nn.logsumexp(F, axis=1))


def _psi(K, Y, a):
    """Psi(a) = y^T f - sum_i log sum_c exp f_i^c - 1/2 a^T f with f = K a  (eq. 3.35 without constants)."""
    F = class_matmul(K, a)
    return _log_lik(Y, F) - 0.5 * jnp.sum(a * F), F


def _times_s(p, V: Float[Array, "n C"]) -> Float[Array, "n C"]:
    """S V with S = (I - P P^T) D^1/2, p = sqrt(pi): per case, p_i * v_i - p_i (pi_i^T v_i).

    P = D^-1/2 Pi has orthonormal columns (p_i^T p_i = sum_c pi_i^c = 1), so
    I - P P^T is a projection and S^T S = D^1/2 (I - P P^T) D^1/2 = D - Pi Pi^T
    = W (eq. 3.38): S is a square root of W that needs no factorisation.
    """
    X = p * V
    return X - p * jnp.sum(p * X, axis=1, keepdims=True)


def _times_s_transpose(p, V: Float[Array, "n C"]) -> Float[Array, "n C"]:
    """S^T V = D^1/2 (I - P P^T) V."""
    return p * (V - p * jnp.sum(p * V, axis=1, keepdims=True))


def solve_i_plus_wk_cg(K, pi, v: Float[Array, "n C"], tol: float, max_steps: int):
    """(I + W K)^-1 v = v - S^T (I + S K S^T)^-1 S K v, the inner solve by conjugate gradients.

    The identity is eq. 3.27's with W^1/2 replaced by S (W = S^T S, see
    ``_times_s``); B = I + S K S^T is symmetric with every eigenvalue >= 1,
    and a product with it is one product with K (for a shared kernel, one
    n x n times n x C product for all classes), so no factorisation is
    formed.  Returns the solution and the number of CG products.
    """
    p = jnp.sqrt(pi)
    rhs = _times_s(p, class_matmul(K, v))
    x, steps, _ = conjugate_gradients(
        lambda u: u + _times_s(p, class_matmul(K, _times_s_transpose(p, u))), rhs, tol=tol, max_steps=max_steps
    )
    return v - _times_s_transpose(p, x), steps


def _newton_direction(K, Y, a, F):
    """The Newton step in a and the rounding level of Psi at a.

    Algorithm 3.3 (lines 4-13) computes the new point (I + W K)^-1 (W f + y - pi);
    the step to it is da = (I + W K)^-1 (y - pi - a), whose right-hand side is
    the gradient of Psi with respect to f (eq. 3.36): it vanishes at the mode,
    so an iterative solve's relative error shrinks with the step.
    """
    pi = jax.nn.softmax(F, axis=1)
    g = Y - pi - a
    da, _ = solve_i_plus_wk_cg(K, pi, g, tolerance(None, F.dtype, 1e-8, 1e-5), F.size)
    eps = jnp.finfo(F.dtype).eps
    log_lik_scale = jnp.sum(jnp.abs(Y * F)) + jnp.sum(jnp.abs(jax.nn.logsumexp(F, axis=1)))
    noise = eps * (log_lik_scale + jnp.sum((jnp.abs(Y - pi) + jnp.abs(a)) * class_matmul(jnp.abs(K), jnp.abs(a))))
    return da, noise


def _residual(K, Y, F):
    """The residual of F = K (Y - pi(F)) (``_newton.mode_residual``)."""
    g = Y - jax.nn.softmax(F, axis=1)
    return mode_residual(F, class_matmul(K, g), class_matmul(jnp.abs(K), jnp.abs(g)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def softmax_mode(method, K, Y, a0):
    """The posterior mode F^ (n, C), differentiable by the implicit function theorem.

    ``method`` carries the static Newton settings (tol, max_steps, max_halvings).
    Returns (F^, steps, status, a^, size of the last full Newton step).
    """
    F, a, steps, status, change = newton(
        lambda a: _psi(K, Y, a),
        lambda a, F: _newton_direction(K, Y, a, F),
        lambda F: _residual(K, Y, F),
        a0,
        tol=method.tol,
        residual_tol=method.residual_tol,
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
    u = (I + W K)^-1 F_bar, solved by conjugate gradients as a Newton step is.
    """
    K, Y, F = residuals
    pi = jax.nn.softmax(F, axis=1)
    u, _ = solve_i_plus_wk_cg(K, pi, cotangents[0], tolerance(None, F.dtype, 1e-12, 1e-6), F.size)
    _, vjp = jax.vjp(lambda K: class_matmul(K, Y - pi), K)
    (K_bar,) = vjp(u)
    return K_bar, jnp.zeros_like(Y), jnp.zeros_like(F)


softmax_mode.defvjp(_mode_fwd, _mode_bwd)


def softmax_log_marginal(Y, F, K, L, E, M):
    """log q(y|X) at the mode (eq. 3.44), from the factors of ``softmax_blocks`` at the mode.

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
    return _log_lik(Y, F) - 0.5 * jnp.sum((Y - pi) * F) - half_log_det_softmax(K, pi, L, E, M)


def half_log_det_softmax(K, pi, L, E, M) -> Float[Array, ""]:
    """1/2 log|I + K W(pi)| from the blocks at pi, with a hand-written reverse mode (see ``_half_log_det_bwd``).

    The blocks receive no cotangent (``stop_gradient``): the derivative flows
    to K and pi directly, and no reverse mode runs through the C + 1
    factorisations and 2 C triangular solves that formed them.
    """
    return _half_log_det(K, pi, *jax.lax.stop_gradient((L, E, M)))


@jax.custom_vjp
def _half_log_det(K, pi, L, E, M):
    return jnp.sum(jax.vmap(half_log_det)(L)) + half_log_det(M)


def _half_log_det_fwd(K, pi, L, E, M):
    return _half_log_det(K, pi, L, E, M), (K, pi, L, E, M)


def _stacked_solve(M, blocks):
    """M^-1 X_c for every block X_c of a (C, n, n) stack, as one triangular solve with C n right-hand sides."""
    C, n, _ = blocks.shape
    solved = dense.solve_triangular(M, blocks.transpose(1, 0, 2).reshape(n, C * n), lower=True)
    return solved.reshape(n, C, n).transpose(1, 0, 2)


def _half_log_det_bwd(residuals, g):
    """Reverse mode of Phi = 1/2 log|I + K W|: dPhi = 1/2 tr((I + K W)^-1 (dK W + K dW)).

    dK: the block-diagonal part of W (I + K W)^-1 = (K + W^-1)^-1, whose block
    c is E_c - E_c M^-1 E_c (eq. 3.47), so K_bar_c = 1/2 (E_c - G_c^T G_c) with
    G_c = L_M^-1 E_c (summed over classes for a shared K).

    dW: (I + K W)^-1 K = Sigma = (K^-1 + W)^-1, the covariance of q, and
    dW_i = diag(dpi_i) - dpi_i pi_i^T - pi_i dpi_i^T case by case, so
    pi_bar_i = 1/2 (diag(Sigma_ii) - 2 Sigma_ii pi_i) with the C x C blocks
    Sigma_ii^cc' = delta_cc' (K_c - K_c E_c K_c)_ii + (K_c E_c M^-1 E_c' K_c')_ii
    (eq. 3.47 again), the last term row by row from Z_c = L_M^-1 E_c K_c.
    """
    K, pi, L, E, M = residuals
    shared = K.ndim == 2
    G = _stacked_solve(M, E)
    EK = jnp.einsum("cij,jk->cik", E, K) if shared else jnp.einsum("cij,cjk->cik", E, K)
    Z = _stacked_solve(M, EK)
    prior_var = jnp.diagonal(K)[:, None] if shared else jnp.diagonal(K, axis1=1, axis2=2).T
    kek = jnp.einsum("ji,cji->ic", K, EK) if shared else jnp.einsum("cji,cji->ic", K, EK)
    sigma = jnp.einsum("cji,dji->icd", Z, Z) + jax.vmap(jnp.diag)(prior_var - kek)
    pi_bar = 0.5 * g * (jnp.diagonal(sigma, axis1=1, axis2=2) - 2.0 * jnp.einsum("icd,id->ic", sigma, pi))
    if shared:
        K_bar = 0.5 * g * (jnp.sum(E, axis=0) - jnp.einsum("cji,cjk->ik", G, G))
    else:
        K_bar = 0.5 * g * (E - jnp.einsum("cji,cjk->cik", G, G))
    return K_bar, pi_bar, jnp.zeros_like(L), jnp.zeros_like(E), jnp.zeros_like(M)


_half_log_det.defvjp(_half_log_det_fwd, _half_log_det_bwd)
