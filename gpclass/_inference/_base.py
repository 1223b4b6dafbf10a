"""The inference-method protocol."""

import equinox as eqx
import jax

from .._covariance import AbstractCovariance
from .._covariance._base import MATRIX
from .._exceptions import GPClassError
from .._types import Array
from ..likelihoods import AbstractLikelihood
from ._posterior import AbstractPosterior


class AbstractInference(eqx.Module):
    """An immutable configuration of an approximate inference method.

    ``solve`` works on the prior covariance as an operator
    (``gpclass._covariance``: a kernel's Gram matrix, a sparse prior's K~, per-class
    blocks) and never sees the kernel that made it.  It returns the posterior of
    its kind without kernel, likelihood and inputs (``gpc.infer`` adds them),
    whose ``info`` carries a :class:`gpclass.Status`; whether a failure raises
    is decided by the caller (``gpc.infer(..., throw=...)``), never by the
    method.  ``multiclass`` says whether ``solve`` accepts likelihoods with
    several latent functions per case (``likelihood.num_latent > 1``: the softmax).

    Example:
        >>> methods = [gpc.Laplace(), gpc.EP(), gpc.KL(), gpc.JaakkolaJordan(), gpc.MCMC(), gpc.AIS()]
        >>> all(isinstance(method, gpc.AbstractInference) for method in methods)
        True
        >>> gpc.Laplace(max_steps=50) == gpc.Laplace(max_steps=50)  # configurations compare by value
        True
        >>> gpc.MCMC().multiclass, gpc.JaakkolaJordan().multiclass  # accepts Softmax(C)?
        (True, False)

    Each is the first argument of :func:`gpclass.infer` and :func:`gpclass.fit`.
    """

    multiclass = False
    supports_mask = False  # left-out cases (``mask=``): methods that see the data only through the likelihood

    def multiclass_for(self, likelihood) -> bool:
        """Whether ``solve`` accepts this likelihood with several latent functions per case (``multiclass``)."""
        return self.multiclass

    def check_ml2(self) -> None:
        """Raise if maximising this method's ``log_marginal`` over hyperparameters is ill-posed (default: fine)."""

    def solve(
        self,
        op: AbstractCovariance,
        likelihood: AbstractLikelihood,
        y,
        init=None,
        key: Array | None = None,
    ) -> AbstractPosterior:
        """Approximate the posterior for the prior ``op`` and labels as ``likelihood.check_labels`` gives them.

        By default a method works on the dense matrix K (:meth:`solve_matrix`) and refuses any other prior;
        a method that runs on every operator overrides ``solve``.
        """
        if MATRIX not in op.capabilities:
            raise GPClassError(
                f"{type(self).__name__} does not support a sparse prior (gpc.Sparse); use gpc.Laplace(), gpc.EP(), "
                "gpc.KL() or gpc.JaakkolaJordan()."
            )
        return self.solve_matrix(op.K, likelihood, y, init, key)

    def warm_start_shape(self, op: AbstractCovariance, likelihood: AbstractLikelihood, y, key=None):
        """The shapes and dtypes of ``solve(op, likelihood, y, ...).warm_start``, as ``jax.ShapeDtypeStruct``s:
        what ``init`` must look like (``gpc.fit`` starts its inner solves from zeros of it).  By default the
        method's own solve is traced for it (``jax.eval_shape``: no computation, but a trace); a method whose
        warm start has a simple form says so (Laplace: a = K^-1 f, one per site label)."""
        return jax.eval_shape(lambda: self.solve(op, likelihood, y, None, key).warm_start)

    def solve_matrix(self, K, likelihood, y, init=None, key=None) -> AbstractPosterior:
        """The approximation for the dense prior covariance K (n x n, or C x n x n per class)."""
        raise NotImplementedError
