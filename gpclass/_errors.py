"""Errors decided by traced values: raised from the compiled program, or by Python after a top-level call.

gpclass checks its inputs and its solvers' status inside the compiled program
(so the checks also hold under ``jit`` and ``vmap``) with
``eqx.branched_error_if``, whose raising branch is a host callback, and JAX's
persistent compilation cache does not store a program with a host callback.

An entry point (:func:`entry_point`: ``gpc.infer``, ``gpc.fit``,
``gpc.predict``, ...) called with no transformation active therefore compiles
a program that *returns* each check's outcome (the index of the failed
message, or -1) instead of raising it, and raises that message in Python
after the call, as a :class:`gpclass.GPClassError` (``_exceptions``).
That program has no callback and can be cached; an entry point called at the
top level of another's trace (``predict`` calls ``predict_latent``) returns
its checks with the caller's.  A check made anywhere else
(inside a ``vmap`` or a loop body of the entry point, or while a user's own
transformation traces the entry point) raises through ``eqx.branched_error_if``
as before: only a check at the top level of the entry point's own trace is
returned, which the identity of JAX's current trace decides.

A returned check can also say *where* it failed: :class:`Located` gives the
first offending entry of an array (its index and value), returned beside the
check's code and written into the message by Python (``y[3] = 0.5``).  A check
raised from the program keeps the message without it (its text is static).

Equinox's ``EQX_ON_ERROR`` (``nan``, ``breakpoint``, ``off``; read when the
process imports equinox) is honoured by every check: unless it is ``raise``
(the default), no check is returned, so each goes through
``eqx.branched_error_if``, which returns NaN, opens the debugger or does nothing.
"""

import contextvars
import functools
import inspect
import os
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._compile import filter_jit, filter_jit_fast_codegen
from ._exceptions import GPClassError, register_messages
from ._jax_compat import current_trace as _current_trace
from ._jax_compat import top_level

_ON_ERROR = os.environ.get("EQX_ON_ERROR", "raise")  # as equinox reads it, once per process


class _Returned(NamedTuple):
    """The checks an entry point returns: made while ``trace`` records, each an index, the place of its first
    offending entry (or None), its messages and how each names that place (``Located.describe``, or None)."""

    trace: object
    codes: list
    places: list
    messages: list
    locators: list


class Located(NamedTuple):
    """Where a check's array fails: ``describe`` (a format string of ``index`` and ``value``, e.g.
    ``"y[{index}] = {value}"``) is filled with the first entry of ``pred`` (an array) that is true and the entry
    of ``values`` (an array of ``pred``'s shape) there."""

    describe: str
    pred: object
    values: object

    def place(self):
        """(flat index of the first true entry of ``pred``, the value there as a float): traced scalars."""
        pred = jnp.ravel(self.pred)
        if pred.size == 0:  # nothing can fail (test inputs with no rows)
            return jnp.zeros((), jnp.int32), jnp.full((), jnp.nan, jnp.result_type(float))
        position = jnp.argmax(pred).astype(jnp.int32)
        values = jnp.ravel(jnp.broadcast_to(self.values, jnp.shape(self.pred)))
        return position, values[position].astype(jnp.result_type(float))

    def static(self):
        """What Python needs to write the place: the format and ``pred``'s shape."""
        return self.describe, tuple(jnp.shape(self.pred))


AT = "{at}"  # where a located message names the place, " (the first: y[3] = 0.5)", or nothing


def static_message(message: str) -> str:
    """A located message as a check raised from the program gives it: without the place."""
    return message.replace(AT, "")


def placed_message(message: str, locator, position: int, value: float) -> str:
    """A located message with its place written in (``locator``: ``Located.static()``)."""
    describe, shape = locator
    index = np.unravel_index(int(position), shape) if shape else ()
    index = ", ".join(str(int(i)) for i in index)
    value = float(value)
    shown = str(int(value)) if value.is_integer() and abs(value) < 2**53 else f"{value:.6g}"
    return message.replace(AT, f" ({describe.format(index=index, value=shown)})")


_RETURNED: contextvars.ContextVar[_Returned | None] = contextvars.ContextVar("gpclass_returned_checks", default=None)


def _returning_here() -> _Returned | None:
    """The checks being returned, if an entry point that returns them is tracing at this very level (never
    unless failed checks raise: ``EQX_ON_ERROR``, module docstring)."""
    if _ON_ERROR != "raise":
        return None
    returned = _RETURNED.get()
    return returned if returned is not None and _current_trace() is returned.trace else None


def branched_error_if(x, pred, index, messages, places=None):
    """``x``, with an error ``messages[index]`` raised if ``pred`` (a scalar) is true (``eqx.branched_error_if``).

    At the top level of an entry point's own trace the check is returned by
    the entry point and raised in Python instead (see the module docstring).
    ``places``: for each message None or a :class:`Located`, whose place a
    message holding ``{at}`` is given in Python (a raised check drops ``{at}``).
    """
    static = [static_message(m) for m in messages]
    register_messages(static)
    returned = _returning_here()
    if returned is not None:
        returned.codes.append(jnp.where(pred, index, -1).astype(jnp.int32))
        located = [] if places is None else [(i, p) for i, p in enumerate(places) if p is not None]
        if located:
            found = [p.place() for _, p in located]
            which = jnp.argmax(jnp.asarray([i for i, _ in located]) == index)  # the failing check's place, if any
            returned.places.append((jnp.stack([f[0] for f in found])[which], jnp.stack([f[1] for f in found])[which]))
        else:
            returned.places.append(None)
        returned.messages.append(tuple(messages))
        returned.locators.append(tuple(None if places is None or p is None else p.static() for p in
                                       (places or [None] * len(messages))))
        return x
    return eqx.branched_error_if(x, pred, index, static)


def error_if(x, pred, message: str):
    """``x``, with an error ``message`` raised if any entry of ``pred`` is true (``eqx.error_if``)."""
    return branched_error_if(x, jnp.any(pred), 0, [message])


def entry_point(fun=None, /, *, fast_codegen: bool = False):
    """``gpc.filter_jit(fun)`` whose checks, in a call with no transformation active, are raised by Python.

    Under a transformation (a user's ``jit``, ``grad``, ``vmap``), ``fun`` is
    traced as it is and its checks raise from the program.  ``fast_codegen``:
    the top-level call's program is compiled at LLVM optimisation level 0 on
    the CPU (``_compile.with_fast_codegen``), for a program whose compilation
    dominates its calls.
    """
    if fun is None:
        return functools.partial(entry_point, fast_codegen=fast_codegen)
    inside = filter_jit(fun)

    @(filter_jit_fast_codegen if fast_codegen else filter_jit)
    @functools.wraps(fun)  # the program is named after the entry point
    def returning_checks(*args, **kwargs):
        returned = _Returned(_current_trace(), [], [], [], [])
        token = _RETURNED.set(returned)
        try:
            out = fun(*args, **kwargs)
        finally:
            _RETURNED.reset(token)
        # The messages and locators are static: returned as they are.
        return out, returned.codes, returned.places, tuple(returned.messages), tuple(returned.locators)

    signature = inspect.signature(fun)

    @functools.wraps(fun)
    def call(*args, **kwargs):
        refuse_non_numeric(fun.__name__, signature, args, kwargs)
        if _returning_here() is not None:
            return fun(*args, **kwargs)  # called by an entry point that returns its checks: these are returned too
        if not top_level():
            return inside(*args, **kwargs)
        out, codes, places, messages, locators = returning_checks(*args, **kwargs)
        codes = np.asarray(jax.device_get(codes), dtype=int).reshape(-1)
        for code, place, options, located in zip(codes, places, messages, locators):
            if code >= 0:
                raise GPClassError(_message(options[code], located[code], place))
        return out

    call.lower = lambda *args, **kwargs: returning_checks.lower(*args, **kwargs)  # the program a call compiles
    return call


def _message(message: str, locator, place) -> str:
    """A returned check's message, with the place of its first offending entry when it has one."""
    if locator is None or place is None:
        return static_message(message)
    position, value = jax.device_get(place)
    return placed_message(message, locator, position, value)


def refuse_non_numeric(name: str, signature: inspect.Signature, args, kwargs) -> None:
    """A ``ValueError`` naming the argument if one is an array of strings or Python objects (a NumPy array of
    dtype object, str or bytes, e.g. a column read as text), which no compiled program can take."""
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return  # the call itself reports a wrong signature
    for arg_name, value in bound.arguments.items():
        for leaf in jax.tree.leaves(value):
            if isinstance(leaf, np.ndarray) and leaf.dtype.kind in "OSUV":
                raise GPClassError(f"{name}: {arg_name} is an array of dtype {leaf.dtype} (strings or Python objects); "
                                   f"it must hold numbers (convert it, e.g. with np.asarray({arg_name}, dtype=float), "
                                   "or encode the classes as integers).")
