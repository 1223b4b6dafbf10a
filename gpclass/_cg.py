"""Conjugate gradients for a symmetric positive definite operator, on the iteration protocol of ``_iterate``.

Used where a dense factorisation per iteration would cost more than many
matrix products: the softmax Newton system (``_covariance/dense_classes.py``),
whose operator B = I + S K S^T has every eigenvalue >= 1.
"""

from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp

from ._iterate import AbstractIterativeSolver, Solution, all_finite, run
from ._types import Array, Int


class CGState(eqx.Module):
    x: Array
    r: Array
    p: Array
    rr: Array  # r . r


def _dot(a, b):
    return jnp.sum(a * b)


class ConjugateGradients(AbstractIterativeSolver):
    """Conjugate gradients for A x = b from x = 0 (Golub & Van Loan, Algorithm 11.3.2) on :func:`run`; the result
    is (x, number of products with A, status).  Converged when |r|^2 <= ``threshold``."""

    matvec: Callable[[Array], Array]
    b: Array
    threshold: Array
    max_steps: int

    def init(self) -> CGState:
        return CGState(jnp.zeros_like(self.b), self.b, self.b, _dot(self.b, self.b))

    def step(self, s: CGState) -> CGState:
        q = self.matvec(s.p)
        curvature = _dot(s.p, q)
        alpha = jnp.where(curvature > 0, s.rr / jnp.where(curvature > 0, curvature, 1.0), 0.0)
        x = s.x + alpha * s.p
        r = s.r - alpha * q
        rr = _dot(r, r)
        beta = jnp.where(s.rr > 0, rr / jnp.where(s.rr > 0, s.rr, 1.0), 0.0)
        return CGState(x, r, r + beta * s.p, rr)

    def terminate(self, s: CGState):
        return s.rr <= self.threshold, jnp.asarray(False)

    def finite(self, s: CGState):
        return all_finite(s.x)

    def postprocess(self, solution: Solution):
        return solution.state.x, solution.num_steps, solution.status


def conjugate_gradients(
    matvec: Callable[[Array], Array], b: Array, *, tol: float, max_steps: int
) -> tuple[Array, Int[Array, ""], Int[Array, ""]]:
    """Solve A x = b from x = 0 for an SPD operator A (Golub & Van Loan, Algorithm 11.3.2); arrays of any shape.

    Stops when the residual |b - A x| is at most ``tol |b|`` (``Status.CONVERGED``)
    or after ``max_steps`` products (``Status.MAX_STEPS``).  Every iterate x_k
    minimises the A-norm of the error over the Krylov space, so even an
    unconverged x_k solves the system better than x_{k-1} did.

    Returns:
        (x, number of products with A, status).
    """
    return run(ConjugateGradients(matvec, b, tol**2 * _dot(b, b), max_steps))
