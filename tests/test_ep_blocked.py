"""The blocked sequential EP sweep (sites in blocks of 64) for n > 64, with a padded last block, and in panels.

n = 100 gives one full block of 64 sites and a last block of 36 sites padded to 64; blocks of 16 in three panels
are compared too.  The truth is an
independent plain-numpy transcription of GPML Algorithm 3.5 (one exact rank-one update of the whole of
Sigma per site, eq. 3.70, no blocks), written here.  The sweep arithmetic is compared one sweep at a time
(a fixed-point comparison alone could not see it: at a fixed point every site update is a no-op, so a
wrong rank-one update would still stop at the right sites); the converged result is compared with the
numpy fixed point and with the parallel schedule's, and the gradient with central finite differences.
"""

import functools

import jax
import numpy as np
import pytest
from conftest import FAST_COMPILE, central_difference, se_kernel, standardised_subset
from scipy import special

import gpclass as gpc
from gpclass._covariance import DenseCovariance
from gpclass._inference.ep import _sequential_sweep

N = 100  # > 64 and not a multiple of 64: blocks of 64 and 36 (+ 28 padding) sites
LOG_VARIANCE, LOG_LENGTHSCALE = np.log(10.0), np.log(2.0)
PROBIT = gpc.likelihoods.Probit()


def data():
    return standardised_subset("pima", 7, n=N)


# ----------------------------------------------------------------------------------------------------------
# GPML Algorithm 3.5 in plain numpy (probit likelihood, undamped, natural site parameters)


def numpy_probit_tilted(y, m_cav, v_cav):
    """log Z_i, mu^_i, sigma^2_i of the tilted distribution Phi(y f) N(f|m_cav, v_cav) (GPML eq. 3.58)."""
    z = y * m_cav / np.sqrt(1.0 + v_cav)
    log_z = special.log_ndtr(z)
    ratio = np.exp(-0.5 * z**2 - 0.5 * np.log(2 * np.pi) - log_z)  # N(z) / Phi(z)
    m_hat = m_cav + y * v_cav * ratio / np.sqrt(1.0 + v_cav)
    v_hat = v_cav - v_cav**2 * ratio * (z + ratio) / (1.0 + v_cav)
    return log_z, m_hat, v_hat


def numpy_gram(X, log_variance=LOG_VARIANCE, log_lengthscale=LOG_LENGTHSCALE):
    """The SE covariance in numpy."""
    sq = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
    return np.exp(log_variance) * np.exp(-0.5 * sq / np.exp(2 * log_lengthscale))


def numpy_marginals(K, tau, nu):
    """Sigma = (K^-1 + S~)^-1 = K - K S~^1/2 B^-1 S~^1/2 K and mu = Sigma nu~ (GPML lines 13-15)."""
    s = np.sqrt(tau)
    B = np.eye(len(tau)) + s[:, None] * K * s[None, :]
    Sigma = K - (K * s[None, :]) @ np.linalg.solve(B, s[:, None] * K)
    return Sigma, Sigma @ nu


def numpy_sweep(K, y, tau, nu, order=None):
    """One sweep of GPML Algorithm 3.5 (lines 4-12), sites in ``order`` (default 1..n), Sigma recomputed first."""
    tau, nu = tau.copy(), nu.copy()
    Sigma, mu = numpy_marginals(K, tau, nu)
    for i in range(len(y)) if order is None else order:
        tau_cav = 1.0 / Sigma[i, i] - tau[i]  # eq. 3.56
        nu_cav = mu[i] / Sigma[i, i] - nu[i]
        _, m_hat, v_hat = numpy_probit_tilted(y[i], nu_cav / tau_cav, 1.0 / tau_cav)
        delta_tau = 1.0 / v_hat - tau_cav - tau[i]  # eq. 3.59
        tau[i] += delta_tau
        nu[i] = m_hat / v_hat - nu_cav
        s_i = Sigma[:, i].copy()
        Sigma -= delta_tau / (1.0 + delta_tau * s_i[i]) * np.outer(s_i, s_i)  # eq. 3.70, the whole of Sigma
        mu = Sigma @ nu
    return tau, nu


def numpy_log_z(K, y, tau, nu):
    """log Z_EP = log int N(f|0, K) prod_i t~_i(f_i) df, the sites' normalisers from GPML eq. 3.59, computed densely."""
    Sigma, mu = numpy_marginals(K, tau, nu)
    tau_cav, nu_cav = 1.0 / np.diag(Sigma) - tau, mu / np.diag(Sigma) - nu
    m_cav, v_cav = nu_cav / tau_cav, 1.0 / tau_cav
    log_z, _, _ = numpy_probit_tilted(y, m_cav, v_cav)
    m_site, v_site = nu / tau, 1.0 / tau
    log_z_site = log_z + 0.5 * np.log(2 * np.pi * (v_cav + v_site)) + 0.5 * (m_cav - m_site) ** 2 / (v_cav + v_site)
    A = K + np.diag(v_site)
    return -0.5 * np.linalg.slogdet(2 * np.pi * A)[1] - 0.5 * m_site @ np.linalg.solve(A, m_site) + np.sum(log_z_site)


def numpy_ep(K, y, init=None, tol=1e-13, max_sweeps=100):
    tau, nu = (np.zeros(len(y)), np.zeros(len(y))) if init is None else init
    for _ in range(max_sweeps):
        new_tau, new_nu = numpy_sweep(K, y, tau, nu)
        change = max(
            np.max(np.abs(new_tau - tau)) / (1 + np.max(np.abs(new_tau))),
            np.max(np.abs(new_nu - nu)) / (1 + np.max(np.abs(new_nu))),
        )
        tau, nu = new_tau, new_nu
        if change < tol:
            return tau, nu
    raise AssertionError("numpy EP did not converge")


# ----------------------------------------------------------------------------------------------------------


@functools.cache
def numpy_fixed_point():
    """The numpy EP fixed point at the test's hyperparameters: K, tau~, nu~, Sigma, mu, log Z_EP."""
    X, y = data()
    K = numpy_gram(X)
    tau, nu = numpy_ep(K, y)
    return K, tau, nu, *numpy_marginals(K, tau, nu), numpy_log_z(K, y, tau, nu)


@gpc.jit
def one_sweep(theta, X, y, init):
    """The library's sequential EP stopped after exactly one sweep from ``init``: its sites and log Z_EP there."""
    method = gpc.EP(schedule="sequential", max_steps=1)
    post = gpc.infer(method, se_kernel(*theta), PROBIT, X, y, init=init, throw=False)
    return post.warm_start, post.log_marginal, post.info.num_steps


@functools.partial(gpc.jit, static_argnums=0)
def converged_ep(schedule, theta, X, y):
    """Converged EP: log Z_EP, its gradient in theta = (log variance, log lengthscale), and the sites,
    posterior mean and latent variances at the training inputs, from one compiled program per schedule (the
    finite differences call it too and discard the gradient)."""

    def log_z(theta):
        post = gpc.infer(gpc.EP(schedule=schedule), se_kernel(*theta), PROBIT, X, y)
        return post.log_marginal, (post.warm_start, post.mean, gpc.predict_latent(post, X)[1], post.info)

    return jax.value_and_grad(log_z, has_aux=True)(theta)


@pytest.mark.slow
def test_one_blocked_sweep_equals_the_unblocked_rank_one_sweep():
    X, y = data()
    K = numpy_fixed_point()[0]
    theta = np.array([LOG_VARIANCE, LOG_LENGTHSCALE])
    # From zero sites (Sigma = K), and from positive sites away from the fixed point (Sigma from a Cholesky
    # factor of B, then every site changes): two starts, one compiled program.
    rng = np.random.default_rng(0)
    starts = [(np.zeros(N), np.zeros(N)), (rng.uniform(0.1, 2.0, N), rng.normal(0.0, 1.0, N))]
    for tau0, nu0 in starts:
        (tau, nu), log_z, sweeps = one_sweep(theta, X, y, (tau0, nu0))
        assert int(sweeps) == 1
        tau_ref, nu_ref = numpy_sweep(K, y, tau0, nu0)
        assert np.min(np.abs(tau_ref - tau0)) > 1e-3  # every site, also in the padded block, moved
        # The same exact rank-one updates in another order of operations: rounding differences only (3e-13 seen).
        np.testing.assert_allclose(tau, tau_ref, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(nu, nu_ref, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(float(log_z), numpy_log_z(K, y, tau_ref, nu_ref), rtol=1e-10)


@functools.partial(gpc.jit, compiler_options=FAST_COMPILE)
def sweep_in_panels(K, y, tau, nu, order):
    """One sweep in blocks of 16 sites (n = 100: 7 blocks, the last with 12 padding sites) in 3 panels."""
    op = DenseCovariance(K)
    cov = op.factor(tau).covariance(op)
    return _sequential_sweep(cov.matrix(), cov.times(nu), PROBIT, y, tau, nu, 1.0, order, block=16, panels=3)


@pytest.mark.parametrize("random_order", [False, True], ids=["order-1-n", "random-order"])
def test_sweep_in_panels_updating_the_trailing_part_equals_the_rank_one_sweep(random_order):
    """Each panel (3, 2 and 2 blocks) updates only the part of Sigma that the later sites read; in a random order
    Sigma is first put in the visiting order.  The truth: GPML Algorithm 3.5 on the whole of Sigma, same order."""
    X, y = data()
    K = numpy_fixed_point()[0]
    rng = np.random.default_rng(1)
    tau0, nu0 = rng.uniform(0.1, 2.0, N), rng.normal(0.0, 1.0, N)
    order = rng.permutation(N) if random_order else None
    tau, nu = sweep_in_panels(K, y, tau0, nu0, order)
    tau_ref, nu_ref = numpy_sweep(K, y, tau0, nu0, order)
    assert np.min(np.abs(tau_ref - tau0)) > 1e-3  # every site moved
    np.testing.assert_allclose(tau, tau_ref, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(nu, nu_ref, rtol=1e-10, atol=1e-12)


@pytest.mark.slow
def test_converged_result_matches_numpy_and_the_parallel_fixed_point():
    X, y = data()
    _, tau_ref, nu_ref, Sigma_ref, mu_ref, log_z_ref = numpy_fixed_point()
    theta = np.array([LOG_VARIANCE, LOG_LENGTHSCALE])
    (log_z, (sites, mean, var, info)), grad = converged_ep("sequential", theta, X, y)
    (par_log_z, (par_sites, par_mean, _, par_info)), par_grad = converged_ep("parallel", theta, X, y)
    assert bool(info.converged) and bool(par_info.converged)
    assert int(info.num_steps) < int(par_info.num_steps)  # the point of the sequential schedule
    # Both stop when a sweep changes the sites by <= 1e-10 relative; EP contracts, so the sites are within a few
    # 1e-10 of the fixed point (1e-9 seen for the damped parallel schedule), and log Z_EP, stationary in the
    # sites, much closer.
    for (tau, nu), mu, value in [(sites, mean, log_z), (par_sites, par_mean, par_log_z)]:
        np.testing.assert_allclose(tau, tau_ref, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(nu, nu_ref, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(mu, mu_ref, rtol=1e-7, atol=1e-9)
        np.testing.assert_allclose(float(value), log_z_ref, rtol=1e-10)
    np.testing.assert_allclose(var, np.diag(Sigma_ref), rtol=1e-7)
    # The gradient is the same function of the fixed point whichever schedule found it.
    np.testing.assert_allclose(grad, par_grad, rtol=1e-7)


def test_gradient_matches_finite_differences():
    X, y = data()
    theta = np.array([LOG_VARIANCE, LOG_LENGTHSCALE])
    _, grad = converged_ep("sequential", theta, X, y)
    # h = 1e-4: truncation O(h^2 f''') ~ 1e-8; the inner tolerance (1e-10 on the sites, to which log Z_EP is
    # stationary) and rounding (~1e-14 |log Z|) add < 1e-8 after division by 2h.
    fd = central_difference(lambda t: float(converged_ep("sequential", t, X, y)[0][0]), theta)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-7)

    # And of the unblocked numpy EP's log Z_EP (converged to 1e-13 at each theta +- h, from the sites at theta).
    def numpy_value(t):
        K = numpy_gram(X, *t)
        return numpy_log_z(K, y, *numpy_ep(K, y, init=numpy_fixed_point()[1:3]))

    fd_numpy = central_difference(numpy_value, theta)
    np.testing.assert_allclose(grad, fd_numpy, rtol=1e-6, atol=1e-7)
