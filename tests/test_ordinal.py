"""The ordinal likelihood (issue 35): gpc.likelihoods.Ordinal against independent truth.

* The likelihood itself against mpmath: log p(y = k | f) and its derivatives far in the tails (|f| up to 40),
  EP's tilted moments, the expected log-likelihood of KL and the predictive probabilities against mpmath's
  quadrature.
* Inference on problems of 1-3 latent values against a tensor Gauss-Hermite rule in numpy/scipy (the
  likelihood written with scipy's ndtr, nothing from the library): EP exact where it must be (independent
  cases), close where it approximates; Laplace's mode against scipy's optimiser; KL a lower bound; MCMC and
  AIS within Monte Carlo error.
* K = 2 with cutpoint 0 and sigma = 1 is the probit with labels +-1 under every method.
* Gradients of log q with respect to the kernel, the cutpoints and sigma against central differences;
  gpc.fit recovers the cutpoints of synthetic data.

Data of one shape per kind of test, so that the compiled programs are shared.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from conftest import FAST_COMPILE, jit_call
from scipy import integrate, optimize, special

import gpclass as gpc

CUTS4 = np.array([-1.0, 0.3, 2.0])
F_TAIL = np.array([-40.0, -25.0, -8.0, -1.0, 0.0, 0.31, 1.7, 5.0, 20.0, 40.0])


def mp_prob(k, f, cuts, sigma):
    """p(y = k | f) in mpmath: Phi(b) - Phi(a), taken in the tail where it is the smaller (the identity
    Phi(b) - Phi(a) = Phi(-a) - Phi(-b)), so that 60 digits hold it however far out f is."""
    K = len(cuts) + 1
    a = -mpmath.inf if k == 0 else (mpmath.mpf(cuts[k - 1]) - f) / sigma
    b = mpmath.inf if k == K - 1 else (mpmath.mpf(cuts[k]) - f) / sigma
    if a + b > 0:
        return mpmath.ncdf(-a) - mpmath.ncdf(-b)
    return mpmath.ncdf(b) - mpmath.ncdf(a)


def mp_log_prob(k, f, cuts, sigma):
    """log p(y = k | f) in mpmath; near p = 1 as log1p(-q), q = Phi(a) + Phi(-b) the mass outside (both tails)."""
    K = len(cuts) + 1
    a = -mpmath.inf if k == 0 else (mpmath.mpf(cuts[k - 1]) - f) / sigma
    b = mpmath.inf if k == K - 1 else (mpmath.mpf(cuts[k]) - f) / sigma
    q = mpmath.ncdf(a) + mpmath.ncdf(-b)
    return mpmath.log1p(-q) if q < 0.5 else mpmath.log(mp_prob(k, f, cuts, sigma))


def np_log_prob(y, F, cuts, sigma):
    """log p(y|f) in numpy: log(ndtr(b) - ndtr(a)) directly (fine away from the far tails: quadrature grids)."""
    ext = np.concatenate([[-np.inf], cuts, [np.inf]])
    y = np.asarray(y, int)
    with np.errstate(divide="ignore"):
        return np.log(special.ndtr((ext[y + 1] - F) / sigma) - special.ndtr((ext[y] - F) / sigma))


# ---------------------------------------------------------------------------------------------------------------
# The likelihood against mpmath


@pytest.mark.parametrize("sigma", [1.0, 0.5])
def test_log_prob_and_derivatives_in_the_tails_match_mpmath(sigma):
    """log p(y = k | f) for every class, |f| up to 40 (to 80 sigma): relative error <= 1e-12 (measured max
    5.7e-14); slope and curvature W against mpmath's numerical derivatives (measured 1.1e-14 and 1.8e-12
    relative), W > 0; the class probabilities (measured 2.8e-14 relative) sum to one."""
    lik = gpc.likelihoods.Ordinal(4, CUTS4, noise=sigma)
    k, f = (a.ravel() for a in np.meshgrid(np.arange(4.0), F_TAIL, indexing="ij"))
    lp, slope, W = (np.asarray(a) for a in jit_call(lik.derivatives, k, f))
    with mpmath.workdps(60):
        ref = []
        for ki, fi in zip(k.astype(int), f):
            log_p = lambda t, ki=ki: mp_log_prob(ki, t, CUTS4, sigma)  # noqa: E731
            ref.append([float(log_p(mpmath.mpf(fi))), float(mpmath.diff(log_p, fi)),
                        -float(mpmath.diff(log_p, fi, 2))])
    ref = np.array(ref)
    np.testing.assert_allclose(lp, ref[:, 0], rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(slope, ref[:, 1], rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(W, ref[:, 2], rtol=1e-10, atol=1e-300)
    assert np.all(W >= 0) and np.all(np.isfinite(slope))
    # Class probabilities (var = 0): each row sums to one, each entry to the tail probability.
    p = np.asarray(jit_call(lik.predictive_probability, F_TAIL, np.zeros_like(F_TAIL)))
    assert p.shape == (len(F_TAIL), 4)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-14)
    np.testing.assert_allclose(p.T.ravel(), np.exp(ref[:, 0]), rtol=1e-12, atol=1e-300)


def test_log_prob_float32():
    """x64 off: log p within 1e-5 relative of mpmath (measured 5e-7) for |f| <= 20."""
    k, f = (a.ravel() for a in np.meshgrid(np.arange(4.0), F_TAIL[2:-2], indexing="ij"))
    with jax.enable_x64(False):
        lik = gpc.likelihoods.Ordinal(4, jnp.asarray(CUTS4, jnp.float32))
        lp = jit_call(lik.log_prob, jnp.asarray(k, jnp.float32), jnp.asarray(f, jnp.float32))
        assert lp.dtype == jnp.float32
    with mpmath.workdps(30):
        ref = [float(mp_log_prob(int(ki), mpmath.mpf(float(np.float32(fi))), CUTS4, 1.0))
               for ki, fi in zip(k, f)]
    np.testing.assert_allclose(np.asarray(lp, np.float64), ref, rtol=1e-5, atol=1e-6)


def mp_tilted(k, m, v, cuts, sigma):
    """(log Z, mean, var) of p(y = k | f) N(f|m, v) / Z in mpmath: Z(m) = p(y = k | m) with sigma^2 + v for
    sigma^2 (int Phi((b - f)/sigma) N(f|m, v) df = Phi((b - m)/sqrt(sigma^2 + v)), GPML eq. 3.82), and the moments
    from its derivatives in m by mpmath's numerical differentiation: mean = m + v d log Z / dm,
    var = v + v^2 d^2 log Z / dm^2 (the moments of an exponential family in its mean parameter)."""
    log_z = lambda t: mp_log_prob(k, t, cuts, mpmath.sqrt(sigma**2 + v))  # noqa: E731
    m = mpmath.mpf(m)
    return log_z(m), m + v * mpmath.diff(log_z, m), v + v**2 * mpmath.diff(log_z, m, 2)


def np_stable_log_prob(k, f, cuts, sigma):
    """log p(y = k | f) in numpy with scipy's log_ndtr, the middle classes as log(Phi(hi) - Phi(lo)) taken in
    the smaller tail (the mpmath oracle of the first test checks the same quantity in 60 digits)."""
    K = len(cuts) + 1
    if k == 0:
        return special.log_ndtr((cuts[0] - f) / sigma)
    if k == K - 1:
        return special.log_ndtr((f - cuts[-1]) / sigma)
    a, b = (cuts[k - 1] - f) / sigma, (cuts[k] - f) / sigma
    lo, hi = np.where(a + b > 0, -b, a), np.where(a + b > 0, -a, b)
    log_hi = special.log_ndtr(hi)
    return log_hi + np.log(-np.expm1(special.log_ndtr(lo) - log_hi))


def test_expected_log_prob_matches_quadrature():
    """KL's E[log p(y|f)] under N(m, v), variances 1e-6..1e4, against scipy's adaptive quadrature split near the
    cutpoints: relative error <= 1e-11 (measured 6e-15; mpmath agrees at the worst case, v = 1e4)."""
    sigma = 0.3
    lik = gpc.likelihoods.Ordinal(4, CUTS4, noise=sigma)
    grid = [(k, m, v) for k in range(4) for m in [-20.0, 0.5, 6.0] for v in [1e-6, 1.0, 1e4]]
    k, m, v = (np.array(c, float) for c in zip(*grid))
    got = np.asarray(jit_call(lik.expected_log_prob, k, m, v))
    ref = []
    for ki, mi, vi in grid:
        s = np.sqrt(vi)
        # Split at the cutpoints and 3 and 30 sigma either side: quad alone missed the bend at v = 1e4 (3e-8).
        points = sorted(z for c in CUTS4 for d in (-30, -3, 0, 3, 30) if abs(z := (c + d * sigma - mi) / s) < 30)
        integrand = lambda z, ki=ki, mi=mi, s=s: np_stable_log_prob(ki, mi + s * z, CUTS4, sigma) * np.exp(
            -0.5 * z**2) / np.sqrt(2 * np.pi)
        ref.append(integrate.quad(integrand, -30, 30, points=points or None, limit=500, epsabs=1e-13,
                                  epsrel=1e-13)[0])
    # atol: the rule covers 10 standard deviations of q, so E[log p] ~ -3e-74 (class 0, m = -20, v = 1: the
    # probability of class 1 and beyond lies 18 standard deviations out) comes out as -4e-222, and -7.4137e-41 as
    # -7.4138e-41 (13 standard deviations): errors far below any other term of a variational bound.
    print('expected_log_prob', np.max(np.abs(got - ref) / np.maximum(np.abs(ref), 1e-30)))
    np.testing.assert_allclose(got, ref, rtol=1e-11, atol=1e-30)


@pytest.mark.slow
def test_two_classes_equal_the_probit_likelihood_function_by_function():
    """K = 2, cutpoint 0, sigma = 1, class 0 as -1 and class 1 as +1: every protocol function equals Probit's
    (to rounding: measured <= 1e-13 relative, mostly equal bit for bit), which is all MCMC and AIS use of a
    likelihood (log_prob and its gradient)."""
    ordinal, probit = gpc.likelihoods.Ordinal(2), gpc.likelihoods.Probit()
    assert float(ordinal.cutpoints[0]) == 0.0 and ordinal.increments.shape == (0,)
    f = np.linspace(-40.0, 40.0, 41)
    m, v = np.linspace(-30.0, 30.0, 41), np.geomspace(1e-4, 1e3, 41)
    for label in (0.0, 1.0):
        y_ord, y_pro = np.full_like(f, label), np.full_like(f, 2 * label - 1)
        for name, args in [("derivatives", (f,)), ("tilted_moments", (m, v)), ("expected_log_prob", (m, v))]:
            got = jit_call(getattr(ordinal, name), y_ord, *args)
            want = jit_call(getattr(probit, name), y_pro, *args)
            for a, b in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
                np.testing.assert_allclose(a, b, rtol=1e-13, atol=1e-300)
        grad = lambda lik, y: jax.vmap(jax.grad(lik.log_prob, argnums=1))(y, f)  # noqa: E731
        np.testing.assert_allclose(jit_call(grad, ordinal, y_ord), jit_call(grad, probit, y_pro), rtol=1e-13)
    p = jit_call(ordinal.predictive_probability, m, v)
    # exp(log Phi) against Probit's ndtr: |log p| eps relative (1.4e-13 at p = 1e-143)
    np.testing.assert_allclose(p[:, 1], jit_call(probit.predictive_probability, m, v), rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(p[:, 0], 1.0 - p[:, 1], atol=1e-15)


# ---------------------------------------------------------------------------------------------------------------
# Inference on 1-3 latent values against tensor Gauss-Hermite quadrature

KERNEL = gpc.kernels.SquaredExponential(variance=2.0, lengthscale=0.8)
THETA = np.log([2.0, 0.8])
CUTS3, SIGMA3 = np.array([-0.6, 0.4]), 0.7
K3 = gpc.likelihoods.Ordinal(3, CUTS3, noise=SIGMA3)
Y3 = np.array([0.0, 2.0, 1.0])
X_TEST = np.array([[0.3], [2.5]])
# As in test_sampling_probit.py: inputs 50 length scales apart are independent under the prior, so every problem
# has data of one shape (3, 1) and shares the compiled programs; "n1" is three independent one-case problems.
PROBLEMS = {
    "n1": np.array([[0.0], [40.0], [80.0]]),
    "n2": np.array([[0.0], [0.6], [40.0]]),
    "n3": np.array([[0.0], [0.6], [1.5]]),
}


def gram(X1, X2):
    return 2.0 * np.exp(-0.5 * ((X1[:, None, 0] - X2[None, :, 0]) / 0.8) ** 2)


def quadrature(y, X, nodes=60):
    """Under p(f|y) ~ prod p(y_i|f_i) N(f|0, K) by a tensor Gauss-Hermite rule (60^n nodes) in numpy/scipy:
    log Z, E[f], Cov[f], and p(y* = k | x*) = E[Phi((b_k - E[f*|f]) / s) - Phi((b_{k-1} - E[f*|f]) / s)] with
    s^2 = sigma^2 + V[f*|f]."""
    n = len(y)
    K, K_cross = gram(X, X), gram(X_TEST, X)
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    F = np.stack(np.meshgrid(*([z] * n), indexing="ij"), -1).reshape(-1, n) @ np.linalg.cholesky(K).T
    W = np.prod(np.stack(np.meshgrid(*([w] * n), indexing="ij"), -1).reshape(-1, n), axis=1) / np.sqrt(2 * np.pi) ** n
    log_w = np.log(W) + np.sum(np_log_prob(y, F, CUTS3, SIGMA3), axis=1)
    log_z = special.logsumexp(log_w)
    P = np.exp(log_w - log_z)
    mean = P @ F
    cov = (F - mean).T @ (P[:, None] * (F - mean))
    A = np.linalg.solve(K, K_cross.T)
    scale = np.sqrt(SIGMA3**2 + 2.0 - np.sum(K_cross.T * A, axis=0))
    lower, upper = np.r_[-np.inf, CUTS3], np.r_[CUTS3, np.inf]
    mean_star = F @ A
    p_star = np.stack([P @ (special.ndtr((upper[k] - mean_star) / scale) - special.ndtr((lower[k] - mean_star) / scale))
                       for k in range(3)], axis=-1)
    return log_z, mean, cov, p_star


def log_marginal_program(method):
    """One compiled program per method: log q(y|X) with the SE kernel's log hyperparameters ``theta`` and the
    likelihood, its gradient in both, and the posterior's latent moments at X and class probabilities at X_TEST."""

    def objective(theta, lik, X, y, key):
        kernel = gpc.kernels.SquaredExponential(variance=jnp.exp(theta[0]), lengthscale=jnp.exp(theta[1]))
        post = gpc.infer(method, kernel, lik, X, y, key=key)
        return post.log_marginal, (gpc.predict_latent(post, X), gpc.predict(post, X_TEST), post)

    return gpc.jit(jax.value_and_grad(objective, argnums=(0, 1), has_aux=True), compiler_options=FAST_COMPILE)


PROGRAMS = {name: log_marginal_program(method) for name, method in
            {"laplace": gpc.Laplace(), "ep": gpc.EP(schedule="sequential"), "kl": gpc.KL()}.items()}


def run(name, lik=K3, theta=THETA, X=PROBLEMS["n3"], y=Y3):
    (value, ((mean, var), p, post)), (g_theta, g_lik) = PROGRAMS[name](np.asarray(theta, float), lik, X, y, None)
    return float(value), np.asarray(mean), np.asarray(var), np.asarray(p), post, (np.asarray(g_theta), g_lik)


def neg_log_posterior(f, X, y):
    """-log p(y|f) - log N(f|0, K) (up to a constant), in numpy/scipy."""
    K = gram(X, X)
    return -np.sum(np_log_prob(y, f, CUTS3, SIGMA3)) + 0.5 * f @ np.linalg.solve(K, f)


def negative_elbo(params, y_i, prior_var=2.0):
    """-(E_q[log p(y_i|f)] - KL(q || N(0, prior_var))) for one case, q = N(m, s^2), params = (m, log s):
    a 100-node Gauss-Hermite rule in numpy/scipy."""
    m, s = params[0], np.exp(params[1])
    z, w = np.polynomial.hermite_e.hermegauss(100)
    expected = w @ np_stable_log_prob(int(y_i), m + s * z, CUTS3, SIGMA3) / np.sqrt(2 * np.pi)
    kl = 0.5 * (s**2 / prior_var + m**2 / prior_var - 1.0 - np.log(s**2 / prior_var))
    return -(expected - kl)


@pytest.mark.parametrize("problem", list(PROBLEMS))
@pytest.mark.slow
def test_gaussian_methods_against_quadrature(problem):
    """EP, Laplace and KL on 1-3 coupled latent values against the quadrature truth.

    * EP on independent cases ("n1") is exact: each site's tilted distribution is the posterior marginal, so log Z
      and the posterior means and variances equal quadrature (tolerance 1e-8; measured 2.9e-12, 5e-11 and 3.9e-10
      relative).  Coupled cases: EP's approximation, close (measured: log Z within 5.3e-4, means 2.1e-4,
      variances 3.5e-3 relative).
    * Laplace's mode is the maximiser of the log posterior (scipy's BFGS on the numpy log posterior; 1e-6,
      measured 2.2e-8).
    * KL's log q is a lower bound of log Z (gap < 0.1; measured 0.031, 0.008, 0.006); on independent cases it is the
      sum of each case's best Gaussian bound, found by scipy's BFGS on a numpy ELBO (1e-8, measured 2e-15).
    * The class probabilities at test inputs, rows summing to one, near the exact predictive ones: EP and KL
      within 0.02 (measured 0.0096, 0.0077), Laplace, whose Gaussian sits at the mode of the skewed
      posterior, within 0.06 (measured 0.048).
    """
    X = PROBLEMS[problem]
    log_z, mean, cov, p_true = quadrature(Y3, X)
    ep = run("ep", X=X)
    laplace = run("laplace", X=X)
    kl = run("kl", X=X)
    deviations = {}
    if problem == "n1":
        np.testing.assert_allclose(ep[0], log_z, rtol=1e-8)
        np.testing.assert_allclose(ep[1], mean, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(ep[2], np.diag(cov), rtol=1e-8)
    else:
        np.testing.assert_allclose(ep[0], log_z, atol=2e-3)
        np.testing.assert_allclose(ep[1], mean, atol=2e-2)
        np.testing.assert_allclose(ep[2], np.diag(cov), rtol=2e-2)
    deviations["ep"] = (ep[0] - log_z, np.max(np.abs(ep[1] - mean)), np.max(np.abs(ep[2] / np.diag(cov) - 1)))
    mode = optimize.minimize(neg_log_posterior, np.zeros(3), args=(X, Y3), method="BFGS", options={"gtol": 1e-10}).x
    np.testing.assert_allclose(laplace[1], mode, atol=1e-6)
    deviations["laplace mode"] = np.max(np.abs(laplace[1] - mode))
    assert kl[0] <= log_z + 1e-10 and kl[0] > log_z - 0.1
    deviations["kl gap"] = log_z - kl[0]
    if problem == "n1":  # independent cases: the best Gaussian of each, found by scipy
        best = sum(-optimize.minimize(negative_elbo, np.zeros(2), args=(y_i,), method="BFGS",
                                      options={"gtol": 1e-10}).fun for y_i in Y3)
        np.testing.assert_allclose(kl[0], best, rtol=1e-8)
        deviations["kl vs scipy"] = kl[0] - best
    for name, result, tol in [("ep", ep, 0.02), ("laplace", laplace, 0.06), ("kl", kl, 0.02)]:
        p = result[3]
        assert p.shape == (2, 3)
        np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-12)
        np.testing.assert_allclose(p, p_true, atol=tol)
        deviations[name + " p"] = np.max(np.abs(p - p_true))
    print(problem, deviations)


@pytest.mark.parametrize("name", list(PROGRAMS))
@pytest.mark.slow
def test_gradients_match_finite_differences(name):
    """d log q / d (log sigma_f^2, log l, b_1, the increment, sigma) against central differences (h = 1e-5) of
    the same compiled program, on the coupled three-case problem (measured max relative error 3.2e-10)."""
    params = np.r_[THETA, CUTS3[0], np.diff(CUTS3), SIGMA3]

    def evaluate(v):
        lik = gpc.likelihoods.Ordinal.from_parameters(3, v[2], v[3:4], v[4])
        value, *_, (g_theta, g_lik) = run(name, lik=lik, theta=v[:2])
        return value, np.r_[g_theta, g_lik.first_cutpoint, g_lik.increments, g_lik.noise]

    _, grad = evaluate(params)
    h = 1e-5
    fd = np.array([(evaluate(params + h * e)[0] - evaluate(params - h * e)[0]) / (2 * h) for e in np.eye(5)])
    print(name, np.max(np.abs(grad - fd) / np.maximum(np.abs(fd), 1e-3)))
    np.testing.assert_allclose(grad, fd, rtol=1e-7, atol=1e-9)


@pytest.mark.slow
def test_two_classes_equal_probit_under_laplace_ep_and_kl():
    """Ordinal(2) (cutpoint 0, sigma = 1, labels 0/1) against Probit (labels -1/+1): log q, its gradient in the
    kernel's log hyperparameters, the latent moments and the predictions, under Laplace, EP and KL (to rounding:
    measured <= 2e-14 relative)."""
    y01 = np.array([0.0, 1.0, 1.0])
    for name in PROGRAMS:
        ordinal = run(name, lik=gpc.likelihoods.Ordinal(2), y=y01)
        probit = run(name, lik=gpc.likelihoods.Probit(), y=2 * y01 - 1)
        np.testing.assert_allclose(ordinal[0], probit[0], rtol=1e-13)
        for a, b in [(ordinal[1], probit[1]), (ordinal[2], probit[2]), (ordinal[5][0], probit[5][0])]:
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(ordinal[3][:, 1], probit[3], rtol=1e-12)


# ---------------------------------------------------------------------------------------------------------------
# MCMC and AIS against quadrature, within Monte Carlo error

Z_MAX = 5.0  # |estimate - truth| <= 5 standard errors (as in test_sampling_probit.py)
NUM_CHAINS = 32
MCMC_HMC = gpc.MCMC(sampler=gpc.samplers.HMC(step_size=0.25, num_leapfrog=6), num_samples=400, num_warmup=200,
                    num_chains=NUM_CHAINS)
AIS_HMC = gpc.AIS(num_temperatures=16, num_runs=1024, sampler=gpc.samplers.HMC(step_size=0.3, num_leapfrog=6))


@functools.partial(gpc.jit, static_argnums=0, compiler_options=FAST_COMPILE)
def sample(method, X, y, key):
    post = gpc.infer(method, KERNEL, K3, X, y, key=key)
    return post, gpc.predict(post, X_TEST)


@pytest.mark.slow
def test_mcmc_and_ais_match_quadrature():
    """Three coupled latents: HMC's posterior mean and covariance (per-chain estimates of 32 chains) and AIS's
    log Z (delta-method standard error from 1024 runs) within 5 standard errors of quadrature (measured |z| <= 1.7);
    the predictions of both are the sample average of the exact class probabilities given each sample, (m, K)."""
    X = PROBLEMS["n3"]
    log_z, mean, cov, p_true = quadrature(Y3, X)
    post, p = sample(MCMC_HMC, X, Y3, jax.random.key(0))
    chains = np.asarray(post.samples).reshape(NUM_CHAINS, -1, 3)
    chain_means = chains.mean(axis=1)
    centred = chains - chain_means[:, None, :]
    chain_covs = np.einsum("csi,csj->cij", centred, centred) / (chains.shape[1] - 1)
    worst = 0.0
    for per_chain, truth, se_max in [(chain_means, mean, 0.02), (chain_covs, cov, 0.05)]:
        se = per_chain.std(axis=0, ddof=1) / np.sqrt(NUM_CHAINS)
        assert np.all(se > 0) and np.all(se < se_max)
        z = (per_chain.mean(axis=0) - truth) / se
        worst = max(worst, np.max(np.abs(z)))
    p = np.asarray(p)
    assert p.shape == (2, 3)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(p, p_true, atol=0.02)
    # The average over samples, recomputed here: p(y* = k | f_s) exact under p(f*|f_s).
    L = np.asarray(post.chol)
    K_cross = gram(X_TEST, X)
    A = np.linalg.solve(L @ L.T, K_cross.T)
    scale = np.sqrt(SIGMA3**2 + 2.0 - np.sum(K_cross.T * A, axis=0))
    means = np.asarray(post.samples) @ A
    lower, upper = np.r_[-np.inf, CUTS3], np.r_[CUTS3, np.inf]
    p_s = np.stack([special.ndtr((upper[k] - means) / scale) - special.ndtr((lower[k] - means) / scale)
                    for k in range(3)], -1)
    np.testing.assert_allclose(p, p_s.mean(axis=0), rtol=1e-10)

    annealed, p_ais = sample(AIS_HMC, X, Y3, jax.random.key(1))
    log_w = np.asarray(annealed.log_weights)
    w = np.exp(log_w - log_w.max())
    se = w.std(ddof=1) / (np.sqrt(len(w)) * w.mean())
    assert 0 < se < 0.05
    worst = max(worst, abs(float(annealed.log_marginal) - log_z) / se)
    np.testing.assert_allclose(np.asarray(p_ais).sum(axis=1), 1.0, rtol=1e-12)
    print("mcmc/ais worst |z|", worst)
    assert worst <= Z_MAX


@pytest.mark.slow
def test_ep_against_quadrature_and_ais_on_a_dozen_problems():
    """Twelve random problems (three coupled cases at random inputs, random labels 0..2), vmapped: EP's log Z within
    0.03 of quadrature and its class probabilities at the test inputs within 0.02; AIS (vmapped over the problems)
    within 5 standard errors of quadrature, and EP within 0.03 + 5 standard errors of AIS (measured: EP's log Z within
    0.014, its probabilities within 0.011, AIS at most 2.1 standard errors off)."""
    rng = np.random.default_rng(5)
    Xs = rng.uniform(-1.5, 1.5, (12, 3, 1))
    ys = rng.integers(0, 3, (12, 3)).astype(float)
    ais_method = gpc.AIS(num_temperatures=48, num_runs=192)

    @functools.partial(gpc.jit, compiler_options=FAST_COMPILE)
    def solve(Xs, ys, keys):
        def one(X, y, key):
            ep = gpc.infer(gpc.EP(), KERNEL, K3, X, y)
            ais = gpc.infer(ais_method, KERNEL, K3, X, y, key=key)
            return ep.log_marginal, gpc.predict(ep, X_TEST), ais.log_marginal, ais.log_weights

        return jax.vmap(one)(Xs, ys, keys)

    ep_log_z, ep_p, ais_log_z, ais_log_w = map(np.asarray, solve(Xs, ys, jax.random.split(jax.random.key(4), 12)))
    worst = {"ep log z": 0.0, "ep p": 0.0, "ais z": 0.0}
    for i in range(12):
        log_z, _, _, p_true = quadrature(ys[i], Xs[i])
        w = np.exp(ais_log_w[i] - ais_log_w[i].max())
        se = w.std(ddof=1) / (np.sqrt(len(w)) * w.mean())
        z = (ais_log_z[i] - log_z) / se
        worst = {"ep log z": max(worst["ep log z"], abs(ep_log_z[i] - log_z)),
                 "ep p": max(worst["ep p"], float(np.max(np.abs(ep_p[i] - p_true)))),
                 "ais z": max(worst["ais z"], abs(z))}
        np.testing.assert_allclose(ep_log_z[i], log_z, atol=0.03)
        np.testing.assert_allclose(ep_p[i], p_true, atol=0.02)
        assert abs(z) <= Z_MAX and abs(ep_log_z[i] - ais_log_z[i]) <= 0.03 + Z_MAX * se
    print(worst)


# ---------------------------------------------------------------------------------------------------------------
# gpc.fit, the API


@pytest.mark.slow
def test_fit_learns_cutpoints():
    """gpc.fit (EP) learns the cutpoints with the kernel and sigma held fixed (``trainable``), on 100 cases whose
    inputs lie 50 length scales apart: independent latents f_i ~ N(0, 2), for which EP is exact and the
    likelihood of the cutpoints is that of the class frequencies, p(y = k) = Phi(b_{k+1}/s) - Phi(b_k/s),
    s^2 = sigma^2 + 2.  Its maximiser in closed form: b_k = s Phi^-1(#{y_i < k} / n).  The labels are drawn
    from the model with cutpoints -1, 0.2, 1.5 and fitted from -2, -1.5, 2.5: converged, log q raised, the
    closed-form maximiser to 1e-5 (measured 1.5e-7), and the true cutpoints within the sampling error (0.4;
    measured 0.24)."""
    rng = np.random.default_rng(0)
    n, true_cuts, sigma = 100, np.array([-1.0, 0.2, 1.5]), 0.5
    X = 50.0 * np.arange(n, dtype=float)[:, None]
    y = np.digitize(np.sqrt(2.0) * rng.normal(size=n) + sigma * rng.normal(size=n), true_cuts).astype(float)
    lik = gpc.likelihoods.Ordinal(4, [-2.0, -1.5, 2.5], noise=sigma)
    trainable = (False, eqx.tree_at(lambda t: t.noise, jax.tree.map(lambda _: True, lik), False))
    result = gpc.fit(gpc.EP(), KERNEL, lik, X, y, trainable=trainable)
    assert bool(result.converged) and float(result.objective) > float(result.history[0])
    assert float(result.likelihood.noise) == sigma and float(result.kernel.variance) == 2.0
    cuts = np.asarray(result.likelihood.cutpoints)
    closed_form = np.sqrt(sigma**2 + 2.0) * special.ndtri(np.array([np.mean(y < k) for k in (1, 2, 3)]))
    print("fitted cutpoints", cuts, closed_form, int(result.num_steps), np.max(np.abs(cuts - closed_form)))
    np.testing.assert_allclose(cuts, closed_form, atol=1e-5)
    np.testing.assert_allclose(cuts, true_cuts, atol=0.4)
    p = gpc.predict(result.posterior, X[:5])
    assert p.shape == (5, 4)
    np.testing.assert_allclose(result.likelihood.mean_rank(p), p @ np.arange(4.0), rtol=1e-14)


@pytest.mark.slow
def test_constructor_labels_and_integrators():
    """Clear errors for bad settings and labels; parameters and cutpoints; MacKay refused; mask and a sparse prior
    (Z = X: K~ = K) agree with the plain problem; jit and vmap over the cutpoints."""
    with pytest.raises(gpc.GPClassError, match="strictly increasing"):
        gpc.likelihoods.Ordinal(3, [0.5, 0.5])
    with pytest.raises(gpc.GPClassError, match="num_classes >= 2"):
        gpc.likelihoods.Ordinal(1)
    with pytest.raises(gpc.GPClassError, match="needs 2 cutpoints"):
        gpc.likelihoods.Ordinal(3, [0.0])
    with pytest.raises(gpc.GPClassError, match="noise"):
        gpc.likelihoods.Ordinal(3, noise=0.0)
    lik = gpc.likelihoods.Ordinal(5)
    np.testing.assert_array_equal(lik.cutpoints, [-1.5, -0.5, 0.5, 1.5])
    assert lik.unconstrained == ("first_cutpoint",) and lik.num_latent == 1 and lik.log_concave
    X = PROBLEMS["n3"]
    for bad, message in [([0.0, 1.5, 2.0], "whole numbers"), ([0.0, 3.0, 1.0], "lie in 0..2"),
                         ([0.0, np.nan, 1.0], "NaN")]:
        with pytest.raises(Exception, match=message):
            jax.block_until_ready(jit_call(K3.check_labels, np.array(bad), 3, jnp.float64))
    with pytest.raises(gpc.GPClassError, match="integers"):
        K3.check_labels(np.array([True, False, True]), 3, jnp.float64)
    np.testing.assert_array_equal(K3.host_labels(np.array([0, 2, 1]), np.float64), Y3)
    with pytest.raises(gpc.GPClassError, match="lie in 0..2"):
        K3.host_labels(np.array([0, 3, 1]), np.float64)
    # gpc.fit refuses labels of one class (likelihood.one_class); left-out cases (mask: -1) are no class.
    assert bool(K3.one_class(jnp.array([2.0, 2.0, 2.0]))) and bool(K3.one_class(jnp.array([-1.0, 0.0, 0.0])))
    assert not bool(K3.one_class(jnp.array([0.0, -1.0, 2.0])))
    post = run("laplace", X=X)[4]
    with pytest.raises(gpc.GPClassError, match="Exact"):
        gpc.predict(post, X_TEST, integrator=gpc.integrators.MacKay())

    @gpc.jit
    def checks(cuts, X, y, mask):
        lik = gpc.likelihoods.Ordinal(3, cuts, noise=SIGMA3)
        masked = gpc.infer(gpc.Laplace(), KERNEL, lik, X, y, mask=mask).log_marginal
        sparse = gpc.infer(gpc.Laplace(), gpc.Sparse(KERNEL, X[:3], jitter=0.0), lik, X[:3], y[:3]).log_marginal
        return masked, sparse

    cuts = np.stack([CUTS3, CUTS3 + 0.3])
    X4, y4, mask = np.r_[X, [[5.0]]], np.r_[Y3, 0.0], np.array([True, True, True, False])
    masked, sparse = jax.vmap(checks, in_axes=(0, None, None, None))(cuts, X4, y4, mask)
    plain = [run("laplace", lik=gpc.likelihoods.Ordinal(3, c, noise=SIGMA3), X=X)[0] for c in cuts]
    np.testing.assert_allclose(masked, plain, rtol=1e-12)
    np.testing.assert_allclose(sparse, plain, rtol=1e-6)  # Z = X: K~ = K up to the factorisation's rounding


# ---------------------------------------------------------------------------------------------------------------
# The cumulative logit link (Ordinal(K, link="logit"))

LOGIT4 = gpc.likelihoods.Ordinal(4, CUTS4, noise=0.7, link="logit")


def mp_logit_log_prob(k, f, cuts, sigma):
    """log(sigma(b) - sigma(a)) in mpmath (60 digits hold it for |f| <= 40: sigma is never below e^-60 there)."""
    K = len(cuts) + 1
    lower = 0 if k == 0 else 1 / (1 + mpmath.exp(-(mpmath.mpf(cuts[k - 1]) - f) / sigma))
    upper = 1 if k == K - 1 else 1 / (1 + mpmath.exp(-(mpmath.mpf(cuts[k]) - f) / sigma))
    return mpmath.log(upper - lower)


def np_logit_prob(k, f, cuts, sigma):
    ext = np.concatenate([[-np.inf], cuts, [np.inf]])
    return special.expit((ext[k + 1] - f) / sigma) - special.expit((ext[k] - f) / sigma)


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")
def test_logit_link_against_mpmath_and_adaptive_quadrature():
    """The logit link's log p for every class, |f| up to 40, against mpmath (relative 1e-12), its slope and W
    against mpmath's numerical derivatives (1e-12, 1e-10), W > 0; EP's tilted moments (log Z, mean, variance:
    means -6..5, variances 0.01..400) and the predictive class probabilities against scipy's adaptive quadrature
    (1e-9; a first check against scipy measured 1.3e-14 for the probabilities, 6e-15 for the moments)."""
    k, f = (a.ravel() for a in np.meshgrid(np.arange(4.0), F_TAIL, indexing="ij"))
    lp, slope, W = (np.asarray(a) for a in jit_call(LOGIT4.derivatives, k, f))
    with mpmath.workdps(60):
        ref = []
        for ki, fi in zip(k.astype(int), f):
            log_p = lambda t, ki=ki: mp_logit_log_prob(ki, t, CUTS4, 0.7)  # noqa: E731
            ref.append([float(log_p(mpmath.mpf(fi))), float(mpmath.diff(log_p, fi)),
                        -float(mpmath.diff(log_p, fi, 2))])
    ref = np.array(ref)
    np.testing.assert_allclose(lp, ref[:, 0], rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(slope, ref[:, 1], rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(W, ref[:, 2], rtol=1e-10, atol=1e-300)
    assert np.all(W > 0)
    m, v = np.array([-6.0, -1.0, 0.4, 2.0, 5.0]), np.array([0.01, 1.0, 4.0, 30.0, 400.0])
    p = np.asarray(jit_call(LOGIT4.predictive_probability, m, v))
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-13)
    for label in range(4):
        log_z, mean, var = (np.asarray(a) for a in jit_call(LOGIT4.tilted_moments, np.full(5, float(label)), m, v))
        for i in range(5):
            lo, hi = m[i] - 12 * np.sqrt(v[i]), m[i] + 12 * np.sqrt(v[i])

            def moment(j, i=i, label=label):
                def integrand(t):
                    return np_logit_prob(label, t, CUTS4, 0.7) * np.exp(-0.5 * (t - m[i]) ** 2 / v[i]) * t**j
                return integrate.quad(integrand, lo, hi, points=list(CUTS4), limit=400, epsabs=0,
                                      epsrel=1e-13)[0] / np.sqrt(2 * np.pi * v[i])

            z, m1, m2 = moment(0), moment(1), moment(2)
            np.testing.assert_allclose(p[i, label], z, rtol=1e-9, atol=1e-15)
            np.testing.assert_allclose(log_z[i], np.log(z), rtol=1e-9, atol=1e-12)
            np.testing.assert_allclose(mean[i], m1 / z, atol=1e-9 * np.sqrt(v[i]))
            np.testing.assert_allclose(var[i], m2 / z - (m1 / z) ** 2, rtol=1e-8)


@pytest.mark.slow
def test_logit_two_classes_equal_logistic_under_laplace_ep_and_kl():
    """Ordinal(2, link="logit") (cutpoint 0, sigma = 1, labels 0/1) against Logistic (labels -1/+1): log q, its
    gradient, the latent moments and the predictions under Laplace (rounding), EP and KL (whose tilted moments and
    expectations come from different quadrature rules: 1e-8)."""
    y01 = np.array([0.0, 1.0, 1.0])
    for name, rtol in [("laplace", 1e-12), ("ep", 1e-8), ("kl", 1e-8)]:
        ordinal = run(name, lik=gpc.likelihoods.Ordinal(2, link="logit"), y=y01)
        logistic = run(name, lik=gpc.likelihoods.Logistic(), y=2 * y01 - 1)
        np.testing.assert_allclose(ordinal[0], logistic[0], rtol=rtol)
        for a, b in [(ordinal[1], logistic[1]), (ordinal[2], logistic[2]), (ordinal[5][0], logistic[5][0])]:
            np.testing.assert_allclose(a, b, rtol=rtol, atol=1e-12)
        np.testing.assert_allclose(ordinal[3][:, 1], logistic[3], rtol=rtol)


@pytest.mark.slow
def test_logit_link_ep_exact_on_independent_cases_and_gradients():
    """On three independent cases EP is exact for the logit link too: log Z, the posterior means and variances
    against a Gauss-Hermite rule in numpy (1e-8); KL's log q below log Z (gap < 0.1); the gradient of EP's log Z
    in the kernel's and the likelihood's parameters against central differences (h = 1e-5; 1e-6 relative)."""
    lik = gpc.likelihoods.Ordinal(3, CUTS3, noise=SIGMA3, link="logit")
    z, w = np.polynomial.hermite_e.hermegauss(200)
    F = np.sqrt(2.0) * z  # each case's prior N(0, 2)
    log_w = np.log(w / np.sqrt(2 * np.pi))
    log_z, means, variances = 0.0, [], []
    for label in Y3.astype(int):
        with np.errstate(divide="ignore"):  # far nodes: a probability that underflows to 0
            log_p = log_w + np.log(np_logit_prob(label, F, CUTS3, SIGMA3))
        total = special.logsumexp(log_p)
        P = np.exp(log_p - total)
        log_z += total
        means.append(P @ F)
        variances.append(P @ (F - P @ F) ** 2)
    ep = run("ep", lik=lik, X=PROBLEMS["n1"])
    np.testing.assert_allclose(ep[0], log_z, rtol=1e-8)
    np.testing.assert_allclose(ep[1], means, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(ep[2], variances, rtol=1e-8)
    kl = run("kl", lik=lik, X=PROBLEMS["n1"])
    assert log_z - 0.1 < kl[0] <= log_z + 1e-10
    params = np.r_[THETA, CUTS3[0], np.diff(CUTS3), SIGMA3]

    def evaluate(v):
        lik = gpc.likelihoods.Ordinal.from_parameters(3, v[2], v[3:4], v[4], link="logit")
        value, *_, (g_theta, g_lik) = run("ep", lik=lik, theta=v[:2])
        return value, np.r_[g_theta, g_lik.first_cutpoint, g_lik.increments, g_lik.noise]

    _, grad = evaluate(params)
    h = 1e-5
    fd = np.array([(evaluate(params + h * e)[0] - evaluate(params - h * e)[0]) / (2 * h) for e in np.eye(5)])
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-9)


def test_logit_link_refusals():
    with pytest.raises(gpc.GPClassError, match="link must be 'probit' or 'logit'"):
        gpc.likelihoods.Ordinal(3, link="cloglog")
