"""Anderson acceleration of a fixed-point iteration x <- G(x) (Anderson 1965; Walker & Ni 2011, "type II").

From the last evaluations g_j = G(x_j) and their residuals r_j = g_j - x_j,
the next point is

    x_next = g_k - dG gamma,   gamma = argmin_gamma |r_k - dR gamma|,

with the columns of dR and dG the differences of consecutive residuals and
outputs (at most ``m`` of each; Walker & Ni eq. 2.1 in the form of their
section 3).  With no differences stored, x_next = g_k: the plain iteration.
The least squares problem is solved through its normal equations with the
columns scaled to unit length and a ridge of sqrt(eps): m dot products of
length d and an m x m Cholesky factorisation written out in scalar
operations (m is a handful; no LAPACK call in the loop).

The extrapolated point is projected onto the problem's domain by
``project`` (EP: site precisions clipped at 0, as the sweeps themselves
clip them for a likelihood that is not log-concave).  Safeguards keep the
iteration at least as robust as the plain one: when a residual is longer
than the one before it (or not finite) the memory restarts, and if the
point evaluated was extrapolated the iteration goes back to the last
output, the point the plain iteration had reached (one evaluation lost);
an extrapolated point that is not finite is not taken.  Fixed points are
unchanged: at one, r_k = 0 and x_next = g_k = x_k.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp

from ._types import Array, Bool, Int


class Memory(NamedTuple):
    """The differences kept (a ring of ``m`` rows, the oldest overwritten first) and the last evaluation."""

    d_residual: Array  # (m, d)
    d_output: Array  # (m, d)
    residual: Array  # (d,) r of the last evaluation
    output: Array  # (d,) g of the last evaluation
    count: Int[Array, ""]  # evaluations since the last restart
    extrapolated: Bool[Array, ""]  # whether the point returned last was extrapolated (not the last output)


def start(x: Array, m: int) -> Memory:
    """An empty memory of ``m`` differences for points shaped like ``x`` (a vector)."""
    zeros = jnp.zeros((m, x.shape[0]), x.dtype)
    return Memory(zeros, zeros, jnp.zeros_like(x), jnp.zeros_like(x), jnp.asarray(0), jnp.asarray(False))


def step(memory: Memory, x: Array, g: Array, project: Callable[[Array], Array]) -> tuple[Array, Memory]:
    """The next point after the evaluation g = G(x) (projected by ``project``), and the updated memory."""
    m = memory.d_residual.shape[0]
    r = g - x
    # A residual longer than the last one (or not finite): restart the memory.  If x was extrapolated, go back
    # to the last output, the point the plain iteration had reached, and forget this evaluation.
    worse = (memory.count > 0) & ~(jnp.sum(r * r) <= jnp.sum(memory.residual * memory.residual))
    back = worse & memory.extrapolated
    count = jnp.where(worse, 1, memory.count + 1)
    slot = (count - 2) % m  # where this evaluation's difference goes (count >= 2)
    push = count >= 2
    d_residual = memory.d_residual.at[slot].set(jnp.where(push, r - memory.residual, memory.d_residual[slot]))
    d_output = memory.d_output.at[slot].set(jnp.where(push, g - memory.output, memory.d_output[slot]))
    used = jnp.arange(m) < jnp.minimum(count - 1, m)
    gamma = _least_squares(d_residual, r, used)
    candidate = project(g - gamma @ d_output)
    ok = jnp.all(jnp.isfinite(candidate)) & jnp.any(used)  # never after a restart (count = 1: nothing used)
    next_x = jnp.where(back, memory.output, jnp.where(ok, candidate, g))
    residual, output = jnp.where(back, memory.residual, r), jnp.where(back, memory.output, g)
    return next_x, Memory(d_residual, d_output, residual, output, jnp.where(ok, count, 1), ok)


def _least_squares(rows: Array, r: Array, used: Bool[Array, " m"]) -> Array:
    """argmin |r - rows^T gamma| over the ``used`` rows (gamma = 0 elsewhere), by scaled normal equations."""
    rows = jnp.where(used[:, None], rows, 0.0)
    gram = rows @ rows.T
    scale = jnp.where(used, jnp.sqrt(jnp.diag(gram)), 1.0)
    scale = jnp.where(scale > 0, scale, 1.0)
    ridge = jnp.sqrt(jnp.finfo(r.dtype).eps)
    system = gram / jnp.outer(scale, scale) + jnp.diag(jnp.where(used, ridge, 1.0))
    beta = _small_spd_solve(system, (rows @ r) / scale)
    return jnp.where(used, beta / scale, 0.0)


def _small_spd_solve(A: Array, b: Array) -> Array:
    """A^-1 b for a small symmetric positive definite A, by a Cholesky factorisation unrolled over its size."""
    m = A.shape[0]
    L = [[None] * m for _ in range(m)]
    for j in range(m):
        L[j][j] = jnp.sqrt(A[j, j] - sum(L[j][k] ** 2 for k in range(j)))
        for i in range(j + 1, m):
            L[i][j] = (A[i, j] - sum(L[i][k] * L[j][k] for k in range(j))) / L[j][j]
    z = [None] * m
    for i in range(m):
        z[i] = (b[i] - sum(L[i][k] * z[k] for k in range(i))) / L[i][i]
    x = [None] * m
    for i in reversed(range(m)):
        x[i] = (z[i] - sum(L[k][i] * x[k] for k in range(i + 1, m))) / L[i][i]
    return jnp.stack(x)
