"""Stationary kernels."""

import equinox as eqx
import jax.numpy as jnp
from jax import lax

from .._types import Array, Float
from .._validation import as_float
from ._base import (
    AbstractKernel,
    check_lengthscale,
    check_lengthscale_shape,
    check_scalar,
    check_variance,
)


class SquaredExponential(AbstractKernel):
    """k(x, x') = variance * exp(-|x - x'|^2 / (2 lengthscale^2))  (GPML eq. 2.16).

    ``lengthscale`` is a scalar (isotropic) or has shape (d,) for automatic
    relevance determination (one length scale per input dimension, GPML eq. 5.1).
    """

    variance: Float[Array, ""] = eqx.field(converter=as_float, default=1.0)
    lengthscale: Float[Array, "*d"] = eqx.field(converter=as_float, default=1.0)

    def evaluate(self, x1, x2):
        self._check_shapes(x1.shape[-1])
        r = (x1 - x2) / self.lengthscale
        return self.variance * jnp.exp(-0.5 * jnp.sum(r**2))

    def gram(self, X1, X2=None):
        self._check_shapes(X1.shape[-1])
        if jnp.ndim(self.lengthscale) == 0:
            # Isotropic: distances of the unscaled inputs, then / l^2.  They do not depend on the
            # hyperparameters (a fit's loop computes them once) and the derivative in l is elementwise,
            # where scaling the inputs first puts an n m d matrix product into every gradient.
            sq = squared_distances(X1, X2) / self.lengthscale**2
        else:
            sq = squared_distances(X1, X2, scale=self.lengthscale)
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


def squared_distances(X1: Float[Array, "n d"], X2: Float[Array, "m d"] | None = None, scale=None
                      ) -> Float[Array, "n m"]:
    """|x1_i - x2_j|^2 through one matrix product (|a|^2 + |b|^2 - 2 a.b): O(n m d) time and O(n m)
    memory, where vmapping over pairs would materialise n m d.  ``X2=None`` means X1, with an exact zero
    diagonal; rounding's tiny negative values are clipped to 0.

    With ``scale`` (ARD length scales, shape (d,)), the distances of X / scale; the inputs are centred
    before they are scaled, since X / scale would round a large common offset into the differences.

    Both inputs are first centred on the midrange of X1 (:func:`centred`), which leaves every difference
    unchanged: the expansion cancels |a|^2 against 2 a.b, so without it a common offset c of the inputs
    costs eps |c|^2 of absolute accuracy (in float64 an offset of 1e8 leaves no correct digit of a
    distance of order 1; in float32 an offset of 1e3 already moves log q by 0.02).

    The centred inputs pass an ``optimization_barrier``: inputs that are constants of the program (data
    closed over by a jitted function) would otherwise have their distances computed by XLA's constant
    folding, 4.5 s of compile time at n = 1000, d = 256 (against 1.1 s for the whole value and gradient of
    log q).
    """
    X1, B = centred(X1, X2)
    if scale is not None:
        X1, B = X1 / scale, None if B is None else B / scale
    X1, B = lax.optimization_barrier((X1, B))
    B = X1 if B is None else B
    sq = jnp.sum(X1**2, axis=1)[:, None] + jnp.sum(B**2, axis=1)[None, :] - 2.0 * X1 @ B.T
    sq = jnp.maximum(sq, 0.0)
    if X2 is None:
        sq = sq * (1.0 - jnp.eye(sq.shape[0], dtype=sq.dtype))
    return sq


def centred(X1: Float[Array, "n d"], X2: Float[Array, "m d"] | None = None):
    """(X1 - c, X2 - c) with c the midpoint of the range of each column of X1 (``X2=None`` stays None): the
    same differences, and every centred coordinate of X1 at most half its column's range.

    c = (min + max) * 0.5: the halving is exact, so whether the compiler contracts ``x - c`` into a fused
    multiply-add or not, each fusion that recomputes the centring gets the same bits.  (With the mean,
    sum * (1/n), it did not: the a in |a|^2 and in a.b then differed by a rounding of the offset.)  c is
    held constant for differentiation (the differences do not depend on it), so gradients with respect to
    the inputs (inducing inputs) are those of the differences themselves.
    """
    if X1.shape[0] == 0:  # no rows (an empty test set): nothing to centre on
        return X1, X2
    c = lax.stop_gradient((jnp.min(X1, axis=0) + jnp.max(X1, axis=0)) * 0.5)
    return X1 - c, None if X2 is None else X2 - c
