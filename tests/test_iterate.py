"""The iteration protocol (gpclass/_iterate.py): step counting and the Status of each way to stop."""

import functools

import jax.numpy as jnp
import numpy as np
import pytest

import gpclass as gpc
from gpclass._iterate import iterate


@functools.partial(gpc.jit, static_argnums=1)
def halving(x0, max_steps, stall_below):
    """x <- x / 2 from x0: converged below 1e-3, stalled below ``stall_below``."""
    solution = iterate(
        lambda x: 0.5 * x, lambda x: (x < 1e-3, x < stall_below), x0, max_steps=max_steps, finite=jnp.isfinite
    )
    return solution.state, solution.num_steps, solution.status


@pytest.mark.parametrize(
    "x0, max_steps, stall_below, steps, status",
    [
        (1.0, 100, -1.0, 10, gpc.Status.CONVERGED),  # 2^-10 < 1e-3 <= 2^-9
        (1.0, 5, -1.0, 5, gpc.Status.MAX_STEPS),
        (1.0, 100, 0.1, 4, gpc.Status.STALLED),  # 2^-4 < 0.1
        (np.inf, 5, -1.0, 5, gpc.Status.FAILED),
        (np.nan, 100, -1.0, 100, gpc.Status.FAILED),
    ],
)
def test_iterate_counts_steps_and_reports_how_it_stopped(x0, max_steps, stall_below, steps, status):
    state, num_steps, code = halving(np.float64(x0), max_steps, np.float64(stall_below))
    assert int(num_steps) == steps and int(code) == status
    if np.isfinite(x0):
        assert float(state) == x0 * 0.5**steps
