"""Kernels: Gram matrices against pairwise evaluation and closed forms."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import jit_call

import gpclass as gpc

X1 = np.random.default_rng(0).normal(size=(7, 3))
X2 = np.random.default_rng(1).normal(size=(5, 3))


def brute_se(A, B, variance, lengthscale):
    out = np.empty((len(A), len(B)))
    for i, a in enumerate(A):
        for j, b in enumerate(B):
            out[i, j] = variance * np.exp(-0.5 * np.sum(((a - b) / lengthscale) ** 2))
    return out


@pytest.mark.parametrize("lengthscale", [1.7, np.array([0.5, 2.0, 3.0])])
def test_squared_exponential_gram_matches_definition(lengthscale):
    k = gpc.kernels.SquaredExponential(variance=2.5, lengthscale=lengthscale)
    # The matmul form, and the generic pairwise vmap of `evaluate` (one compiled program for all of them).
    cross, K, diag, generic = jit_call(
        lambda k: (k.gram(X1, X2), k.gram(X1), k.diag(X2), gpc.kernels.AbstractKernel.gram(k, X1, X2)), k
    )
    np.testing.assert_allclose(cross, brute_se(X1, X2, 2.5, lengthscale), rtol=1e-12)
    np.testing.assert_allclose(K, brute_se(X1, X1, 2.5, lengthscale), rtol=1e-12, atol=1e-14)
    np.testing.assert_array_equal(np.diag(K), 2.5)
    np.testing.assert_allclose(diag, 2.5)
    np.testing.assert_allclose(cross, generic, rtol=1e-12)


def test_linear_constant_sum_product():
    lin = gpc.kernels.Linear(variance=0.7)
    const = gpc.kernels.Constant(variance=1.3)
    se = gpc.kernels.SquaredExponential(variance=2.0, lengthscale=1.1)
    kernels = [lin, const, se + const, se * lin]
    # Cross-covariances, the generic pairwise ones, diagonals and Gram matrices: one compiled program.
    cross, generic, diag, K = jit_call(
        lambda kernels: [[f(k) for k in kernels] for f in (
            lambda k: k.gram(X1, X2), lambda k: gpc.kernels.AbstractKernel.gram(k, X1, X2),
            lambda k: k.diag(X2), lambda k: k.gram(X2))],
        kernels,
    )
    np.testing.assert_allclose(cross[0], 0.7 * X1 @ X2.T, rtol=1e-12)
    np.testing.assert_allclose(cross[1], np.full((7, 5), 1.3))
    np.testing.assert_allclose(cross[2], brute_se(X1, X2, 2.0, 1.1) + 1.3, rtol=1e-12)
    np.testing.assert_allclose(cross[3], brute_se(X1, X2, 2.0, 1.1) * (0.7 * X1 @ X2.T), rtol=1e-12)
    np.testing.assert_allclose(jit_call((se + lin).diag, X2), 2.0 + 0.7 * np.sum(X2**2, 1), rtol=1e-12)
    for i in range(len(kernels)):
        np.testing.assert_allclose(diag[i], np.diag(np.asarray(K[i])), rtol=1e-12)
        np.testing.assert_allclose(cross[i], generic[i], rtol=1e-12)


def test_white_noise_is_on_the_training_index():
    w = gpc.kernels.White(variance=0.1)
    X_dup = np.vstack([X1[:2], X1[:2]])  # duplicated inputs still get independent noise
    on_dup, cross, diag, with_se = jit_call(
        lambda w: (w.gram(X_dup), w.gram(X1, X2), w.diag(X2), (gpc.kernels.SquaredExponential() + w).gram(X1)), w
    )
    np.testing.assert_allclose(on_dup, 0.1 * np.eye(4))
    np.testing.assert_allclose(cross, np.zeros((7, 5)))
    np.testing.assert_allclose(diag, 0.1)
    np.testing.assert_allclose(with_se, brute_se(X1, X1, 1.0, 1.0) + 0.1 * np.eye(7), rtol=1e-12, atol=1e-14)


def test_kernel_from_traced_values_and_gradient():
    def total(log_ell):
        k = gpc.kernels.SquaredExponential(lengthscale=jnp.exp(log_ell))
        return jnp.sum(k.gram(X1, X2))

    g = jax.grad(total)(0.3)
    eps = 1e-6
    fd = (total(0.3 + eps) - total(0.3 - eps)) / (2 * eps)
    np.testing.assert_allclose(g, fd, rtol=1e-7)
    np.testing.assert_allclose(gpc.jit(total)(0.3), total(0.3), rtol=1e-12)


def test_kim_ghahramani_kernel_is_composable():
    """v0 exp(-1/2 sum_m l_m d_m) + v1 + v2 delta (K&G eq. 10), d_m squared distance or 1 - delta, built from parts."""
    rng = np.random.default_rng(3)
    X = np.column_stack([rng.normal(size=6), rng.integers(0, 3, 6), rng.normal(size=6), rng.integers(0, 2, 6)])
    inv_l = np.array([0.7, 1.3, 0.2, 2.1])  # K&G's inverse squared length scales l_m
    continuous, discrete = [0, 2], [1, 3]
    k = (
        gpc.kernels.OnDims(gpc.kernels.SquaredExponential(1.9, inv_l[continuous] ** -0.5), continuous)
        * gpc.kernels.OnDims(gpc.kernels.CategoricalOverlap(inv_l[discrete] ** -0.5), discrete)
        + gpc.kernels.Constant(0.3)
        + gpc.kernels.White(0.05)
    )
    want = np.empty((6, 6))
    for i in range(6):
        for j in range(6):
            d = [(X[i, m] - X[j, m]) ** 2 if m in continuous else float(X[i, m] != X[j, m]) for m in range(4)]
            want[i, j] = 1.9 * np.exp(-0.5 * np.dot(inv_l, d)) + 0.3 + 0.05 * (i == j)
    K, diag, cross, pairwise = jit_call(
        lambda k: (
            k.gram(X), k.diag(X), k.gram(X[:2], X[2:]),
            jax.vmap(lambda a: jax.vmap(lambda b: k.evaluate(a, b))(jnp.asarray(X[2:])))(jnp.asarray(X[:2])),
        ),
        k,
    )
    np.testing.assert_allclose(K, want, rtol=1e-12)
    np.testing.assert_allclose(diag, np.diag(want), rtol=1e-12)
    # Cross-covariances carry no white noise; pairwise evaluation agrees with gram off the diagonal.
    np.testing.assert_allclose(cross, want[:2, 2:], rtol=1e-12)
    np.testing.assert_allclose(pairwise, want[:2, 2:], rtol=1e-12)
