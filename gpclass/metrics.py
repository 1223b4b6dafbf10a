"""Predictive performance measures for GP classification.

All functions are pure ``jax.numpy`` and accept numpy or jax arrays; they can
be used under ``jax.jit``. Two label conventions are supported:

* **binary**: ``y`` in {-1, +1} (any ``y > 0`` counts as +1) and ``p`` of
  shape (m,) holding the predicted probability p(y=+1 | x);
* **multi-class**: ``y`` integer in 0..C-1 and ``p`` of shape (m, C) holding
  the predicted class probabilities (rows summing to one).

Which case applies is decided by ``p.ndim``. Log probabilities are not
clipped: a prediction of probability 0 for the true class gives ``-inf``
information and ``+inf`` negative log probability.

References: M. Kuss & C. E. Rasmussen (2005), "Assessing approximate inference
for binary Gaussian process classification", JMLR 6, eq. (34); C. E. Rasmussen
& C. K. I. Williams (2006), *Gaussian Processes for Machine Learning*,
eq. (3.76) (GPML).
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax.scipy.special import entr

from . import _exceptions

_LN2 = math.log(2.0)

__all__ = ["error_rate", "information_bits", "mean_negative_log_probability"]


def _log_prob_true(y, p):
    """Natural log of the probability assigned to the true label, per case."""
    y, p = jnp.asarray(y), jnp.asarray(p)
    if p.ndim == 1:
        return jnp.where(y > 0, jnp.log(p), jnp.log1p(-p))
    if p.ndim == 2:
        idx = y.astype(jnp.int32)[:, None]
        return jnp.log(jnp.take_along_axis(p, idx, axis=1)[:, 0])
    raise _exceptions.GPClassError(f"p must have shape (m,) or (m, C), got {p.shape}")


def error_rate(y, p):
    """Fraction of misclassified test cases.

    Binary: a case is an error if ``(p > 0.5) != (y > 0)``, i.e. predictions
    are thresholded at 1/2 (symmetric costs; ``p == 0.5`` predicts -1) as in
    Kuss & Rasmussen (2005), Sec. 7. Multi-class: an error if
    ``argmax(p[i]) != y[i]``.
    """
    y, p = jnp.asarray(y), jnp.asarray(p)
    if p.ndim == 1:
        wrong = (p > 0.5) != (y > 0)
    elif p.ndim == 2:
        wrong = jnp.argmax(p, axis=1) != y
    else:
        raise _exceptions.GPClassError(f"p must have shape (m,) or (m, C), got {p.shape}")
    return jnp.mean(wrong.astype(p.dtype))


def _train_entropy_bits(y_train, num_classes: int | None):
    """Entropy in bits of the empirical label distribution of ``y_train``."""
    y_train = jnp.asarray(y_train)
    if num_classes is None:
        pi = jnp.mean((y_train > 0).astype(jnp.result_type(float)))
        freqs = jnp.stack([pi, 1.0 - pi])
    else:
        onehot = y_train[:, None] == jnp.arange(num_classes)
        freqs = jnp.mean(onehot.astype(jnp.result_type(float)), axis=0)
    return jnp.sum(entr(freqs)) / _LN2


def information_bits(y, p, y_train):
    """Average information about the test labels in bits, beyond the base rate.

    Kuss & Rasmussen (2005) eq. (34), GPML eq. (3.76): the mean over test cases
    of

        I_i = (1 + y_i)/2 * log2(p_i) + (1 - y_i)/2 * log2(1 - p_i) + H,

    where ``H = -sum_c pi_c log2(pi_c)`` is the entropy in bits of the
    *training* label frequencies ``pi_c``. Only the term of the true label is
    evaluated (so p_i = 1 for y_i = +1 gives 0, not ``0 * -inf``). Perfect
    confident predictions give ``H``; predicting the training frequencies
    gives 0 on a test set with the same frequencies; an overconfident wrong
    prediction gives ``-inf`` (no clipping).

    Multi-class (``p`` of shape (m, C)): ``mean_i log2 p[i, y_i] + H`` with
    ``H`` the entropy of the C training class frequencies.

    Parameters
    ----------
    y: test labels; p: predictions (see module docstring);
    y_train: training labels in the same coding as ``y``.
    """
    p = jnp.asarray(p)
    num_classes = p.shape[1] if p.ndim == 2 else None
    log2_true = _log_prob_true(y, p) / _LN2
    return jnp.mean(log2_true) + _train_entropy_bits(y_train, num_classes)


def mean_negative_log_probability(y, p):
    """Mean negative log predictive probability (natural log) of the true labels.

    ``-mean_i log p(y_i | x_i)``, with p(y_i | x_i) = p_i if y_i = +1 and
    1 - p_i if y_i = -1 (binary), or ``p[i, y_i]`` (multi-class). Not clipped:
    a zero probability for the true label gives ``+inf``.
    """
    return -jnp.mean(_log_prob_true(y, p))
