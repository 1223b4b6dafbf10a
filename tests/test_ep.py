"""Expectation propagation: fixed point, exactness for n = 1, brute-force quadrature, vmap.

Gradients against finite differences, for every schedule and likelihood on hard inputs: tests/test_gradients_hard.py.
"""

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import (
    FAST_COMPILE,
    brute_force_log_z,
    central_difference,
    fast_infer,
    gram,
    log_marginal_functions,
    se_kernel,
    standardised_subset,
)
from scipy import integrate, special, stats

import gpclass as gpc

LIKELIHOODS = pytest.mark.parametrize(
    "lik", [gpc.likelihoods.Probit(), gpc.likelihoods.Logistic()], ids=["probit", "logistic"]
)
SCHEDULES = pytest.mark.parametrize("schedule", ["sequential", "parallel"])

# The test's own programs are compiled with gpclass's XLA options and LLVM optimisation level 0: the same HLO
# optimisations and results equal to rounding, at a third to a half of the compile time; their slower machine code
# does not matter at these sizes.  ``fast_infer`` is gpc.infer traced into such a program (arrays traced, the method
# and likelihood in the tree structure): the same solver and posterior as an eager call.


@functools.cache
def fast_jit(fn):
    """``fn`` (a method of a hashable likelihood) compiled as above, once per likelihood."""
    return gpc.jit(fn, compiler_options=FAST_COMPILE)


EP_FUNCTIONS = log_marginal_functions(gpc.EP())
ep_log_marginal_and_grad = EP_FUNCTIONS.value_and_grad


def sites_of(post, K):
    """Recover (tau~, nu~) and the marginals of q from the posterior's {alpha, sqrt_w} form."""
    tau = np.asarray(post.sqrt_w) ** 2
    Sigma = np.linalg.inv(np.linalg.inv(K) + np.diag(tau))
    mu = np.asarray(post.mean)
    return tau, np.linalg.solve(Sigma, mu), Sigma, mu


@pytest.mark.parametrize(
    "lik",
    [
        gpc.likelihoods.Probit(),
        gpc.likelihoods.Logistic(),
        gpc.likelihoods.LabelNoise(gpc.likelihoods.Heaviside(), epsilon=0.1),
    ],
    ids=["probit", "logistic", "step-label-noise"],
)
def test_single_case_is_exact(lik):
    X, y = np.array([[0.4]]), np.array([1.0])
    kernel = gpc.kernels.SquaredExponential(variance=3.0)
    post = fast_infer(gpc.EP(), kernel, lik, X, y)
    # Called hundreds of times by quad: one compiled program, through jax.jit's fast dispatch.
    log_prob = gpc.jit(lambda y, f: lik.log_prob(y, f), compiler_options=FAST_COMPILE)
    p = lambda f: np.exp(float(log_prob(np.ones(1), np.array([f]))[0])) * stats.norm.pdf(f, 0, np.sqrt(3.0))
    Z = integrate.quad(p, -40, 40, points=[0.0])[0]
    mean = integrate.quad(lambda f: f * p(f), -40, 40, points=[0.0])[0] / Z
    var = integrate.quad(lambda f: (f - mean) ** 2 * p(f), -40, 40, points=[0.0])[0] / Z
    np.testing.assert_allclose(float(post.log_marginal), np.log(Z), atol=1e-10)
    np.testing.assert_allclose(float(post.mean[0]), mean, rtol=1e-8)
    _, var_q = gpc.predict_latent(post, X)
    np.testing.assert_allclose(float(var_q[0]), var, rtol=1e-8)


@pytest.mark.parametrize(  # each (likelihood, n) compiles EP and Laplace: both sizes, both likelihoods, two pairs
    "lik, n", [(gpc.likelihoods.Probit(), 3), (gpc.likelihoods.Logistic(), 2)], ids=["probit-3", "logistic-2"]
)
@pytest.mark.slow
def test_close_to_brute_force_log_z_and_closer_than_laplace(lik, n):
    rng = np.random.default_rng(n)
    X, y = rng.normal(size=(n, 2)), np.array([1.0, -1.0, 1.0])[:n]
    kernel = gpc.kernels.SquaredExponential(variance=6.0, lengthscale=1.5)
    exact = brute_force_log_z(gram(kernel, X), lik, y)
    ep = float(fast_infer(gpc.EP(), kernel, lik, X, y).log_marginal)
    laplace = float(fast_infer(gpc.Laplace(), kernel, lik, X, y).log_marginal)
    assert abs(ep - exact) < 0.01
    assert abs(ep - exact) < abs(laplace - exact)


@SCHEDULES
@LIKELIHOODS
@pytest.mark.slow
def test_fixed_point_and_log_z_formula(lik, schedule, pima_small):
    X, y = pima_small  # the data shape of the next test: the same compiled EP programs
    kernel = gpc.kernels.SquaredExponential(variance=20.0, lengthscale=4.0)
    post = fast_infer(gpc.EP(schedule=schedule), kernel, lik, X, y)
    assert bool(post.info.converged)
    K = gram(kernel, X)
    tau, nu, Sigma, mu = sites_of(post, K)
    tau_cav, nu_cav = 1 / np.diag(Sigma) - tau, mu / np.diag(Sigma) - nu
    m_cav, v_cav = nu_cav / tau_cav, 1 / tau_cav
    log_z, m_hat, v_hat = (np.asarray(a) for a in fast_jit(lik.tilted_moments)(np.asarray(y, np.float64), m_cav, v_cav))
    # Each site's tilted moments equal the marginal moments of q (the EP fixed point).
    np.testing.assert_allclose(m_hat, mu, atol=1e-7 * (1 + np.max(np.abs(mu))))
    np.testing.assert_allclose(v_hat, np.diag(Sigma), rtol=1e-7)
    # log Z_EP = log int N(f|0, K) prod_i t~_i(f_i) df with Z~_i from GPML eq. 3.59, computed densely.
    m_site, v_site = nu / tau, 1 / tau
    log_z_site = log_z + 0.5 * np.log(2 * np.pi * (v_cav + v_site)) + 0.5 * (m_cav - m_site) ** 2 / (v_cav + v_site)
    A = K + np.diag(v_site)
    dense = (-0.5 * np.linalg.slogdet(2 * np.pi * A)[1] - 0.5 * m_site @ np.linalg.solve(A, m_site)
             + np.sum(log_z_site))
    np.testing.assert_allclose(float(post.log_marginal), dense, rtol=1e-9)


@pytest.mark.slow
def test_gradient_is_gpml_eq_5_27_from_the_last_sweeps_factor(pima_small):
    """At the fixed point d log Z_EP / d theta = 1/2 tr((b b^T - (K + S~^-1)^-1) dK/dtheta), b = K^-1 mu (GPML eq.
    5.27), here computed densely in NumPy from the converged sites.  The program factorises B only for the sweeps
    (once before the loop, once in its body): log Z_EP and its reverse mode reuse the last sweep's factor, and no
    Cholesky factorisation is differentiated."""
    X, y = pima_small
    lik = gpc.likelihoods.Probit()
    log_variance, log_lengthscale = np.log(20.0), np.log(4.0)
    (_, post), grad = EP_FUNCTIONS.compiled(log_variance, log_lengthscale, lik, X, y)
    assert bool(post.info.converged)
    K = gram(se_kernel(log_variance, log_lengthscale), X)
    tau, nu = (np.asarray(a) for a in post.warm_start)
    I_plus_SK = np.eye(len(y)) + tau[:, None] * K
    b = np.linalg.solve(I_plus_SK, nu)  # K^-1 mu, mu = (K^-1 + S~)^-1 nu~
    R = np.linalg.solve(I_plus_SK, np.diag(tau))  # (K + S~^-1)^-1
    sq_dist = np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1)
    dK = (K, K * sq_dist / 16.0)  # d/d log variance, d/d log lengthscale (l^2 = 16)
    expected = [0.5 * np.sum((np.outer(b, b) - R) * d) for d in dK]
    np.testing.assert_allclose(np.asarray(grad), expected, rtol=1e-7)
    jaxpr = str(jax.make_jaxpr(jax.grad(EP_FUNCTIONS.raw, argnums=(0, 1)))(log_variance, log_lengthscale, lik, X, y))
    assert len(re.findall(r"= cholesky \w", jaxpr)) == 2
    assert not re.findall(r"= lu\b", jaxpr)  # log Z_EP alone: the sites' implicit adjoint is not solved


@pytest.mark.slow
def test_gradient_of_predictions_matches_finite_differences(pima_small):
    """Predictions depend on the converged sites, whose dependence on the hyperparameters is the implicit
    adjoint of the fixed point (log Z_EP's gradient alone holds them fixed): the gradient of the predictive
    latent means and log variances at new inputs against central differences of a tightly converged EP."""
    X, y = pima_small
    X_new = X[:4] + 0.1
    lik = gpc.likelihoods.Probit()

    def summary(theta):
        post = gpc.infer(gpc.EP(tol=1e-13), se_kernel(theta[0], theta[1]), lik, X, y)
        mean, var = gpc.predict_latent(post, X_new)
        return jnp.sum(mean) + jnp.sum(jnp.log(var))

    value_and_grad = fast_jit(jax.value_and_grad(summary))
    theta = np.array([np.log(20.0), np.log(4.0)])
    _, grad = value_and_grad(theta)
    fd = central_difference(lambda t: float(value_and_grad(t)[0]), theta, h=1e-5)
    np.testing.assert_allclose(grad, fd, rtol=1e-6)


@LIKELIHOODS
@pytest.mark.slow
def test_sequential_random_order_and_parallel_reach_the_same_fixed_point(lik, pima_small):
    X, y = pima_small
    kernel = gpc.kernels.SquaredExponential(variance=30.0, lengthscale=2.0)
    seq = fast_infer(gpc.EP(schedule="sequential"), kernel, lik, X, y)
    others = [fast_infer(gpc.EP(schedule="parallel"), kernel, lik, X, y)]
    if isinstance(lik, gpc.likelihoods.Logistic):  # the random order does not depend on the likelihood: one program
        others.append(fast_infer(gpc.EP(order="random"), kernel, lik, X, y, key=jax.random.key(3)))
    for other in others:
        assert bool(other.info.converged)
        np.testing.assert_allclose(float(seq.log_marginal), float(other.log_marginal), atol=1e-6)
        np.testing.assert_allclose(seq.mean, other.mean, rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="PRNG key"):
        gpc.infer(gpc.EP(order="random"), kernel, lik, X, y)


@pytest.mark.parametrize(
    "schedule, lik, fewer",
    [
        ("sequential", gpc.likelihoods.Probit(), 1.0),  # 10 against 11 sweeps
        ("parallel", gpc.likelihoods.Probit(), 0.6),  # 21 against 48
        ("sequential", gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), epsilon=0.1), 0.6),  # 24 against 50
    ],
    ids=["sequential", "parallel", "sequential-label-noise"],
)
@pytest.mark.slow
def test_anderson_acceleration_reaches_the_same_fixed_point_in_fewer_sweeps(schedule, lik, fewer, pima_small):
    """EP's default extrapolates every sweep from the last three (gpclass/_anderson.py); anderson=0 runs the plain
    sweeps.  Label noise clips site precisions at 0, and so does the extrapolation (its projection)."""
    X, y = pima_small
    kernel = gpc.kernels.SquaredExponential(variance=20.0, lengthscale=4.0)
    accelerated = fast_infer(gpc.EP(schedule=schedule), kernel, lik, X, y)
    plain = fast_infer(gpc.EP(schedule=schedule, anderson=0), kernel, lik, X, y)
    assert bool(accelerated.info.converged) and bool(plain.info.converged)
    assert int(accelerated.info.num_steps) <= fewer * int(plain.info.num_steps)
    np.testing.assert_allclose(float(accelerated.log_marginal), float(plain.log_marginal), rtol=1e-9)
    np.testing.assert_allclose(accelerated.mean, plain.mean, atol=1e-7 * (1 + np.max(np.abs(plain.mean))))
    with pytest.raises(ValueError, match="anderson"):
        gpc.EP(anderson=-1)


@pytest.mark.slow
def test_predictions_match_gpml_eqs_3_60_3_61(pima_small):
    X, y = pima_small  # the fixed-point tests' data and kernel: their compiled EP program
    X_test = standardised_subset("pima", 5, n=15)[0]
    lik = gpc.likelihoods.Probit()
    kernel = gpc.kernels.SquaredExponential(variance=20.0, lengthscale=4.0)
    post = fast_infer(gpc.EP(), kernel, lik, X, y)
    K = gram(kernel, X)
    K_s = gram(kernel, X_test, X)
    tau, nu, _, _ = sites_of(post, K)
    A = K + np.diag(1 / tau)
    mean_ref = K_s @ np.linalg.solve(A, nu / tau)
    var_ref = 20.0 - np.einsum("ij,ji->i", K_s, np.linalg.solve(A, K_s.T))
    mean, var = gpc.predict_latent(post, X_test)
    np.testing.assert_allclose(mean, mean_ref, rtol=1e-8, atol=1e-9)
    np.testing.assert_allclose(var, var_ref, rtol=1e-8)
    np.testing.assert_allclose(gpc.predict(post, X_test), special.ndtr(mean_ref / np.sqrt(1 + var_ref)), rtol=1e-8)


@pytest.mark.slow
def test_vmap_matches_loop_and_non_convergence_is_reported():
    # Pima subsets of the shape of the fixed-point tests.
    data = [standardised_subset("pima", s) for s in range(2, 5)]
    Xs, ys = np.stack([d[0] for d in data]), np.stack([d[1] for d in data])
    lik = gpc.likelihoods.Probit()
    log_vs = np.array([0.0, 1.5, 3.0])
    vmapped = gpc.jit(jax.vmap(ep_log_marginal_and_grad, in_axes=(0, None, None, 0, 0)), compiler_options=FAST_COMPILE)
    batched = jax.device_get(vmapped(log_vs, 0.7, lik, Xs, ys))
    for i in range(3):
        # One by one with the previous tests' compiled fast_infer (Python-float kernel parameters); the gradient
        # against central differences of it.
        def single(log_v, log_l, i=i):
            kernel = gpc.kernels.SquaredExponential(variance=float(np.exp(log_v)), lengthscale=float(np.exp(log_l)))
            return float(fast_infer(gpc.EP(), kernel, lik, Xs[i], ys[i]).log_marginal)

        np.testing.assert_allclose(float(batched[0][i]), single(log_vs[i], 0.7), rtol=1e-10)
        fd = central_difference(lambda t: single(*t), [log_vs[i], 0.7])
        np.testing.assert_allclose([g[i] for g in batched[1]], fd, rtol=1e-6)
    # Reported with throw=False (raising is infer's, whatever the method: tests/test_laplace.py, test_variational.py).
    kernel = gpc.kernels.SquaredExponential(variance=float(np.e), lengthscale=1.0)
    post = fast_infer(gpc.EP(max_steps=1), kernel, lik, Xs[0], ys[0], throw=False)
    assert int(post.info.status) == gpc.Status.MAX_STEPS and int(post.info.num_steps) == 1
    with pytest.raises(ValueError, match="schedule"):
        gpc.EP(schedule="random")


def test_laplace_refuses_label_noise(pima_small):
    """Label noise is not log-concave: Laplace refuses it (EP's gradients with label noise, epsilon's included, and
    where it clips site precisions at 0: tests/test_gradients_hard.py)."""
    X, y = pima_small
    kernel = gpc.kernels.SquaredExponential(variance=10.0, lengthscale=2.0)
    with pytest.raises(ValueError, match="log-concave"):
        gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit()), X, y)


@SCHEDULES
@pytest.mark.slow
def test_a_case_without_prior_variance_adds_its_likelihood_only(schedule):
    """A case whose latent value has prior variance exactly 0 (the linear kernel at x = 0: f(0) = 0) is known, so
    its site can say nothing: EP (both schedules) gives log Z_EP of the other cases plus log p(y | 0) = log 1/2, the
    same predictions, and a gradient equal to theirs (to 1e-12).  Before, the cavity 1/0 made EP report FAILED."""
    X = np.array([[0.0], [1.0], [-1.0], [2.0], [-0.5]])
    y = np.array([1.0, 1.0, -1.0, -1.0, 1.0])
    lik = gpc.likelihoods.Probit()

    def log_q(variance, X, y):
        post = gpc.infer(gpc.EP(schedule=schedule), gpc.kernels.Linear(variance), lik, X, y)
        return post.log_marginal, gpc.predict(post, np.array([[0.3], [-2.0]]))

    program = gpc.jit(jax.value_and_grad(log_q, has_aux=True), compiler_options=FAST_COMPILE)
    (full, p_full), g_full = program(0.7, X, y)
    (rest, p_rest), g_rest = program(0.7, X[1:], y[1:])
    np.testing.assert_allclose(float(full), float(rest) + np.log(0.5), rtol=1e-12)
    np.testing.assert_allclose(p_full, p_rest, rtol=1e-12)
    np.testing.assert_allclose(float(g_full), float(g_rest), rtol=1e-12)
