"""Multi-class (softmax) Laplace under a sparse prior, against dense evaluations of the same sparse model.

Oracles: the dense softmax Laplace method (n x n Cholesky factorisations, eq. 3.44) run on K~ as an explicit
matrix, with GPML's power-EP log determinant applied in NumPy; the predictive moments k** - Q_*n (K~ + W^-1)^-1 Q_n*
formed as Cn x Cn NumPy matrices; the dense method on K when Z = X; central finite differences for gradients.
Data: 40 standardised Vehicle cases (4 classes) with three rows repeated; every test runs on them and the same Z
(10 inducing inputs), so that each approximation compiles once and the dense oracle is one compiled program.  The
tests' own programs (oracle, gradients) are compiled by ``compile_fast``.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FAST_COMPILE, assert_directional_derivatives, gram, standardised_subset

import gpclass as gpc
from gpclass._covariance import DenseCovariance
from gpclass._inference._infer import solve

C = 4
SOFTMAX = gpc.likelihoods.Softmax(C)

# gpc.jit with LLVM's optimisations off as well, for the tests' own programs: they compile 2-4 times faster and run
# for milliseconds.  The arithmetic is the same IEEE operations (XLA uses no fast math): values agree with the
# optimised programs' to the last digit or two.  The library's entry points keep their own options.
compile_fast = functools.partial(gpc.jit, compiler_options=FAST_COMPILE)


def data():
    X, y = standardised_subset("vehicle", 5, n=40)
    X[[5, 17, 30]] = X[[4, 16, 29]]  # repeated inputs
    return X, y


X, Y = data()
Y_ONE_HOT = np.eye(C)[Y]
KERNEL = gpc.kernels.SquaredExponential(np.float64(4.0), np.float64(3.0))
Z = np.asarray(gpc.Sparse.from_data(KERNEL, X, 10, key=jax.random.key(0)).inducing)  # NumPy: no eager jax ops


@compile_fast
def _sparse_prior_matrices(sparse):
    op = sparse.covariance(jnp.asarray(X))
    return op.dense(), op.g


@compile_fast
def _dense_softmax_laplace(K):
    return solve(gpc.Laplace(), DenseCovariance(K), SOFTMAX, jnp.asarray(Y_ONE_HOT), None)


def dense_laplace(K):
    """The dense softmax Laplace method on an explicit n x n matrix K: one compiled program for every test."""
    return _dense_softmax_laplace(jnp.asarray(K))


def softmax(f):
    """softmax over the classes (axis 1), in NumPy."""
    e = np.exp(f - np.max(f, axis=1, keepdims=True))
    return e / np.sum(e, axis=1, keepdims=True)


def dense_oracle(sparse):
    """The dense softmax Laplace on K~; log q corrected from 1/2 log|A| to GPML's power form 1/(2 s) log|A|.
    Returns the dense solution, that log q, the per-case W_i and K~ (NumPy)."""
    K, g = (np.asarray(a) for a in _sparse_prior_matrices(sparse))
    dense = dense_laplace(K)
    pi, s = softmax(np.asarray(dense.mean)), sparse.power
    W = np.stack([np.diag(p) - np.outer(p, p) for p in pi])
    log_det_a = np.array([np.linalg.slogdet(np.eye(C) + s * gi * Wi)[1] for gi, Wi in zip(g, W)])
    power_term = g * np.trace(W, axis1=1, axis2=2) if s == 0.0 else log_det_a / s
    return dense, float(dense.log_marginal) - 0.5 * np.sum(power_term - log_det_a), W, K


@compile_fast
def _kernel_blocks(X_test):
    """K_uu, K_*u, K_un and diag K_** of KERNEL (one compiled program)."""
    return KERNEL.gram(Z), KERNEL.gram(X_test, Z), KERNEL.gram(Z, X), KERNEL.diag(X_test)


@pytest.mark.parametrize("approximation", ["fitc", "vfe", 0.5])
@pytest.mark.slow
def test_mode_log_q_and_predictions_equal_the_dense_sparse_model(approximation):
    sparse = gpc.Sparse(KERNEL, Z, approximation=approximation)
    post = gpc.infer(gpc.Laplace(), sparse, SOFTMAX, X, Y)
    assert isinstance(post, gpc.SparseSoftmaxPosterior)
    dense, expected, W, K = dense_oracle(sparse)
    np.testing.assert_allclose(post.mean, dense.mean, atol=1e-10)
    np.testing.assert_allclose(post.log_marginal, expected, rtol=1e-12)

    # Predictive moments: Cov[f*] = k** I - Q_*n (K~ + W^-1)^-1 Q_n* with Cn x Cn blocks (classes major).
    X_test = X[:6] + 0.1
    mean, cov = gpc.predict_latent(post, X_test)
    n = len(Y)
    K_uu, K_test_u, K_ux, k_test = (np.array(a) for a in _kernel_blocks(X_test))
    K_uu += sparse.jitter * np.mean(np.diag(K_uu)) * np.eye(len(Z))
    Q_cross = K_test_u @ np.linalg.solve(K_uu, K_ux)
    W_big = np.zeros((C * n, C * n))
    for i in range(n):
        W_big[i::n, i::n] = W[i]
    K_big = np.kron(np.eye(C), K)
    P = W_big @ np.linalg.inv(np.eye(C * n) + K_big @ W_big)  # (K~ + W^-1)^-1 without inverting W
    Q_big = np.kron(np.eye(C), Q_cross)
    cov_big = np.kron(np.eye(C), np.diag(k_test)) - Q_big @ P @ Q_big.T
    m = len(X_test)
    expected_cov = np.stack([cov_big[j::m, j::m] for j in range(m)])
    pi = softmax(np.asarray(dense.mean))
    np.testing.assert_allclose(mean, Q_cross @ (Y_ONE_HOT - pi), atol=1e-12)
    np.testing.assert_allclose(cov, expected_cov, atol=1e-12)
    p = np.asarray(gpc.predict(post, X_test, integrator=gpc.integrators.MeanField()))
    np.testing.assert_allclose(np.sum(p, axis=1), 1.0, rtol=1e-12)


def test_inducing_at_the_inputs_recovers_the_dense_method():
    """Z = X (the distinct rows) with VFE: Q = K up to the jitter, so log q is the dense method's on K (by the
    oracle's program: the dense solve ``gpc.infer(gpc.Laplace(), KERNEL, SOFTMAX, X, Y)`` runs on K = gram(X))."""
    rows = np.setdiff1d(np.arange(len(Y)), [5, 17, 30])
    sparse = gpc.Sparse(KERNEL, X[rows], approximation="vfe", jitter=1e-10)
    post = gpc.infer(gpc.Laplace(), sparse, SOFTMAX, X, Y)
    dense = dense_laplace(gram(KERNEL, X))
    np.testing.assert_allclose(post.log_marginal, dense.log_marginal, rtol=1e-7)
    np.testing.assert_allclose(post.mean, dense.mean, atol=1e-6)


@functools.cache
def _value_and_grad(approximation):
    def log_marginal(params):
        log_v, log_l, Z = params
        kernel = gpc.kernels.SquaredExponential(jnp.exp(log_v), jnp.exp(log_l))
        return gpc.infer(gpc.Laplace(), gpc.Sparse(kernel, Z, approximation=approximation), SOFTMAX, X, Y).log_marginal
    return compile_fast(jax.value_and_grad(log_marginal))


@pytest.mark.parametrize("approximation, log_v", [("vfe", np.log(4.0)), ("fitc", np.log(400.0))])  # mild, stiff
@pytest.mark.slow
def test_gradients_match_finite_differences(approximation, log_v):
    """d log q / d (log sigma_f^2, log l, Z) along random directions through every inducing coordinate."""
    fn = _value_and_grad(approximation)
    params = (np.float64(log_v), np.float64(np.log(3.0)), np.asarray(Z))
    assert_directional_derivatives(fn, params, seed=1)


def test_stiff_prior_converges_to_the_dense_solution():
    # sigma_f^2 = 1e4 on 40 cases: every solve is a Woodbury form with no product by K~ to cancel against.
    sparse = gpc.Sparse(gpc.kernels.SquaredExponential(np.float64(1e4), np.float64(3.0)), Z)
    post = gpc.infer(gpc.Laplace(), sparse, SOFTMAX, X, Y)  # raises unless CONVERGED
    dense, expected, _, _ = dense_oracle(sparse)
    assert gpc.Status(int(dense.info.status)) == gpc.Status.CONVERGED
    np.testing.assert_allclose(post.log_marginal, expected, rtol=1e-10)


@pytest.mark.slow
def test_fit_raises_log_q_and_moves_the_inducing_inputs():
    sparse = gpc.Sparse(KERNEL, Z)
    start = float(gpc.infer(gpc.Laplace(), sparse, SOFTMAX, X, Y).log_marginal)
    result = gpc.fit(gpc.Laplace(), sparse, SOFTMAX, X, Y, max_steps=10, throw=False)
    assert float(result.objective) > start + 1.0
    assert not np.allclose(np.asarray(result.kernel.inducing), Z)
    refit = gpc.infer(gpc.Laplace(), result.kernel, SOFTMAX, X, Y).log_marginal
    np.testing.assert_allclose(refit, result.objective, rtol=1e-10)


def test_unsupported_combinations_are_clear_errors():
    with pytest.raises(ValueError, match="PerClass"):
        gpc.Sparse(gpc.kernels.PerClass([KERNEL] * C), Z)
    with pytest.raises(ValueError, match="needs gpc.Laplace"):
        gpc.infer(gpc.EP(), gpc.Sparse(KERNEL, Z), SOFTMAX, X, Y)  # gpc.KL(): tests/test_kl_softmax.py
