"""Case weights (``weights=``): the power likelihood p(y|f)^w.

Oracles: Laplace and KL with whole-number weights against the data with repeated rows (exact by construction);
weight 0 against ``mask``; a fractional-weight Laplace against an independent NumPy Newton iteration; power EP's
tilted moments against adaptive quadrature (scipy); EP on one case (where EP is exact) against the quadrature of
the power-likelihood posterior; gradients against central differences.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import assert_directional_derivatives, se_kernel
from scipy import integrate, optimize, special, stats

import gpclass as gpc
from gpclass.likelihoods._weighted import Weighted

LOGISTIC, PROBIT = gpc.likelihoods.Logistic(), gpc.likelihoods.Probit()
KERNEL = gpc.kernels.SquaredExponential(np.float64(2.0), np.float64(1.5))
RNG = np.random.default_rng(0)
X = RNG.normal(size=(8, 2))
Y = np.array([1.0, -1.0, 1.0, 1.0, -1.0, -1.0, 1.0, -1.0])
W = np.array([1.0, 2.0, 3.0, 0.0, 1.0, 2.0, 1.0, 1.0])
X_TEST = RNG.normal(size=(5, 2))


def _numpy_log_lik(lik, f):
    """log p(+1|f), NumPy: the oracle's own."""
    return special.log_ndtr(f) if lik is PROBIT else -np.logaddexp(0.0, -f)


@pytest.mark.parametrize("method", [gpc.Laplace(), gpc.KL()], ids=["laplace", "kl"])
@pytest.mark.parametrize("lik", [LOGISTIC, PROBIT], ids=["logistic", "probit"])
@pytest.mark.slow
def test_whole_numbers_are_repeated_cases(method, lik):
    weighted = gpc.infer(method, KERNEL, lik, X, Y, weights=W)
    k = W.astype(int)
    repeated = gpc.infer(method, KERNEL, lik, np.repeat(X, k, axis=0), np.repeat(Y, k))
    np.testing.assert_allclose(weighted.log_marginal, repeated.log_marginal, rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(weighted.predict(X_TEST), repeated.predict(X_TEST), rtol=0, atol=1e-10)


@pytest.mark.parametrize("method", [gpc.Laplace(), gpc.KL(), gpc.EP()], ids=["laplace", "kl", "ep"])
@pytest.mark.slow
def test_zero_weight_is_mask(method):
    masked = gpc.infer(method, KERNEL, PROBIT, X, Y, mask=W > 0)
    weighted = gpc.infer(method, KERNEL, PROBIT, X, Y, weights=(W > 0).astype(float))
    np.testing.assert_allclose(weighted.log_marginal, masked.log_marginal, rtol=1e-12)
    # and a weight of 0 where the mask keeps the case equals the mask leaving it out
    both = gpc.infer(method, KERNEL, PROBIT, X, Y, weights=np.ones(8), mask=W > 0)
    np.testing.assert_allclose(both.log_marginal, masked.log_marginal, rtol=1e-12)


def _numpy_laplace(K, y, w, lik):
    """log q of the Laplace approximation to prod_i p(y_i|f_i)^{w_i} N(f|0, K): Newton in f with numerical
    derivatives of the NumPy log-likelihood (independent of the library)."""
    def psi_parts(f):
        h = 1e-4
        lp = w * _numpy_log_lik(lik, y * f)
        d1 = w * (_numpy_log_lik(lik, y * (f + h)) - _numpy_log_lik(lik, y * (f - h))) / (2 * h)
        d2 = w * (_numpy_log_lik(lik, y * (f + h)) - 2 * _numpy_log_lik(lik, y * f)
                  + _numpy_log_lik(lik, y * (f - h))) / h**2
        return lp, d1, -d2

    f = np.zeros(len(y))
    for _ in range(100):
        _, g, Wd = psi_parts(f)
        f = np.linalg.solve(np.linalg.inv(K) + np.diag(Wd), Wd * f + g)
    lp, _, Wd = psi_parts(f)
    # analytic W at the mode for the determinant: the numerical second difference is good to ~1e-8
    return np.sum(lp) - 0.5 * f @ np.linalg.solve(K, f) - 0.5 * np.linalg.slogdet(np.eye(len(y)) + np.diag(Wd) @ K)[1]


@pytest.mark.parametrize("lik", [LOGISTIC, PROBIT], ids=["logistic", "probit"])
def test_fractional_laplace_against_numpy(lik):
    Xs, ys, ws = X[:3], Y[:3], np.array([0.3, 1.7, 2.5])
    K = 2.0 * np.exp(-0.5 * np.sum((Xs[:, None] - Xs[None]) ** 2, axis=-1) / 1.5**2)  # KERNEL's Gram matrix
    expected = _numpy_laplace(K, ys, ws, lik)
    got = gpc.infer(gpc.Laplace(), KERNEL, lik, Xs, ys, weights=ws).log_marginal
    np.testing.assert_allclose(got, expected, rtol=1e-6)


def _tilted_oracle(lik, w, m, v):
    """(log Z, mean, variance) of p(+1|f)^w N(f|m, v) / Z by adaptive quadrature about the mode."""
    s = np.sqrt(v)

    def log_t(f):
        return w * _numpy_log_lik(lik, f) + stats.norm.logpdf(f, m, s)

    mode = optimize.minimize_scalar(lambda f: -log_t(f), bracket=(m - s, m + s)).x
    shift = log_t(mode)
    lo, hi = min(m, mode) - 15 * s, max(m, mode) + 15 * s
    points = [p for p in (-10.0, 0.0, 10.0, mode) if lo < p < hi]

    def quad(g):
        return integrate.quad(lambda f: g(f) * np.exp(log_t(f) - shift), lo, hi, points=points, limit=1000,
                              epsabs=0, epsrel=1e-13)[0]

    z = quad(lambda f: 1.0)
    mean = quad(lambda f: f - mode) / z
    var = quad(lambda f: (f - mode - mean) ** 2) / z
    return np.log(z) + shift, mode + mean, var


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")
@pytest.mark.parametrize("lik", [LOGISTIC, PROBIT], ids=["logistic", "probit"])
@pytest.mark.slow
def test_power_ep_tilted_moments_against_quadrature(lik):
    cases = [(w, m, v) for w in (0.3, 2.0, 4.5) for m in (-20.0, -2.0, 3.0) for v in (1e-3, 1.0, 1e3)]
    w, m, v = (np.array(c) for c in zip(*cases))
    log_z, mean, var = Weighted(lik).tilted_moments(jnp.asarray(w), jnp.asarray(m), jnp.asarray(v))
    expected = np.array([_tilted_oracle(lik, *c) for c in cases]).T
    np.testing.assert_allclose(log_z, expected[0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose((mean - expected[1]) / np.sqrt(expected[2]), 0.0, atol=1e-8)
    np.testing.assert_allclose(var, expected[2], rtol=1e-8)


@pytest.mark.slow
def test_power_ep_whole_and_zero_weights_are_closed_form():
    m, v = jnp.array([0.3, -1.0]), jnp.array([2.0, 0.5])
    for lik in (LOGISTIC, PROBIT):
        got = Weighted(lik).tilted_moments(jnp.array([1.0, -1.0]), m, v)
        expected = lik.tilted_moments(jnp.array([1.0, -1.0]), m, v)
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)
        log_z, mean, var = Weighted(lik).tilted_moments(jnp.array([0.0, 0.0]), m, v)
        np.testing.assert_array_equal(log_z, 0.0)
        np.testing.assert_array_equal(mean, m)
        np.testing.assert_array_equal(var, v)


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")
@pytest.mark.parametrize("w", [2.0, 0.4])
@pytest.mark.slow
def test_power_ep_on_one_case_is_exact(w):
    """EP with one site is exact: log q = log int p(y|f)^w N(f|0, k) df, whatever w.  Two copies of the case
    (two sites, w = 2) are not: power EP is not EP on repeated cases."""
    x, y = X[:1], Y[:1]
    k = float(KERNEL.variance)
    log_z, mean, var = _tilted_oracle(PROBIT, w, 0.0, k)
    post = gpc.infer(gpc.EP(), KERNEL, PROBIT, x, y, weights=np.array([w]))
    np.testing.assert_allclose(post.log_marginal, log_z, rtol=1e-9)
    latent_mean, latent_var = post.latent(x)
    np.testing.assert_allclose(latent_mean, y * mean, rtol=1e-8)
    np.testing.assert_allclose(latent_var, var, rtol=1e-8)
    if w == 2.0:
        two_sites = gpc.infer(gpc.EP(), KERNEL, PROBIT, np.repeat(x, 2, axis=0), np.repeat(y, 2))
        assert abs(float(two_sites.log_marginal) - log_z) > 1e-4


@pytest.mark.parametrize("method", [gpc.Laplace(), gpc.EP(), gpc.KL()], ids=["laplace", "ep", "kl"])
@pytest.mark.slow
def test_gradients_with_fractional_weights(method):
    ws = np.array([0.5, 1.7, 1.0, 0.0, 2.3, 0.2, 1.0, 3.0])

    @jax.jit
    def value_and_grad(params):
        return jax.value_and_grad(
            lambda p: gpc.infer(method, se_kernel(*p), PROBIT, X, Y, weights=ws).log_marginal)(params)

    assert_directional_derivatives(value_and_grad, jnp.array([np.log(2.0), np.log(1.5)]), h=1e-5, rtol=1e-5)


def test_refused_combinations():
    with pytest.raises(gpc.GPClassError, match="weights: supported .* got JaakkolaJordan"):
        gpc.infer(gpc.JaakkolaJordan(), KERNEL, LOGISTIC, X, Y, weights=W)
    with pytest.raises(gpc.GPClassError, match="weights: supported .* got MCMC"):
        gpc.infer(gpc.MCMC(), KERNEL, LOGISTIC, X, Y, weights=W, key=jax.random.key(0))
    with pytest.raises(gpc.GPClassError, match="weights must be numbers of shape"):
        gpc.infer(gpc.Laplace(), KERNEL, LOGISTIC, X, Y, weights=W[:3])
    with pytest.raises(Exception, match="finite and >= 0"):
        gpc.infer(gpc.Laplace(), KERNEL, LOGISTIC, X, Y, weights=-W)


@pytest.mark.slow
def test_fit_with_weights_matches_repeated_cases():
    k = W.astype(int)
    kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(1.0))
    a = gpc.fit(gpc.Laplace(), kernel, LOGISTIC, X, Y, weights=W, max_steps=30)
    b = gpc.fit(gpc.Laplace(), kernel, LOGISTIC, np.repeat(X, k, axis=0), np.repeat(Y, k), max_steps=30)
    np.testing.assert_allclose(a.objective, b.objective, rtol=1e-7)


# ---------------------------------------------------------------- the estimator


@pytest.mark.slow
def test_estimator_weights():
    """scikit-learn's estimator: whole-number sample weights (now case weights with Laplace) give the model of
    the repeated cases; fractional ones and class_weight='balanced' (n / (n_classes n_c)) give gpc.infer's
    weighted model."""
    from gpclass.sklearn import GaussianProcessClassifier

    Xs, ys = np.concatenate([X, X_TEST]), np.concatenate([Y, [1.0, 1.0, 1.0, -1.0, 1.0]])
    ks = np.array([1, 2, 3, 0, 1, 2, 1, 1, 1, 1, 2, 1, 1])
    weighted = GaussianProcessClassifier(optimize=False).fit(Xs, ys, sample_weight=ks.astype(float))
    repeated = GaussianProcessClassifier(optimize=False).fit(np.repeat(Xs, ks, axis=0), np.repeat(ys, ks))
    np.testing.assert_allclose(weighted.predict_proba(X_TEST), repeated.predict_proba(X_TEST), atol=1e-10)
    np.testing.assert_allclose(weighted.log_marginal_likelihood_value_, repeated.log_marginal_likelihood_value_,
                               rtol=1e-10)

    fractional = np.linspace(0.2, 2.0, len(ys))
    balanced = len(ys) / (2 * np.array([np.sum(ys == c) for c in ys]))
    for kwargs, w in [({"sample_weight": fractional}, fractional), ({"class_weight": "balanced"}, balanced)]:
        for method in ("laplace", "ep"):
            if "class_weight" in kwargs:
                clf = GaussianProcessClassifier(optimize=False, method=method, class_weight="balanced").fit(Xs, ys)
            else:
                clf = GaussianProcessClassifier(optimize=False, method=method).fit(Xs, ys, sample_weight=w)
            post = gpc.infer(gpc.Laplace() if method == "laplace" else gpc.EP(), clf.gpc_kernel_, LOGISTIC, Xs, ys,
                             weights=w)
            np.testing.assert_allclose(clf.log_marginal_likelihood_value_, post.log_marginal, rtol=1e-8)
            np.testing.assert_allclose(clf.predict_proba(X_TEST)[:, 1], post.predict(X_TEST), atol=1e-8)


# ---------------------------------------------------------------- soft labels

S = np.array([0.9, 0.2, 1.0, 0.0, 0.5, 0.35, 0.7, 0.05])


def _soft(lik):
    return gpc.likelihoods.SoftLabels(lik)


# EP's default schedule differs between the two (soft labels' tilted moments are by quadrature): one schedule for both.
@pytest.mark.parametrize("method", [gpc.Laplace(), gpc.KL(), gpc.EP(schedule="sequential")],
                         ids=["laplace", "kl", "ep"])
@pytest.mark.slow
def test_soft_labels_zero_one_are_hard_labels(method):
    hard = gpc.infer(method, KERNEL, PROBIT, X, Y)
    soft = gpc.infer(method, KERNEL, _soft(PROBIT), X, (Y > 0).astype(float))
    np.testing.assert_allclose(soft.log_marginal, hard.log_marginal, rtol=1e-13)
    np.testing.assert_allclose(soft.predict(X_TEST), hard.predict(X_TEST), rtol=1e-13)


@pytest.mark.parametrize("lik", [LOGISTIC, PROBIT], ids=["logistic", "probit"])
def test_soft_labels_laplace_against_numpy(lik):
    """s log p(+1|f) + (1 - s) log p(-1|f) is w log p(+1|f) + w' log p(-1|f): two weighted hard cases at one input,
    so the NumPy Laplace of the weights (s, 1 - s) on the input repeated with labels (+1, -1) is the oracle."""
    Xs, s = X[:3], np.array([0.3, 0.8, 0.55])
    X2 = np.concatenate([Xs, Xs])
    K = 2.0 * np.exp(-0.5 * np.sum((X2[:, None] - X2[None]) ** 2, axis=-1) / 1.5**2)
    K = K + 1e-12 * np.eye(6)  # the copies make K singular; the oracle inverts it
    expected = _numpy_laplace(K, np.array([1.0] * 3 + [-1.0] * 3), np.concatenate([s, 1 - s]), lik)
    got = gpc.infer(gpc.Laplace(), KERNEL, _soft(lik), Xs, s).log_marginal
    np.testing.assert_allclose(got, expected, rtol=1e-5)


def _soft_oracle(lik, s, m, v):
    """Tilted moments of p(+1|f)^s p(-1|f)^(1-s) N(f|m, v) by adaptive quadrature."""
    sd = np.sqrt(v)

    def log_t(f):
        return s * _numpy_log_lik(lik, f) + (1 - s) * _numpy_log_lik(lik, -f) + stats.norm.logpdf(f, m, sd)

    mode = optimize.minimize_scalar(lambda f: -log_t(f), bracket=(m - sd, m + sd)).x
    shift = log_t(mode)
    lo, hi = min(m, mode) - 15 * sd, max(m, mode) + 15 * sd
    points = [p for p in (-10.0, 0.0, 10.0, mode) if lo < p < hi]

    def quad(g):
        return integrate.quad(lambda f: g(f) * np.exp(log_t(f) - shift), lo, hi, points=points, limit=1000,
                              epsabs=0, epsrel=1e-13)[0]

    z = quad(lambda f: 1.0)
    mean = quad(lambda f: f - mode) / z
    return np.log(z) + shift, mode + mean, quad(lambda f: (f - mode - mean) ** 2) / z


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")
@pytest.mark.parametrize("lik", [LOGISTIC, PROBIT], ids=["logistic", "probit"])
@pytest.mark.slow
def test_soft_labels_tilted_moments_against_quadrature(lik):
    cases = [(s, m, v) for s in (0.1, 0.5, 0.97) for m in (-8.0, 0.5, 4.0) for v in (1e-3, 1.0, 1e3)]
    s, m, v = (np.array(c) for c in zip(*cases))
    log_z, mean, var = _soft(lik).tilted_moments(jnp.asarray(s), jnp.asarray(m), jnp.asarray(v))
    expected = np.array([_soft_oracle(lik, *c) for c in cases]).T
    np.testing.assert_allclose(log_z, expected[0], rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose((mean - expected[1]) / np.sqrt(expected[2]), 0.0, atol=1e-8)
    np.testing.assert_allclose(var, expected[2], rtol=1e-8)


@pytest.mark.filterwarnings("ignore::scipy.integrate.IntegrationWarning")
@pytest.mark.slow
def test_soft_label_ep_on_one_case_is_exact():
    log_z, mean, var = _soft_oracle(PROBIT, 0.3, 0.0, float(KERNEL.variance))
    post = gpc.infer(gpc.EP(), KERNEL, _soft(PROBIT), X[:1], np.array([0.3]))
    np.testing.assert_allclose(post.log_marginal, log_z, rtol=1e-9)
    latent_mean, latent_var = post.latent(X[:1])
    np.testing.assert_allclose(latent_mean, mean, rtol=1e-8)
    np.testing.assert_allclose(latent_var, var, rtol=1e-8)


@pytest.mark.parametrize("method", [gpc.Laplace(), gpc.EP(), gpc.KL()], ids=["laplace", "ep", "kl"])
@pytest.mark.slow
def test_soft_label_gradients(method):
    @jax.jit
    def value_and_grad(params):
        return jax.value_and_grad(
            lambda p: gpc.infer(method, se_kernel(*p), _soft(LOGISTIC), X, S).log_marginal)(params)

    assert_directional_derivatives(value_and_grad, jnp.array([np.log(2.0), np.log(1.5)]), h=1e-5, rtol=1e-5)


@pytest.mark.slow
def test_soft_labels_refused():
    with pytest.raises(Exception, match="probabilities in .0, 1."):
        gpc.infer(gpc.Laplace(), KERNEL, _soft(PROBIT), X, S + 0.5)
    with pytest.raises(gpc.GPClassError, match="weights: supported for the binary likelihoods"):
        gpc.infer(gpc.Laplace(), KERNEL, _soft(PROBIT), X, S, weights=W)
    masked = gpc.infer(gpc.Laplace(), KERNEL, _soft(PROBIT), X, S, mask=W > 0)
    kept = gpc.infer(gpc.Laplace(), KERNEL, _soft(PROBIT), X[W > 0], S[W > 0])
    np.testing.assert_allclose(masked.log_marginal, kept.log_marginal, rtol=1e-12)


@pytest.mark.slow
def test_weights_under_vmap():
    """Weights ride on the labels, so a batch of weight vectors is one vmapped call (EP's sweep slices them)."""
    ws = np.stack([W, np.linspace(0.1, 2.0, 8)])
    batched = jax.vmap(lambda w: gpc.infer(gpc.EP(), KERNEL, PROBIT, X, Y, weights=w).log_marginal)(ws)
    for w, value in zip(ws, batched):
        np.testing.assert_allclose(value, gpc.infer(gpc.EP(), KERNEL, PROBIT, X, Y, weights=w).log_marginal,
                                   rtol=1e-10)


def test_ordinal_and_multinomial_probit_refuse_weights():
    """(The softmax takes them: tests/test_softmax_weights.py.)"""
    with pytest.raises(gpc.GPClassError, match="weights: supported for the binary likelihoods"):
        gpc.infer(gpc.Laplace(), KERNEL, gpc.likelihoods.Ordinal(3), X, np.arange(8) % 3, weights=W)
    with pytest.raises(gpc.GPClassError, match="weights: supported .* got EP with MultinomialProbit"):
        gpc.infer(gpc.EP(), KERNEL, gpc.likelihoods.MultinomialProbit(3), X, np.arange(8) % 3, weights=W)
