"""The exact prior: the Gram matrix K (one latent function) or C blocks K_c (one per class).

The factorisation of B = I + W^1/2 K W^1/2 is GPML's (section 3.4.3, ``_linalg``):
its Cholesky factor, solves and log-determinant with the hand-written reverse
mode that reuses the factor.
"""

from typing import ClassVar

import jax.numpy as jnp

from .. import _dense as dense
from .._exceptions import GPClassError
from .._linalg import factor_b, factor_b_given, half_log_det_b, solve_i_plus_wk, sqrt_precision
from .._types import Array, Float
from .._validation import check_covariance
from . import dense_classes
from ._base import BOUND, MATRIX, PRIOR, AbstractCovariance, AbstractSitesCovariance, AbstractSitesFactor


class _SoftmaxFactorisations:
    """The softmax's factorisations of a Gram matrix K, shared or one per class (``dense_classes``)."""

    def class_factor(self, pi):
        """GPML Algorithm 3.3's blocks at pi."""
        return dense_classes.class_factor(self.K, pi)

    def class_solver(self, pi):
        """Conjugate gradients on products with K (``dense_classes.ClassSolver``): no factorisation per step."""
        return dense_classes.ClassSolver(pi)

    def class_factor_given(self, pi, factor):
        return dense_classes.class_factor_given(self.K, pi, factor)


class DenseCovariance(_SoftmaxFactorisations, AbstractCovariance):
    """K, the n x n Gram matrix of a kernel on the training inputs."""

    K: Float[Array, "n n"]
    capabilities: ClassVar[frozenset[str]] = frozenset({MATRIX, PRIOR, BOUND})

    def describe(self):
        return "a kernel's Gram matrix"

    @property
    def shape(self):
        return self.K.shape

    @property
    def dtype(self):
        return self.K.dtype

    def mv(self, v):
        return self.K @ v

    def abs_mv(self, v):
        return jnp.abs(self.K) @ v

    def diagonal(self):
        return jnp.diagonal(self.K)

    def value_checks(self, checks):
        check_covariance(self.K, checks)
        return self

    def factor(self, w) -> "DenseFactor":
        sqrt_w = sqrt_precision(w)
        return DenseFactor(w=w, sqrt_w=sqrt_w, chol=factor_b(self.K, sqrt_w))

    def factor_given(self, w, factor: "DenseFactor") -> "DenseFactor":
        """The factor L of B from ``factor`` (no second factorisation); its reverse mode factorises B again
        only when something differentiated depends on L itself (``_linalg.factor_b_given``)."""
        sqrt_w = sqrt_precision(w)
        return DenseFactor(w=w, sqrt_w=sqrt_w, chol=factor_b_given(self.K, sqrt_w, factor.chol))


class DifferencesCovariance(DenseCovariance):
    """D K D^T, the prior covariance of the utility differences of a preference likelihood's comparisons."""

    def describe(self):
        return "the covariance of the comparisons' utility differences"


class DenseFactor(AbstractSitesFactor):
    """L L^T = B = I + W^1/2 K W^1/2 (GPML eq. 3.26), with W^1/2."""

    w: Float[Array, " n"]
    sqrt_w: Float[Array, " n"]
    chol: Float[Array, "n n"]

    def solve_i_plus_wk(self, op: DenseCovariance, v):
        """(I + W K)^-1 v = v - W^1/2 B^-1 W^1/2 K v (``_linalg.solve_i_plus_wk``)."""
        return solve_i_plus_wk(op.K, self.sqrt_w, self.chol, v)

    def half_log_det_b(self, op: DenseCovariance):
        """sum_i log L_ii, its derivative flowing to K and W^1/2 directly (``_linalg.half_log_det_b``)."""
        return half_log_det_b(op.K, self.sqrt_w, self.chol)

    def covariance(self, op: DenseCovariance) -> "DenseSitesCovariance":
        """Sigma = K - Vt Vt^T, Vt = K W^1/2 L^-T (GPML eq. 3.68): one right-sided triangular solve."""
        return DenseSitesCovariance(K=op.K, Vt=covariance_root(op.K, self.sqrt_w, self.chol))


def covariance_root(K, sqrt_w, L):
    """Vt = K W^1/2 L^-T, so that (K^-1 + W)^-1 = K - Vt Vt^T (GPML eq. 3.68).

    Vt is V^T for GPML's V = L^-1 W^1/2 K, computed by a right-sided triangular solve: XLA's CPU backend forms
    Vt Vt^T from it faster than V^T V from a left-sided solve (measured on the CPU).
    """
    return dense.solve_triangular_right(L, K * sqrt_w[None, :], lower=True, trans=1)


class DenseSitesCovariance(AbstractSitesCovariance):
    """Sigma = K - Vt Vt^T (:meth:`DenseFactor.covariance`), and Sigma itself once :meth:`formed`."""

    K: Float[Array, "n n"]
    Vt: Float[Array, "n n"]
    Sigma: Float[Array, "n n"] | None = None
    has_matrix: ClassVar[bool] = True

    def formed(self) -> "DenseSitesCovariance":
        """This Sigma with its matrix formed: products go through it (module docstring of ``_base``)."""
        return self if self.Sigma is not None else DenseSitesCovariance(self.K, self.Vt, self.matrix())

    def times(self, v):
        if self.Sigma is not None:
            return self.Sigma @ v
        return self.K @ v - self.Vt @ (self.Vt.T @ v)

    def squared_times(self, v):
        return self.matrix() ** 2 @ v

    def variance(self):
        if self.Sigma is not None:
            return jnp.diagonal(self.Sigma)
        return jnp.diagonal(self.K) - jnp.sum(self.Vt**2, axis=1)

    def quadratic(self, v):
        """v^T K v - |Vt^T v|^2."""
        u = self.Vt.T @ v
        return jnp.dot(v, self.K @ v) - jnp.dot(u, u)

    def matrix(self):
        return self.K - self.Vt @ self.Vt.T if self.Sigma is None else self.Sigma


class PerClassCovariance(_SoftmaxFactorisations, AbstractCovariance):
    """C blocks K_c (C x n x n), one per latent function: the prior of a softmax model with a PerClass kernel.

    Its products act on (n, C) arrays, class by class; it has no factorisation
    for a diagonal W (that is a one-latent method's): the softmax's block W
    is factorised by multi-class Laplace itself.
    """

    K: Float[Array, "C n n"]
    capabilities: ClassVar[frozenset[str]] = frozenset({MATRIX, PRIOR, BOUND})

    def describe(self):
        return "a PerClass kernel"

    @property
    def shape(self):
        return self.K.shape[1:]

    @property
    def dtype(self):
        return self.K.dtype

    def mv(self, v: Float[Array, "n C"]) -> Float[Array, "n C"]:
        return jnp.einsum("cij,jc->ic", self.K, v)

    def abs_mv(self, v: Float[Array, "n C"]) -> Float[Array, "n C"]:
        return jnp.einsum("cij,jc->ic", jnp.abs(self.K), v)

    def diagonal(self) -> Float[Array, "n C"]:
        return jnp.diagonal(self.K, axis1=-2, axis2=-1).T

    def value_checks(self, checks):
        check_covariance(self.K, checks)
        return self

    def per_class(self):
        """One :class:`DenseCovariance` per class, stacked along axis 0 (the blocks K_c)."""
        return DenseCovariance(self.K), 0

    def factor(self, w):
        raise GPClassError("a PerClass prior has one block per class: it needs the multi-class "
                           "gpc.likelihoods.Softmax likelihood.")

    def factor_given(self, w, factor):
        return self.factor(w)

    def check_latent(self, num_latent):
        if num_latent == 1:
            raise GPClassError("a PerClass kernel needs the multi-class gpc.likelihoods.Softmax likelihood.")
        if num_latent != self.K.shape[0]:
            raise GPClassError(f"the PerClass kernel has {self.K.shape[0]} classes but the likelihood has "
                               f"{num_latent}.")

