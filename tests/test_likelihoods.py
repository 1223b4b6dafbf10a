"""Likelihoods: derivatives, tail stability, and Gaussian averages against quadrature."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
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
    lp, d1, W = lik.derivatives(jnp.asarray(y), jnp.asarray(F))
    # The closed forms agree with automatic differentiation of log_prob (the generic protocol)
    # where the latter has no cancellation.
    moderate = np.abs(F) <= 12
    generic = gpc.likelihoods.AbstractLikelihood.derivatives(lik, jnp.asarray(y[moderate]), jnp.asarray(F[moderate]))
    for ours, auto in zip((lp, d1, W), generic):
        np.testing.assert_allclose(ours[moderate], auto, rtol=1e-6, atol=1e-15)
    lp_ref, d1_ref, W_ref = closed_form(lik, y, F)
    assert np.all(np.isfinite(lp)) and np.all(np.isfinite(d1)) and np.all(np.isfinite(W))
    np.testing.assert_allclose(lp, lp_ref, rtol=1e-12, atol=1e-300)
    np.testing.assert_allclose(d1, d1_ref, rtol=1e-9, atol=1e-300)
    np.testing.assert_allclose(W, W_ref, rtol=1e-6, atol=1e-300)
    assert np.all(W >= 0)


def test_log_phi_does_not_underflow():
    lp = gpc.likelihoods.Probit().log_prob(jnp.ones(3), jnp.array([-40.0, -1e3, -1e6]))
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
    got = gpc.likelihoods.Logistic().predictive_probability(jnp.asarray(means), jnp.full(7, var))
    ref = np.array([reference_average(m, var) for m in means])
    np.testing.assert_allclose(got, ref, atol=1e-9, rtol=0)


def test_probit_average_is_exact():
    means, var = np.array([-3.0, 0.0, 1.5]), np.array([0.2, 9.0, 150.0])
    got = gpc.likelihoods.Probit().predictive_probability(jnp.asarray(means), jnp.asarray(var))
    ref = [
        integrate.quad(lambda f, m=m, v=v: special.ndtr(f) * stats.norm.pdf(f, m, np.sqrt(v)), -np.inf, np.inf)[0]
        for m, v in zip(means, var)
    ]
    np.testing.assert_allclose(got, ref, atol=1e-9)


def test_mackay_approximation_is_close_but_not_exact():
    means, var = jnp.array([-2.0, 0.5, 3.0]), jnp.array([1.0, 4.0, 50.0])
    approx = gpc.mackay_probability(means, var)
    exact = gpc.likelihoods.Logistic().predictive_probability(means, var)
    np.testing.assert_allclose(approx, jax.nn.sigmoid(means / jnp.sqrt(1 + jnp.pi * var / 8)), rtol=1e-14)
    assert np.max(np.abs(approx - exact)) < 0.02
    assert np.max(np.abs(approx - exact)) > 1e-4
