"""Stationary kernels."""

import equinox as eqx
import jax.numpy as jnp

from .._types import Array, Float
from ._base import (
    AbstractKernel,
    check_lengthscale,
    check_lengthscale_shape,
    check_scalar,
    check_variance,
    positive,
)


class SquaredExponential(AbstractKernel):
    """k(x, x') = variance * exp(-|x - x'|^2 / (2 lengthscale^2))  (GPML eq. 2.16).

    ``lengthscale`` is a scalar (isotropic) or has shape (d,) for automatic
    relevance determination (one length scale per input dimension, GPML eq. 5.1).
    """

    variance: Float[Array, ""] = eqx.field(converter=positive, default=1.0)
    lengthscale: Float[Array, "*d"] = eqx.field(converter=positive, default=1.0)

    def evaluate(self, x1, x2):
        self._check_shapes(x1.shape[-1])
        r = (x1 - x2) / self.lengthscale
        return self.variance * jnp.exp(-0.5 * jnp.sum(r**2))

    def gram(self, X1, X2=None):
        # |a - b|^2 = |a|^2 + |b|^2 - 2 a.b through one matrix product: O(n m d)
        # time and O(n m) memory, where vmapping `evaluate` would materialise n m d.
        self._check_shapes(X1.shape[-1])
        A = X1 / self.lengthscale
        B = A if X2 is None else X2 / self.lengthscale
        sq = jnp.sum(A**2, axis=1)[:, None] + jnp.sum(B**2, axis=1)[None, :] - 2.0 * A @ B.T
        # Rounding can leave tiny negative squared distances; distances are >= 0 exactly.
        sq = jnp.maximum(sq, 0.0)
        if X2 is None:
            sq = sq * (1.0 - jnp.eye(sq.shape[0], dtype=sq.dtype))
        return self.variance * jnp.exp(-0.5 * sq)

    def diag(self, X):
        self._check_shapes(X.shape[-1])
        return jnp.broadcast_to(self.variance, X.shape[:1]).astype(X.dtype)

    def parameter_checks(self, checks):
        check_variance(self, checks)
        check_lengthscale(self, checks)

    def _check_shapes(self, num_dims: int) -> None:
        check_scalar(self, "variance")
        check_lengthscale_shape(self, num_dims)
