"""The kernel protocol: evaluate one pair of points; Gram matrices by vmap."""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp

from .._types import Array, Float


class AbstractKernel(eqx.Module):
    """A positive-definite covariance function k(x, x').

    Subclasses implement :meth:`evaluate` for one pair of points; :meth:`gram`
    and :meth:`diag` build matrices from it with ``vmap``.  Kernels whose Gram
    matrix has a cheaper closed form (squared distances through a matrix
    product) override :meth:`gram`.  ``k1 + k2`` and ``k1 * k2`` build sums and
    products.
    """

    @abc.abstractmethod
    def evaluate(self, x1: Float[Array, " d"], x2: Float[Array, " d"]) -> Float[Array, ""]:
        """k(x1, x2) for a single pair of input vectors."""

    def gram(self, X1: Float[Array, "n d"], X2: Float[Array, "m d"] | None = None) -> Float[Array, "n m"]:
        """The matrix k(X1_i, X2_j); ``X2=None`` means the training covariance k(X1, X1)."""
        X2 = X1 if X2 is None else X2
        return jax.vmap(lambda x1: jax.vmap(lambda x2: self.evaluate(x1, x2))(X2))(X1)

    def diag(self, X: Float[Array, "n d"]) -> Float[Array, " n"]:
        """The prior variances k(x_i, x_i) (including any white-noise term)."""
        return jax.vmap(lambda x: self.evaluate(x, x))(X)

    def __add__(self, other: "AbstractKernel") -> "Sum":
        return Sum(self, other)

    def __mul__(self, other: "AbstractKernel") -> "Product":
        return Product(self, other)


class Sum(AbstractKernel):
    """k(x, x') = k1(x, x') + k2(x, x')."""

    k1: AbstractKernel
    k2: AbstractKernel

    def evaluate(self, x1, x2):
        return self.k1.evaluate(x1, x2) + self.k2.evaluate(x1, x2)

    def gram(self, X1, X2=None):
        return self.k1.gram(X1, X2) + self.k2.gram(X1, X2)

    def diag(self, X):
        return self.k1.diag(X) + self.k2.diag(X)


class Product(AbstractKernel):
    """k(x, x') = k1(x, x') * k2(x, x')."""

    k1: AbstractKernel
    k2: AbstractKernel

    def evaluate(self, x1, x2):
        return self.k1.evaluate(x1, x2) * self.k2.evaluate(x1, x2)

    def gram(self, X1, X2=None):
        return self.k1.gram(X1, X2) * self.k2.gram(X1, X2)

    def diag(self, X):
        return self.k1.diag(X) * self.k2.diag(X)


class OnDims(AbstractKernel):
    """k(x, x') = base(x[dims], x'[dims]): a kernel that sees only some input columns.

    Builds kernels that treat features differently, e.g. Kim & Ghahramani's
    eq. 10 with continuous and categorical features::

        OnDims(SquaredExponential(v0, ell_c), continuous) * OnDims(CategoricalOverlap(ell_d), discrete)
    """

    base: AbstractKernel
    dims: tuple[int, ...] = eqx.field(static=True, converter=lambda d: tuple(int(i) for i in d))

    def evaluate(self, x1, x2):
        idx = jnp.asarray(self.dims)
        return self.base.evaluate(x1[idx], x2[idx])

    def gram(self, X1, X2=None):
        idx = jnp.asarray(self.dims)
        return self.base.gram(X1[:, idx], None if X2 is None else X2[:, idx])

    def diag(self, X):
        return self.base.diag(X[:, jnp.asarray(self.dims)])


def positive(value) -> Array:
    """Converter for kernel parameters: a JAX array (traced values pass through)."""
    return jnp.asarray(value)
