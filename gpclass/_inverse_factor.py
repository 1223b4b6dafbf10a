"""The inverse L^-1 of the Cholesky factor L of a symmetric positive definite A, by recursive halving: matrix
products that XLA runs, and LAPACK only on diagonal blocks of at most ``LEAF`` rows.

    A = [[A11, A21^T], [A21, A22]]:   L11 = chol(A11),  L21 = A21 L11^-T,  L22 = chol(A22 - L21 L21^T),
                                      (L^-1)_21 = -L22^-1 L21 L11^-1

(the block Cholesky factorisation and the inverse of a block triangular matrix, Golub & Van Loan, Matrix
Computations, 4th ed., sec. 4.2.9), applied to each diagonal block in turn down to ``LEAF`` rows.

L21 = A21 L11^-T is not the product with the whole L11^-1, whose eps cond(L11) error the Schur complement would
inherit (V A V^T = I to 1.7e-8 at m = 300, cond(A) = 8e7, against LAPACK's 1.3e-9), but block forward
substitution through L11's halving (:func:`_solve_lower_transposed`): products with L11's blocks below the
diagonal, and on diagonal blocks of at most ``SOLVE_BLOCK`` rows the product with their inverse (a diagonal block
of L11^-1) and one step of iterative refinement, X += (B - X L^T) L^-T (``tests/test_inverse_factor.py``: V A V^T = I
as closely as LAPACK's).  That is about (1 + 5 SOLVE_BLOCK / k) r k^2 flops for the r x k block (1.4-2.3 r k^2 at
m = 300-1000), where the product with L11^-1 and its refinement on the whole block took 6 r k^2: the factorisation
at m = 500 in 0.87x the time, at m = 1000 0.76x.

Why not LAPACK on the whole matrix: on the CPU jaxlib runs a factorisation or a triangular solve through SciPy's
BLAS (OpenBLAS in SciPy's wheels), which spreads a large call over its own threads, one per core.  After the call
those threads keep spinning for more work, and the matrix products XLA runs next, on XLA's own threads, share the
cores with them.  In a training step that alternates the two (SVGP: a factorisation of K_zz, triangular solves,
products with the batch) the products then ran at about half their speed: ``benchmarks/README.md``
(``before_after.py``, SVGP workloads), and FITC-EP and VFE-KL at n = 20,000, m = 100 took 1.5-1.8x as long.
On blocks of at most ``LEAF`` rows OpenBLAS stays on the calling thread (measured in the SVGP step at m = 500:
leaves of 16 to 28 rows ran equally fast, leaves of 32 rows took 1.8x as long), so this program runs on XLA's
threads alone; on a GPU the products are the device's and the leaves its solver's.  The recursion is unrolled when
the program is traced: its size, and the compile time, grow with the number of leaves, m / LEAF (each leaf of
``LEAF`` rows but the last).

The price: a solve by L^-1 is a matrix product, 2 m^2 k flops where a triangular solve takes m^2 k, and it
is not backward stable: x = L^-1 b carries errors of about eps cond(L) relative.  Its users: SVGP's training in
float64 (K_zz jittered: cond(L) = cond(K_zz)^(1/2) <= (m / jitter)^(1/2); float32 and predictions keep LAPACK's
triangular solves), and the sparse priors' m x m factors (``gpc.Sparse``, ``_covariance.low_rank``), which were
applied through explicit inverses already.
"""

import jax
import jax.numpy as jnp

from . import _dense as dense
from ._triangular_products import block_lower, lower_times_lower, transposed_lower_times_lower
from ._types import Array, Float

LEAF = 24  # the most rows of a diagonal block that LAPACK factorises (module docstring)
# The most rows of a diagonal block that the block substitution for L21 applies by its inverse with one step of
# refinement (module docstring): at m = 300-1000, 48 and 72 were the fastest, 24 and 144 slower, all as accurate.
SOLVE_BLOCK = 48  # at least LEAF: the halving splits at multiples of LEAF, so a smaller block would never end


@jax.custom_vjp
def inverse_factor(A: Float[Array, "m m"]) -> Float[Array, "m m"]:
    """V = L^-1 with L L^T = A, L lower triangular (only A's lower triangle is read); NaN if A is not positive
    definite (a diagonal block's factorisation fails and the NaN spreads through the products).

    Its own reverse mode rather than ``cholesky_and_inverse(A)[1]``: that one would receive a zero cotangent for
    L and spend an m x m product (L^T L_bar) on it."""
    return _recursive(A)[1]


def _inverse_fwd(A):
    inverse = _recursive(A)[1]
    return inverse, inverse


def _inverse_bwd(inverse, inverse_bar):
    """With V = L^-1: dV = -V dL V, so L_bar = -V^T V_bar V^T, and with it the Cholesky factorisation's reverse mode
    (:func:`cholesky_cotangent`) with M = L^T L_bar = -V_bar V^T.  Only V_bar's lower triangle pairs with the lower
    triangular dV; its upper part reaches M only above the diagonal, which Phi drops."""
    return (cholesky_cotangent(inverse, -(inverse_bar @ inverse.T)),)


inverse_factor.defvjp(_inverse_fwd, _inverse_bwd)


@jax.custom_vjp
def cholesky_and_inverse(A: Float[Array, "m m"]) -> tuple[Float[Array, "m m"], Float[Array, "m m"]]:
    """(L, L^-1) with L L^T = A, both from the one recursion (:func:`inverse_factor`)."""
    return _recursive(A)


def _both_fwd(A):
    L, inverse = _recursive(A)
    return (L, inverse), (L, inverse)


def _both_bwd(residuals, cotangents):
    """The cotangent of L is L_bar - V^T V_bar V^T (V = L^-1, dV = -V dL V), so M = L^T L_bar - V_bar V^T."""
    L, inverse = residuals
    L_bar, inverse_bar = cotangents
    return (cholesky_cotangent(inverse, L.T @ L_bar - inverse_bar @ inverse.T),)


cholesky_and_inverse.defvjp(_both_fwd, _both_bwd)


@jax.custom_vjp
def inverse_factor_solve(A: Float[Array, "m m"], B: Float[Array, "m k"]) -> Float[Array, "m k"]:
    """X = L^-1 B, L L^T = A, as the product with V = :func:`inverse_factor`'s L^-1; differentiated in both A and B
    without forming V's cotangent (an m x m product fewer than through :func:`inverse_factor`)."""
    return _recursive(A)[1] @ B


def _solve_fwd(A, B):
    inverse = _recursive(A)[1]
    X = inverse @ B
    return X, (inverse, X)


def _solve_bwd(residuals, X_bar):
    """dX = -V dL X + V dB, so B_bar = V^T X_bar and L^T L_bar = -L^T V^T X_bar X^T = -X_bar X^T: M from the k
    columns (2 m^2 k flops) instead of from V_bar = X_bar B^T (2 m^2 k + 2 m^3)."""
    inverse, X = residuals
    return cholesky_cotangent(inverse, -(X_bar @ X.T)), inverse.T @ X_bar


inverse_factor_solve.defvjp(_solve_fwd, _solve_bwd)


def cholesky_cotangent(inverse: Float[Array, "m m"], M: Float[Array, "m m"]) -> Float[Array, "m m"]:
    """The Cholesky factorisation's reverse mode (Murray 2016, eq. 10) through V = L^-1:

        A_bar = sym(V^T Phi(M) V),   M = L^T L_bar,   Phi = the lower triangle with the diagonal halved,

    the two products with their triangular blocks skipped (``_triangular_products``: at m = 500, 9 of the 16
    half-size block products)."""
    phi = jnp.tril(M) - 0.5 * jnp.diag(jnp.diagonal(M))
    A_bar = transposed_lower_times_lower(inverse, lower_times_lower(phi, inverse))
    return 0.5 * (A_bar + A_bar.T)


def cholesky(A: Float[Array, "m m"]) -> Float[Array, "m m"]:
    """L with L L^T = A by the recursion (its L^-1 is formed too, for the blocks below the diagonal); no derivative
    rule: for values that are not differentiated (SVGP's natural-gradient step)."""
    return _recursive(A)[0]


def triangular_inverse(L: Float[Array, "m m"]) -> Float[Array, "m m"]:
    """L^-1 of a lower triangular L by the same halving, V21 = -V22 L21 V11, with LAPACK's solve on the leaves;
    no derivative rule (SVGP's natural-gradient step)."""
    m = L.shape[0]
    if m <= LEAF:
        return _leaf_inverse(L)
    k = _split(m)
    return _inverse_of_blocks(triangular_inverse(L[:k, :k]), L[k:, :k], triangular_inverse(L[k:, k:]))


def _recursive(A):
    """(L, L^-1) by the halving of the module docstring: the recursion needs both."""
    m = A.shape[0]
    if m <= LEAF:
        L = dense.cholesky(A)
        return L, _leaf_inverse(L)
    k = _split(m)
    L11, inverse11 = _recursive(A[:k, :k])
    L21 = _solve_lower_transposed(A[k:, :k], L11, inverse11)
    L22, inverse22 = _recursive(A[k:, k:] - L21 @ L21.T)
    return block_lower(L11, L21, L22), _inverse_of_blocks(inverse11, L21, inverse22)


def _solve_lower_transposed(B, L, inverse):
    """X = B L^-T (X L^T = B) for lower triangular L with inverse = L^-1, by block forward substitution over the
    halving of L: [X1, X2] with X1 = B1 L11^-T and X2 = (B2 - X1 L21^T) L22^-T, down to diagonal blocks of at most
    ``SOLVE_BLOCK`` rows, solved by the product with their inverse and one step of refinement (module docstring)."""
    n = L.shape[0]
    if n <= SOLVE_BLOCK:
        X = B @ inverse.T
        return X + (B - X @ L.T) @ inverse.T
    k = _split(n)
    X1 = _solve_lower_transposed(B[:, :k], L[:k, :k], inverse[:k, :k])
    X2 = _solve_lower_transposed(B[:, k:] - X1 @ L[k:, :k].T, L[k:, k:], inverse[k:, k:])
    return jnp.concatenate([X1, X2], axis=1)


def _leaf_inverse(L):
    """L^-1 of a leaf (at most LEAF rows) by LAPACK's triangular solve."""
    return dense.solve_triangular(L, jnp.eye(L.shape[0], dtype=L.dtype), lower=True)


def _inverse_of_blocks(inverse11, L21, inverse22):
    """[[L11, 0], [L21, L22]]^-1 from the diagonal blocks' inverses: (L^-1)_21 = -L22^-1 L21 L11^-1."""
    return block_lower(inverse11, -(inverse22 @ (L21 @ inverse11)), inverse22)


def _split(m: int) -> int:
    """The rows of the first block: half of the blocks of LEAF rows, rounded up (every leaf LEAF rows but the last)."""
    return LEAF * -(-m // (2 * LEAF))
