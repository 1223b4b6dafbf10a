"""scikit-learn kernels as gpclass kernels, and the fitted gpclass kernel back as a scikit-learn kernel.

``translate(kernel, num_features, dtype)`` turns a kernel expression of
``sklearn.gaussian_process.kernels`` into a gpclass kernel with the same Gram
matrices, together with what ``gpc.fit`` needs to honour scikit-learn's
hyperparameter settings: which parameters are fitted (``trainable``: those
whose ``*_bounds`` are not ``"fixed"``) and each one's box (``lower``,
``upper``).  ``Translation.to_sklearn(fitted)`` writes the fitted values back
into a copy of the scikit-learn kernel, whose ``theta`` is then the fitted
log hyperparameters.

Pieces and their gpclass counterparts (ARD: one length scale per feature):

=====================================  ==============================================================
scikit-learn                           gpclass
=====================================  ==============================================================
``ConstantKernel(c)``                  ``Constant(variance=c)``
``RBF(l)``, ``Matern(l, nu=inf)``      ``SquaredExponential(variance=1, lengthscale=l)``
``Matern(l, nu=0.5 / 1.5 / 2.5)``      ``Matern12`` / ``Matern32`` / ``Matern52(variance=1, lengthscale=l)``
``RationalQuadratic(l, alpha)``        ``RationalQuadratic(variance=1, lengthscale=l, alpha=alpha)``
``ExpSineSquared(l, p)``               ``Periodic(variance=1, lengthscale=l, period=p)``
``DotProduct(sigma_0)``                ``Polynomial(variance=1, offset=sigma_0^2, degree=1)``
``WhiteKernel(noise)``                 ``White(variance=noise)``
``k1 + k2``, ``k1 * k2``, ``k ** a``   ``Sum``, ``Product``, ``Exponentiation(k, a)``
=====================================  ==============================================================

A piece without a variance of its own has ``variance=1``, held fixed; a
``ConstantKernel`` multiplying such a piece (``C(c) * Matern(...)``, either
order) becomes that piece's variance instead (the same Gram matrix, one
product less).  Bounds are on the hyperparameter itself, in both libraries
(scikit-learn's theta and gpclass's free coordinates are their logs), except
that ``DotProduct``'s sigma_0 is fitted as the offset sigma_0^2, whose bounds
are the squares of sigma_0's.
"""

import math
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import numpy as np

from ._exceptions import GPClassError
from .kernels import (
    AbstractKernel,
    Constant,
    Exponentiation,
    Matern12,
    Matern32,
    Matern52,
    Periodic,
    Polynomial,
    Product,
    RationalQuadratic,
    SquaredExponential,
    Sum,
    White,
)

_MATERN = {0.5: Matern12, 1.5: Matern32, 2.5: Matern52, math.inf: SquaredExponential}

#: The scikit-learn kernel classes ``translate`` accepts, by name.
SUPPORTED = (
    "ConstantKernel, RBF, Matern (nu = 0.5, 1.5, 2.5 or inf), RationalQuadratic, ExpSineSquared, DotProduct, "
    "WhiteKernel, and their sums, products and powers (Sum, Product, Exponentiation)"
)


class _Link(NamedTuple):
    """One scikit-learn hyperparameter and the gpclass parameter that holds it."""

    name: str  # scikit-learn's parameter name, e.g. "k2__length_scale"
    where: Callable  # the gpclass kernel -> that parameter (for eqx.tree_at)
    fixed: bool
    lower: np.ndarray  # bounds on the gpclass parameter (ignored when fixed)
    upper: np.ndarray
    squared: bool = False  # the gpclass parameter is the square of scikit-learn's (DotProduct's sigma_0)

    def nested(self, prefix: str, field: str) -> "_Link":
        """The same link seen from a composite kernel whose ``field`` holds this one's kernel."""
        where = self.where
        return self._replace(name=f"{prefix}__{self.name}", where=lambda k: where(getattr(k, field)))


class _Piece(NamedTuple):
    kernel: AbstractKernel
    links: tuple
    unit_variance: bool  # the kernel's own ``variance`` is a fixed 1 that a ConstantKernel factor may take


class Translation(NamedTuple):
    """A scikit-learn kernel as a gpclass kernel, with ``gpc.fit``'s ``trainable`` and per-parameter bounds
    (pytrees with the kernel's structure) and the way back (:meth:`to_sklearn`)."""

    sklearn: object
    kernel: AbstractKernel
    trainable: AbstractKernel  # booleans
    lower: AbstractKernel
    upper: AbstractKernel
    links: tuple

    @property
    def fits_anything(self) -> bool:
        return any(not link.fixed for link in self.links)

    def to_sklearn(self, fitted: AbstractKernel):
        """A copy of the scikit-learn kernel holding ``fitted``'s hyperparameters (fixed ones untouched)."""
        from sklearn.base import clone

        values = {}
        for link in self.links:
            if link.fixed:
                continue
            value = np.asarray(link.where(fitted), np.float64)
            value = np.sqrt(value) if link.squared else value
            values[link.name] = float(value) if value.ndim == 0 else value
        return clone(self.sklearn).set_params(**values)


def is_sklearn_kernel(kernel) -> bool:
    try:
        from sklearn.gaussian_process.kernels import Kernel
    except ImportError:  # pragma: no cover
        return False
    return isinstance(kernel, Kernel)


def translate(kernel, num_features: int, dtype) -> Translation:
    """The gpclass counterpart of a scikit-learn kernel expression (module docstring); a piece it cannot
    translate is a ``GPClassError`` naming that piece."""
    piece = _translate(kernel, num_features, np.dtype(dtype))
    gp_kernel = piece.kernel
    trainable = jax.tree.map(lambda _: False, gp_kernel)
    lower = upper = jax.tree.map(lambda _: 1.0, gp_kernel)  # placeholders of fixed parameters, never read
    for link in piece.links:
        trainable = eqx.tree_at(link.where, trainable, not link.fixed)
        lower = eqx.tree_at(link.where, lower, link.lower)
        upper = eqx.tree_at(link.where, upper, link.upper)
    return Translation(kernel, gp_kernel, trainable, lower, upper, piece.links)


def _translate(k, d, dtype) -> _Piece:
    from sklearn.gaussian_process import kernels as sk

    if isinstance(k, sk.Sum | sk.Product):
        left, right = _translate(k.k1, d, dtype), _translate(k.k2, d, dtype)
        links = tuple(link.nested("k1", "k1") for link in left.links) + tuple(
            link.nested("k2", "k2") for link in right.links)
        if isinstance(k, sk.Sum):
            return _Piece(Sum(left.kernel, right.kernel), links, False)
        if type(k.k1) is sk.ConstantKernel and right.unit_variance:  # C * k: C becomes k's variance
            return _fold(right, "k2", left, "k1")
        if type(k.k2) is sk.ConstantKernel and left.unit_variance:
            return _fold(left, "k1", right, "k2")
        return _Piece(Product(left.kernel, right.kernel), links, False)
    if isinstance(k, sk.Exponentiation):
        base = _translate(k.kernel, d, dtype)
        links = tuple(link.nested("kernel", "kernel") for link in base.links)
        return _Piece(Exponentiation(base.kernel, float(k.exponent)), links, False)
    if type(k) is sk.ConstantKernel:
        return _Piece(Constant(_value(k, "constant_value", dtype)), (_link(k, "constant_value", "variance"),), False)
    if type(k) is sk.WhiteKernel:
        return _Piece(White(_value(k, "noise_level", dtype)), (_link(k, "noise_level", "variance"),), False)
    if type(k) is sk.RBF or (type(k) is sk.Matern and k.nu == math.inf):
        return _stationary(k, SquaredExponential, d, dtype)
    if type(k) is sk.Matern:
        if k.nu not in _MATERN:
            raise GPClassError(
                f"scikit-learn kernel {_shown(k)}: Matern with nu = {k.nu} has no gpclass counterpart; nu must be 0.5, "
                "1.5, 2.5 or inf (gpc.kernels.Matern12, Matern32, Matern52, SquaredExponential)."
            )
        return _stationary(k, _MATERN[k.nu], d, dtype)
    if type(k) is sk.RationalQuadratic:
        return _stationary(k, RationalQuadratic, d, dtype, alpha="alpha")
    if type(k) is sk.ExpSineSquared:
        return _stationary(k, Periodic, d, dtype, period="periodicity")
    if type(k) is sk.DotProduct:
        sigma_0 = _value(k, "sigma_0", dtype)
        link = _link(k, "sigma_0", "offset", squared=True)
        return _Piece(Polynomial(variance=np.asarray(1.0, dtype), offset=sigma_0**2, degree=1), (link,), True)
    raise GPClassError(
        f"scikit-learn kernel {_shown(k)} ({type(k).__name__}) has no gpclass counterpart; gpclass translates "
        f"{SUPPORTED}. Or pass a gpclass kernel (gpclass.kernels)."
    )


def _shown(k) -> str:
    """``repr(k)``, or for a kernel whose repr fails (ExpSineSquared with a vector length scale) its class and
    parameters."""
    try:
        return repr(k)
    except Exception:  # noqa: BLE001 - scikit-learn's own repr is what failed
        return f"{type(k).__name__}({k.get_params(deep=False)})"


def _fold(piece: _Piece, field: str, constant: _Piece, constant_field: str) -> _Piece:
    """``piece`` (a Product's factor ``field``) with the other factor, a ``Constant``, as its variance."""
    kernel = eqx.tree_at(lambda k: k.variance, piece.kernel, constant.kernel.variance)
    (link,) = constant.links
    links = (link._replace(name=f"{constant_field}__{link.name}", where=lambda k: k.variance),) + tuple(
        other._replace(name=f"{field}__{other.name}") for other in piece.links)
    return _Piece(kernel, links, False)


def _value(k, name: str, dtype) -> np.ndarray:
    return np.asarray(getattr(k, name), dtype)


def _link(k, name: str, field: str, squared: bool = False) -> _Link:
    """The link of hyperparameter ``name`` of scikit-learn kernel ``k`` to the gpclass parameter ``field``,
    with its bounds (checked to hold the value, as gpc.fit requires of a start)."""
    hyperparameter = getattr(k, f"hyperparameter_{name}")
    where = lambda kernel: getattr(kernel, field)  # noqa: E731
    if hyperparameter.fixed:
        return _Link(name, where, True, np.float64(1.0), np.float64(1.0), squared)
    bounds = np.asarray(hyperparameter.bounds, np.float64).reshape(-1, 2)
    value = np.squeeze(np.asarray(getattr(k, name), np.float64))
    lower, upper = (bounds[0, 0], bounds[0, 1]) if bounds.shape[0] == 1 else (bounds[:, 0], bounds[:, 1])
    if not np.all((lower <= value) & (value <= upper)):
        raise GPClassError(
            f"scikit-learn kernel {_shown(k)}: {name} = {getattr(k, name)} lies outside {name}_bounds "
            f"{getattr(k, f'{name}_bounds')}; start inside the bounds."
        )
    if squared:
        lower, upper = lower**2, upper**2
    return _Link(name, where, False, np.asarray(lower), np.asarray(upper), squared)


def _stationary(k, cls, d: int, dtype, **extra) -> _Piece:
    """A stationary scikit-learn piece (length_scale, and ``extra``: gpclass field -> scikit-learn name) as
    ``cls`` with variance 1 (fixed)."""
    lengthscale = np.squeeze(_value(k, "length_scale", dtype))  # as scikit-learn reads it: [2.0] is isotropic
    if lengthscale.ndim > 1 or (lengthscale.ndim == 1 and len(lengthscale) != d):
        raise GPClassError(
            f"scikit-learn kernel {_shown(k)}: length_scale has shape {np.shape(k.length_scale)}; the inputs have {d} "
            f"features, so give a scalar (isotropic) or {d} length scales (anisotropic)."
        )
    if lengthscale.ndim == 1 and cls in (Periodic, RationalQuadratic):  # scikit-learn's own refuses to evaluate
        raise GPClassError(f"scikit-learn kernel {_shown(k)}: {type(k).__name__} takes one (isotropic) length scale.")
    values = {field: _value(k, name, dtype) for field, name in extra.items()}
    kernel = cls(variance=np.asarray(1.0, dtype), lengthscale=lengthscale, **values)
    links = (_link(k, "length_scale", "lengthscale"),) + tuple(_link(k, name, field) for field, name in extra.items())
    return _Piece(kernel, links, True)
