"""The multi-class gold standard (issue 36, item 1): MCMC and AIS for Softmax(C) against quadrature.

Three cases 50 length scales apart are independent under the prior, so the posterior is a product of three
3-dimensional problems (one case, C = 3 classes each), which a tensor Gauss-Hermite rule in numpy computes
exactly: log Z, the posterior mean and covariance of each case's latents, and p(y* | x*) at the training
inputs themselves (where the conditional variance of f* is the jitter's, so p = E[softmax(F_i) | y]).  A
shared kernel (every class N(0, 2)) and a PerClass kernel (variances 1, 2, 3).
"""

import functools

import jax
import numpy as np
import pytest
from conftest import FAST_COMPILE
from scipy import special

import gpclass as gpc

X = np.array([[0.0], [40.0], [80.0]])
Y = np.array([0, 2, 1])
LIK = gpc.likelihoods.Softmax(3)
SHARED = gpc.kernels.SquaredExponential(2.0, 0.8)
PER_CLASS = gpc.kernels.PerClass([gpc.kernels.SquaredExponential(v, 0.8) for v in (1.0, 2.0, 3.0)])
VARIANCES = {"shared": np.array([2.0, 2.0, 2.0]), "per_class": np.array([1.0, 2.0, 3.0])}
KERNELS = {"shared": SHARED, "per_class": PER_CLASS}
Z_MAX = 5.0


def quadrature(variances, nodes=40):
    """Per case: log Z_i, E[F_i], Cov[F_i] and E[softmax(F_i)] under p(F_i | y_i) ~ softmax(F_i)_{y_i} N(0, diag v)."""
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    F = np.stack(np.meshgrid(z, z, z, indexing="ij"), -1).reshape(-1, 3) * np.sqrt(variances)
    W = np.prod(np.stack(np.meshgrid(w, w, w, indexing="ij"), -1).reshape(-1, 3), axis=1) / np.sqrt(2 * np.pi) ** 3
    log_softmax = F - special.logsumexp(F, axis=1, keepdims=True)
    out = []
    for y in Y:
        log_w = np.log(W) + log_softmax[:, y]
        log_z = special.logsumexp(log_w)
        P = np.exp(log_w - log_z)
        mean = P @ F
        cov = (F - mean).T @ (P[:, None] * (F - mean))
        out.append((log_z, mean, cov, P @ np.exp(log_softmax)))
    return out


@functools.partial(gpc.jit, static_argnums=(0, 1), compiler_options=FAST_COMPILE)
def sample(method, kernel_name, key):
    post = gpc.infer(method, KERNELS[kernel_name], LIK, X, Y, key=key)
    return (post, post.latent(X), post.predict(X, key=jax.random.fold_in(key, 1)),
            post.predict(X, integrator=gpc.integrators.MeanField()))


NUM_CHAINS = 8
MCMC = gpc.MCMC(num_samples=600, num_warmup=200, num_chains=NUM_CHAINS)


@pytest.mark.parametrize("kernel_name", ["shared", "per_class"])
@pytest.mark.slow
def test_mcmc_matches_quadrature(kernel_name):
    """Elliptical slice sampling on the (n, C) latents, whitened per class: the posterior means of the nine latents
    within 5 standard errors of quadrature (per-chain estimates of 8 chains; measured in the print); the mixture's
    latent covariance within 0.15 of the posterior covariance; p(y* | x*) by Monte Carlo over the mixture within
    0.02, rows summing to one; MeanField over the mixture equal to its average over the samples recomputed here."""
    truth = quadrature(VARIANCES[kernel_name])
    post, (mean, cov), p_mc, p_mf = sample(MCMC, kernel_name, jax.random.key(0))
    assert isinstance(post, gpc.SoftmaxSamplePosterior)
    samples = np.asarray(post.samples)
    assert samples.shape == (NUM_CHAINS * 600, 3, 3)
    chain_means = samples.reshape(NUM_CHAINS, -1, 3, 3).mean(axis=1)
    se = chain_means.std(axis=0, ddof=1) / np.sqrt(NUM_CHAINS)
    true_mean = np.stack([t[1] for t in truth])
    z = (chain_means.mean(axis=0) - true_mean) / se
    print(kernel_name, "max |z|", np.max(np.abs(z)), "max se", se.max())
    assert np.all(se < 0.08) and np.max(np.abs(z)) <= Z_MAX
    np.testing.assert_allclose(mean, samples.mean(axis=0), atol=1e-8)  # the mixture mean at the training inputs
    for i, (_, _, true_cov, true_p) in enumerate(truth):
        np.testing.assert_allclose(cov[i], true_cov, atol=0.15)
        np.testing.assert_allclose(p_mc[i], true_p, atol=0.02)
    np.testing.assert_allclose(np.asarray(p_mc).sum(axis=1), 1.0, rtol=1e-12)
    # MeanField of each sample, recomputed in numpy (Lu, Ie & Sha's formula with the conditional variances).
    var = np.asarray(post._conditionals(KERNELS[kernel_name].gram(X, X), KERNELS[kernel_name].diag(X))[2])  # (3, C)
    var_diff = var[:, :, None] + var[:, None, :]
    scaled = (samples[:, :, :, None] - samples[:, :, None, :]) / np.sqrt(1.0 + np.pi / 8.0 * var_diff)
    p_s = np.exp(-special.logsumexp(-scaled, axis=-1))
    p_s = p_s / p_s.sum(axis=-1, keepdims=True)
    np.testing.assert_allclose(p_mf, p_s.mean(axis=0), rtol=1e-8)


@pytest.mark.slow
def test_ais_matches_quadrature():
    """AIS's log Z of the softmax model within 5 of its standard errors of the quadrature (sum over the three
    independent cases), shared and per-class kernels (measured in the print)."""
    ais = gpc.AIS(num_temperatures=100, num_runs=256)
    for i, kernel_name in enumerate(["shared", "per_class"]):
        log_z = sum(t[0] for t in quadrature(VARIANCES[kernel_name]))
        post, *_ = sample(ais, kernel_name, jax.random.key(10 + i))
        se = float(post.log_marginal_se)
        z = (float(post.log_marginal) - log_z) / se
        print(kernel_name, "AIS log Z", float(post.log_marginal), "truth", log_z, "se", se, "z", z)
        assert 0 < se < 0.05 and abs(z) <= Z_MAX


def test_refusals_and_init():
    """A sparse prior is refused with the method's message; init must have the shape (num_chains, n, C)."""
    with pytest.raises(gpc.GPClassError, match="sparse prior"):
        gpc.infer(gpc.MCMC(), gpc.Sparse(SHARED, X[:2]), LIK, X, Y, key=jax.random.key(0))
    with pytest.raises(gpc.GPClassError, match=r"\(num_chains, n, C\)"):
        gpc.infer(gpc.MCMC(num_chains=2), SHARED, LIK, X, Y, key=jax.random.key(0), init=np.zeros((2, 3)))
    with pytest.raises(gpc.GPClassError, match="key"):
        post = gpc.infer(gpc.MCMC(num_samples=10, num_warmup=0), SHARED, LIK, X, Y, key=jax.random.key(0))
        gpc.predict(post, X)
