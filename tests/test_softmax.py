"""Multi-class Laplace (GPML Algorithms 3.3-3.4) against dense formulas, the binary case and quadrature."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FAST_COMPILE, as_float64, central_difference, jit_call, se_kernel, standardised_subset
from scipy import special

import gpclass as gpc
from gpclass._covariance.dense_classes import half_log_det_softmax, softmax_blocks
from gpclass._validation import check_class_labels

C = 3
SOFTMAX = gpc.likelihoods.Softmax(C)
# The test's own programs (gpc.jit) are compiled with gpclass's XLA options and LLVM optimisation level 0: the same
# HLO optimisations and results equal to rounding, at a third to a half of the compile time; their machine code is
# slower, which these small problems do not notice.  ``fast_infer`` and ``fast_fit`` are gpc.infer and gpc.fit traced
# into such a program (arrays traced, the method and likelihood in the tree structure), for tests of the result
# rather than of the eager entry point (called directly where its own checks are tested: the bad-label tests).
fast_infer = gpc.jit(gpc.infer, static_argnames="throw", compiler_options=FAST_COMPILE)
fast_fit = gpc.jit(gpc.fit, compiler_options=FAST_COMPILE)


def per_class_kernel(log_variances, log_lengthscales):
    return gpc.kernels.PerClass(
        gpc.kernels.SquaredExponential(variance=jnp.exp(log_variances), lengthscale=jnp.exp(log_lengthscales))
    )


def kernel_from(theta):
    """Shared SE kernel from theta = (log sf2, log l); one SE kernel per class from 2C values."""
    if theta.shape[0] == 2:
        return se_kernel(theta[0], theta[1])
    return per_class_kernel(theta[: theta.shape[0] // 2], theta[theta.shape[0] // 2 :])


def infer(theta, X, y):
    return gpc.infer(gpc.Laplace(), kernel_from(theta), gpc.likelihoods.Softmax(C), X, y)


def value_posterior_and_grad(theta, X, y):
    """((log q, posterior), d log q / d theta)."""
    return jax.value_and_grad(lambda t: (lambda post: (post.log_marginal, post))(infer(t, X, y)), has_aux=True)(theta)


# One compiled program per kernel form and data shape.  (The vmap test batches the unjitted function: called under
# another transformation, gpc.jit passes its own compiler_options to a nested jax.jit, which JAX refuses.)
evaluate = gpc.jit(value_posterior_and_grad, compiler_options=FAST_COMPILE)


def posterior(theta, X, y):
    return evaluate(theta, X, y)[0][1]


def log_marginal_and_grad(theta, X, y):
    return without_posterior(evaluate(theta, X, y))


def without_posterior(value_posterior_and_grad):
    (value, _), grad = value_posterior_and_grad
    return value, grad


@pytest.fixture(scope="session")
def vehicle_small():
    """40 standardised cases of the Vehicle data, relabelled to 3 classes (0, 1 and 2-or-3)."""
    X, y = standardised_subset("vehicle", 3, n=40)
    return X, np.minimum(y, 2)


def vehicle_test_inputs():
    """10 standardised Vehicle inputs to predict at (a different subset from ``vehicle_small``); the prediction
    tests all use these 10, so that each prediction program compiles once."""
    return standardised_subset("vehicle", 5, n=10)[0]


# --- dense references in numpy (class-major Cn vectors, as GPML eq. 3.33) -----------------------------


def prior_gram(theta, X1, X2=None):
    return kernel_from(theta).gram(X1, X2)


def prior_diag(theta, X):
    return kernel_from(theta).diag(X)


def dense_blocks(theta, X):
    """K as C blocks (C, n, n) and as the block-diagonal Cn x Cn matrix (one compiled Gram per kernel form)."""
    K = np.asarray(jit_call(prior_gram, theta, X))
    K = np.broadcast_to(K, (C,) + K.shape[-2:])
    return K, np.block([[K[c] if c == d else np.zeros_like(K[c]) for d in range(C)] for c in range(C)])


def dense_w(pi):
    """W = diag(pi) - Pi Pi^T (eq. 3.38) as a dense Cn x Cn matrix, pi of shape (n, C)."""
    Pi = np.vstack([np.diag(pi[:, c]) for c in range(C)])
    return np.diag(pi.T.reshape(-1)) - Pi @ Pi.T


def dense_log_marginal(K_big, Y, F):
    """eq. 3.44 with a dense log-determinant of I + K W (no block tricks)."""
    pi = special.softmax(F, axis=1)
    f = F.T.reshape(-1)
    quad = f @ np.linalg.solve(K_big, f)
    lse = special.logsumexp(F, axis=1).sum()
    return -0.5 * quad + np.sum(Y * F) - lse - 0.5 * np.linalg.slogdet(np.eye(len(f)) + K_big @ dense_w(pi))[1]


THETAS = {
    "shared": np.array([np.log(4.0), np.log(2.0)]),
    "per-class": np.log(np.array([3.0, 8.0, 1.5, 2.5, 1.5, 4.0])),
    "stiff": np.array([np.log(200.0), np.log(1.5)]),
}


# --- mode, evidence, gradient ------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(THETAS))
def test_mode_and_evidence_match_dense_definitions(case, vehicle_small):
    X, y = vehicle_small
    post = posterior(THETAS[case], X, y)
    assert bool(post.info.converged)
    K, K_big = dense_blocks(THETAS[case], X)
    Y = np.eye(C)[y]
    F = np.asarray(post.mean)
    pi = special.softmax(F, axis=1)
    # stationarity (eq. 3.36 = 0): f^c = K_c (y^c - pi^c)
    residual = F - np.einsum("cij,jc->ic", K, Y - pi)
    assert np.max(np.abs(residual)) < 1e-9 * (1 + np.max(np.abs(F)))
    np.testing.assert_allclose(float(post.log_marginal), dense_log_marginal(K_big, Y, F), rtol=1e-10)
    np.testing.assert_allclose(post.alpha, Y - pi, atol=1e-12)


@pytest.mark.parametrize("case", list(THETAS))
def test_gradient_matches_finite_differences(case, vehicle_small):
    X, y = vehicle_small
    value, grad = log_marginal_and_grad(THETAS[case], X, y)
    fd = central_difference(lambda t: float(posterior(jnp.asarray(t), X, y).log_marginal), THETAS[case], h=1e-5)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8 * abs(float(value)))


def test_reverse_mode_stores_no_newton_iterations(vehicle_small):
    X, y = vehicle_small
    jaxpr = str(jax.make_jaxpr(jax.grad(lambda t: infer(t, X, y).log_marginal))(THETAS["shared"]))
    # Newton's loop is a while loop (never unrolled into a scan); the only scans are the loops over the
    # C = 3 classes that run a batch of factorisations one at a time on the CPU (gpclass/_dense.py).
    assert "while" in jaxpr
    assert set(re.findall(r"length=(\d+)", jaxpr)) == {"3"}


@pytest.mark.parametrize("case", ["shared", "per-class"])
def test_log_det_reverse_mode_matches_dense_log_det(case, vehicle_small):
    """The hand-written reverse mode of 1/2 log|I + K W(pi(F))| from the blocks equals autodiff of a dense
    Cn x Cn log-determinant, in the hyperparameters and in F (at an arbitrary F, not only at the mode)."""
    X = vehicle_small[0][:9]
    F = np.random.default_rng(7).normal(size=(9, C))

    def dense(theta, F):
        K = kernel_from(theta).gram(X)
        K_big = jax.scipy.linalg.block_diag(*jnp.broadcast_to(K, (C,) + K.shape[-2:]))
        pi = jax.nn.softmax(F, axis=1)
        Pi = jnp.concatenate([jnp.diag(pi[:, c]) for c in range(C)])
        W = jnp.diag(pi.T.reshape(-1)) - Pi @ Pi.T
        return 0.5 * jnp.linalg.slogdet(jnp.eye(C * 9) + K_big @ W)[1]

    def from_blocks(theta, F):
        K = kernel_from(theta).gram(X)
        pi = jax.nn.softmax(F, axis=1)
        return half_log_det_softmax(K, pi, *softmax_blocks(K, pi))

    values = gpc.jit(
        lambda t, F: [jax.value_and_grad(fn, argnums=(0, 1))(t, F) for fn in (dense, from_blocks)],
        compiler_options=FAST_COMPILE,
    )
    (v_dense, g_dense), (v_blocks, g_blocks) = values(THETAS[case], F)
    np.testing.assert_allclose(float(v_blocks), float(v_dense), rtol=1e-12)
    for a, b in zip(g_blocks, g_dense):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


# --- two classes are binary logistic classification of f^0 - f^1 with kernel 2k -------------------------


@gpc.jit(compiler_options=FAST_COMPILE)
def two_class_and_binary(theta, X, y, X_test, key):
    """Both posteriors, log q and its gradient, and the predictions: each inner solve is traced once (log q and
    the posterior as value and auxiliary output of one value_and_grad)."""

    def multi_posterior(theta):
        post = gpc.infer(gpc.Laplace(), se_kernel(theta[0], theta[1]), gpc.likelihoods.Softmax(2), X, y)
        return post.log_marginal, post

    def binary_posterior(theta):
        doubled = se_kernel(theta[0] + jnp.log(2.0), theta[1])
        post = gpc.infer(gpc.Laplace(), doubled, gpc.likelihoods.Logistic(), X, jnp.where(y == 0, 1.0, -1.0))
        return post.log_marginal, post

    (multi_lml, multi), multi_grad = jax.value_and_grad(multi_posterior, has_aux=True)(theta)
    (binary_lml, binary), binary_grad = jax.value_and_grad(binary_posterior, has_aux=True)(theta)
    return dict(
        multi_lml=multi_lml,
        binary_lml=binary_lml,
        multi_grad=multi_grad,
        binary_grad=binary_grad,
        multi_latent=gpc.predict_latent(multi, X_test),
        binary_latent=gpc.predict_latent(binary, X_test),
        multi_mc=gpc.predict(multi, X_test, key=key, integrator=gpc.integrators.MonteCarlo(40_000)),
        multi_mean_field=gpc.predict(multi, X_test, integrator=gpc.integrators.MeanField()),
        binary_exact=gpc.predict(binary, X_test),
        binary_mackay=gpc.predict(binary, X_test, integrator=gpc.integrators.MacKay()),
    )


@pytest.mark.slow
def test_two_classes_equal_binary_logistic_with_doubled_kernel(ionosphere_small):
    """p(y = 0 | f) = sigma(f^0 - f^1) and f^0 - f^1 ~ GP(0, 2k); the Laplace approximation is
    equivariant under this linear map, so everything equals binary logistic Laplace with kernel 2k."""
    X, y_pm = ionosphere_small
    y = np.where(y_pm > 0, 0, 1)
    theta = jnp.array([np.log(3.0), np.log(3.0)])
    out = jax.device_get(two_class_and_binary(theta, X[:45], y[:45], X[45:], jax.random.key(0)))  # NumPy arrays
    np.testing.assert_allclose(float(out["multi_lml"]), float(out["binary_lml"]), rtol=1e-10)
    np.testing.assert_allclose(out["multi_grad"], out["binary_grad"], rtol=1e-8)
    (mean, cov), (mean_b, var_b) = out["multi_latent"], out["binary_latent"]
    np.testing.assert_allclose(mean[:, 0] - mean[:, 1], mean_b, rtol=1e-8, atol=1e-10)
    var_diff = cov[:, 0, 0] + cov[:, 1, 1] - 2 * cov[:, 0, 1]
    np.testing.assert_allclose(var_diff, var_b, rtol=1e-8)
    np.testing.assert_allclose(out["multi_mean_field"][:, 0], out["binary_mackay"], rtol=1e-12)
    # Monte Carlo with 40,000 samples: standard error <= 0.5 / 200 = 0.0025
    np.testing.assert_allclose(out["multi_mc"][:, 0], out["binary_exact"], atol=0.01)
    np.testing.assert_allclose(np.sum(out["multi_mc"], axis=1), 1.0, rtol=1e-12)


# --- predictions ---------------------------------------------------------------------------------------


def test_latent_predictions_match_dense_formula(vehicle_small):
    """eq. 3.43, first line: Sigma + Q*^T K^-1 (K^-1 + W)^-1 K^-1 Q*, with dense Cn x Cn matrices."""
    X, y = vehicle_small  # the mode tests' data: their compiled program
    X_test = vehicle_test_inputs()
    theta = THETAS["per-class"]
    post = posterior(theta, X, y)
    mean, cov = gpc.predict_latent(post, X_test)
    K, K_big = dense_blocks(theta, X)
    K_cross = np.asarray(jit_call(prior_gram, theta, X_test, X))  # (C, m, n)
    prior_var = np.asarray(jit_call(prior_diag, theta, X_test))  # (C, m)
    F = np.asarray(post.mean)
    f = F.T.reshape(-1)
    K_inv = np.linalg.inv(K_big)
    post_cov = np.linalg.inv(K_inv + dense_w(special.softmax(F, axis=1)))
    n = len(y)
    for j in range(len(X_test)):
        Q = np.zeros((C * n, C))
        for c in range(C):
            Q[c * n : (c + 1) * n, c] = K_cross[c, j]
        np.testing.assert_allclose(mean[j], Q.T @ K_inv @ f, rtol=1e-7, atol=1e-9)  # eq. 3.41
        reduction = [K_cross[c, j] @ np.linalg.solve(K[c], K_cross[c, j]) for c in range(C)]
        Sigma = np.diag(prior_var[:, j] - np.array(reduction))
        reference = Sigma + Q.T @ K_inv @ post_cov @ K_inv @ Q
        np.testing.assert_allclose(cov[j], reference, rtol=1e-6, atol=1e-9)


def gauss_hermite_softmax(mean, cov, nodes=40):
    """E[softmax(f)] for f ~ N(mean, cov) in 3 dimensions by a tensor Gauss-Hermite rule."""
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / np.sqrt(2 * np.pi)
    Z = np.stack(np.meshgrid(z, z, z, indexing="ij"), -1).reshape(-1, 3)
    weights = np.prod(np.stack(np.meshgrid(w, w, w, indexing="ij"), -1).reshape(-1, 3), axis=1)
    F = mean + Z @ np.linalg.cholesky(cov).T
    return weights @ special.softmax(F, axis=1)


def test_class_probabilities_against_quadrature(vehicle_small):
    X, y = vehicle_small
    post = posterior(THETAS["per-class"], X, y)
    X_test = vehicle_test_inputs()  # the latent test's inputs: its compiled predict_latent
    mean, cov = (np.asarray(a) for a in gpc.predict_latent(post, X_test))
    truth = np.stack([gauss_hermite_softmax(m, s) for m, s in zip(mean, cov)])
    mc = gpc.predict(post, X_test, key=jax.random.key(1), integrator=gpc.integrators.MonteCarlo(40_000))
    mean_field = gpc.predict(post, X_test, integrator=gpc.integrators.MeanField())
    np.testing.assert_allclose(mc, truth, atol=0.01)  # 4 standard errors
    # The mean-field approximation is cruder (latent variances up to 8 here; measured error 0.053):
    # it must beat ignoring the latent uncertainty (softmax of the mean: error 0.16).
    plain = special.softmax(mean, axis=1)
    assert np.max(np.abs(mean_field - truth)) < min(0.06, 0.5 * np.max(np.abs(plain - truth)))
    for p in (mc, mean_field):
        assert p.shape == (len(X_test), C)
        np.testing.assert_allclose(np.sum(p, axis=1), 1.0, rtol=1e-12)
    again = gpc.predict(post, X_test, key=jax.random.key(1), integrator=gpc.integrators.MonteCarlo(40_000))
    np.testing.assert_array_equal(mc, again)  # an explicit key makes it reproducible


# --- batching, fitting, dtypes, errors -----------------------------------------------------------------


def test_vmap_matches_loop(vehicle_small):
    X, y = vehicle_small
    order = np.random.default_rng(0).permutation(len(y))  # a second data set of the same shape (one compilation)
    Xs = np.stack([X, X[order] + 0.1])
    ys = np.stack([y, (y[order] + 1) % C])
    thetas = np.stack([THETAS["shared"], THETAS["stiff"]])
    batched_fun = jax.vmap(lambda *args: without_posterior(value_posterior_and_grad(*args)))
    batched = jax.device_get(gpc.jit(batched_fun, compiler_options=FAST_COMPILE)(thetas, Xs, ys))
    for i in range(2):
        single = log_marginal_and_grad(thetas[i], Xs[i], ys[i])
        np.testing.assert_allclose(batched[0][i], single[0], rtol=1e-12)
        np.testing.assert_allclose(batched[1][i], single[1], rtol=1e-9)


def test_second_call_does_not_recompile(vehicle_small):
    """New hyperparameter values and new labels of the same shape reuse the compiled program."""
    X, y = vehicle_small
    posterior(THETAS["shared"], X, y)
    compiled = evaluate._cache_size()
    posterior(THETAS["stiff"], X, (y + 1) % C)
    assert evaluate._cache_size() == compiled


@pytest.mark.timeout(240)  # the multi-class fit that hung in a plain process (tests/test_no_deadlock.py)
def test_fit_reaches_a_stationary_point(vehicle_small):
    X, y = vehicle_small
    result = fast_fit(gpc.Laplace(), gpc.kernels.SquaredExponential(as_float64(1.0), as_float64(1.0)), SOFTMAX, X, y)
    assert bool(result.converged)
    theta = np.log([float(result.kernel.variance), float(result.kernel.lengthscale)])
    value, grad = log_marginal_and_grad(theta, X, y)
    np.testing.assert_allclose(float(value), float(result.objective), rtol=1e-10)
    assert float(value) > float(posterior(np.zeros(2), X, y).log_marginal)  # the start
    assert np.max(np.abs(grad)) < 1e-4


def test_warm_start_and_non_convergence(vehicle_small):
    X, y = vehicle_small
    cold = posterior(np.log([20.0, 2.0]), X, y)  # the other tests' compiled program
    nearby = gpc.kernels.SquaredExponential(variance=21.0, lengthscale=2.1)
    warm = fast_infer(gpc.Laplace(), nearby, SOFTMAX, X, y, init=cold.warm_start)
    reference = posterior(np.log([21.0, 2.1]), X, y)
    np.testing.assert_allclose(warm.mean, reference.mean, rtol=1e-9, atol=1e-9)
    assert int(warm.info.num_steps) < int(reference.info.num_steps)
    # Reported with throw=False (raising is infer's, whatever the method: tests/test_laplace.py, test_variational.py).
    post = one_newton_step(X, y)
    assert int(post.info.status) == gpc.Status.MAX_STEPS and not bool(post.info.converged)


def one_newton_step(X, y):
    """Laplace stopped after one Newton step at sigma_f^2 = 20, l = 2, its status only reported (throw=False): one
    compiled gpc.infer program, shared by the non-convergence test above and the bad-label test below."""
    kernel = gpc.kernels.SquaredExponential(variance=20.0, lengthscale=2.0)
    return gpc.infer(gpc.Laplace(max_steps=1), kernel, SOFTMAX, X, y, throw=False)


def test_float32_runs_without_nan(vehicle_small):
    X, y = vehicle_small
    theta = np.asarray(THETAS["per-class"], np.float32)
    value, grad = log_marginal_and_grad(theta, np.asarray(X, np.float32), y)
    value64, grad64 = log_marginal_and_grad(THETAS["per-class"], X, y)
    assert value.dtype == jnp.float32 and np.all(np.isfinite(grad))
    np.testing.assert_allclose(float(value), float(value64), rtol=1e-4)
    np.testing.assert_allclose(grad, grad64, rtol=2e-2, atol=2e-2)


check_four_labels = gpc.jit(lambda y: check_class_labels(y, 4, C, jnp.float64))  # one compilation per label dtype


@pytest.mark.parametrize(
    "y, message",
    [
        (np.array([0, 1, 3, 1]), "lie in 0..2"),
        (np.array([0, -1, 2, 1]), "lie in 0..2"),
        (np.array([0.0, 1.5, 2.0, 1.0]), "whole numbers"),
        (np.array([0.0, np.nan, 2.0, 1.0]), "whole numbers"),
        (np.array([True, False, True, True]), "integers"),
        (np.array([0, 1, 2]), "shape"),
    ],
)
def test_bad_labels_are_a_clear_error(y, message):
    """The label check that gpc.infer and gpc.fit run first, compiled on its own (cheap) and under jit."""
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(check_four_labels(y))


def test_bad_labels_raise_through_infer(vehicle_small):
    """An eager gpc.infer raises the label check (which runs before the solver, whatever its options; throw=False
    concerns only the solver's status), with the non-convergence test's compiled program."""
    X, y = vehicle_small
    bad = y.copy()
    bad[2] = 3
    with pytest.raises(Exception, match="lie in 0..2"):
        one_newton_step(X, bad)
    Y = np.asarray(check_four_labels(np.array([2, 0, 1, 1])))
    np.testing.assert_array_equal(Y, np.eye(C)[[2, 0, 1, 1]])


def test_unsupported_combinations_are_refused(vehicle_small):
    X = np.linspace(0, 1, 8).reshape(4, 2)
    y = np.array([0, 1, 2, 1])
    three = gpc.kernels.PerClass(gpc.kernels.SquaredExponential(variance=np.ones(3), lengthscale=np.ones(3)))
    for method in [gpc.EP(), gpc.JaakkolaJordan()]:  # MCMC, AIS, KL: test_softmax_sampling.py, test_kl_softmax.py
        with pytest.raises(ValueError, match=f"{type(method).__name__} does not support the multi-class Softmax"):
            gpc.infer(method, gpc.kernels.SquaredExponential(), SOFTMAX, X, y, key=jax.random.key(0))
    with pytest.raises(ValueError, match="PerClass kernel has 3 classes"):
        gpc.infer(gpc.Laplace(), three, gpc.likelihoods.Softmax(4), X, y)
    with pytest.raises(ValueError, match="PerClass"):
        gpc.infer(gpc.Laplace(), three, gpc.likelihoods.Logistic(), X, np.array([1, -1, 1, 1]))
    post = posterior(THETAS["per-class"], *vehicle_small)  # a PerClass posterior, from the other tests' program
    with pytest.raises(ValueError, match="key"):
        gpc.predict(post, vehicle_small[0])
    with pytest.raises(ValueError, match="num_classes"):
        gpc.likelihoods.Softmax(1)
    with pytest.raises(ValueError, match="same structure"):
        gpc.kernels.PerClass([gpc.kernels.SquaredExponential(), gpc.kernels.Linear()])
    assert isinstance(gpc.filter_jit(lambda p: p)(post), gpc.SoftmaxPosterior)
