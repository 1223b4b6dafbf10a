"""Damped Newton iterations to a posterior mode, shared by binary and multi-class Laplace.

Both problems maximise a concave Psi(a) = log p(y|K a) - 1/2 a^T K a in the
variable a = K^-1 f (GPML eqs. 3.12 and 3.35); they differ only in how Psi and
the Newton direction are computed (GPML Algorithms 3.1 and 3.3).  The loop
runs in ``lax.while_loop`` and halves a step until Psi does not decrease
beyond its rounding level, which guarantees progress for a concave Psi.
"""

from collections.abc import Callable

import jax.numpy as jnp
from jax import lax

from .._types import Array


def newton(
    psi: Callable[[Array], tuple[Array, Array]],
    direction: Callable[[Array, Array], tuple[Array, Array]],
    a0: Array,
    *,
    rtol: float | None,
    max_steps: int,
    max_halvings: int,
):
    """Maximise Psi from a0; returns (f^, a^, steps, converged, size of the last full step).

    Args:
        psi: ``psi(a) -> (Psi(a), f = K a)``.
        direction: ``direction(a, f) -> (Newton step in a, rounding level of Psi at a)``.
        a0: the starting point (any shape: (n,) binary, (n, C) multi-class).
        rtol: stop when the full Newton step changes f by at most
            ``rtol * (1 + max|f|)`` in every component (that step is then taken);
            ``None`` means sqrt(machine epsilon).
        max_steps, max_halvings: iteration limits.
    """
    eps = jnp.finfo(a0.dtype).eps
    rtol = jnp.sqrt(eps) if rtol is None else rtol
    psi0, f0 = psi(a0)

    def acceptable(psi_t, psi_now, noise):
        # Psi must not decrease beyond its rounding level: near the mode a Newton
        # step of size delta changes Psi by O(delta^2), below what Psi resolves.
        return psi_t >= psi_now - 8.0 * (noise + eps * jnp.abs(psi_now))

    def halve(state):
        t, _, _, k, da, a, psi_now, noise = state
        t = 0.5 * t
        psi_t, f_t = psi(a + t * da)
        return t, psi_t, f_t, k + 1, da, a, psi_now, noise

    def step(state):
        a, f, psi_now, i, _, _, _ = state
        da, noise = direction(a, f)
        psi_t, f_t = psi(a + da)
        # Converged when the full Newton step is small (then it is taken whatever
        # Psi says, as Psi cannot resolve such a step); otherwise halve the step
        # until Psi does not decrease: the Newton direction ascends Psi (concave
        # for log-concave likelihoods), so some t in {1, 1/2, 1/4, ...} works.
        change = jnp.max(jnp.abs(f_t - f)) / (1.0 + jnp.max(jnp.abs(f_t)))
        small = change <= rtol
        t, psi_t, f_t, *_ = lax.while_loop(
            lambda s: ~small & ~acceptable(s[1], s[6], s[7]) & (s[3] < max_halvings),
            halve,
            (jnp.ones((), a.dtype), psi_t, f_t, 0, da, a, psi_now, noise),
        )
        accepted = small | acceptable(psi_t, psi_now, noise)
        a_next = jnp.where(accepted, a + t * da, a)
        f_next = jnp.where(accepted, f_t, f)
        psi_next = jnp.where(accepted, psi_t, psi_now)
        converged = small & jnp.isfinite(psi_t)
        # A step that cannot be accepted at any length ends the iterations unconverged.
        return a_next, f_next, psi_next, i + 1, converged | ~accepted, converged, change

    def keep_going(state):
        _, _, _, i, done, _, _ = state
        return ~done & (i < max_steps)

    false = jnp.asarray(False)
    inf = jnp.asarray(jnp.inf, a0.dtype)
    a, f, _, steps, _, converged, change = lax.while_loop(keep_going, step, (a0, f0, psi0, 0, false, false, inf))
    return f, a, steps, converged, change
