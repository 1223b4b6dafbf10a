"""A box [lo, hi] on every free coordinate: bounds, projections and the active set.

Free coordinates are log hyperparameters (or log-odds), one vector (``gpc.fit``
ravels them); ``lo`` and ``hi`` are Python floats or arrays (numpy, or traced
for per-parameter bounds given as arrays) of one bound per coordinate, +-inf
where a coordinate has no box (no ``bounds``, or an unconstrained parameter
such as an inducing input).  A
coordinate at a bound whose descent direction (-gradient) leaves the box is
*active*: held fixed, its gradient component zeroed (the projected gradient).

Every function works on traced arrays (``jax.numpy``: ``gpc.fit``'s optimiser
inside a compiled program) and on NumPy arrays (the same optimiser stepping on
the host between evaluations of a compiled objective): :func:`namespace`.
"""

import jax
import jax.numpy as jnp
import numpy as np


def namespace(*arrays):
    """``jax.numpy`` if any argument is a JAX array (traced or not), else NumPy: the optimiser's arithmetic on
    its few free coordinates runs in whichever holds them."""
    return jnp if any(isinstance(a, jax.Array) for a in arrays) else np


def set_at(a, i, value):
    """``a`` with ``a[i] = value``, a new array: ``.at[i].set`` for JAX arrays, a copy for NumPy ones."""
    if isinstance(a, jax.Array):
        return a.at[i].set(value)
    a = a.copy()
    a[int(i)] = value
    return a


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
    tol, xp = tolerance(z, lo, hi), namespace(z, lo, hi)
    return xp.where(z >= hi - tol, hi, xp.where(z <= lo + tol, lo, z)).astype(z.dtype)


def outside(z, lo, hi):
    """Whether any coordinate lies outside the box beyond rounding."""
    tol, xp = tolerance(z, lo, hi), namespace(z, lo, hi)
    return xp.any((z < lo - tol) | (z > hi + tol))


def any_at_bound(z, lo, hi):
    return namespace(z, lo, hi).any((z <= lo) | (z >= hi))


def active_set(z, grad, lo, hi):
    """Coordinates at a bound whose descent direction (-grad) leaves the box."""
    return ((z <= lo) & (grad > 0)) | ((z >= hi) & (grad < 0))


def projected(grad, active):
    """The gradient with its active components zeroed."""
    return namespace(grad, active).where(active, 0.0, grad).astype(grad.dtype)


def project(p, z, active, lo, hi):
    """Active coordinates frozen at z, the others clipped to the box (derivative 1 on the boundary)."""
    xp = namespace(p, z, active, lo, hi)
    return xp.where(active, z, xp.where(p > hi, hi, xp.where(p < lo, lo, p))).astype(p.dtype)


def truncate(d, z, grad, lo, hi):
    """The step d zeroed where it leaves the box at a bound (or the gradient points out there) and shortened so
    that z + d stays in the box: a coordinate reaches its bound at the full step."""
    xp = namespace(d, z, grad, lo, hi)
    blocked = ((z <= lo) & ((d < 0) | (grad > 0))) | ((z >= hi) & ((d > 0) | (grad < 0)))
    d = xp.where(blocked, 0.0, d).astype(d.dtype)
    t = xp.where(d > 0, (hi - z) / xp.where(d > 0, d, 1.0), xp.inf)
    t = xp.where(d < 0, (lo - z) / xp.where(d < 0, d, 1.0), t)
    return (xp.minimum(1.0, xp.min(t, initial=xp.inf)) * d).astype(d.dtype)
