"""The iteration protocol (gpclass/_iterate.py): step counting and the Status of each way to stop."""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gpclass as gpc
from gpclass._cg import conjugate_gradients
from gpclass._inference._search import first_acceptable, halving_search
from gpclass._iterate import AbstractIterativeSolver, iterate, run


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


class _Bisection(AbstractIterativeSolver):
    """Bisection for the root of x^3 - 2 in [lo, hi]: a solver Module, with its own status when the bracket
    holds no sign change and a result made by ``postprocess``."""

    lo: float
    hi: float
    max_steps: int | None

    def init(self):
        return jnp.asarray(self.lo), jnp.asarray(self.hi)

    def step(self, state):
        lo, hi = state
        mid = 0.5 * (lo + hi)
        below = mid**3 - 2.0 < 0
        return jnp.where(below, mid, lo), jnp.where(below, hi, mid)

    def terminate(self, state):
        lo, hi = state
        return hi - lo <= 1e-12, (lo**3 - 2.0) * (hi**3 - 2.0) > 0

    def finite(self, state):
        return jnp.all(jnp.isfinite(jnp.stack(state)))

    def status(self, state, converged, num_steps):
        no_root = (state[0] ** 3 - 2.0) * (state[1] ** 3 - 2.0) > 0
        return jnp.where(no_root, gpc.Status.FAILED, super().status(state, converged, num_steps))

    def postprocess(self, solution):
        return 0.5 * (solution.state[0] + solution.state[1]), solution.num_steps, solution.status


@pytest.mark.parametrize("lo, hi, max_steps, status", [
    (0.0, 2.0, None, gpc.Status.CONVERGED),  # no limit: 2 / 2^k <= 1e-12 after 41 steps
    (0.0, 2.0, 10, gpc.Status.MAX_STEPS),
    (2.0, 3.0, None, gpc.Status.FAILED),  # no sign change: the solver's own status
])
def test_a_solver_module_runs_on_the_driver(lo, hi, max_steps, status):
    with jax.enable_x64(True):
        root, steps, code = gpc.jit(lambda: run(_Bisection(lo, hi, max_steps)))()
        assert int(code) == status
        if status == gpc.Status.CONVERGED:
            assert int(steps) == 41 and abs(float(root) - 2.0 ** (1.0 / 3.0)) <= 1e-12
        if status == gpc.Status.MAX_STEPS:
            assert int(steps) == 10 and abs(float(root) - 2.0 ** (1.0 / 3.0)) <= 2.0 / 2**10
        if status == gpc.Status.FAILED:
            assert int(steps) == 1  # the stall ends the loop after the first step


@pytest.mark.parametrize("evaluated, acceptable_from, expect", [
    (True, 3, (3, [1, 2, 3])),  # candidate 0 given: 1, 2, 3 evaluated
    (False, 3, (3, [0, 1, 2, 3])),  # candidate 0 evaluated in the loop
    (False, 0, (0, [0])),
    (True, 9, (5, [1, 2, 3, 4, 5])),  # none acceptable: the last, 5
])
def test_first_acceptable_tries_candidates_in_order_up_to_the_last(evaluated, acceptable_from, expect):
    tried = []

    def candidate(i, scale):
        jax.debug.callback(lambda i, scale: tried.append((int(i), float(scale))), i, scale, ordered=True)
        return 10 * i

    value, i, scale = first_acceptable(candidate, lambda v: v >= 10 * acceptable_from, jnp.asarray(0), last=5,
                                       evaluated=evaluated, dtype=jnp.float32)
    jax.effects_barrier()
    assert (int(i), [k for k, _ in tried]) == expect and int(value) == 10 * expect[0]
    assert all(s == 2.0**-k for k, s in tried) and float(scale) == 2.0 ** -int(i)  # exact powers of two


def test_halving_search_gives_exact_powers_of_two():
    t, value = halving_search(lambda t: t, lambda v: v <= 0.1, jnp.asarray(1.0), 10, jnp.float32)
    assert float(t) == float(value) == 0.0625 and t.dtype == jnp.float32
