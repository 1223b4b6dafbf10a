"""Step-length search: halve a step until its value is acceptable (the safeguard of the Newton-type solvers)."""

from collections.abc import Callable

import jax.numpy as jnp
from jax import lax


def halving_search(evaluate: Callable, acceptable: Callable, first, max_halvings: int, dtype):
    """The first step length t in 1, 1/2, 1/4, ... whose value is acceptable, and that value.

    ``first`` is ``evaluate(1)``, which the caller computes (it also decides other things from it);
    ``evaluate(t)`` gives the value at step length t (any tree), ``acceptable(value)`` whether to stop.
    At most ``max_halvings`` halvings: the last value is returned whether acceptable or not (the caller
    tests it again).  One ``lax.while_loop``: ``evaluate`` is traced once more.
    """

    def halve(h):
        t, _, k = h
        return 0.5 * t, evaluate(0.5 * t), k + 1

    t, value, _ = lax.while_loop(lambda h: ~acceptable(h[1]) & (h[2] < max_halvings), halve,
                                 (jnp.ones((), dtype), first, 0))
    return t, value
