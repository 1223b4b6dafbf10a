"""HMC and AIS on the (non-Gaussian) probit likelihood against tensor Gauss-Hermite quadrature, n = 1..3.

Monte Carlo checks are seeded and compare an estimate with the quadrature truth in units of a standard error
estimated from the same run: independent chains (MCMC) or independent annealing runs (AIS), so the standard
error comes from the spread of independent replicates, not from an assumed autocorrelation time.  Every
comparison is |estimate - truth| <= Z_MAX * se, and every se is also bounded above so that a test cannot pass
by being noisy.
"""

import functools

import jax
import numpy as np
import pytest
from scipy.special import log_ndtr, logsumexp, ndtr

import gpclass as gpc

PROBIT = gpc.likelihoods.Probit()
KERNEL = gpc.kernels.SquaredExponential(variance=2.0, lengthscale=0.8)
Y3 = np.array([1.0, -1.0, 1.0])
X_TEST = np.array([[0.3], [2.5]])  # between the training inputs, and beyond them
# Posteriors of n = 1, 2 and 3 coupled latents, all with data of one shape (3, 1) so that the tests share one
# compiled program per method (each n would otherwise compile MCMC and AIS again, ~2-7 s each): inputs 50
# length scales apart are exactly independent under the prior (the kernel underflows to 0), so "n1" is three
# independent one-case problems, "n2" a coupled pair and an independent case, "n3" three coupled cases.  The
# quadrature truth is computed on the same 3-d problems, so nothing relies on the factorisation except the
# closed form that checks the quadrature itself (test_quadrature_matches_closed_form_for_independent_cases).
PROBLEMS = {
    "n1": np.array([[0.0], [40.0], [80.0]]),
    "n2": np.array([[0.0], [0.6], [40.0]]),
    "n3": np.array([[0.0], [0.6], [1.5]]),
}

# With replicates r = 1..R and se = sd(replicates) / sqrt(R), (estimate - truth) / se is Student-t with R - 1
# degrees of freedom: P(|t_63| > 5) ~ 5e-6, and the file makes 45 such comparisons, a false alarm on ~2e-4 of
# seeds.  (AIS's delta-method errors, over 4096 runs of weights in (0, 1], are close to normal: tighter.)  Over
# 60 seeds of each check the largest |z| seen was 3.2 (HMC moments), 2.9 (AIS log Z) and 3.3 (predictions).
Z_MAX = 5.0
NUM_CHAINS = 64

# Trajectory length 1.5 in whitened coordinates, where the posterior sds are 0.6-1: a rotation of 1.5-2.5 rad per
# step.  (0.3 x 8 = 2.4 is ~pi for the one-case posteriors, sd 0.76: each step nearly negates g, which mixes the
# mean superbly and second moments hardly at all -- a standard error of 0.06 on variances instead of 0.01.)
MCMC_HMC = gpc.MCMC(
    sampler=gpc.samplers.HMC(step_size=0.25, num_leapfrog=6), num_samples=500, num_warmup=200, num_chains=NUM_CHAINS
)
# exp(log weight) is an unbiased estimate of Z for any schedule, and the final states weighted by it are a
# consistent importance sample of the posterior; a short schedule tests that bookkeeping hardest.  With T = 2
# (tau = 0, 1/16, 1) and one HMC step (trajectory 2.4, which nearly negates g: the anti-correlated move that
# the MCMC settings avoid) per temperature the final states are far from posterior draws (their plain
# average misses the predictive probability by 20+ standard errors), and an error of O(1/T) in the weights (e.g.
# adding a temperature's increment after the move instead of before: +0.92 nats here, 87 se) is not hidden as it
# is at T = 1000 (+0.04, 2 se).  The long schedule with HMC is tested on a Gaussian likelihood in test_sampling.py.
AIS_HMC = gpc.AIS(num_temperatures=2, num_runs=4096, sampler=gpc.samplers.HMC(step_size=0.3, num_leapfrog=8))


@functools.partial(gpc.jit, static_argnums=0)
def infer(method, X, y, key):
    return gpc.infer(method, KERNEL, PROBIT, X, y, key=key)


def gram(X1, X2):
    """KERNEL's covariance in numpy: 2 exp(-|x - x'|^2 / (2 0.8^2))."""
    return 2.0 * np.exp(-0.5 * ((X1[:, None, 0] - X2[None, :, 0]) / 0.8) ** 2)


def quadrature(y, X, X_test, nodes=60):
    """Under p(f|y) ~ prod Phi(y_i f_i) N(f|0, K), by a tensor Gauss-Hermite rule (60^n nodes, n <= 3):
    E[f], Cov[f], log Z and p(y* = +1 | x*) = E[Phi(E[f*|f] / sqrt(1 + V[f*|f]))] (conftest's brute_force_log_z
    rule, in numpy and scipy only, with the moments and the predictive probability added)."""
    n = len(y)
    K, K_cross = gram(X, X), gram(X_test, X)
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    F = np.stack(np.meshgrid(*([z] * n), indexing="ij"), -1).reshape(-1, n) @ np.linalg.cholesky(K).T
    W = np.prod(np.stack(np.meshgrid(*([w] * n), indexing="ij"), -1).reshape(-1, n), axis=1) / np.sqrt(2 * np.pi) ** n
    log_w = np.log(W) + np.sum(log_ndtr(y * F), axis=1)
    log_z = logsumexp(log_w)
    P = np.exp(log_w - log_z)
    mean = P @ F
    cov = (F - mean).T @ (P[:, None] * (F - mean))
    A = np.linalg.solve(K, K_cross.T)
    cond_var = 2.0 - np.sum(K_cross.T * A, axis=0)
    p_star = P @ ndtr(F @ A / np.sqrt(1.0 + cond_var))
    return mean, cov, log_z, p_star


def assert_within_standard_errors(estimate, truth, se, se_max):
    estimate, truth, se = np.broadcast_arrays(estimate, truth, se)
    assert np.all(se > 0) and np.all(se < se_max), se
    z = (estimate - truth) / se
    assert np.all(np.abs(z) <= Z_MAX), (z, estimate, truth, se)


def test_quadrature_matches_closed_form_for_independent_cases():
    """One case with prior N(0, v): Z = Phi(0) = 1/2 and the tilted moments of GPML eq. 3.58 at zero cavity mean."""
    mean, cov, log_z, _ = quadrature(Y3, PROBLEMS["n1"], X_TEST)
    v, r = 2.0, np.sqrt(2.0 / np.pi)  # r = N(0) / Phi(0)
    np.testing.assert_allclose(log_z, 3 * np.log(0.5), rtol=1e-12)
    np.testing.assert_allclose(mean, Y3 * v * r / np.sqrt(1 + v), rtol=1e-10)
    np.testing.assert_allclose(cov, np.diag(np.full(3, v - v**2 * r**2 / (1 + v))), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_hmc_moments_match_quadrature(problem):
    X, y = PROBLEMS[problem], Y3
    mean, cov, _, _ = quadrature(y, X, X_TEST)
    samples = infer(MCMC_HMC, X, y, jax.random.key(sorted(PROBLEMS).index(problem)))
    assert samples.samples.dtype == np.float64
    assert 0.7 < float(samples.info.acceptance_rate) < 1.0  # HMC actually rejects, and mostly accepts

    # Posterior mean and covariance: per-chain estimates of 64 independent chains (f = 0 start, 200 steps of
    # warm-up), their average against quadrature in units of the standard error of that average.
    chains = np.asarray(samples.samples).reshape(NUM_CHAINS, -1, 3)
    chain_means = chains.mean(axis=1)
    centred = chains - chain_means[:, None, :]
    chain_covs = np.einsum("csi,csj->cij", centred, centred) / (chains.shape[1] - 1)
    # se_max: posterior sds are ~1; 64 x 500 HMC draws gave se ~0.003 on means, ~0.01 on covariances.
    for per_chain, truth, se_max in [(chain_means, mean, 0.01), (chain_covs, cov, 0.03)]:
        se = per_chain.std(axis=0, ddof=1) / np.sqrt(NUM_CHAINS)
        assert_within_standard_errors(per_chain.mean(axis=0), truth, se, se_max)


@pytest.mark.parametrize("problem", list(PROBLEMS))
def test_ais_log_z_and_weighted_predictions_match_quadrature(problem):
    """AIS with HMC moves: log Z, and gpc.predict on the result, which weights each run's final state by its
    normalised importance weight, against quadrature."""
    X, y = PROBLEMS[problem], Y3
    _, _, log_z, p_true = quadrature(y, X, X_TEST)
    annealed = infer(AIS_HMC, X, y, jax.random.key(10 + sorted(PROBLEMS).index(problem)))
    log_w = np.asarray(annealed.log_weights)

    # log Z = log of the mean weight over R = 4096 runs, delta-method standard error sd(w) / (sqrt(R) mean(w))
    # (~0.017 here), recomputed from the runs' log weights; its bias, about -se^2 / 2, is negligible.
    w = np.exp(log_w - log_w.max())
    se = w.std(ddof=1) / (np.sqrt(len(w)) * w.mean())
    np.testing.assert_allclose(float(annealed.log_marginal), logsumexp(log_w) - np.log(len(w)), rtol=1e-12)
    np.testing.assert_allclose(float(annealed.log_marginal_se), se, rtol=1e-10)
    assert_within_standard_errors(float(annealed.log_marginal), log_z, se, 0.03)

    # Predictions: the same average computed here, p_s = Phi(E[f*|f_s] / sqrt(1 + V[f*|f_s])) under the
    # sampler's (jittered) prior, weights w_s = softmax(log_weights).
    p = np.asarray(gpc.predict(annealed, X_TEST))
    assert p.shape == (2,) and p.dtype == np.float64
    L = np.asarray(annealed.chol)
    K_cross = gram(X_TEST, X)
    A = np.linalg.solve(L @ L.T, K_cross.T)
    p_s = ndtr(np.asarray(annealed.samples) @ A / np.sqrt(1.0 + 2.0 - np.sum(K_cross.T * A, axis=0)))
    w = np.exp(log_w - logsumexp(log_w))
    np.testing.assert_allclose(p, w @ p_s, rtol=1e-10)
    assert 1.0 / np.sum(w**2) < 0.6 * len(w)  # the weights are far from equal (effective sample size ~0.45 R)
    # Self-normalised importance sampling: se^2 = sum_s w_s^2 (p_s - p)^2 (delta method); ~0.005 at x* = 0.3.
    se = np.sqrt(np.sum(w[:, None] ** 2 * (p_s - p) ** 2, axis=0))
    assert_within_standard_errors(p, p_true, se, 0.02)
    assert np.max(np.abs(p_s.mean(axis=0) - p_true) / se) > 2 * Z_MAX  # unweighted: wrong (20+ se)
