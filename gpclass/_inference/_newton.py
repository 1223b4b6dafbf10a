"""Damped Newton iterations to a posterior mode, shared by binary and multi-class Laplace.

Both problems maximise a concave Psi(a) = log p(y|K a) - 1/2 a^T K a in the
variable a = K^-1 f (GPML eqs. 3.12 and 3.35); they differ only in how Psi and
the Newton direction are computed (GPML Algorithms 3.1 and 3.3).  The loop
runs in ``lax.while_loop`` and halves a step until Psi does not decrease
beyond its rounding level, which guarantees progress for a concave Psi.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax.numpy as jnp
from jax import lax

from .._iterate import all_finite, iterate, relative_change
from .._types import Array


class _Newton(NamedTuple):
    """The current point a, f = K a and Psi(a); the last full step's relative size in f and how it ended."""

    a: Array
    f: Array
    psi: Array
    change: Array
    converged: Array
    stalled: Array


def newton(
    psi: Callable[[Array], tuple[Array, Array]],
    direction: Callable[[Array, Array], tuple[Array, Array]],
    a0: Array,
    *,
    tol: float | None,
    max_steps: int,
    max_halvings: int,
    until_unresolved: bool = False,
):
    """Maximise Psi from a0; returns (f^, a^, steps, status, size of the last full step).

    Args:
        psi: ``psi(a) -> (Psi(a), f = K a)``.
        direction: ``direction(a, f) -> (Newton step in a, rounding level of Psi at a)``.
        a0: the starting point (any shape: (n,) binary, (n, C) multi-class).
        tol: stop when the full Newton step changes f by at most
            ``tol * (1 + max|f|)`` in every component (that step is then taken);
            ``None`` means sqrt(machine epsilon).
        max_steps, max_halvings: iteration limits.
        until_unresolved: also stop (as converged) after a step that needed
            halving or raised Psi by no more than its rounding level: as far
            as a lower-precision start should go.  Where the kernel is stiff
            its directions are poor, and it would otherwise run on with
            halved steps and no resolvable progress.
    """
    eps = jnp.finfo(a0.dtype).eps
    tol = jnp.sqrt(eps) if tol is None else tol

    def rounding(psi_now, noise):
        return 8.0 * (noise + eps * jnp.abs(psi_now))

    def acceptable(psi_t, psi_now, noise):
        # Psi must not decrease beyond its rounding level: near the mode a Newton
        # step of size delta changes Psi by O(delta^2), below what Psi resolves.
        return psi_t >= psi_now - rounding(psi_now, noise)

    def step(s: _Newton) -> _Newton:
        da, noise = direction(s.a, s.f)
        psi_t, f_t = psi(s.a + da)
        # Converged when the full Newton step is small (then it is taken whatever
        # Psi says, as Psi cannot resolve such a step); otherwise halve the step
        # until Psi does not decrease: the Newton direction ascends Psi (concave
        # for log-concave likelihoods), so some t in {1, 1/2, 1/4, ...} works.
        change = relative_change(f_t, s.f)
        small = change <= tol

        def halve(h):
            t, _, _, k = h
            psi_t, f_t = psi(s.a + 0.5 * t * da)
            return 0.5 * t, psi_t, f_t, k + 1

        t, psi_t, f_t, _ = lax.while_loop(
            lambda h: ~small & ~acceptable(h[1], s.psi, noise) & (h[3] < max_halvings),
            halve,
            (jnp.ones((), s.a.dtype), psi_t, f_t, 0),
        )
        accepted = small | acceptable(psi_t, s.psi, noise)
        keep = lambda new, old: jnp.where(accepted, new, old)  # noqa: E731
        done = small
        if until_unresolved:
            done = done | (accepted & ((t < 1) | (psi_t <= s.psi + rounding(s.psi, noise))))
        # A step that cannot be accepted at any length ends the iterations unconverged (stalled).
        return _Newton(keep(s.a + t * da, s.a), keep(f_t, s.f), keep(psi_t, s.psi), change,
                       done & jnp.isfinite(psi_t), ~accepted)

    psi0, f0 = psi(a0)
    false = jnp.asarray(False)
    start = _Newton(a0, f0, psi0, jnp.asarray(jnp.inf, a0.dtype), false, false)
    end = iterate(step, lambda s: (s.converged, s.stalled), start, max_steps=max_steps,
                  finite=lambda s: all_finite(s.f))
    return end.state.f, end.state.a, end.num_steps, end.status, end.state.change


def better_start(psi: Callable[[Array], tuple[Array, Array]], a_init, dtype) -> Array:
    """A warm start a_init unless a = 0 (f = 0) has the larger Psi (as GPML's ``infLaplace`` does)."""
    a_init = jnp.asarray(a_init, dtype=dtype)
    zero = jnp.zeros_like(a_init)
    return jnp.where(psi(a_init)[0] > psi(zero)[0], a_init, zero)
