"""Gaussian KL inference for Softmax(C) (issue 36, item 2): q(F) = prod_c N(m_c, V_c), per-class sites.

Oracles: a dense NumPy evaluation of the same bound (numpy.linalg, the rule's points), tensor Gauss-Hermite for
the exact expectation and for log Z and the posterior of independent cases, AIS and MCMC on a correlated
problem, central differences for the gradient.  Every dense problem here has n = 8 and C = 3, so ONE compiled
program (:func:`solve`: gpc.infer and its gradient, vmapped over a batch of 5 problems) serves them all.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FAST_COMPILE, fast_filter_jit
from scipy import special

import gpclass as gpc
from gpclass._inference.kl_classes import elbo, rule_points

LIK = gpc.likelihoods.Softmax(3)
METHOD = gpc.KL()  # num_samples = 256, seed = 0
X = np.random.default_rng(3).normal(size=(8, 2))
Y = np.array([0, 1, 2, 0, 1, 2, 0, 1])
X_FAR = np.stack([40.0 * np.arange(8), np.zeros(8)], axis=1)  # independent cases under the prior
Y_FAR = np.array([0, 1, 2, 2, 1, 0, 2, 2])
X_HARD = np.concatenate([X[:4], X[:4]]) * 0.05  # duplicated rows, length scale 20 times the inputs' spread
Y_HARD = np.array([0, 1, 2, 0, 1, 1, 2, 0])
PARAMS = np.array([0.0, 0.0])
SHARED = gpc.kernels.SquaredExponential(2.0, 1.0)
BATCH = 5
COMPILE = {**FAST_COMPILE, "xla_llvm_disable_expensive_passes": True}  # the tests' programs: about 10 % less compile

# Tensor Gauss-Hermite rule in 3 dimensions (32^3 nodes): E over N(0, I_3), the exact expectation for these smooth
# integrands (latent standard deviations up to 3.5).
_z, _w = np.polynomial.hermite_e.hermegauss(32)
GH_NODES = np.stack(np.meshgrid(_z, _z, _z, indexing="ij"), -1).reshape(-1, 3)
GH_WEIGHTS = np.prod(np.stack(np.meshgrid(_w, _w, _w, indexing="ij"), -1).reshape(-1, 3), 1) / (2 * np.pi) ** 1.5


def per_class_kernel(params):
    """A PerClass kernel: SE with variances e^theta_0 times 1, 2, 3 and length scale e^theta_1."""
    return gpc.kernels.PerClass([gpc.kernels.SquaredExponential(jnp.exp(params[0]) * c, jnp.exp(params[1]))
                                 for c in (1.0, 2.0, 3.0)])


@gpc.jit(compiler_options=COMPILE)
def _solve_batch(params, X, y):
    def one(params, X, y):
        def log_marginal(params):
            post = gpc.infer(METHOD, per_class_kernel(params), LIK, X, y)
            return post.log_marginal, post
        (_, post), grad = jax.value_and_grad(log_marginal, has_aux=True)(params)
        return post, grad, post._latent(X)
    points = rule_points(jax.random.key(METHOD.seed), X.shape[1], METHOD.num_samples, LIK.num_classes, X.dtype)
    return jax.vmap(one)(params, X, y), points


def solve(problems):
    """KL with the PerClass kernel for up to 5 problems (params, X, y), all n = 8, as ONE vmapped program (jit and
    vmap): a list of (posterior, d ELBO / d params, the latent moments at X); and the rule's points (n, S, C)."""
    padded = list(problems) + [problems[0]] * (BATCH - len(problems))
    (posts, grads, latents), points = _solve_batch(*(np.stack(a) for a in zip(*padded)))
    take = lambda tree, i: jax.tree.map(lambda a: a[i], tree)  # noqa: E731
    return [(take(posts, i), grads[i], take(latents, i)) for i in range(len(problems))], np.asarray(points)


def numpy_bound(K, tau, nu, y, expected):
    """sum_i E_i - sum_c KL(N(m_c, V_c) || N(0, K_c)) written out with numpy.linalg; V_c = (K_c^-1 + diag tau_c)^-1,
    m_c = V_c nu_c, E_i = expected(i, m_i, v_i).  Returns the bound, m (n, C) and v (n, C).

    KL = 1/2 [tr(K^-1 V) + m^T K^-1 m - n + log|K| - log|V|] with A = I + diag(tau) K (LU, not the library's
    symmetric B): V = K A^-1, K^-1 V = A^-1, K^-1 m = A^-1 nu, |K| / |V| = |A|, valid for a singular K.
    """
    num_classes, n = tau.shape
    K = np.broadcast_to(K, (num_classes, n, n))
    kl, m, v = 0.0, np.zeros((n, num_classes)), np.zeros((n, num_classes))
    for c in range(num_classes):
        A = np.eye(n) + tau[c][:, None] * K[c]
        A_inv = np.linalg.inv(A)
        V = K[c] @ A_inv
        m[:, c], v[:, c] = V @ nu[c], np.diag(V)
        kl += 0.5 * (np.trace(A_inv) + m[:, c] @ np.linalg.solve(A, nu[c]) - n + np.linalg.slogdet(A)[1])
    return sum(expected(i, m[i], v[i]) for i in range(n)) - kl, m, v


def gauss_hermite_expectation(y):
    """E[log softmax(f)_{y_i}] under N(m_i, diag v_i) by the tensor rule (the exact expectation)."""
    def expected(i, m, v):
        F = m + GH_NODES * np.sqrt(v)
        return GH_WEIGHTS @ (F[:, y[i]] - special.logsumexp(F, axis=1))
    return expected


def rule_expectation(y, z):
    """E_i by the method's own rule (3) with its points z (n, S, C), in numpy."""
    def expected(i, m, v):
        F = m + z[i] * np.sqrt(v)
        return np.mean(F[:, y[i]] - special.logsumexp(F, axis=1))
    return expected


def test_bound_against_numpy_and_optimality():
    """(1) The ELBO equals a dense NumPy evaluation of the same bound with the rule's points (1e-9) and, with the
    exact expectation (tensor Gauss-Hermite), differs by the rule's error only (< 0.03 for 8 cases; printed);
    the predictive means and variances at the training inputs are m and diag V, the classes uncorrelated.
    (2) Optimality: the ELBO's gradient in the sites is ~0 (< 1e-7) and 20 random perturbations of the sites
    (0.05 standard deviation) lower the ELBO.  (7) The problem is solved inside a vmapped batch."""
    kernel = per_class_kernel(PARAMS)
    [(post, _, (mean, cov))], z = solve([(PARAMS, X, Y)])
    assert isinstance(post, gpc.SoftmaxPosterior) and int(post.info.status) == gpc.Status.CONVERGED
    tau, nu = (np.asarray(s) for s in post.warm_start)
    assert tau.shape == (3, 8) and np.all(tau >= 0)
    K = np.asarray(kernel.gram(X, X))
    same, m, v = numpy_bound(K, tau, nu, Y, rule_expectation(Y, z))
    exact, _, _ = numpy_bound(K, tau, nu, Y, gauss_hermite_expectation(Y))
    print("ELBO", float(post.log_marginal), "numpy (same rule)", same, "exact expectation", exact)
    np.testing.assert_allclose(float(post.log_marginal), same, rtol=1e-9)
    assert abs(float(post.log_marginal) - exact) < 0.03
    np.testing.assert_allclose(mean, m, atol=1e-8)
    np.testing.assert_allclose(cov, np.einsum("ic,cd->icd", v, np.eye(3)), atol=1e-8)

    op = kernel.covariance(jnp.asarray(X))
    data = (jnp.asarray(np.eye(3)[Y]), jnp.asarray(z))
    value_and_grad = fast_filter_jit(jax.value_and_grad(lambda s: elbo(op, LIK, data, *s)))
    value, (g_tau, g_nu) = value_and_grad((jnp.asarray(tau), jnp.asarray(nu)))
    np.testing.assert_allclose(value, float(post.log_marginal), rtol=1e-12)
    print("max |dELBO/dtau|", np.max(np.abs(g_tau)), "max |dELBO/dnu|", np.max(np.abs(g_nu)))
    assert np.max(np.abs(g_tau)) < 1e-7 and np.max(np.abs(g_nu)) < 1e-7
    rng = np.random.default_rng(1)
    for _ in range(20):
        d_tau, d_nu = 0.05 * rng.normal(size=tau.shape), 0.05 * rng.normal(size=nu.shape)
        perturbed = value_and_grad((jnp.asarray(np.maximum(tau + d_tau, 0.0)), jnp.asarray(nu + d_nu)))[0]
        assert perturbed < value


def test_below_log_z_of_independent_cases():
    """(3) Eight cases 40 length scales apart are independent under the prior, so log Z is a sum of eight
    3-dimensional integrals (tensor Gauss-Hermite, PerClass variances 1, 2, 3 and, second problem, 4, 8, 12):
    the ELBO, with the rule and with the exact expectation at the same q, is below log Z and within 1.2 of it
    (0.15 per case; printed: the gap); (5) the predictive probabilities at the training inputs are within 0.05
    of the exact posterior's E[softmax(F_i) | y_i] (the KL posterior averaged by the tensor rule)."""
    results, z = solve([(PARAMS, X_FAR, Y_FAR), (PARAMS + np.array([np.log(4.0), 0.0]), X_FAR, Y_FAR)])
    for (post, _, _), scale in zip(results, [1.0, 4.0]):
        variances = scale * np.array([1.0, 2.0, 3.0])
        F = GH_NODES * np.sqrt(variances)
        log_softmax = F - special.logsumexp(F, axis=1, keepdims=True)
        log_z, true_p = 0.0, []
        for y in Y_FAR:
            log_w = np.log(GH_WEIGHTS) + log_softmax[:, y]
            log_z += special.logsumexp(log_w)
            true_p.append(np.exp(log_w - special.logsumexp(log_w)) @ np.exp(log_softmax))
        tau, nu = (np.asarray(s) for s in post.warm_start)
        K = np.asarray(per_class_kernel(np.log([scale, 1.0])).gram(X_FAR, X_FAR))
        same, m, v = numpy_bound(K, tau, nu, Y_FAR, rule_expectation(Y_FAR, z))
        exact, _, _ = numpy_bound(K, tau, nu, Y_FAR, gauss_hermite_expectation(Y_FAR))
        p = np.stack([GH_WEIGHTS @ special.softmax(m[i] + GH_NODES * np.sqrt(v[i]), axis=1) for i in range(8)])
        print("variances", variances, "log Z", log_z, "ELBO", float(post.log_marginal), "exact ELBO at q", exact,
              "max |p - p_true|", np.max(np.abs(p - np.stack(true_p))))
        np.testing.assert_allclose(float(post.log_marginal), same, rtol=1e-9)
        assert exact < log_z and float(post.log_marginal) < log_z and log_z - exact < 1.2
        np.testing.assert_allclose(p, np.stack(true_p), atol=0.05)


@gpc.jit(compiler_options=COMPILE)
def _samplers(key):
    """AIS's log Z and its standard error, and MCMC's posterior, on the correlated problem."""
    kernel = per_class_kernel(PARAMS)
    ais = gpc.infer(gpc.AIS(num_temperatures=200, num_runs=64), kernel, LIK, X, Y, key=jax.random.fold_in(key, 1))
    mcmc = gpc.infer(gpc.MCMC(num_samples=500, num_warmup=100, num_chains=4), kernel, LIK, X, Y,
                     key=jax.random.fold_in(key, 2))
    return ais.log_marginal, ais.log_marginal_se, mcmc


def _softmax_average(means, var, rng, draws):
    """E[softmax(f)] for f ~ N(means, diag var), averaged over the leading axis of ``means`` too, in numpy."""
    f = means[None] + np.sqrt(var) * rng.normal(size=(draws, *means.shape))
    return special.softmax(f, axis=-1).mean(axis=tuple(range(f.ndim - 2)))


@pytest.mark.slow
def test_against_ais_and_mcmc():
    """(3) On the correlated problem (n = 8, C = 3, PerClass kernel) the ELBO is below AIS's log Z (by more than
    3 standard errors at most) and within 0.5 of it (printed: the gap).  (5) Class probabilities at the 8
    training inputs within 0.05 of MCMC's (2000 samples, 4 chains), both averaged in NumPy (KL: 20000 draws of its
    latent Gaussian; MCMC: 10 draws of p(f*|F_s) per sample), Monte Carlo standard errors < 0.004."""
    [(post, _, (mean, cov))], _ = solve([(PARAMS, X, Y)])
    log_z, se, mcmc = _samplers(jax.random.key(0))
    gap = float(log_z) - float(post.log_marginal)
    print("AIS log Z", float(log_z), "+-", float(se), "ELBO", float(post.log_marginal), "gap", gap)
    assert -3 * float(se) < gap < 0.5
    rng = np.random.default_rng(0)
    p_kl = _softmax_average(np.asarray(mean), np.diagonal(cov, axis1=1, axis2=2), rng, 20000)
    K = np.asarray(per_class_kernel(PARAMS).gram(X, X))  # (C, n, n); X* = X
    chol = np.asarray(mcmc.chol)  # the (jittered) prior's Cholesky factors the samples were drawn under
    K_inv_cross = np.linalg.solve(chol @ np.swapaxes(chol, 1, 2), K)  # K_c^-1 k_c* (C, n, m)
    means = np.einsum("snc,cnm->smc", np.asarray(mcmc.samples), K_inv_cross)  # E[f*|F_s] (S, m, C)
    var = np.diagonal(K, axis1=1, axis2=2) - np.sum(K * K_inv_cross, axis=1)  # (C, m)
    p_mcmc = _softmax_average(means, np.maximum(var.T, 0.0), rng, 10)
    print("max |p_KL - p_MCMC|", np.max(np.abs(p_kl - p_mcmc)))
    np.testing.assert_allclose(p_kl, p_mcmc, atol=0.05)


def test_gradient_finite_differences():
    """(4) d ELBO / d (log variance, log length scale) against central differences (h = 1e-4, rtol 1e-5) on a
    hard input: duplicated rows and a length scale 20 times the inputs' spread, PerClass kernel (the five
    evaluations in one vmapped batch).  (1) The ELBO there equals the NumPy bound with the same rule (1e-9; K
    is singular)."""
    params, h = np.array([np.log(3.0), 0.0]), 1e-4
    steps = [np.zeros(2), h * np.eye(2)[0], -h * np.eye(2)[0], h * np.eye(2)[1], -h * np.eye(2)[1]]
    results, z = solve([(params + step, X_HARD, Y_HARD) for step in steps])
    post, grad, _ = results[0]
    assert all(int(p.info.status) == gpc.Status.CONVERGED for p, _, _ in results)
    tau, nu = (np.asarray(s) for s in post.warm_start)
    same, _, _ = numpy_bound(np.asarray(per_class_kernel(params).gram(X_HARD, X_HARD)), tau, nu, Y_HARD,
                             rule_expectation(Y_HARD, z))
    np.testing.assert_allclose(float(post.log_marginal), same, rtol=1e-9)
    values = [float(p.log_marginal) for p, _, _ in results]
    for i in range(2):
        fd = (values[1 + 2 * i] - values[2 + 2 * i]) / (2 * h)
        print("gradient", float(grad[i]), "central difference", fd)
        np.testing.assert_allclose(float(grad[i]), fd, rtol=1e-5, atol=1e-7)


@functools.partial(gpc.filter_jit, compiler_options=COMPILE)
def _sparse(X, y):
    post = gpc.infer(METHOD, gpc.Sparse(SHARED, X, approximation="fitc"), LIK, X, y)
    points = rule_points(jax.random.key(METHOD.seed), X.shape[0], METHOD.num_samples, LIK.num_classes, X.dtype)
    return post, post._latent(X), points


def test_sparse_fitc_is_dense_at_z_equal_x():
    """A sparse FITC prior with Z = X: the NumPy bound of the dense model (K itself) at its sites (1e-5: K_uu's
    jitter), a SparseSoftmaxPosterior whose predictive means and covariances at the training inputs are that
    bound's m and diag V (1e-4).  Under a sparse prior Newton's system is solved by GMRES."""
    sparse, (mean, cov), z = _sparse(X, Y)
    assert isinstance(sparse, gpc.SparseSoftmaxPosterior) and int(sparse.info.status) == gpc.Status.CONVERGED
    tau, nu = (np.asarray(s) for s in sparse.warm_start)
    same, m, v = numpy_bound(np.asarray(SHARED.gram(X, X)), tau, nu, Y, rule_expectation(Y, np.asarray(z)))
    print("FITC Z = X", float(sparse.log_marginal), "dense bound", same)
    np.testing.assert_allclose(float(sparse.log_marginal), same, atol=1e-5)
    np.testing.assert_allclose(mean, m, atol=1e-4)
    np.testing.assert_allclose(cov, np.einsum("ic,cd->icd", v, np.eye(3)), atol=1e-4)


def test_refusals():
    """(8) Combinations without the bound or with bad settings are GPClassErrors naming them."""
    with pytest.raises(gpc.GPClassError, match=r"gpc.KL\(\) with Softmax.*power 0.5"):
        gpc.infer(METHOD, gpc.Sparse(SHARED, X[:4], approximation=0.5), LIK, X, Y)
    with pytest.raises(gpc.GPClassError, match=r"num_samples must be even and >= 2 C = 6"):
        gpc.infer(gpc.KL(num_samples=4), SHARED, LIK, X, Y)
    with pytest.raises(gpc.GPClassError, match="num_samples"):
        gpc.KL(num_samples=1)
    with pytest.raises(gpc.GPClassError, match=r"mask.*EP with MultinomialProbit"):
        gpc.infer(gpc.EP(), SHARED, gpc.likelihoods.MultinomialProbit(3), X, Y, mask=np.ones(8, bool))
    with pytest.raises(gpc.GPClassError, match=r"EP does not support the multi-class Softmax.*gpc.KL\(\)"):
        gpc.infer(gpc.EP(), SHARED, LIK, X, Y)
    with pytest.raises(gpc.GPClassError, match="PerClass"):
        gpc.Sparse(per_class_kernel(PARAMS), X[:4])
    with pytest.raises(gpc.GPClassError, match=r"init must be the sites.*\(3, 8\)"):
        gpc.infer(METHOD, SHARED, LIK, X, Y, init=(np.zeros((8, 3)), np.zeros((8, 3))))


@functools.partial(gpc.filter_jit, compiler_options=COMPILE)
def _kl_from(log_variance, X, Y, init):
    """The softmax KL's ELBO, its derivative in the log variance and its steps, from ``init`` (all-zero sites:
    cold, as ``gpc.fit``'s first evaluation passes them; the same program for both starts)."""

    def log_marginal(log_v):
        kernel = gpc.kernels.SquaredExponential(jnp.exp(log_v), 2.0)
        post = gpc.infer(METHOD, kernel, gpc.likelihoods.Softmax(4), X, Y, init=init)
        return post.log_marginal, post.info.num_steps

    return jax.value_and_grad(log_marginal, has_aux=True)(log_variance)


def test_laplace_start_reaches_the_optimum_of_zero_sites():
    """The softmax's cold start (Laplace's mode, site precisions the diagonal of its blocks W_i, s pi (1 - pi) as
    numpy gives it from GPML eq. 3.38) changes the path, not the optimum: the ELBO and its derivative are those
    reached from sites of 1e-300 (zero sites in all but name), to 1e-10, in fewer steps (60 vehicle cases)."""
    X, y = gpc.datasets.load("vehicle")
    idx = np.random.default_rng(0).permutation(len(y))[:60]
    X, y = gpc.datasets.standardize(X[idx]), y[idx]
    F = np.random.default_rng(1).normal(size=(60, 4))
    Y = np.eye(4)[y]
    pi = special.softmax(F, axis=1)
    W_diagonal = np.stack([np.diag(np.diag(p) - np.outer(p, p)) for p in pi])
    np.testing.assert_allclose(gpc.likelihoods.Softmax(4).curvature_diagonal(Y, F), W_diagonal, rtol=1e-13)
    (cold, cold_steps), cold_grad = _kl_from(np.float64(np.log(4.0)), X, y, (np.zeros((4, 60)), np.zeros((4, 60))))
    (zero, zero_steps), zero_grad = _kl_from(np.float64(np.log(4.0)), X, y,
                                             (np.zeros((4, 60)), np.full((4, 60), 1e-300)))
    np.testing.assert_allclose(float(cold), float(zero), rtol=1e-10)
    np.testing.assert_allclose(float(cold_grad), float(zero_grad), rtol=1e-7)
    assert int(cold_steps) < int(zero_steps), (int(cold_steps), int(zero_steps))
