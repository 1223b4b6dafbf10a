"""The variational bound F at a fixed Gaussian q, and EM-EP (Kim & Ghahramani 2006).

Compile time dominates: every EM-EP fit here is ``run_em_ep`` on the 30-case shape, one compiled program (with
``progress=True``, whose printed lines one test checks) and its vmap.  ``run_em_ep`` is the library's entry point
called as a user calls it (the library's XLA options); the tests' own programs (the vmapped batch, the bound and its
gradients, the posteriors at fixed q, the EP evidence recomputed as a check) are compiled with gpclass's options and
LLVM optimisation level 0 (``FAST_COMPILE``): the same XLA program and results, a third of the compile time.
"""

import contextlib
import functools
import io

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FAST_COMPILE, brute_force_log_z, central_difference, fast_filter_jit, fast_infer, gram
from scipy import integrate, special, stats

import gpclass as gpc

PROBIT = gpc.likelihoods.Probit()




def dense_bound(K_q, tau, mean, C, log_lik, y):
    """F = sum_i E[log p(y_i|f_i)] + E_q[log N(f|0, C)] + H(q) with explicit inverses (tiny n only).

    q = N(mean, A), A = (K_q^-1 + diag(tau))^-1; expectations of log_lik(y f) by adaptive quadrature.
    """
    n = len(y)
    A = np.linalg.inv(np.linalg.inv(K_q) + np.diag(tau))
    data = 0.0
    for i in range(n):
        s = np.sqrt(A[i, i])
        integrand = lambda f: log_lik(y[i] * f) * stats.norm.pdf(f, mean[i], s)
        data += integrate.quad(integrand, mean[i] - 12 * s, mean[i] + 12 * s, limit=200)[0]
    C_inv = np.linalg.inv(C)
    prior = -0.5 * (n * np.log(2 * np.pi) + np.linalg.slogdet(C)[1] + mean @ C_inv @ mean + np.trace(C_inv @ A))
    entropy = 0.5 * (n * (1 + np.log(2 * np.pi)) + np.linalg.slogdet(A)[1])
    return data + prior + entropy


@fast_filter_jit
def posterior_and_bounds(method, kernel, other, X, y):
    """The posterior q of ``method`` and gpc.variational_bound at q with its own kernel and with ``other``: one
    program per method."""
    post = gpc.infer(method, kernel, PROBIT, X, y)
    return post, gpc.variational_bound(post, y), gpc.variational_bound(post, y, kernel=other)


@pytest.mark.parametrize("method", [gpc.EP(), gpc.Laplace()], ids=["ep", "laplace"])
@pytest.mark.slow
def test_bound_matches_dense_formula_and_lies_below_exact_log_z(method):
    rng = np.random.default_rng(7)
    X, y = rng.normal(size=(3, 2)), np.array([1.0, -1.0, 1.0])
    kernel = gpc.kernels.SquaredExponential(variance=4.0, lengthscale=1.2)
    # At other hyperparameters (q fixed), including a kernel with a different structure.
    other = gpc.kernels.SquaredExponential(variance=2.0, lengthscale=0.7) + gpc.kernels.White(0.1)
    post, F, F_other = jax.device_get(posterior_and_bounds(method, kernel, other, X, y))
    K = gram(kernel, X)
    tau, mean = np.asarray(post.sqrt_w) ** 2, np.asarray(post.mean)
    np.testing.assert_allclose(F, dense_bound(K, tau, mean, K, special.log_ndtr, y), rtol=1e-9)
    # Jensen: F <= log Z, and (Kuss & Rasmussen sec. 7.4) EP's own estimate is much closer.
    exact = brute_force_log_z(K, PROBIT, y)
    assert F < exact
    if isinstance(method, gpc.EP):
        assert abs(float(post.log_marginal) - exact) < exact - F
    C = gram(other, X)
    np.testing.assert_allclose(F_other, dense_bound(K, tau, mean, C, special.log_ndtr, y), rtol=1e-9)


@pytest.mark.slow
def test_bound_gradient_with_q_fixed_matches_finite_differences(em_fit):
    """d F / d theta at fixed q is Kim & Ghahramani eq. 17 (here by autodiff), and d F / d epsilon.  q is the EP
    posterior of the EM-EP fit (any Gaussian q will do; this one costs no compilation of its own); F is taken at
    another kernel (ARD) and likelihood (label noise on the probit)."""
    X, y, result, _ = em_fit
    post = result.posterior

    @functools.partial(gpc.jit, compiler_options=FAST_COMPILE)
    @jax.value_and_grad
    def bound(theta):  # value and gradient: one program
        kernel = gpc.kernels.SquaredExponential(jnp.exp(theta[0]), jnp.exp(theta[1:-1])) + gpc.kernels.White(1e-3)
        return gpc.variational_bound(post, y, kernel=kernel, likelihood=gpc.likelihoods.LabelNoise(PROBIT, theta[-1]))

    theta = np.concatenate([[np.log(2.0)], np.log(1.5) + 0.1 * np.arange(X.shape[1]), [0.07]])
    grad = np.asarray(bound(theta)[1])
    fd = central_difference(lambda t: float(bound(t)[0]), theta, h=1e-5)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


def circle_data(n, flips, seed):
    """Kim & Ghahramani sec. 5.1: x uniform in [-1, 1]^2, y = +1 iff |x|^2 >= 0.5, some labels flipped."""
    rng = np.random.default_rng(seed)
    X = rng.uniform(-1.0, 1.0, size=(n, 2))
    y = np.where(np.sum(X**2, axis=1) >= 0.5, 1.0, -1.0)
    y[rng.choice(n, flips, replace=False)] *= -1
    return X, y


def kim_ghahramani_kernel(d):
    """Their starting point: v0 = 1, v1 = 1e-4, v2 = 1e-3, l_m = 0.1 (lengthscale l_m^-1/2)."""
    return (
        gpc.kernels.SquaredExponential(1.0, jnp.full(d, 0.1**-0.5))
        + gpc.kernels.Constant(1e-4)
        + gpc.kernels.White(1e-3)
    )


@pytest.fixture(scope="module")
def em_fit():
    """The fit of ``run_em_ep``, and the lines it printed to stderr (progress=True)."""
    X, y = circle_data(30, 2, seed=4)
    with contextlib.redirect_stderr(io.StringIO()) as err:
        result = jax.block_until_ready(run_em_ep(X, y))
        jax.effects_barrier()  # the reports are host callbacks
    return X, y, result, err.getvalue().splitlines()


@pytest.mark.slow
def test_em_ep_prints_with_progress_true(em_fit):
    """progress=True prints the first E-step's line (step 0) and the last EM step's, with the fit's own values.

    (tests/test_progress.py has the other loops' reports; EM-EP's are checked here, on the fit that the other
    tests check, so that its program compiles once.)"""
    _, _, result, err = em_fit
    assert err[0].startswith("fit_em_ep step     0/400") and "log_marginal" in err[0] and "epsilon" in err[0]
    assert err[-1].startswith(f"fit_em_ep step {int(result.num_steps):5d}/400") and "(done" in err[-1]
    assert f"{float(result.log_marginal): .8e}" in err[-1]


@pytest.mark.slow
def test_em_ep_reaches_its_fixed_point(em_fit):
    """At convergence theta maximises F at q(theta) (M-step stationarity) and epsilon = r / n."""
    X, y, result, _ = em_fit
    assert bool(result.converged) and bool(result.m_step_converged)
    assert bool(result.posterior.info.converged)
    treedef = jax.tree.structure(result.kernel)

    @functools.partial(gpc.jit, compiler_options=FAST_COMPILE)
    @jax.grad
    def bound_gradient(log_theta):
        kernel = jax.tree.unflatten(treedef, [jnp.exp(t) for t in log_theta])
        return gpc.variational_bound(result.posterior, y, kernel=kernel)

    def largest_gradient(kernel):  # float64 leaves of fixed type: one compilation for both kernels below
        log_theta = [np.log(np.asarray(leaf, np.float64)) for leaf in jax.tree.leaves(kernel)]
        return max(np.max(np.abs(g)) for g in jax.device_get(bound_gradient(log_theta)))

    assert largest_gradient(result.kernel) < 1e-3
    # The starting point is far from stationary, so the check above can fail.
    assert largest_gradient(kim_ghahramani_kernel(2)) > 1.0
    errors = int(np.sum(np.sign(np.asarray(result.posterior.mean)) != y))
    np.testing.assert_allclose(float(result.likelihood.epsilon), errors / len(y), rtol=1e-6, atol=1e-12)
    # The reported evidence and bound belong to the returned hyperparameters.
    again = fast_infer(gpc.EP(), result.kernel, result.likelihood, X, y)
    np.testing.assert_allclose(float(result.log_marginal), float(again.log_marginal), rtol=1e-8)
    assert float(result.bound) <= float(result.log_marginal)
    history = np.asarray(result.history)[: int(result.num_steps)]
    assert np.all(np.isfinite(history)) and np.all(np.isnan(np.asarray(result.history)[int(result.num_steps):]))
    assert history[-1] > history[0]


def test_em_ep_needs_label_noise_to_adapt_epsilon():
    X, y = circle_data(5, 0, seed=0)
    with pytest.raises(ValueError, match="LabelNoise"):
        gpc.fit_em_ep(gpc.EP(), kim_ghahramani_kernel(2), PROBIT, X, y)
    with pytest.raises(ValueError, match="E-step is expectation propagation"):
        gpc.fit_em_ep(gpc.Laplace(), kim_ghahramani_kernel(2), PROBIT, X, y, adapt_epsilon=False)


def run_em_ep(X, y):
    """The EM-EP fit of ``em_fit``: data of its shape share one compilation (``progress=True`` is a static
    argument like any other: the same program reports in every test)."""
    lik = gpc.likelihoods.LabelNoise(gpc.likelihoods.Heaviside(), epsilon=0.01)
    return gpc.fit_em_ep(gpc.EP(), kim_ghahramani_kernel(2), lik, X, y, max_steps=400, progress=True)


@pytest.mark.slow
def test_em_ep_under_vmap_matches_one_by_one(em_fit):
    """Two problems that stop at different EM steps (17 and 41) with different label-flip rates (0 and 1/30): the
    batch runs on after the first has stopped, whose steps must be discarded; and each keeps its own epsilon."""
    data = [circle_data(30, 2, seed=s) for s in (1, 6)]
    Xs, ys = np.stack([d[0] for d in data]), np.stack([d[1] for d in data])
    run = run_em_ep  # one by one: em_fit's compiled program

    batched = jax.device_get(gpc.jit(jax.vmap(run), compiler_options=FAST_COMPILE)(Xs, ys))
    for i in range(2):
        single = run(Xs[i], ys[i])
        np.testing.assert_allclose(float(batched.log_marginal[i]), float(single.log_marginal), rtol=1e-9)
        assert float(batched.likelihood.epsilon[i]) == float(single.likelihood.epsilon)
        assert int(batched.num_steps[i]) == int(single.num_steps)
    assert np.unique(batched.num_steps).size == 2 and np.unique(batched.likelihood.epsilon).size == 2
