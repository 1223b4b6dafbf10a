"""A user's own Gram matrix as a kernel: graph, string or any other kernel computed outside gpclass."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._errors import error_if
from .._exceptions import GPClassError
from .._types import Array, Float
from .._validation import as_float
from ._base import AbstractKernel


class Precomputed(AbstractKernel):
    """k(i, j) = K[i, j]: a Gram matrix over N items, indexed by the inputs (scikit-learn's and GPML's
    precomputed kernels).

    The inputs X are item numbers, an (n, 1) array of integers 0..N-1 (stored as floats like any input):
    training on items ``train`` and predicting items ``test`` is ``X = train[:, None]``,
    ``X_test = test[:, None]``.  Its Gram matrices are blocks of ``K``, so it runs under every method
    and prior that a kernel's Gram matrix runs under, composes with ``+``, ``*`` and ``OnDims``, and is
    differentiable in ``K`` (``jax.grad`` through ``gpc.infer``).  ``gpc.fit`` holds ``K`` fixed (it is data,
    not N^2 hyperparameters): fit an amplitude with ``gpc.kernels.Scale(Precomputed(K))``.

    Example::

        >>> K = np.array([[2.0, 1.0, 0.5], [1.0, 2.0, 1.0], [0.5, 1.0, 2.0]])  # three items
        >>> kernel = gpc.kernels.Precomputed(K)
        >>> X, X_test = np.array([[0.0], [2.0]]), np.array([[1.0]])  # train on items 0 and 2, predict item 1
        >>> print(kernel.gram(X))
        [[2.  0.5]
         [0.5 2. ]]
        >>> print(kernel.gram(X_test, X))
        [[1. 1.]]

    ``gpc.infer(method, kernel, likelihood, X, y)`` and ``gpc.predict(posterior, X_test)`` then take these
    item numbers as they take inputs.

    ``from_blocks(K_train, K_cross, k_test)`` builds one from a training Gram matrix, the
    training-by-test cross-covariances and the test variances, which is what prediction needs;
    the test-by-test covariances it does not have are NaN, so anything that would use them
    (a joint predictive covariance) shows NaN instead of a number.
    """

    K: Float[Array, "N N"] = eqx.field(converter=as_float)
    data_fields = ("K",)  # gpc.fit, fit_svgp and fit_em_ep hold K fixed: data, not N^2 hyperparameters

    def __check_init__(self):
        if jnp.ndim(self.K) != 2 or self.K.shape[0] != self.K.shape[1]:
            raise GPClassError(f"Precomputed: K must be a square Gram matrix; got shape {jnp.shape(self.K)}.")
        if not isinstance(self.K, jax.core.Tracer):  # a K computed inside a transformation is the caller's
            K = np.asarray(self.K)
            scale = np.nanmax(np.abs(K), initial=0.0)
            if not np.allclose(K, K.T, rtol=0.0, atol=1e-10 * scale, equal_nan=True):
                i, j = np.unravel_index(np.nanargmax(np.abs(K - K.T)), K.shape)
                raise GPClassError(f"Precomputed: K must be symmetric (a Gram matrix); K[{i}, {j}] = {K[i, j]:.6g} "
                                   f"but K[{j}, {i}] = {K[j, i]:.6g}. Symmetrise it, e.g. (K + K.T) / 2, if the "
                                   "difference is rounding.")

    @classmethod
    def from_blocks(cls, K_train, K_cross, k_test) -> "Precomputed":
        """Items 0..n-1 are the training cases (K_train, n x n), n..n+m-1 the test cases (K_cross, n x m, and
        their variances k_test, m); the test-by-test covariances are unknown (NaN)."""
        K_train, K_cross, k_test = (np.asarray(a, dtype=float) for a in (K_train, K_cross, k_test))
        n, m = K_cross.shape
        if K_train.shape != (n, n) or k_test.shape != (m,):
            raise GPClassError(f"Precomputed.from_blocks: K_train {K_train.shape}, K_cross {K_cross.shape} and "
                               f"k_test {k_test.shape} do not fit together ((n, n), (n, m) and (m,)).")
        test = np.full((m, m), np.nan)
        np.fill_diagonal(test, k_test)
        return cls(np.block([[K_train, K_cross], [K_cross.T, test]]))

    def evaluate(self, x1, x2):
        return self._take(self._items(x1[None, :]), self._items(x2[None, :]))[0, 0]

    def gram(self, X1, X2=None):
        i1 = self._items(X1)
        return self._take(i1, i1 if X2 is None else self._items(X2))

    def diag(self, X):
        return jnp.take(jnp.diagonal(self.K), self._items(X), mode="fill", fill_value=jnp.nan)

    def check_inputs(self, X) -> None:
        self._items(X)

    def _message(self) -> str:
        N = self.K.shape[0]
        return f"Precomputed: the inputs must be item numbers 0..{N - 1} of its {N} x {N} Gram matrix."

    def _take(self, i1, i2):
        """K[i1][:, i2] (NaN for an item out of range, which :meth:`_items` refuses)."""
        rows = jnp.take(self.K, i1, axis=0, mode="fill", fill_value=jnp.nan)
        return jnp.take(rows, i2, axis=1, mode="fill", fill_value=jnp.nan)

    def _items(self, X) -> Array:
        """The item numbers of inputs X (n, 1), refused unless they are items of K: here when they are known,
        by a run-time check of the program when they are traced."""
        if jnp.ndim(X) != 2 or X.shape[1] != 1:
            raise GPClassError(f"Precomputed: the inputs are item numbers, an (n, 1) array; got shape {jnp.shape(X)}.")
        if not isinstance(X, jax.core.Tracer):
            values = np.asarray(X)[:, 0]
            if values.size and (np.any(values != np.round(values)) or values.min() < 0
                                or values.max() >= self.K.shape[0]):
                raise GPClassError(f"{self._message()[:-1]}; got values from {values.min()} to {values.max()}.")
        values = X[:, 0]
        if isinstance(X, jax.core.Tracer):
            values = error_if(values, jnp.any((values != jnp.round(values)) | (values < 0)
                                              | (values >= self.K.shape[0])), self._message())
        return jnp.round(values).astype(jnp.int32)

