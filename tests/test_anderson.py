"""Anderson acceleration (gpclass/_anderson.py) on linear fixed-point maps with known fixed points.

Its use by EP (fewer sweeps, the same fixed point): tests/test_ep.py.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FAST_COMPILE

import gpclass as gpc
from gpclass import _anderson as anderson
from gpclass._iterate import iterate


def linear_map(d, radius, seed=0):
    """G(x) = A x + b with A symmetric, eigenvalues spread over [-radius/2, radius]: fixed point (I - A)^-1 b."""
    rng = np.random.default_rng(seed)
    Q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    A = (Q * np.linspace(-0.5 * radius, radius, d)) @ Q.T
    b = rng.normal(size=d)
    return A, b, np.linalg.solve(np.eye(d) - A, b)


@functools.partial(gpc.jit, static_argnums=(2, 3), compiler_options=FAST_COMPILE)
def solve(A, b, m, project_to_nonnegative):
    """x <- G(x) from 0 until |G(x) - x| <= 1e-12, accelerated with memory m (0: plain)."""
    project = (lambda x: jnp.maximum(x, 0.0)) if project_to_nonnegative else (lambda x: x)

    def step(state):
        x, memory = state
        g = A @ x + b
        if m == 0:
            return g, memory, jnp.max(jnp.abs(g - x))
        x_next, memory = anderson.step(memory, x, g, project)
        return x_next, memory, jnp.max(jnp.abs(g - x))

    x0 = jnp.zeros_like(b)
    memory = anderson.start(x0, max(m, 1))
    end = iterate(lambda s: step(s[:2]), lambda s: (s[2] <= 1e-12, jnp.asarray(False)),
                  (x0, memory, jnp.asarray(jnp.inf)), max_steps=5000, finite=lambda s: jnp.all(jnp.isfinite(s[0])))
    return end.state[0], end.num_steps, end.status


@pytest.mark.parametrize("m, fraction", [(1, 0.6), (3, 0.25), (6, 0.2)])
def test_converges_to_the_fixed_point_in_fewer_steps(m, fraction):
    A, b, fixed_point = linear_map(40, 0.97)
    x_plain, steps_plain, status_plain = solve(A, b, 0, False)
    x, steps, status = solve(A, b, m, False)
    assert int(status_plain) == int(status) == gpc.Status.CONVERGED
    np.testing.assert_allclose(x_plain, fixed_point, atol=1e-10)
    np.testing.assert_allclose(x, fixed_point, atol=1e-10)
    # The plain iteration contracts by 0.97 per step (854 steps); Anderson by far more (447, 187, 142 steps).
    assert int(steps_plain) > 800 and int(steps) < fraction * int(steps_plain)


@pytest.mark.slow
def test_projection_keeps_iterates_in_the_domain_and_reaches_the_fixed_point():
    """G(x) = max(A x + b, 0), whose fixed point has entries on the boundary x = 0 of the domain (as EP's sites
    clipped at tau~ = 0): the accelerated iterates are projected onto x >= 0 and stop at G's fixed point."""
    A, b, _ = linear_map(30, 0.9, seed=1)
    G = gpc.jit(lambda x: jnp.maximum(A @ x + b, 0.0))
    x = jnp.zeros(30)
    memory = anderson.start(x, 3)
    xs = []
    for _ in range(200):
        x, memory = anderson.step(memory, x, G(x), lambda z: jnp.maximum(z, 0.0))
        xs.append(np.asarray(x))
    assert np.min(xs) >= 0.0
    np.testing.assert_allclose(G(x), x, atol=1e-12)
    assert np.sum(x == 0.0) > 0  # the boundary is active


def test_a_longer_residual_restarts_and_after_an_extrapolation_goes_back():
    x, g = jnp.zeros(3), jnp.ones(3)
    last = dict(residual=jnp.full(3, 0.1), output=jnp.full(3, 0.5), count=jnp.asarray(4))
    # After a plain step: restart and go on from g.
    x_next, memory = anderson.step(anderson.start(x, 2)._replace(**last), x, g, lambda z: z)
    np.testing.assert_array_equal(x_next, g)
    assert int(memory.count) == 1 and not bool(memory.extrapolated)
    np.testing.assert_array_equal(memory.output, g)
    # After an extrapolation (and when G's output is not finite): back to the last output, this evaluation forgotten.
    for g_bad in (g, jnp.full(3, jnp.nan)):
        memory = anderson.start(x, 2)._replace(**last, extrapolated=jnp.asarray(True))
        x_next, memory = anderson.step(memory, x, g_bad, lambda z: z)
        np.testing.assert_array_equal(x_next, last["output"])
        np.testing.assert_array_equal(memory.residual, last["residual"])
        assert int(memory.count) == 1 and not bool(memory.extrapolated)
    # A non-finite extrapolation is not taken.
    memory = anderson.start(x, 2)._replace(d_residual=jnp.full((2, 3), jnp.nan), residual=jnp.ones(3),
                                           count=jnp.asarray(3))
    x_next, memory = anderson.step(memory, jnp.full(3, 0.5), jnp.full(3, 0.75), lambda z: z)
    np.testing.assert_array_equal(x_next, jnp.full(3, 0.75))
    assert int(memory.count) == 1 and not bool(memory.extrapolated)


@pytest.mark.parametrize("m", [1, 2, 3, 5])
def test_small_spd_solve(m):
    rng = np.random.default_rng(m)
    B = rng.normal(size=(m, m))
    A, b = B @ B.T + 0.1 * np.eye(m), rng.normal(size=m)
    np.testing.assert_allclose(jax.jit(anderson._small_spd_solve)(A, b), np.linalg.solve(A, b), rtol=1e-10)
