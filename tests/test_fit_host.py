"""gpc.fit called from Python steps its L-BFGS on the host (``_fit._fit_on_host``) between calls of the compiled
objective; under a transformation the same steps run inside one program (``_fit._fit_program``).  The two must be
one algorithm: the same trial points, steps, stop reasons and optimum.  The L-BFGS recursion (``_box_lbfgs``)
written for both NumPy and traced arrays is checked against optax's ``scale_by_lbfgs``, whose conventions it
follows.
"""

import warnings

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import FAST_COMPILE, as_float64, toy_data

import gpclass as gpc
from gpclass._box_lbfgs import lbfgs_init, lbfgs_update

LOGISTIC = gpc.likelihoods.Logistic()
FIT_OPTIONS = ("max_steps", "bounds", "log_prior", "throw", "trainable")
in_program = gpc.jit(gpc.fit, static_argnames=FIT_OPTIONS, compiler_options=FAST_COMPILE)


def se(variance, lengthscale):
    return gpc.kernels.SquaredExponential(as_float64(variance), as_float64(lengthscale))


def assert_same_fit(host, program, rtol=1e-9):
    assert int(host.status) == int(program.status)
    assert int(host.num_steps) == int(program.num_steps)
    np.testing.assert_allclose(float(host.objective), float(program.objective), rtol=rtol)
    steps = int(host.num_steps)
    np.testing.assert_allclose(np.asarray(host.history)[:steps], np.asarray(program.history)[:steps], rtol=rtol)
    assert np.all(np.isnan(np.asarray(host.history)[steps:]))
    for a, b in zip(jax.tree.leaves((host.kernel, host.likelihood)), jax.tree.leaves((program.kernel,
                                                                                      program.likelihood))):
        np.testing.assert_allclose(np.log(np.asarray(a)), np.log(np.asarray(b)), atol=1e-7)
    np.testing.assert_allclose(np.asarray(host.posterior.mean), np.asarray(program.posterior.mean), atol=1e-7)
    assert isinstance(host.objective, jax.Array) and isinstance(host.status, jax.Array)


def test_host_steps_equal_the_compiled_loop():
    """Laplace to convergence, an ARD fit held at a bound (AT_BOUND) with a fixed variance, and the step limit."""
    X, y = toy_data(n=30, seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the host's NumPy arithmetic on infeasible trials raises no warnings
        host = gpc.fit(gpc.Laplace(), se(1.0, 1.0), gpc.likelihoods.Logistic(), X, y)
    assert int(host.status) == gpc.Status.CONVERGED
    assert_same_fit(host, in_program(gpc.Laplace(), se(1.0, 1.0), gpc.likelihoods.Logistic(), X, y))

    ard = se(1.0, [1.0, 1.0])
    fixed_variance = eqx.tree_at(lambda t: t[0].variance, jax.tree.map(lambda _: True, (ard, LOGISTIC)), False)
    options = dict(bounds=(1e-3, 1.5), trainable=fixed_variance)  # length scales stop at 1.5
    host = gpc.fit(gpc.Laplace(), ard, gpc.likelihoods.Logistic(), X, y, **options)
    assert int(host.status) == gpc.Status.AT_BOUND and float(host.kernel.variance) == 1.0
    assert_same_fit(host, in_program(gpc.Laplace(), ard, gpc.likelihoods.Logistic(), X, y, **options))

    host = gpc.fit(gpc.Laplace(), se(1.0, 1.0), gpc.likelihoods.Logistic(), X, y, max_steps=2, throw=False)
    assert int(host.status) == gpc.Status.MAX_STEPS and int(host.num_steps) == 2
    assert_same_fit(host, in_program(gpc.Laplace(), se(1.0, 1.0), gpc.likelihoods.Logistic(), X, y, max_steps=2,
                                     throw=False))
    with pytest.raises(gpc.GPClassError, match=r"fit did not converge \(MAX_STEPS\)"):
        gpc.fit(gpc.Laplace(), se(1.0, 1.0), gpc.likelihoods.Logistic(), X, y, max_steps=2)


def test_float32_host_steps_reach_the_compiled_loops_optimum():
    """In float32 NumPy and XLA may round the optimiser's arithmetic differently (a fused multiply-add), and the
    objective's rounding then steers the line searches apart: the same optimum to float32's precision."""
    X, y = toy_data(n=30, seed=3)
    X, y = X.astype(np.float32), y.astype(np.float32)
    start = gpc.kernels.SquaredExponential(np.float32(1.0), np.float32(1.0))
    host = gpc.fit(gpc.Laplace(), start, LOGISTIC, X, y)
    program = in_program(gpc.Laplace(), start, LOGISTIC, X, y)
    assert host.objective.dtype == jnp.float32 and int(host.status) == int(program.status) == gpc.Status.CONVERGED
    np.testing.assert_allclose(float(host.objective), float(program.objective), rtol=1e-5)
    np.testing.assert_allclose(np.log([host.kernel.variance, host.kernel.lengthscale]),
                               np.log([program.kernel.variance, program.kernel.lengthscale]), atol=2e-2)
    # float64 hyperparameters on float32 data: the tolerances are the data's dtype's on both drivers (gtol 1e-2)
    host = gpc.fit(gpc.Laplace(), se(1.0, 1.0), LOGISTIC, X, y)
    program = in_program(gpc.Laplace(), se(1.0, 1.0), LOGISTIC, X, y)
    assert int(host.num_steps) == int(program.num_steps) and 1e-5 < float(host.grad_norm) <= 1e-2


def test_host_steps_carry_each_methods_warm_start():
    """EP's warm start (its sites) rather than Laplace's (a): the host loop passes it back as the program does."""
    X, y = toy_data(n=25, seed=5)
    host = gpc.fit(gpc.EP(), se(1.0, 1.0), gpc.likelihoods.Probit(), X, y)
    assert_same_fit(host, in_program(gpc.EP(), se(1.0, 1.0), gpc.likelihoods.Probit(), X, y), rtol=1e-8)


@pytest.mark.parametrize("xp", [np, jnp])
def test_lbfgs_recursion_equals_optax(xp):
    """Directions and memory along 14 random steps (more than the memory of 5 holds), with a zero first gradient
    difference, against optax.scale_by_lbfgs on the same (point, gradient) sequence."""
    rng = np.random.default_rng(0)
    optax_lbfgs = optax.scale_by_lbfgs(memory_size=5)
    update = jax.jit(optax_lbfgs.update)
    z = rng.normal(size=4)
    ours, theirs = lbfgs_init(xp.asarray(z), 5), optax_lbfgs.init(jnp.asarray(z))
    A = rng.normal(size=(4, 4))
    A = A @ A.T + np.eye(4)  # a convex quadratic's gradients: positive curvature pairs
    ours_update = jax.jit(lbfgs_update) if xp is jnp else lbfgs_update  # traced: one program, not op by op
    for step in range(14):
        g = A @ z if step != 1 else np.asarray(theirs.updates)  # step 1: the same gradient again (s^T y = 0)
        d, ours = ours_update(xp.asarray(g), ours, xp.asarray(z))
        expected, theirs = update(jnp.asarray(g), theirs, jnp.asarray(z))
        np.testing.assert_allclose(np.asarray(d), np.asarray(expected), rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(np.asarray(ours.weights), np.asarray(theirs.weights_memory), rtol=1e-12)
        assert int(ours.count) == int(theirs.count)
        z = z - 0.3 * np.asarray(d) + 0.01 * rng.normal(size=4)


@pytest.mark.parametrize("case", ["logistic", "masked", "sparse", "ordinal", "softmax", "preference"])
def test_laplaces_declared_warm_start_is_what_it_returns(case):
    """Laplace.warm_start_shape (the host fit's first start, without tracing the solve) against the warm start
    its solve returns, traced: every likelihood kind and prior."""
    from gpclass._inference._infer import apply_mask, prior_covariance
    from gpclass._validation import Checks

    X, y = toy_data(n=12, seed=1)
    kernel, likelihood, mask = se(1.0, 1.0), LOGISTIC, None
    if case == "masked":
        mask = np.arange(12) < 9
    elif case == "sparse":
        kernel = gpc.Sparse(kernel, X[:4])
    elif case == "ordinal":
        likelihood, y = gpc.likelihoods.Ordinal(3, np.array([-0.5, 0.5])), np.arange(12) % 3
    elif case == "softmax":
        likelihood, y = gpc.likelihoods.Softmax(3), np.arange(12) % 3
    elif case == "preference":
        likelihood, y = gpc.likelihoods.Preference(0.5), np.array([[0, 1], [2, 1], [3, 0], [5, 4]])
    method = gpc.Laplace()
    labels, solve_likelihood = apply_mask(method, likelihood, likelihood.check_labels(y, 12, X.dtype), mask,
                                          Checks(), None)
    op = prior_covariance(kernel, likelihood, jnp.asarray(X), labels)
    sites = likelihood.site_labels(labels, X.dtype)
    declared = method.warm_start_shape(op, solve_likelihood, sites)
    traced = jax.eval_shape(lambda: method.solve(op, solve_likelihood, sites).warm_start)
    assert jax.tree.structure(declared) == jax.tree.structure(traced)
    assert [(s.shape, s.dtype) for s in jax.tree.leaves(declared)] == [(s.shape, s.dtype) for s in
                                                                        jax.tree.leaves(traced)]


def test_above_the_host_loops_size_the_fit_is_one_program(monkeypatch):
    """The host loop only where compilation dominates (at most _HOST_LOOP_MAX_CASES cases); the limit lowered to
    29 here, a fit of 30 cases runs as one program, to the host loop's optimum."""
    import gpclass._fit as fit_module

    X, y = toy_data(n=30, seed=3)
    host = gpc.fit(gpc.Laplace(), se(1.0, 1.0), LOGISTIC, X, y)
    monkeypatch.setattr(fit_module, "_HOST_LOOP_MAX_CASES", 29)
    monkeypatch.setattr(fit_module, "_fit_on_host", lambda *args: pytest.fail("the host loop ran"))
    program = gpc.fit(gpc.Laplace(), se(1.0, 1.0), LOGISTIC, X, y)
    assert_same_fit(host, program)
