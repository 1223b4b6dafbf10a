"""MCMC (elliptical slice, HMC) and AIS against closed forms and brute-force quadrature."""

import functools

import jax
import numpy as np
import pytest
from conftest import FAST_COMPILE, brute_force_log_z, gram, jit_call
from jax.scipy.stats import norm
from scipy.stats import norm as sp_norm

import gpclass as gpc

PROBIT = gpc.likelihoods.Probit()
NOISE = 0.7


class GaussianObservations(gpc.likelihoods.AbstractLikelihood):
    """p(y|f) = N(y | f, 0.7^2): the posterior and the evidence are Gaussian in closed form."""

    def log_prob(self, y, f):
        return norm.logpdf(y, f, NOISE)

    def predictive_probability(self, mean, var):
        raise NotImplementedError


GAUSSIAN = GaussianObservations()
X3 = np.array([[0.0], [0.6], [1.5]])
Y3 = np.array([1.0, -1.0, 1.0])
KERNEL = gpc.kernels.SquaredExponential(variance=2.0, lengthscale=0.8)
SAMPLERS = pytest.mark.parametrize("sampler", ["elliptical_slice", "hmc"])
# The tests' programs are compiled with gpclass's XLA options and LLVM optimisation level 0: the same HLO
# optimisations and results equal to rounding, at a third to a half of the compile time; their slower machine code
# does not matter for three cases.


def mcmc(sampler):
    kernel = gpc.samplers.HMC(step_size=0.3, num_leapfrog=8) if sampler == "hmc" else gpc.samplers.EllipticalSlice()
    return gpc.MCMC(sampler=kernel, num_samples=2000, num_warmup=200, num_chains=4)


def ais(sampler):
    kernel = gpc.samplers.HMC(step_size=0.3, num_leapfrog=5) if sampler == "hmc" else gpc.samplers.EllipticalSlice()
    return gpc.AIS(num_temperatures=1000, num_runs=8, sampler=kernel)


@functools.partial(gpc.jit, static_argnums=0, compiler_options=FAST_COMPILE)
def sample_and_anneal(sampler, likelihood, X, y, key):
    """MCMC samples and an AIS estimate of log Z with the same sampler: one compilation for both."""
    key_mcmc, key_ais = jax.random.split(key)
    return (
        gpc.infer(mcmc(sampler), KERNEL, likelihood, X, y, key=key_mcmc),
        gpc.infer(ais(sampler), KERNEL, likelihood, X, y, key=key_ais),
    )


def quadrature_moments(K, y, nodes=60):
    """E[f] and Cov[f] under p(f|y) ~ prod Phi(y_i f_i) N(f|0, K) by a tensor Gauss-Hermite rule."""
    n = len(y)
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    F = np.stack(np.meshgrid(*([z] * n), indexing="ij"), -1).reshape(-1, n) @ np.linalg.cholesky(K).T
    W = np.prod(np.stack(np.meshgrid(*([w] * n), indexing="ij"), -1).reshape(-1, n), axis=1)
    W = W * np.exp(np.sum(np.asarray(jit_call(PROBIT.log_prob, np.tile(np.asarray(y, np.float64), (len(F), 1)), F)), 1))
    W = W / W.sum()
    mean = W @ F
    return mean, (F - mean).T @ (W[:, None] * (F - mean))


def gaussian_posterior(K, y):
    A = np.linalg.solve(K + NOISE**2 * np.eye(len(y)), np.column_stack([y, K]))
    return K @ A[:, 0], K - K @ A[:, 1:]


@SAMPLERS
def test_samplers_and_ais_on_a_gaussian_likelihood(sampler):
    """Invariance of the target: sample moments equal the closed-form posterior; AIS equals the evidence."""
    post, annealed = sample_and_anneal(sampler, GAUSSIAN, X3, Y3, jax.random.key(0))
    K = gram(KERNEL, X3)
    mean, cov = gaussian_posterior(K, Y3)
    samples = np.asarray(post.samples)
    assert samples.shape == (8000, 3)
    assert int(post.info.status) == int(annealed.info.status) == gpc.Status.CONVERGED  # every value finite
    # 8000 correlated draws; posterior sds ~0.5: tolerances are several Monte Carlo standard errors
    np.testing.assert_allclose(samples.mean(0), mean, atol=0.05)
    np.testing.assert_allclose(np.cov(samples.T), cov, atol=0.05)
    if sampler == "hmc":
        assert 0.6 < float(post.info.acceptance_rate) <= 1.0
    K_y = K + NOISE**2 * np.eye(3)
    evidence = -0.5 * Y3 @ np.linalg.solve(K_y, Y3) - 0.5 * np.linalg.slogdet(2 * np.pi * K_y)[1]
    se = float(annealed.log_marginal_se)
    assert 0 < se < 0.15
    assert abs(float(annealed.log_marginal) - evidence) < 4 * se + 0.01


# Three independent one-case problems (inputs 50 length scales apart: the kernel underflows to exactly 0) and three
# coupled cases, both of shape (3, 1): one compiled program of MCMC and AIS serves both (and the prediction test).
PROBIT_INPUTS = {"one-case": np.array([[0.0], [40.0], [80.0]]), "three-coupled": X3}


@pytest.mark.parametrize("problem", list(PROBIT_INPUTS))
@pytest.mark.slow
def test_probit_moments_and_log_z_match_quadrature(problem):
    X = PROBIT_INPUTS[problem]
    post, annealed = sample_and_anneal("elliptical_slice", PROBIT, X, Y3, jax.random.key(len(problem)))
    K = gram(KERNEL, X)
    assert problem != "one-case" or np.count_nonzero(K - np.diag(np.diag(K))) == 0
    mean, cov = quadrature_moments(K, Y3)
    samples = np.asarray(post.samples)
    np.testing.assert_allclose(samples.mean(0), mean, atol=0.06)
    np.testing.assert_allclose(np.var(samples, axis=0), np.diag(cov), rtol=0.08)
    truth = brute_force_log_z(K, PROBIT, Y3)
    se = float(annealed.log_marginal_se)
    assert 0 < se < 0.05
    assert abs(float(annealed.log_marginal) - truth) < 4 * se + 0.01


def test_predictions_average_the_conditional_over_samples():
    post, _ = sample_and_anneal("elliptical_slice", PROBIT, X3, Y3, jax.random.key(5))
    X_test = np.array([[0.3], [2.5]])
    K = np.asarray(post.chol) @ np.asarray(post.chol).T
    K_cross = gram(KERNEL, X_test, X3)
    cond_mean = np.asarray(post.samples) @ np.linalg.solve(K, K_cross.T)  # (S, m)
    cond_var = 2.0 - np.einsum("ij,ji->i", K_cross, np.linalg.solve(K, K_cross.T))
    expected = sp_norm.cdf(cond_mean / np.sqrt(1 + cond_var)).mean(0)
    np.testing.assert_allclose(gpc.predict(post, X_test), expected, rtol=1e-10)
    mean, var = gpc.predict_latent(post, X_test)
    np.testing.assert_allclose(mean, cond_mean.mean(0), rtol=1e-10)
    np.testing.assert_allclose(var, cond_var + cond_mean.var(0), rtol=1e-10)


def test_vmap_over_data_sets_matches_a_loop():
    ys = np.array([Y3, -Y3])
    keys = jax.random.split(jax.random.key(6), 2)
    method = gpc.AIS(num_temperatures=200, num_runs=2)

    def log_z(y, key):
        return gpc.infer(method, KERNEL, PROBIT, X3, y, key=key).log_marginal

    batched = gpc.jit(jax.vmap(log_z), compiler_options=FAST_COMPILE)(ys, keys)
    single = gpc.jit(log_z, compiler_options=FAST_COMPILE)
    for i in range(2):
        np.testing.assert_allclose(float(batched[i]), float(single(ys[i], keys[i])), rtol=1e-12)


def test_errors_are_clear():
    with pytest.raises(ValueError, match="key"):
        gpc.infer(gpc.MCMC(), KERNEL, PROBIT, X3, Y3)
    with pytest.raises(ValueError, match="key"):
        gpc.infer(gpc.AIS(), KERNEL, PROBIT, X3, Y3)
    with pytest.raises(ValueError, match="AIS"):
        gpc.fit(gpc.AIS(), KERNEL, PROBIT, X3, Y3, key=jax.random.key(0))
    with pytest.raises(ValueError, match="MCMC"):
        gpc.fit(gpc.MCMC(), KERNEL, PROBIT, X3, Y3, key=jax.random.key(0))
    with pytest.raises(ValueError, match="num_chains, n"):
        gpc.infer(gpc.MCMC(num_chains=2), KERNEL, PROBIT, X3, Y3, init=np.zeros((3, 3)), key=jax.random.key(0))
    with pytest.raises(ValueError, match="MCMC does not support a sparse prior"):  # Softmax: test_softmax_sampling.py
        gpc.infer(gpc.MCMC(), gpc.Sparse(KERNEL, X3[:2]), PROBIT, X3, Y3, key=jax.random.key(0))
