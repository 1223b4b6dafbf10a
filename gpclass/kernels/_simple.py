"""Linear, constant (bias) and white-noise (jitter) kernels."""

import equinox as eqx
import jax.numpy as jnp

from .._types import Array, Float
from .._validation import as_float
from ._base import AbstractKernel, check_scalar, check_variance


class Linear(AbstractKernel):
    """k(x, x') = variance * x . x'  (GPML eq. 4.22, covLINiso with variance = 1/l^2).

    Example::

        >>> k = gpc.kernels.Linear(variance=0.5)
        >>> print(k.gram(jnp.array([[1.0, 2.0], [3.0, 1.0]])))  # 0.5 * [[5, 5], [5, 10]]
        [[2.5 2.5]
         [2.5 5. ]]
        >>> affine = gpc.kernels.Linear() + gpc.kernels.Constant(1.0)  # with a bias: GP logistic regression
    """

    variance: Float[Array, ""] = eqx.field(converter=as_float, default=1.0)

    def evaluate(self, x1, x2):
        check_scalar(self, "variance")
        return self.variance * jnp.dot(x1, x2)

    def gram(self, X1, X2=None):
        check_scalar(self, "variance")
        X2 = X1 if X2 is None else X2
        return self.variance * (X1 @ X2.T)

    def parameter_checks(self, checks):
        check_variance(self, checks)


class Constant(AbstractKernel):
    """k(x, x') = variance: a bias on the latent function (Gibbs & MacKay's theta2).

    Example::

        >>> print(gpc.kernels.Constant(0.5).gram(jnp.zeros((2, 3))))
        [[0.5 0.5]
         [0.5 0.5]]
        >>> k = gpc.kernels.SquaredExponential() + gpc.kernels.Constant(0.5)  # an SE prior with a random offset
    """

    variance: Float[Array, ""] = eqx.field(converter=as_float, default=1.0)

    def evaluate(self, x1, x2):
        check_scalar(self, "variance")
        return self.variance * jnp.ones((), dtype=jnp.result_type(x1))

    def gram(self, X1, X2=None):
        check_scalar(self, "variance")
        X2 = X1 if X2 is None else X2
        return jnp.full((X1.shape[0], X2.shape[0]), self.variance, dtype=X1.dtype)

    def parameter_checks(self, checks):
        check_variance(self, checks)


class White(AbstractKernel):
    """Independent latent noise / jitter: k = variance * delta_ij.

    The delta is on the *index* of a training case, not on equality of inputs:
    ``gram(X)`` adds ``variance * I`` and ``gram(X_test, X)`` is zero, so two
    training cases at the same input still get independent noise.  ``diag``
    returns ``variance``: a test latent carries the same noise (Gibbs & MacKay's
    J delta, Kim & Ghahramani's v2 delta).

    Example::

        >>> k = gpc.kernels.SquaredExponential() + gpc.kernels.White(0.1)  # latent noise (jitter) on the SE
        >>> X = jnp.array([[0.0], [0.0]])                                    # one input, two training cases
        >>> print(np.asarray(k.gram(X)).round(3))
        [[1.1 1. ]
         [1.  1.1]]
        >>> print(gpc.kernels.White(0.1).gram(jnp.ones((1, 1)), X))  # test against training: no noise shared
        [[0. 0.]]
    """

    variance: Float[Array, ""] = eqx.field(converter=as_float, default=1.0)

    def evaluate(self, x1, x2):
        # Pairwise evaluation cannot see indices; it follows the test-time convention.
        check_scalar(self, "variance")
        return jnp.where(jnp.all(x1 == x2), self.variance, 0.0)

    def gram(self, X1, X2=None):
        check_scalar(self, "variance")
        if X2 is None:
            return self.variance * jnp.eye(X1.shape[0], dtype=X1.dtype)
        return jnp.zeros((X1.shape[0], X2.shape[0]), dtype=X1.dtype)

    def diag(self, X):
        check_scalar(self, "variance")
        return jnp.broadcast_to(self.variance, X.shape[:1]).astype(X.dtype)

    def parameter_checks(self, checks):
        check_variance(self, checks)
