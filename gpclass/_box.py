"""A box [lo, hi] on every free coordinate: bounds, projections and the active set.

Free coordinates are log hyperparameters (or log-odds), one vector (``gpc.fit``
ravels them); ``lo`` and ``hi`` are Python floats or arrays (numpy, or traced
for per-parameter bounds given as arrays) of one bound per coordinate, +-inf
where a coordinate has no box (no ``bounds``, or an unconstrained parameter
such as an inducing input).  A
coordinate at a bound whose descent direction (-gradient) leaves the box is
*active*: held fixed, its gradient component zeroed (the projected gradient).
"""

import jax
import jax.numpy as jnp
import numpy as np


def tolerance(z, lo, hi):
    """A few rounding errors of a free coordinate near the bounds (zero without bounds).  Bounds given as numbers
    or numpy arrays are worked out in numpy (float64, then the coordinates' dtype); traced ones (per-parameter
    bounds, ``gpc.fit``) in the coordinates' dtype."""
    xp = jnp if isinstance(lo, jax.Array) or isinstance(hi, jax.Array) else np
    work = z.dtype if xp is jnp else np.float64
    lo, hi = xp.asarray(lo, work), xp.asarray(hi, work)
    bounded = xp.isfinite(lo) & xp.isfinite(hi)
    scale = xp.where(bounded, xp.maximum(xp.abs(xp.where(bounded, lo, 0)), xp.abs(xp.where(bounded, hi, 0))), 0)
    return xp.where(bounded, 8 * float(jnp.finfo(z.dtype).eps) * (1.0 + scale), 0.0).astype(z.dtype)


def snap(z, lo, hi):
    """Coordinates within rounding of a bound put exactly on it (a full truncated step lands within an ulp or
    two of the bound, on either side), everything clipped to the box."""
    tol = tolerance(z, lo, hi)
    return jnp.where(z >= hi - tol, hi, jnp.where(z <= lo + tol, lo, z)).astype(z.dtype)


def outside(z, lo, hi):
    """Whether any coordinate lies outside the box beyond rounding."""
    tol = tolerance(z, lo, hi)
    return jnp.any((z < lo - tol) | (z > hi + tol))


def any_at_bound(z, lo, hi):
    return jnp.any((z <= lo) | (z >= hi))


def active_set(z, grad, lo, hi):
    """Coordinates at a bound whose descent direction (-grad) leaves the box."""
    return ((z <= lo) & (grad > 0)) | ((z >= hi) & (grad < 0))


def projected(grad, active):
    """The gradient with its active components zeroed."""
    return jnp.where(active, 0.0, grad).astype(grad.dtype)


def project(p, z, active, lo, hi):
    """Active coordinates frozen at z, the others clipped to the box (derivative 1 on the boundary)."""
    return jnp.where(active, z, jnp.where(p > hi, hi, jnp.where(p < lo, lo, p))).astype(p.dtype)


def truncate(d, z, grad, lo, hi):
    """The step d zeroed where it leaves the box at a bound (or the gradient points out there) and shortened so
    that z + d stays in the box: a coordinate reaches its bound at the full step."""
    blocked = ((z <= lo) & ((d < 0) | (grad > 0))) | ((z >= hi) & ((d > 0) | (grad < 0)))
    d = jnp.where(blocked, 0.0, d).astype(d.dtype)
    t = jnp.where(d > 0, (hi - z) / jnp.where(d > 0, d, 1.0), jnp.inf)
    t = jnp.where(d < 0, (lo - z) / jnp.where(d < 0, d, 1.0), t)
    return (jnp.minimum(1.0, jnp.min(t, initial=jnp.inf)) * d).astype(d.dtype)
