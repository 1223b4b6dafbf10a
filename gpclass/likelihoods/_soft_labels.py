"""Probabilistic (soft) labels for a binary likelihood: y in [0, 1] is the probability that the class is +1.

A case with soft label s enters as the expected log-likelihood over its label,
log p_s(f) = s log p(+1|f) + (1 - s) log p(-1|f), i.e. the likelihood p(+1|f)^s p(-1|f)^(1-s) (log-concave
when the base likelihood is, as the logistic and probit are).  s = 1 and s = 0 are the hard labels +1 and -1
(exactly: the other term is left out, not multiplied by 0).

* Laplace and KL: exact (log p, slope and W = -d^2 log p / df^2 are the two terms' sums; so is E_q[log p]).
* EP: the tilted distribution p(+1|f)^s p(-1|f)^(1-s) N(f|mean, var) has no closed form for 0 < s < 1; its
  moments come from ``likelihoods._tilted_quadrature.tilted_by_quadrature`` (the hard labels keep the base's closed
  form).
"""

import jax.numpy as jnp
import numpy as np

from .._errors import AT
from .._types import Array, Bool, Float
from .._validation import Checks, check_label_shape, raise_first_failure
from ._base import AbstractLikelihood, require_binary_base
from ._tilted_quadrature import select_moments, tilted_by_quadrature


class SoftLabels(AbstractLikelihood):
    """``base`` (a binary likelihood: ``Logistic()``, ``Probit()``) for labels y in [0, 1], the probability of
    the class +1: log p(y|f) = y log p(+1|f) + (1 - y) log p(-1|f) (module docstring).

    Labels 0 and 1 give exactly the hard labels -1 and +1.  With ``mask``; not with ``weights``.
    ``gpc.infer(gpc.EP(), kernel, lik, X, jnp.array([0.9, 0.2, 1.0, 0.0]))`` takes four cases' soft labels.

    Example::

        >>> lik = gpc.likelihoods.SoftLabels(gpc.likelihoods.Logistic())
        >>> y = jnp.array([1.0, 0.0, 0.5])  # p(class +1): certain, certainly not, a toss-up
        >>> print(np.asarray(lik.log_prob(y, jnp.full(3, 2.0))).round(3))  # log sigma(2), log sigma(-2), their mean
        [-0.127 -2.127 -1.127]
    """

    base: AbstractLikelihood
    left_out_label = -1.0  # outside [0, 1]: a case ``mask`` leaves out (``likelihoods._masked``)
    weighted_labels = False  # gpc.infer's weights need the labels +-1

    def __check_init__(self):
        require_binary_base("SoftLabels", self.base)

    @property
    def log_concave(self):
        return self.base.log_concave

    @property
    def finite_expected_log_prob(self):
        return self.base.finite_expected_log_prob

    def check_labels(self, y, n: int, dtype, checks: Checks | None = None) -> Float[Array, " n"]:
        """Probabilities of the class +1: numbers in [0, 1] (booleans accepted) of shape (n,)."""
        y = jnp.asarray(y)
        check_label_shape(y, n)
        y = y.astype(dtype)
        checks, own = (Checks(), True) if checks is None else (checks, False)
        for pred, message, describe in _failures(y, jnp):
            checks.fail_if(pred, message, at=(describe, y))
        return checks.attach(y) if own else y

    def host_labels(self, y: np.ndarray, dtype) -> np.ndarray:
        y = np.asarray(y, dtype=dtype)
        raise_first_failure(_failures(y, np), y)
        return y

    def one_class(self, y) -> Bool[Array, ""]:
        """All kept labels 1, or all 0 (left-out cases, label -1, count as neither)."""
        kept = y >= 0
        return jnp.all((y == 1) | ~kept) | jnp.all((y == 0) | ~kept)

    @staticmethod
    def _terms(y):
        """The weights s and 1 - s of the terms for the labels +1 and -1, and those labels."""
        one = jnp.ones_like(y)
        return y, 1.0 - y, one, -one

    def log_prob(self, y, f):
        a, b, plus, minus = self._terms(y)
        return (jnp.where(a > 0, a * self.base.log_prob(plus, f), 0.0)
                + jnp.where(b > 0, b * self.base.log_prob(minus, f), 0.0))

    def derivatives(self, y, f):
        a, b, plus, minus = self._terms(y)
        pos, neg = self.base.derivatives(plus, f), self.base.derivatives(minus, f)
        return tuple(jnp.where(a > 0, a * p, 0.0) + jnp.where(b > 0, b * m, 0.0) for p, m in zip(pos, neg))

    def log_prob_scale(self, y, f, log_prob):
        a, b, plus, minus = self._terms(y)
        return a * jnp.abs(self.base.log_prob(plus, f)) + b * jnp.abs(self.base.log_prob(minus, f))

    def transitions(self, y):
        return self.base.transitions(jnp.ones_like(y))

    def tilted_moments(self, y, mean, var):
        """The base's closed form for the labels 0 and 1, else by quadrature
        (``_tilted_quadrature.tilted_by_quadrature``: log Z to 1e-9, mean and variance to 1e-8 against adaptive
        quadrature; ``tests/test_weights.py``)."""
        hard = self.base.tilted_moments(jnp.where(y >= 0.5, 1.0, -1.0).astype(y.dtype), mean, var)

        def log_lik(f):
            return self.log_prob(y[:, None], f)

        quad = tilted_by_quadrature(log_lik, lambda f: self.derivatives(y, f), self.transitions(y), mean, var)
        return select_moments([((y == 0) | (y == 1), hard)], quad)

    def expected_log_prob(self, y, mean, var):
        a, b, plus, minus = self._terms(y)
        return (jnp.where(a > 0, a * self.base.expected_log_prob(plus, mean, var), 0.0)
                + jnp.where(b > 0, b * self.base.expected_log_prob(minus, mean, var), 0.0))

    def expected_log_prob_derivatives(self, y, mean, var):
        a, b, plus, minus = self._terms(y)
        pairs = zip(self.base.expected_log_prob_derivatives(plus, mean, var),
                    self.base.expected_log_prob_derivatives(minus, mean, var))
        return tuple(jnp.where(a > 0, a * d_plus, 0.0) + jnp.where(b > 0, b * d_minus, 0.0)
                     for d_plus, d_minus in pairs)

    def predictive_probability(self, mean, var):
        return self.base.predictive_probability(mean, var)

    def mackay_probability(self, mean, var):
        return self.base.mackay_probability(mean, var)

    def parameter_checks(self, checks):
        self.base.parameter_checks(checks)

    @property
    def integrator(self):
        return self.base.integrator


def _failures(y, xp):
    """(pred, message, describe) of the value check of soft labels (``_validation.raise_first_failure``)."""
    return [(~((y >= 0) & (y <= 1)), f"soft labels y must be probabilities in [0, 1] (of the class +1){AT}. "
             "For more than two classes pass rows of class probabilities, shape (n, C), to "
             "gpc.likelihoods.Softmax(C).", "the first that is not: y[{index}] = {value}")]
