"""Jaakkola-Jordan bounds (Gibbs & MacKay 2000) and Gaussian KL inference against independent truths."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, special, stats

import gpclass as gpc
from conftest import central_difference, se_kernel
from gpclass.inference.jaakkola_jordan import jj_lambda

LOGISTIC, PROBIT = gpc.likelihoods.Logistic(), gpc.likelihoods.Probit()
LOWER, UPPER = gpc.JaakkolaJordan(bound="lower"), gpc.JaakkolaJordan(bound="upper")
METHODS = {"jj-lower": LOWER, "jj-upper": UPPER, "kl": gpc.KL()}


@jax.jit
def posterior(method, log_variance, log_lengthscale, lik, X, y):
    return gpc.infer(method, se_kernel(log_variance, log_lengthscale), lik, X, y)


def log_marginal(method, log_variance, log_lengthscale, lik, X, y):
    return posterior(method, log_variance, log_lengthscale, lik, X, y).log_marginal


log_marginal_and_grad = jax.jit(
    jax.value_and_grad(lambda m, v, l, lik, X, y: gpc.infer(m, se_kernel(v, l), lik, X, y).log_marginal, (1, 2))
)


# --- dense references ------------------------------------------------------------------------------


def np_se(X, variance, lengthscale, X2=None):
    X2 = X if X2 is None else X2
    d = (X[:, None, :] - X2[None, :, :]) / lengthscale
    return variance * np.exp(-0.5 * np.sum(d**2, -1))


def exact_log_z(K, y, lik=LOGISTIC):
    """log int prod_i p(y_i|f_i) N(f|0, K) df: adaptive quadrature for n = 1, a dense tensor
    Gauss-Hermite rule (120 nodes per dimension, whitened coordinates) for n = 2, 3."""
    n = len(y)
    log_p = lambda y_, f: np.asarray(lik.log_prob(jnp.asarray(y_), jnp.asarray(f)))
    if n == 1:
        s = np.sqrt(K[0, 0])
        value = integrate.quad(lambda f: np.exp(log_p(y, np.array([f]))[0]) * stats.norm.pdf(f, 0, s),
                               -14 * s, 14 * s, points=[0.0], limit=500, epsabs=0, epsrel=1e-13)[0]
        return np.log(value)
    z, w = np.polynomial.hermite_e.hermegauss(120 if n == 2 else 60)
    w = w / np.sqrt(2 * np.pi)
    Z = np.stack(np.meshgrid(*([z] * n), indexing="ij"), -1).reshape(-1, n)
    Wt = np.prod(np.stack(np.meshgrid(*([w] * n), indexing="ij"), -1).reshape(-1, n), axis=1)
    F = Z @ np.linalg.cholesky(K).T
    return np.log(np.sum(Wt * np.exp(log_p(np.tile(y, (len(F), 1)), F).sum(1))))


def np_jj_lower(K, y, nu):
    """Gibbs & MacKay eq. 34 re-derived, with explicit inverses: the Gaussian integral of prod Q_n N(a|0, C)."""
    lam = np.tanh(nu / 2) / (4 * nu)
    d = y / 2
    Sigma = np.linalg.inv(np.linalg.inv(K) + np.diag(2 * lam))
    const = np.sum(-np.logaddexp(0, -nu) - nu / 2 + lam * nu**2)
    return const + 0.5 * d @ Sigma @ d - 0.5 * np.linalg.slogdet(np.eye(len(y)) + 2 * lam[:, None] * K)[1], Sigma


def random_problem(n, seed, stiff=False):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    y = rng.choice([-1.0, 1.0], size=n)
    variance = rng.uniform(20.0, 60.0) if stiff else rng.uniform(0.3, 4.0)
    return X, y, variance, rng.uniform(0.5, 2.0)


# --- the bounds bracket the exact evidence ---------------------------------------------------------


@pytest.mark.parametrize("stiff", [False, True], ids=["moderate", "stiff"])
@pytest.mark.parametrize("n", [1, 2, 3])
def test_bounds_bracket_the_exact_log_evidence(n, stiff):
    for seed in range(3):
        X, y, variance, lengthscale = random_problem(n, 10 * n + seed, stiff)
        K = np_se(X, variance, lengthscale)
        exact = exact_log_z(K, y)
        args = (np.log(variance), np.log(lengthscale), LOGISTIC, X, y)
        lower, upper, kl = (float(log_marginal(METHODS[m], *args)) for m in ("jj-lower", "jj-upper", "kl"))
        assert lower <= kl + 1e-9, "the Gaussian ELBO optimum can only be tighter than Jaakkola-Jordan"
        assert kl <= exact + 1e-9
        assert exact <= upper + 1e-9
        if not stiff:
            assert exact - lower < 0.1 * n and upper - exact < 1.0 * n  # bounds, but not vacuous ones


def test_lower_bound_of_a_single_case_is_the_gaussian_integral_of_q():
    """n = 1: Z' = int g(nu) exp[(y a - nu)/2 - lambda (a^2 - nu^2)] N(a|0, k) da, by quadrature at the optimal nu."""
    k, y = 2.7, np.array([-1.0])
    post = posterior(LOWER, np.log(k), 0.0, LOGISTIC, np.zeros((1, 1)), y)
    nu = float(post.warm_start[0])
    lam = np.tanh(nu / 2) / (4 * nu)
    Q = lambda a: special.expit(nu) * np.exp((y[0] * a - nu) / 2 - lam * (a**2 - nu**2))
    z = integrate.quad(lambda a: Q(a) * stats.norm.pdf(a, 0, np.sqrt(k)), -40, 40, epsrel=1e-13)[0]
    assert float(post.log_marginal) == pytest.approx(np.log(z), rel=1e-10)
    # ... and nu^2 = E_q[a^2] under the normalised q(a) proportional to Q(a) N(a|0, k).
    second = integrate.quad(lambda a: a**2 * Q(a) * stats.norm.pdf(a, 0, np.sqrt(k)), -40, 40, epsrel=1e-13)[0] / z
    assert nu**2 == pytest.approx(second, rel=1e-8)


def test_sigmoid_bounds_touch_where_the_theory_says():
    """Q(a; nu) <= g(a) <= R(a; mu), with equality at nu = |a| (eq. 8) and at mu = g(-a) (eq. 9)."""
    a = np.linspace(-12, 12, 97)
    nu = np.array([0.0, 0.5, 2.0, 8.0])[:, None]
    lam = np.asarray(jj_lambda(jnp.asarray(nu)))
    log_q = -np.logaddexp(0, -nu) + (a - nu) / 2 - lam * (a**2 - nu**2)
    assert np.all(log_q <= -np.logaddexp(0, -a) + 1e-12)
    lam_a = np.asarray(jj_lambda(jnp.asarray(np.abs(a))))
    log_q_touch = -np.logaddexp(0, -np.abs(a)) + (a - np.abs(a)) / 2 - lam_a * 0.0
    np.testing.assert_allclose(log_q_touch, -np.logaddexp(0, -a), rtol=1e-12, atol=1e-14)
    # A prior that is nearly a point mass at 0 makes the optimised lower bound exact: log Z' -> -log 2.
    post = posterior(LOWER, np.log(1e-10), 0.0, LOGISTIC, np.zeros((2, 1)), np.array([1.0, -1.0]))
    assert float(post.log_marginal) == pytest.approx(-2 * np.log(2.0), abs=1e-9)


# --- optimality conditions and closed forms ---------------------------------------------------------


def test_lower_bound_optimum_is_stationary_and_matches_the_dense_formula(ionosphere_small):
    X, y = ionosphere_small
    post = posterior(LOWER, np.log(3.0), np.log(4.0), LOGISTIC, X, y)
    assert bool(post.info.converged)
    K = np_se(X, 3.0, 4.0)
    nu = np.asarray(post.warm_start)
    dense, Sigma = np_jj_lower(K, y, nu)
    assert float(post.log_marginal) == pytest.approx(dense, rel=1e-11)
    m = Sigma @ (y / 2)
    np.testing.assert_allclose(nu**2, np.diag(Sigma) + m**2, rtol=1e-8)  # nu_n^2 = E_q[a_n^2]
    np.testing.assert_allclose(post.mean, m, rtol=1e-8, atol=1e-10)
    from gpclass.inference.jaakkola_jordan import lower_bound

    grad_nu = jax.grad(lambda v: lower_bound(jnp.asarray(K), jnp.asarray(y), v))(jnp.asarray(nu))
    assert np.max(np.abs(grad_nu)) < 1e-8


def test_upper_bound_optimum_is_stationary(ionosphere_small):
    X, y = ionosphere_small
    post = posterior(UPPER, np.log(3.0), np.log(4.0), LOGISTIC, X, y)
    assert bool(post.info.converged)
    K = np_se(X, 3.0, 4.0)
    mu = special.expit(np.asarray(post.warm_start))
    b = y * mu
    np.testing.assert_allclose(mu, special.expit(-y * (K @ b)), rtol=1e-9)  # eq. 39 = 0
    entropy = -mu * np.log(mu) - (1 - mu) * np.log1p(-mu)
    assert float(post.log_marginal) == pytest.approx(-entropy.sum() + 0.5 * b @ K @ b, rel=1e-12)


@pytest.mark.parametrize("lik", [LOGISTIC, PROBIT], ids=["logistic", "probit"])
def test_kl_optimum_satisfies_its_fixed_point_and_equals_the_jensen_bound(lik, ionosphere_small):
    """Opper & Archambeau: alpha = dE/dm, lambda = -2 dE/dv at the optimum; the ELBO computed in the site form
    equals gpc.variational_bound (a separate dense implementation) at the KL posterior, and exceeds it at the
    Laplace and EP posteriors (the KL optimum maximises it)."""
    X, y = ionosphere_small
    args = (np.log(3.0), np.log(4.0), lik, X, y)
    post = posterior(gpc.KL(), *args)
    assert bool(post.info.converged)
    K = np_se(X, 3.0, 4.0)
    lam = np.asarray(post.sqrt_w) ** 2
    V = np.linalg.inv(np.linalg.inv(K) + np.diag(lam))
    m = np.asarray(post.mean)
    g_m, g_v = jax.grad(lambda m, v: jnp.sum(lik.expected_log_prob(jnp.asarray(y), m, v)), (0, 1))(
        jnp.asarray(m), jnp.asarray(np.diag(V))
    )
    np.testing.assert_allclose(np.linalg.solve(K, m), g_m, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(lam, -2 * np.asarray(g_v), rtol=1e-6, atol=1e-8)
    elbo = float(post.log_marginal)
    assert float(gpc.variational_bound(post, y)) == pytest.approx(elbo, rel=1e-9)
    for other in (gpc.Laplace(), gpc.EP()):
        assert float(gpc.variational_bound(posterior(other, *args), y)) < elbo


# --- gradients: envelope theorem against finite differences of the re-optimised bound ---------------


@pytest.mark.parametrize("ard", [False, True], ids=["iso", "ard"])
@pytest.mark.parametrize("name", ["jj-lower", "jj-upper", "kl"])
def test_gradient_matches_finite_differences(name, ard, pima_small):
    X, y = pima_small
    method, lik = METHODS[name], LOGISTIC
    log_v, log_l = np.log(2.0), np.log(2.5)
    if ard:
        log_l = log_l + 0.1 * np.arange(X.shape[1])
    _, (g_v, g_l) = log_marginal_and_grad(method, log_v, log_l, lik, X, y)
    fd_v = central_difference(lambda t: float(log_marginal(method, t[0], log_l, lik, X, y)), log_v)
    fd_l = central_difference(lambda t: float(log_marginal(method, log_v, t if ard else t[0], lik, X, y)), log_l)
    np.testing.assert_allclose(g_v, fd_v[0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.atleast_1d(g_l), fd_l, rtol=1e-6, atol=1e-7)


def test_kl_gradient_with_probit(pima_small):
    X, y = pima_small
    _, (g_v, g_l) = log_marginal_and_grad(gpc.KL(), 1.0, 0.5, PROBIT, X, y)
    fd = central_difference(lambda t: float(log_marginal(gpc.KL(), t[0], t[1], PROBIT, X, y)), [1.0, 0.5])
    np.testing.assert_allclose([g_v, g_l], fd, rtol=1e-6, atol=1e-7)


# --- predictions ------------------------------------------------------------------------------------


def test_predictions_match_gibbs_mackay_eqs_17_18_and_26(ionosphere_small):
    X, y = ionosphere_small
    X_train, y_train, X_test = X[:40], y[:40], X[40:]
    K = np_se(X_train, 3.0, 4.0)
    k = np_se(X_test, 3.0, 4.0, X_train)
    kappa = np.full(len(X_test), 3.0)
    lower = posterior(LOWER, np.log(3.0), np.log(4.0), LOGISTIC, X_train, y_train)
    lam = np.asarray(jj_lambda(lower.warm_start))
    H = np.eye(len(y_train)) + 2 * lam[:, None] * K  # eq. 19
    mean, var = gpc.predict_latent(lower, X_test)
    np.testing.assert_allclose(mean, k @ np.linalg.solve(H, y_train / 2), rtol=1e-9)  # eq. 17
    np.testing.assert_allclose(var, kappa - 2 * np.einsum("ij,ij->i", k, np.linalg.solve(H, lam[:, None] * k.T).T),
                               rtol=1e-9)  # eq. 18 with its minus sign restored
    upper = posterior(UPPER, np.log(3.0), np.log(4.0), LOGISTIC, X_train, y_train)
    b = y_train * special.expit(np.asarray(upper.warm_start))
    mean_u, var_u = gpc.predict_latent(upper, X_test)
    np.testing.assert_allclose(mean_u, k @ b, rtol=1e-9)  # the marginal of eq. 26
    np.testing.assert_allclose(var_u, kappa, rtol=1e-12)
    for post in (lower, upper):
        p = gpc.predict(post, X_test)
        m, v = gpc.predict_latent(post, X_test)
        np.testing.assert_allclose(gpc.predict(post, X_test, approximation="mackay"),
                                   special.expit(m / np.sqrt(1 + np.pi * v / 8)), rtol=1e-12)  # eq. 23
        assert np.all((p > 0) & (p < 1))


# --- jit, vmap, dtypes, errors ----------------------------------------------------------------------


@pytest.mark.parametrize("name", ["jj-lower", "jj-upper", "kl"])
def test_vmap_matches_loop_and_float32_runs(name, ionosphere_small):
    X, y = ionosphere_small
    method = METHODS[name]
    log_vs = jnp.array([0.0, 1.0, 2.5])
    batched = jax.vmap(lambda v: gpc.infer(method, se_kernel(v, 1.5), LOGISTIC, X, y).log_marginal)(log_vs)
    looped = [float(log_marginal(method, v, 1.5, LOGISTIC, X, y)) for v in log_vs]
    np.testing.assert_allclose(batched, looped, rtol=1e-10)
    X32, y32 = jnp.asarray(X, jnp.float32), jnp.asarray(y, jnp.float32)
    value, grads = log_marginal_and_grad(method, jnp.float32(1.0), jnp.float32(1.5), LOGISTIC, X32, y32)
    assert value.dtype == jnp.float32 and np.isfinite(value) and all(np.isfinite(g) for g in grads)
    assert float(value) == pytest.approx(looped[1], rel=1e-3)


def test_second_call_does_not_recompile(ionosphere_small):
    X, y = ionosphere_small
    fn = jax.jit(lambda v: gpc.infer(LOWER, se_kernel(v, 1.5), LOGISTIC, X, y).log_marginal)
    fn(0.3)
    size = fn._cache_size()
    fn(0.7)
    assert fn._cache_size() == size


def test_bad_configurations_are_clear_errors(ionosphere_small):
    X, y = ionosphere_small
    kernel = gpc.kernels.SquaredExponential()
    with pytest.raises(ValueError, match="logistic"):
        gpc.infer(LOWER, kernel, PROBIT, X, y)
    with pytest.raises(ValueError, match="log-concave"):
        gpc.infer(gpc.KL(), kernel, gpc.likelihoods.LabelNoise(PROBIT, 0.1), X, y)
    with pytest.raises(ValueError, match="bound"):
        gpc.JaakkolaJordan(bound="middle")
    with pytest.raises(Exception, match="did not converge"):
        gpc.infer(gpc.JaakkolaJordan(max_steps=2), kernel, LOGISTIC, X, y)
    post = gpc.infer(gpc.KL(max_steps=2, throw=False), kernel, LOGISTIC, X, y)
    assert not bool(post.info.converged) and int(post.info.num_steps) == 2
