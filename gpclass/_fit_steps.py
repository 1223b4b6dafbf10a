"""fit's optimiser steps around its objective, shared by its two drivers (``_fit``): the state after each
evaluation of the objective and why the fit stopped (``AscentSteps``), with box-aware L-BFGS (``_box_lbfgs``) or
any optax optimiser (``OptaxSteps``).  Written for traced and NumPy arrays alike (``_box.namespace``): the same
code runs inside the compiled loop and on the host between calls of the compiled objective."""

from typing import NamedTuple

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import optax

from . import _box as box
from ._box_lbfgs import select
from ._progress import Progress, due, report
from ._status import Status
from ._types import Array

RUNNING = -1  # internal (not a Status): the loop goes on


class FitState(NamedTuple):
    """The state of fit's loop: the accepted point and the method's typed solution there (the posterior's fields
    computed from K), the pending line search, the optimiser's memory and the record.  A NamedTuple: the host loop
    builds one per step, which an equinox Module makes about ten times slower."""

    z: Array
    value: Array
    grad: Array
    solution: object
    search: object
    memory: object
    steps: Array
    history: Array
    code: Array
    restarted: Array
    started: Array


class AscentSteps(eqx.Module):
    """fit's optimiser around its objective: the state after each evaluation (value, gradient and the method's
    solution at the trial point), and why the fit stopped (``code``, a :class:`gpclass.Status`).  The same code
    runs traced inside the program (``_fit.MarginalLikelihoodAscent``) and in NumPy on the host between calls of
    the compiled objective (``_fit._fit_on_host``); ``max_optimizer_steps`` counts optimiser steps, not evaluations."""

    strategy: object
    lo: np.ndarray | Array  # per free coordinate (traced where a bound is an array)
    hi: np.ndarray | Array
    gtol: float
    ftol: float
    max_optimizer_steps: int
    progress: Progress | None
    every: object

    def initial(self, z0, solution0) -> FitState:
        """The state before the first evaluation (at z0, taken as it is)."""
        xp, dtype = box.namespace(z0), z0.dtype
        zero = xp.zeros((), dtype)
        return FitState(
            z=z0, value=zero, grad=xp.zeros_like(z0), solution=solution0,
            search=self.strategy.initial(z0, zero, xp.zeros_like(z0), solution0),
            memory=self.strategy.memory_init(z0), steps=xp.asarray(0),
            history=xp.full((self.max_optimizer_steps,), xp.nan, dtype),
            code=xp.asarray(RUNNING, xp.int32), restarted=xp.asarray(False), started=xp.asarray(False),
        )

    def gradient_test(self, z, grad, value, active):
        """(max |projected gradient|, CONVERGED / AT_BOUND / RUNNING, or FAILED where the value is not finite)."""
        xp = box.namespace(z, grad, value)
        pg_norm = xp.max(xp.abs(box.projected(grad, active)))
        on_bound = box.any_at_bound(z, self.lo, self.hi)
        code = xp.where(pg_norm <= self.gtol, xp.where(on_bound, Status.AT_BOUND, Status.CONVERGED), RUNNING)
        return pg_norm, xp.where(xp.isfinite(value), code, Status.FAILED).astype(xp.int32)

    def advance(self, s: FitState, trial, value, grad, solution, line_objective=None) -> FitState:
        """The state after the evaluation (value = -objective, its gradient, the solution) at ``trial``;
        ``line_objective(warm_start)``, the objective along a line, for an optax optimiser with a line search."""
        strategy, lo, hi = self.strategy, self.lo, self.hi
        xp = box.namespace(trial, value, grad)
        search, done, found, candidate = strategy.observe(s.z, s.search, value, grad, solution)
        first = ~s.started  # the start: taken as it is
        done = done | first
        candidate = select(first, (trial, value, grad, solution), candidate)
        _, new_value, _, _ = candidate
        change = s.value - new_value  # NaN or -inf at an infeasible point
        # L-BFGS must raise the objective; fixed-step optimisers such as Adam need only change it.
        progress_made = found & ((change if strategy.monotone else xp.abs(change))
                                 > self.ftol * (1.0 + xp.abs(s.value)))
        accept = first | (progress_made if strategy.monotone else found)
        step_done = done & ~first
        z, value, grad, solution = select(done & accept, candidate, (s.z, s.value, s.grad, s.solution))
        # Without progress, restart the optimiser from the last point; twice in a row: stalled.  Unless the
        # quasi-Newton model of the search that found nothing predicted no gain the objective can resolve: then
        # the optimum is found to the objective's precision (float32's ML-II ends there, a little above gtol).
        resolved = step_done & ~progress_made & strategy.resolved(s.search, s.memory,
                                                                  self.ftol * (1.0 + xp.abs(s.value)))
        memory = select(step_done & ~progress_made, strategy.memory_init(z), s.memory)
        active = box.active_set(z, grad, lo, hi)
        grad_norm, code = self.gradient_test(z, grad, value, active)
        limit = xp.where(first, 0, s.steps + 1)
        on_bound = box.any_at_bound(z, lo, hi)
        code = xp.where(resolved & (code == RUNNING), xp.where(on_bound, Status.AT_BOUND, Status.CONVERGED), code)
        code = xp.where(step_done & (code == RUNNING) & ~progress_made & s.restarted, Status.STALLED, code)
        code = xp.where((code == RUNNING) & (limit >= self.max_optimizer_steps), Status.MAX_STEPS, code)
        code = xp.where(done, code, RUNNING).astype(xp.int32)
        history = xp.where(step_done, box.set_at(s.history, s.steps, -value), s.history)
        if self.progress is not None:
            # Reported from the running problems only: under vmap a stopped problem's iterations are discarded.
            step, stopped = s.steps + step_done, code != RUNNING
            report(self.progress, "fit", (s.code == RUNNING) & done & due(step, self.every, stopped), step,
                   stopped, total=self.max_optimizer_steps, objective=-value, grad_norm=grad_norm,
                   improved=progress_made, status=code)
        value_fn = None if line_objective is None else line_objective(solution.warm_start)
        new_search, new_memory = select(done, strategy.begin(z, value, grad, active, memory, solution, value_fn),
                                        (search, memory))
        return FitState(
            z=z, value=value, grad=grad, solution=solution, search=new_search, memory=new_memory,
            steps=s.steps + step_done, history=history, code=code,
            restarted=xp.where(step_done, ~progress_made, s.restarted), started=xp.asarray(True),
        )


class OptaxSteps:
    """Any optax optimiser in fit's loop (the protocol of ``BoxLBFGS``): one evaluation per step, at the
    projection of its update onto the box (active coordinates frozen, the others clipped)."""

    monotone = False  # fixed-step optimisers such as Adam need not lower the objective every step

    def __init__(self, optimizer: optax.GradientTransformation, lo: float, hi: float):
        self.optimizer, self.lo, self.hi = optax.with_extra_args_support(optimizer), lo, hi

    def memory_init(self, z):
        return self.optimizer.init(z)

    def initial(self, z, value, grad, aux):
        return z

    def begin(self, z, value, grad, active, memory, aux, value_fn):
        """The next trial point; an optimiser with a line search sees the objective along the projected path."""
        pgrad = box.projected(grad, active)
        updates, memory = self.optimizer.update(
            pgrad, memory, z, value=value, grad=pgrad,
            value_fn=lambda p: value_fn(box.project(p, z, active, self.lo, self.hi)),
        )
        return box.project(optax.apply_updates(z, updates), z, active, self.lo, self.hi), memory

    def trial(self, z, search):
        return search

    def observe(self, z, search, value, grad, aux):
        return search, jnp.asarray(True), jnp.isfinite(value), (search, value, grad, aux)

    def resolved(self, search, memory, level):
        """No model of the objective: a step without progress is never taken as the optimum."""
        return False
