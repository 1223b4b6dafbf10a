"""Type-II maximum likelihood (ML-II): fit hyperparameters with optax.

Every floating-point array in the kernel and likelihood is a hyperparameter,
optimised in an unconstrained space: log theta for the positive parameters,
logit(theta / u) for a parameter with an upper bound u (a module declares
these in its ``upper_bounds``, e.g. a label-flip rate epsilon < 1/2).  The
objective is the method's approximate log marginal likelihood, optionally plus
a log hyperprior, and its gradient comes from ``jax.grad`` through the
converged inner solution.  The optimiser runs inside ``lax.while_loop``, so
the whole fit is one jit-compiled call that also works under ``jax.vmap``.

Bounds.  Each free coordinate z (log theta, or the log-odds
log(theta / (u - theta)) of an upper-bounded parameter) is kept in a box
[log lower, log upper].  Without one, ML-II can run off along a flat direction
where the objective keeps creeping up: the length scale of an irrelevant
input, or EP's ridge in the signal variance on separable data (log q within
0.1 nat over log sigma_f = 8..12 in the Kuss & Rasmussen benchmark).  A
coordinate at a bound whose gradient points out of the box is *active*: held
fixed, its gradient component zeroed (the projected gradient).  The default
optimiser is L-BFGS made box-aware in the manner of L-BFGS-B without its
Cauchy point (``_bounded_lbfgs``): its direction is zeroed where it would
leave the box at a bound and shortened so that the full step stays inside, so
its zoom line search sees the objective itself and a coordinate lands on its
bound exactly.  Any other optax optimiser steps to the projection of its
update (active coordinates frozen, the others clipped).  The gradient test is
on the projected gradient; a fit that meets it with a coordinate at a bound
says so (``FitStatus.AT_BOUND``).

Failures are values.  A trial point where the inner solver does not converge,
or where the objective or its gradient is not finite, is infeasible: objective
-inf with a zero gradient, so no NaN reaches the optimiser's memory.  A step
without progress (for L-BFGS: one that does not raise the objective, which is
then rejected) restarts the optimiser from the last point; a second in a row
ends the fit as ``STALLED``.  Why the fit stopped is the integer
``FitResult.reason``, named by :class:`FitStatus`.
"""

import dataclasses
import enum
import math
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax import lax

from ._types import Array, Float, Int
from ._validation import check_inputs, check_two_classes
from .inference import AbstractInference, GaussianPosterior, SoftmaxPosterior
from .inference._infer import check_labels, solve_posterior
from .kernels import AbstractKernel
from .likelihoods import AbstractLikelihood


class FitStatus(enum.IntEnum):
    """Why :func:`fit` stopped: the values of ``FitResult.reason``.

    ``gpc.FitStatus(int(result.reason)).message`` explains a code;
    ``result.reason == gpc.FitStatus.AT_BOUND`` works on arrays too (jit, vmap).
    """

    CONVERGED = 0
    AT_BOUND = 1
    STALLED = 2
    MAX_STEPS = 3
    FAILED = 4

    @property
    def message(self) -> str:
        return _MESSAGES[self]


_MESSAGES = {
    FitStatus.CONVERGED: "converged: the largest gradient component (log hyperparameters) is at most gtol.",
    FitStatus.AT_BOUND: (
        "converged at a bound: the projected gradient is at most gtol and at least one hyperparameter sits at a "
        "bound of the box, typically because the objective still rises beyond it (a flat direction, such as the "
        "length scale of an irrelevant input, or an optimum outside the box: widen `bounds` or add a hyperprior "
        "if that matters)."
    ),
    FitStatus.STALLED: (
        "line search stalled: two steps in a row (the second from a restarted optimiser) could not change the "
        "objective by more than ftol * (1 + |objective|) and the gradient test still fails (rounding in the "
        "objective, or a neighbourhood where the inner solver fails, limits progress)."
    ),
    FitStatus.MAX_STEPS: "max_steps reached before the gradient test was met.",
    FitStatus.FAILED: (
        "failed at the start: the inner solver did not converge at the starting hyperparameters, or the "
        "objective or its gradient is not finite there."
    ),
}
_RUNNING = -1  # internal: the loop goes on


class FitResult(eqx.Module):
    """The fitted kernel and likelihood, the posterior there, and the optimisation record.

    ``history[i]`` is the objective (log marginal likelihood plus log prior)
    after step i + 1 (a rejected step repeats the previous value); entries
    past ``num_steps`` are NaN (steps not taken).  ``grad_norm`` is the
    largest component of the projected gradient with respect to the free
    coordinates (log hyperparameters; components at a bound that point out of
    the box count as zero).  ``reason`` is a :class:`FitStatus` code (an
    integer array, so it survives ``jit`` and ``vmap``); ``converged`` is
    ``reason`` in {CONVERGED, AT_BOUND}.
    """

    kernel: AbstractKernel
    likelihood: AbstractLikelihood
    posterior: GaussianPosterior | SoftmaxPosterior
    objective: Float[Array, ""]
    history: Float[Array, " max_steps"]
    num_steps: Int[Array, ""]
    grad_norm: Float[Array, ""]
    reason: Int[Array, ""]

    @property
    def converged(self):
        """The gradient test held at the end (inside the box or at a bound): ``reason <= FitStatus.AT_BOUND``."""
        return self.reason <= FitStatus.AT_BOUND


@eqx.filter_jit
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
    bounds: tuple[float, float] | None = (1e-8, 1e8),
    log_prior: Callable[[AbstractKernel, AbstractLikelihood], Float[Array, ""]] | None = None,
    warm_start: bool = True,
    throw: bool = False,
    key=None,
    verbose: bool = False,
) -> FitResult:
    """Maximise log q(y|X, theta) [+ log p(theta)] over the log hyperparameters.

    Args:
        method: inference configuration, e.g. ``gpc.Laplace()``.
        kernel, likelihood: the starting point; every float array leaf is fitted.
        X, y: training data as for :func:`gpclass.infer`; labels of at least
            two classes (with one class ML-II has no finite maximiser).
        optimizer: any optax transformation; ``None`` means L-BFGS with the
            zoom line search (``optax.lbfgs()`` made box-aware, skipping
            curvature pairs with s^T y <= 0), which needs no tuning.
            First-order optimisers such as ``optax.adam(0.05)`` work too.
        max_steps: largest number of optimiser steps.
        gtol: converged when max |projected d objective / d z| <= gtol, z the
            free coordinates (log theta); ``None`` means 1e-5 in float64 and
            1e-2 in float32, where rounding in the inner solve limits how small
            the gradient can get.
        ftol: a step makes progress when it changes (L-BFGS: raises) the
            objective by more than ``ftol * (1 + |objective|)``; ``None`` means
            4 eps of the dtype (about the rounding level of a log marginal
            likelihood).  After a step without progress (L-BFGS: rejected) the
            optimiser restarts; a second in a row stops the fit
            (``FitStatus.STALLED``).
        bounds: ``(lower, upper)``, each hyperparameter kept in
            [lower, upper] (log theta in [log lower, log upper]); for a
            parameter with an upper bound u, its odds theta / (u - theta) are.
            The default box [1e-8, 1e8] does not bind at the optima of our
            benchmarks (Laplace on crabs fits sigma_f^2 ~ 1e6) and stops the
            flat directions where the objective creeps up without a maximum;
            scikit-learn's default is (1e-5, 1e5).  ``None``: unbounded.  The
            starting values must lie in the box.
        log_prior: optional ``log_prior(kernel, likelihood) -> scalar``, e.g.
            built from :func:`gpclass.priors.log_gamma`; a hyperprior also
            gives a flat direction a finite maximum.
        warm_start: start each inner solve from the previous step's solution
            (passed explicitly through the loop state).
        throw: raise (``eqx.error_if``, inside jit too) with the
            :class:`FitStatus` message unless the fit converged; by default
            the reason is only reported in ``FitResult.reason``.
        key: PRNG key for methods with randomness (the same key every step,
            so the objective stays a deterministic function of theta).
        verbose: print the objective after every step (``jax.debug.print``).

    Wrapped in ``eqx.filter_jit``: non-array arguments (``optimizer``,
    ``log_prior``, ``bounds``, tolerances) are static, so pass the same
    objects to reuse a compilation.
    """
    method.check_ml2()
    X = check_inputs(X)
    y = check_labels(likelihood, y, X)
    y = check_two_classes(y)
    dtype = X.dtype
    if gtol is None:
        gtol = 1e-5 if dtype == jnp.float64 else 1e-2
    if ftol is None:
        ftol = 4 * float(jnp.finfo(dtype).eps)
    lo, hi = (-math.inf, math.inf) if bounds is None else _log_bounds(bounds)
    params, static = eqx.partition((kernel, likelihood), eqx.is_inexact_array)
    if not jax.tree.leaves(params):
        raise ValueError("fit: the kernel and likelihood have no floating-point parameters to fit.")
    to_free, from_free = parameter_transforms(params, (kernel, likelihood))
    z0 = _check_in_box(to_free(params), lo, hi, bounds)
    # Line searches probe extreme hyperparameters where the inner solver may fail;
    # there the objective is -inf (an infeasible point the line search backs off
    # from) instead of an exception.  The returned posterior reports convergence.
    inner = dataclasses.replace(method, throw=False)

    def build(z):
        return eqx.combine(from_free(z), static)

    def negative_objective(z, init):
        kernel, likelihood = build(z)
        posterior = solve_posterior(inner, kernel, likelihood, X, y, init if warm_start else None, key)
        value = posterior.log_marginal
        if log_prior is not None:
            value = value + log_prior(kernel, likelihood)
        return -value, posterior

    def evaluate(z, init, cached_grad=None):
        """(-objective, gradient, posterior); an infeasible point gives (inf, 0, posterior).

        With ``cached_grad`` (from a line search that evaluated this point), forward only.
        """
        if cached_grad is None:
            (value, posterior), grad = jax.value_and_grad(negative_objective, has_aux=True)(z, init)
        else:
            (value, posterior), grad = negative_objective(lax.stop_gradient(z), init), cached_grad
        ok = posterior.info.converged & jnp.isfinite(value) & _all_finite(grad)
        return jnp.where(ok, value, jnp.inf), jax.tree.map(lambda g: jnp.where(ok, g, 0.0), grad), posterior

    def line_objective(init):
        """-objective as a function for the line search: value and gradient masked like ``evaluate``'s."""

        @jax.custom_jvp
        def value(z):
            v, posterior = negative_objective(z, init)
            return jnp.where(posterior.info.converged & jnp.isfinite(v), v, jnp.inf)

        @value.defjvp
        def value_jvp(primals, tangents):
            v, grad, _ = evaluate(primals[0], init)
            return v, optax.tree.vdot(grad, tangents[0])

        return value

    def at_bound(z):
        return jax.tree.map(lambda x: (x <= lo) | (x >= hi), z)

    def active_set(z, grad):
        """Coordinates at a bound whose descent direction (-grad) leaves the box: held fixed."""
        return jax.tree.map(lambda x, g: ((x <= lo) & (g > 0)) | ((x >= hi) & (g < 0)), z, grad)

    def project(p, z, active):
        """Active coordinates frozen at z, the others clipped to the box (derivative 1 on the boundary)."""
        return jax.tree.map(
            lambda p, x, a: jnp.where(a, x, jnp.where(p > hi, hi, jnp.where(p < lo, lo, p))).astype(p.dtype),
            p, z, active,
        )

    def projected(grad, active):
        return jax.tree.map(lambda g, a: jnp.where(a, 0.0, g), grad, active)

    def status(z, grad, value):
        """(max |projected gradient|, CONVERGED / AT_BOUND / _RUNNING)."""
        pg_norm = _max_abs(projected(grad, active_set(z, grad)))
        on_bound = _any(at_bound(z))
        code = jnp.where(pg_norm <= gtol, jnp.where(on_bound, FitStatus.AT_BOUND, FitStatus.CONVERGED), _RUNNING)
        return pg_norm, jnp.where(jnp.isfinite(value), code, FitStatus.FAILED).astype(jnp.int32)

    box_aware = optimizer is None
    optimizer = optax.with_extra_args_support(_bounded_lbfgs(lo, hi) if box_aware else optimizer)

    def step(state):
        z, opt_state, posterior, value, grad, i, history, _, restarted = state
        init = posterior.warm_start
        active = active_set(z, grad)
        pgrad = projected(grad, active)
        objective = line_objective(init)
        if box_aware:
            # The direction is zero in the active coordinates and its full step stays in the
            # box, so the line search sees the objective itself, and the gradient it cached
            # at the accepted point is the true one: solve forward only for the posterior
            # (the next warm start).
            updates, opt_state = optimizer.update(pgrad, opt_state, z, value=value, grad=grad, value_fn=objective)
            z_new = _snap_to_box(optax.apply_updates(z, updates), lo, hi)
            new_value, new_grad, new_posterior = evaluate(z_new, init, optax.tree_utils.tree_get(opt_state, "grad"))
        else:
            # Any optax optimiser: its line search, if any, sees the objective along the
            # projected path; the gradient at the new point is computed afresh.
            updates, opt_state = optimizer.update(
                pgrad, opt_state, z, value=value, grad=pgrad, value_fn=lambda p: objective(project(p, z, active))
            )
            z_new = project(optax.apply_updates(z, updates), z, active)
            new_value, new_grad, new_posterior = evaluate(z_new, init)
        change = value - new_value  # NaN or -inf at an infeasible point
        if box_aware:
            # A line search that cannot raise the objective has failed: keep the last point.
            accept = progress = change > ftol * (1.0 + jnp.abs(value))
        else:
            # Fixed-step optimisers such as Adam need not raise the objective every step.
            accept = jnp.isfinite(new_value)
            progress = accept & (jnp.abs(change) > ftol * (1.0 + jnp.abs(value)))
        # Without progress, restart the optimiser (from the last point unless accepted);
        # twice in a row: stalled.
        z, value, grad, posterior = jax.tree.map(
            lambda new, old: jnp.where(accept, new, old),
            (z_new, new_value, new_grad, new_posterior),
            (z, value, grad, posterior),
        )
        fresh = optimizer.init(z)
        opt_state = jax.tree.map(lambda kept, new: jnp.where(progress, kept, new), opt_state, fresh)
        grad_norm, code = status(z, grad, value)
        code = jnp.where((code == _RUNNING) & ~progress & restarted, FitStatus.STALLED, code)
        code = jnp.where((code == _RUNNING) & (i + 1 >= max_steps), FitStatus.MAX_STEPS, code).astype(jnp.int32)
        history = history.at[i].set(-value)
        if verbose:
            jax.debug.print(
                "fit step {i:4d}: objective {v: .10e}  max|projected grad| {g:.2e}  progress {p}",
                i=i + 1, v=-value, g=grad_norm, p=progress,
            )
        return z, opt_state, posterior, value, grad, i + 1, history, code, ~progress

    value, grad, posterior = evaluate(z0, None)
    _, code = status(z0, grad, value)
    code = jnp.where((code == _RUNNING) & (max_steps <= 0), FitStatus.MAX_STEPS, code).astype(jnp.int32)
    history = jnp.full((max_steps,), jnp.nan, dtype=dtype)
    state = (z0, optimizer.init(z0), posterior, value, grad, 0, history, code, jnp.asarray(False))
    z, _, posterior, value, grad, num_steps, history, code, _ = lax.while_loop(
        lambda s: s[7] == _RUNNING, step, state
    )
    grad_norm, _ = status(z, grad, value)
    value = _raise_unless_converged(value, code) if throw else value
    kernel, likelihood = build(z)
    return FitResult(
        kernel=kernel,
        likelihood=likelihood,
        posterior=posterior,
        objective=-value,
        history=history,
        num_steps=jnp.asarray(num_steps),
        grad_norm=grad_norm,
        reason=jnp.asarray(code, jnp.int32),
    )


def _bounded_lbfgs(lo: float, hi: float, memory_size: int = 10) -> optax.GradientTransformationExtraArgs:
    """``optax.lbfgs()`` whose steps stay in the box [lo, hi] (free coordinates).

    Between the L-BFGS direction d and the zoom line search, ``truncate``
    zeroes d in the coordinates at a bound where it points out of the box (the
    active ones among them, gradient pointing outwards, are already zero in
    the gradient L-BFGS was given) and shortens d so that the full step z + d
    stays in the box.  The line search never takes a step longer than d (its
    ``max_learning_rate`` is 1): it evaluates the objective only inside the
    box, and a coordinate reaches its bound at the full step.  Pass the
    projected gradient as the updates and the true one as ``grad=``.
    """

    def truncate_update(updates, state, params, *, grad, **extra_args):
        del extra_args

        def blocked(d, x, g):
            return ((x <= lo) & ((d < 0) | (g > 0))) | ((x >= hi) & ((d > 0) | (g < 0)))

        d = jax.tree.map(lambda d, x, g: jnp.where(blocked(d, x, g), 0.0, d), updates, params, grad)

        def largest_step(d, x):
            t = jnp.where(d > 0, (hi - x) / jnp.where(d > 0, d, 1.0), jnp.inf)
            t = jnp.where(d < 0, (lo - x) / jnp.where(d < 0, d, 1.0), t)
            return jnp.min(t, initial=jnp.inf)

        t_max = jnp.min(jnp.stack([largest_step(d, x) for d, x in zip(jax.tree.leaves(d), jax.tree.leaves(params))]))
        scale = jnp.minimum(1.0, t_max)
        return jax.tree.map(lambda d: (scale * d).astype(d.dtype), d), state

    truncate = optax.GradientTransformationExtraArgs(lambda params: optax.EmptyState(), truncate_update)
    return optax.chain(
        _lbfgs_positive_curvature(memory_size),
        optax.scale(-1.0),
        truncate,
        optax.scale_by_zoom_linesearch(max_linesearch_steps=20, max_learning_rate=1.0, initial_guess_strategy="one"),
    )


def _lbfgs_positive_curvature(memory_size: int) -> optax.GradientTransformation:
    """``optax.scale_by_lbfgs`` that skips a curvature pair (s, y) with s^T y <= 0.

    optax keeps every pair, and one of negative curvature (a step that ended
    where the objective is concave along it, e.g. a line search stopped by its
    largest step) makes the next direction point uphill.  Skipping it is the
    usual safeguard (Nocedal & Wright, sec. 7.2): the pair is recorded as zero.
    """
    inner = optax.scale_by_lbfgs(memory_size=memory_size)

    def update(updates, state, params):
        s = optax.tree.sub(params, state.params)
        y = optax.tree.sub(updates, state.updates)
        sy, ss, yy = optax.tree.vdot(s, y), optax.tree.vdot(s, s), optax.tree.vdot(y, y)
        skip = sy <= 1e-10 * jnp.sqrt(ss * yy)
        state = state._replace(
            params=optax.tree.where(skip, params, state.params), updates=optax.tree.where(skip, updates, state.updates)
        )
        return inner.update(updates, state, params)

    return optax.GradientTransformation(inner.init, update)


def _log_bounds(bounds):
    lower, upper = bounds
    if not (0.0 < lower < upper < math.inf):
        raise ValueError(f"fit: bounds must be (lower, upper) with 0 < lower < upper < inf; got {bounds}.")
    return math.log(lower), math.log(upper)


def _box_tolerance(x, lo, hi):
    """A few rounding errors of a free coordinate near the bounds (zero without bounds)."""
    if not math.isfinite(lo):
        return 0.0
    return 8 * float(jnp.finfo(x.dtype).eps) * (1.0 + max(abs(lo), abs(hi)))


def _snap_to_box(z, lo, hi):
    """Coordinates within rounding of a bound put exactly on it (a full truncated step lands within an ulp or
    two of the bound, on either side), everything clipped to the box."""

    def snap(x):
        tol = _box_tolerance(x, lo, hi)
        return jnp.where(x >= hi - tol, hi, jnp.where(x <= lo + tol, lo, x)).astype(x.dtype)

    return jax.tree.map(snap, z)


def _check_in_box(z, lo, hi, bounds):
    """The starting free coordinates, an error if outside [lo, hi] (beyond rounding), snapped onto the box."""
    outside = _any(
        jax.tree.map(lambda x: (x < lo - _box_tolerance(x, lo, hi)) | (x > hi + _box_tolerance(x, lo, hi)), z)
    )
    z = eqx.error_if(
        z, outside, f"fit: a starting hyperparameter lies outside bounds={bounds}; start inside or widen the bounds."
    )
    return _snap_to_box(z, lo, hi)


def _raise_unless_converged(value, code):
    messages = [FitStatus(c).message for c in range(len(FitStatus))]
    return eqx.branched_error_if(value, code > FitStatus.AT_BOUND, code, ["fit did not converge: " + m for m in messages])


def _max_abs(tree):
    return jnp.max(jnp.stack([jnp.max(jnp.abs(g)) for g in jax.tree.leaves(tree)]))


def _any(tree):
    return jnp.any(jnp.stack([jnp.any(b) for b in jax.tree.leaves(tree)]))


def _all_finite(tree):
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(tree)]))


def parameter_transforms(params, tree):
    """Maps between hyperparameters and unconstrained coordinates, leaf by leaf.

    A parameter in (0, inf) maps to log theta; one with a declared upper
    bound u (``upper_bounds = {"field": u}`` on its module, e.g.
    ``LabelNoise.epsilon < 1/2``) maps to logit(theta / u).  ``params`` is the
    array part of ``tree``; out-of-range values raise (inside jit too).
    """
    bounded = {}
    for node in jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, eqx.Module) and hasattr(x, "upper_bounds")):
        for name, bound in getattr(node, "upper_bounds", {}).items():
            bounded[id(getattr(node, name))] = bound
    leaves, treedef = jax.tree.flatten(params)
    bounds = [bounded.get(id(leaf), None) for leaf in leaves]

    def check(p, u):
        upper = jnp.inf if u is None else u
        return eqx.error_if(
            p, jnp.any((p <= 0) | (p >= upper)), f"fit: every hyperparameter must lie in (0, {upper}) (log/logit space)."
        )

    def to_free(params):
        out = []
        for p, u in zip(jax.tree.leaves(params), bounds):
            p = check(p, u)
            out.append(jnp.log(p) if u is None else jnp.log(p / u) - jnp.log1p(-p / u))
        return jax.tree.unflatten(treedef, out)

    def from_free(free):
        return jax.tree.unflatten(
            treedef,
            [jnp.exp(x) if u is None else u * jax.nn.sigmoid(x) for x, u in zip(jax.tree.leaves(free), bounds)],
        )

    return to_free, from_free
