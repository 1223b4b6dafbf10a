"""Jaakkola-Jordan bounds (Gibbs & MacKay 2000) and Gaussian KL inference against independent truths.

The tests' own programs (the posteriors and gradients they check, oracles, the vmapped batch, the float32 program,
the user's jit of the bad-configuration test) are compiled with gpclass's XLA options and LLVM optimisation level 0
(``FAST_COMPILE``): the same XLA program and results, a third of the compile time.  ``fast_infer`` is gpc.infer
traced into such a program, for tests of the solution rather than of the eager entry point, whose own checks the
bad-configuration test calls directly.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import (
    FAST_COMPILE,
    as_float64,
    central_difference,
    fast_filter_jit,
    fast_infer,
    jit_call,
    se_kernel,
    standardised_subset,
)
from scipy import integrate, special, stats

import gpclass as gpc
from gpclass._covariance import DenseCovariance
from gpclass._inference._infer import prior_covariance
from gpclass._inference.jaakkola_jordan import jj_lambda, lower_bound
from gpclass._inference.laplace import sites_at_mode

LOGISTIC, PROBIT = gpc.likelihoods.Logistic(), gpc.likelihoods.Probit()
LOWER, UPPER = gpc.JaakkolaJordan(), gpc.JaakkolaJordanUpper()
METHODS = {"jj-lower": LOWER, "jj-upper": UPPER, "kl": gpc.KL()}
fast_jit = functools.partial(gpc.jit, compiler_options=FAST_COMPILE)



@fast_jit
def evaluate(method, lik, log_variance, log_lengthscale, X, y):
    """The posterior and d log_marginal / d(log variance, log lengthscale): one compilation per method and shape."""

    def log_marginal(log_v, log_l):
        post = gpc.infer(method, se_kernel(log_v, log_l), lik, X, y)
        return post.log_marginal, post

    (_, post), grads = jax.value_and_grad(log_marginal, argnums=(0, 1), has_aux=True)(log_variance, log_lengthscale)
    return post, grads


@fast_jit
def all_bounds(X, y, log_variance, log_lengthscale):
    """(log Z', log Z'', KL ELBO, optimal nu) at one setting, for the tiny brute-force problems."""
    kernel = se_kernel(log_variance, log_lengthscale)
    posts = [gpc.infer(METHODS[m], kernel, LOGISTIC, X, y) for m in ("jj-lower", "jj-upper", "kl")]
    return [p.log_marginal for p in posts] + [posts[0].warm_start]


def ard(X, log_l):
    """An ARD length-scale vector (all tests on real data share this shape, hence one compilation)."""
    return np.full(X.shape[1], log_l)


# --- dense references ------------------------------------------------------------------------------


def np_se(X, variance, lengthscale, X2=None):
    X2 = X if X2 is None else X2
    d = (X[:, None, :] - X2[None, :, :]) / lengthscale
    return variance * np.exp(-0.5 * np.sum(d**2, -1))


def exact_log_z(K, y, lik=LOGISTIC):
    """log int prod_i p(y_i|f_i) N(f|0, K) df: adaptive quadrature for n = 1, a dense tensor
    Gauss-Hermite rule (120 nodes per dimension, whitened coordinates) for n = 2, 3."""
    n = len(y)
    log_p = lambda y_, f: np.asarray(jit_call(lik.log_prob, np.asarray(y_, np.float64), np.asarray(f, np.float64)))
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


def decoupled(X, n):
    """X with its cases from the n-th on moved 100 units apart (over 47 length scales of at most 2 here): the
    kernel between them and anything else underflows to exactly 0, so the problem has n coupled cases and
    independent single ones, in the shape (3, 2) that all tiny problems share (one compilation of all_bounds)."""
    X = X.copy()
    X[n:] += 100.0 * np.arange(1, len(X) - n + 1)[:, None]
    return X


@pytest.mark.parametrize("n", [1, 2, 3])
def test_bounds_bracket_the_exact_log_evidence(n):
    """n coupled cases and 3 - n independent ones."""
    for stiff in (False, True):
        for seed in range(3):
            X, y, variance, lengthscale = random_problem(3, 10 * n + seed, stiff)
            X = decoupled(X, n)
            K = np_se(X, variance, lengthscale)
            assert np.count_nonzero(K[n:, :n]) == 0 and np.count_nonzero(K[n:, n:] - np.diag(np.diag(K[n:, n:]))) == 0
            exact = exact_log_z(K, y)
            lower, upper, kl, _ = (float(v) if np.ndim(v) == 0 else v
                                   for v in all_bounds(X, y, np.log(variance), np.log(lengthscale)))
            assert lower <= kl + 1e-9, "the Gaussian ELBO optimum can only be tighter than Jaakkola-Jordan"
            assert kl <= exact + 1e-9
            assert exact <= upper + 1e-9
            if not stiff:
                assert exact - lower < 0.3 and upper - exact < 3.0  # bounds, but not vacuous ones


def test_lower_bound_of_a_single_case_is_the_gaussian_integral_of_q():
    """n = 1: Z' = int g(nu) exp[(y a - nu)/2 - lambda (a^2 - nu^2)] N(a|0, k) da, by quadrature at the optimal nu.

    Three independent copies of the case (``decoupled``): the bound is three times the single case's."""
    k, y = 2.7, np.array([-1.0])
    lower, _, _, nu = jax.device_get(all_bounds(decoupled(np.zeros((3, 2)), 1), np.repeat(y, 3), np.log(k),
                                                np.float64(0.0)))
    np.testing.assert_allclose(nu, nu[0], rtol=1e-12)
    lower, nu = float(lower) / 3, float(nu[0])
    lam = np.tanh(nu / 2) / (4 * nu)
    Q = lambda a: special.expit(nu) * np.exp((y[0] * a - nu) / 2 - lam * (a**2 - nu**2))
    z = integrate.quad(lambda a: Q(a) * stats.norm.pdf(a, 0, np.sqrt(k)), -40, 40, epsrel=1e-13)[0]
    np.testing.assert_allclose(float(lower), np.log(z), rtol=1e-10)
    # ... and nu^2 = E_q[a^2] under the normalised q(a) proportional to Q(a) N(a|0, k).
    second = integrate.quad(lambda a: a**2 * Q(a) * stats.norm.pdf(a, 0, np.sqrt(k)), -40, 40, epsrel=1e-13)[0] / z
    np.testing.assert_allclose(nu**2, second, rtol=1e-8)


def test_sigmoid_bounds_touch_where_the_theory_says():
    """Q(a; nu) <= g(a) (eq. 8), with equality at nu = |a|; R(a; mu) >= g(a) (eq. 9) with equality at mu = g(-a)."""
    a = np.linspace(-12, 12, 97)
    nu = np.array([0.0, 0.5, 2.0, 8.0])[:, None]
    lam = np.asarray(jit_call(jj_lambda, nu))
    log_g = -np.logaddexp(0, -a)
    assert np.all(-np.logaddexp(0, -nu) + (a - nu) / 2 - lam * (a**2 - nu**2) <= log_g + 1e-12)
    touch = -np.logaddexp(0, -np.abs(a)) + (a - np.abs(a)) / 2  # nu = |a|: the lambda term vanishes
    np.testing.assert_allclose(touch, log_g, rtol=1e-12, atol=1e-14)
    mu = np.linspace(0.01, 0.99, 9)[:, None]
    log_r = mu * a + mu * np.log(mu) + (1 - mu) * np.log1p(-mu)  # log R = mu a - H2(mu)
    assert np.all(log_r >= log_g - 1e-12)
    mu_touch = special.expit(-a)
    np.testing.assert_allclose(mu_touch * a + special.xlogy(mu_touch, mu_touch)
                               + special.xlog1py(1 - mu_touch, -mu_touch), log_g, rtol=1e-10, atol=1e-13)
    # A prior that is nearly a point mass at 0 makes the optimised lower bound exact: log Z' -> 3 log(1/2).
    lower, *_ = all_bounds(np.zeros((3, 2)), np.array([1.0, -1.0, 1.0]), np.log(1e-10), np.float64(0.0))
    np.testing.assert_allclose(float(lower), -3 * np.log(2.0), atol=1e-9)


# --- optimality conditions and closed forms ---------------------------------------------------------


# d log Z' / d nu, one program
lower_bound_gradient = fast_jit(jax.grad(lambda K, y, nu: lower_bound(DenseCovariance(K), y, nu), argnums=2))


def test_lower_bound_optimum_is_stationary_and_matches_the_dense_formula(ionosphere_small):
    X, y = ionosphere_small
    for log_v in (np.log(3.0), np.float64(8.0)):  # moderate, and stiff (where plain EM needs > 1000 steps)
        post, _ = evaluate(LOWER, LOGISTIC, log_v, ard(X, np.log(4.0)), X, y)
        assert bool(post.info.converged) and int(post.info.num_steps) < 20
        K = np_se(X, np.exp(log_v), 4.0)
        nu = np.asarray(post.warm_start)
        dense, Sigma = np_jj_lower(K, y, nu)
        np.testing.assert_allclose(float(post.log_marginal), dense, rtol=1e-10)
        m = Sigma @ (y / 2)
        np.testing.assert_allclose(nu**2, np.diag(Sigma) + m**2, rtol=1e-7)  # nu_n^2 = E_q[a_n^2]
        np.testing.assert_allclose(post.mean, m, rtol=1e-7, atol=1e-9 * np.max(np.abs(m)))
        assert np.max(np.abs(lower_bound_gradient(K, y, nu))) < 1e-8


def test_a_zero_warm_start_is_no_warm_start():
    """gpc.fit starts the inner solver from an all-zero warm start, which must mean the method's own start; for
    the JJ lower bound (whose own start is nu^2 = diag K, and nu = 0 carries no information) the solve is the same.
    The cold solve is the brute-force tests' compiled program (``all_bounds``)."""
    X, y, variance, lengthscale = random_problem(3, 7)
    log_v, log_l = np.log(variance), np.log(lengthscale)
    cold_log_z, _, _, cold_nu = all_bounds(X, y, log_v, log_l)
    zero = fast_infer(LOWER, se_kernel(as_float64(log_v), as_float64(log_l)), LOGISTIC, X, y, init=np.zeros(3))
    np.testing.assert_allclose(np.asarray(zero.warm_start), np.asarray(cold_nu), rtol=1e-14)
    np.testing.assert_allclose(float(zero.log_marginal), float(cold_log_z), rtol=1e-14)


def test_upper_bound_optimum_is_stationary(ionosphere_small):
    X, y = ionosphere_small
    post, _ = evaluate(UPPER, LOGISTIC, np.log(3.0), ard(X, np.log(4.0)), X, y)
    assert bool(post.info.converged)
    K = np_se(X, 3.0, 4.0)
    mu = special.expit(np.asarray(post.warm_start))
    b = y * mu
    np.testing.assert_allclose(mu, special.expit(-y * (K @ b)), rtol=1e-9)  # eq. 39 = 0
    entropy = -mu * np.log(mu) - (1 - mu) * np.log1p(-mu)
    np.testing.assert_allclose(float(post.log_marginal), -entropy.sum() + 0.5 * b @ K @ b, rtol=1e-12)


@fast_filter_jit
def kl_optimality_terms(post, lik, m, v, X, y):
    """(dE/dm, dE/dv) of the expected log-likelihood E at marginals (m, v), and gpc.variational_bound at the
    posterior ``post`` and at the Laplace and EP posteriors of its kernel: one program."""
    g_m, g_v = jax.grad(lambda m, v: jnp.sum(lik.expected_log_prob(y, m, v)), (0, 1))(m, v)
    others = [gpc.infer(method, post.kernel, lik, X, y) for method in (gpc.Laplace(), gpc.EP())]
    return g_m, g_v, [gpc.variational_bound(p, y) for p in (post, *others)]


@pytest.mark.parametrize("lik", [PROBIT], ids=["probit"])  # logistic KL: brute force and gradient tests above
@pytest.mark.slow
def test_kl_optimum_satisfies_its_fixed_point_and_equals_the_jensen_bound(lik, ionosphere_small):
    """Opper & Archambeau: alpha = dE/dm, lambda = -2 dE/dv at the optimum; the ELBO computed in the site form
    equals gpc.variational_bound (a separate dense implementation) at the KL posterior, and exceeds it at the
    Laplace and EP posteriors (the KL optimum maximises it)."""
    X, y = ionosphere_small
    post, _ = evaluate(gpc.KL(), lik, np.log(3.0), ard(X, np.log(4.0)), X, y)
    assert bool(post.info.converged)
    K = np_se(X, 3.0, 4.0)
    lam = np.asarray(post.sqrt_w) ** 2
    V = np.linalg.inv(np.linalg.inv(K) + np.diag(lam))
    m = np.asarray(post.mean)
    g_m, g_v, (at_kl, at_laplace, at_ep) = jax.device_get(kl_optimality_terms(post, lik, m, np.diag(V), X, y))
    np.testing.assert_allclose(np.linalg.solve(K, m), g_m, rtol=1e-5, atol=1e-6 * np.max(np.abs(g_m)))
    np.testing.assert_allclose(lam, -2 * g_v, rtol=1e-5, atol=1e-6 * np.max(lam))
    elbo = float(post.log_marginal)
    np.testing.assert_allclose(at_kl, elbo, rtol=1e-9)
    assert at_laplace < elbo and at_ep < elbo


@fast_filter_jit
def laplace_sites(log_variance, log_lengthscale, X, y):
    kernel = se_kernel(log_variance, log_lengthscale)
    return sites_at_mode(prior_covariance(kernel, LOGISTIC, X, y), LOGISTIC, y, 30)


def test_laplace_sites_are_laplaces_posterior(ionosphere_small):
    """KL's cold start (``laplace.sites_at_mode``): the prior times the sites (tau~, nu~) has mean f^ solving the
    mode's equation f = K grad log p(y|f) (checked in numpy with the logistic's y sigma(-y f)) to about the
    start's tolerance squared, and precision K^-1 + W(f^) (W = sigma (1 - sigma) in numpy), K built in numpy."""
    X, y = ionosphere_small
    tau, nu = np.asarray(laplace_sites(as_float64(np.log(3.0)), ard(X, np.log(4.0)), X, y))
    K = np_se(X, 3.0, 4.0)
    mean = np.linalg.solve(np.eye(len(y)) + K * tau[None, :], K @ nu)  # (K^-1 + T)^-1 nu
    np.testing.assert_allclose(mean, K @ (y * special.expit(-y * mean)), rtol=0, atol=1e-6 * np.max(np.abs(mean)))
    sigma = special.expit(mean)
    np.testing.assert_allclose(tau, sigma * (1 - sigma), rtol=1e-6)


@fast_filter_jit
def kl_from(log_variance, log_lengthscale, X, y, Z, init):
    """KL's ELBO and its gradient in (log variance, log length scales), its steps, from ``init`` (all-zero sites:
    cold, as ``gpc.fit``'s first evaluation passes them); a VFE prior on the inducing inputs Z unless Z is None."""

    def log_marginal(log_v, log_l):
        kernel = se_kernel(log_v, log_l)
        prior = kernel if Z is None else gpc.Sparse(kernel, Z, approximation="vfe")
        post = gpc.infer(gpc.KL(), prior, LOGISTIC, X, y, init=init)
        return post.log_marginal, post.info.num_steps

    return jax.value_and_grad(log_marginal, argnums=(0, 1), has_aux=True)(log_variance, log_lengthscale)


@pytest.mark.parametrize("sparse", [False, True], ids=["dense", "vfe"])
def test_kl_from_laplaces_sites_reaches_the_optimum_of_zero_sites(sparse, pima_small):
    """The cold start changes the path, not the optimum: the ELBO and its gradient are those reached from sites of
    1e-300 (the former cold start, zero sites, in all but name: all-zero sites are no warm start), to 1e-10, in
    fewer steps (4 against 6 at sigma_f^2 = e^3, length scales e^2)."""
    X, y = pima_small
    Z = X[:12] if sparse else None
    args = as_float64(3.0), ard(X, 2.0), X, y, Z
    (cold, cold_steps), cold_grad = kl_from(*args, (np.zeros(len(y)), np.zeros(len(y))))  # all zero: cold
    (zero, zero_steps), zero_grad = kl_from(*args, (np.zeros(len(y)), np.full(len(y), 1e-300)))
    np.testing.assert_allclose(float(cold), float(zero), rtol=1e-10)
    for a, b in zip(cold_grad, zero_grad, strict=True):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-7, atol=1e-9 * np.max(np.abs(b)))
    assert int(cold_steps) < int(zero_steps)


# --- gradients: envelope theorem against finite differences of the re-optimised bound ---------------


@pytest.mark.parametrize("name,lik", [("jj-lower", LOGISTIC), ("jj-upper", LOGISTIC), ("kl", PROBIT)],
                         ids=["jj-lower", "jj-upper", "kl-probit"])  # KL logistic: tests/test_gradients_hard.py
@pytest.mark.parametrize("log_v", [np.log(2.0), np.float64(5.0)], ids=["moderate", "stiff"])
def test_gradient_matches_finite_differences(name, lik, log_v, ionosphere_small):
    """ARD: d/d log variance and d/d log lengthscale_j for three of the 34 length scales."""
    X, y = ionosphere_small
    method = METHODS[name]
    log_l = np.log(4.0) + 0.05 * np.arange(X.shape[1])
    _, (g_v, g_l) = evaluate(method, lik, log_v, log_l, X, y)

    def value(t):
        ll = log_l.copy()
        ll[:3] = t[1:]
        return float(evaluate(method, lik, t[0], ll, X, y)[0].log_marginal)

    fd = central_difference(value, np.concatenate([[log_v], log_l[:3]]))
    np.testing.assert_allclose(np.concatenate([[g_v], np.asarray(g_l)[:3]]), fd, rtol=2e-6, atol=1e-7)


# --- predictions ------------------------------------------------------------------------------------


@fast_filter_jit
def predictions(post, X_test):
    """The latent moments and p(y = +1) by quadrature and by MacKay's approximation at X_test: one program."""
    mean, var = gpc.predict_latent(post, X_test)
    return mean, var, gpc.predict(post, X_test), gpc.predict(post, X_test, integrator=gpc.integrators.MacKay())


def test_predictions_match_gibbs_mackay_eqs_17_18_and_26(ionosphere_small):
    X_train, y_train = ionosphere_small
    X_test = standardised_subset("ionosphere", 5, n=25)[0]
    K = np_se(X_train, 3.0, 4.0)
    k = np_se(X_test, 3.0, 4.0, X_train)
    kappa = np.full(len(X_test), 3.0)
    lower, _ = evaluate(LOWER, LOGISTIC, np.log(3.0), ard(X_train, np.log(4.0)), X_train, y_train)
    nu = np.asarray(lower.warm_start)
    lam = np.tanh(nu / 2) / (4 * nu)  # Gibbs & MacKay's lambda(nu), as in np_jj_lower
    H = np.eye(len(y_train)) + 2 * lam[:, None] * K  # eq. 19
    mean, var, p_lower, p_mackay_lower = jax.device_get(predictions(lower, X_test))
    np.testing.assert_allclose(mean, k @ np.linalg.solve(H, y_train / 2), rtol=1e-8, atol=1e-10)  # eq. 17
    np.testing.assert_allclose(var, kappa - 2 * np.einsum("ij,ij->i", k, np.linalg.solve(H, lam[:, None] * k.T).T),
                               rtol=1e-8)  # eq. 18 with its minus sign restored
    upper, _ = evaluate(UPPER, LOGISTIC, np.log(3.0), ard(X_train, np.log(4.0)), X_train, y_train)
    b = y_train * special.expit(np.asarray(upper.warm_start))
    mean_u, var_u, p_upper, p_mackay_upper = jax.device_get(predictions(upper, X_test))
    np.testing.assert_allclose(mean_u, k @ b, rtol=1e-9, atol=1e-12)  # the marginal of eq. 26
    np.testing.assert_allclose(var_u, kappa, rtol=1e-12)
    for m, v, p, p_mackay in ((mean, var, p_lower, p_mackay_lower), (mean_u, var_u, p_upper, p_mackay_upper)):
        np.testing.assert_allclose(p_mackay, special.expit(m / np.sqrt(1 + np.pi * v / 8)), rtol=1e-12)  # eq. 23
        assert np.all((p > 0) & (p < 1))


# --- jit, vmap, dtypes, errors ----------------------------------------------------------------------


@pytest.mark.slow
def test_vmap_matches_loop_no_recompilation_and_float32(ionosphere_small):
    X, y = ionosphere_small
    log_l = ard(X, np.log(4.0))
    log_vs = np.array([0.0, 1.0, 2.5])

    likelihood = {"jj-lower": LOGISTIC, "jj-upper": LOGISTIC, "kl": PROBIT}  # evaluate's programs of other tests

    def values(log_v, log_l, X, y, names=tuple(METHODS)):
        kernel = se_kernel(log_v, log_l)
        return jnp.stack([gpc.infer(METHODS[m], kernel, likelihood[m], X, y).log_marginal for m in names])

    batched = np.asarray(fast_jit(jax.vmap(values, in_axes=(0, None, None, None)))(log_vs, log_l, X, y))
    for name, column in zip(METHODS, batched.T):
        looped = [float(evaluate(METHODS[name], likelihood[name], v, log_l, X, y)[0].log_marginal) for v in log_vs]
        np.testing.assert_allclose(column, looped, rtol=1e-9)
    evaluate(LOWER, LOGISTIC, np.float64(0.37), log_l, X, y)
    size = evaluate._cache_size()
    evaluate(LOWER, LOGISTIC, np.float64(0.52), log_l, X, y)
    assert evaluate._cache_size() == size, "a new value of a hyperparameter must not recompile"
    # float32 data in an x64 process, for the two bounds (KL in float32, with x64 off: tests/test_float32.py).
    args32 = (np.float32(1.0), log_l.astype(np.float32), X.astype(np.float32), y.astype(np.float32))
    bounds = functools.partial(values, names=("jj-lower", "jj-upper"))

    def summed(*args):  # the bounds as the auxiliary output: one forward pass (not a second program) and the
        both = bounds(*args)  # reverse pass, whose gradient is NaN if either bound's is
        return jnp.sum(both), both

    (_, v32), g32 = fast_jit(jax.value_and_grad(summed, has_aux=True))(*args32)
    assert v32.dtype == jnp.float32 and np.all(np.isfinite(v32)) and np.all(np.isfinite(g32))
    np.testing.assert_allclose(v32, batched[1, :2], rtol=1e-3)


def test_bad_configurations_are_clear_errors(ionosphere_small):
    X, y = ionosphere_small
    kernel = gpc.kernels.SquaredExponential()
    with pytest.raises(ValueError, match="logistic"):
        gpc.infer(LOWER, kernel, PROBIT, X, y)
    with pytest.raises(ValueError, match="log-concave"):
        gpc.infer(gpc.KL(), kernel, gpc.likelihoods.LabelNoise(PROBIT, 0.1), X, y)
    with pytest.raises(ValueError, match="logistic"):
        gpc.infer(UPPER, kernel, PROBIT, X, y)
    with pytest.raises(ValueError, match="no finite maximum"):
        gpc.fit(UPPER, kernel, LOGISTIC, X, y)
    # Inside a user's jit that uses only the bound (everything else is dead code), the check still runs.
    bound_only = fast_jit(lambda X, y: gpc.infer(gpc.JaakkolaJordan(max_steps=1), kernel, LOGISTIC, X, y).log_marginal)
    with pytest.raises(Exception, match="did not converge"):
        jax.block_until_ready(bound_only(X, y))
    post = fast_infer(gpc.JaakkolaJordanUpper(max_steps=1), kernel, LOGISTIC, X, y, throw=False)
    assert int(post.info.status) == gpc.Status.MAX_STEPS and int(post.info.num_steps) == 1


@pytest.mark.parametrize(
    "name,approximation",
    [("kl", None), ("jj-lower", None), ("jj-upper", None), ("ep", "fitc"), ("kl", "vfe"), ("jj-lower", "fitc")],
    ids=["kl", "jj-lower", "jj-upper", "sparse-ep-fitc", "sparse-kl-vfe", "sparse-jj-lower-fitc"],
)
@pytest.mark.slow
def test_gradient_of_predictions_matches_finite_differences(name, approximation, ionosphere_small):
    """The posterior depends on the converged variational parameters (sites), differentiated by the implicit
    function theorem at their fixed point (log q holds them fixed: the envelope theorem); under a sparse prior
    the adjoint system is solved by GMRES with the solvers' matrix-free products, transposed.  The gradient of
    the predictive latent means and log variances at new inputs against central differences of tightly
    converged solves."""
    X, y = ionosphere_small
    lik = LOGISTIC if name.startswith("jj") else PROBIT
    method = {"kl": gpc.KL(tol=1e-13, site_tol=1e-11), "jj-lower": gpc.JaakkolaJordan(tol=1e-13),
              "jj-upper": gpc.JaakkolaJordanUpper(tol=1e-13), "ep": gpc.EP(tol=1e-13)}[name]
    X_new = X[:4] + 0.1

    def summary(theta):
        kernel = gpc.kernels.SquaredExponential(jnp.exp(theta[0]), jnp.exp(theta[1]))
        if approximation is not None:
            kernel = gpc.Sparse(kernel, X[:8], approximation=approximation)
        mean, var = gpc.predict_latent(gpc.infer(method, kernel, lik, X, y), X_new)
        return jnp.sum(mean) + jnp.sum(jnp.log(var))

    value_and_grad = fast_jit(jax.value_and_grad(summary))
    theta = np.array([np.log(2.0), 1.0])
    _, grad = value_and_grad(theta)
    fd = central_difference(lambda t: float(value_and_grad(t)[0]), theta, h=1e-5)
    np.testing.assert_allclose(grad, fd, rtol=1e-6)


@pytest.mark.slow
def test_kl_with_a_case_without_prior_variance():
    """A case whose latent value has prior variance exactly 0 (the linear kernel at x = 0) is known: KL's bound
    is that of the other cases plus log p(y | 0) = log 1/2, with their predictions and gradient (to 1e-10; the
    quadrature's derivative in the variance, through its square root, was infinite there: NaN)."""
    X = np.array([[0.0], [1.0], [-1.0], [2.0], [-0.5]])
    y = np.array([1.0, 1.0, -1.0, -1.0, 1.0])

    def log_q(variance, X, y):
        post = gpc.infer(gpc.KL(), gpc.kernels.Linear(variance), gpc.likelihoods.Probit(), X, y)
        return post.log_marginal, gpc.predict(post, np.array([[0.3], [-2.0]]))

    program = gpc.jit(jax.value_and_grad(log_q, has_aux=True), compiler_options=FAST_COMPILE)
    (full, p_full), g_full = program(0.7, X, y)
    (rest, p_rest), g_rest = program(0.7, X[1:], y[1:])
    np.testing.assert_allclose(float(full), float(rest) + np.log(0.5), rtol=1e-10)
    np.testing.assert_allclose(p_full, p_rest, rtol=1e-10)
    np.testing.assert_allclose(float(g_full), float(g_rest), rtol=1e-10)
