"""The linear solves of the site-based methods: a dense LU where the prior is a matrix, GMRES where it is not.

Newton steps on a fixed point p = T(p) (KL's sites, the Jaakkola-Jordan
bound's nu) and the implicit adjoint of every converged fixed point
(``_implicit``) solve with I - J, J = dT/dp.  A method describes I - J once
as a :class:`LinearMap`: its product (plain array operations, transposable)
and, where the prior covariance is a matrix, the matrix itself.  Formed, it
costs a few n x n products and one LU factorisation, and the solve is exact;
under a sparse prior it is never formed (n can be 10^6) and GMRES applies it,
O(n m^2) per product.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.flatten_util
import jax.numpy as jnp
import jax.scipy.sparse.linalg

from .. import _dense as dense
from .._types import Array


class LinearMap(NamedTuple):
    """x -> A x on trees shaped like the unknowns, and A as a matrix over their ``ravel_pytree`` order when it
    is cheap to form (``None`` otherwise)."""

    apply: Callable
    matrix: Callable[[], Array] | None = None


class Krylov(NamedTuple):
    """GMRES settings: restarted every ``restart`` products, at most ``restarts`` cycles, to relative residual
    ``tol``."""

    restart: int
    restarts: int
    tol: float


def solve(a: LinearMap, b, krylov: Krylov, *, transpose: bool = False):
    """A^-1 b (A^-T b with ``transpose``), b a tree: LU on ``a.matrix()`` if given, else GMRES from x0 = b."""
    if a.matrix is not None:
        flat, unravel = jax.flatten_util.ravel_pytree(b)
        A = a.matrix()
        return unravel(dense.solve(A.T if transpose else A, flat))
    apply = transposed(a.apply, b) if transpose else a.apply
    # One cycle (a Newton step's solve) builds its basis incrementally; several (an adjoint) restart in batches.
    method = "incremental" if krylov.restarts == 1 else "batched"
    x, _ = jax.scipy.sparse.linalg.gmres(apply, b, x0=b, restart=krylov.restart, maxiter=krylov.restarts,
                                         tol=krylov.tol, solve_method=method)
    return x


def transposed(linear, example):
    """The transpose of a linear function of trees shaped like ``example``, as a function of one tree."""
    transpose = jax.linear_transpose(linear, example)
    return lambda v: transpose(v)[0]


def identity_minus(n: int, J: Array) -> Array:
    """I - J for an n x n J."""
    return jnp.eye(n, dtype=J.dtype) - J
