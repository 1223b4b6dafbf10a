"""Prior covariances as operators: what a GP prior gives an inference method, and how to solve with it.

A kernel gives a :class:`DenseCovariance` (the Gram matrix K), a ``PerClass``
kernel a :class:`PerClassCovariance` (C blocks K_c, one per latent function),
a sparse prior (``gpc.Sparse``) a :class:`LowRankCovariance` (K~ = Phi Phi^T +
s diag(g)).  Methods use the operator's products and its factorisation of
I + W^1/2 K W^1/2 for a diagonal W >= 0 (``op.factor(w)``); what an operator
cannot do (the dense columns of K, say) it declares by its ``capabilities``,
and a method that needs one asks with :meth:`AbstractCovariance.require`,
which refuses the call with a message naming both.
"""

from ._base import AbstractCovariance, AbstractFactor
from .dense import DenseCovariance, DenseFactor, PerClassCovariance
from .low_rank import LowRankCovariance, LowRankFactor, times_inverse_transpose

__all__ = [
    "AbstractCovariance",
    "AbstractFactor",
    "DenseCovariance",
    "DenseFactor",
    "LowRankCovariance",
    "LowRankFactor",
    "PerClassCovariance",
    "times_inverse_transpose",
]
