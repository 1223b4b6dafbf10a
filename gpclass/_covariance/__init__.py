"""Prior covariances as operators: what a GP prior gives an inference method, and how to solve with it.

A kernel gives a :class:`DenseCovariance` (the Gram matrix K), a ``PerClass``
kernel a :class:`PerClassCovariance` (C blocks K_c, one per latent function),
a sparse prior (``gpc.Sparse``) a :class:`LowRankCovariance` (K~ = Phi Phi^T +
s diag(g)).  Methods use the operator's products, its factorisation of
I + W^1/2 K W^1/2 for a diagonal W >= 0 (``op.factor(w)``, an :class:`AbstractSitesFactor`; the
softmax's block-diagonal W has an :class:`AbstractFactor`, and a Newton step needs only an
:class:`AbstractNewtonSolve`) and the covariance
(K^-1 + W)^-1 of a prior times Gaussian sites (``factor.covariance(op)``); what an operator
cannot do (the dense columns of K, say) it declares by its ``capabilities``,
and a method that needs one asks with :meth:`AbstractCovariance.require`,
which refuses the call with a message naming both.
"""

from ._base import AbstractCovariance, AbstractFactor, AbstractNewtonSolve, AbstractSitesCovariance, AbstractSitesFactor
from .dense import DenseCovariance, DenseFactor, DenseSitesCovariance, PerClassCovariance
from .low_rank import LowRankCovariance, LowRankFactor, LowRankSitesCovariance

__all__ = [
    "AbstractCovariance",
    "AbstractFactor",
    "AbstractNewtonSolve",
    "AbstractSitesCovariance",
    "AbstractSitesFactor",
    "DenseCovariance",
    "DenseFactor",
    "DenseSitesCovariance",
    "LowRankCovariance",
    "LowRankFactor",
    "LowRankSitesCovariance",
    "PerClassCovariance",
]
