"""A kernel for categorical (discrete) features."""

import equinox as eqx
import jax.numpy as jnp

from .._types import Array, Float
from .._validation import as_float
from ._base import AbstractKernel, check_lengthscale, check_lengthscale_shape


class CategoricalOverlap(AbstractKernel):
    """k(x, x') = exp(-1/2 sum_m [x_m != x'_m] / lengthscale_m^2)  (Kim & Ghahramani eq. 10).

    Kim & Ghahramani's distance for a discrete feature is d_m = 1 - delta(x_m,
    x'_m) with inverse length scale l_m = 1 / lengthscale_m^2: two inputs lose a
    factor exp(-l_m / 2) of correlation for each feature on which their
    categories differ.  It has no variance of its own: multiply it with a
    kernel that has one (``SquaredExponential`` on the continuous features, or
    ``Constant``).  ``lengthscale`` is a scalar or has one entry per feature
    (ARD); categories are any exactly representable numbers (codes).

    Example::

        >>> k = gpc.kernels.CategoricalOverlap(lengthscale=1.0)
        >>> X = jnp.array([[0.0, 1.0], [0.0, 2.0], [1.0, 2.0]])  # two categorical features, as codes
        >>> print(np.asarray(k.gram(X)).round(3))  # exp(-1/2) per feature that differs
        [[1.    0.607 0.368]
         [0.607 1.    0.607]
         [0.368 0.607 1.   ]]
        >>> k = gpc.kernels.Constant(2.0) * k  # a signal variance of 2
    """

    lengthscale: Float[Array, "*d"] = eqx.field(converter=as_float, default=1.0)

    def evaluate(self, x1, x2):
        check_lengthscale_shape(self, x1.shape[-1])
        differs = (x1 != x2).astype(jnp.result_type(x1, self.lengthscale))
        return jnp.exp(-0.5 * jnp.sum(differs / self.lengthscale**2))

    def gram(self, X1, X2=None):
        check_lengthscale_shape(self, X1.shape[-1])
        X2 = X1 if X2 is None else X2
        weights = jnp.broadcast_to(1.0 / self.lengthscale**2, X1.shape[1:]).astype(X1.dtype)
        # One matrix product per feature would do; the (n, m, d) comparison is fine for the modest d here.
        differs = (X1[:, None, :] != X2[None, :, :]).astype(X1.dtype)
        return jnp.exp(-0.5 * differs @ weights)

    def diag(self, X):
        check_lengthscale_shape(self, X.shape[-1])
        return jnp.ones(X.shape[:1], X.dtype)

    def parameter_checks(self, checks):
        check_lengthscale(self, checks)
