"""The scikit-learn estimator's settings, checked before the data are looked at, and the kernel ML-II starts from.

``GaussianProcessClassifier`` (``gpclass.sklearn``) inherits these methods from :class:`SettingsMixin`; they read
the estimator's parameters.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._exceptions import GPClassError
from ._inference import EP, KL, JaakkolaJordan, Laplace
from ._sklearn_kernels import is_sklearn_kernel, translate
from .kernels import AbstractKernel, SquaredExponential
from .likelihoods import Logistic, Ordinal, Probit

_METHODS = {"laplace": Laplace, "ep": EP, "kl": KL, "jj": JaakkolaJordan}
_LIKELIHOODS = {"logistic": Logistic, "probit": Probit, "ordinal": Ordinal, "ordinal_logit": Ordinal}


class SettingsMixin:
    """The estimator's ``_checked_*`` settings validation, ``_initial_kernel`` and what the ``likelihood``
    setting implies (``_ordinal``, ``_link``)."""

    def _checked_settings(self):
        """(dtype, method, likelihood) from the parameters, checked before the data are looked at."""
        dtype = self._checked_dtype()
        method, likelihood = self._checked_method(), self._checked_likelihood()
        for name in ("max_steps", "mc_samples"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
                raise GPClassError(f"{name} must be a positive integer; got {value!r}.")
        restarts = self.n_restarts_optimizer
        if isinstance(restarts, bool) or not isinstance(restarts, (int, np.integer)) or restarts < 0:
            raise GPClassError(f"n_restarts_optimizer must be a non-negative integer; got {restarts!r}.")
        if self.multi_class not in ("softmax", "one_vs_rest", "one_vs_one"):
            raise GPClassError(
                f"multi_class must be 'softmax', 'one_vs_rest' or 'one_vs_one'; got {self.multi_class!r}."
            )
        if self._ordinal() and self.multi_class != "softmax":
            raise GPClassError(
                f"likelihood={self.likelihood!r} fits one model of all the ordered classes "
                "(gpc.likelihoods.Ordinal(K)); "
                f"multi_class={self.multi_class!r} does not apply to it: leave multi_class at its default."
            )
        if isinstance(method, JaakkolaJordan) and not isinstance(likelihood, Logistic):
            raise GPClassError(
                "method='jj' (the Jaakkola-Jordan bound) is for likelihood='logistic' only"
                + (f"; likelihood={self.likelihood!r} takes method='laplace', 'ep' or 'kl'." if self._ordinal()
                   else ".")
            )
        return dtype, method, likelihood

    def _checked_dtype(self):
        try:
            dtype = np.dtype(self.dtype)
        except TypeError:
            dtype = None
        if dtype not in (np.dtype(np.float32), np.dtype(np.float64)):
            raise GPClassError(f"dtype must be 'float64' or 'float32'; got {self.dtype!r}.")
        return dtype

    def _checked_method(self):
        if isinstance(self.method, tuple(_METHODS.values())):
            return self.method
        if isinstance(self.method, str) and self.method in _METHODS:
            return _METHODS[self.method]()
        raise GPClassError(
            f"method must be one of {sorted(_METHODS)} (or gpc.Laplace(), gpc.EP(), gpc.KL(), "
            f"gpc.JaakkolaJordan() objects); got {self.method!r}."
        )

    def _checked_likelihood(self):
        """The binary likelihood (``None`` for the ordinal ones, whose Ordinal(K) is built at fit from the labels)."""
        if isinstance(self.likelihood, str) and self.likelihood in _LIKELIHOODS:
            return None if self._ordinal() else _LIKELIHOODS[self.likelihood]()
        raise GPClassError("likelihood must be 'logistic', 'probit', 'ordinal' or 'ordinal_logit'; got "
                           f"{self.likelihood!r}.")

    def _ordinal(self):
        return isinstance(self.likelihood, str) and self.likelihood in ("ordinal", "ordinal_logit")

    def _link(self):
        """The ordinal model's link: ``"logit"`` for ``likelihood="ordinal_logit"``, else ``"probit"``."""
        return "logit" if self.likelihood == "ordinal_logit" else "probit"

    def _initial_kernel(self, num_features, dtype):
        """The gpclass kernel to start from, or for a scikit-learn kernel its ``Translation``."""
        if self.kernel is None:
            shape = (num_features,) if self.ard else ()
            lengthscale = np.full(shape, np.sqrt(num_features), dtype)
            return SquaredExponential(variance=np.asarray(1.0, dtype), lengthscale=lengthscale)
        if self.ard:
            raise GPClassError("ard=True shapes the default kernel only; give your kernel a lengthscale of shape (d,).")
        if is_sklearn_kernel(self.kernel):
            return translate(self.kernel, num_features, dtype)
        if not isinstance(self.kernel, AbstractKernel):
            raise GPClassError(
                f"kernel must be a gpclass kernel (gpc.kernels), a scikit-learn kernel "
                f"(sklearn.gaussian_process.kernels) or None; got {self.kernel!r}."
            )
        return jax.tree.map(lambda leaf: jnp.asarray(leaf, dtype) if eqx.is_inexact_array_like(leaf) else leaf,
                            self.kernel)

