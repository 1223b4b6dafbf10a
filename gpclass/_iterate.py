"""The iteration protocol every solver runs on: an ``AbstractIterativeSolver`` and one driver, :func:`run`.

A solver is an equinox Module holding its problem and settings, with
``init() -> state``, ``step(state) -> state``, ``terminate(state) ->
(converged, stalled)``, ``finite(state)`` and ``postprocess(solution)``
(the anchor is optimistix's ``AbstractIterativeSolver``).  Its state is a
named Module.  :func:`run` counts the steps, stops at ``max_steps`` and turns
how the loop stopped into a :class:`gpclass.Status` (``FAILED`` when
``finite`` of the final state is false).  The loop is one
``lax.while_loop``: nothing is stored per step, so memory does not grow with
the number of steps, and gradients come from the converged state (implicit
differentiation or the envelope theorem), never from the loop.

The solvers: Newton's method for the Laplace modes (``_inference/_newton.py``),
EP's sweeps (``_inference/ep.py``), KL's and the Jaakkola-Jordan bounds'
safeguarded Newton steps (``_inference/kl.py``, ``jaakkola_jordan.py``,
``jaakkola_jordan_upper.py``), conjugate gradients (``_cg.py``), EM-EP and its
M-step (``_em_ep.py``) and ``gpc.fit``'s optimiser (``_fit.py``).
"""

import abc
from collections.abc import Callable
from typing import Any, NamedTuple

import equinox as eqx
import jax.numpy as jnp
from jax import lax

from ._status import solver_status
from ._types import Array, Bool, Int


class Solution(NamedTuple):
    """The final state, the number of steps taken and the :class:`gpclass.Status` code."""

    state: Any
    num_steps: Int[Array, ""]
    status: Int[Array, ""]


class AbstractIterativeSolver(eqx.Module):
    """A solver: its problem and settings as fields, its iteration as methods (see the module docstring).

    ``max_steps`` is the largest number of steps; ``None`` means the solver stops itself (``terminate``).
    """

    max_steps: eqx.AbstractVar[int | None]

    @abc.abstractmethod
    def init(self) -> Any:
        """The state before the first step."""

    @abc.abstractmethod
    def step(self, state: Any) -> Any:
        """One step: the next state."""

    @abc.abstractmethod
    def terminate(self, state: Any) -> tuple[Bool[Array, ""], Bool[Array, ""]]:
        """(converged, stalled) after a step: either ends the loop."""

    @abc.abstractmethod
    def finite(self, state: Any) -> Bool[Array, ""]:
        """Whether the state is usable: a final state that is not is ``Status.FAILED``."""

    def status(self, state: Any, converged: Bool[Array, ""], num_steps: Int[Array, ""]) -> Int[Array, ""]:
        """How the loop ended: ``CONVERGED`` after a passed test, ``MAX_STEPS`` at the limit, ``STALLED`` after a
        reported stall, ``FAILED`` whenever the state is not finite.  Solvers that know more override it."""
        limit = jnp.iinfo(jnp.int32).max if self.max_steps is None else self.max_steps
        return solver_status(converged, num_steps, limit, self.finite(state))

    def postprocess(self, solution: Solution) -> Any:
        """The solver's result from the final state (the :class:`Solution` itself by default)."""
        return solution


class _Carry(NamedTuple):
    state: Any
    num_steps: Int[Array, ""]
    converged: Bool[Array, ""]
    running: Bool[Array, ""]


def run(solver: AbstractIterativeSolver) -> Any:
    """Run ``solver`` from ``solver.init()`` until ``terminate`` reports convergence or a stall, or ``max_steps``
    steps were taken; ``solver.postprocess`` of the :class:`Solution`."""
    max_steps = solver.max_steps

    def body(carry: _Carry) -> _Carry:
        new = solver.step(carry.state)
        num_steps = carry.num_steps + 1
        converged, stalled = solver.terminate(new)
        running = ~converged & ~stalled
        if max_steps is not None:
            running = running & (num_steps < max_steps)
        return _Carry(new, num_steps, converged, running)

    start = _Carry(solver.init(), jnp.asarray(0), jnp.asarray(False), jnp.asarray(max_steps is None or max_steps > 0))
    end = lax.while_loop(lambda carry: carry.running, body, start)
    return solver.postprocess(Solution(end.state, end.num_steps, solver.status(end.state, end.converged,
                                                                                end.num_steps)))


class _Functions(AbstractIterativeSolver):
    """A solver made of functions (:func:`iterate`)."""

    step_fn: Callable
    terminate_fn: Callable
    state0: Any
    max_steps: int | None
    finite_fn: Callable

    def init(self):
        return self.state0

    def step(self, state):
        return self.step_fn(state)

    def terminate(self, state):
        return self.terminate_fn(state)

    def finite(self, state):
        return self.finite_fn(state)


def iterate(step: Callable, terminate: Callable, state: Any, *, max_steps: int | None,
            finite: Callable) -> Solution:
    """:func:`run` for a solver given as functions: ``step(state)``, ``terminate(state) -> (converged, stalled)``
    and ``finite(state)``, from ``state``."""
    return run(_Functions(step, terminate, state, max_steps, finite))


def tolerance(given: float | None, dtype, float64: float, float32: float) -> float:
    """``given``, or the default for ``dtype``: ``float64`` in double precision, ``float32`` otherwise."""
    if given is not None:
        return given
    return float64 if dtype == jnp.float64 else float32


def relative_change(new: Array, old: Array) -> Array:
    """max |new - old| / (1 + max |new|): the size of an update, relative to the new value (the convergence
    tests' measure for modes, sites and variational parameters)."""
    return jnp.max(jnp.abs(new - old)) / (1.0 + jnp.max(jnp.abs(new)))


def rounding_level(dtype, scale: Array) -> Array:
    """8 eps scale: how much a computed objective of magnitude ``scale`` can move by rounding alone, so that a
    step is not rejected for a decrease it cannot resolve."""
    return 8.0 * jnp.finfo(dtype).eps * scale


def all_finite(*arrays: Array) -> Bool[Array, ""]:
    """Whether every entry of every array is finite."""
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(a)) for a in arrays]))
