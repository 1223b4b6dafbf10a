"""The covariance-operator protocol: products, the diagonal, and the factorisation for a diagonal W."""

import abc
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp

from .._exceptions import GPClassError
from .._types import Array, Float

# What an operator can be asked for beyond the protocol below.
MATRIX = "matrix"  # the dense n x n matrix K itself (its columns, its Cholesky factor): DenseCovariance
CLASSES = "classes"  # one block per latent function (C x n x n): PerClassCovariance


class AbstractCovariance(eqx.Module):
    """A prior covariance over the n training cases, as an operator.

    Every operator has :meth:`mv` (K v), :meth:`abs_mv` (|K| v, the rounding
    scale of K v), :meth:`diagonal` and :meth:`factor` (the factorisation of
    B = I + W^1/2 K W^1/2 for a diagonal W >= 0, an :class:`AbstractFactor`).
    ``capabilities`` names what else it offers (``MATRIX``, ``CLASSES``).
    """

    capabilities: ClassVar[frozenset[str]] = frozenset()

    @property
    @abc.abstractmethod
    def shape(self) -> tuple[int, int]:
        """(n, n)."""

    @property
    @abc.abstractmethod
    def dtype(self):
        """The floating-point dtype of the operator."""

    @abc.abstractmethod
    def mv(self, v: Float[Array, " n"]) -> Float[Array, " n"]:
        """K v."""

    @abc.abstractmethod
    def abs_mv(self, v: Float[Array, " n"]) -> Float[Array, " n"]:
        """|K| v for v >= 0 (or a bound on it): how much computing K v can round by, over eps."""

    def product_scale(self, v: Float[Array, " n"], product: Float[Array, " n"]) -> Float[Array, " n"]:
        """A per-component scale of the rounding in ``product`` = K v, over eps: |K| |v| by default (an
        operator whose |K| products cost more than its solves gives a cheaper estimate)."""
        return self.abs_mv(jnp.abs(v))

    @abc.abstractmethod
    def diagonal(self) -> Float[Array, " n"]:
        """diag K: the prior variances."""

    @abc.abstractmethod
    def factor(self, w: Float[Array, " n"]) -> "AbstractFactor":
        """The factorisation of I + W^1/2 K W^1/2 for W = diag(w) >= 0."""

    @abc.abstractmethod
    def factor_given(self, w: Float[Array, " n"], factor: "AbstractFactor") -> "AbstractFactor":
        """``factor(w)`` when its value ``factor`` was computed already (by a solver's loop): that value, and
        the derivative of ``factor(w)`` with respect to the operator and w."""

    @abc.abstractmethod
    def value_checks(self, checks) -> "AbstractCovariance":
        """Add the run-time checks of this operator's values to ``checks`` (``_validation.Checks``); returns self."""

    def require(self, capability: str, who: str, advice: str = "") -> None:
        """Raise unless this operator has ``capability``: ``who`` (a method and setting) needs it."""
        if capability not in self.capabilities:
            raise GPClassError(f"{who} needs the prior covariance as a {_NEEDS[capability]}; "
                               f"a {type(self).__name__} ({_SOURCE.get(type(self).__name__, 'this prior')}) is not "
                               f"one.{' ' + advice if advice else ''}")


_NEEDS = {MATRIX: "dense n x n matrix (its columns and Cholesky factor)",
          CLASSES: "block per class (a PerClass kernel)"}
_SOURCE = {"LowRankCovariance": "a sparse prior, gpc.Sparse", "DenseCovariance": "a kernel's Gram matrix",
           "PerClassCovariance": "a PerClass kernel"}


class AbstractFactor(eqx.Module):
    """B = I + W^1/2 K W^1/2 factorised for one operator K and diagonal W: solves and log-determinants."""

    @abc.abstractmethod
    def solve_i_plus_wk(self, op: AbstractCovariance, v: Float[Array, " n"]) -> Float[Array, " n"]:
        """(I + W K)^-1 v, without inverting K or W."""

    @abc.abstractmethod
    def half_log_det_b(self, op: AbstractCovariance) -> Float[Array, ""]:
        """1/2 log|I + W^1/2 K W^1/2|."""

    def power_log_det(self, op: AbstractCovariance) -> Float[Array, ""]:
        """The log-determinant term of the Laplace and variational bounds under this prior: 1/2 log|B| for an
        exact prior (a sparse prior adds its trace term, GPML's ``apxSparse`` ldB2)."""
        return self.half_log_det_b(op)
