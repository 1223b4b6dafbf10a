"""ML-II fitting with optax: against scikit-learn's optimiser, under vmap, with priors, bounds and stop reasons.

Compiled programs are shared: ``fit_laplace`` on the 30 x 2 toy shape serves the vmap, prior, recompile and
label tests; every ARD fit is one 60 x 8 program; each other method is one fit program plus one ``gpc.infer``
program for the finite-difference checks, its data sets of one shape.

The tests' programs are compiled with gpclass's XLA options and LLVM optimisation level 0 (``FAST_COMPILE``): the
same HLO optimisations and results equal to rounding, at a third to a half of the compile time; their slower machine
code does not matter at these sizes.  ``fast_fit`` and ``fast_infer`` are gpc.fit and gpc.infer traced into such a
program (arrays traced; the method, likelihood and options in the tree structure or static), for tests of the
result rather than of the eager entry point (as ``fit_laplace`` always was).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import FAST_COMPILE, as_float64, fast_infer, toy_data
from sklearn.gaussian_process import GaussianProcessClassifier
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

import gpclass as gpc

LOGISTIC = gpc.likelihoods.Logistic()
SKLEARN_BOUNDS = (1e-5, 1e5)  # scikit-learn's default box on every hyperparameter


TRACES = []


def se(variance, lengthscale):
    """A squared-exponential kernel with float64 (never weakly typed) parameters: one compilation per shape."""
    return gpc.kernels.SquaredExponential(as_float64(variance), as_float64(lengthscale))


START = se(1.0, 1.0)
FIT_OPTIONS = ("optimizer", "max_steps", "gtol", "ftol", "bounds", "log_prior", "warm_start_inner", "throw")
fast_fit = gpc.jit(gpc.fit, static_argnames=FIT_OPTIONS, compiler_options=FAST_COMPILE)


@gpc.jit(static_argnames=FIT_OPTIONS, compiler_options=FAST_COMPILE)
def fit_laplace(kernel, X, y, **options):
    """ML-II Laplace, compiled once per data shape and static option (shared across tests)."""
    TRACES.append(None)
    return gpc.fit(gpc.Laplace(), kernel, LOGISTIC, X, y, **options)


def log_params(kernel):
    return np.array([np.log(kernel.variance), np.log(kernel.lengthscale)])


def free_coordinates(kernel, likelihood):
    """The coordinates fit optimises: log of every kernel parameter, then logit(2 epsilon) of a label-flip rate."""
    z = [np.log(np.atleast_1d(kernel.variance)), np.log(np.atleast_1d(kernel.lengthscale))]
    if isinstance(likelihood, gpc.likelihoods.LabelNoise):
        e = 2 * float(likelihood.epsilon)
        z.append(np.array([np.log(e) - np.log1p(-e)]))
    return np.concatenate(z)


def from_free(z, kernel, likelihood):
    """Inverse of ``free_coordinates``, shaped like ``kernel`` and ``likelihood``."""
    d = np.size(kernel.lengthscale)
    lengthscale = np.exp(z[1 : 1 + d]).reshape(np.shape(kernel.lengthscale))
    if isinstance(likelihood, gpc.likelihoods.LabelNoise):
        likelihood = gpc.likelihoods.LabelNoise(likelihood.base, as_float64(0.5 / (1 + np.exp(-z[1 + d]))))
    return se(np.exp(z[0]), lengthscale), likelihood


def check_stationary(method, result, X, y, bounds, h=1e-3, atol=2e-5):
    """KKT conditions of the box-constrained ML-II, checked by finite differences of gpc.infer's log_marginal.

    Inside the box the central difference vanishes; at a bound the objective must not rise inwards.
    """
    z = free_coordinates(result.kernel, result.likelihood)
    lo, hi = np.log(bounds)

    def objective(z):
        kernel, likelihood = from_free(z, result.kernel, result.likelihood)
        return float(fast_infer(method, kernel, likelihood, X, y).log_marginal)

    f0 = objective(z)
    np.testing.assert_allclose(float(result.objective), f0, rtol=1e-8)  # warm vs cold start of the inner solve
    at_bound = []
    for i, e in enumerate(np.eye(len(z))):
        if abs(z[i] - hi) < 1e-12 or abs(z[i] - lo) < 1e-12:
            inward = -e if abs(z[i] - hi) < 1e-12 else e
            assert objective(z + h * inward) <= f0 + 1e-9, f"objective rises inwards from the bound in coordinate {i}"
            at_bound.append(i)
        else:
            grad = (objective(z + h * e) - objective(z - h * e)) / (2 * h)
            np.testing.assert_allclose(grad, 0.0, atol=atol, err_msg=f"coordinate {i}")
    return at_bound


def test_fit_matches_scikit_learn_ml2():
    X, y = toy_data(n=30, seed=7)
    result = fit_laplace(START, X, y)
    sk = GaussianProcessClassifier(ConstantKernel(1.0, (1e-6, 1e6)) * RBF(1.0, (1e-6, 1e6))).fit(X, y)
    assert int(result.status) == gpc.Status.CONVERGED and bool(result.converged)
    assert float(result.objective) == pytest.approx(sk.log_marginal_likelihood_value_, rel=1e-7)
    np.testing.assert_allclose(log_params(result.kernel), sk.kernel_.theta, atol=2e-3)
    # The returned posterior is the one at the fitted hyperparameters.
    assert float(result.posterior.log_marginal) == pytest.approx(float(result.objective), rel=1e-12)
    history = np.asarray(result.history)
    steps = int(result.num_steps)
    assert np.all(np.diff(history[:steps]) >= 0) and np.all(np.isnan(history[steps:]))
    assert history[steps - 1] == pytest.approx(float(result.objective))


def noisy_features(seed, n=60, d=8):
    """toy_data's two informative inputs plus d - 2 pure-noise inputs."""
    X, y = toy_data(n=n, d=2, seed=seed)
    return np.hstack([X, np.random.default_rng(100 + seed).normal(size=(n, d - 2))]), y


@pytest.mark.parametrize("data", ["pima", "noise"])
@pytest.mark.slow
def test_ard_with_irrelevant_inputs_stops_converged_no_worse_than_scikit_learn(data, pima_small):
    """Issue 13 part 4: the length scales of irrelevant inputs run far out (to the bound, or to where the gradient
    test holds) and the fit stops converged, saying whether at a bound.

    Same kernel (C * RBF, ARD), same start (all ones), same box (1e-5, 1e5) as scikit-learn, whose
    L-BFGS-B maximises the same Laplace approximation: our log marginal must be at least as high, and the
    box-constrained stationarity conditions hold by finite differences.
    """
    X, y = pima_small if data == "pima" else noisy_features(seed=0)
    d = X.shape[1]
    result = fit_laplace(gpc.kernels.SquaredExponential(1.0, np.ones(d)), X, y, bounds=SKLEARN_BOUNDS)
    assert bool(result.converged) and float(result.grad_norm) <= 1e-5, gpc.Status(int(result.status)).message
    sk = GaussianProcessClassifier(ConstantKernel(1.0, SKLEARN_BOUNDS) * RBF(np.ones(d), SKLEARN_BOUNDS)).fit(X, y)
    sk_value = sk.log_marginal_likelihood_value_
    assert float(result.objective) >= sk_value - 1e-9 * (1 + abs(sk_value))
    at_bound = check_stationary(gpc.Laplace(), result, X, y, SKLEARN_BOUNDS)
    assert (int(result.status) == gpc.Status.AT_BOUND) == bool(at_bound)
    # Only length scales may sit at the bound, at its upper end, exactly.
    assert all(i >= 1 for i in at_bound)
    np.testing.assert_allclose(np.asarray(result.kernel.lengthscale)[np.array(at_bound, int) - 1], 1e5, rtol=1e-14)
    # The irrelevant inputs are switched off: where scikit-learn's length scale is beyond 1e3, ours is too.
    far = np.exp(sk.kernel_.theta[1:]) > 1e3
    assert far.any() and np.all(np.asarray(result.kernel.lengthscale)[far] > 1e3)


@pytest.mark.timeout(240)  # the vmapped fit that hung in a plain process (tests/test_no_deadlock.py)
@pytest.mark.slow
def test_vmap_over_64_data_sets_equals_fitting_one_by_one():
    data = [toy_data(n=30, seed=s) for s in range(64)]
    Xs, ys = np.stack([d[0] for d in data]), np.stack([d[1] for d in data])
    starts = se(np.linspace(0.5, 2.0, 64), np.linspace(0.7, 1.5, 64))
    vmapped = gpc.jit(jax.vmap(lambda k, X, y: gpc.fit(gpc.Laplace(), k, LOGISTIC, X, y)),
                      compiler_options=FAST_COMPILE)
    batched = jax.device_get(vmapped(starts, Xs, ys))
    assert np.all(np.isin(batched.status, [gpc.Status.CONVERGED, gpc.Status.AT_BOUND]))
    for i in range(0, 64, 4):  # every 4th set one by one (the single fits dominate the test's time)
        start = jax.tree.map(lambda leaf, i=i: leaf[i], starts)
        single = fit_laplace(start, Xs[i], ys[i])
        assert int(batched.status[i]) == int(single.status)
        np.testing.assert_allclose(float(batched.objective[i]), float(single.objective), rtol=1e-9, atol=1e-9)
        np.testing.assert_allclose(
            [np.log(batched.kernel.variance[i]), np.log(batched.kernel.lengthscale[i])],
            log_params(single.kernel), atol=1e-6,
        )
        assert int(batched.num_steps[i]) == int(single.num_steps)


@pytest.mark.slow
def test_a_failed_start_is_a_value_not_an_exception():
    """At K = 1e8 * ones (the corner of the default box) Laplace's Newton iterations do not converge."""
    result = fit_laplace(se(1e8, 1e8), *toy_data(n=30, seed=3), throw=False)
    assert int(result.status) == gpc.Status.FAILED and not bool(result.converged)
    assert int(result.num_steps) == 0 and not bool(result.posterior.info.converged)
    assert float(result.objective) == -np.inf and float(result.grad_norm) == 0.0  # no NaN from the failed solve
    np.testing.assert_allclose(log_params(result.kernel), np.log([1e8, 1e8]), rtol=1e-15)
    # By default (throw=True) the fit raises with the reason.  The check is attached to every field of the result, so a
    # program that uses only the fitted variance (dead-code elimination drops everything else) still raises.
    variance_only = gpc.jit(
        lambda k, X, y: gpc.fit(gpc.Laplace(), k, LOGISTIC, X, y).kernel.variance,
        compiler_options=FAST_COMPILE,
    )
    with pytest.raises(Exception, match=r"fit did not converge \(FAILED\)"):
        jax.block_until_ready(variance_only(se(1e8, 1e8), *toy_data(n=30, seed=3)))


def test_any_optax_optimiser_reaches_the_same_optimum():
    X, y = toy_data(n=30, seed=7)
    lbfgs = fit_laplace(START, X, y)
    adam = fit_laplace(START, X, y, optimizer=optax.adam(0.1), max_steps=1000, gtol=1e-4)  # ~170 steps
    assert bool(adam.converged)
    assert float(adam.objective) == pytest.approx(float(lbfgs.objective), abs=1e-6)
    np.testing.assert_allclose(log_params(adam.kernel), log_params(lbfgs.kernel), atol=1e-3)


@pytest.mark.slow
def test_log_prior_moves_the_optimum_to_a_stationary_point_of_the_posterior():
    X, y = toy_data(n=30, seed=6)

    def log_prior(kernel, likelihood):
        return gpc.priors.log_gamma(kernel.lengthscale, 4.0, 8.0)  # pulls the length scale towards 0.4

    plain = fit_laplace(START, X, y)
    with_prior = fit_laplace(START, X, y, log_prior=log_prior)
    assert float(with_prior.kernel.lengthscale) < float(plain.kernel.lengthscale)

    @gpc.jit(compiler_options=FAST_COMPILE)
    def log_posterior(kernel, X, y):
        return gpc.infer(gpc.Laplace(), kernel, LOGISTIC, X, y).log_marginal + log_prior(kernel, LOGISTIC)

    def objective(theta):
        return float(log_posterior(se(np.exp(theta[0]), np.exp(theta[1])), X, y))

    theta = log_params(with_prior.kernel)
    h = 1e-4
    grad = [(objective(theta + h * e) - objective(theta - h * e)) / (2 * h) for e in np.eye(2)]
    np.testing.assert_allclose(grad, 0.0, atol=1e-4)
    assert float(with_prior.objective) == pytest.approx(objective(theta), rel=1e-9)


def test_fit_does_not_recompile_and_rejects_bad_starts_and_one_class_labels():
    """New data and new starting values reuse the compiled fit (the same program as the prior test's plain fit)."""
    fit_laplace(START, *toy_data(n=30, seed=7))
    traced = len(TRACES)
    fit_laplace(se(2.0, 0.5), *toy_data(n=30, seed=8))
    assert len(TRACES) == traced
    with pytest.raises(Exception, match=r"variance must be finite and >= 0"):
        fit_laplace(se(-1.0, 1.0), *toy_data(n=30, seed=8))
    # a valid kernel, but log 0 is not a start: the error names the parameter and the remedy (under gpc.jit the
    # static text, without the value: tests/test_errors.py checks the value for a direct call)
    with pytest.raises(Exception, match=r"fit: kernel.variance must be > 0 to be fitted in log space; start from a "
                       r"value > 0, e.g. 1.0, or hold it fixed with trainable"):
        fit_laplace(se(0.0, 1.0), *toy_data(n=30, seed=8))
    with pytest.raises(Exception, match=r"the starting kernel.variance lies outside bounds=\(1e-08, 100000000.0\); "
                       "start inside the bounds or widen them"):
        fit_laplace(se(1e9, 1.0), *toy_data(n=30, seed=8))
    X, _ = toy_data(n=30, seed=8)
    for labels in [np.ones(30), np.zeros(30)]:  # {0, 1} coding: all zeros is all -1
        with pytest.raises(Exception, match="one class"):
            fit_laplace(START, X, labels)
    assert len(TRACES) == traced


def test_one_class_check_for_multi_class_labels():
    from gpclass._validation import check_two_classes

    check = gpc.jit(check_two_classes)
    one_hot = np.eye(3)[np.array([0, 2, 2, 0])]
    np.testing.assert_array_equal(check(one_hot), one_hot)  # two of three classes: fine
    with pytest.raises(Exception, match="one class"):
        check(np.eye(3)[np.array([1, 1, 1, 1])])


def test_status_names_messages_and_throw():
    from gpclass._status import raise_unless_successful

    assert [s.name for s in gpc.Status] == ["CONVERGED", "AT_BOUND", "STALLED", "MAX_STEPS", "FAILED", "IMPRECISE",
                                            "COMPLETED"]
    assert all(s.message for s in gpc.Status)
    assert "bound" in gpc.Status.AT_BOUND.message and "line search" in gpc.Status.STALLED.message
    from gpclass._status import successful

    np.testing.assert_array_equal(successful(np.arange(7)), [True, True, False, False, False, False, True])
    throw = gpc.jit(lambda x, status: raise_unless_successful(x, status, "fit"))
    assert float(throw(1.0, gpc.Status.AT_BOUND)) == 1.0
    with pytest.raises(Exception, match=r"fit did not converge \(STALLED\): stalled"):
        throw(1.0, gpc.Status.STALLED)


def test_gamma_log_density_matches_scipy():
    from scipy import stats

    x = np.array([0.3, 1.7])
    expected = np.sum(stats.gamma.logpdf(x, a=2.5, scale=1 / 1.5))
    assert float(gpc.priors.log_gamma(x, 2.5, 1.5)) == pytest.approx(expected, rel=1e-12)


def test_label_flip_rate_is_fitted_in_logit_space():
    """epsilon < 1/2 is mapped to logit(2 epsilon), the kernel's parameters to logs; out-of-range values raise."""
    from gpclass._fit import parameter_transforms

    tree = (START, gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), epsilon=0.2))
    params, _ = eqx.partition(tree, eqx.is_inexact_array)
    to_free, from_free = parameter_transforms(params, tree)
    free = to_free(params)
    assert float(free[1].epsilon) == pytest.approx(np.log(0.4 / 0.6))
    assert float(free[0].variance) == pytest.approx(0.0)
    back = from_free(jax.tree.map(lambda x: x + 50.0, free))  # far out in free space: still inside (0, 1/2)
    assert 0.0 < float(back[1].epsilon) <= 0.5 and float(back[0].variance) > 1e20
    for leaf, want in zip(jax.tree.leaves(from_free(free)), jax.tree.leaves(params)):
        assert float(leaf) == pytest.approx(float(want), rel=1e-12)
    with pytest.raises(gpc.GPClassError, match="label-flip rate"):  # refused at construction ...
        gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), epsilon=0.6)
    # ... and by the transform, for a value that reaches it as a traced value would (not through the constructor)
    bad = (START, eqx.tree_at(lambda lik: lik.epsilon, tree[1], jnp.asarray(0.6)))
    bad_params, _ = eqx.partition(bad, eqx.is_inexact_array)
    with pytest.raises(Exception, match=r"likelihood.epsilon must be in \(0, 0.5\) to be fitted as the log-odds"):
        parameter_transforms(bad_params, bad)[0](bad_params)


def test_a_shared_array_gets_the_transform_of_each_parameter():
    """One array object passed as the kernel variance and as the flip rate: bounds go by position, not identity."""
    from gpclass._fit import parameter_transforms

    shared = jnp.asarray(0.2)
    kernel = gpc.kernels.SquaredExponential(shared, as_float64(1.0))
    tree = (kernel, gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), shared))
    assert tree[0].variance is tree[1].epsilon
    params, _ = eqx.partition(tree, eqx.is_inexact_array)
    to_free, from_free = parameter_transforms(params, tree)
    free = to_free(params)
    assert float(free[0].variance) == pytest.approx(np.log(0.2))  # log, as any kernel parameter
    assert float(free[1].epsilon) == pytest.approx(np.log(0.4 / 0.6))  # logit(2 epsilon)
    back = from_free(jax.tree.map(lambda x: x + 5.0, free))
    assert float(back[0].variance) == pytest.approx(0.2 * np.exp(5.0)) and 0.0 < float(back[1].epsilon) < 0.5


# --------------------------------------------------------------- per-parameter bounds and fixed parameters


def fixed_variance_spec(kernel):
    """trainable: the kernel's variance fixed, everything else fitted (the likelihood has no parameters)."""
    return eqx.tree_at(lambda k: k.variance, jax.tree.map(lambda _: True, kernel), False), False


@pytest.mark.slow
def test_per_parameter_bounds_and_fixed_parameters_match_scikit_learn():
    """``trainable`` holds the variance exactly at its value; per-parameter bounds (one per ARD length scale,
    traced) bind where they should: the second length scale, whose input matters little, sits exactly on its
    upper bound 3 (the status says AT_BOUND), the first is stationary.  scikit-learn with the same settings
    (ConstantKernel fixed, per-element length_scale_bounds) is the truth: the same optimum (log q to 1e-8
    relative), its gradient in theta zero in the free coordinate and pointing out of the box at the bound.
    Invalid traced bounds raise from the same program.
    """
    X, y = toy_data(n=30, seed=7)
    start = se(2.0, np.array([1.0, 2.0]))
    lower = (se(1.0, np.array([1e-2, 1e-2])), 1e-8)  # the variance's bounds are ignored: it is fixed
    upper = (se(1.0, np.array([1e2, 3.0])), 1e8)
    result = gpc.fit(gpc.Laplace(), start, LOGISTIC, X, y, bounds=(lower, upper), trainable=fixed_variance_spec(start))
    assert int(result.status) == gpc.Status.AT_BOUND and float(result.grad_norm) <= 1e-5
    assert float(result.kernel.variance) == 2.0  # exactly
    lengthscale = np.asarray(result.kernel.lengthscale)
    assert lengthscale[1] == pytest.approx(3.0, rel=1e-14)
    sk_kernel = ConstantKernel(2.0, "fixed") * RBF([1.0, 2.0], [[1e-2, 1e2], [1e-2, 3.0]])
    sk = GaussianProcessClassifier(sk_kernel).fit(X, y)
    assert float(result.objective) == pytest.approx(sk.log_marginal_likelihood_value_, rel=1e-8)
    np.testing.assert_allclose(np.log(lengthscale), sk.kernel_.theta, atol=1e-3)
    value, grad = sk.log_marginal_likelihood(np.log(lengthscale), eval_gradient=True)
    assert float(result.objective) == pytest.approx(value, rel=1e-12)
    assert abs(grad[0]) <= 1e-4 and grad[1] > 1e-3  # at the upper bound the objective rises outwards
    # Array bounds are traced: other values reuse the program (the numbers, 1e-8 and 1e8, are static), and
    # invalid ones raise from it.
    swapped = ((upper[0], 1e-8), (lower[0], 1e8))
    with pytest.raises(gpc.GPClassError, match=r"0 < lower < upper < inf, parameter by parameter\.$"):
        gpc.fit(gpc.Laplace(), start, LOGISTIC, X, y, bounds=swapped, trainable=fixed_variance_spec(start))


def test_bounds_and_trainable_are_validated():
    X, y = toy_data(n=30, seed=7)
    start = se(2.0, np.array([1.0, 2.0]))
    spec = fixed_variance_spec(start)

    def fit(**options):
        return gpc.fit(gpc.Laplace(), start, LOGISTIC, X, y, **options)

    with pytest.raises(gpc.GPClassError, match=r"trainable must hold True or False.*array of dtype float64"):
        fit(trainable=(se(0.0, 1.0), False))  # a kernel's constructor made floats of the booleans
    with pytest.raises(gpc.GPClassError, match=r"trainable must be True, False or a pytree"):
        fit(trainable=(True, False, True))
    with pytest.raises(gpc.GPClassError, match=r"no floating-point parameters to fit \(trainable fixes every one\); "
                       r"to evaluate at fixed hyperparameters call gpc.infer\(method, kernel, likelihood, X, y\)"):
        fit(trainable=False)
    with pytest.raises(gpc.GPClassError, match=r"the lower bounds must be a number or a pytree"):
        fit(bounds=((1e-3, 1e-3, 1e-3), 1e3))
    with pytest.raises(gpc.GPClassError, match=r"shape \(2,\) has bounds of shapes \(3,\) and \(\)"):
        fit(bounds=((se(1e-3, np.full(3, 1e-3)), 1e-8), 1e3))
    with pytest.raises(gpc.GPClassError, match=r"0 < lower < upper < inf, parameter by parameter; got bounds="):
        fit(bounds=((0.5, 1e-8), (0.4, 1e8)), trainable=spec)  # numbers per subtree: checked before tracing
    with pytest.raises(gpc.GPClassError, match=r"bounds must be None or a pair"):
        fit(bounds=(1e-3, 1.0, 1e3))
