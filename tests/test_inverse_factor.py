"""``_inverse_factor.inverse_factor``: L^-1 of the Cholesky factor by recursive halving, against NumPy's LAPACK
factor and inverse, central finite differences, and reverse mode through jaxlib's Cholesky factorisation and
triangular solve."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.linalg
from conftest import central_difference

from gpclass import _inverse_factor
from gpclass._inverse_factor import (
    cholesky,
    cholesky_and_inverse,
    inverse_factor,
    inverse_factor_solve,
    triangular_inverse,
)
from gpclass._triangular_products import PRODUCT_BLOCK


def se_gram(m, seed, jitter=1e-6, close=False):
    """An SE Gram matrix of m random points in 3 dimensions (length scale 1), jittered; ``close``: point 1 is
    1e-3 from point 0 (a near-singular matrix held by the jitter)."""
    rng = np.random.default_rng(seed)
    Z = rng.normal(size=(m, 3))
    if close:
        Z[1] = Z[0] + 1e-3
    K = np.exp(-0.5 * np.sum((Z[:, None] - Z[None]) ** 2, axis=-1))
    return K + jitter * np.eye(m)


# Sizes: one leaf, the largest leaf, one split (a leaf of one row), uneven splits, three levels (131 = 5 x 24 + 11),
# and 300, whose top L21 (132 x 168) takes two levels of block substitution.
SIZES = (1, 5, _inverse_factor.LEAF, _inverse_factor.LEAF + 1, 33, 70, 131, 300)


@pytest.mark.parametrize("m", SIZES)
def test_inverse_factor_is_lapacks(m):
    """L^-1 equals the inverse of NumPy's Cholesky factor (LAPACK) to 1e-11 of its largest entry for a
    well-conditioned matrix, and is lower triangular.  For a near-singular one (two points 1e-3 apart, jitter
    1e-6; cond(A) 1e6-8e7), where L^-1 itself is sensitive, V A V^T = I as closely as with LAPACK's triangular
    solve: within 3x its residual (without the refinement on the diagonal blocks of L21's block substitution,
    7.4x at m = 131 and 7.5x at m = 300; measured 0.7x and 1.2x with it; over 180 near-singular matrices of
    m = 97-640 a review measured median 1.0x, 90th percentile 1.37x, worst 4.0x at m = 288)."""
    A = se_gram(m, seed=m, jitter=0.1)
    inverse = np.asarray(jax.jit(inverse_factor)(A))
    want = np.linalg.inv(np.linalg.cholesky(A))
    np.testing.assert_allclose(inverse, want, rtol=0, atol=1e-11 * np.max(np.abs(want)))
    assert np.all(np.triu(inverse, 1) == 0)
    if m > 2:
        A = se_gram(m, seed=m, close=True)
        lapack = scipy.linalg.solve_triangular(np.linalg.cholesky(A), np.eye(m), lower=True)
        residual = [np.max(np.abs(V @ A @ V.T - np.eye(m))) for V in (np.asarray(jax.jit(inverse_factor)(A)), lapack)]
        assert residual[0] <= 3.0 * residual[1], residual


def test_not_positive_definite_gives_nan():
    """A matrix that is not positive definite (its last pivot negative): NaN, as ``_dense.cholesky``."""
    A = se_gram(40, seed=1, jitter=0.1)
    A[-1, -1] -= 50.0
    assert np.isnan(np.asarray(jax.jit(inverse_factor)(A))).any()


def _loss(A, weights):
    """A scalar of L^-1, each entry weighted (nonlinearly, so every entry's cotangent differs)."""
    return jnp.sum(weights * jnp.sin(inverse_factor(A)))


def _reference_loss(A, weights):
    """The same scalar through jaxlib's factorisation and triangular solve (their own reverse modes)."""
    inverse = jax.scipy.linalg.solve_triangular(jnp.linalg.cholesky(A), jnp.eye(A.shape[0]), lower=True)
    return jnp.sum(weights * jnp.sin(inverse))


@pytest.mark.parametrize("m", (5, 33))
def test_reverse_mode_is_the_factorisations_and_finite_differences(m):
    """The gradient in A (symmetric) against reverse mode through jaxlib's Cholesky and triangular solve (1e-10
    relative; ``jnp.linalg.cholesky`` symmetrises its input, so its gradient is the symmetric one too), and
    against central differences along three random symmetric directions (1e-5 relative: their truncation error,
    measured 2.8e-6 for the reference's gradient too), on a near-singular matrix (two points 1e-3 apart, jitter
    1e-3)."""
    A = se_gram(m, seed=2, jitter=1e-3, close=True)
    rng = np.random.default_rng(3)
    weights = rng.normal(size=(m, m))
    gradient = jax.jit(jax.grad(_loss))(A, weights)
    np.testing.assert_array_equal(gradient, gradient.T)
    reference = jax.jit(jax.grad(_reference_loss))(A, weights)
    np.testing.assert_allclose(gradient, reference, rtol=0, atol=1e-10 * np.max(np.abs(reference)))
    for _ in range(3):
        D = rng.normal(size=(m, m))
        D = 1e-3 * (D + D.T)
        numeric = central_difference(lambda t: float(_loss(A + t[0] * D, weights)), 0.0, 1e-4)[0]
        np.testing.assert_allclose(float(np.sum(gradient * D)), numeric, rtol=1e-5)  # the differences' error


def test_vmap_is_the_loop():
    """Batched by ``vmap`` (the leaves' LAPACK calls loop on the CPU, ``_dense``): each the unbatched result."""
    A = np.stack([se_gram(40, seed=s, jitter=0.1) for s in range(3)])
    batched = jax.jit(jax.vmap(inverse_factor))(A)
    for i in range(3):
        np.testing.assert_allclose(batched[i], jax.jit(inverse_factor)(A[i]), rtol=0, atol=1e-15)


def test_solve_and_its_reverse_mode():
    """``inverse_factor_solve(A, B)`` = L^-1 B, and its gradients in A and B (hand-written: M from the columns)
    against reverse mode through jaxlib's Cholesky factorisation and triangular solve, 1e-10 relative, at m = 33
    (two levels of halving) with 7 columns, on the near-singular matrix of the test above."""
    m = 33
    A = se_gram(m, seed=2, jitter=1e-3, close=True)
    rng = np.random.default_rng(4)
    B, weights = rng.normal(size=(m, 7)), rng.normal(size=(m, 7))

    def loss(A, B, solve):
        return jnp.sum(weights * jnp.sin(solve(A, B)))

    def reference(A, B):
        return jax.scipy.linalg.solve_triangular(jnp.linalg.cholesky(A), B, lower=True)

    X = jax.jit(inverse_factor_solve)(A, B)
    want = scipy.linalg.solve_triangular(np.linalg.cholesky(A), B, lower=True)
    np.testing.assert_allclose(X, want, rtol=0, atol=1e-9 * np.max(np.abs(want)))
    got = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(A, B, inverse_factor_solve)
    expected = jax.jit(jax.grad(loss, argnums=(0, 1)), static_argnums=2)(A, B, reference)
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=0, atol=1e-10 * np.max(np.abs(e)))


def test_factor_and_inverse_together():
    """``cholesky_and_inverse``: L equals NumPy's factor and L^-1 ``inverse_factor``'s; the gradient of a scalar
    of both against reverse mode through jaxlib's Cholesky factorisation and triangular solve (1e-10 relative) at
    m = 33, on the near-singular matrix of the tests above."""
    m = 33
    A = se_gram(m, seed=2, jitter=1e-3, close=True)
    L, inverse = jax.jit(cholesky_and_inverse)(A)
    np.testing.assert_allclose(L, np.linalg.cholesky(A), rtol=0, atol=1e-13)
    np.testing.assert_array_equal(inverse, jax.jit(inverse_factor)(A))
    rng = np.random.default_rng(5)
    w_L, w_inverse = rng.normal(size=(m, m)), 1e-3 * rng.normal(size=(m, m))

    def loss(A):
        L, inverse = cholesky_and_inverse(A)
        return jnp.sum(w_L * jnp.sin(L)) + jnp.sum(w_inverse * jnp.cos(inverse))

    def reference(A):
        L = jnp.linalg.cholesky(A)
        inverse = jax.scipy.linalg.solve_triangular(L, jnp.eye(m), lower=True)
        return jnp.sum(w_L * jnp.sin(L)) + jnp.sum(w_inverse * jnp.cos(inverse))

    got, want = jax.jit(jax.grad(loss))(A), jax.jit(jax.grad(reference))(A)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-10 * np.max(np.abs(want)))


@pytest.mark.parametrize("m", (5, 70, 131))
def test_cholesky_and_triangular_inverse_values(m):
    """The recursion's L alone equals NumPy's factor, and ``triangular_inverse`` of a lower triangular matrix
    that is not a Cholesky factor of anything at hand (random entries, diagonal in [0.5, 1.5]) equals
    NumPy's inverse, both to 1e-12 relative to the largest entry."""
    A = se_gram(m, seed=m, jitter=0.1)
    want = np.linalg.cholesky(A)
    np.testing.assert_allclose(jax.jit(cholesky)(A), want, rtol=0, atol=1e-12 * np.max(np.abs(want)))
    rng = np.random.default_rng(m)
    S = np.tril(0.3 * rng.normal(size=(m, m)), -1) + np.diag(rng.uniform(0.5, 1.5, size=m))
    want = np.linalg.inv(S)
    np.testing.assert_allclose(jax.jit(triangular_inverse)(S), want, rtol=0, atol=1e-12 * np.max(np.abs(want)))


@pytest.mark.parametrize("m", (2 * PRODUCT_BLOCK - 1, 2 * PRODUCT_BLOCK + 1, 600))
def test_cholesky_cotangent_blocked_products(m):
    """The reverse mode's products by blocks (the zero triangles skipped): sym(V^T Phi(M) V) equals NumPy's
    whole products to 1e-13 relative, for a size that is one block, one that splits unevenly (128 + 129 rows) and
    one of two levels (600 = 4 x 150); and the gradient of ``inverse_factor_solve`` at the uneven split equals
    reverse mode through jaxlib's Cholesky factorisation and triangular solve (1e-10 relative)."""
    rng = np.random.default_rng(m)
    V = np.tril(rng.normal(size=(m, m)))
    M = rng.normal(size=(m, m))
    phi = np.tril(M) - 0.5 * np.diag(np.diag(M))
    want = V.T @ phi @ V
    want = 0.5 * (want + want.T)
    got = jax.jit(_inverse_factor.cholesky_cotangent)(V, M)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-13 * np.max(np.abs(want)))
    if m == 2 * PRODUCT_BLOCK + 1:
        A = se_gram(m, seed=m, jitter=1e-2)
        B, weights = rng.normal(size=(m, 5)), rng.normal(size=(m, 5))

        def loss(A, solve):
            return jnp.sum(weights * jnp.sin(solve(A, B)))

        def reference(A, B):
            return jax.scipy.linalg.solve_triangular(jnp.linalg.cholesky(A), B, lower=True)

        got = jax.jit(jax.grad(loss), static_argnums=1)(A, inverse_factor_solve)
        expected = jax.jit(jax.grad(loss), static_argnums=1)(A, reference)
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-10 * np.max(np.abs(expected)))
