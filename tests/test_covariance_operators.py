"""The prior covariance operators (``gpclass._covariance``) against NumPy built from kernel blocks, the one
Laplace algorithm on every operator (FITC gradients against finite differences, the float32 start under a
sparse prior), posteriors that predict, and refusals that name the method and the prior.

The oracle matrices come from the kernel's own blocks K_nn, K_nu, K_uu, assembled in NumPy (Q = K_nu K_uu^-1 K_un,
K~ = Q + s diag(K_nn - Q)): never from the operator under test, so a wrong FITC diagonal would fail here.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FAST_COMPILE, assert_directional_derivatives, toy_data

import gpclass as gpc
from gpclass._covariance import DenseCovariance

X, Y = toy_data(n=24, d=2, seed=3)
Z = X[::3]
KERNEL = gpc.kernels.SquaredExponential(np.float64(1.7), np.float64(0.9))
LIK = gpc.likelihoods.Logistic()
RNG = np.random.default_rng(7)
W = RNG.uniform(0.0, 0.3, size=len(Y))
V = RNG.normal(size=len(Y))


def sparse_oracle(power, jitter=1e-6):
    """K~ = Q + s diag(K_nn - Q) and K_nn - Q's diagonal, in NumPy from the kernel's blocks."""
    K_nn = np.asarray(KERNEL.gram(jnp.asarray(X)))
    K_nu = np.asarray(KERNEL.gram(jnp.asarray(X), jnp.asarray(Z)))
    K_uu = np.asarray(KERNEL.gram(jnp.asarray(Z)))
    K_uu = K_uu + jitter * np.mean(np.diag(K_uu)) * np.eye(len(Z))
    Q = K_nu @ np.linalg.solve(K_uu, K_nu.T)
    g = np.diag(K_nn) - np.diag(Q)
    return Q + power * np.diag(g), g


@pytest.mark.parametrize("approximation, power", [("fitc", 1.0), ("vfe", 0.0), (0.4, 0.4)])
@pytest.mark.slow
def test_low_rank_operator_against_numpy_from_kernel_blocks(approximation, power):
    op = gpc.Sparse(KERNEL, Z, approximation=approximation).covariance(jnp.asarray(X))
    K, g = sparse_oracle(power)
    np.testing.assert_allclose(op.mv(V), K @ V, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(op.diagonal(), np.diag(K), rtol=1e-10, atol=1e-12)
    factor = op.factor(jnp.asarray(W))
    np.testing.assert_allclose(factor.solve_i_plus_wk(op, V), np.linalg.solve(np.eye(len(V)) + W[:, None] * K, V),
                               rtol=1e-9, atol=1e-11)
    sw = np.sqrt(W)
    half_log_det = 0.5 * np.linalg.slogdet(np.eye(len(V)) + sw[:, None] * K * sw[None, :])[1]
    np.testing.assert_allclose(factor.half_log_det_b(op), half_log_det, rtol=1e-10)
    # GPML's ldB2 for power EP: 1/2 log|I + W^1/2 Q W^1/2 + s G W| ... as sum log L_ii + 1/2 sum log(1 + s g W) / s.
    K_q, _ = sparse_oracle(0.0)
    expected = 0.5 * np.linalg.slogdet(np.eye(len(V)) + sw[:, None] * K_q * sw[None, :] / (1 + power * g * W)[:, None]
                                       )[1] + 0.5 * np.sum(g * W if power == 0 else np.log1p(power * g * W) / power)
    np.testing.assert_allclose(factor.power_log_det(op), expected, rtol=1e-10)


@pytest.mark.parametrize("approximation", [None, "fitc", "vfe", 0.4])
def test_sites_covariance_against_numpy(approximation):
    """Sigma = (K^-1 + W)^-1 of every operator by its products, against NumPy's K (I + W K)^-1 (K from kernel
    blocks), with one site switched off."""
    w = W.copy()
    w[2] = 0.0
    if approximation is None:
        op, K = KERNEL.covariance(jnp.asarray(X)), np.asarray(KERNEL.gram(jnp.asarray(X)))
    else:
        op = gpc.Sparse(KERNEL, Z, approximation=approximation).covariance(jnp.asarray(X))
        K = sparse_oracle({"fitc": 1.0, "vfe": 0.0}.get(approximation, approximation))[0]
    Sigma = np.linalg.solve(np.eye(len(V)) + K * w[None, :], K)  # (I + K W)^-1 K = K (I + W K)^-1
    for cov in (op.factor(jnp.asarray(w)).covariance(op), op.factor(jnp.asarray(w)).covariance(op).formed()):
        np.testing.assert_allclose(cov.times(V), Sigma @ V, rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(cov.squared_times(V), Sigma**2 @ V, rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(cov.variance(), np.diag(Sigma), rtol=1e-9, atol=1e-11)
        np.testing.assert_allclose(cov.quadratic(V), V @ Sigma @ V, rtol=1e-9)
        assert cov.has_matrix == (approximation is None)
        if cov.has_matrix:
            np.testing.assert_allclose(cov.matrix(), Sigma, rtol=1e-9, atol=1e-11)


def test_dense_operator_against_numpy():
    K = np.asarray(KERNEL.gram(jnp.asarray(X)))
    op = KERNEL.covariance(jnp.asarray(X))
    assert isinstance(op, DenseCovariance)
    np.testing.assert_allclose(op.mv(V), K @ V, rtol=1e-12)
    np.testing.assert_allclose(op.abs_mv(np.abs(V)), np.abs(K) @ np.abs(V), rtol=1e-12)
    factor = op.factor(jnp.asarray(W))
    np.testing.assert_allclose(factor.solve_i_plus_wk(op, V), np.linalg.solve(np.eye(len(V)) + W[:, None] * K, V),
                               rtol=1e-10)
    sw = np.sqrt(W)
    np.testing.assert_allclose(factor.power_log_det(op),
                               0.5 * np.linalg.slogdet(np.eye(len(V)) + sw[:, None] * K * sw[None, :])[1], rtol=1e-12)


@pytest.mark.parametrize("method", [gpc.Laplace(), gpc.KL(), gpc.JaakkolaJordan()], ids=["Laplace", "KL", "JJ"])
@pytest.mark.parametrize("approximation", ["fitc", "vfe"])
@pytest.mark.slow
def test_sparse_log_q_gradients_against_finite_differences(method, approximation):
    """d log q / d(log variance, log length scale, inducing inputs) under FITC and VFE, on duplicate rows."""
    X_dup = np.concatenate([X, X[:4]])
    y_dup = np.concatenate([Y, Y[:4]])

    @gpc.jit(compiler_options=FAST_COMPILE)
    @jax.value_and_grad
    def log_q(params):
        kernel = gpc.kernels.SquaredExponential(jnp.exp(params["log_v"]), jnp.exp(params["log_l"]))
        prior = gpc.Sparse(kernel, params["Z"], approximation=approximation)
        return gpc.infer(method, prior, LIK, X_dup, y_dup).log_marginal

    params = {"log_v": np.float64(0.4), "log_l": np.float64(-0.2), "Z": np.asarray(Z)}
    assert_directional_derivatives(log_q, params, directions=2, h=1e-5, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_laplace_float32_start_under_a_sparse_prior_gives_the_same_mode():
    """float32_start=True now works with any operator: the float64 mode, log q and gradient are unchanged."""

    def solve(method):
        @gpc.jit(compiler_options=FAST_COMPILE)
        def run(log_v):
            def log_q(log_v):
                kernel = gpc.kernels.SquaredExponential(jnp.exp(log_v), np.float64(0.9))
                post = gpc.infer(method, gpc.Sparse(kernel, Z), LIK, X, Y)
                return post.log_marginal, post.mean
            (value, mean), grad = jax.value_and_grad(log_q, has_aux=True)(log_v)
            return value, grad, mean
        return run(np.float64(0.5))

    value, grad, mean = solve(gpc.Laplace(float32_start=True))
    value0, grad0, mean0 = solve(gpc.Laplace())
    np.testing.assert_allclose(value, value0, rtol=1e-12)
    np.testing.assert_allclose(grad, grad0, rtol=1e-8)
    np.testing.assert_allclose(mean, mean0, rtol=1e-8, atol=1e-10)


@pytest.mark.slow
def test_every_posterior_predicts_as_the_functions_do():
    """post.predict / post.latent are gpc.predict / gpc.predict_latent, for every kind of posterior."""
    softmax = gpc.likelihoods.Softmax(3)
    classes = np.digitize(X[:, 0], np.quantile(X[:, 0], [1 / 3, 2 / 3]))
    key = jax.random.key(0)
    posteriors = [
        gpc.infer(gpc.Laplace(), KERNEL, LIK, X, Y),
        gpc.infer(gpc.Laplace(), gpc.Sparse(KERNEL, Z), LIK, X, Y),
        gpc.infer(gpc.Laplace(), KERNEL, softmax, X, classes),
        gpc.infer(gpc.Laplace(), gpc.Sparse(KERNEL, Z), softmax, X, classes),
        gpc.infer(gpc.MCMC(num_samples=20, num_warmup=5, num_chains=2), KERNEL, LIK, X, Y, key=key),
        gpc.SVGP.at_prior(KERNEL, LIK, Z),
    ]
    for post in posteriors:
        assert isinstance(post, gpc.AbstractPosterior)
        for a, b in zip(jax.tree.leaves(post.latent(X[:5])), jax.tree.leaves(gpc.predict_latent(post, X[:5]))):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(post.predict(X[:5], key=key), gpc.predict(post, X[:5], key=key))


@pytest.mark.slow
def test_refusals_name_the_method_and_the_prior():
    """Sparse EP ran its parallel update whatever schedule and order said; now the combination is refused."""
    prior = gpc.Sparse(KERNEL, Z)
    with pytest.raises(gpc.GPClassError, match=r"EP\(schedule='sequential'\) needs the prior covariance as a dense "
                                               r"n x n matrix.*LowRankCovariance \(a sparse prior, gpc.Sparse, FITC\)"):
        gpc.infer(gpc.EP(schedule="sequential"), prior, gpc.likelihoods.Probit(), X, Y)
    with pytest.raises(gpc.GPClassError, match=r"EP\(order='random'\).*sparse prior"):
        gpc.infer(gpc.EP(order="random"), prior, gpc.likelihoods.Probit(), X, Y, key=jax.random.key(0))
    with pytest.raises(gpc.GPClassError, match="parallel schedule updates every site at once and has no order"):
        gpc.EP(schedule="parallel", order="random")
    default = gpc.infer(gpc.EP(), prior, gpc.likelihoods.Probit(), X, Y)  # the parallel schedule, as before
    parallel = gpc.infer(gpc.EP(schedule="parallel"), prior, gpc.likelihoods.Probit(), X, Y)
    assert float(default.log_marginal) == float(parallel.log_marginal)


@pytest.mark.slow
def test_label_noise_ep_under_fitc_equals_dense_ep_on_the_numpy_fitc_matrix():
    """EP with a likelihood that is not log-concave under FITC (refused before the one implicit adjoint): log q
    and its gradient equal dense EP's on K~ assembled in NumPy from kernel blocks (a Precomputed kernel), and the
    gradient equals central differences."""
    likelihood = gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), 0.1)
    K_fitc, _ = sparse_oracle(1.0)
    items = np.arange(len(Y), dtype=np.float64)[:, None]
    sparse = gpc.infer(gpc.EP(tol=1e-12), gpc.Sparse(KERNEL, Z), likelihood, X, Y)
    dense = gpc.infer(gpc.EP(schedule="parallel", tol=1e-12), gpc.kernels.Precomputed(K_fitc), likelihood, items, Y)
    np.testing.assert_allclose(sparse.log_marginal, dense.log_marginal, rtol=1e-10)
    np.testing.assert_allclose(sparse.mean, dense.mean, rtol=1e-8, atol=1e-10)  # q(f) at the training cases

    @gpc.jit(compiler_options=FAST_COMPILE)
    @jax.value_and_grad
    def log_q(params):
        kernel = gpc.kernels.SquaredExponential(jnp.exp(params["log_v"]), jnp.exp(params["log_l"]))
        noisy = gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), params["epsilon"])
        return gpc.infer(gpc.EP(tol=1e-12), gpc.Sparse(kernel, Z), noisy, X, Y).log_marginal

    params = {"log_v": np.float64(0.4), "log_l": np.float64(-0.2), "epsilon": np.float64(0.1)}
    assert_directional_derivatives(log_q, params, directions=2, h=1e-5, rtol=1e-5, atol=1e-7)


@pytest.mark.slow
def test_precomputed_gram_matrix_runs_under_every_method_as_its_kernel_does():
    """A user's Gram matrix over items (``gpc.kernels.Precomputed``) against the kernel that made it: the same
    log q and predictions under every method, the gradient in K by finite differences, and clear refusals."""
    X_all = np.concatenate([X, X[:3] + 0.1])  # 24 training and 3 test items
    K_all = np.asarray(KERNEL.gram(jnp.asarray(X_all)))
    train, test = np.arange(len(Y), dtype=np.float64)[:, None], np.arange(len(Y), len(X_all), dtype=np.float64)[:, None]
    precomputed = gpc.kernels.Precomputed(K_all)
    key = jax.random.key(0)
    methods = [gpc.Laplace(), gpc.EP(), gpc.KL(), gpc.JaakkolaJordan(), gpc.JaakkolaJordanUpper(),
               gpc.MCMC(num_samples=20, num_warmup=5, num_chains=1)]
    for method in methods:
        @gpc.jit(compiler_options=FAST_COMPILE)
        def both(X, X_test, train, test, method=method):  # one program per method: the kernel's and the items'
            by_kernel = gpc.infer(method, KERNEL, LIK, X, Y, key=key)
            by_items = gpc.infer(method, precomputed, LIK, train, Y, key=key)
            return ((by_kernel.log_marginal, by_kernel.predict(X_test, key=key)),
                    (by_items.log_marginal, by_items.predict(test, key=key)))

        (log_q, p), (log_q_items, p_items) = both(X, X_all[len(Y):], train, test)
        np.testing.assert_allclose(log_q_items, log_q, rtol=1e-12, err_msg=repr(method))
        np.testing.assert_allclose(p_items, p, rtol=1e-10, err_msg=repr(method))
        if method == gpc.Laplace():
            laplace_p = p
    classes = np.arange(len(Y)) % 3
    softmax = gpc.likelihoods.Softmax(3)

    @gpc.jit(compiler_options=FAST_COMPILE)
    def softmax_and_blocks(X, train, test, blocks):
        by_kernel = gpc.infer(gpc.Laplace(), KERNEL, softmax, X, classes).log_marginal
        by_items = gpc.infer(gpc.Laplace(), precomputed, softmax, train, classes).log_marginal
        return by_kernel, by_items, gpc.infer(gpc.Laplace(), blocks, LIK, train, Y).predict(test)

    # from_blocks: what prediction needs, the unknown test-by-test covariances NaN.
    blocks = gpc.kernels.Precomputed.from_blocks(K_all[:24, :24], K_all[:24, 24:], np.diag(K_all)[24:])
    by_kernel, by_items, p_blocks = softmax_and_blocks(X, train, test, blocks)
    np.testing.assert_allclose(by_items, by_kernel, rtol=1e-12)
    np.testing.assert_allclose(p_blocks, laplace_p, rtol=1e-10)
    assert np.isnan(np.asarray(blocks.K)[24, 25])

    @gpc.jit(compiler_options=FAST_COMPILE)
    @jax.value_and_grad
    def log_q(K):
        return gpc.infer(gpc.KL(), gpc.kernels.Precomputed(K), LIK, train, Y).log_marginal

    direction = RNG.normal(size=(len(Y), len(Y)))
    K_train = K_all[:24, :24]
    h = 1e-6
    sym = direction + direction.T
    grad = log_q(K_train)[1]
    fd = (log_q(K_train + h * sym)[0] - log_q(K_train - h * sym)[0]) / (2 * h)
    np.testing.assert_allclose(float(jnp.vdot(grad, sym)), fd, rtol=1e-6)
    with pytest.raises(gpc.GPClassError, match="item numbers 0..26"):
        gpc.infer(gpc.Laplace(), precomputed, LIK, train + 10, Y)
    post = gpc.infer(gpc.Laplace(), blocks, LIK, train, Y)
    with pytest.raises(gpc.GPClassError, match="item numbers 0..26"):
        post.predict(np.array([[2.5]]))
    with pytest.raises(gpc.GPClassError, match="square Gram matrix"):
        gpc.kernels.Precomputed(K_all[:3])
