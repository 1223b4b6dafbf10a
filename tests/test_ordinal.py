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
