"""One kernel per latent function of a multi-class model, batched along a class axis."""

from collections.abc import Sequence

import equinox as eqx
import jax
import jax.numpy as jnp

from .._covariance import PerClassCovariance
from .._exceptions import GPClassError
from ._base import AbstractKernel


class PerClass(AbstractKernel):
    """C kernels of one structure, k_c for class c, stored as one module with a leading class axis.

    GPML section 3.5 allows a different covariance function K_c per class.
    ``PerClass([k_0, ..., k_{C-1}])`` stacks the parameters of C kernels of the
    same type (say, SE kernels with their own variance and length scale);
    ``gram`` and ``diag`` ``vmap`` over the class axis and return arrays with
    a leading axis of length C.  A plain kernel (no ``PerClass``) is shared
    by all classes.  Only the multi-class (softmax) inference uses it.

    Example::

        >>> SE = gpc.kernels.SquaredExponential
        >>> k = gpc.kernels.PerClass([SE(variance=1.0, lengthscale=1.0), SE(variance=2.0, lengthscale=0.5)])
        >>> k.num_classes
        2
        >>> print(k.diag(jnp.zeros((4, 3))))  # each class's prior variances
        [[1. 1. 1. 1.]
         [2. 2. 2. 2.]]

    ``k.gram(X)`` is then (C, n, n), one block per class; ``gpc.likelihoods.Softmax(C)`` takes it.
    """

    kernels: AbstractKernel

    def __init__(self, kernels: Sequence[AbstractKernel] | AbstractKernel):
        if isinstance(kernels, AbstractKernel):
            stacked = kernels
        else:
            kernels = list(kernels)
            if len(kernels) < 2 or len({jax.tree.structure(k) for k in kernels}) != 1:
                got = ", ".join(type(k).__name__ for k in kernels) or "none"
                raise GPClassError(f"PerClass needs at least two kernels of the same structure (type and static "
                                   f"fields), one per class; got {len(kernels)} ({got}): stack kernels of one "
                                   "structure, e.g. [gpc.kernels.SquaredExponential(lengthscale=l) for l in (0.5, 1.0, "
                                   "2.0)], and give each the same ARD shape.")
            shapes = [tuple(jnp.shape(leaf) for leaf in jax.tree.leaves(k)) for k in kernels]
            if len(set(shapes)) != 1:
                raise GPClassError(f"PerClass: the kernels' parameters differ in shape, {shapes}: give every class's "
                                   "kernel the same shapes (a scalar length scale for each, or one of the same ARD "
                                   "shape (d,) for each).")
            stacked = jax.tree.map(lambda *leaves: jnp.stack(leaves), *kernels)
        leading = {jnp.shape(leaf)[0] if jnp.ndim(leaf) else None for leaf in jax.tree.leaves(stacked)}
        if len(leading) != 1 or None in leading:
            raise GPClassError("PerClass: every parameter needs the same leading class axis; got leading sizes "
                               f"{leading}: stack every parameter with one entry per class, or pass a list of "
                               "kernels of one structure.")
        self.kernels = stacked

    @property
    def num_classes(self) -> int:
        return jnp.shape(jax.tree.leaves(self.kernels)[0])[0]

    def evaluate(self, x1, x2):
        return eqx.filter_vmap(lambda k: k.evaluate(x1, x2))(self.kernels)

    def gram(self, X1, X2=None):
        return eqx.filter_vmap(lambda k: k.gram(X1, X2))(self.kernels)

    def diag(self, X):
        return eqx.filter_vmap(lambda k: k.diag(X))(self.kernels)

    def covariance(self, X) -> PerClassCovariance:
        """The C blocks k_c(X, X) as one operator."""
        return PerClassCovariance(self.gram(X))

    def parameter_checks(self, checks):
        # The stacked kernel is one of its class's kernels with a class axis on every parameter; its checks
        # reduce over every entry, so they check all classes at once.
        self.kernels.parameter_checks(checks)

    def check_inputs(self, X) -> None:
        self.kernels.check_inputs(X)
