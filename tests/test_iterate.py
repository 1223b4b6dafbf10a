"""The iteration protocol (gpclass/_iterate.py): step counting and the Status of each way to stop."""

import functools

import jax.numpy as jnp
import numpy as np
import pytest

import gpclass as gpc
from gpclass._cg import conjugate_gradients
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


@functools.partial(gpc.jit, static_argnums=(2,))
def cg(A, b, max_steps):
    return conjugate_gradients(lambda x: A @ x, b, tol=1e-10, max_steps=max_steps)


def spd_matrix(n, condition, seed):
    """Q diag(eigenvalues) Q^T with eigenvalues log-spaced from 1 to ``condition``."""
    Q, _ = np.linalg.qr(np.random.default_rng(seed).normal(size=(n, n)))
    return Q @ np.diag(np.geomspace(1.0, condition, n)) @ Q.T


def test_conjugate_gradients_solves_to_tolerance_and_reports_the_limit():
    A = spd_matrix(12, 1e3, seed=0)
    b = np.random.default_rng(1).normal(size=12)
    x, steps, status = cg(A, b, 100)
    assert gpc.Status(int(status)) == gpc.Status.CONVERGED and int(steps) <= 3 * 12  # n in exact arithmetic
    assert np.linalg.norm(A @ np.asarray(x) - b) <= 1e-10 * np.linalg.norm(b)
    np.testing.assert_allclose(x, np.linalg.solve(A, b), rtol=1e-7)
    x3, steps3, status3 = cg(A, b, 3)  # stopped early: reported, and the iterate still improves on x = 0
    assert gpc.Status(int(status3)) == gpc.Status.MAX_STEPS and int(steps3) == 3
    energy_error = lambda x: (x - np.linalg.solve(A, b)) @ A @ (x - np.linalg.solve(A, b))
    assert energy_error(np.asarray(x3)) < energy_error(np.zeros(12))
    x0, _, status0 = cg(A, np.zeros(12), 100)  # b = 0: x = 0, no 0/0
    assert gpc.Status(int(status0)) == gpc.Status.CONVERGED and not np.any(np.asarray(x0))
