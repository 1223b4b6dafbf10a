"""Step-length search: the safeguard of the Newton-type solvers (Laplace, KL, the Jaakkola-Jordan upper bound).

Each of them proposes a sequence of candidates (Newton's step halved, or the Newton candidate and then damped
natural-gradient steps) and takes the first whose value is acceptable; :func:`first_acceptable` is that loop.
"""

from collections.abc import Callable

import jax.numpy as jnp
from jax import lax


def first_acceptable(candidate: Callable, acceptable: Callable, value, *, last: int, evaluated: bool):
    """The value of the first candidate i in 0, 1, ..., ``last`` that is ``acceptable``, and i.

    ``candidate(i)`` gives the i-th candidate's value (any tree), ``acceptable(value)`` whether to stop.
    ``evaluated``: ``value`` is ``candidate(0)``, which the caller computed (it decides other things from
    it); otherwise ``value`` only shows the structure, and candidate 0 is evaluated first.  After the last
    candidate its value is returned, acceptable or not (the caller tests it again).  One ``lax.while_loop``,
    so ``candidate`` is traced once more.
    """

    def more(h):
        value, i = h
        return (i == 0) | (~acceptable(value) & (i <= last))

    def next_candidate(h):
        _, i = h
        return candidate(i), i + 1

    value, i = lax.while_loop(more, next_candidate, (value, jnp.asarray(1 if evaluated else 0)))
    return value, i - 1


def halving_search(evaluate: Callable, acceptable: Callable, first, max_halvings: int, dtype):
    """The first step length t in 1, 1/2, 1/4, ... (at most ``max_halvings`` halvings) whose value
    ``evaluate(t)`` is ``acceptable``, and that value; ``first`` is ``evaluate(1)``, computed by the caller."""
    value, i = first_acceptable(lambda i: evaluate(_halved(i, dtype)), acceptable, first, last=max_halvings,
                                evaluated=True)
    return _halved(i, dtype), value


def _halved(i, dtype):
    """2^-i, exactly (a power of two)."""
    return jnp.ldexp(jnp.ones((), dtype), -i)
