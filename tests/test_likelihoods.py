"""Likelihoods: derivatives, tail stability, and Gaussian averages against quadrature."""

import jax
import jax.numpy as jnp
import mpmath
import numpy as np
import pytest
from conftest import jit_call
from scipy import integrate, special, stats

import gpclass as gpc

LIKELIHOODS = [gpc.likelihoods.Logistic(), gpc.likelihoods.Probit()]
F = np.array([-30.0, -8.0, -2.0, -0.3, 0.0, 0.4, 3.0, 12.0, 35.0])


def closed_form(lik, y, f):
    """Independent formulas: GPML eqs. 3.15-3.16 for the logistic, Rasmussen & Williams Table 3.1 for the probit."""
    z = y * f
    if isinstance(lik, gpc.likelihoods.Logistic):
        return -np.logaddexp(0, -z), y * special.expit(-z), special.expit(f) * special.expit(-f)
    ratio = np.exp(stats.norm.logpdf(z) - special.log_ndtr(z))
    log_phi = np.where(z > 0, np.log1p(-special.ndtr(-z)), special.log_ndtr(z))
    return log_phi, y * ratio, ratio * (z + ratio)


@pytest.mark.parametrize("lik", LIKELIHOODS, ids=["logistic", "probit"])
@pytest.mark.parametrize("label", [1.0, -1.0])
def test_derivatives_match_closed_forms_in_the_tails(lik, label):
    y = np.full_like(F, label)
    lp, d1, W = jit_call(lik.derivatives, y, F)
    # The closed forms agree with automatic differentiation of log_prob (the generic protocol)
    # where the latter has no cancellation.
    moderate = np.abs(F) <= 12
    generic = jit_call(gpc.likelihoods.AbstractLikelihood.derivatives, lik, y[moderate], F[moderate])
    for ours, auto in zip((lp, d1, W), generic):
        np.testing.assert_allclose(ours[moderate], auto, rtol=1e-6, atol=1e-15)
    lp_ref, d1_ref, W_ref = closed_form(lik, y, F)
    assert np.all(np.isfinite(lp)) and np.all(np.isfinite(d1)) and np.all(np.isfinite(W))
    np.testing.assert_allclose(lp, lp_ref, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(d1, d1_ref, rtol=1e-9, atol=1e-300)
    np.testing.assert_allclose(W, W_ref, rtol=1e-6, atol=1e-300)
    assert np.all(W >= 0)


@pytest.mark.parametrize("lik", LIKELIHOODS, ids=["logistic", "probit"])
def test_curvature_has_finite_derivatives_where_it_underflows(lik):
    """Laplace's reverse pass differentiates W(f): it must stay finite where W underflows to 0
    (probit beyond y f ~ 38.6, where the erfcx form of N/Phi overflowed and gave NaN)."""
    f = jnp.array([-60.0, -38.0, -5.0, 0.0, 5.0, 30.0, 37.5, 38.0, 39.0, 45.0, 60.0, 800.0])
    y = jnp.ones_like(f)
    slope, dW = jit_call(
        lambda lik, y, f: [jax.vmap(jax.grad(lambda t: lik.derivatives(y[:1], t[None])[k][0]))(f) for k in (1, 2)],
        lik, y, f,
    )
    assert np.all(np.isfinite(slope)) and np.all(np.isfinite(dW))
    # Where W has underflowed, so has its slope; elsewhere the slope is that of the closed form.
    W = np.asarray(jit_call(lik.derivatives, y, f)[2])
    assert np.all(np.asarray(dW)[W == 0] == 0)
    moderate = np.abs(np.asarray(f)) <= 30
    h = 1e-5
    fd = (closed_form(lik, 1.0, np.asarray(f) + h)[2] - closed_form(lik, 1.0, np.asarray(f) - h)[2]) / (2 * h)
    np.testing.assert_allclose(np.asarray(dW)[moderate], fd[moderate], rtol=1e-5, atol=1e-12)


def test_probit_tail_has_no_holes():
    """Dense scan of the lower tail: jax 0.10.2's erfcx is exactly 0 on [26.543, 26.642] (float64) and
    [9.19, 9.42] (float32), which made log Phi(z) = -inf near z = -37.6 (float64) and z = -13.2 (float32)."""
    z = np.linspace(-60.0, 0.0, 24001)  # step 0.0025: dozens of points inside each former hole
    lik = gpc.likelihoods.Probit()
    lp = np.asarray(jit_call(lik.log_prob, np.ones_like(z), z))
    np.testing.assert_allclose(lp, special.log_ndtr(z), rtol=1e-13)
    _, slope, W = jit_call(lik.derivatives, np.ones_like(z), z)
    assert np.all(np.isfinite(slope)) and np.all(np.isfinite(W))
    z32 = jnp.asarray(z[z > -18.0], jnp.float32)
    lp32 = np.asarray(jit_call(lik.log_prob, jnp.ones_like(z32), z32))
    np.testing.assert_allclose(lp32, special.log_ndtr(np.asarray(z32, np.float64)), rtol=2e-6)


def test_log_phi_does_not_underflow():
    lp = jit_call(gpc.likelihoods.Probit().log_prob, jnp.ones(3), jnp.array([-40.0, -1e3, -1e6]))
    # log Phi(z) ~ -z^2/2 - log(-z) - log(sqrt(2 pi)) for z -> -inf
    z = np.array([-40.0, -1e3, -1e6])
    asymptote = -(z**2) / 2 - np.log(-z) - 0.5 * np.log(2 * np.pi)
    np.testing.assert_allclose(lp, asymptote, rtol=1e-3)


def reference_average(mean, var):
    """int sigma(f) N(f | mean, var) df by adaptive quadrature, split at the step f = 0."""
    s = np.sqrt(var)

    def integrand(f):
        return special.expit(f) * stats.norm.pdf(f, mean, s)

    lo, hi = mean - 40 * s, mean + 40 * s
    points = [p for p in (-30.0, 0.0, 30.0) if lo < p < hi]
    value, _ = integrate.quad(integrand, lo, hi, points=points or None, limit=500, epsabs=1e-14, epsrel=1e-12)
    return value


@pytest.mark.parametrize("var", [1e-8, 0.01, 0.5, 0.99, 1.0, 1.01, 4.0, 25.0, 100.0, 400.0, 2500.0])
def test_logistic_average_is_accurate_at_every_variance(var):
    means = np.array([-30.0, -5.0, -1.0, 0.0, 0.7, 3.0, 20.0])
    got = jit_call(gpc.likelihoods.Logistic().predictive_probability, means, np.full(7, var))
    ref = np.array([reference_average(m, var) for m in means])
    np.testing.assert_allclose(got, ref, atol=1e-9, rtol=0)


@pytest.mark.parametrize("y", [1.0, -1.0])
def test_logistic_far_tail_moments_and_average_are_the_exponential_tilt(y):
    """Far in the tail (y m + s^2 + 8 s <= -37, so e^(y f) < 1e-16 wherever N(f|m, s^2) has mass)
    sigma(y f) = e^(y f) (1 + O(e^(y f))), so to rounding the tilted distribution is N(m + y s^2, s^2) with
    log Z = y m + s^2/2, and E[sigma(f)] = e^(m + s^2/2) for y = 1.  A closed form independent of the
    quadrature; the latent standard deviations s > 1 use the trapezoid rule over the logistic density, whose
    nodes must reach the mass near t = y m."""
    ym = np.array([-50.0, -52.0, -60.0, -70.0, -80.0, -80.0])
    s = np.array([1.01, 1.43, 2.0, 3.0, 1.5, 3.5])
    assert np.all(ym + s**2 + 8 * s <= -37)
    mean, var, labels = y * ym, s**2, np.full(6, y)
    lik = gpc.likelihoods.Logistic()
    log_z, m_hat, v_hat = (np.asarray(a) for a in jit_call(lik.tilted_moments, labels, mean, var))
    np.testing.assert_allclose(log_z, ym + 0.5 * s**2, rtol=1e-13)
    np.testing.assert_allclose(m_hat, mean + y * s**2, rtol=1e-13)
    np.testing.assert_allclose(v_hat, s**2, rtol=1e-11)
    p = np.asarray(jit_call(lik.predictive_probability, mean, var))
    expected = np.exp(ym + 0.5 * s**2) if y == 1.0 else -np.expm1(ym + 0.5 * s**2)
    np.testing.assert_allclose(p, expected, rtol=1e-12)


def test_probit_average_is_exact():
    means, var = np.array([-3.0, 0.0, 1.5]), np.array([0.2, 9.0, 150.0])
    got = jit_call(gpc.likelihoods.Probit().predictive_probability, means, var)
    ref = [
        integrate.quad(lambda f, m=m, v=v: special.ndtr(f) * stats.norm.pdf(f, m, np.sqrt(v)), -np.inf, np.inf)[0]
        for m, v in zip(means, var)
    ]
    np.testing.assert_allclose(got, ref, atol=1e-9)


def test_mackay_approximation_is_close_but_not_exact():
    means, var = jnp.array([-2.0, 0.5, 3.0]), jnp.array([1.0, 4.0, 50.0])
    approx = jit_call(gpc.mackay_probability, means, var)
    exact = jit_call(gpc.likelihoods.Logistic().predictive_probability, means, var)
    np.testing.assert_allclose(approx, jax.nn.sigmoid(means / jnp.sqrt(1 + jnp.pi * var / 8)), rtol=1e-14)
    assert np.max(np.abs(approx - exact)) < 0.02
    assert np.max(np.abs(approx - exact)) > 1e-4


def np_likelihood(name, epsilon, y, f):
    """p(y|f) in numpy/scipy, independent of the library: probit, logistic or step, with label noise epsilon."""
    base = {"probit": special.ndtr, "logistic": special.expit, "heaviside": lambda z: (z > 0) * 1.0}[name](y * f)
    return epsilon + (1 - 2 * epsilon) * base


_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(20)


def gauss_legendre_moments(fun, z0, lo=-30.0, hi=30.0, panels=300):
    """int_lo^hi z^k fun(z) dz for k = 0, 1, 2: composite 20-point Gauss-Legendre on panels of width <= 0.1,
    split at z0 (where fun may jump); vectorised, where scipy's adaptive quad calls back into Python per node.

    A logistic likelihood in these coordinates bends over a width 1/s >= 0.08 (s <= 12.2 here), so each panel
    holds an analytic function whose nearest singularity is farther than its half-width: 20 nodes resolve it to
    rounding.  Checked against scipy's adaptive quad (epsrel 1e-12) on the grid of the test below: log Z, the
    mean (in units of s) and the relative variance agree to 1.5e-13."""
    cuts = [lo, z0, hi] if lo < z0 < hi else [lo, hi]
    total = np.zeros(3)
    for a, b in zip(cuts[:-1], cuts[1:]):
        edges = np.linspace(a, b, panels + 1)
        half = 0.5 * np.diff(edges)[:, None]
        z = 0.5 * (edges[1:] + edges[:-1])[:, None] + half * _GL_NODES
        values = half * _GL_WEIGHTS * fun(z)
        total += [np.sum(values * z**k) for k in range(3)]
    return total


LIKELIHOOD_CLASSES = {
    "probit": gpc.likelihoods.Probit,
    "logistic": gpc.likelihoods.Logistic,
    "heaviside": gpc.likelihoods.Heaviside,
}


@pytest.mark.parametrize("name", ["probit", "logistic", "heaviside"])
def test_tilted_moments_match_quadrature(name):
    """log Z, mean and variance of p(y|f) N(f|m, v) / Z (GPML eq. 3.57), including label noise (K&G eq. 9)."""
    base = LIKELIHOOD_CLASSES[name]()
    grid = [(v, m, y) for v in [1e-3, 2.0, 150.0] for m in [-15.0, -1.0, 2.5] for y in [1.0, -1.0]]
    var, mean, y = (np.array(c) for c in zip(*grid))
    for epsilon, lik in [(0.0, base), (0.07, gpc.likelihoods.LabelNoise(base, epsilon=0.07))]:
        log_z, m_hat, v_hat = (np.asarray(a) for a in jit_call(lik.tilted_moments, y, mean, var))
        for i, (v_i, m_i, y_i) in enumerate(grid):
            s = np.sqrt(v_i)

            def density(z, k):  # in standard coordinates f = m_i + s z
                return z**k * np_likelihood(name, epsilon, y_i, m_i + s * z) * stats.norm.pdf(z)

            z0 = -m_i / s
            if name == "heaviside" and epsilon == 0.0:
                # A truncated Gaussian, far in the tail (|z0| up to 474) where double-precision quadrature
                # sees 0: the textbook truncated-normal moments of y f ~ N(y m, s^2) on y f > 0, in 50 digits.
                with mpmath.workdps(50):
                    alpha = -y_i * mpmath.mpf(m_i) / s  # the truncation point of y f in standard units
                    tail = mpmath.ncdf(-alpha)
                    lam = mpmath.npdf(alpha) / tail
                    mean_ref = m_i + y_i * s * lam
                    var_ref = s**2 * (1 + alpha * lam - lam**2)
                    np.testing.assert_allclose(log_z[i], float(mpmath.log(tail)), rtol=1e-12, atol=1e-12)
                    np.testing.assert_allclose(m_hat[i], float(mean_ref), rtol=1e-9, atol=1e-9 * s)
                    np.testing.assert_allclose(v_hat[i], float(var_ref), rtol=1e-7, atol=1e-12)
                continue
            m = gauss_legendre_moments(lambda z: density(z, 0), z0)
            np.testing.assert_allclose(log_z[i], np.log(m[0]), rtol=1e-9, atol=1e-9)
            np.testing.assert_allclose(m_hat[i], m_i + s * m[1] / m[0], atol=1e-8 * s)
            np.testing.assert_allclose(v_hat[i], v_i * (m[2] / m[0] - (m[1] / m[0]) ** 2), rtol=1e-7)


def test_label_noise_likelihood():
    base = gpc.likelihoods.Probit()
    lik = gpc.likelihoods.LabelNoise(base, epsilon=0.1)
    f = jnp.linspace(-6.0, 3.0, 10)
    np.testing.assert_allclose(np.exp(jit_call(lik.log_prob, jnp.ones(10), f)), 0.1 + 0.8 * special.ndtr(np.asarray(f)),
                               rtol=1e-12)
    assert not lik.log_concave and base.log_concave
    _, _, W = jit_call(lik.derivatives, jnp.ones(10), f)
    assert float(jnp.min(W)) < 0  # not log-concave: Laplace refuses it
    np.testing.assert_allclose(lik.predictive_probability(jnp.array([0.5]), jnp.array([2.0])),
                               0.1 + 0.8 * special.ndtr(0.5 / np.sqrt(3.0)), rtol=1e-12)


@pytest.mark.parametrize("name", ["probit", "logistic", "heaviside"])
def test_expected_log_likelihood_matches_quadrature(name):
    """E[log p(y|f)] under N(m, v): the data term of the variational bound (Gauss-Hermite or closed form)."""
    lik = gpc.likelihoods.LabelNoise(LIKELIHOOD_CLASSES[name](), epsilon=0.07)
    grid = [(v, m, y) for v in [1e-3, 0.5, 4.0, 150.0] for m in [-4.0, 0.3, 2.5] for y in [1.0, -1.0]]
    var, mean, y = (np.array(c) for c in zip(*grid))
    got = np.asarray(jit_call(lik.expected_log_prob, y, mean, var))
    for i, (v_i, m_i, y_i) in enumerate(grid):
        s = np.sqrt(v_i)
        integrand = lambda z: np.log(np_likelihood(name, 0.07, y_i, m_i + s * z)) * stats.norm.pdf(z)
        z0 = -m_i / s
        want = integrate.quad(integrand, -30, 30, points=[z0] if -30 < z0 < 30 else None, limit=500,
                              epsabs=1e-13, epsrel=1e-13)[0]
        np.testing.assert_allclose(got[i], want, rtol=1e-8, atol=1e-10)


def test_heaviside_is_refused_by_laplace_and_infinite_outside_its_support():
    lik = gpc.likelihoods.Heaviside()
    np.testing.assert_array_equal(lik.log_prob(jnp.array([1.0, -1.0]), jnp.array([0.5, 0.5])), [0.0, -np.inf])
    assert float(lik.expected_log_prob(jnp.ones(1), jnp.ones(1), jnp.ones(1))[0]) == -np.inf
    np.testing.assert_allclose(lik.predictive_probability(jnp.array([0.5, -1.0]), jnp.array([2.0, 0.0])),
                               [special.ndtr(0.5 / np.sqrt(2.0)), 0.0])
    with pytest.raises(ValueError, match="log-concave"):
        gpc.infer(gpc.Laplace(), gpc.kernels.SquaredExponential(), lik, np.zeros((2, 1)), np.array([1, -1]))


def _logistic_derivative(k: int, y: float, f: float) -> float:
    """The k-th derivative in f of log sigma(y f), k = 1..4, in closed form (p = sigma(y f), d/dz p = p (1 - p))."""
    p, q = special.expit(y * f), special.expit(-y * f)
    by_order = {1: q, 2: -p * q, 3: -p * q * (q - p), 4: -p * q * (1.0 - 6.0 * p * q)}
    return y**k * by_order[k]


def test_expected_log_likelihood_derivatives_match_bonnet_and_price():
    """The first and second derivatives of E(m, v) = E_{N(m, v)}[log p(y|f)] that KL's Newton steps take
    (``expected_log_lik_derivatives``) against Bonnet's and Price's theorems, each average by a composite
    Gauss-Legendre rule of its own (960 panels of 20 nodes): dE/dm = E[l'], dE/dv = E[l'']/2, d2E/dm2 = E[l''],
    d2E/dm dv = E[l''']/2, d2E/dv2 = E[l'''']/4 (logistic, l^(k) in closed form), from std 1e-5 (where
    differentiating through sqrt(v) was 1e2 off) to 20, so both of the rule's branches (std below and above 1)
    are checked."""
    from gpclass._inference._expectations import expected_log_lik_derivatives

    grid = [(m, v, y) for m in (-30.0, -3.0, 0.5, 2.5) for v in (1e-10, 0.7, 9.0, 400.0) for y in (1.0, -1.0)]
    m, v, y = (np.array(c) for c in zip(*grid))
    got = np.asarray(jit_call(lambda y, m, v: jnp.stack(expected_log_lik_derivatives(
        gpc.likelihoods.Logistic(), y, m, v)), y, m, v))

    def average(k, m_i, v_i, y_i):  # composite Gauss-Legendre in z over [-12, 12], panels of width <= 0.05
        s = np.sqrt(v_i)
        return gauss_legendre_moments(lambda z: _logistic_derivative(k, y_i, m_i + s * z) * stats.norm.pdf(z),
                                      -m_i / s, lo=-12.0, hi=12.0, panels=480)[0]

    for i, (m_i, v_i, y_i) in enumerate(grid):
        e1, e2, e3, e4 = (average(k, m_i, v_i, y_i) for k in (1, 2, 3, 4))
        want = [e1, 0.5 * e2, e2, 0.5 * e3, 0.5 * e3, 0.25 * e4]  # g_m, g_v, h_mm, h_mv, h_vm, h_vv
        np.testing.assert_allclose(got[:, i], want, rtol=1e-8, atol=1e-12)


def _probit_derivative(k: int, y: float, f: float) -> float:
    """The k-th derivative in f of log Phi(y f), k = 1, 2, in closed form (r = phi / Phi at z = y f).

    r' = -r (z + r), so l' = y r and l'' = -r (z + r)."""
    z = y * f
    r = np.exp(stats.norm.logpdf(z) - special.log_ndtr(z))
    return {1: y * r, 2: -r * (z + r)}[k]


@pytest.mark.parametrize("name", ["logistic", "probit"])
def test_expected_log_likelihood_by_either_rule_against_closed_form_derivatives(name):
    """Logistic and probit declare ``hermite_std`` (1.5): where every std is at most that, E[l] and the derivatives KL
    takes come from 64-node Gauss-Hermite, else from the panels.  Both rules, on means in [-40, 8] and stds up to 1.5
    (plus, for the panels, one case of std 3 in the batch), against averages of l, l', l'' in closed form by a
    composite Gauss-Legendre rule of their own (and l''', l'''' for the logistic): E, dE/dm = E[l'],
    dE/dv = E[l'']/2, d2E/dm2 = E[l''] (Bonnet and Price)."""
    from gpclass._inference._expectations import expected_log_lik, expected_log_lik_derivatives

    lik = LIKELIHOOD_CLASSES[name]()
    assert lik.hermite_std == 1.5
    grid = [(m, s, y) for m in (-40.0, -8.0, -2.0, 0.3, 3.0, 8.0) for s in (1e-4, 0.4, 1.0, 1.5) for y in (1.0, -1.0)]
    derivative = _logistic_derivative if name == "logistic" else _probit_derivative
    orders = (1, 2, 3, 4) if name == "logistic" else (1, 2)

    def average(k, m_i, s_i, y_i):
        log_p = special.log_expit if name == "logistic" else special.log_ndtr  # l itself, without underflow
        fun = (lambda z: log_p(y_i * (m_i + s_i * z))) if k == 0 else (lambda z: derivative(k, y_i, m_i + s_i * z))
        return gauss_legendre_moments(lambda z: fun(z) * stats.norm.pdf(z), 0.0, lo=-12.0, hi=12.0, panels=480)[0]

    for extra in ([], [(0.3, 3.0, 1.0)]):  # all stds <= 1.5: Gauss-Hermite; one std of 3: the panels for all
        m, s, y = (np.array(c) for c in zip(*(grid + extra)))
        value = np.asarray(jit_call(lambda y, m, v: expected_log_lik(lik, y, m, v), y, m, s**2))
        got = np.asarray(jit_call(lambda y, m, v: jnp.stack(expected_log_lik_derivatives(lik, y, m, v)), y, m, s**2))
        for i, (m_i, s_i, y_i) in enumerate(grid):
            e = {k: average(k, m_i, s_i, y_i) for k in (0, *orders)}
            np.testing.assert_allclose(value[i], e[0], rtol=1e-9, atol=1e-14)
            want = [e[1], 0.5 * e[2], e[2]] + ([0.5 * e[3], 0.5 * e[3], 0.25 * e[4]] if name == "logistic" else [])
            np.testing.assert_allclose(got[:len(want), i], want, rtol=1e-8, atol=1e-14)


@pytest.mark.parametrize("name", ["label_noise", "ordinal"])
def test_expected_log_likelihood_gradient_in_the_likelihoods_parameters(name):
    """d E / d theta for the likelihood's own parameters (a label-flip rate; ordinal cutpoints and noise, whose
    panels' boundaries move with them) against central differences of E, which the rule computes to 1e-12."""
    if name == "label_noise":
        lik = gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), epsilon=0.07)
        y = np.array([1.0, -1.0, 1.0, -1.0])
    else:
        lik = gpc.likelihoods.Ordinal(4, cutpoints=[-1.0, 0.3, 1.2], noise=0.4)
        y = np.array([0.0, 1.0, 2.0, 3.0])
    mean, var = np.array([-2.0, 0.1, 0.9, 3.0]), np.array([0.05, 1.3, 20.0, 0.4])
    leaves, treedef = jax.tree.flatten(lik)
    total = lambda lik: jnp.sum(lik.expected_log_prob(jnp.asarray(y), jnp.asarray(mean), jnp.asarray(var)))  # noqa: E731
    grads, value = jax.tree.leaves(jax.jit(jax.grad(total))(lik)), jax.jit(total)
    h = 1e-5
    for k, leaf in enumerate(leaves):
        flat = np.asarray(leaf, dtype=float).ravel()
        for j in range(flat.size):
            shifted = []
            for sign in (1.0, -1.0):
                moved = flat.copy()
                moved[j] += sign * h
                tree = jax.tree.unflatten(treedef, [jnp.asarray(moved.reshape(np.shape(leaf))) if i == k else x
                                                    for i, x in enumerate(leaves)])
                shifted.append(float(value(tree)))
            np.testing.assert_allclose(np.asarray(grads[k]).ravel()[j], (shifted[0] - shifted[1]) / (2 * h),
                                       rtol=1e-6, atol=1e-8)


def _wrapped_likelihoods():
    """Likelihoods whose ``expected_log_prob`` combines a base's (likelihood, labels), with labels of each kind."""
    from gpclass.likelihoods._masked import Masked
    from gpclass.likelihoods._weighted import Weighted

    logistic, probit = gpc.likelihoods.Logistic(), gpc.likelihoods.Probit()
    return {
        "weighted": (Weighted(probit), np.array([1.0, -2.5, 0.0, 0.3, -1.0])),
        "masked": (Masked(logistic), np.array([1.0, -1.0, 0.0, 1.0, 0.0])),
        "soft_labels": (gpc.likelihoods.SoftLabels(logistic), np.array([0.9, 0.0, 1.0, 0.25, 0.5])),
    }


@pytest.mark.parametrize("name", ["weighted", "masked", "soft_labels"])
def test_expected_log_likelihood_derivatives_of_combined_likelihoods(name):
    """The derivatives KL takes from a weighted, masked or soft-label likelihood (each delegating to its base's
    averaged derivatives) equal automatic differentiation of that likelihood's own expected_log_prob, at variances
    where differentiating through sqrt(v) has no cancellation to speak of (std 0.55 to 20)."""
    from gpclass.likelihoods._gaussian_average import differentiated

    lik, y = _wrapped_likelihoods()[name]
    mean, var = np.array([-3.0, 0.4, 1.1, 2.0, -0.7]), np.array([0.3, 2.0, 15.0, 0.8, 400.0])
    ours, auto = jax.device_get(jax.jit(lambda y, m, v: (lik.expected_log_prob_derivatives(y, m, v),
                                                         differentiated(lik.expected_log_prob, y, m, v)))(y, mean, var))
    for a, b in zip(ours, auto):
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-12)


def test_logistic_log_prob_derivatives_against_high_precision_differentiation():
    """``Logistic.log_prob_derivatives`` (closed forms in the two sigmoids) against mpmath's numerical
    differentiation of log sigma(y f) at 50 digits, for f in [-40, 40] and y = +-1: the first four derivatives to
    1e-13 of the larger of their value and e^-|f| (the order of p q, which every derivative beyond the first
    carries: relative accuracy in the tails; l''' = 0 at f = 0); and the library's default, automatic
    differentiation of ``log_prob``, to the same tolerance."""
    mpmath.mp.dps = 50
    f = np.concatenate([np.linspace(-40.0, 40.0, 33), [-1e-3, 0.0, 1e-3]])
    lik = gpc.likelihoods.Logistic()
    for label in (1.0, -1.0):
        y = np.full_like(f, label)
        got = np.asarray(jax.jit(lik.log_prob_derivatives)(y, f))
        default = np.asarray(jax.jit(lambda y, f: gpc.likelihoods.AbstractLikelihood.log_prob_derivatives(
            lik, y, f))(y, f))
        for k in range(1, 5):
            want = np.array([float(mpmath.diff(lambda t: -mpmath.log1p(mpmath.exp(-label * t)), mpmath.mpf(x), k))
                             for x in f])
            scale = 1e-13 * np.maximum(np.abs(want), np.exp(-np.abs(f)))
            np.testing.assert_array_less(np.abs(got[k - 1] - want), scale)
            np.testing.assert_array_less(np.abs(default[k - 1] - want), scale)


def test_a_logistic_subclass_with_its_own_log_prob_gets_automatic_derivatives():
    """A subclass of Logistic that changes ``log_prob`` (here log sigma(2 y f)) must not inherit the closed forms
    of log sigma(y f): its ``log_prob_derivatives`` are automatic differentiation of its own ``log_prob``
    (the chain rule: 2^k times the logistic's at 2 f)."""

    class Steeper(gpc.likelihoods.Logistic):
        def log_prob(self, y, f):
            return super().log_prob(y, 2.0 * f)

    f = np.linspace(-5.0, 5.0, 11)
    y = np.where(f > 0, 1.0, -1.0)
    got = jax.jit(Steeper().log_prob_derivatives)(y, f)
    base = jax.jit(gpc.likelihoods.Logistic().log_prob_derivatives)(y, 2.0 * f)
    for k, (g, b) in enumerate(zip(got, base), start=1):
        np.testing.assert_allclose(g, 2.0**k * np.asarray(b), rtol=1e-12, atol=1e-15)
