"""The inference-method protocol."""

import abc

import equinox as eqx

from .._types import Array, Float
from ..likelihoods import AbstractLikelihood
from ._posterior import GaussianPosterior


class AbstractInference(eqx.Module):
    """An immutable configuration of an approximate inference method.

    ``solve`` works on a covariance matrix and never sees the kernel that made it.
    It returns the fields of a :class:`GaussianPosterior` other than the
    kernel, likelihood and inputs, as a dict, its ``info`` carrying a
    :class:`gpclass.Status`; whether a failure raises is decided by the caller
    (``gpc.infer(..., throw=...)``), never by the method.
    """

    posterior_class = GaussianPosterior  # what ``solve``'s fields build (sampling methods: SamplePosterior)

    def check_ml2(self) -> None:
        """Raise if maximising this method's ``log_marginal`` over hyperparameters is ill-posed (default: fine)."""

    def solve_multiclass(
        self,
        K: Float[Array, "n n"] | Float[Array, "C n n"],
        likelihood: eqx.Module,
        Y: Float[Array, "n C"],
        init: Float[Array, "n C"] | None,
        key: Array | None = None,
    ) -> dict:
        """Approximate the posterior of a softmax model (Y: 0/1 indicators); the fields of a ``SoftmaxPosterior``."""
        raise NotImplementedError(
            f"{type(self).__name__} does not support the multi-class Softmax likelihood; use gpc.Laplace()."
        )

    @abc.abstractmethod
    def solve(
        self,
        K: Float[Array, "n n"],
        likelihood: AbstractLikelihood,
        y: Float[Array, " n"],
        init: Float[Array, " n"] | None,
        key: Array | None = None,
    ) -> dict:
        """Approximate the posterior for prior covariance K, labels y in {-1, +1}."""
