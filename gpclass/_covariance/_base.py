"""The covariance-operator protocol: products, the diagonal, and the factorisation for a diagonal W."""

import abc
from typing import ClassVar

import equinox as eqx
import jax.numpy as jnp

from .._exceptions import GPClassError
from .._types import Array, Float

# What an operator can be asked for beyond the protocol below.
MATRIX = "matrix"  # the dense n x n matrix K itself (its columns, its Cholesky factor): DenseCovariance
PRIOR = "prior"  # K is the model's prior covariance itself, as EP's sites need: exact priors and FITC
BOUND = "bound"  # the variational bounds (KL, Jaakkola-Jordan) are defined under it: exact priors, FITC and VFE


class AbstractCovariance(eqx.Module):
    """A prior covariance over the n training cases, as an operator.

    Every operator has :meth:`mv` (K v), :meth:`abs_mv` (|K| v, the rounding
    scale of K v), :meth:`diagonal` and :meth:`factor` (the factorisation of
    B = I + W^1/2 K W^1/2 for a diagonal W >= 0, an :class:`AbstractSitesFactor`).
    ``capabilities`` names what else it offers (``MATRIX``, ``PRIOR``, ``BOUND``).
    """

    capabilities: ClassVar[frozenset[str]] = frozenset()

    def describe(self) -> str:
        """What made this operator, for messages."""
        return "this prior"

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

    def check_latent(self, num_latent: int) -> None:
        """Raise unless this prior serves a likelihood with ``num_latent`` latent functions per case (any, here)."""

    def per_class(self) -> tuple["AbstractCovariance", int | None]:
        """This prior as one operator per latent function, for a method that treats the classes separately
        (``gpc.KL()`` with the softmax): ``(operator, axis)`` for ``jax.vmap(..., in_axes=axis)`` over the
        classes.  Here the C classes share this prior: ``(self, None)``."""
        return self, None

    def trace_variance(self) -> Float[Array, " n"] | float:
        """diag(K) - diag(K~): the variance of each f_i that this operator leaves out of the prior and the
        variational bounds add to every marginal (VFE's g, Titsias 2009); 0 for the exact prior and FITC."""
        return 0.0

    @abc.abstractmethod
    def factor(self, w: Float[Array, " n"]) -> "AbstractSitesFactor":
        """The factorisation of I + W^1/2 K W^1/2 for W = diag(w) >= 0."""

    def class_factor(self, pi: Float[Array, "n C"]) -> "AbstractFactor":
        """The factorisation of I + W K for the softmax's block-diagonal W = diag(pi) - pi pi^T, case by case
        (GPML eq. 3.38), with C latent functions, each with this prior."""
        raise GPClassError(f"a {type(self).__name__} ({self.describe()}) has no factorisation for a likelihood with "
                           "several latent functions per case (gpc.likelihoods.Softmax): implement class_factor in "
                           "it (as DenseCovariance and LowRankCovariance do), or use a kernel's Gram matrix or "
                           "gpc.Sparse(kernel, Z) as the prior.")

    def class_solver(self, pi: Float[Array, "n C"]) -> "AbstractNewtonSolve":
        """What a Newton step needs of :meth:`class_factor`: its solve with I + W K (by default the factor)."""
        return self.class_factor(pi)

    def class_factor_given(self, pi: Float[Array, "n C"], factor: "AbstractFactor") -> "AbstractFactor":
        """``class_factor(pi)`` when its value ``factor`` was computed already (by default computed again: XLA
        merges the two)."""
        return self.class_factor(pi)

    @abc.abstractmethod
    def factor_given(self, w: Float[Array, " n"], factor: "AbstractSitesFactor") -> "AbstractSitesFactor":
        """``factor(w)`` when its value ``factor`` was computed already (by a solver's loop): that value, and
        the derivative of ``factor(w)`` with respect to the operator and w."""

    @abc.abstractmethod
    def value_checks(self, checks) -> "AbstractCovariance":
        """Add the run-time checks of this operator's values to ``checks`` (``_validation.Checks``); returns self."""

    def require(self, capability: str, who: str, advice: str = "") -> None:
        """Raise unless this operator has ``capability``: ``who`` (a method and setting) needs it."""
        if capability not in self.capabilities:
            raise GPClassError(f"{who} needs the prior covariance as {_NEEDS[capability]}; "
                               f"a {type(self).__name__} ({self.describe()}) is not one."
                               f"{' ' + advice if advice else ''}")


_NEEDS = {MATRIX: "a dense n x n matrix (its columns and Cholesky factor)",
          PRIOR: "the model's prior covariance itself (a kernel's, or a sparse prior's FITC)",
          BOUND: "a prior under which its bound is defined (a kernel's, or a sparse prior's FITC or VFE)"}


class AbstractNewtonSolve(eqx.Module):
    """What a Newton step of Laplace's method needs at W: solves with I + W K (no log-determinant)."""

    @abc.abstractmethod
    def solve_i_plus_wk(self, op: AbstractCovariance, v: Float[Array, " n"]) -> Float[Array, " n"]:
        """(I + W K)^-1 v, without inverting K or W."""


class AbstractFactor(AbstractNewtonSolve):
    """I + W K factorised at W (diagonal, or the softmax's block-diagonal W): Laplace's log-determinant term too."""

    @abc.abstractmethod
    def power_log_det(self, op: AbstractCovariance) -> Float[Array, ""]:
        """The log-determinant term of the Laplace and variational bounds under this prior: 1/2 log|B| for an
        exact prior (a sparse prior adds its trace term, GPML's ``apxSparse`` ldB2)."""


class AbstractSitesFactor(AbstractFactor):
    """B = I + W^1/2 K W^1/2 factorised for one operator K and diagonal W (Gaussian sites): the covariance of
    prior times sites, and the log-determinant of EP's and the bounds' normalisers."""

    @abc.abstractmethod
    def covariance(self, op: AbstractCovariance) -> "AbstractSitesCovariance":
        """Sigma = (K^-1 + W)^-1, the covariance of the prior times Gaussian sites of precisions W, by its products."""

    @abc.abstractmethod
    def half_log_det_b(self, op: AbstractCovariance) -> Float[Array, ""]:
        """1/2 log|I + W^1/2 K W^1/2|."""

    def power_log_det(self, op: AbstractCovariance) -> Float[Array, ""]:
        """1/2 log|B| for an exact prior (a sparse prior's factor adds its trace term)."""
        return self.half_log_det_b(op)


class AbstractSitesCovariance(eqx.Module):
    """Sigma = (K^-1 + W)^-1 for a prior operator K and a diagonal W >= 0: the covariance of q(f) for a prior
    times diagonal Gaussian sites (EP, the variational bounds), by its products.

    ``matrix()`` gives Sigma as an n x n array where the prior is a matrix (``has_matrix``): a method
    then forms its n x n Jacobians and solves them by LU; otherwise it applies them by these products.
    A method that forms Sigma anyway takes its products through it (:meth:`formed`): for a stiff prior
    (K v - Vt (Vt^T v)) cancels more digits than (K - Vt Vt^T) v: the Jaakkola-Jordan bound on a FITC
    prior with a large signal variance, solved densely, stalled short of its tolerance with the first and
    converged with the second.
    """

    has_matrix: ClassVar[bool] = False

    def formed(self) -> "AbstractSitesCovariance":
        """This Sigma, its products through its formed matrix where it has one (itself otherwise)."""
        return self

    @abc.abstractmethod
    def times(self, v: Float[Array, " n"]) -> Float[Array, " n"]:
        """Sigma v."""

    @abc.abstractmethod
    def squared_times(self, v: Float[Array, " n"]) -> Float[Array, " n"]:
        """(Sigma o Sigma) v, Sigma's elementwise square: how the marginal variances move with W."""

    @abc.abstractmethod
    def variance(self) -> Float[Array, " n"]:
        """diag Sigma, the marginal variances."""

    @abc.abstractmethod
    def quadratic(self, v: Float[Array, " n"]) -> Float[Array, ""]:
        """v^T Sigma v."""

    def matrix(self) -> Float[Array, "n n"]:
        """Sigma as a dense matrix (only where ``has_matrix``)."""
        raise GPClassError(f"{type(self).__name__} is applied by its products; it has no dense matrix (has_matrix is "
                           "False): take its products (times) instead, or, for a Sigma that has one, set "
                           "has_matrix = True and implement matrix().")
