"""The exact prior's factorisation for the softmax's block-diagonal W (GPML section 3.5, Algorithm 3.3).

The C latent functions have independent GP priors: K is block diagonal with
blocks K_c (one shared n x n matrix, a :class:`~gpclass._covariance.DenseCovariance`,
or a (C, n, n) stack, a ``PerClassCovariance``).  Latents are (n, C) arrays and W
= diag(pi) - Pi Pi^T (eq. 3.38), held as pi (n, C).

pi need not sum to one per case: W_i = diag(pi_i) - pi_i pi_i^T / s_i with s_i = sum_c pi_i^c covers the
softmax's W times a case weight w_i (pi = w softmax(f), s = w) and nested EP's site precisions
(``_inference/ep_classes.py``).  Eq. 3.47 holds unchanged (the s_i cancel), and
log|I + K W| = sum_c log|B_c| + log|sum_c E_c| - sum_i log s_i.  A case with s_i = 0 (weight 0) has W_i = 0
and a zero row and column in sum_c E_c: M factorises sum_c E_c plus 1 at that diagonal entry, which leaves
E R M^-1 R^T E and the log-determinant (without its log s_i) unchanged, since E R is zero there.

Newton's steps (``class_solver``) solve with I + W K by conjugate gradients:
W = S^T S with S = (I - q q^T) D^1/2 (``_times_s``), so eq. 3.27's identity
holds with S in place of W^1/2 and B = I + S K S^T, symmetric with eigenvalues
>= 1, is applied by one product with K, with no factorisation per step.
Section 3.5.1's factors are formed once, at the mode (``class_factor``), for
log q (eq. 3.44), the adjoint of the mode and predictions:

    E_c = D_c^1/2 (I + D_c^1/2 K_c D_c^1/2)^-1 D_c^1/2,   D_c = diag(pi^c),
    (K + W^-1)^-1 = E - E R (sum_c E_c)^-1 R^T E            (eq. 3.47),

C Cholesky factorisations of n x n matrices and one more for sum_c E_c, never
a Cn x Cn factorisation; log|I + K W| has a hand-written reverse mode from the
same factors (``_half_log_det_bwd``).
"""

import jax
import jax.numpy as jnp

from .. import _dense as dense
from .._cg import conjugate_gradients
from .._iterate import tolerance
from .._linalg import factor_b, half_log_det, recomputed_in_reverse, sqrt_precision
from .._types import Array, Float
from ._base import AbstractFactor, AbstractNewtonSolve


def softmax_blocks(K, pi: Float[Array, "n C"]):
    """The factors of Algorithm 3.3, lines 5-10: (L, E, M) with L (C, n, n), E (C, n, n), M (n, n).

    L_c = cholesky(I + D_c^1/2 K_c D_c^1/2), E_c = D_c^1/2 L_c^-T (L_c^-1 D_c^1/2),
    M = cholesky(sum_c E_c).  E_c is formed by two triangular solves, which on
    CPU is faster than one solve and the product V^T V.
    """
    sqrt_d = sqrt_precision(pi)

    def per_class(K_c, s):
        L = factor_b(K_c, s)
        V = dense.solve_triangular(L, jnp.diag(s), lower=True)
        return L, s[:, None] * dense.solve_triangular(L, V, lower=True, trans=1)

    L, E = jax.vmap(per_class, in_axes=(0 if K.ndim == 3 else None, 1))(K, sqrt_d)
    left_out = jnp.sum(pi, axis=1) <= 0.0  # W_i = 0 (module docstring)
    M = dense.cholesky(jnp.sum(E, axis=0) + jnp.diag(left_out.astype(E.dtype)))
    return L, E, M


class ClassSolver(AbstractNewtonSolve):
    """(I + W K)^-1 by conjugate gradients at pi (module docstring): what a Newton step needs, no factorisation."""

    pi: Float[Array, "n C"]

    def solve_i_plus_wk(self, op, v: Float[Array, "n C"]) -> Float[Array, "n C"]:
        """(I + W K)^-1 v = v - S^T (I + S K S^T)^-1 S K v, the inner solve by conjugate gradients.

        The identity is eq. 3.27's with W^1/2 replaced by S (W = S^T S, see ``_times_s``); a product
        with B = I + S K S^T is one product with K (for a shared kernel, one n x n times n x C product
        for all classes).  A Newton step's right-hand side vanishes at the mode, so the solve's relative
        tolerance (1e-8 in float64, 1e-5 in float32) shrinks its error with the step.
        """
        p, q = _root_and_direction(self.pi)
        rhs = _times_s(p, q, op.mv(v))
        x, _, _ = conjugate_gradients(lambda u: u + _times_s(p, q, op.mv(_times_s_transpose(p, q, u))), rhs,
                                      tol=tolerance(None, v.dtype, 1e-8, 1e-5), max_steps=v.size)
        return v - _times_s_transpose(p, q, x)


class ClassFactor(AbstractFactor):
    """The blocks of Algorithm 3.3 at pi: L_c, E_c (C x n x n) and M (n x n) (``softmax_blocks``)."""

    pi: Float[Array, "n C"]
    L: Float[Array, "C n n"]
    E: Float[Array, "C n n"]
    M: Float[Array, "n n"]

    def solve_i_plus_wk(self, op, v: Float[Array, "n C"]) -> Float[Array, "n C"]:
        """(I + W K)^-1 v = v - P K v, P = (K + W^-1)^-1 = E - E R M^-T M^-1 R^T E (eq. 3.47; Algorithm 3.3,
        lines 11-13, with b = v): exact, O(C n^2)."""
        c = jnp.einsum("cij,jc->ic", self.E, op.mv(v))  # E_c (K v)_c
        s = dense.cho_solve(self.M, jnp.sum(c, axis=1))
        return v - c + jnp.einsum("cij,j->ic", self.E, s)

    def power_log_det(self, op) -> Float[Array, ""]:
        """1/2 log|I + K W| from the blocks, its derivative flowing to K and pi directly (``half_log_det_softmax``)."""
        return half_log_det_softmax(op.K, self.pi, self.L, self.E, self.M)


def class_factor(K, pi: Float[Array, "n C"]) -> ClassFactor:
    """The blocks at pi, differentiable in K and pi."""
    return ClassFactor(pi, *softmax_blocks(K, pi))


def class_factor_given(K, pi: Float[Array, "n C"], factor: ClassFactor) -> ClassFactor:
    """``class_factor(K, pi)`` whose values are ``factor``'s (computed at the mode): formed again, differentiably,
    only in reverse mode and only when something differentiated depends on the blocks (``recomputed_in_reverse``)."""
    blocks = recomputed_in_reverse(softmax_blocks, (factor.L, factor.E, factor.M), K, pi)
    return ClassFactor(pi, *blocks)


def case_totals(pi: Float[Array, "n C"]) -> Float[Array, " n"]:
    """s_i = sum_c pi_i^c, with 1 where it is 0 (a case of weight 0, W_i = 0): safe to divide by and log."""
    total = jnp.sum(pi, axis=1)
    return jnp.where(total > 0.0, total, 1.0)


def _root_and_direction(pi):
    """p = sqrt(pi) and q = p / sqrt(s): the unit vector of each case (zero where s = 0) for ``_times_s``."""
    p = sqrt_precision(pi)
    return p, p / jnp.sqrt(case_totals(pi))[:, None]


def _times_s(p, q, V: Float[Array, "n C"]) -> Float[Array, "n C"]:
    """S V with S = (I - q q^T) D^1/2, p = sqrt(pi), q = p / sqrt(s): per case, p_i * v_i - q_i (q_i^T (p_i * v_i)).

    q_i is a unit vector (or zero), so I - q q^T is a projection and S^T S = D^1/2 (I - q q^T) D^1/2
    = D - pi pi^T / s = W (eq. 3.38, where s = 1): S is a square root of W that needs no factorisation.
    """
    X = p * V
    return X - q * jnp.sum(q * X, axis=1, keepdims=True)


def _times_s_transpose(p, q, V: Float[Array, "n C"]) -> Float[Array, "n C"]:
    """S^T V = D^1/2 (I - q q^T) V."""
    return p * (V - q * jnp.sum(q * V, axis=1, keepdims=True))


def half_log_det_softmax(K, pi, L, E, M) -> Float[Array, ""]:
    """1/2 log|I + K W(pi)| from the blocks at pi, with a hand-written reverse mode (see ``_half_log_det_bwd``):
    1/2 (sum_c log|B_c| + log|sum_c E_c| - sum_i log s_i) (module docstring).

    The blocks receive no cotangent (``stop_gradient``): the derivative flows
    to K and pi directly, and no reverse mode runs through the C + 1
    factorisations and 2 C triangular solves that formed them.
    """
    return _half_log_det(K, pi, *jax.lax.stop_gradient((L, E, M)))


@jax.custom_vjp
def _half_log_det(K, pi, L, E, M):
    return jnp.sum(jax.vmap(half_log_det)(L)) + half_log_det(M) - 0.5 * jnp.sum(jnp.log(case_totals(pi)))


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
    dW_i = diag(dpi_i) - (dpi_i pi_i^T + pi_i dpi_i^T) / s_i + pi_i pi_i^T ds_i / s_i^2 case by case
    (ds_i = sum_c dpi_i^c), so pi_bar_i = 1/2 (diag(Sigma_ii) - 2 Sigma_ii pi_i / s_i + pi_i^T Sigma_ii pi_i /
    s_i^2) (at s_i = 1, GPML's 1/2 (diag(Sigma_ii) - 2 Sigma_ii pi_i) plus a constant that the softmax's dpi_i,
    summing to 0, ignores) with the C x C blocks
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
    s = case_totals(pi)[:, None]
    sigma_pi = jnp.einsum("icd,id->ic", sigma, pi) / s
    pi_bar = 0.5 * g * (jnp.diagonal(sigma, axis1=1, axis2=2) - 2.0 * sigma_pi
                        + jnp.sum(pi * sigma_pi, axis=1, keepdims=True) / s)
    if shared:
        K_bar = 0.5 * g * (jnp.sum(E, axis=0) - jnp.einsum("cji,cjk->ik", G, G))
    else:
        K_bar = 0.5 * g * (E - jnp.einsum("cji,cjk->cik", G, G))
    return K_bar, pi_bar, jnp.zeros_like(L), jnp.zeros_like(E), jnp.zeros_like(M)


_half_log_det.defvjp(_half_log_det_fwd, _half_log_det_bwd)
