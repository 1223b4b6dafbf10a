"""Dense factorisations and solves that cannot deadlock under ``jax.vmap`` on the CPU.

On the CPU, jaxlib runs a batched LAPACK call (a Cholesky factorisation or a
triangular solve with a leading batch dimension) as a parallel map over the
batch on XLA's intra-op thread pool.  jaxlib can deadlock there: a
softmax fit (the C classes are a batch) and ``jax.vmap(gpc.fit)`` hung forever
at 0 % CPU with every worker waiting in ``ParallelBatchMap``.  So every dense
factorisation and solve in gpclass goes through the functions here.
Unbatched, each is the plain ``jax`` call.  Batched, each runs its batch as a
loop (``lax.map``) of unbatched calls on the CPU, and as the native batched
kernel on every other platform (GPU, TPU), chosen when the program is lowered
(``lax.platform_dependent``).

``custom_vmap`` has no reverse mode, so each function carries a ``custom_vjp``
whose backward pass uses the same loop-safe solves.  Only two-dimensional
matrices are accepted: batches come from ``vmap``.
"""

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax

from ._exceptions import GPClassError
from ._types import Array, Float


def _loop_on_cpu(fn):
    """``fn`` whose ``vmap`` is a ``lax.map`` loop on the CPU and the native batched call elsewhere."""
    wrapped = jax.custom_batching.custom_vmap(fn)

    @wrapped.def_vmap
    def _rule(axis_size, in_batched, *args):
        def merge(mapped):
            it = iter(mapped)
            return [next(it) if b else a for a, b in zip(args, in_batched)]

        def loop(*mapped):
            return lax.map(lambda m: wrapped(*merge(m)), mapped)

        def native(*mapped):
            return jax.vmap(fn, in_axes=[0 if b else None for b in in_batched])(*merge(mapped))

        batched = [a for a, b in zip(args, in_batched) if b]
        out = lax.platform_dependent(*batched, cpu=loop, default=native)
        return out, jax.tree_util.tree_map(lambda _: True, out)

    return wrapped


@_loop_on_cpu
def _cholesky(A):
    return lax.linalg.cholesky(A, symmetrize_input=False)


def _make_triangular(lower: bool, trans: int, left: bool):
    @_loop_on_cpu
    def solve(A, B):
        if left:
            return jsl.solve_triangular(A, B, lower=lower, trans=trans)
        return lax.linalg.triangular_solve(A, B, left_side=False, lower=lower, transpose_a=bool(trans))

    return solve


_TRIANGULAR = {
    (lower, trans, left): _make_triangular(lower, trans, left)
    for lower in (True, False) for trans in (0, 1) for left in (True, False)
}


@_loop_on_cpu
def _solve(A, b):
    return jnp.linalg.solve(A, b)


def _check_matrix(A, name):
    if A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise GPClassError(f"{name} must be a square matrix; got shape {A.shape} (batch with jax.vmap).")


# ---------------------------------------------------------------------------------------------
# Cholesky factorisation


@jax.custom_vjp
def cholesky(A: Float[Array, "n n"]) -> Float[Array, "n n"]:
    """Lower Cholesky factor of a symmetric A (only its lower triangle is read); NaN if not positive definite.

    Unlike ``jnp.linalg.cholesky`` it does not form (A + A^T) / 2 first (an n^2 pass with a transpose, a
    measurable part of the factorisation's time, and in a loop a layout copy besides); every caller passes a
    symmetric matrix.  The reverse mode returns the symmetric cotangent, right for any symmetric perturbation of A.
    """
    _check_matrix(A, "A")
    return _cholesky(A)


def _cholesky_fwd(A):
    _check_matrix(A, "A")
    L = _cholesky(A)
    return L, L


def _cholesky_bwd(L, L_bar):
    """A_bar = sym(L^-T Phi(L^T L_bar) L^-1), Phi = lower triangle with the diagonal halved (Murray 2016, eq. 10)."""
    P = L.T @ L_bar
    P = jnp.tril(P) - 0.5 * jnp.diag(jnp.diagonal(P))
    G = solve_triangular(L, solve_triangular(L, P, lower=True, trans=1).T, lower=True, trans=1)
    return (0.5 * (G + G.T),)


cholesky.defvjp(_cholesky_fwd, _cholesky_bwd)


# ---------------------------------------------------------------------------------------------
# Triangular solves


def solve_triangular(A: Float[Array, "n n"], B: Array, lower: bool, trans: int = 0) -> Array:
    """op(A)^-1 B for triangular A, op(A) = A (trans=0) or A^T (trans=1); B a vector or a matrix."""
    _check_matrix(A, "A")
    return _solve_triangular(A, B, lower, int(trans), True)


def solve_triangular_right(A: Float[Array, "n n"], B: Float[Array, "m n"], lower: bool, trans: int = 0) -> Array:
    """B op(A)^-1 for triangular A and a matrix B: the transpose of ``solve_triangular(A, B^T, lower, 1 - trans)``,
    by LAPACK's right-sided solve, so the result is laid out for products X Y^T (``DenseFactor.covariance``)."""
    _check_matrix(A, "A")
    return _solve_triangular(A, B, lower, int(trans), False)


def _solve_triangular_impl(A, B, lower, trans, left):
    return _TRIANGULAR[lower, trans, left](A, B)


_solve_triangular = jax.custom_vjp(_solve_triangular_impl, nondiff_argnums=(2, 3, 4))


def _solve_triangular_fwd(A, B, lower, trans, left):
    X = _TRIANGULAR[lower, trans, left](A, B)
    return X, (A, X)


def _solve_triangular_bwd(lower, trans, left, residuals, X_bar):
    """Left (X = op(A)^-1 B): B_bar = op(A)^-T X_bar, op(A)_bar = -B_bar X^T.  Right (X = B op(A)^-1):
    B_bar = X_bar op(A)^-T, op(A)_bar = -X^T B_bar.  A_bar restricted to A's triangle."""
    A, X = residuals
    B_bar = _TRIANGULAR[lower, 1 - trans, left](A, X_bar)
    if left:
        product = jnp.outer(B_bar, X) if X.ndim == 1 else B_bar @ X.T
    else:
        product = X.T @ B_bar
    A_bar = -(product if trans == 0 else product.T)
    A_bar = jnp.tril(A_bar) if lower else jnp.triu(A_bar)
    return A_bar, B_bar


_solve_triangular.defvjp(_solve_triangular_fwd, _solve_triangular_bwd)


def cho_solve(L: Float[Array, "n n"], B: Array) -> Array:
    """(L L^T)^-1 B from a lower Cholesky factor L."""
    return solve_triangular(L, solve_triangular(L, B, lower=True), lower=True, trans=1)


# ---------------------------------------------------------------------------------------------
# General square solve (LU)


@jax.custom_vjp
def solve(A: Float[Array, "n n"], b: Array) -> Array:
    """A^-1 b for a general square A (LU with partial pivoting)."""
    _check_matrix(A, "A")
    return _solve(A, b)


def _solve_fwd(A, b):
    _check_matrix(A, "A")
    x = _solve(A, b)
    return x, (A, x)


def _solve_bwd(residuals, x_bar):
    """b_bar = A^-T x_bar, A_bar = -b_bar x^T."""
    A, x = residuals
    b_bar = _solve(A.T, x_bar)
    A_bar = -(jnp.outer(b_bar, x) if x.ndim == 1 else b_bar @ x.T)
    return A_bar, b_bar


solve.defvjp(_solve_fwd, _solve_bwd)
