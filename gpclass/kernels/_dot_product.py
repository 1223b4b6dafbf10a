"""Dot-product kernels: polynomial and the neural-network (arcsine) kernel."""

import operator

import equinox as eqx
import jax.numpy as jnp
from jax import lax

from .._exceptions import GPClassError
from .._types import Array, Float
from .._validation import as_float
from ._base import AbstractKernel, check_lengthscale, check_positive, check_scalar, check_variance


def _as_degree(degree) -> int:
    """A polynomial degree: a positive integer (``2`` or ``2.0``; not ``2.5``, not ``True``)."""
    try:
        value = operator.index(degree) if not isinstance(degree, float) else int(degree)
    except TypeError:
        value = None
    if isinstance(degree, bool) or value is None or value != degree or value < 1:
        raise GPClassError(f"Polynomial: degree must be a positive integer; got {degree!r}.")
    return value


class Polynomial(AbstractKernel):
    """k(x, x') = variance * (x . x' + offset)^degree  (GPML eq. 4.22-4.23 and covPoly: sf2 (c + x'z)^d).

    ``degree`` is a fixed positive integer (a static field, not a hyperparameter); ``variance`` >= 0 and
    ``offset`` >= 0 are hyperparameters.  Degree 1 with offset 0 is :class:`Linear`; degree 1 with
    variance 1 is scikit-learn's ``DotProduct(sigma_0)`` with offset = sigma_0^2.  Not stationary: it
    grows with |x|, so standardise the inputs.  ``gpc.fit`` optimises every hyperparameter on the log
    scale, so to fit one start from offset > 0 (offset = 0 fits only with the offset held fixed).

    Example::

        >>> k = gpc.kernels.Polynomial(variance=0.5, offset=1.0, degree=2)
        >>> print(k.gram(jnp.array([[1.0, 2.0], [3.0, 1.0]])))  # 0.5 * (x . x' + 1)^2
        [[18.  18. ]
         [18.  60.5]]
    """

    variance: Float[Array, ""] = eqx.field(converter=as_float, default=1.0)
    offset: Float[Array, ""] = eqx.field(converter=as_float, default=0.0)
    degree: int = eqx.field(static=True, converter=_as_degree, default=2)

    def evaluate(self, x1, x2):
        self._check_shapes()
        return self.variance * lax.integer_pow(jnp.dot(x1, x2) + self.offset, self.degree)

    def gram(self, X1, X2=None):
        self._check_shapes()
        X2 = X1 if X2 is None else X2
        return self.variance * lax.integer_pow(X1 @ X2.T + self.offset, self.degree)

    def diag(self, X):
        self._check_shapes()
        return self.variance * lax.integer_pow(jnp.sum(X**2, axis=1) + self.offset, self.degree)

    def parameter_checks(self, checks):
        check_variance(self, checks)
        check_positive(self, "offset", checks, allow_zero=True)

    def _check_shapes(self) -> None:
        check_scalar(self, "variance")
        check_scalar(self, "offset")


class NeuralNetwork(AbstractKernel):
    """The neural-network (arcsine) kernel of GPML's covNNone (Williams 1998; GPML eq. 4.29)::

        k(x, x') = variance * asin( (1 + x . x') / sqrt((lengthscale^2 + 1 + x . x) (lengthscale^2 + 1 + x' . x')) )

    GPML eq. 4.29 with the augmented inputs x~ = (1, x) and Sigma = I / (2 lengthscale^2), one scale for
    the bias and every input: k = variance * asin(x~' P x~' / sqrt((1 + x~' P x~)(1 + x~'' P x~'))),
    P = I / lengthscale^2, the covariance of a network with one hidden layer of infinitely many erf units
    (the book's 2/pi is in ``variance``).  The diagonal is variance * asin(s / (s + lengthscale^2)),
    s = 1 + x . x.  Not stationary: the covariance saturates along rays from the origin, so standardise
    the inputs.  ``lengthscale`` is a scalar (covNNone has one).

    Example::

        >>> k = gpc.kernels.NeuralNetwork(variance=1.0, lengthscale=2.0)
        >>> X = jnp.array([[0.0], [1.0]])
        >>> print(np.asarray(k.gram(X)).round(3))  # K[0, 0] = asin(1 / 5), K[1, 1] = asin(2 / 6)
        [[0.201 0.184]
         [0.184 0.34 ]]
    """

    variance: Float[Array, ""] = eqx.field(converter=as_float, default=1.0)
    lengthscale: Float[Array, ""] = eqx.field(converter=as_float, default=1.0)

    def evaluate(self, x1, x2):
        self._check_shapes()
        ell2 = self.lengthscale**2
        s1, s2 = 1.0 + jnp.dot(x1, x1), 1.0 + jnp.dot(x2, x2)
        return self.variance * jnp.arcsin((1.0 + jnp.dot(x1, x2)) / jnp.sqrt((ell2 + s1) * (ell2 + s2)))

    def gram(self, X1, X2=None):
        self._check_shapes()
        ell2 = self.lengthscale**2
        root1 = jnp.sqrt(ell2 + 1.0 + jnp.sum(X1**2, axis=1))
        root2 = root1 if X2 is None else jnp.sqrt(ell2 + 1.0 + jnp.sum(X2**2, axis=1))
        S = 1.0 + X1 @ (X1 if X2 is None else X2).T
        return self.variance * jnp.arcsin(S / (root1[:, None] * root2[None, :]))

    def diag(self, X):
        self._check_shapes()
        s = 1.0 + jnp.sum(X**2, axis=1)
        return self.variance * jnp.arcsin(s / (s + self.lengthscale**2))

    def parameter_checks(self, checks):
        check_variance(self, checks)
        check_lengthscale(self, checks)

    def _check_shapes(self) -> None:
        check_scalar(self, "variance")
        check_scalar(self, "lengthscale")
