"""The kernel protocol: evaluate one pair of points; Gram matrices by vmap."""

import abc
import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._covariance import DenseCovariance
from .._errors import AT, error_if
from .._exceptions import GPClassError
from .._types import Array, Float
from .._validation import Checks, as_float, parameter_at


class AbstractKernel(eqx.Module):
    """A positive-definite covariance function k(x, x').

    Subclasses implement :meth:`evaluate` for one pair of points; :meth:`gram`
    and :meth:`diag` build matrices from it with ``vmap``.  Kernels whose Gram
    matrix has a cheaper closed form (squared distances through a matrix
    product) override :meth:`gram`.  ``k1 + k2`` and ``k1 * k2`` build sums and
    products.

    Example: a kernel of your own is an equinox module with :meth:`evaluate`; its hyperparameters are
    floating-point array fields (the converter :func:`gpclass.kernels.as_float` makes them so), which
    ``gpc.fit`` fits like the built-in kernels' (a plain ``float`` field would be refused)::

        >>> import equinox as eqx
        >>> class Brownian(gpc.kernels.AbstractKernel):  # variance * min(x, x'): Brownian motion on x >= 0
        ...     variance: jax.Array = eqx.field(converter=gpc.kernels.as_float, default=1.0)
        ...     def evaluate(self, x1, x2):
        ...         return self.variance * jnp.minimum(x1[0], x2[0])
        >>> X = jnp.array([[1.0], [2.0], [3.0]])
        >>> print(Brownian().gram(X))
        [[1. 1. 1.]
         [1. 2. 2.]
         [1. 2. 3.]]
        >>> print((Brownian(2.0) + gpc.kernels.White(0.5)).diag(X))
        [2.5 4.5 6.5]
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

    def parameter_checks(self, checks: Checks) -> None:
        """Add the run-time checks of this kernel's hyperparameter values to ``checks``.

        ``gpc.infer`` runs them, so a negative variance or a NaN hyperparameter
        raises (inside jit too) instead of reaching a solver.  The default
        checks nothing: a kernel without checks of its own relies on the checks
        of its Gram matrix (finite, non-negative diagonal).
        """

    def check_inputs(self, X) -> None:
        """Static checks of the training inputs against this prior (their shape; a sparse prior's inducing
        inputs); none here.  Combinations of kernels pass the inputs their parts see to each part."""

    def covariance(self, X: Float[Array, "n d"]) -> DenseCovariance:
        """The prior covariance of the training inputs as an operator: the Gram matrix k(X, X)."""
        return DenseCovariance(self.gram(X))

    def check_parameters(self) -> "AbstractKernel":
        """This kernel with the checks of :meth:`parameter_checks` attached (``eqx.branched_error_if``)."""
        checks = Checks()
        self.parameter_checks(checks)
        return checks.attach(self)

    def __add__(self, other: "AbstractKernel") -> "Sum":
        return Sum(self, other)

    def __mul__(self, other: "AbstractKernel") -> "Product":
        return Product(self, other)


class Sum(AbstractKernel):
    """k(x, x') = k1(x, x') + k2(x, x'): what ``k1 + k2`` builds (a kernel plus a bias, or plus white noise).

    Example::

        >>> k = gpc.kernels.SquaredExponential() + gpc.kernels.Constant(0.5)
        >>> isinstance(k, gpc.kernels.Sum)
        True
        >>> float(k.evaluate(jnp.zeros(2), jnp.zeros(2)))  # 1 + 0.5
        1.5
    """

    k1: AbstractKernel
    k2: AbstractKernel

    def evaluate(self, x1, x2):
        return self.k1.evaluate(x1, x2) + self.k2.evaluate(x1, x2)

    def gram(self, X1, X2=None):
        return self.k1.gram(X1, X2) + self.k2.gram(X1, X2)

    def diag(self, X):
        return self.k1.diag(X) + self.k2.diag(X)

    def parameter_checks(self, checks):
        self.k1.parameter_checks(checks)
        self.k2.parameter_checks(checks)

    def check_inputs(self, X) -> None:
        self.k1.check_inputs(X)
        self.k2.check_inputs(X)


class Product(AbstractKernel):
    """k(x, x') = k1(x, x') * k2(x, x'): what ``k1 * k2`` builds.

    Example::

        >>> k = gpc.kernels.Linear() * gpc.kernels.Linear()  # (x . x')^2
        >>> isinstance(k, gpc.kernels.Product)
        True
        >>> float(k.evaluate(jnp.array([1.0, 2.0]), jnp.array([3.0, 1.0])))  # (3 + 2)^2
        25.0
    """

    k1: AbstractKernel
    k2: AbstractKernel

    def evaluate(self, x1, x2):
        return self.k1.evaluate(x1, x2) * self.k2.evaluate(x1, x2)

    def gram(self, X1, X2=None):
        return self.k1.gram(X1, X2) * self.k2.gram(X1, X2)

    def diag(self, X):
        return self.k1.diag(X) * self.k2.diag(X)

    def parameter_checks(self, checks):
        self.k1.parameter_checks(checks)
        self.k2.parameter_checks(checks)

    def check_inputs(self, X) -> None:
        self.k1.check_inputs(X)
        self.k2.check_inputs(X)


class Scale(AbstractKernel):
    """k(x, x') = variance * kernel(x, x'): a signal variance for a kernel without one (scikit-learn's
    ``ConstantKernel(variance) * kernel``; GPML's covScale).

    Example::

        >>> k = gpc.kernels.Scale(gpc.kernels.CategoricalOverlap(0.7), variance=2.0)
        >>> print(k.diag(jnp.array([[0.0, 1.0], [2.0, 1.0]])))
        [2. 2.]
    """

    kernel: AbstractKernel
    variance: Float[Array, ""] = eqx.field(converter=as_float, default=1.0)

    def evaluate(self, x1, x2):
        check_scalar(self, "variance")
        return self.variance * self.kernel.evaluate(x1, x2)

    def gram(self, X1, X2=None):
        check_scalar(self, "variance")
        return self.variance * self.kernel.gram(X1, X2)

    def diag(self, X):
        check_scalar(self, "variance")
        return self.variance * self.kernel.diag(X)

    def parameter_checks(self, checks):
        check_variance(self, checks)
        self.kernel.parameter_checks(checks)

    def check_inputs(self, X) -> None:
        self.kernel.check_inputs(X)


class Exponentiation(AbstractKernel):
    """k(x, x') = kernel(x, x') ** exponent  (scikit-learn's ``Exponentiation``).

    ``exponent`` is a fixed number >= 0, not a hyperparameter (a static field: ``gpc.fit`` leaves it alone, and a
    new exponent compiles a new program; a negative one is refused: no negative power of a kernel is positive
    definite). A positive integer exponent of a kernel keeps it positive definite (a product of kernels); an integer
    exponent is computed by repeated multiplication, so negative values of the kernel (``Linear``) are fine; any
    other exponent needs a kernel with non-negative values (x ** 0.5 of a negative x is NaN) and is positive
    definite only for some kernels (SE ** a is the SE with length scale l / sqrt(a)).

    Example::

        >>> k = gpc.kernels.Exponentiation(gpc.kernels.Linear() + gpc.kernels.Constant(), 3)  # a cubic
        >>> float(k.evaluate(jnp.array([1.0]), jnp.array([2.0])))  # (1 * 2 + 1)^3
        27.0
    """

    kernel: AbstractKernel
    exponent: float = eqx.field(static=True, converter=float)

    def __check_init__(self):
        if not np.isfinite(self.exponent):
            raise GPClassError(f"Exponentiation: the exponent must be a finite number; got {self.exponent}.")
        if self.exponent < 0:
            # |k(x, x')| <= (k(x, x) k(x', x'))^1/2 makes |k(x, x')|^-a >= (k(x, x)^-a k(x', x')^-a)^1/2: every 2 x 2
            # Gram matrix of two distinct inputs has a determinant <= 0, so no inference is meaningful.
            raise GPClassError(f"Exponentiation: a negative exponent ({self.exponent:g}) gives no covariance (the "
                               "power of a kernel's values then exceeds that of its variances, and Gram matrices are "
                               "indefinite); use an exponent >= 0.")

    def _power(self, K):
        if self.exponent.is_integer():
            return lax.integer_pow(K, int(self.exponent))
        K = error_if(K, K < 0, f"Exponentiation(kernel, {self.exponent:g}): the kernel has negative values, whose "
                     "non-integer power is not a real number (NaN); use an integer exponent, or a kernel with "
                     "non-negative values (Linear and Polynomial are not).")
        # Where K is 0 (an SE underflowed) the chain rule's a K^(a - 1) dK would be inf * 0 = NaN for a < 1; K^a is
        # 0 there with derivative 0 (its limit: K^a falls faster than any power of the inputs' distance).
        positive = K > 0
        return jnp.where(positive, jnp.where(positive, K, 1.0) ** self.exponent, 0.0)

    def evaluate(self, x1, x2):
        return self._power(self.kernel.evaluate(x1, x2))

    def gram(self, X1, X2=None):
        return self._power(self.kernel.gram(X1, X2))

    def diag(self, X):
        return self._power(self.kernel.diag(X))

    def parameter_checks(self, checks):
        self.kernel.parameter_checks(checks)

    def check_inputs(self, X) -> None:
        self.kernel.check_inputs(X)


class OnDims(AbstractKernel):
    """k(x, x') = base(x[dims], x'[dims]): a kernel that sees only some input columns.

    Builds kernels that treat features differently, e.g. Kim & Ghahramani's
    eq. 10 with continuous and categorical features,
    ``OnDims(SquaredExponential(v0, ell_c), continuous) * OnDims(CategoricalOverlap(ell_d), discrete)``.

    Example::

        >>> k = gpc.kernels.OnDims(gpc.kernels.SquaredExponential(), [0])  # column 1 is ignored
        >>> print(np.asarray(k.gram(jnp.array([[0.0, 5.0], [1.0, -5.0]]))).round(3))
        [[1.    0.607]
         [0.607 1.   ]]
        >>> mixed = k * gpc.kernels.OnDims(gpc.kernels.CategoricalOverlap(1.0), [1])  # Kim & Ghahramani's eq. 10
        >>> round(float(mixed.evaluate(jnp.array([0.0, 2.0]), jnp.array([0.0, 3.0]))), 3)  # categories differ
        0.607
    """

    base: AbstractKernel
    dims: tuple[int, ...] = eqx.field(static=True, converter=lambda d: tuple(int(i) for i in d))

    def evaluate(self, x1, x2):
        idx = self._index(x1.shape[-1])
        return self.base.evaluate(x1[idx], x2[idx])

    def gram(self, X1, X2=None):
        idx = self._index(X1.shape[-1])
        return self.base.gram(X1[:, idx], None if X2 is None else X2[:, idx])

    def diag(self, X):
        return self.base.diag(X[:, self._index(X.shape[-1])])

    def parameter_checks(self, checks):
        self.base.parameter_checks(checks)

    def check_inputs(self, X) -> None:
        self.base.check_inputs(X[:, self._index(X.shape[-1])])

    def _index(self, num_dims: int) -> np.ndarray:
        """The columns as a NumPy index array (static: it indexes NumPy and JAX inputs alike, also inside jit);
        out-of-range columns are an error (jnp indexing would clamp them)."""
        if not self.dims or not all(-num_dims <= i < num_dims for i in self.dims):
            raise GPClassError(f"OnDims: dims {self.dims} do not select columns of inputs with {num_dims} dimensions: "
                               f"dims must be a non-empty sequence of column indices in {-num_dims}..{num_dims - 1}.")
        return np.asarray(self.dims)


def check_scalar(kernel: AbstractKernel, field: str) -> None:
    """A static check: the parameter ``field`` is a scalar (``PerClass`` stacks kernels along a class axis)."""
    shape = jnp.shape(getattr(kernel, field))
    if shape != ():
        raise GPClassError(
            f"{type(kernel).__name__}: {field} must be a scalar; got shape {shape} "
            "(for one kernel per class use gpc.kernels.PerClass)."
        )


def check_lengthscale_shape(kernel: AbstractKernel, num_dims: int) -> None:
    """A static check: ``kernel.lengthscale`` is a scalar (isotropic) or has one entry per input dimension (ARD)."""
    shape = jnp.shape(kernel.lengthscale)
    if shape not in ((), (num_dims,)):
        raise GPClassError(
            f"{type(kernel).__name__}: lengthscale has shape {shape} but the inputs have {num_dims} dimensions; "
            f"use a scalar (isotropic) or shape ({num_dims},) (one length scale per dimension, ARD)."
        )


def check_variance(kernel: AbstractKernel, checks: Checks) -> None:
    """``kernel.variance`` finite and >= 0 (zero is the degenerate prior f = 0), a run-time check."""
    value = kernel.variance
    checks.fail_if(
        ~(jnp.isfinite(value) & (value >= 0)),
        f"{type(kernel).__name__}: variance must be finite and >= 0{AT}; pass a non-negative number, e.g. "
        f"{_example(kernel, 'variance')}.",
        at=parameter_at("variance", value),
    )


def check_lengthscale(kernel: AbstractKernel, checks: Checks) -> None:
    """``kernel.lengthscale`` finite and > 0, a run-time check.

    An infinite length scale would make an input irrelevant, but its gradient
    is NaN (inf / inf in the derivative): leave such an input out with
    :class:`OnDims`, or use a large finite length scale.
    """
    value = kernel.lengthscale
    checks.fail_if(
        ~(jnp.isfinite(value) & (value > 0)),
        f"{type(kernel).__name__}: lengthscale must be finite and > 0{AT}; pass positive numbers, e.g. "
        f"{_example(kernel, 'lengthscale')} (to make an input irrelevant, leave it out with "
        "gpc.kernels.OnDims).",
        at=parameter_at("lengthscale", value),
    )


def check_positive(kernel: AbstractKernel, field: str, checks, *, allow_zero: bool = False) -> None:
    """The parameter ``field`` finite and > 0 (>= 0 with ``allow_zero``), a run-time check."""
    value = getattr(kernel, field)
    ok = jnp.isfinite(value) & ((value >= 0) if allow_zero else (value > 0))
    sign, kind = (">=", "non-negative") if allow_zero else (">", "positive")
    checks.fail_if(~ok, f"{type(kernel).__name__}: {field} must be finite and {sign} 0{AT}; pass a {kind} number, "
                        f"e.g. {_example(kernel, field)}.", at=parameter_at(field, value))


def _example(kernel: AbstractKernel, field: str) -> str:
    """A constructor call that sets ``field`` to 1.0, e.g. ``SquaredExponential(variance=1.0)``, or
    ``Scale(kernel, variance=1.0)`` for a kernel that wraps others."""
    wrapped = [f.name for f in dataclasses.fields(kernel) if isinstance(getattr(kernel, f.name), AbstractKernel)]
    return f"{type(kernel).__name__}({', '.join(wrapped + [f'{field}=1.0'])})"
