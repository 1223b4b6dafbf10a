"""A box [lo, hi] on every free coordinate of a pytree: bounds, projections and the active set.

Free coordinates are log hyperparameters (or log-odds); ``lo`` and ``hi`` are
Python floats, +-inf without a box.  A coordinate at a bound whose descent
direction (-gradient) leaves the box is *active*: held fixed, its gradient
component zeroed (the projected gradient).
"""

import math

import jax
import jax.numpy as jnp


def tolerance(x, lo, hi):
    """A few rounding errors of a free coordinate near the bounds (zero without bounds)."""
    if not math.isfinite(lo):
        return 0.0
    return 8 * float(jnp.finfo(x.dtype).eps) * (1.0 + max(abs(lo), abs(hi)))


def snap(z, lo, hi):
    """Coordinates within rounding of a bound put exactly on it (a full truncated step lands within an ulp or
    two of the bound, on either side), everything clipped to the box."""

    def snap_leaf(x):
        tol = tolerance(x, lo, hi)
        return jnp.where(x >= hi - tol, hi, jnp.where(x <= lo + tol, lo, x)).astype(x.dtype)

    return jax.tree.map(snap_leaf, z)


def outside(z, lo, hi):
    """Whether any coordinate lies outside the box beyond rounding."""
    return any_leaf(jax.tree.map(lambda x: (x < lo - tolerance(x, lo, hi)) | (x > hi + tolerance(x, lo, hi)), z))


def at_bound(z, lo, hi):
    return jax.tree.map(lambda x: (x <= lo) | (x >= hi), z)


def active_set(z, grad, lo, hi):
    """Coordinates at a bound whose descent direction (-grad) leaves the box."""
    return jax.tree.map(lambda x, g: ((x <= lo) & (g > 0)) | ((x >= hi) & (g < 0)), z, grad)


def projected(grad, active):
    """The gradient with its active components zeroed."""
    return jax.tree.map(lambda g, a: jnp.where(a, 0.0, g).astype(g.dtype), grad, active)


def project(p, z, active, lo, hi):
    """Active coordinates frozen at z, the others clipped to the box (derivative 1 on the boundary)."""
    return jax.tree.map(
        lambda p, x, a: jnp.where(a, x, jnp.where(p > hi, hi, jnp.where(p < lo, lo, p))).astype(p.dtype),
        p, z, active,
    )


def truncate(d, z, grad, lo, hi):
    """The step d zeroed where it leaves the box at a bound (or the gradient points out there) and shortened so
    that z + d stays in the box: a coordinate reaches its bound at the full step."""

    def blocked(d, x, g):
        return ((x <= lo) & ((d < 0) | (g > 0))) | ((x >= hi) & ((d > 0) | (g < 0)))

    d = jax.tree.map(lambda d, x, g: jnp.where(blocked(d, x, g), 0.0, d).astype(d.dtype), d, z, grad)

    def largest_step(d, x):
        t = jnp.where(d > 0, (hi - x) / jnp.where(d > 0, d, 1.0), jnp.inf)
        t = jnp.where(d < 0, (lo - x) / jnp.where(d < 0, d, 1.0), t)
        return jnp.min(t, initial=jnp.inf)

    t_max = jnp.min(jnp.stack([largest_step(d, x) for d, x in zip(jax.tree.leaves(d), jax.tree.leaves(z))]))
    scale = jnp.minimum(1.0, t_max)
    return jax.tree.map(lambda d: (scale * d).astype(d.dtype), d)


def max_abs(tree):
    return jnp.max(jnp.stack([jnp.max(jnp.abs(g)) for g in jax.tree.leaves(tree)]))


def any_leaf(tree):
    return jnp.any(jnp.stack([jnp.any(b) for b in jax.tree.leaves(tree)]))


def all_finite(tree):
    return jnp.all(jnp.stack([jnp.all(jnp.isfinite(g)) for g in jax.tree.leaves(tree)]))
