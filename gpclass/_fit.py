"""Type-II maximum likelihood (ML-II): fit hyperparameters with optax.

Every floating-point array in the kernel and likelihood is a hyperparameter,
optimised in an unconstrained space: log theta for the positive parameters,
logit(theta / u) for a parameter with an upper bound u (a module declares
these in its ``upper_bounds``, e.g. a label-flip rate epsilon < 1/2).  The
objective is the method's approximate log marginal likelihood, optionally plus
a log hyperprior, and its gradient comes from ``jax.grad`` through the
converged inner solution.

Two drivers, one algorithm.  Under a transformation (``jax.jit``,
``jax.vmap``, ``gpc.jit``), with an optax optimiser, or on more than 512
cases, the optimiser runs inside one ``lax.while_loop`` (``_iterate.run``):
the whole fit is one compiled program.  Called from Python with the default L-BFGS on
at most 512 cases, where compilation dominates, only the objective and its
gradient are compiled (``_fit_evaluation``) and the same step logic
(``_fit_steps.AscentSteps``, ``_box_lbfgs``, written for traced and NumPy arrays alike)
runs in NumPy between its calls: XLA compiles about half as much, which is
most of a first fit's time, and that program is compiled for compile speed
(LLVM optimisation level 0 on the CPU; ``benchmarks/first_fit.py``).
Both drivers take the same trial points (``tests/test_fit_host.py``, both
compiled at one level; at different levels the objective's last digits may
differ, 1e-14 relative in float64); in float32, where NumPy and XLA may round
the step arithmetic differently and the objective's rounding steers the line
search, they reach the same optimum to float32's precision, in possibly
different numbers of steps.

Bounds.  Each free coordinate z (log theta, or the log-odds
log(theta / (u - theta)) of an upper-bounded parameter) is kept in a box
[log lower, log upper].  Without one, ML-II can run off along a flat direction
where the objective keeps creeping up: the length scale of an irrelevant
input, or EP's ridge in the signal variance on separable data (log q within
0.1 nat over log sigma_f = 8..12 in the Kuss & Rasmussen benchmark).  A
coordinate at a bound whose gradient points out of the box is *active*: held
fixed, its gradient component zeroed (the projected gradient).  The default
optimiser is L-BFGS made box-aware in the manner of L-BFGS-B without its
Cauchy point, with a strong-Wolfe zoom line search (``_box_lbfgs.py``); any
other optax optimiser steps to the projection of its update (active
coordinates frozen, the others clipped).  The gradient test is on the
projected gradient; a fit that meets it with a coordinate at a bound says so
(``Status.AT_BOUND``).

One evaluation per iteration.  Each pass of the loop evaluates the objective
and its gradient at one trial point (a line-search trial, or the next point of
a first-order optimiser) and then decides: the compiled program holds the
inner solver and its adjoint once.

Failures are values.  A trial point where the inner solver does not converge,
or where the objective or its gradient is not finite, is infeasible: objective
-inf with a zero gradient, so no NaN reaches the optimiser's memory.  A step
without progress (for L-BFGS: a line search that does not raise the objective,
whose point is then rejected) restarts the optimiser from the last point; a
second in a row ends the fit as ``STALLED``.  Why the fit stopped is the integer
``FitResult.status``, a :class:`gpclass.Status`.
"""

import inspect
from collections.abc import Callable

import equinox as eqx
import jax
import jax.flatten_util
import jax.numpy as jnp
import numpy as np
import optax

from . import _box as box
from ._box_lbfgs import BoxLBFGS
from ._errors import entry_point, refuse_non_numeric
from ._exceptions import GPClassError
from ._fit_parameters import check_start_in_box, coordinate_box, parameter_transforms, trainable_spec
from ._fit_steps import RUNNING, AscentSteps, FitState, OptaxSteps
from ._inference import AbstractInference, GaussianPosterior, SoftmaxPosterior
from ._inference._infer import apply_mask, prior_covariance, solve
from ._iterate import AbstractIterativeSolver, run, tolerance
from ._jax_compat import top_level
from ._progress import Progress, as_progress, every_for
from ._status import Status, raise_unless_successful, successful, unsuccessful_message
from ._types import Array, Float, Int
from ._validation import Checks, check_inputs, check_two_classes, require_optimizer, require_setting
from .kernels import AbstractKernel
from .likelihoods import AbstractLikelihood


class FitResult(eqx.Module):
    """The fitted kernel and likelihood, the posterior there, and the optimisation record.

    ``history[i]`` is the objective (log marginal likelihood plus log prior)
    after step i + 1 (a rejected step repeats the previous value); entries
    past ``num_steps`` are NaN (steps not taken).  ``grad_norm`` is the
    largest component of the projected gradient with respect to the free
    coordinates (log hyperparameters; components at a bound that point out of
    the box count as zero).  ``status`` is a :class:`gpclass.Status` code (an
    integer array, so it survives ``jit`` and ``vmap``); ``converged`` is
    ``status`` in {CONVERGED, AT_BOUND}.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> result = gpc.fit(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> bool(result.converged), gpc.Status(int(result.status)).name
        (True, 'CONVERGED')
        >>> start = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> bool(result.objective > start.log_marginal)  # log q rose from the starting hyperparameters
        True
        >>> steps = int(result.num_steps)  # history[i]: log q after step i + 1, NaN past num_steps
        >>> bool(result.history[steps - 1] == result.objective), bool(jnp.isnan(result.history[steps]))
        (True, True)
        >>> print(np.asarray(result.posterior.predict(X[:3])).round(1))  # the posterior at the fitted kernel
        [0.9 0.8 0.9]
    """

    kernel: AbstractKernel
    likelihood: AbstractLikelihood
    posterior: GaussianPosterior | SoftmaxPosterior
    objective: Float[Array, ""]
    history: Float[Array, " max_steps"]
    num_steps: Int[Array, ""]
    grad_norm: Float[Array, ""]
    status: Int[Array, ""]

    @property
    def converged(self):
        """The gradient test held at the end (inside the box or at a bound): ``status <= Status.AT_BOUND``."""
        return successful(self.status)


def fit(
    method: AbstractInference,
    kernel: AbstractKernel,
    likelihood: AbstractLikelihood,
    X,
    y,
    *,
    optimizer: optax.GradientTransformation | None = None,
    max_steps: int = 100,
    gtol: float | None = None,
    ftol: float | None = None,
    bounds: tuple | None = (1e-8, 1e8),
    trainable=None,
    log_prior: Callable[[AbstractKernel, AbstractLikelihood], Float[Array, ""]] | None = None,
    warm_start_inner: bool = True,
    throw: bool = True,
    key=None,
    mask=None,
    weights=None,
    progress: bool | Callable[[dict], None] | Progress | None = None,
    verbose: bool = False,
) -> FitResult:
    """Maximise log q(y|X, theta) [+ log p(theta)] over the log hyperparameters.

    Args:
        method: inference configuration, e.g. ``gpc.Laplace()``.
        kernel, likelihood: the starting point; every float array leaf is fitted.
        X, y: training data as for :func:`gpclass.infer`; labels of at least
            two classes (with one class ML-II has no finite maximiser).
        optimizer: any optax transformation; ``None`` means box-aware L-BFGS
            (optax's L-BFGS direction, skipping curvature pairs with
            s^T y <= 0) with a strong-Wolfe zoom line search, which needs no
            tuning.  First-order optimisers such as ``optax.adam(0.05)`` work
            too; one with its own line search (``optax.lbfgs()``) works but
            compiles the objective once per call site of its line search.
        max_steps: largest number of optimiser steps.
        gtol: converged when max |projected d objective / d z| <= gtol, z the
            free coordinates (log theta); ``None`` means 1e-5 in float64 and
            1e-2 in float32, where rounding in the inner solve limits how small
            the gradient can get.  The default L-BFGS has also converged when
            a line search along its direction finds no progress (``ftol``) and
            the direction's quadratic model predicts a gain of at most
            ftol * (1 + |objective|): the optimum as far as the objective's
            rounding resolves it (float32 fits end there with gradients a
            little above 1e-2); ``grad_norm`` then exceeds gtol.
        ftol: a step makes progress when it changes (L-BFGS: raises) the
            objective by more than ``ftol * (1 + |objective|)``; ``None`` means
            4 eps of the dtype (about the rounding level of a log marginal
            likelihood).  After a step without progress (L-BFGS: rejected) the
            optimiser restarts; a second in a row stops the fit
            (``Status.STALLED``).
        bounds: ``(lower, upper)``, each hyperparameter kept in
            [lower, upper] (log theta in [log lower, log upper]); for a
            parameter with an upper bound u, its odds theta / (u - theta) are.
            The default box [1e-8, 1e8] does not bind at the optima of our
            benchmarks (Laplace on crabs fits sigma_f^2 ~ 1e6) and stops the
            flat directions where the objective creeps up without a maximum;
            scikit-learn's default is (1e-5, 1e5).  ``None``: unbounded.  The
            starting values must lie in the box.  Per hyperparameter: each of
            ``lower`` and ``upper`` may also be a pytree with the structure of
            ``(kernel, likelihood)``, or a prefix of it, whose leaves hold the
            bound of each parameter (a number, or an array broadcastable to the
            parameter's shape: one bound per ARD length scale), e.g.
            ``lower = (SquaredExponential(variance=1e-5, lengthscale=[1e-2, 1e-3]), 1e-8)``
            (the likelihood's parameters, if any, >= 1e-8).  Every fitted
            parameter needs 0 < lower < upper < inf; the bounds of fixed
            parameters (``trainable``) and of unconstrained ones (inducing
            inputs) are ignored.  Array bounds are traced (new values do not
            compile a new program); a violated bound raises.
        trainable: which floating-point parameters ML-II fits (the others stay
            exactly at their starting values): ``None`` (all of them), or a
            pytree of ``True``/``False`` with the structure of
            ``(kernel, likelihood)`` or a prefix of it, as equinox's
            ``filter_spec``: ``(True, False)`` fits the kernel alone, and
            ``eqx.tree_at(lambda t: t[0].variance, jax.tree.map(lambda _: True,
            (kernel, likelihood)), False)`` holds the variance fixed (a kernel's
            constructor would turn booleans into floats).  A whole parameter is
            fitted or fixed (not single entries of an ARD vector); the flags are
            static (Python booleans).
        log_prior: optional ``log_prior(kernel, likelihood) -> scalar``, e.g.
            built from :func:`gpclass.priors.log_gamma`; a hyperprior also
            gives a flat direction a finite maximum.
        warm_start_inner: start each inner solve from the previous step's solution
            (passed explicitly through the loop state).
        throw: raise (``eqx.error_if``, inside jit and vmap too) with the
            :class:`Status` message unless the fit converged (``CONVERGED`` or
            ``AT_BOUND``), as :func:`gpclass.infer` does; ``False`` returns
            the result with its status in ``FitResult.status`` (under
            ``vmap``, where one problem's failure would stop the batch, and
            wherever the caller handles the status itself).
        mask: optional booleans (n,), ``False`` for left-out cases (padding of
            ragged data sets under ``vmap``), as in :func:`gpclass.infer`.
        weights: optional case weights (n,), finite and >= 0, as in
            :func:`gpclass.infer` (the power likelihood p(y_i|f_i)^{w_i}); cases of
            weight 0 count as left out for the two-class check.
        key: PRNG key for methods with randomness (the same key every step,
            so the objective stays a deterministic function of theta).
        progress: ``None`` (silent, the default), ``True`` (a line on stderr
            per step, at most one every 0.5 s, the start and the last always),
            a callable ``progress(info)`` called on the host after every step
            with ``info`` a dict: ``task`` ("fit"), ``step`` (0 for the
            start, then 1, 2, ...: ``info["objective"]`` at step i is
            ``history[i - 1]``), ``objective``, ``grad_norm`` (max |projected
            gradient|), ``improved`` (whether the step made progress),
            ``status`` (the :class:`gpclass.Status` code once ``done``, else
            -1), ``done``, ``num_steps`` (``max_steps``); or
            ``gpc.Progress(fn, every=k, seconds=s)`` to thin the reports.
            From the host loop (below) the reports come from Python;
            otherwise through a host callback (``jax.debug.callback``; under
            ``vmap`` once per problem), and the program is then not stored by
            JAX's persistent cache.  See ``gpclass._progress``.
        verbose: ``True`` is ``progress=True`` (kept for compatibility).

    Compiled with gpclass's XLA options (:func:`gpclass.jit`).  Called from
    Python with the default optimiser on at most 512 cases, where compilation
    dominates, ``fit`` compiles the objective and its gradient alone, for
    compile speed (on the CPU at LLVM optimisation level 0: about half the
    first fit's time, evaluations up to 2-3x slower), and takes the L-BFGS
    steps on the host, one compiled call per trial point (the module
    docstring); otherwise (more cases, ``jax.jit``, ``jax.vmap``,
    ``gpc.jit``, an optax ``optimizer``) the whole fit is one program.
    Either way non-array arguments (``optimizer``, ``log_prior``, ``bounds``,
    tolerances) are static, so pass the same objects to reuse a compilation;
    the host loop's program is shared by every ``max_steps``, tolerance and
    ``progress`` setting.  For many fits of one small shape, compile the
    whole fit once (``gpc.jit(gpc.fit, static_argnames=...)``, or
    ``jax.vmap`` them): each then runs optimised, without the host's round
    trips (about half the host loop's time per later fit).

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> result = gpc.fit(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> bool(result.converged), round(float(result.objective), 1)  # the maximised log q(y|X, theta)
        (True, -18.6)
        >>> result.kernel  # the fitted hyperparameters
        SquaredExponential(variance=..., lengthscale=...)
        >>> print(np.asarray(gpc.predict(result.posterior, X[:3])).round(1))
        [0.9 0.8 0.9]
    """
    method.check_ml2()
    require_setting("fit", "max_steps", max_steps, low=1, low_open=False, integer=True)
    require_setting("fit", "gtol", gtol, optional=True)
    require_setting("fit", "ftol", ftol, optional=True)
    progress = as_progress(True if verbose and progress is None else progress)
    require_optimizer("fit", optimizer, default="box-aware L-BFGS")
    data = dict(X=X, y=y, key=key, mask=mask, weights=weights)
    refuse_non_numeric("fit", _SIGNATURE, (method, kernel, likelihood), data)
    settings = dict(bounds=bounds, trainable=trainable, log_prior=log_prior, warm_start_inner=warm_start_inner)
    if optimizer is None and top_level() and (np.shape(X) or (0,))[0] <= _HOST_LOOP_MAX_CASES:
        return _fit_on_host(method, kernel, likelihood, data, settings, max_steps, gtol, ftol, throw, progress)
    return _fit_program(method, kernel, likelihood, optimizer=optimizer, max_steps=max_steps, gtol=gtol, ftol=ftol,
                        throw=throw, progress=progress, **data, **settings)


# The host loop where compilation dominates a fit.  It compiles less than half as much as the whole loop (and at
# LLVM level 0), but each trial point is then a call of a less optimised program (a round trip, and on Linux's
# allocator the n x n temporaries allocated afresh): at n = 1000 the first fit gained nothing (at level 1) and every
# later fit of that shape was slower, at n = 300 the first fit gains 1.5 s for 170 ms per later fit, at 512 1.3 s
# for 270 ms (benchmarks/README.md, ``first_fit.py --drivers``).
_HOST_LOOP_MAX_CASES = 512


def _ascent(method, kernel, likelihood, X, y, *, key, mask, weights, bounds, trainable, log_prior, warm_start_inner,
            optimizer, max_steps, gtol, ftol, progress) -> "MarginalLikelihoodAscent":
    """fit's problem, checked (inside the program: the checks ride on X, y and the start) and set up."""
    checks = Checks()
    X = check_inputs(X, checks=checks)
    kernel.parameter_checks(checks)
    likelihood.parameter_checks(checks)
    y, solve_likelihood = apply_mask(method, likelihood, likelihood.check_labels(y, X.shape[0], X.dtype, checks),
                                     mask, checks, weights)
    wrapper = None if solve_likelihood is likelihood else type(solve_likelihood)
    y = check_two_classes(y, checks, likelihood.one_class(y))
    dtype = X.dtype
    gtol, ftol = _tolerances(gtol, ftol, dtype)
    spec = trainable_spec((kernel, likelihood), trainable)
    params, static = eqx.partition((kernel, likelihood), spec)  # fixed parameters go with the static part
    if not jax.tree.leaves(params):
        raise GPClassError(
            "fit: the kernel and likelihood have no floating-point parameters to fit"
            + (" (trainable fixes every one)" if trainable is not None else "")
            + "; to evaluate at fixed hyperparameters call gpc.infer(method, kernel, likelihood, X, y)."
        )
    kernel.check_inputs(X)
    to_free, from_free = parameter_transforms(params, (kernel, likelihood))
    # The free coordinates as one vector: the optimiser's arithmetic is then a few vector operations.
    z0, unravel = jax.flatten_util.ravel_pytree(to_free(params, checks))
    lo, hi = coordinate_box(params, (kernel, likelihood), spec, bounds, z0.dtype, checks)
    check_start_in_box(params, z0, lo, hi, bounds, checks)
    if log_prior is not None:
        _check_log_prior(log_prior(kernel, likelihood), checks)
    X, y, z0 = checks.attach((X, y, box.snap(z0, lo, hi)))

    strategy = BoxLBFGS(lo, hi) if optimizer is None else OptaxSteps(optimizer, lo, hi)
    every = None if progress is None else every_for(progress, max_steps)
    steps = AscentSteps(strategy, lo, hi, gtol, ftol, max_steps, progress, every)
    return MarginalLikelihoodAscent(method, static, from_free, unravel, X, y, wrapper, key, log_prior,
                                    warm_start_inner, z0, steps)


def _tolerances(gtol, ftol, dtype) -> tuple[float, float]:
    """fit's gtol and ftol for data of ``dtype`` (its docstring's defaults where None)."""
    return tolerance(gtol, dtype, 1e-5, 1e-2), 4 * float(jnp.finfo(dtype).eps) if ftol is None else ftol


@entry_point
def _fit_program(method, kernel, likelihood, X, y, *, optimizer, max_steps, gtol, ftol, bounds, trainable, log_prior,
                 warm_start_inner, throw, key, mask, weights, progress) -> FitResult:
    """The whole fit as one program (:func:`gpclass._iterate.run`): under a transformation (jit, vmap, grad) and
    for an optax ``optimizer``."""
    result = run(_ascent(method, kernel, likelihood, X, y, key=key, mask=mask, weights=weights, bounds=bounds,
                         trainable=trainable, log_prior=log_prior, warm_start_inner=warm_start_inner,
                         optimizer=optimizer, max_steps=max_steps, gtol=gtol, ftol=ftol, progress=progress))
    return raise_unless_successful(result, result.status, "fit") if throw else result


@eqx.filter_jit  # only traced (by eval_shape), and only once per problem structure: JAX caches the trace
def _start_shapes(method, kernel, likelihood, data, settings):
    """The free coordinates, the method's warm start (zero) and the checked inputs: their shapes and dtypes for
    the host loop."""
    ascent = _ascent(method, kernel, likelihood, **data, **settings, optimizer=None, max_steps=1, gtol=None,
                     ftol=None, progress=None)
    return ascent.z0, ascent.zero_start(), ascent.X


@entry_point(fast_codegen=True)
def _fit_evaluation(method, kernel, likelihood, X, y, z, init, first, *, key, mask, weights, bounds, trainable,
                    log_prior, warm_start_inner):
    """The host loop's program: the point evaluated (z, or the checked start where ``first``), -objective, its
    gradient and the method's solution there, with the kernel and likelihood there; the free coordinates' box
    and the checked data.  Every check of the problem runs at every call (each costs O(n d) at most).

    Compiled at LLVM optimisation level 0 on the CPU (``fast_codegen``): the host loop serves fits whose
    compilation dominates, and this halves it (Ionosphere's 138 cases: 0.8 -> 0.35 s) for evaluations up to
    2-3x slower (1.5 -> 4.3 ms there), which a fit of 10-30 evaluations recovers many times over; a later fit
    of the same shape pays only the slower evaluations (benchmarks/README.md, ``first_fit.py --drivers``)."""
    ascent = _ascent(method, kernel, likelihood, X, y, key=key, mask=mask, weights=weights, bounds=bounds,
                     trainable=trainable, log_prior=log_prior, warm_start_inner=warm_start_inner, optimizer=None,
                     max_steps=1, gtol=None, ftol=None, progress=None)
    z = jnp.where(first, ascent.z0, z)
    value, grad, solution = ascent.evaluate(z, init)
    kernel, likelihood = ascent.build(z)
    lo, hi = (jnp.broadcast_to(jnp.asarray(b, z.dtype), z.shape) for b in (ascent.steps.lo, ascent.steps.hi))
    return z, value, grad, (solution, kernel, likelihood), lo, hi, ascent.X, ascent.y


def _fit_on_host(method, kernel, likelihood, data, settings, max_steps, gtol, ftol, throw, progress) -> FitResult:
    """fit from Python with the default L-BFGS: the objective compiled alone (``_fit_evaluation``, one program for
    every ``max_steps``, tolerance and progress setting), the optimiser's steps (``AscentSteps``, the same code as
    inside the program) in NumPy between its calls.  XLA then compiles about half as much as for the whole loop,
    which is most of a first fit's time.  The sizes of the free coordinates and of the first (zero) warm start
    come from tracing the set-up alone (``_start_shapes``)."""
    z_shape, warm_shape, X_shape = eqx.filter_eval_shape(_start_shapes, method, kernel, likelihood, data, settings)
    dtype = X_shape.dtype  # the tolerances are the data's dtype's, as in the program
    gtol, ftol = _tolerances(gtol, ftol, dtype)
    zeros = jax.tree.map(lambda leaf: np.zeros(leaf.shape, leaf.dtype), warm_shape)
    # The data go to the device once, not at every call (a copy of X per trial point).
    data = {name: jax.device_put(v) if isinstance(v, np.ndarray) else v for name, v in data.items()}

    def evaluate(z, init, first):
        z, value, grad, aux, lo, hi, X, y = _fit_evaluation(method, kernel, likelihood, z=z, init=init,
                                                            first=np.asarray(first), **data, **settings)
        return np.asarray(z), np.asarray(value), np.asarray(grad), aux, (np.asarray(lo), np.asarray(hi), X, y)

    with np.errstate(all="ignore"):  # as XLA's arithmetic: inf and NaN are values here (infeasible trial points)
        z0, value, grad, aux, (lo, hi, X, y) = evaluate(np.zeros(z_shape.shape, z_shape.dtype), zeros, True)
        every = None if progress is None else every_for(progress, max_steps)
        steps = AscentSteps(BoxLBFGS(lo, hi), lo, hi, gtol, ftol, max_steps, progress, every)
        state = steps.advance(steps.initial(z0, aux), z0, value, grad, aux)
        while int(state.code) == RUNNING:
            trial = steps.strategy.trial(state.z, state.search)
            warm = state.solution[0].warm_start
            _, value, grad, aux, _ = evaluate(trial, warm, False)
            state = steps.advance(state, trial, value, grad, aux)
        grad_norm, _ = steps.gradient_test(state.z, state.grad, state.value,
                                           box.active_set(state.z, state.grad, lo, hi))
    solution, kernel, likelihood = state.solution
    record = jax.device_put((np.asarray(-state.value), np.asarray(state.history), np.asarray(state.steps),
                             np.asarray(grad_norm), np.asarray(state.code, np.int32)))  # a copy, not a program
    result = FitResult(kernel, likelihood, likelihood.condition(solution, kernel, X, y), *record)
    if throw and not bool(successful(int(state.code))):
        raise GPClassError(unsuccessful_message(Status(int(state.code)), "fit"))
    return result


_SIGNATURE = inspect.signature(fit)


def _program_options(args, kwargs) -> dict:
    """fit's arguments with their defaults, as ``_fit_program`` takes them."""
    bound = _SIGNATURE.bind(*args, **kwargs)
    bound.apply_defaults()
    options = bound.arguments
    verbose = options.pop("verbose")
    options["progress"] = as_progress(True if verbose and options["progress"] is None else options["progress"])
    return options


def fit_in_one_program(*args, **kwargs) -> FitResult:
    """:func:`fit` compiled as one program whatever the call (the driver under a transformation): for many fits
    of one shape from Python, which then run without the host loop's round trips (the estimator's restarts)."""
    return _fit_program(**_program_options(args, kwargs))


fit.lower = lambda *args, **kwargs: _fit_program.lower(**_program_options(args, kwargs))


def _check_log_prior(value, checks) -> None:
    """The log prior at the start: a finite scalar (a NaN there used to be reported as the inner solver's failure)."""
    if jnp.shape(value) != ():
        raise GPClassError(f"fit: log_prior(kernel, likelihood) must return a scalar; it returned shape "
                           f"{jnp.shape(value)} (sum the terms, e.g. jnp.sum(...)).")
    checks.fail_if(~jnp.isfinite(value), "fit: log_prior(kernel, likelihood) is not finite at the starting "
                   "hyperparameters; start inside the prior's support (or check the prior's formula).")


class MarginalLikelihoodAscent(AbstractIterativeSolver):
    """:func:`fit`'s optimiser on :func:`gpclass._iterate.run`: each step of the loop is one evaluation of the
    objective and its gradient at a trial point (module docstring), then ``steps.advance``; the loop ends when
    ``code`` says why (the :class:`gpclass.Status`).  The result is the :class:`FitResult`."""

    method: AbstractInference
    static: object
    from_free: Callable
    unravel: Callable
    X: Array
    y: Array
    wrapper: type | None  # mask or weights: likelihoods._masked.Masked or _weighted.Weighted, which the labels are for
    key: Array | None
    log_prior: Callable | None
    warm_start_inner: bool
    z0: Array
    steps: AscentSteps
    max_steps = None  # the loop ends itself (``code``)

    def build(self, z):
        return eqx.combine(self.from_free(self.unravel(z)), self.static)

    def negative_objective(self, z, init):
        # Line searches probe extreme hyperparameters where the inner solver may fail: there the objective is
        # -inf (an infeasible point the line search backs off from), not an exception, and the solution's
        # status says so.  The loop carries the solution (the fields computed from K), not the posterior.
        kernel, likelihood = self.build(z)
        solve_likelihood = likelihood if self.wrapper is None else self.wrapper(likelihood)
        start = init if self.warm_start_inner else None
        op = prior_covariance(kernel, likelihood, self.X, self.y)
        solution = solve(self.method, op, solve_likelihood, likelihood.site_labels(self.y, self.X.dtype), start,
                         self.key)
        value = solution.log_marginal
        if self.log_prior is not None:
            value = value + self.log_prior(kernel, likelihood)
        return -value, solution

    def evaluate(self, z, init):
        """(-objective, gradient, solution); an infeasible point gives (inf, 0, solution)."""
        (value, solution), grad = jax.value_and_grad(self.negative_objective, has_aux=True)(z, init)
        ok = solution.info.converged & jnp.isfinite(value) & jnp.all(jnp.isfinite(grad))
        return jnp.where(ok, value, jnp.inf), jnp.where(ok, grad, 0.0), solution

    def line_objective(self, init):
        """-objective as a function for the line search: value and gradient masked like ``evaluate``'s."""

        @jax.custom_jvp
        def value(z):
            v, solution = self.negative_objective(z, init)
            return jnp.where(solution.info.converged & jnp.isfinite(v), v, jnp.inf)

        @value.defjvp
        def value_jvp(primals, tangents):
            v, grad, _ = self.evaluate(primals[0], init)
            return v, optax.tree.vdot(grad, tangents[0])

        return value

    def init(self) -> FitState:
        return self.steps.initial(self.z0, _zeros_like_output(self.negative_objective, self.z0, None)[1])

    def zero_start(self):
        """Zeros shaped as the method's warm start: the first inner solve's start, as every later one is warm
        (``method.warm_start_shape``: for Laplace without tracing the solve)."""
        kernel, likelihood = self.build(self.z0)
        op = prior_covariance(kernel, likelihood, self.X, self.y)
        shapes = self.method.warm_start_shape(op, likelihood if self.wrapper is None else self.wrapper(likelihood),
                                              likelihood.site_labels(self.y, self.X.dtype), self.key)
        return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)

    def step(self, s: FitState) -> FitState:
        """One evaluation of the objective (its only call site in the program), then the step logic."""
        trial = self.steps.strategy.trial(s.z, s.search)
        value, grad, solution = self.evaluate(trial, s.solution.warm_start)
        return self.steps.advance(s, trial, value, grad, solution, self.line_objective)

    def terminate(self, s: FitState):
        return s.code != RUNNING, jnp.asarray(False)

    def finite(self, s: FitState):
        return jnp.isfinite(s.value)

    def status(self, s: FitState, converged, num_steps):
        return s.code

    def postprocess(self, solution) -> FitResult:
        s = solution.state
        grad_norm, _ = self.steps.gradient_test(s.z, s.grad, s.value,
                                                box.active_set(s.z, s.grad, self.steps.lo, self.steps.hi))
        kernel, likelihood = self.build(s.z)
        return FitResult(
            kernel=kernel,
            likelihood=likelihood,
            posterior=likelihood.condition(s.solution, kernel, self.X, self.y),
            objective=-s.value,
            history=s.history,
            num_steps=s.steps,
            grad_norm=grad_norm,
            status=s.code,
        )


def _zeros_like_output(fn, *args):
    """Zeros of the structure, shapes and dtypes ``fn(*args)`` returns, without running it."""
    return jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), jax.eval_shape(fn, *args))
