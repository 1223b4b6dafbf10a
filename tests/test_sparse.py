"""Sparse (inducing-point) priors (FITC, VFE, power EP) for Laplace, EP, KL and the JJ lower bound, against dense
evaluations of the same sparse model.

The oracle for every method is the dense method run on the sparse prior's covariance K~ = Q + s diag(K - Q) as an
explicit n x n matrix (a separate code path: Cholesky factorisations of n x n matrices instead of the O(n m^2)
Woodbury forms), the dense inference on K itself when Z = X, SVGP's ELBO for VFE's collapsed bound, and central
finite differences for gradients.  Data: 40 standardised Ionosphere cases with three rows repeated.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import standardised_subset

import gpclass as gpc
from gpclass._inference._infer import solve
from gpclass._inference._jaakkola_jordan import jj_lambda

LOGISTIC, PROBIT = gpc.likelihoods.Logistic(), gpc.likelihoods.Probit()


def data():
    X, y = standardised_subset("ionosphere", 3, n=40)
    X[[5, 17, 30]] = X[[4, 16, 29]]  # repeated inputs
    return X, y


X, Y = data()
KERNEL = gpc.kernels.SquaredExponential(np.float64(2.0), np.float64(3.0))
Z = gpc.Sparse.from_data(KERNEL, X, 8, key=jax.random.key(0)).inducing


def dense_oracle(method, sparse, likelihood):
    """The dense method on K~ as an n x n matrix (no Woodbury identity anywhere)."""
    run = eqx.filter_jit(lambda K: solve(method, K, likelihood, jnp.asarray(Y, jnp.float64), None))
    return run(sparse.covariance(X).dense())


@functools.cache
def _operator_program():
    def run(s, w, r):
        op = gpc.Sparse(KERNEL, Z, approximation=s).covariance(X)
        f = op.factor(w)
        solves = f.solve_i_plus_wk(op, r), f.posterior_times(op, r), f.posterior_quadratic(op, r)
        return op.dense(), solves, f.half_log_det_b(op), f.power_log_det(op), f.posterior_variance(op), op.g
    return run


@pytest.mark.parametrize("s", [1.0, 0.0, 0.4])
def test_operator_matches_dense_linear_algebra(s):
    w = np.random.default_rng(0).uniform(0.0, 2.0, size=len(Y))
    w[3] = 0.0  # a site switched off
    r = np.arange(len(Y), dtype=np.float64)
    K, solves, half_log_det, power_log_det, variance, g = _operator_program()(s, jnp.asarray(w), jnp.asarray(r))
    K, g = np.asarray(K), np.asarray(g)
    sw = np.sqrt(w)
    B = np.eye(len(w)) + sw[:, None] * K * sw[None, :]
    n = len(w)
    np.testing.assert_allclose(solves[0], np.linalg.solve(np.eye(n) + w[:, None] * K, r), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(half_log_det, 0.5 * np.linalg.slogdet(B)[1], rtol=1e-12)
    t = g * w if s == 0.0 else np.log1p(s * g * w) / s
    np.testing.assert_allclose(power_log_det, 0.5 * np.linalg.slogdet(B)[1] + 0.5 * np.sum(t - np.log1p(s * g * w)),
                               rtol=1e-12)
    Sigma = K - (K * sw[None, :]) @ np.linalg.solve(B, sw[:, None] * K)
    np.testing.assert_allclose(variance, np.diag(Sigma), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(solves[1], Sigma @ r, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(solves[2], r @ Sigma @ r, rtol=1e-10)


@pytest.mark.parametrize("approximation", ["fitc", "vfe", 0.5])
def test_laplace_equals_dense_laplace_on_the_sparse_prior(approximation):
    sparse = gpc.Sparse(KERNEL, Z, approximation=approximation)
    post = gpc.infer(gpc.Laplace(), sparse, LOGISTIC, X, Y)
    dense = dense_oracle(gpc.Laplace(), sparse, LOGISTIC)
    np.testing.assert_allclose(post.mean, dense.mean, atol=1e-8)
    # GPML's power-EP log determinant: the dense log|B| plus 1/2 sum(t - log(1 + s g W)) (VFE: the trace term).
    s, g = sparse.power, np.asarray(sparse.covariance(X).g)
    W = np.asarray(LOGISTIC.derivatives(jnp.asarray(Y, jnp.float64), dense.mean)[2])
    t = g * W if s == 0.0 else np.log1p(s * g * W) / s
    expected = float(dense.log_marginal) - 0.5 * np.sum(t - np.log1p(s * g * W))
    np.testing.assert_allclose(post.log_marginal, expected, rtol=1e-10)


def test_ep_equals_dense_ep_on_the_fitc_prior():
    sparse = gpc.Sparse(KERNEL, Z)
    post = gpc.infer(gpc.EP(), sparse, PROBIT, X, Y)
    dense = dense_oracle(gpc.EP(tol=1e-12), sparse, PROBIT)
    np.testing.assert_allclose(post.log_marginal, dense.log_marginal, rtol=1e-9)
    np.testing.assert_allclose(post.mean, dense.mean, atol=1e-7)


def ringnorm_like(n, seed=0):
    """Breiman's ringnorm in 20 dimensions: N(0, 4 I) against N(a 1, I), a = 2 / sqrt(20)."""
    rng = np.random.default_rng(seed)
    y = np.where(rng.random(n) < 0.5, 1.0, -1.0)
    X = np.where(y[:, None] > 0, rng.normal(0.0, 2.0, (n, 20)), rng.normal(2.0 / np.sqrt(20), 1.0, (n, 20)))
    return X, y


@pytest.mark.parametrize("method, likelihood", [(gpc.Laplace(), LOGISTIC), (gpc.EP(), PROBIT),
                                                (gpc.JaakkolaJordan(), LOGISTIC)])
def test_a_stiff_fitc_prior_converges_to_the_dense_solution(method, likelihood):
    # sigma_f^2 = 10^4 with 300 cases: the largest eigenvalue of W^1/2 K~ W^1/2 is about 10^6.  Forms that
    # subtract (K~ + W^-1)^-1 K~ v from v lost that many digits: EP ran out of sweeps, Laplace and JJ were 1e-9
    # and 3e-8 off (at n = 10^5 ringnorm Laplace stalled at 50 % error).
    X_stiff, y_stiff = ringnorm_like(300)
    kernel = gpc.kernels.SquaredExponential(np.float64(1e4), np.float64(24.0))
    sparse = gpc.Sparse.from_data(kernel, X_stiff, 30, key=jax.random.key(0))
    post = gpc.infer(method, sparse, likelihood, X_stiff, y_stiff)  # raises unless CONVERGED
    K = sparse.covariance(jnp.asarray(X_stiff)).dense()
    dense = eqx.filter_jit(lambda K: solve(method, K, likelihood, jnp.asarray(y_stiff), None))(K)
    assert gpc.Status(int(dense.info.status)) == gpc.Status.CONVERGED
    np.testing.assert_allclose(post.log_marginal, dense.log_marginal, rtol=1e-10)


def test_kl_fitc_equals_dense_kl_on_the_fitc_prior():
    sparse = gpc.Sparse(KERNEL, Z)
    post = gpc.infer(gpc.KL(), sparse, LOGISTIC, X, Y)
    dense = dense_oracle(gpc.KL(), sparse, LOGISTIC)
    np.testing.assert_allclose(post.log_marginal, dense.log_marginal, rtol=1e-10)
    np.testing.assert_allclose(post.mean, dense.mean, atol=1e-7)


def test_expected_log_likelihood_derivatives_in_chunks_equal_one_pass():
    """The KL methods' quadrature derivatives are taken in chunks of cases (memory O(chunk x nodes)); the last
    chunk is padded.  Chunks of 7 for 40 cases (a padded last chunk) against one pass over all of them."""
    from gpclass._inference._expectations import expected_log_lik_derivatives, expected_log_lik_gradient
    rng = np.random.default_rng(0)
    m, s = jnp.asarray(rng.normal(size=len(Y))), jnp.asarray(rng.uniform(0.1, 3.0, size=len(Y)))
    y = jnp.asarray(Y, jnp.float64)
    for derivatives in (expected_log_lik_derivatives, expected_log_lik_gradient):
        run = jax.jit(functools.partial(derivatives, LOGISTIC), static_argnames="chunk")
        whole, chunked = run(y, m, s), run(y, m, s, chunk=7)
        for a, b in zip(whole, chunked, strict=True):
            np.testing.assert_allclose(b, a, rtol=1e-12, atol=1e-14)


def test_kl_vfe_is_the_svgp_bound_at_its_optimum():
    """VFE's ELBO equals SVGP's at the same q(u), and that q(u) is SVGP's optimum (zero gradient in mu and S)."""
    sparse = gpc.Sparse(KERNEL, Z, approximation="vfe")
    post = gpc.infer(gpc.KL(), sparse, LOGISTIC, X, Y)
    tau, nu = (np.asarray(a) for a in post.warm_start)
    V = np.asarray(sparse.covariance(X).Phi).T  # L_uu^-1 K_un
    S = np.linalg.inv(np.eye(len(Z)) + (V * tau) @ V.T)  # whitened q(v) of the sites

    @jax.jit
    def elbo_and_grads(mu, L):
        return jax.value_and_grad(lambda mu, L: gpc.SVGP(KERNEL, LOGISTIC, Z, mu, L, jitter=sparse.jitter).elbo(X, Y),
                                  argnums=(0, 1))(mu, L)

    elbo, grads = elbo_and_grads(S @ (V @ nu), np.linalg.cholesky(S))
    np.testing.assert_allclose(elbo, post.log_marginal, rtol=1e-12)
    assert float(jnp.max(jnp.abs(grads[0]))) < 1e-6 and float(jnp.max(jnp.abs(jnp.tril(grads[1])))) < 1e-6


def test_jaakkola_jordan_fitc_equals_dense_and_vfe_is_a_stationary_lower_bound():
    from gpclass._inference.jaakkola_jordan_sparse import lower_bound

    sparse = gpc.Sparse(KERNEL, Z)
    post = gpc.infer(gpc.JaakkolaJordan(), sparse, LOGISTIC, X, Y)
    dense = dense_oracle(gpc.JaakkolaJordan(), sparse, LOGISTIC)
    np.testing.assert_allclose(post.log_marginal, dense.log_marginal, rtol=1e-10)
    vfe = gpc.Sparse(KERNEL, Z, approximation="vfe")
    post = gpc.infer(gpc.JaakkolaJordan(), vfe, LOGISTIC, X, Y)
    # The bound of log sigmoid, averaged over VFE's q: at most VFE's ELBO, stationary in nu at the optimum.
    assert post.log_marginal < gpc.infer(gpc.KL(), vfe, LOGISTIC, X, Y).log_marginal
    stationarity = jax.jit(jax.grad(lower_bound, argnums=2))(vfe.covariance(X), jnp.asarray(Y, jnp.float64),
                                                             post.warm_start)
    assert float(jnp.max(jnp.abs(stationarity))) < 1e-8


@pytest.mark.parametrize("method, likelihood", [(gpc.Laplace(), LOGISTIC), (gpc.EP(), PROBIT),
                                                (gpc.JaakkolaJordan(), LOGISTIC)])
def test_inducing_at_the_inputs_recovers_the_dense_method(method, likelihood):
    """Z = X: Q = K up to the jitter (1e-10 here) and g = 0, so the sparse result is the dense one (KL: the FITC
    test above covers its dense oracle, at a second dense KL compilation less)."""
    post = gpc.infer(method, gpc.Sparse(KERNEL, X, approximation="vfe" if not isinstance(method, gpc.EP) else "fitc",
                                        jitter=1e-10), likelihood, X, Y)
    dense = gpc.infer(method, KERNEL, likelihood, X, Y)
    np.testing.assert_allclose(post.log_marginal, dense.log_marginal, rtol=1e-6)
    np.testing.assert_allclose(post.mean, dense.mean, atol=1e-5)


@pytest.mark.parametrize("method, likelihood, approximation", [
    (gpc.Laplace(), LOGISTIC, "fitc"), (gpc.Laplace(), LOGISTIC, "vfe"),
    (gpc.EP(), PROBIT, "fitc"), (gpc.KL(), LOGISTIC, "vfe"), (gpc.JaakkolaJordan(), LOGISTIC, "fitc"),
])
def test_predictions_match_the_dense_sparse_model(method, likelihood, approximation):
    """k** - Q_*n (K~ + W^-1)^-1 Q_n* and Q_*n K~^-1 mu, with K~ dense (GPML gp.m with apxSparse)."""
    sparse = gpc.Sparse(KERNEL, Z, approximation=approximation)
    post = gpc.infer(method, sparse, likelihood, X, Y)
    X_test = np.random.default_rng(1).normal(size=(6, X.shape[1]))
    mean, var = gpc.predict_latent(post, X_test)
    K_uu = np.array(KERNEL.gram(Z))
    K_uu += sparse.jitter * np.mean(np.diag(K_uu)) * np.eye(len(Z))
    Q_cross = np.asarray(KERNEL.gram(X_test, Z)) @ np.linalg.solve(K_uu, np.asarray(KERNEL.gram(Z, X)))
    if isinstance(method, gpc.Laplace):
        W = np.asarray(likelihood.derivatives(jnp.asarray(Y, jnp.float64), post.mean)[2])
    elif isinstance(method, gpc.JaakkolaJordan):
        W = 2.0 * np.asarray(jj_lambda(post.warm_start))
    else:
        W = np.asarray(post.warm_start[0])
    K = np.asarray(sparse.covariance(X).dense())
    # The mean weights a with K~ a = mu by least squares: for VFE K~ = Q is singular, but Q_*n vanishes on its
    # null space (that of K_un), so Q_*n a does not depend on which solution is taken.
    a = np.linalg.lstsq(K, np.asarray(post.mean), rcond=1e-13)[0]
    np.testing.assert_allclose(mean, Q_cross @ a, atol=1e-6)
    expected_var = np.asarray(KERNEL.diag(X_test)) - np.diag(Q_cross @ np.linalg.solve(K + np.diag(1.0 / W), Q_cross.T))
    np.testing.assert_allclose(var, expected_var, rtol=1e-9, atol=1e-12)
    p = gpc.predict(post, X_test)
    assert p.shape == (6,) and np.all((p > 0) & (p < 1))


def test_fit_moves_the_inducing_inputs_and_raises_the_objective():
    sparse = gpc.Sparse(KERNEL, Z)
    start = gpc.infer(gpc.Laplace(), sparse, LOGISTIC, X, Y).log_marginal
    result = gpc.fit(gpc.Laplace(), sparse, LOGISTIC, X, Y, max_steps=15)
    assert isinstance(result.kernel, gpc.Sparse) and isinstance(result.posterior, gpc.SparsePosterior)
    assert result.objective > start
    assert float(jnp.max(jnp.abs(result.kernel.inducing - Z))) > 1e-3
    assert np.any(np.asarray(result.kernel.inducing) < 0)  # on their own scale: no log transform
    assert gpc.Status(int(result.status)) in (gpc.Status.CONVERGED, gpc.Status.MAX_STEPS)
    refit = gpc.infer(gpc.Laplace(), result.kernel, LOGISTIC, X, Y).log_marginal
    np.testing.assert_allclose(refit, result.objective, rtol=1e-10)
    fixed = gpc.fit(gpc.Laplace(), gpc.Sparse(KERNEL, Z, fit_inducing=False), LOGISTIC, X, Y, max_steps=15)
    np.testing.assert_array_equal(fixed.kernel.inducing, Z)
    assert fixed.objective > start and fixed.kernel.kernel.lengthscale != KERNEL.lengthscale


def test_vmap_over_label_sets_equals_separate_calls():
    sparse = gpc.Sparse(KERNEL, Z)
    ys = np.stack([Y, -Y])
    batched = jax.vmap(lambda y: gpc.infer(gpc.Laplace(), sparse, LOGISTIC, X, y).log_marginal)(ys)
    for b, y in zip(batched, ys):
        np.testing.assert_allclose(b, gpc.infer(gpc.Laplace(), sparse, LOGISTIC, X, y).log_marginal, rtol=1e-12)


def test_float32_matches_float64():
    X32, Y32, Z32 = (np.asarray(a, np.float32) for a in (X, Y, Z))
    kernel32 = gpc.kernels.SquaredExponential(np.float32(2.0), np.float32(3.0))
    post32 = gpc.infer(gpc.Laplace(), gpc.Sparse(kernel32, Z32), LOGISTIC, X32, Y32)
    post64 = gpc.infer(gpc.Laplace(), gpc.Sparse(KERNEL, Z), LOGISTIC, X, Y)
    assert post32.log_marginal.dtype == jnp.float32
    np.testing.assert_allclose(post32.log_marginal, post64.log_marginal, rtol=5e-4)


def test_kmeans_plus_plus_picks_distinct_rows_reproducibly():
    a = gpc.Sparse.from_data(KERNEL, X, 8, key=jax.random.key(0)).inducing
    b = gpc.Sparse.from_data(KERNEL, X, 8, key=jax.random.key(0)).inducing
    np.testing.assert_array_equal(a, b)
    rows = {tuple(np.asarray(r)) for r in a}
    assert len(rows) == 8 and rows <= {tuple(r) for r in X}


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(ValueError, match="dimensions"):
        gpc.infer(gpc.Laplace(), gpc.Sparse(KERNEL, Z[:, :3]), LOGISTIC, X, Y)
    with pytest.raises(ValueError, match="at most as many"):
        gpc.infer(gpc.Laplace(), gpc.Sparse(KERNEL, np.concatenate([X, X[:1]])), LOGISTIC, X, Y)
    with pytest.raises(ValueError, match="approximation"):
        gpc.Sparse(KERNEL, Z, approximation="dtc")
    with pytest.raises(ValueError, match="power"):
        gpc.Sparse(KERNEL, Z, approximation=1.5)
    with pytest.raises(ValueError, match="FITC only"):
        gpc.infer(gpc.EP(), gpc.Sparse(KERNEL, Z, approximation="vfe"), PROBIT, X, Y)
    with pytest.raises(ValueError, match="does not support a sparse prior"):
        gpc.infer(gpc.JaakkolaJordanUpper(), gpc.Sparse(KERNEL, Z), LOGISTIC, X, Y)
    with pytest.raises(ValueError, match="does not support a sparse prior"):
        gpc.infer(gpc.MCMC(num_samples=2), gpc.Sparse(KERNEL, Z), LOGISTIC, X, Y, key=jax.random.key(0))
    with pytest.raises(ValueError, match="sparse prior is not supported by EM-EP"):
        gpc.fit_em_ep(gpc.EP(), gpc.Sparse(KERNEL, Z), PROBIT, X, Y, adapt_epsilon=False)
    bad = np.asarray(Z).copy()
    bad[0, 0] = np.nan
    with pytest.raises(eqx.EquinoxRuntimeError, match="inducing"):
        gpc.infer(gpc.Laplace(), gpc.Sparse(KERNEL, bad), LOGISTIC, X, Y)
