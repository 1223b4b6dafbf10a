"""Step-length search: the safeguard of the Newton-type solvers (Laplace, KL, the Jaakkola-Jordan upper bound).

Each of them proposes a sequence of candidates (Newton's step halved, or the Newton candidate and then damped
natural-gradient steps) and takes the first whose value is acceptable; :func:`first_acceptable` is that loop.
"""

from collections.abc import Callable

import jax.numpy as jnp
from jax import lax


def first_acceptable(candidate: Callable, acceptable: Callable, value, *, last: int, evaluated: bool, dtype):
    """The value of the first candidate i in 0, 1, ..., ``last`` that is ``acceptable``, i, and 2^-i.

    ``candidate(i, scale)`` gives the i-th candidate's value (any tree), ``scale`` = 2^-i exactly (halved in
    the loop's state: the step lengths of the searches), ``acceptable(value)`` whether to stop.
    ``evaluated``: ``value`` is ``candidate(0, 1)``, which the caller computed (it decides other things from
    it); otherwise ``value`` only shows the structure, and candidate 0 is evaluated first.  After the last
    candidate its value is returned, acceptable or not (the caller tests it again).  One ``lax.while_loop``,
    so ``candidate`` is traced once more.
    """

    def more(h):
        value, i, _ = h
        return (i == 0) | (~acceptable(value) & (i <= last))

    def next_candidate(h):
        _, i, scale = h
        return candidate(i, scale), i + 1, 0.5 * scale

    one = jnp.ones((), dtype)
    start = (value, jnp.asarray(1), 0.5 * one) if evaluated else (value, jnp.asarray(0), one)
    value, i, scale = lax.while_loop(more, next_candidate, start)
    return value, i - 1, 2.0 * scale


def halving_search(evaluate: Callable, acceptable: Callable, first, max_halvings: int, dtype):
    """The first step length t in 1, 1/2, 1/4, ... (at most ``max_halvings`` halvings) whose value
    ``evaluate(t)`` is ``acceptable``, and that value; ``first`` is ``evaluate(1)``, computed by the caller."""
    value, _, t = first_acceptable(lambda i, t: evaluate(t), acceptable, first, last=max_halvings, evaluated=True,
                                   dtype=dtype)
    return t, value
