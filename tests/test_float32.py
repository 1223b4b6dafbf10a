"""float32 with x64 off, as most GPU users run: every method on every prior covariance against its float64 answer.

Both likelihoods run in float32: probit through Laplace (its derivatives, from log Phi) and EP (its tilted
moments), logistic through KL (its expected log-likelihood and that quadrature's derivatives).

The test process runs with x64 enabled (conftest); ``jax.enable_x64(False)`` (a context manager in
jax 0.10.2) turns it off for the float32 computation only, so the float32 programs are traced and compiled
with no 64-bit type in existence, exactly as in a process that never enabled x64 (jit's cache is keyed on
the x64 setting).  The reference is the float64 answer: value, predictions and posterior mean from the same
code, the gradient by central differences of the float64 value.

The problem is small and moderately conditioned: 60 standardised Pima cases (d = 8), an SE kernel with
variance 4 and length scale 3 (cond(K) ~ 3e4; B = I + W^1/2 K W^1/2, whose Cholesky factor every method uses,
20-50), 20 held-out test cases.

The programs are compiled with gpclass's XLA options and LLVM optimisation level 0 (``FAST_COMPILE``): the same HLO
optimisations and results equal to rounding, at a third to a half of the compile time.
"""

import typing

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FAST_COMPILE, central_difference, fast_infer, se_kernel, standardised_subset

import gpclass as gpc


class Tolerance(typing.NamedTuple):
    value: float  # relative, on log q(y|X)
    grad: float  # relative to max |d log q / d log theta|; also the posterior mean, relative to max |mean|
    probability: float  # absolute, on p(y* = +1 | x*)


# Tolerances keyed by the dtype of the result under test (one place; a KeyError means an unexpected dtype).
# float32, eps = 1.2e-7:
# * value: the inner solvers' float32 tolerances do not enter it to first order (it is stationary in the mode /
#   sites / variational parameters), so rounding sets it: ~n eps cond(B) = 60 x 1.2e-7 x 30 ~ 2e-4 absolute on
#   |log q| ~ 37, 6e-6 relative; 5e-5 leaves a factor ~10 on that bound.
# * gradient and posterior mean (relative to their largest entry), probabilities (absolute): first-order in
#   the inner solvers' float32 stopping tolerances (Laplace: Newton step <= 3.5e-4 relative, EP: sites 1e-5,
#   KL: sites 1e-4), hence 1e-3 on the gradient and mean; a mean error of 3.5e-4 x max |mean| (3.3) moves a
#   probability by at most 0.4 (the largest dp/dmean) times that: 5e-4.
# Observed on this problem (CPU): value <= 6e-7, gradient <= 9e-6, mean <= 1.2e-6, probabilities <= 1.3e-5 (the
# largest gradient and probability errors: Laplace with probit).  Newton converges quadratically, so the solvers
# end far inside their tolerances.
TOLERANCE = {
    np.dtype(np.float32): Tolerance(value=5e-5, grad=1e-3, probability=5e-4),
}

METHODS = pytest.mark.parametrize(
    "method, likelihood",
    [
        (gpc.Laplace(), gpc.likelihoods.Probit()),
        (gpc.EP(), gpc.likelihoods.Probit()),
        (gpc.KL(), gpc.likelihoods.Logistic()),
    ],
    ids=["laplace-probit", "ep-probit", "kl-logistic"],
)




@pytest.fixture(scope="module")
def problem():
    X, y = standardised_subset("pima", 2, n=80)
    return np.array([np.log(4.0), np.log(3.0)]), X[:60], y[:60], X[60:]


def posterior(method, likelihood, theta, X, y, X_test):
    post = gpc.infer(method, se_kernel(theta[0], theta[1]), likelihood, X, y)
    return post.log_marginal, (gpc.predict(post, X_test), post.mean, post.info.converged)


@gpc.jit(static_argnums=(0, 1), compiler_options=FAST_COMPILE)  # the method and likelihood: static (hashable)
def forward(method, likelihood, theta, X, y, X_test):
    """log q(y|X) and (predictions, posterior mean, converged): the float64 reference, without a backward pass
    (its gradient is taken by central differences of this program: one compilation fewer per method)."""
    return posterior(method, likelihood, theta, X, y, X_test)


@gpc.jit(static_argnums=(0, 1), compiler_options=FAST_COMPILE)
def value_and_grad(method, likelihood, theta, X, y, X_test):
    """The same and the gradient in theta = (log variance, log length scale), by autodiff (float32)."""
    return jax.value_and_grad(posterior, argnums=2, has_aux=True)(method, likelihood, theta, X, y, X_test)


@METHODS
@pytest.mark.slow
def test_float32_with_x64_off_matches_float64(method, likelihood, problem):
    theta, X, y, X_test = problem
    ref_value, (ref_p, ref_mean, ref_converged) = forward(method, likelihood, theta, X, y, X_test)
    assert ref_value.dtype == np.float64 and bool(ref_converged)
    # Central differences in float64, h = 1e-4: truncation ~1e-8, and the inner solvers' float64 tolerances
    # (value stationary; KL's ELBO change <= 1e-10 relative) add < 2e-5 -- far below the float32 tolerance.
    ref_grad = central_difference(lambda t: float(forward(method, likelihood, t, X, y, X_test)[0]), theta)

    with jax.enable_x64(False):
        assert jnp.zeros(1).dtype == np.float32 and jnp.asarray(1.0).dtype == np.float32  # x64 really is off
        as32 = [np.asarray(a, np.float32) for a in (theta, X, y, X_test)]
        (value, (p, mean, converged)), grad = jax.device_get(value_and_grad(method, likelihood, *as32))
    assert jnp.zeros(1).dtype == np.float64  # and back on for the rest of the process

    assert bool(converged)
    for out in (value, grad, p, mean):
        assert out.dtype == np.float32, out.dtype
    tol = TOLERANCE[value.dtype]
    np.testing.assert_allclose(value, ref_value, rtol=tol.value)
    np.testing.assert_allclose(grad, ref_grad, rtol=0, atol=tol.grad * np.max(np.abs(ref_grad)))
    np.testing.assert_allclose(mean, ref_mean, rtol=0, atol=tol.grad * np.max(np.abs(ref_mean)))
    np.testing.assert_allclose(p, ref_p, rtol=0, atol=tol.probability)
    assert np.all((p > 0) & (p < 1))


# Every other method and operator: value, predictions and posterior mean in float32 against float64, one program per
# precision for all of them (the gradients of these paths are tested in float64 against finite differences
# elsewhere; in float32 they share the adjoints tested above).  Sparse priors: 12 inducing inputs, the first
# training cases.
OTHERS = (
    ("jj-dense", gpc.JaakkolaJordan(), gpc.likelihoods.Logistic(), None),
    ("jj-upper-dense", gpc.JaakkolaJordanUpper(), gpc.likelihoods.Logistic(), None),
    ("softmax-dense", gpc.Laplace(), gpc.likelihoods.Softmax(3), None),
    ("laplace-fitc", gpc.Laplace(), gpc.likelihoods.Probit(), "fitc"),
    ("ep-fitc", gpc.EP(), gpc.likelihoods.Probit(), "fitc"),
    ("kl-vfe", gpc.KL(), gpc.likelihoods.Logistic(), "vfe"),
    ("jj-fitc", gpc.JaakkolaJordan(), gpc.likelihoods.Logistic(), "fitc"),
    ("softmax-vfe", gpc.Laplace(), gpc.likelihoods.Softmax(3), "vfe"),
)


@gpc.jit(compiler_options=FAST_COMPILE)
def every_other(theta, X, y, classes, X_test):
    results = {}
    for name, method, likelihood, sparse in OTHERS:
        prior = se_kernel(theta[0], theta[1])
        prior = prior if sparse is None else gpc.Sparse(prior, X[:12], approximation=sparse)
        post = gpc.infer(method, prior, likelihood, X, classes if likelihood.num_latent > 1 else y, throw=False)
        mean, _ = gpc.predict_latent(post, X_test)
        results[name] = (post.log_marginal, mean, post.mean, post.info.converged)
    return results


@pytest.mark.slow
def test_every_other_method_and_operator_in_float32_matches_float64(problem):
    theta, X, y, X_test = problem
    classes = (np.arange(len(y)) % 3).astype(np.float64)
    reference = every_other(theta, X, y, classes, X_test)
    with jax.enable_x64(False):
        as32 = [np.asarray(a, np.float32) for a in (theta, X, y, classes, X_test)]
        single = jax.device_get(every_other(*as32))
    for name, (value, latent, mean, converged) in single.items():
        ref_value, ref_latent, ref_mean, ref_converged = reference[name]
        assert bool(ref_converged) and bool(converged), name
        assert value.dtype == np.float32, name
        tol = TOLERANCE[value.dtype]
        np.testing.assert_allclose(value, ref_value, rtol=tol.value, err_msg=name)
        for out, ref in ((latent, ref_latent), (mean, ref_mean)):
            np.testing.assert_allclose(out, ref, rtol=0, atol=tol.grad * np.max(np.abs(ref)), err_msg=name)


def test_float32_ml2_stops_converged_where_the_objective_cannot_resolve_more(monkeypatch):
    """x64 off, 100 standardised Pima cases: the float32 fit reaches scikit-learn's float64 log marginal
    likelihood to 1e-4 with a gradient of about 0.012, above float32's gtol of 1e-2, where the next L-BFGS step's
    predicted gain is below the objective's rounding (ftol (1 + |log q|)): CONVERGED, not STALLED after two
    fruitless line searches (and an error under throw=True), as it was before that rule.  (Which problems end
    this way depends on the objective program's float32 rounding: ``benchmarks/float32_fit_grid.py``.)"""
    from gpclass._box_lbfgs import BoxLBFGS

    X, y = gpc.datasets.load("pima")
    idx = np.random.default_rng(0).permutation(len(y))[:100]
    X, y = gpc.datasets.standardize(X[idx]).astype(np.float32), y[idx]
    sklearn_optimum = -57.957593  # GaussianProcessClassifier(ConstantKernel(1) * RBF(sqrt(8))), float64
    with jax.enable_x64(False):
        start = gpc.kernels.SquaredExponential(np.float32(1.0), np.float32(np.sqrt(X.shape[1])))
        result = gpc.fit(gpc.Laplace(), start, gpc.likelihoods.Logistic(), X, y)
        assert result.objective.dtype == jnp.float32 and gpc.Status(int(result.status)) == gpc.Status.CONVERGED
        assert float(result.grad_norm) > 1e-2
        np.testing.assert_allclose(float(result.objective), sklearn_optimum, atol=1e-4)
        monkeypatch.setattr(BoxLBFGS, "resolved", lambda self, search, memory, level: False)
        without = gpc.fit(gpc.Laplace(), start, gpc.likelihoods.Logistic(), X, y, throw=False)
        assert gpc.Status(int(without.status)) == gpc.Status.STALLED


def test_float32_jaakkola_jordan_stops_where_rounding_keeps_nu_moving():
    """x64 off, the 351 standardised Ionosphere cases: at a signal variance of 10 the bound converges in float32
    (nu settles to 1e-5 while log Z' moves by its rounding level, about 0.005) to float64's value within 1e-4
    relative; at 100 and 1e4 rounding keeps nu moving by about 1e-4 (log Z' 0.05 and 58 off float64's optimum):
    IMPRECISE after a few steps, where the solver ran to MAX_STEPS (200 steps) before.  In float64 every one of
    these converges (the rule does not fire where exact arithmetic still makes progress)."""
    X, y = gpc.datasets.load("ionosphere")
    X = gpc.datasets.standardize(X)
    method, logistic = gpc.JaakkolaJordan(), gpc.likelihoods.Logistic()
    lengthscale = np.sqrt(X.shape[1])
    float64 = {}
    for variance in (10.0, 100.0, 1e4):
        post = fast_infer(method, gpc.kernels.SquaredExponential(variance, lengthscale), logistic, X, y)
        assert gpc.Status(int(post.info.status)) == gpc.Status.CONVERGED
        float64[variance] = float(post.log_marginal)
    with jax.enable_x64(False):
        X32 = X.astype(np.float32)
        kernel = gpc.kernels.SquaredExponential(np.float32(10.0), np.float32(lengthscale))
        post = fast_infer(method, kernel, logistic, X32, y, throw=False)
        assert post.log_marginal.dtype == jnp.float32 and gpc.Status(int(post.info.status)) == gpc.Status.CONVERGED
        np.testing.assert_allclose(float(post.log_marginal), float64[10.0], rtol=1e-4)
        for variance in (100.0, 1e4):
            kernel = gpc.kernels.SquaredExponential(np.float32(variance), np.float32(lengthscale))
            post = fast_infer(method, kernel, logistic, X32, y, throw=False)
            assert gpc.Status(int(post.info.status)) == gpc.Status.IMPRECISE
            assert int(post.info.num_steps) < 20
            with pytest.raises(gpc.GPClassError, match=r"IMPRECISE.*nu still moving"):
                gpc.infer(method, kernel, logistic, X32, y)
