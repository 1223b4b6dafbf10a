"""L-BFGS in a box with a strong-Wolfe zoom line search, driven one objective evaluation at a time.

The caller evaluates the objective (value and gradient) at ``trial(z, search)``
and passes the result to ``observe``; nothing here calls the objective.  A fit
loop built this way holds the objective, an inner solve and its adjoint,
exactly once in its compiled program, where a line search that calls the
objective itself (optax's zoom) inlines it at every call site.

Direction.  optax's ``scale_by_lbfgs`` two-loop recursion applied to the
projected gradient, skipping curvature pairs with s^T y <= 0 (Nocedal &
Wright, sec. 7.2), then made box-aware in the manner of L-BFGS-B without its
Cauchy point: zeroed where it would leave the box at a bound, and shortened so
that the full step z + d stays in the box, so a coordinate lands on its bound
exactly.  A direction that is not a descent direction (possible after the
zeroing) is replaced by steepest descent from a fresh memory.

Line search.  Nocedal & Wright's Algorithms 3.5 (bracketing) and 3.6 (zoom)
for phi(t) = f(z + t d) on 0 < t <= 1 with the first trial t = 1 (the largest
step), cubic interpolation (their eq. 3.59) safeguarded to the inner 80% of
the interval, bisection towards an infeasible end (f = inf).  Strong Wolfe:
phi(t) <= phi(0) + c1 t phi'(0) and |phi'(t)| <= c2 |phi'(0)|.  At t = 1
with sufficient decrease and phi'(1) < 0 the step is taken (it cannot grow).
After ``max_trials`` trials or a vanishing interval, the best point with
sufficient decrease is taken if there is one; otherwise the search has found
nothing (the caller then restarts the memory).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
import optax

from . import _box as box

C1, C2 = 1e-4, 0.9


class ZoomSearch(NamedTuple):
    """A line search along ``direction`` from the accepted point (value0, slope0 = g . d)."""

    direction: jax.Array
    value0: jax.Array
    slope0: jax.Array
    t: jax.Array  # the step of the pending trial
    bracketed: jax.Array
    t_lo: jax.Array  # best step so far with sufficient decrease (0: the accepted point)
    f_lo: jax.Array
    s_lo: jax.Array
    grad_lo: jax.Array
    aux_lo: object
    t_hi: jax.Array  # other end of the bracket
    f_hi: jax.Array
    s_hi: jax.Array
    count: jax.Array


class BoxLBFGS:
    """L-BFGS in the box [lo, hi] of every free coordinate; see the module docstring.

    The protocol of ``gpclass.fit``'s loop: ``initial`` is a search whose trial
    is the starting point; ``begin`` starts a search from an accepted point
    (given its active set);
    ``trial(z, search)`` is the point to evaluate next; ``observe`` takes that
    evaluation and returns the new search, whether the step is ``done``,
    whether it ``found`` a point of sufficient decrease, and that point's
    (z, value, grad, aux).  ``monotone``: a step must lower the objective.
    """

    monotone = True

    def __init__(self, lo: float, hi: float, memory_size: int = 10, max_trials: int = 20):
        self.lo, self.hi, self.max_trials = lo, hi, max_trials
        self._lbfgs = optax.scale_by_lbfgs(memory_size=memory_size)

    def memory_init(self, z):
        return self._lbfgs.init(z)

    def initial(self, z, value, grad, aux):
        """A search whose trial is z itself (t = 0)."""
        search = self._search(jnp.zeros_like(z), value, jnp.zeros_like(value), grad, aux)
        return search._replace(t=jnp.zeros_like(value))

    def begin(self, z, value, grad, active, memory, aux, value_fn=None):
        """A search along the L-BFGS direction for the projected gradient (steepest descent if it does not descend);
        ``active``: the coordinates held at a bound (``_box.active_set``)."""
        del value_fn
        pgrad = box.projected(grad, active)
        d, new_memory = self._lbfgs.update(pgrad, _skip_negative_curvature(memory, z, pgrad), z)
        d = box.truncate(optax.tree.scale(-1.0, d), z, grad, self.lo, self.hi)
        steepest = optax.tree.scale(-jnp.minimum(1.0, 1.0 / optax.tree.norm(pgrad)), pgrad)
        steepest = box.truncate(steepest, z, grad, self.lo, self.hi)
        descends = optax.tree.vdot(grad, d) < 0
        d = optax.tree.where(descends, d, steepest)
        memory = optax.tree.where(descends, new_memory, self._lbfgs.init(z))
        return self._search(d, value, optax.tree.vdot(grad, d), grad, aux), memory

    def _search(self, d, value, slope, grad, aux):
        one, zero = jnp.ones_like(value), jnp.zeros_like(value)
        return ZoomSearch(
            direction=d, value0=value, slope0=slope, t=one, bracketed=jnp.asarray(False),
            t_lo=zero, f_lo=value, s_lo=slope, grad_lo=grad, aux_lo=aux,
            t_hi=one, f_hi=jnp.full_like(value, jnp.inf), s_hi=jnp.full_like(value, jnp.nan), count=jnp.asarray(0),
        )

    def trial(self, z, search):
        return box.snap(optax.tree.add_scale(z, search.t, search.direction), self.lo, self.hi)

    def observe(self, z, s: ZoomSearch, value, grad, aux):
        """Algorithms 3.5 and 3.6 of Nocedal & Wright, one trial at a time."""
        t, slope = s.t, optax.tree.vdot(grad, s.direction)
        sufficient = jnp.isfinite(value) & jnp.isfinite(slope) & (value <= s.value0 + C1 * t * s.slope0)
        higher = ~sufficient | (value >= s.f_lo)
        wolfe = ~higher & (jnp.abs(slope) <= C2 * jnp.abs(s.slope0))
        accept = wolfe | (~s.bracketed & ~higher & (slope < 0))  # at t = 1 and descending: the step cannot grow
        # t becomes the high end, or the low end (the old low end becoming the high one when the slope at t
        # points back towards it).
        flip = ~higher & (slope * (s.t_hi - s.t_lo) >= 0)
        t_hi, f_hi, s_hi = optax.tree.where(
            higher, (t, value, slope), optax.tree.where(flip, (s.t_lo, s.f_lo, s.s_lo), (s.t_hi, s.f_hi, s.s_hi))
        )
        t_lo, f_lo, s_lo, grad_lo, aux_lo = optax.tree.where(
            higher, (s.t_lo, s.f_lo, s.s_lo, s.grad_lo, s.aux_lo), (t, value, slope, grad, aux)
        )
        count = s.count + 1
        vanished = jnp.abs(t_hi - t_lo) <= 16 * jnp.finfo(t.dtype).eps
        done = accept | (count >= self.max_trials) | vanished
        found = accept | (t_lo > 0)
        t_best, value, grad, aux = optax.tree.where(accept, (t, value, grad, aux), (t_lo, f_lo, grad_lo, aux_lo))
        chosen = (self.trial(z, s._replace(t=t_best)), value, grad, aux)
        search = s._replace(
            t=_next_step(t_lo, f_lo, s_lo, t_hi, f_hi, s_hi), bracketed=jnp.asarray(True),
            t_lo=t_lo, f_lo=f_lo, s_lo=s_lo, grad_lo=grad_lo, aux_lo=aux_lo,
            t_hi=t_hi, f_hi=f_hi, s_hi=s_hi, count=count,
        )
        return search, done, found, chosen


def _next_step(a, fa, sa, b, fb, sb):
    """The minimiser of the cubic through (a, fa, sa), (b, fb, sb) (Nocedal & Wright eq. 3.59), kept in the
    inner 80% of [a, b]; the midpoint when an end is infeasible or the cubic has no minimiser."""
    d1 = sa + sb - 3.0 * (fa - fb) / (a - b)
    radicand = d1 * d1 - sa * sb
    d2 = jnp.sign(b - a) * jnp.sqrt(jnp.maximum(radicand, 0.0))
    cubic = b - (b - a) * (sb + d2 - d1) / (sb - sa + 2.0 * d2)
    low, high = jnp.minimum(a, b), jnp.maximum(a, b)
    margin = 0.1 * (high - low)
    usable = jnp.isfinite(cubic) & (radicand >= 0) & jnp.isfinite(fb) & jnp.isfinite(sb)
    return jnp.where(usable, jnp.clip(cubic, low + margin, high - margin), 0.5 * (a + b))


def _skip_negative_curvature(memory, z, pgrad):
    """The memory with the pair (s, y) = (z - z_prev, g - g_prev) recorded as zero when s^T y <= 0: optax keeps
    every pair, and one of negative curvature makes the next direction point uphill."""
    s = optax.tree.sub(z, memory.params)
    y = optax.tree.sub(pgrad, memory.updates)
    sy, ss, yy = optax.tree.vdot(s, y), optax.tree.vdot(s, s), optax.tree.vdot(y, y)
    skip = sy <= 1e-10 * jnp.sqrt(ss * yy)
    return memory._replace(
        params=optax.tree.where(skip, z, memory.params), updates=optax.tree.where(skip, pgrad, memory.updates)
    )
