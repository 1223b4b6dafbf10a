"""L-BFGS in a box with a strong-Wolfe zoom line search, driven one objective evaluation at a time.

The caller evaluates the objective (value and gradient) at ``trial(z, search)``
and passes the result to ``observe``; nothing here calls the objective.  A fit
loop built this way holds the objective, an inner solve and its adjoint,
exactly once in its compiled program, where a line search that calls the
objective itself (optax's zoom) inlines it at every call site; and the same
code steps on the host between calls of a compiled objective (NumPy arrays:
``_box.namespace``; ``gpc.fit`` called from Python).

Direction.  The L-BFGS two-loop recursion (Nocedal & Wright, Algorithm 7.4,
with optax's ``scale_by_lbfgs`` conventions: gamma = s^T y / y^T y, the first
step scaled by min(1, 1 / |g|)) applied to the projected gradient, skipping
curvature pairs with s^T y <= 0 (Nocedal &
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
import numpy as np
import optax

from . import _box as box

C1, C2 = 1e-4, 0.9


def select(condition, on_true, on_false):
    """``on_true`` where ``condition`` holds, else ``on_false`` (pytrees of one structure): ``optax.tree.where``
    for a traced condition, Python's choice for a concrete one (the host loop: no array operation at all, and the
    chosen leaves, device arrays among them, are passed on as they are)."""
    if isinstance(condition, jax.Array):
        return optax.tree.where(condition, on_true, on_false)
    return on_true if bool(condition) else on_false


class LBFGSMemory(NamedTuple):
    """The last ``m`` curvature pairs, as optax's ``ScaleByLBFGSState``: differences of the points
    (``diff_params``) and of the projected gradients (``diff_updates``), one row each, with weights
    1 / (s^T y) (0 for an empty or skipped pair), the last point and gradient, and the number of updates."""

    count: jax.Array
    params: jax.Array
    updates: jax.Array
    diff_params: jax.Array
    diff_updates: jax.Array
    weights: jax.Array


def lbfgs_init(z, memory_size: int) -> LBFGSMemory:
    xp = box.namespace(z)
    zeros = xp.zeros((memory_size,) + z.shape, z.dtype)
    return LBFGSMemory(xp.asarray(0, xp.int32), xp.zeros_like(z), xp.zeros_like(z), zeros, zeros,
                       xp.zeros(memory_size, z.dtype))


def lbfgs_update(g, memory: LBFGSMemory, z):
    """(H g, the memory with the pair (z - z_prev, g - g_prev) recorded): optax's ``scale_by_lbfgs`` update (its
    memory layout, weights and scaling gamma of the identity), Nocedal & Wright's Algorithm 7.4."""
    xp = box.namespace(g, z, memory.weights)
    m = memory.weights.shape[0]
    started = memory.count > 0
    s, y = z - memory.params, g - memory.updates
    sy = xp.vdot(y, s)
    weight = xp.where(sy == 0.0, 0.0, 1.0 / xp.where(sy == 0.0, 1.0, sy))
    s, y, weight = xp.where(started, s, 0.0), xp.where(started, y, 0.0), xp.where(started, weight, 0.0)
    previous = (memory.count - 1) % m
    diff_params = box.set_at(memory.diff_params, previous, s.astype(z.dtype))
    diff_updates = box.set_at(memory.diff_updates, previous, y.astype(z.dtype))
    weights = box.set_at(memory.weights, previous, weight.astype(memory.weights.dtype))
    yy = xp.vdot(y, y)
    gamma = xp.where(yy > 0.0, xp.vdot(y, s) / xp.where(yy > 0.0, yy, 1.0), 1.0)
    gamma = xp.where(started, gamma, xp.minimum(1.0, 1.0 / xp.sqrt(xp.vdot(g, g))))
    order = (memory.count % m + xp.arange(m)) % m  # oldest pair first

    def newest_first(q, i):
        alpha = weights[i] * xp.vdot(diff_params[i], q)
        return (q - alpha * diff_updates[i]).astype(q.dtype), alpha

    def oldest_first(r, i_alpha):
        i, alpha = i_alpha
        beta = weights[i] * xp.vdot(diff_updates[i], r)
        return (r + (alpha - beta) * diff_params[i]).astype(r.dtype), None

    q, alphas = _scan(newest_first, g, order, reverse=True)
    r, _ = _scan(oldest_first, (gamma * q).astype(g.dtype), (order, alphas))
    count = (memory.count + (memory.count < xp.iinfo(xp.int32).max)).astype(xp.int32)  # optax's safe increment
    return r, LBFGSMemory(count, z, g, diff_params, diff_updates, weights)


def _scan(f, carry, xs, reverse=False):
    """``lax.scan`` on traced arrays; the same loop in Python on NumPy ones."""
    if any(isinstance(x, jax.Array) for x in jax.tree.leaves((carry, xs))):
        return jax.lax.scan(f, carry, xs, reverse=reverse)
    length = len(jax.tree.leaves(xs)[0])
    ys = [None] * length
    for k in reversed(range(length)) if reverse else range(length):
        carry, ys[k] = f(carry, jax.tree.map(lambda x: x[k], xs))
    return carry, None if ys[0] is None else np.stack(ys)


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
        self.lo, self.hi, self.max_trials, self.memory_size = lo, hi, max_trials, memory_size

    def memory_init(self, z):
        return lbfgs_init(z, self.memory_size)

    def initial(self, z, value, grad, aux):
        """A search whose trial is z itself (t = 0)."""
        xp = box.namespace(z, value)
        search = self._search(xp.zeros_like(z), value, xp.zeros_like(value), grad, aux)
        return search._replace(t=xp.zeros_like(value))

    def begin(self, z, value, grad, active, memory, aux, value_fn=None):
        """A search along the L-BFGS direction for the projected gradient (steepest descent if it does not descend);
        ``active``: the coordinates held at a bound (``_box.active_set``)."""
        del value_fn
        xp = box.namespace(z, grad)
        pgrad = box.projected(grad, active)
        d, new_memory = lbfgs_update(pgrad, _skip_negative_curvature(memory, z, pgrad), z)
        d = box.truncate(-d, z, grad, self.lo, self.hi)
        steepest = (-xp.minimum(1.0, 1.0 / xp.sqrt(xp.vdot(pgrad, pgrad))) * pgrad).astype(pgrad.dtype)
        steepest = box.truncate(steepest, z, grad, self.lo, self.hi)
        descends = xp.vdot(grad, d) < 0
        d = xp.where(descends, d, steepest)
        memory = select(descends, new_memory, self.memory_init(z))
        return self._search(d, value, xp.vdot(grad, d), grad, aux), memory

    def _search(self, d, value, slope, grad, aux):
        xp = box.namespace(d, value)
        one, zero = xp.ones_like(value), xp.zeros_like(value)
        return ZoomSearch(
            direction=d, value0=value, slope0=slope, t=one, bracketed=xp.asarray(False),
            t_lo=zero, f_lo=value, s_lo=slope, grad_lo=grad, aux_lo=aux,
            t_hi=one, f_hi=xp.full_like(value, xp.inf), s_hi=xp.full_like(value, xp.nan), count=xp.asarray(0),
        )

    def resolved(self, search, memory, level):
        """Whether ``search``, which found no progress, was along an L-BFGS direction (a memory of at least one
        curvature pair) whose quadratic model predicted a gain of at most ``level``: -1/2 g.d, the gain of the full
        step d = -H g for the model's H, is what a line search could find at best."""
        return (memory.count >= 2) & (-0.5 * search.slope0 <= level)

    def trial(self, z, search):
        return box.snap((z + search.t * search.direction).astype(z.dtype), self.lo, self.hi)

    def observe(self, z, s: ZoomSearch, value, grad, aux):
        """Algorithms 3.5 and 3.6 of Nocedal & Wright, one trial at a time."""
        xp = box.namespace(z, value, grad, s.direction)
        t, slope = s.t, xp.vdot(grad, s.direction)
        sufficient = xp.isfinite(value) & xp.isfinite(slope) & (value <= s.value0 + C1 * t * s.slope0)
        higher = ~sufficient | (value >= s.f_lo)
        wolfe = ~higher & (xp.abs(slope) <= C2 * xp.abs(s.slope0))
        accept = wolfe | (~s.bracketed & ~higher & (slope < 0))  # at t = 1 and descending: the step cannot grow
        # t becomes the high end, or the low end (the old low end becoming the high one when the slope at t
        # points back towards it).
        flip = ~higher & (slope * (s.t_hi - s.t_lo) >= 0)
        t_hi, f_hi, s_hi = select(
            higher, (t, value, slope), select(flip, (s.t_lo, s.f_lo, s.s_lo), (s.t_hi, s.f_hi, s.s_hi))
        )
        t_lo, f_lo, s_lo, grad_lo, aux_lo = select(
            higher, (s.t_lo, s.f_lo, s.s_lo, s.grad_lo, s.aux_lo), (t, value, slope, grad, aux)
        )
        count = s.count + 1
        vanished = xp.abs(t_hi - t_lo) <= 16 * xp.finfo(t.dtype).eps
        done = accept | (count >= self.max_trials) | vanished
        found = accept | (t_lo > 0)
        t_best, value, grad, aux = select(accept, (t, value, grad, aux), (t_lo, f_lo, grad_lo, aux_lo))
        chosen = (self.trial(z, s._replace(t=t_best)), value, grad, aux)
        search = s._replace(
            t=_next_step(t_lo, f_lo, s_lo, t_hi, f_hi, s_hi), bracketed=xp.asarray(True),
            t_lo=t_lo, f_lo=f_lo, s_lo=s_lo, grad_lo=grad_lo, aux_lo=aux_lo,
            t_hi=t_hi, f_hi=f_hi, s_hi=s_hi, count=count,
        )
        return search, done, found, chosen


def _next_step(a, fa, sa, b, fb, sb):
    """The minimiser of the cubic through (a, fa, sa), (b, fb, sb) (Nocedal & Wright eq. 3.59), kept in the
    inner 80% of [a, b]; the midpoint when an end is infeasible or the cubic has no minimiser."""
    xp = box.namespace(a, fa, sa, b, fb, sb)
    d1 = sa + sb - 3.0 * (fa - fb) / (a - b)
    radicand = d1 * d1 - sa * sb
    d2 = xp.sign(b - a) * xp.sqrt(xp.maximum(radicand, 0.0))
    cubic = b - (b - a) * (sb + d2 - d1) / (sb - sa + 2.0 * d2)
    low, high = xp.minimum(a, b), xp.maximum(a, b)
    margin = 0.1 * (high - low)
    usable = xp.isfinite(cubic) & (radicand >= 0) & xp.isfinite(fb) & xp.isfinite(sb)
    return xp.where(usable, xp.clip(cubic, low + margin, high - margin), 0.5 * (a + b))


def _skip_negative_curvature(memory, z, pgrad):
    """The memory with the pair (s, y) = (z - z_prev, g - g_prev) recorded as zero when s^T y <= 0: optax keeps
    every pair, and one of negative curvature makes the next direction point uphill."""
    xp = box.namespace(z, pgrad, memory.params)
    s, y = z - memory.params, pgrad - memory.updates
    sy, ss, yy = xp.vdot(s, y), xp.vdot(s, s), xp.vdot(y, y)
    skip = sy <= 1e-10 * xp.sqrt(ss * yy)
    return memory._replace(params=xp.where(skip, z, memory.params), updates=xp.where(skip, pgrad, memory.updates))
