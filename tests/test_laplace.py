"""Binary Laplace: the mode, the evidence, its gradient and predictions against independent truths."""

import re

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import (
    FAST_COMPILE,
    as_float64,
    central_difference,
    fast_infer,
    jit_call,
    log_marginal_functions,
    se_kernel,
    standardised_subset,
    toy_data,
)
from scipy import optimize, special, stats
from sklearn.gaussian_process import GaussianProcessClassifier
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

import gpclass as gpc
from gpclass._covariance import DenseCovariance
from gpclass._inference.laplace import _float32_start as float32_start
from gpclass._linalg import inverse_from_cholesky
from gpclass._validation import check_binary_labels

LOGISTIC, PROBIT = gpc.likelihoods.Logistic(), gpc.likelihoods.Probit()
LIKELIHOODS = pytest.mark.parametrize("lik", [LOGISTIC, PROBIT], ids=["logistic", "probit"])

# The test's own programs (gpc.jit) are compiled with gpclass's XLA options and LLVM optimisation level 0: the same
# HLO optimisations and results equal to rounding, at a third to a half of the compile time; their slower machine
# code does not matter at these sizes.  ``fast_infer`` is gpc.infer traced into such a program (arrays traced, the
# method and likelihood in the tree structure), for tests of the solution rather than of the eager entry point,
# whose own checks the bad-input tests call directly.

# One compiled program per likelihood and data shape gives the posterior, log q and its gradient.
LAPLACE = log_marginal_functions(gpc.Laplace())
laplace_log_marginal, log_marginal, log_marginal_and_grad, posterior = (
    LAPLACE.raw, LAPLACE.value, LAPLACE.value_and_grad, LAPLACE.posterior
)
D = 34  # ionosphere's inputs: every training set below is 60 x 34, so each likelihood compiles that program once


def padded(X):
    """X with zero columns appended up to D inputs: the same isotropic SE kernel (a zero column adds nothing to
    any distance), in the shape of the ionosphere tests' compiled program."""
    return np.hstack([X, np.zeros((len(X), D - X.shape[1]))])


def ionosphere_test_inputs():
    """15 standardised ionosphere inputs to predict at (a different subset from the training cases)."""
    return standardised_subset("ionosphere", 4, n=15)[0]


# --- dense references written from the definitions, in numpy -------------------------------------


def np_derivatives(lik, y, f):
    z = y * f
    if lik is LOGISTIC:
        return -np.logaddexp(0, -z), y * special.expit(-z), special.expit(z) * special.expit(-z)
    r = np.exp(stats.norm.logpdf(z) - special.log_ndtr(z))
    return special.log_ndtr(z), y * r, r * (z + r)


def np_se(X1, X2, variance, lengthscale):
    d = (X1[:, None, :] - X2[None, :, :]) / lengthscale
    return variance * np.exp(-0.5 * np.sum(d**2, -1))


def generic_mode(K, lik, y):
    """argmax_f log p(y|f) + log N(f|0, K) by scipy's trust-region method with the dense K^-1."""
    K_inv = np.linalg.inv(K)

    def negative(f):
        lp, g, W = np_derivatives(lik, y, f)
        return -(np.sum(lp) - 0.5 * f @ K_inv @ f), -(g - K_inv @ f), K_inv + np.diag(W)

    res = optimize.minimize(
        lambda f: negative(f)[0], np.zeros(len(y)), jac=lambda f: negative(f)[1], hess=lambda f: negative(f)[2],
        method="trust-exact", options={"gtol": 1e-12},
    )
    return res.x


def dense_log_marginal(K, lik, y, f):
    """log p(y|f^) - 1/2 f^T K^-1 f^ - 1/2 log|I + K W|, without the stable rewrites (GPML eq. 3.32)."""
    lp, _, W = np_derivatives(lik, y, f)
    return np.sum(lp) - 0.5 * f @ np.linalg.solve(K, f) - 0.5 * np.linalg.slogdet(np.eye(len(y)) + K * W[None, :])[1]


# --- the mode and the evidence --------------------------------------------------------------------


@LIKELIHOODS
@pytest.mark.slow
def test_mode_and_evidence_match_their_definitions(lik, ionosphere_small):
    X, y = ionosphere_small
    log_v, log_l = np.log(2.0), np.log(4.0)
    post = posterior(log_v, log_l, lik, X, y)
    K = np_se(X, X, 2.0, 4.0)
    f_ref = generic_mode(K, lik, y)
    np.testing.assert_allclose(post.mean, f_ref, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(post.log_marginal, dense_log_marginal(K, lik, y, f_ref), rtol=1e-9)
    # The mode satisfies its stationarity condition f^ = K grad log p(y|f^) (GPML eq. 3.17).
    np.testing.assert_allclose(post.mean, K @ np_derivatives(lik, y, np.asarray(post.mean))[1], atol=1e-10)
    assert bool(post.info.converged)


@pytest.mark.parametrize("data", ["ionosphere_small", "pima_small"])
def test_agrees_with_scikit_learn(data, request):
    X, y = request.getfixturevalue(data)
    X = padded(X)  # Pima's 8 inputs padded with zeros (scikit-learn sees the same padded inputs)
    variance, lengthscale = 3.0, 2.5
    sk = GaussianProcessClassifier(ConstantKernel(variance) * RBF(lengthscale), optimizer=None).fit(X, y)
    sk_value, sk_grad = sk.log_marginal_likelihood(sk.kernel_.theta, eval_gradient=True)
    value, grad = log_marginal_and_grad(np.log(variance), np.log(lengthscale), LOGISTIC, X, y)
    np.testing.assert_allclose(value, sk_value, rtol=1e-6)
    np.testing.assert_allclose(np.array(grad), sk_grad, rtol=1e-6)


@pytest.mark.parametrize("log_sigma_f", [3.0, 5.0])
@LIKELIHOODS
def test_stiff_hyperparameters_converge(lik, log_sigma_f, ionosphere_small):
    X, y = ionosphere_small
    post = posterior(2 * log_sigma_f, np.log(3.0), lik, X, y)
    assert bool(post.info.converged)
    K = np_se(X, X, np.exp(2 * log_sigma_f), 3.0)
    f = np.asarray(post.mean)
    np.testing.assert_allclose(f, K @ np_derivatives(lik, y, f)[1], rtol=1e-8, atol=1e-8 * np.max(np.abs(f)))
    np.testing.assert_allclose(post.log_marginal, dense_log_marginal(K, lik, y, f), rtol=1e-8)


# --- gradients ------------------------------------------------------------------------------------


def test_gradient_is_finite_where_the_curvature_underflows():
    """Well-separated data and a huge sigma_f put the probit mode past y f ~ 38.6, where W underflows
    to exactly 0 (seen on crabs in ML-II fits); the gradient must stay finite and exact there.

    60 cases on a line (one input, padded to the ionosphere shape: the mode test's compiled probit program);
    36 of them end with W = 0.  (At sigma_f = e^7 and beyond, log q's rounding noise, amplified by 1 / h, makes
    the differences with h = 1e-4 worse than the 1e-6 tolerance: they match the gradient to 1e-7 with h = 1e-3.)
    """
    X = padded(np.linspace(-3.0, 3.0, 60)[:, None])
    y = np.where(X[:, 0] > 0, 1.0, -1.0)
    log_v, log_l = 2 * 6.0, 2.0  # a nearly linear latent: the outer cases reach y f ~ 90
    post = posterior(log_v, log_l, PROBIT, X, y)
    assert bool(post.info.converged)
    assert np.max(y * np.asarray(post.mean)) > 40 and np.min(np.asarray(post.sqrt_w)) == 0
    _, (g_v, g_l) = log_marginal_and_grad(log_v, log_l, PROBIT, X, y)
    fd = central_difference(lambda t: float(log_marginal(t[0], t[1], PROBIT, X, y)), [log_v, log_l])
    np.testing.assert_allclose([g_v, g_l], fd, rtol=1e-6, atol=1e-7)


def unrolled_log_marginal(log_variance, log_lengthscale, lik, X, y, steps=40):
    """Oracle: plain Newton (GPML eq. 3.18) in a differentiable fori_loop, then eq. 3.32 densely."""
    K = se_kernel(log_variance, log_lengthscale).gram(X)
    n = len(y)

    def newton(_, f):
        _, g, W = lik.derivatives(y, f)
        return jnp.linalg.solve(jnp.eye(n) + K * W[None, :], K @ (W * f + g))

    f = jax.lax.fori_loop(0, steps, newton, jnp.zeros(n))
    lp, g, W = lik.derivatives(y, f)
    return jnp.sum(lp) - 0.5 * f @ jnp.linalg.solve(K, f) - 0.5 * jnp.linalg.slogdet(jnp.eye(n) + K * W[None, :])[1]


def test_implicit_gradient_matches_unrolled_autodiff(ionosphere_small):
    """Logistic (the implicit adjoint is the same code for every likelihood; probit's gradient, with its third
    derivatives, is checked against finite differences on hard inputs in tests/test_gradients_hard.py)."""
    X, y = ionosphere_small
    y = jnp.asarray(y)
    args = (np.log(3.0), np.log(4.0))
    unrolled_and_grad = gpc.jit(jax.value_and_grad(unrolled_log_marginal, argnums=(0, 1)),
                                compiler_options=FAST_COMPILE)
    unrolled = unrolled_and_grad(*args, LOGISTIC, X, y)
    implicit = log_marginal_and_grad(*args, LOGISTIC, X, y)
    np.testing.assert_allclose(implicit[0], unrolled[0], rtol=1e-10)
    np.testing.assert_allclose(implicit[1], unrolled[1], rtol=1e-8)


def test_reverse_mode_stores_no_newton_iterations(ionosphere_small):
    """The Newton loop is a while_loop (not reverse-differentiable): the gradient exists only through
    the custom VJP at the mode, so the backward pass holds no per-iteration state (no scan)."""
    X, y = ionosphere_small
    jaxpr = str(jax.make_jaxpr(jax.grad(laplace_log_marginal, argnums=(0, 1)))(0.5, 1.0, LOGISTIC, X, y))
    assert "while" in jaxpr and "scan" not in jaxpr


def test_reverse_mode_inverts_b_once_and_runs_no_cholesky_vjp(ionosphere_small):
    """The gradient needs B^-1 once (in half_log_det_b's VJP: at this n one triangular solve of L against the
    identity, then L^-T L^-1).  The factor L at the mode gets no cotangent: a zero cotangent reaching the Cholesky
    VJP cost two more n x n triangular solves and an n x n product, about 40 % of the gradient's time at n = 1000."""
    X, y = ionosphere_small
    n = len(y)
    jaxpr = str(jax.make_jaxpr(jax.grad(laplace_log_marginal, argnums=(0, 1)))(0.5, 1.0, LOGISTIC, X, y))
    assert len(re.findall(rf":f64\[{n},{n}\] = triangular_solve", jaxpr)) == 1
    # Two factorisations of B in the program: one in the Newton loop's body and one at the mode, shared by
    # log q and the mode's adjoint solve.
    assert len(re.findall(r"= cholesky \w", jaxpr)) == 2


@pytest.mark.parametrize("n", [1, 60, 256, 257, 301, 600])
def test_inverse_from_cholesky_equals_the_inverse(n):
    """B^-1 from B's Cholesky factor by block recursion (leaves of at most 256 rows here: 257, 301 and 600
    recurse, 257 and 301 into unequal halves, 600 twice) against NumPy's LU-based inverse of B."""
    rng = np.random.default_rng(n)
    A = rng.normal(size=(n, n))
    B = A @ A.T / n + np.eye(n)
    B_inv = np.asarray(jit_call(inverse_from_cholesky, np.linalg.cholesky(B)))
    np.testing.assert_allclose(B_inv, np.linalg.inv(B), rtol=0, atol=1e-13 * np.max(np.abs(np.linalg.inv(B))))


def test_gradient_wrt_log_lengthscale_as_in_the_issue(ionosphere_small):
    X, y = ionosphere_small
    grad = gpc.jit(jax.grad(lambda log_ell: gpc.infer(
        gpc.Laplace(), gpc.kernels.SquaredExponential(lengthscale=jnp.exp(log_ell)), LOGISTIC, X, y).log_marginal),
        compiler_options=FAST_COMPILE)
    fd = central_difference(lambda t: float(log_marginal(0.0, t[0], LOGISTIC, X, y)), 1.2)
    np.testing.assert_allclose(grad(1.2), fd[0], rtol=1e-6)


# --- predictions ----------------------------------------------------------------------------------


@LIKELIHOODS
def test_predictions_match_dense_formulas(lik, ionosphere_small):
    X_train, y_train = ionosphere_small  # the mode test's data: its compiled program
    X_test = ionosphere_test_inputs()
    post = posterior(np.log(2.0), np.log(4.0), lik, X_train, y_train)
    mean, var = gpc.predict_latent(post, X_test)
    K = np_se(X_train, X_train, 2.0, 4.0)
    K_s = np_se(X_test, X_train, 2.0, 4.0)
    f = np.asarray(post.mean)
    _, _, W = np_derivatives(lik, y_train, f)
    np.testing.assert_allclose(mean, K_s @ np.linalg.solve(K, f), rtol=1e-7, atol=1e-9)  # GPML eq. 3.21
    var_ref = 2.0 - np.einsum("ij,ji->i", K_s, np.linalg.solve(K + np.diag(1 / W), K_s.T))  # eq. 3.24
    np.testing.assert_allclose(var, var_ref, rtol=1e-8)
    p = gpc.predict(post, X_test)
    grid = np.linspace(-12, 12, 40001)
    for m, v, pi in zip(np.asarray(mean)[:5], np.asarray(var)[:5], np.asarray(p)[:5]):
        f_grid = m + np.sqrt(v) * grid
        dens = stats.norm.pdf(grid)
        ref = np.trapezoid(np.exp(np_derivatives(lik, np.ones_like(f_grid), f_grid)[0]) * dens, grid)
        np.testing.assert_allclose(pi, ref, atol=1e-9)


# --- batching, compilation, warm starts -----------------------------------------------------------


def test_vmap_matches_loop():
    # Padded Pima subsets, of the scikit-learn test's shape: the single evaluations reuse its compilation.
    data = [standardised_subset("pima", s) for s in range(2, 6)]
    Xs, ys = np.stack([padded(d[0]) for d in data]), np.stack([d[1] for d in data])
    log_vs, log_ls = np.array([0.0, 1.0, 2.0, 6.0]), np.array([0.0, 0.5, -0.3, 1.0])
    batched = jax.device_get(
        gpc.jit(jax.vmap(log_marginal_and_grad, in_axes=(0, 0, None, 0, 0)), compiler_options=FAST_COMPILE)(
            log_vs, log_ls, LOGISTIC, Xs, ys
        )
    )
    for i in range(4):
        single = log_marginal_and_grad(log_vs[i], log_ls[i], LOGISTIC, Xs[i], ys[i])
        np.testing.assert_allclose(batched[0][i], single[0], rtol=1e-12)
        np.testing.assert_allclose([g[i] for g in batched[1]], single[1], rtol=1e-9)


def test_second_call_does_not_recompile(pima_small):
    """New data of the same shape and new hyperparameter values reuse the compiled program."""
    X, y = pima_small
    log_marginal_and_grad(0.1, 0.0, LOGISTIC, padded(X), y)
    compiled = LAPLACE.compiled._cache_size()
    X2, y2 = standardised_subset("pima", 3)
    log_marginal_and_grad(0.7, 0.3, LOGISTIC, padded(X2), y2)
    assert LAPLACE.compiled._cache_size() == compiled


FLOAT32_START = log_marginal_functions(gpc.Laplace(float32_start=True))


def float32_start_from_zero(K, y):
    """The float32 phase alone from a = 0: (its point, its steps); module level, so one compiled program."""
    return float32_start(gpc.Laplace(), DenseCovariance(K), LOGISTIC, y, jnp.zeros_like(y))


@pytest.mark.parametrize("log_sigma_f", [np.log(2.0) / 2, 9.0])
@pytest.mark.slow
def test_float32_start_gives_the_float64_mode_log_q_and_gradient(log_sigma_f, ionosphere_small):
    """Newton's method started in float32 (forced on at n = 60; by default from 512 cases) ends at the float64 mode:
    mode, log q and gradient as without it.  At sigma_f = 1.4 float32 takes the iterations most of the way (the
    float64 iterations then take at most 3 steps); at sigma_f = e^9 (stiff: B's condition is beyond float32) its
    first step is already a halved one, where it stops, and float64 goes on from the better start (here a = 0)."""
    X, y = ionosphere_small
    args = (2 * log_sigma_f, np.log(4.0), LOGISTIC, X, y)
    (value, post), grad = FLOAT32_START.compiled(*map(as_float64, args[:2]), *args[2:])
    (value_ref, post_ref), grad_ref = LAPLACE.compiled(*map(as_float64, args[:2]), *args[2:])
    assert bool(post.info.converged)
    np.testing.assert_allclose(post.mean, post_ref.mean, rtol=1e-9, atol=1e-9 * np.max(np.abs(post_ref.mean)))
    np.testing.assert_allclose(value, value_ref, rtol=1e-12)
    np.testing.assert_allclose(grad, grad_ref, rtol=1e-8, atol=1e-10)
    K = np_se(X, X, np.exp(2 * log_sigma_f), 4.0)
    start, steps = jit_call(float32_start_from_zero, K, y)
    f_start = K @ np.asarray(start)
    if log_sigma_f < 1:
        assert int(steps) >= 3
        assert np.max(np.abs(f_start - post_ref.mean)) <= 1e-3 * (1 + np.max(np.abs(post_ref.mean)))
        assert int(post.info.num_steps) - int(steps) <= 3
    else:
        assert int(steps) <= 2 and int(post.info.num_steps) - int(steps) == int(post_ref.info.num_steps)


def test_float32_start_is_on_from_512_float64_cases():
    """The default (``float32_start=None``): a float32 Newton loop in the program from 512 float64 cases, not
    below; never for float32 data.  Traced only, not compiled."""
    def programs(n, dtype):
        X, y = toy_data(n=n)
        jaxpr = str(jax.make_jaxpr(lambda X, y: gpc.infer(gpc.Laplace(), se_kernel(0.0, 0.0), LOGISTIC, X, y,
                                                           throw=False).log_marginal)(X.astype(dtype), y.astype(dtype)))
        count = lambda dtype: len(re.findall(dtype + r"\[\d+,\d+\] = cholesky", jaxpr))  # noqa: E731
        return count("f32"), count("f64")

    # (float32, float64) factorisations: Newton's loop body and the mode's factor, plus the float32 loop's body.
    assert programs(512, np.float64) == (1, 2) and programs(511, np.float64) == (0, 2)
    assert programs(512, np.float32) == (2, 0)


def test_warm_start_gives_the_same_mode_in_fewer_steps(ionosphere_small):
    X, y = ionosphere_small
    cold = posterior(np.log(20.0), np.log(4.0), LOGISTIC, X, y)  # the other tests' compiled program
    nearby = gpc.kernels.SquaredExponential(variance=21.0, lengthscale=4.1)
    warm = fast_infer(gpc.Laplace(), nearby, LOGISTIC, X, y, init=cold.warm_start)
    reference = posterior(np.log(21.0), np.log(4.1), LOGISTIC, X, y)
    np.testing.assert_allclose(warm.mean, reference.mean, rtol=1e-9, atol=1e-9)
    assert int(warm.info.num_steps) < int(reference.info.num_steps)


def test_non_convergence_is_reported_or_raised(ionosphere_small):
    X, y = ionosphere_small
    kernel = gpc.kernels.SquaredExponential(variance=20.0, lengthscale=4.0)
    post = fast_infer(gpc.Laplace(max_steps=2), kernel, LOGISTIC, X, y, throw=False)
    assert int(post.info.status) == gpc.Status.MAX_STEPS and not bool(post.info.converged)
    assert int(post.info.num_steps) == 2
    # throw=True (the default) raises with the status.  The check is attached to every array of the posterior, so a
    # program that uses only the gradient of log_marginal (everything else is dead code) raises too.
    gradient_only = gpc.jit(jax.grad(
        lambda v: gpc.infer(gpc.Laplace(max_steps=2), se_kernel(v, np.log(4.0)), LOGISTIC, X, y).log_marginal
    ), compiler_options=FAST_COMPILE)
    with pytest.raises(Exception, match=r"Laplace did not converge \(MAX_STEPS\)"):
        jax.block_until_ready(gradient_only(np.log(20.0)))


def test_single_case_and_label_codings(ionosphere_small):
    X = np.array([[0.3]])
    post = fast_infer(gpc.Laplace(), gpc.kernels.SquaredExponential(variance=2.0), PROBIT, X, np.array([1.0]))
    K = np.array([[2.0]])
    np.testing.assert_allclose(post.log_marginal, dense_log_marginal(K, PROBIT, np.ones(1), np.asarray(post.mean)),
                               rtol=1e-6, atol=1e-12)
    # Every coding becomes the same {-1, +1} floats at the boundary (check_binary_labels, which gpc.infer calls
    # first); one coding of float64 dtype end to end reuses the compiled posterior (another dtype would compile
    # the whole program again for the same computation).
    X, y = ionosphere_small
    for coded in [(y > 0).astype(int), y > 0, (y > 0).astype(float), y.astype(int), y.astype(np.float32)]:
        np.testing.assert_array_equal(jit_call(check_binary_labels, coded, len(y), np.float64), y)
    reference = posterior(0.0, 0.0, LOGISTIC, X, y).log_marginal
    zero_one = posterior(0.0, 0.0, LOGISTIC, X, (y > 0).astype(float))
    np.testing.assert_allclose(zero_one.log_marginal, reference, rtol=1e-14)


# --- bad input ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "X, y, message",
    [
        (np.zeros((3, 2)), np.array([1.0, 2.0, -1.0]), "labels y must be in"),
        (np.zeros((3, 2)), np.array([1.0, 0.0, -1.0]), "mix the codings"),
        (np.array([[0.0, 1.0], [np.nan, 1.0], [2.0, 3.0]]), np.array([1.0, -1.0, 1.0]), "NaN"),
        (np.zeros((3, 2)), np.array([1.0, -1.0]), "shape"),
        (np.zeros((0, 2)), np.zeros(0), "empty"),
        (np.zeros(3), np.array([1.0, -1.0, 1.0]), "shape"),
    ],
    ids=["label-2", "mixed-coding", "nan", "mismatch", "empty", "1-d"],
)
def test_bad_input_is_a_clear_error(X, y, message):
    with pytest.raises(Exception, match=message):
        gpc.infer(gpc.Laplace(), gpc.kernels.SquaredExponential(), LOGISTIC, X, y)
    if message in ("labels y must be in", "mix the codings", "NaN"):  # value checks also raise inside a user's jit
        with pytest.raises(Exception, match=message):
            log_marginal_in_user_jit(X, y)


@gpc.jit(compiler_options=FAST_COMPILE)
def log_marginal_in_user_jit(X, y):
    """gpc.infer inlined in a user's jitted function (one compilation for the value-check cases, all 3 x 2)."""
    return gpc.infer(gpc.Laplace(), gpc.kernels.SquaredExponential(), LOGISTIC, X, y).log_marginal


def test_prediction_input_checks(ionosphere_small):
    X, y = ionosphere_small
    X_test = ionosphere_test_inputs()  # the prediction test's inputs: its compiled predict_latent
    post = posterior(0.0, 1.0, LOGISTIC, X, y)
    with pytest.raises(ValueError, match="input dimensions"):
        gpc.predict(post, X[:, :3])
    with pytest.raises(ValueError, match="approximation"):
        gpc.predict(post, X, approximation="probit")
    with pytest.raises(ValueError, match=r"integrator=gpc.integrators.MacKay\(\)"):
        gpc.predict(post, X, approximation="mackay")  # the strings are gone; the message names the replacement
    with pytest.raises(ValueError, match="integrator must be one of gpc.integrators"):
        gpc.predict(post, X, integrator="mackay")
    with pytest.raises(ValueError, match="averages a multi-class likelihood"):
        gpc.predict(post, X, integrator=gpc.integrators.MonteCarlo())
    np.testing.assert_allclose(
        gpc.predict(post, X_test, integrator=gpc.integrators.MacKay()),
        jit_call(gpc.mackay_probability, *gpc.predict_latent(post, X_test)),
    )
    assert eqx.is_array(post.chol)


def predictive_summary(theta, X, y, X_test):
    """sum of the latent predictive means and variances at X_test (GPML Algorithm 3.2) as a function of theta."""
    post = gpc.infer(gpc.Laplace(), se_kernel(theta[0], theta[1]), gpc.likelihoods.Logistic(), X, y)
    mean, var = gpc.predict_latent(post, X_test)
    return jnp.sum(mean) + jnp.sum(var)


# One compiled program: the finite differences call it too and discard the gradient.
predictive_summary_and_grad = gpc.jit(jax.value_and_grad(predictive_summary), compiler_options=FAST_COMPILE)


def test_prediction_gradient_matches_finite_differences():
    """The gradient of predictions flows through the mode's factor L (shared with log q's computation): its
    reverse mode must run when L's cotangent is not zero."""
    X, y = toy_data(n=20, seed=11)
    X_test = toy_data(n=6, seed=12)[0]
    theta = np.array([np.log(3.0), np.log(0.8)])
    grad = predictive_summary_and_grad(theta, X, y, X_test)[1]
    fd = central_difference(lambda t: float(predictive_summary_and_grad(t, X, y, X_test)[0]), theta, h=1e-5)
    np.testing.assert_allclose(grad, fd, rtol=1e-6)
