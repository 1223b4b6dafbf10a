"""The iteration protocol every inner solver runs on: a step, a termination test, one ``lax.while_loop``.

A solver supplies its state (a NamedTuple), ``step(state) -> state`` and
``terminate(state) -> (converged, stalled)``; :func:`iterate` counts the steps,
stops at ``max_steps`` and turns how it stopped into a :class:`gpclass.Status`
(``FAILED`` when ``finite(state)`` is false).  The loop is a
``lax.while_loop``: nothing is stored per step, so memory does not grow with
the number of steps, and gradients come from the converged state (implicit
differentiation or the envelope theorem), never from the loop.
"""

from collections.abc import Callable
from typing import Any, NamedTuple

import jax.numpy as jnp
from jax import lax

from ._status import Status, solver_status
from ._types import Array, Bool, Int


class Solution(NamedTuple):
    """The final state, the number of steps taken and the :class:`gpclass.Status` code."""

    state: Any
    num_steps: Int[Array, ""]
    status: Int[Array, ""]


class _Carry(NamedTuple):
    state: Any
    num_steps: Int[Array, ""]
    converged: Bool[Array, ""]
    running: Bool[Array, ""]


def iterate(
    step: Callable[[Any], Any],
    terminate: Callable[[Any], tuple[Bool[Array, ""], Bool[Array, ""]]],
    state: Any,
    *,
    max_steps: int,
    finite: Callable[[Any], Bool[Array, ""]],
    stall_status: Callable[[Any], Int[Array, ""]] | None = None,
) -> Solution:
    """Apply ``step`` until ``terminate`` reports convergence or a stall, or ``max_steps`` steps were taken.

    Status: ``CONVERGED`` if the last step's test passed, ``MAX_STEPS`` if the
    limit ended the loop, ``STALLED`` if ``terminate`` reported a stall, and
    ``FAILED`` whenever ``finite`` of the final state is false.  ``stall_status(state)``, if given, names the
    reason for a stall instead (e.g. ``IMPRECISE``).
    """

    def body(carry: _Carry) -> _Carry:
        new = step(carry.state)
        num_steps = carry.num_steps + 1
        converged, stalled = terminate(new)
        return _Carry(new, num_steps, converged, ~converged & ~stalled & (num_steps < max_steps))

    start = _Carry(state, jnp.asarray(0), jnp.asarray(False), jnp.asarray(max_steps > 0))
    end = lax.while_loop(lambda carry: carry.running, body, start)
    status = solver_status(end.converged, end.num_steps, max_steps, finite(end.state))
    if stall_status is not None:
        status = jnp.where(status == Status.STALLED, stall_status(end.state), status).astype(status.dtype)
    return Solution(end.state, end.num_steps, status)


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
