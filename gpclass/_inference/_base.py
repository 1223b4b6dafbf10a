"""The inference-method protocol."""

import abc

import equinox as eqx

from .._exceptions import GPClassError
from .._types import Array, Float
from ..likelihoods import AbstractLikelihood
from ._posterior import GaussianSolution, SampleSolution, SoftmaxSolution, SparseSolution


class AbstractInference(eqx.Module):
    """An immutable configuration of an approximate inference method.

    ``solve`` works on a covariance matrix and never sees the kernel that made
    it.  It returns a typed solution (``GaussianSolution``, or
    ``SoftmaxSolution`` / ``SampleSolution``) whose ``info`` carries a
    :class:`gpclass.Status`; whether a failure raises is decided by the caller
    (``gpc.infer(..., throw=...)``), never by the method.  ``multiclass`` says
    whether ``solve`` accepts likelihoods with several latent functions per
    case (``likelihood.num_latent > 1``: the softmax).
    """

    multiclass = False
    supports_mask = False  # left-out cases (``mask=``): methods that see the data only through the likelihood

    def check_ml2(self) -> None:
        """Raise if maximising this method's ``log_marginal`` over hyperparameters is ill-posed (default: fine)."""

    def solve_sparse(self, K, likelihood, y, init=None, key=None) -> SparseSolution:
        """The approximation under a sparse prior ``K`` (a ``LowRankCovariance``, built by ``gpc.Sparse``)."""
        raise GPClassError(
            f"{type(self).__name__} does not support a sparse prior (gpc.Sparse); use gpc.Laplace(), gpc.EP(), gpc.KL() "
            "or gpc.JaakkolaJordan()."
        )

    @abc.abstractmethod
    def solve(
        self,
        K: Float[Array, "n n"] | Float[Array, "C n n"],
        likelihood: AbstractLikelihood,
        y: Float[Array, " n"] | Float[Array, "n C"],
        init=None,
        key: Array | None = None,
    ) -> GaussianSolution | SoftmaxSolution | SampleSolution:
        """Approximate the posterior for prior covariance K and labels as ``likelihood.check_labels`` gives them."""
