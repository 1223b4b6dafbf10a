"""Stationary kernels."""

import abc
import math

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .._exceptions import GPClassError
from .._types import Array, Float
from .._validation import as_float
from ._base import (
    AbstractKernel,
    check_lengthscale,
    check_lengthscale_shape,
    check_positive,
    check_scalar,
    check_variance,
)


def squared_distances(X1: Float[Array, "n d"], X2: Float[Array, "m d"] | None = None, scale=None,
                      divisor=1.0) -> Float[Array, "n m"]:
    """|x1_i - x2_j|^2 through one matrix product (|a|^2 + |b|^2 - 2 a.b): O(n m d) time and O(n m)
    memory, where vmapping over pairs would materialise n m d.  ``X2=None`` means X1, with an exact zero
    diagonal; rounding's tiny negative values are clipped to 0.

    With ``scale`` (ARD length scales, shape (d,)), the distances of X / scale; the inputs are centred
    before they are scaled, since X / scale would round a large common offset into the differences.
    ``divisor`` (an isotropic length scale squared, which the caller divides by) enters only the choice below.

    Both inputs are first centred on the midrange of X1 (:func:`centred`), which leaves every difference
    unchanged: the expansion cancels |a|^2 against 2 a.b, so without it a common offset c of the inputs
    costs eps |c|^2 of absolute accuracy (in float64 an offset of 1e8 leaves no correct digit of a
    distance of order 1; in float32 an offset of 1e3 already moves log q by 0.02).

    Centring cannot help when the inputs' spread itself is many length scales: the expansion's rounding,
    about eps (|a|^2 + |b|^2) for every pair (:func:`_expansion_is_inexact`), then reaches the distances of
    nearby pairs, the ones the kernel does not round to 0 (measured: a length scale of 1.35e-7 of
    standardised inputs, 27 dimensions, made a squared distance of 23.6 come out as 22.5, a Gram matrix
    with eigenvalue -0.055, and EP's log q NaN).  There the distances come from the differences themselves,
    sum_k (a_k - b_k)^2 (O(n m d) elementwise work, exact to rounding of each term), chosen at run time
    (``lax.cond``; under ``vmap`` both are computed).  Derivatives are those of the expansion either way
    (:func:`_pairwise_squared_distances`): exact for an isotropic length scale (``divisor`` divides afterwards),
    while a derivative through ARD-scaled inputs keeps part of the cancellation (measured: 1.9e-3 relative
    in d k / d log l at the example above; the value was wrong by 10 % before).

    The centred inputs pass an ``optimization_barrier``: inputs that are constants of the program (data
    closed over by a jitted function) would otherwise have their distances computed by XLA's constant
    folding, at compile time, which at large n and d took longer than compiling the whole value and gradient
    of log q (see benchmarks/README.md, ``before_after.py``).
    """
    X1, B = centred(X1, X2)
    if scale is not None:
        X1, B = X1 / scale, None if B is None else B / scale
    X1, B = lax.optimization_barrier((X1, B))
    B = X1 if B is None else B
    sq = jnp.maximum(_pairwise_squared_distances(X1, B, divisor), 0.0)
    if X2 is None:
        sq = sq * (1.0 - jnp.eye(sq.shape[0], dtype=sq.dtype))
    return sq


@jax.custom_jvp
def _pairwise_squared_distances(A, B, divisor):
    """|a_i - b_j|^2 by the expansion, or from the differences where the expansion is inexact
    (:func:`_expansion_is_inexact`), chosen at run time; ``divisor`` enters only the choice."""
    return lax.cond(_expansion_is_inexact(A, B, divisor), _exact_squared_distances, _expanded_squared_distances,
                    A, B)


@_pairwise_squared_distances.defjvp
def _pairwise_squared_distances_jvp(primals, tangents):
    """The derivative of the expansion, 2 a.da + 2 b.db - 2 (da.b + a.db), by matrix products, whichever way the
    value was computed: outside the ``lax.cond``, so reverse mode is that of the expansion alone (no n x m x d
    array, no conditional in the backward pass).  Exact in exact arithmetic; where the distances come from the
    differences it keeps part of the expansion's cancellation (:func:`squared_distances`)."""
    (A, B, divisor), (dA, dB, _) = primals, tangents
    tangent = (2.0 * jnp.sum(A * dA, axis=1)[:, None] + 2.0 * jnp.sum(B * dB, axis=1)[None, :]
               - 2.0 * (dA @ B.T + A @ dB.T))
    return _pairwise_squared_distances(A, B, divisor), tangent


def _expanded_squared_distances(A, B):
    """|a|^2 + |b|^2 - 2 a.b: one matrix product."""
    return jnp.sum(A**2, axis=1)[:, None] + jnp.sum(B**2, axis=1)[None, :] - 2.0 * A @ B.T


def _expansion_is_inexact(A, B, divisor=1.0):
    """Whether the expansion's rounding, 4 eps (max |a|^2 + max |b|^2) / divisor, exceeds 4 sqrt(eps) in the
    (scaled) squared distance: 6e-8 in float64, reached when the inputs' spread is about 5e3 length scales;
    1.4e-3 in float32, about 50 length scales (entries of the Gram matrix then wrong by up to 7e-4 relative)."""
    if A.shape[0] == 0 or B.shape[0] == 0:
        return jnp.asarray(False)
    eps = jnp.finfo(A.dtype).eps
    level = 4.0 * eps * (jnp.max(jnp.sum(A**2, axis=1)) + jnp.max(jnp.sum(B**2, axis=1))) / divisor
    return lax.stop_gradient(level > 4.0 * math.sqrt(eps))


def _exact_squared_distances(A, B):
    """sum_k (a_k - b_k)^2 from the differences (no cancellation); the reduction over k is fused with the
    differences, so no n x m x d array is formed."""
    return jnp.sum((A[:, None, :] - B[None, :, :]) ** 2, axis=-1)


def centred(X1: Float[Array, "n d"], X2: Float[Array, "m d"] | None = None):
    """(X1 - c, X2 - c) with c the midpoint of the range of each column of X1 (``X2=None`` stays None): the
    same differences, and every centred coordinate of X1 at most half its column's range.

    c = (min + max) * 0.5: the halving is exact, so whether the compiler contracts ``x - c`` into a fused
    multiply-add or not, each fusion that recomputes the centring gets the same bits.  (With the mean,
    sum * (1/n), it did not: the a in |a|^2 and in a.b then differed by a rounding of the offset.)  c is
    held constant for differentiation (the differences do not depend on it), so gradients with respect to
    the inputs (inducing inputs) are those of the differences themselves.  The inputs pass an
    ``optimization_barrier`` first: for data that is a constant of the program XLA would otherwise fold
    the range's reductions at compile time (slow for large inputs, with an alarm on stderr; see
    benchmarks/README.md, ``before_after.py``).
    """
    if X1.shape[0] == 0:  # no rows (an empty test set): nothing to centre on
        return X1, X2
    X1, X2 = lax.optimization_barrier((X1, X2))
    c = lax.stop_gradient((jnp.min(X1, axis=0) + jnp.max(X1, axis=0)) * 0.5)
    return X1 - c, None if X2 is None else X2 - c


def safe_sqrt(s):
    """sqrt(s) for s >= 0 whose derivative at s = 0 is 0 instead of inf (the double-``where``: the square
    root never sees a zero, so no inf * 0 = NaN reaches a gradient).

    Where it is used, s is a squared distance, which is 0 only where its own derivative in every
    hyperparameter and input is 0 too (coincident inputs: d|x - x'|^2 / dx = 2 (x - x') = 0), so the
    derivative the chain rule takes there is 0 either way; this one is finite.
    """
    positive = s > 0
    return jnp.where(positive, jnp.sqrt(jnp.where(positive, s, 1.0)), 0.0)


def scaled_squared_distances(kernel: AbstractKernel, X1, X2=None):
    """r^2 = |(x - x') / lengthscale|^2 through one matrix product (:func:`squared_distances`): an isotropic
    length scale divides the distances afterwards (they do not depend on it), ARD scales the inputs."""
    if jnp.ndim(kernel.lengthscale) == 0:
        divisor = kernel.lengthscale**2
        return squared_distances(X1, X2, divisor=lax.stop_gradient(divisor)) / divisor
    return squared_distances(X1, X2, scale=kernel.lengthscale)


def distance_rounding(kernel: AbstractKernel, X1, X2=None):
    """Per pair, a bound of the rounding error of :func:`scaled_squared_distances`: 2 (1 + sqrt d) eps
    (|a|^2 + |b|^2) with a, b the centred, scaled inputs (held constant for differentiation).

    The expansion |a|^2 + |b|^2 - 2 a.b cancels: a repeated row's squared distance comes out as a few eps
    (|a|^2 + |b|^2), not 0 (measured on random inputs, at most 0.45 sqrt(d) eps (|a|^2 + |b|^2) for d = 1..256
    in float32 and float64; this bound is 2.5 times that or more).  Where the distances come from the
    differences instead (:func:`squared_distances`), a repeated row's is exactly 0 and the bound is 0.
    """
    isotropic = jnp.ndim(kernel.lengthscale) == 0
    A, B = centred(X1, X2)
    if not isotropic:
        A, B = A / kernel.lengthscale, None if B is None else B / kernel.lengthscale
    norm_A = jnp.sum(A**2, axis=1)
    norm_B = norm_A if B is None else jnp.sum(B**2, axis=1)
    level = 2.0 * (1.0 + math.sqrt(X1.shape[-1])) * jnp.finfo(A.dtype).eps * (norm_A[:, None] + norm_B[None, :])
    level = level / kernel.lengthscale**2 if isotropic else level
    exact = _expansion_is_inexact(A, A if B is None else B, kernel.lengthscale**2 if isotropic else 1.0)
    return lax.stop_gradient(jnp.where(exact, 0.0, level))


class _Stationary(AbstractKernel):
    """variance * f(r^2), r = |x - x'| / lengthscale (a scalar: isotropic; shape (d,): ARD, GPML eq. 5.1).

    A subclass gives the profile f as a function of r^2 (:meth:`profile`); ``gram`` computes the scaled
    squared distances through one matrix product and applies f elementwise; ``diag`` is variance (f(0) = 1).
    """

    variance: Float[Array, ""] = eqx.field(converter=as_float, default=1.0)
    lengthscale: Float[Array, "*d"] = eqx.field(converter=as_float, default=1.0)

    @abc.abstractmethod
    def profile(self, r2):
        """f(r^2), with f(0) = 1, elementwise."""

    def evaluate(self, x1, x2):
        self._check_shapes(x1.shape[-1])
        return self.variance * self.profile(jnp.sum(((x1 - x2) / self.lengthscale) ** 2))

    def gram(self, X1, X2=None):
        self._check_shapes(X1.shape[-1])
        return self.variance * self.profile(scaled_squared_distances(self, X1, X2))

    def diag(self, X):
        self._check_shapes(X.shape[-1])
        return jnp.broadcast_to(self.variance, X.shape[:1]).astype(X.dtype)

    def parameter_checks(self, checks):
        check_variance(self, checks)
        check_lengthscale(self, checks)

    def _check_shapes(self, num_dims: int) -> None:
        check_scalar(self, "variance")
        check_lengthscale_shape(self, num_dims)


class SquaredExponential(_Stationary):
    """k(x, x') = variance * exp(-|x - x'|^2 / (2 lengthscale^2))  (GPML eq. 2.16).

    ``lengthscale`` is a scalar (isotropic) or has shape (d,) for automatic
    relevance determination (one length scale per input dimension, GPML eq. 5.1).
    An isotropic length scale divides the squared distances of the unscaled inputs (``scaled_squared_distances``):
    they do not depend on the hyperparameters (a fit's loop computes them once) and the derivative in l is
    elementwise, where scaling the inputs first puts an n m d matrix product into every gradient.

    Example::

        >>> k = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> X = jnp.array([[0.0], [1.0]])
        >>> print(np.asarray(k.gram(X)).round(3))  # exp(-1/2) one length scale apart
        [[1.    0.607]
         [0.607 1.   ]]
        >>> ard = gpc.kernels.SquaredExponential(lengthscale=jnp.array([1.0, 10.0]))  # ARD: one per input
        >>> round(float(ard.evaluate(jnp.array([0.0, 0.0]), jnp.array([0.0, 10.0]))), 3)  # one length scale apart
        0.607

    ``k.gram(X_test, X)`` gives the test-by-training covariances.
    """

    def profile(self, r2):
        return jnp.exp(-0.5 * r2)


# The Matérn profiles as functions of s = r^2.  d/ds of exp(-r) is -exp(-r) / (2 r), infinite at r = 0; for
# nu = 3/2 and 5/2 the derivative in s has a finite limit there, which their custom_jvp rules give in closed
# form (autodiff through sqrt(s) would give inf * 0 = NaN at s = 0, and loses digits to cancellation near it).
_SQRT3, _SQRT5 = math.sqrt(3.0), math.sqrt(5.0)


def matern12_profile(s):
    """exp(-r), r = sqrt(s); its derivative at s = 0 is taken as 0 (:func:`safe_sqrt`)."""
    return jnp.exp(-safe_sqrt(s))


@jax.custom_jvp
def matern32_profile(s):
    """(1 + sqrt3 r) exp(-sqrt3 r), r = sqrt(s); d/ds = -3/2 exp(-sqrt3 r), -3/2 at s = 0."""
    r = safe_sqrt(s)
    return (1.0 + _SQRT3 * r) * jnp.exp(-_SQRT3 * r)


@matern32_profile.defjvp
def _matern32_jvp(primals, tangents):
    (s,), (ds,) = primals, tangents
    r = safe_sqrt(s)
    e = jnp.exp(-_SQRT3 * r)
    return (1.0 + _SQRT3 * r) * e, -1.5 * e * ds


@jax.custom_jvp
def matern52_profile(s):
    """(1 + sqrt5 r + 5 r^2 / 3) exp(-sqrt5 r), r = sqrt(s); d/ds = -5/6 (1 + sqrt5 r) exp(-sqrt5 r)."""
    r = safe_sqrt(s)
    return (1.0 + _SQRT5 * r + (5.0 / 3.0) * s) * jnp.exp(-_SQRT5 * r)


@matern52_profile.defjvp
def _matern52_jvp(primals, tangents):
    (s,), (ds,) = primals, tangents
    r = safe_sqrt(s)
    e = jnp.exp(-_SQRT5 * r)
    return (1.0 + _SQRT5 * r + (5.0 / 3.0) * s) * e, -(5.0 / 6.0) * (1.0 + _SQRT5 * r) * e * ds


class Matern12(_Stationary):
    """k(x, x') = variance * exp(-r),  r = |x - x'| / lengthscale  (GPML eq. 4.14 with nu = 1/2).

    The Ornstein-Uhlenbeck (exponential) covariance: continuous, nowhere-differentiable sample paths.
    ``lengthscale`` is a scalar (isotropic) or has shape (d,) (ARD: r^2 = sum_m ((x_m - x'_m) / l_m)^2);
    scikit-learn's ``ConstantKernel(variance) * Matern(length_scale, nu=0.5)``.

    At r = 0 (the diagonal, repeated inputs, a test input equal to a training input) d exp(-r) / d(r^2) is
    infinite; the profile's derivative there is taken as 0, which is right for every hyperparameter (k = variance
    there whatever the length scale) and a subgradient of the cusp in the inputs, so gradients stay finite.
    The Gram matrix comes from squared distances through one matrix product, accurate to about eps |x|^2 / l^2;
    as exp(-r) has slope -1 at r = 0, that would put an error of sqrt(eps) |x| / l on repeated rows (whose
    rounded squared distance need not be exactly 0).  So squared distances within a bound of their rounding
    error are set to 0: repeated rows (and a test input equal to a training input) get k = variance exactly,
    and a pair of distinct inputs closer than about sqrt(2 (1 + sqrt d) eps) |x| / l (1e-7 |x| / l in float64,
    3e-3 |x| / l in float32 at d = 9) is treated as coincident.

    Example::

        >>> k = gpc.kernels.Matern12(variance=1.0, lengthscale=1.0)
        >>> print(np.asarray(k.gram(jnp.array([[0.0], [1.0]]))).round(3))  # exp(-1) one length scale apart
        [[1.    0.368]
         [0.368 1.   ]]
        >>> k = gpc.kernels.Matern12(variance=2.0, lengthscale=np.array([0.5, 3.0]))  # ARD on 2 inputs
    """

    def profile(self, r2):
        return matern12_profile(r2)

    def gram(self, X1, X2=None):
        # Squared distances within their rounding error of 0 are 0: a repeated row's comes out as a few eps
        # |x|^2 / l^2, and exp(-r) would turn that into an error of sqrt(eps) |x| / l (1e-7 in float64, 3e-4 in
        # float32) that jumps with the length scales' rounding (noise in log q and in its finite differences).
        self._check_shapes(X1.shape[-1])
        r2 = scaled_squared_distances(self, X1, X2)
        r2 = jnp.where(r2 <= distance_rounding(self, X1, X2), 0.0, r2)
        return self.variance * matern12_profile(r2)


class Matern32(_Stationary):
    """k(x, x') = variance * (1 + sqrt(3) r) exp(-sqrt(3) r),  r = |x - x'| / lengthscale  (GPML eq. 4.17).

    Matérn nu = 3/2: sample paths once differentiable.  ``lengthscale`` is a scalar (isotropic) or has shape
    (d,) (ARD); scikit-learn's ``ConstantKernel(variance) * Matern(length_scale, nu=1.5)``.  Differentiated as
    a function of r^2 with the closed form d/d(r^2) = -3/2 exp(-sqrt(3) r) (-3/2 at r = 0), so gradients are
    finite and right on the diagonal, on repeated inputs and at a test input equal to a training input.

    Example::

        >>> k = gpc.kernels.Matern32(variance=1.0, lengthscale=1.0)
        >>> print(np.asarray(k.gram(jnp.array([[0.0], [1.0]]))).round(3))  # (1 + sqrt 3) exp(-sqrt 3) at r = 1
        [[1.    0.483]
         [0.483 1.   ]]
    """

    def profile(self, r2):
        return matern32_profile(r2)


class Matern52(_Stationary):
    """k(x, x') = variance * (1 + sqrt(5) r + 5 r^2 / 3) exp(-sqrt(5) r),  r = |x - x'| / lengthscale
    (GPML eq. 4.17).

    Matérn nu = 5/2: sample paths twice differentiable.  ``lengthscale`` is a scalar (isotropic) or has shape
    (d,) (ARD); scikit-learn's ``ConstantKernel(variance) * Matern(length_scale, nu=2.5)``.  Differentiated
    as a function of r^2 with the closed form d/d(r^2) = -5/6 (1 + sqrt(5) r) exp(-sqrt(5) r) (-5/6 at
    r = 0), so gradients are finite and right at r = 0.

    Example::

        >>> k = gpc.kernels.Matern52(variance=1.0, lengthscale=1.0)
        >>> print(np.asarray(k.gram(jnp.array([[0.0], [1.0]]))).round(3))  # (1 + sqrt 5 + 5/3) exp(-sqrt 5) at r = 1
        [[1.    0.524]
         [0.524 1.   ]]
        >>> k = gpc.kernels.Matern52(lengthscale=np.array([0.5, 3.0]))  # ARD on 2 inputs
    """

    def profile(self, r2):
        return matern52_profile(r2)


class RationalQuadratic(_Stationary):
    """k(x, x') = variance * (1 + r^2 / (2 alpha))^(-alpha),  r = |x - x'| / lengthscale  (GPML eq. 4.19).

    A scale mixture of squared-exponential kernels with gamma-distributed inverse squared length scales
    (shape alpha); alpha -> inf is the squared exponential.  ``lengthscale`` is a scalar (isotropic,
    scikit-learn's ``RationalQuadratic(length_scale, alpha)`` times ``ConstantKernel(variance)``) or has
    shape (d,) (ARD, GPML's covRQard); ``alpha`` is a positive scalar hyperparameter (``gpc.fit`` fits it).

    Example::

        >>> k = gpc.kernels.RationalQuadratic(variance=1.0, lengthscale=1.0, alpha=0.5)
        >>> print(np.asarray(k.gram(jnp.array([[0.0], [1.0]]))).round(3))  # (1 + 1 / (2 alpha))^(-alpha) = 2^(-1/2)
        [[1.    0.707]
         [0.707 1.   ]]
    """

    alpha: Float[Array, ""] = eqx.field(converter=as_float, default=1.0)

    def profile(self, r2):
        return jnp.exp(-self.alpha * jnp.log1p(r2 / (2.0 * self.alpha)))

    def parameter_checks(self, checks):
        super().parameter_checks(checks)
        check_positive(self, "alpha", checks)

    def _check_shapes(self, num_dims: int) -> None:
        super()._check_shapes(num_dims)
        check_scalar(self, "alpha")


class Periodic(AbstractKernel):
    """k(x, x') = variance * exp(-2 sin^2(pi |x - x'| / period) / lengthscale^2)  (MacKay 1998; GPML eq. 4.31).

    GPML's covPeriodic and scikit-learn's ``ExpSineSquared(length_scale, periodicity)`` (times
    ``ConstantKernel(variance)``): the Euclidean distance |x - x'| of the inputs, unscaled, with scalar
    ``lengthscale`` and ``period`` (both positive hyperparameters).  Its derivative at coincident inputs
    is finite (sin^2(pi r / p) is smooth in r^2).

    Positive definite for one input dimension only: MacKay's construction maps a scalar x to
    (cos(2 pi x / p), sin(2 pi x / p)); with the Euclidean distance of several dimensions the Gram matrix
    can have negative eigenvalues (as scikit-learn's, scikit-learn issue 19343), so inputs of more than one
    column are refused (``check_inputs``: by ``gpc.infer``, ``gpc.fit`` and the other entry points, inside
    sums and products too).  For a periodic function of several inputs multiply one-column kernels,
    ``OnDims(Periodic(...), [0]) * OnDims(Periodic(...), [1])``, or use it on one column with ``OnDims``.

    Example::

        >>> k = gpc.kernels.Periodic(variance=1.0, lengthscale=0.8, period=2.0)
        >>> x0 = jnp.array([0.0])
        >>> [round(float(k.evaluate(x0, jnp.array([x]))), 3) for x in (1.0, 2.0, 4.0)]  # half, one, two periods
        [0.044, 1.0, 1.0]
        >>> k = gpc.kernels.OnDims(k, [0]) * gpc.kernels.SquaredExponential()  # periodic in x0, decaying
    """

    variance: Float[Array, ""] = eqx.field(converter=as_float, default=1.0)
    lengthscale: Float[Array, ""] = eqx.field(converter=as_float, default=1.0)
    period: Float[Array, ""] = eqx.field(converter=as_float, default=1.0)

    def _of_distance(self, r):
        self._check_shapes()
        return self.variance * jnp.exp(-2.0 * jnp.sin(jnp.pi * r / self.period) ** 2 / self.lengthscale**2)

    def evaluate(self, x1, x2):
        return self._of_distance(safe_sqrt(jnp.sum((x1 - x2) ** 2)))

    def gram(self, X1, X2=None):
        return self._of_distance(safe_sqrt(squared_distances(X1, X2)))

    def diag(self, X):
        self._check_shapes()
        return jnp.broadcast_to(self.variance, X.shape[:1]).astype(X.dtype)

    def parameter_checks(self, checks):
        check_variance(self, checks)
        check_lengthscale(self, checks)
        check_positive(self, "period", checks)

    def check_inputs(self, X) -> None:
        """Refuses inputs of more than one column, where the Gram matrix need not be positive semi-definite and
        an approximation could report a confident answer for a model that is no Gaussian process."""
        if X.shape[-1] != 1:
            raise GPClassError(
                f"Periodic: positive definite for one input column only, and these inputs have {X.shape[-1]} "
                "(with the distance of several columns its Gram matrix can have negative eigenvalues, and no "
                "approximation of such a model is meaningful); apply it to one column, "
                "gpc.kernels.OnDims(gpc.kernels.Periodic(...), [j]), or multiply such kernels of single columns."
            )

    def _check_shapes(self) -> None:
        for field in ("variance", "lengthscale", "period"):
            check_scalar(self, field)
