"""Predictive performance measures for GP classification.

All functions are pure ``jax.numpy`` and accept numpy or jax arrays; they can
be used under ``jax.jit``. Two label conventions are supported:

* **binary**: ``y`` in {-1, +1}, {0, 1} or booleans, as ``gpc.infer`` takes
  them, and ``p`` of shape (m,) holding the predicted probability p(y=+1 | x);
* **multi-class**: ``y`` integer in 0..C-1 and ``p`` of shape (m, C) holding
  the predicted class probabilities (rows summing to one). With two columns,
  labels -1 and +1 name the columns in sorted order, as the estimator's
  ``predict_proba`` (columns ``classes_ = [-1, 1]``) lays them out.

Which case applies is decided by ``p.ndim``. Every function checks its
arguments, also under ``jax.jit``: ``y`` of shape (m,), ``p`` probabilities
(not NaN, in [0, 1], rows summing to 1 within 1e-3) and labels of the coding
above. Log probabilities are not
clipped: a prediction of probability 0 for the true class gives ``-inf``
information and ``+inf`` negative log probability.

Calibration: :func:`brier_score`, :func:`expected_calibration_error` and
:func:`reliability` (the reliability diagram's points, scikit-learn's
``calibration_curve`` per class).

References: M. Kuss & C. E. Rasmussen (2005), "Assessing approximate inference
for binary Gaussian process classification", JMLR 6, eq. (34); C. E. Rasmussen
& C. K. I. Williams (2006), *Gaussian Processes for Machine Learning*,
eq. (3.76) (GPML); G. W. Brier (1950), "Verification of forecasts expressed in
terms of probability", Monthly Weather Review 78; C. Guo, G. Pleiss, Y. Sun &
K. Q. Weinberger (2017), "On calibration of modern neural networks", ICML
(expected calibration error, their eq. 3).
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import entr

from . import _exceptions
from ._errors import AT as _AT
from ._validation import Checks as _Checks
from ._validation import _binary_label_failures
from ._validation import raise_first_failure as _raise_first_failure

_LN2 = math.log(2.0)

__all__ = [
    "brier_score", "error_rate", "expected_calibration_error", "information_bits", "mean_negative_log_probability",
    "reliability",
]


def _checked(y, p, name: str = "y"):
    """(y, p) as arrays, checked: y of shape (m,) for the m rows of p, p probabilities, y labels of p's layout
    (module docstring): binary labels as floats in {-1, +1}, class labels as integer column indices.

    Concrete inputs (a metric called directly) are checked in NumPy and a failure raised at once, naming the first
    offending entry; traced ones (under ``jit``) by checks attached to the result (``_validation.Checks``)."""
    traced, xp, checks = _checking(y, p)
    y, p = xp.asarray(y), xp.asarray(p)
    if p.ndim not in (1, 2):
        raise _exceptions.GPClassError(f"p must have shape (m,) (binary: the probability of +1) or (m, C) (class "
                                       f"probabilities); got shape {p.shape}.")
    if y.shape != p.shape[:1]:
        raise _exceptions.GPClassError(f"{name} must have shape ({p.shape[0]},), one label per row of p; got shape "
                                       f"{y.shape}" + (": flatten it, np.ravel(y)." if y.size == p.shape[0] else "."))
    if not xp.issubdtype(p.dtype, xp.floating):
        p = p.astype(jnp.result_type(float))
    checks.fail_if(~((p >= 0) & (p <= 1)), f"p must hold probabilities in [0, 1]{_AT}; NaN and scores are not "
                   "probabilities.", at=("the first that is not: p[{index}] = {value}", p))
    if p.ndim == 2:
        checks.fail_if(xp.abs(xp.sum(p, axis=1) - 1.0) > 1e-3, f"each row of p must sum to 1 (class "
                       f"probabilities){_AT}.", at=("the first that does not: row {index} sums to {value}",
                                                   xp.sum(p, axis=1)))
    labels = _binary(y, checks, name, xp) if p.ndim == 1 else _class_index(y, p.shape[1], checks, name, xp)
    out = jnp.asarray(labels), jnp.asarray(p)
    return checks.attach(out) if traced else out


def _checking(*inputs):
    """(traced, array namespace, checks) for checking ``inputs``: under a trace jnp and ``_validation.Checks``,
    attached to the result; otherwise NumPy and :class:`_HostChecks`, raising at once."""
    traced = any(isinstance(x, jax.core.Tracer) for x in inputs)
    return (True, jnp, _Checks()) if traced else (False, np, _HostChecks())


class _HostChecks:
    """``_validation.Checks``' ``fail_if`` on concrete NumPy values: a failure is raised at once (checks are made
    in order, so it is the first), naming its first offending entry."""

    @staticmethod
    def fail_if(pred, message, at):
        describe, values = at
        _raise_first_failure([(pred, message, describe)], values)


def _binary(y, checks, name, xp):
    """Binary labels as floats in {-1, +1} (gpc.infer's codings), their values checked in ``checks``."""
    if y.dtype == bool:
        return xp.where(y, 1.0, -1.0)
    if not (xp.issubdtype(y.dtype, xp.integer) or xp.issubdtype(y.dtype, xp.floating)):
        raise _exceptions.GPClassError(f"binary labels {name} must be numbers or booleans; got dtype {y.dtype}.")
    for pred, message, describe in _binary_label_failures(y, xp):
        checks.fail_if(pred, message.replace("labels y", f"labels {name}"), at=(describe.replace("y[", f"{name}["), y))
    return xp.where(y > 0, 1.0, -1.0)


def _class_index(y, num_classes: int, checks, name, xp):
    """Class labels as integer column indices 0..C-1 of p, their values checked in ``checks``; with two columns
    -1 names column 0 (the sorted classes [-1, 1])."""
    if y.dtype == bool or not (xp.issubdtype(y.dtype, xp.integer) or xp.issubdtype(y.dtype, xp.floating)):
        raise _exceptions.GPClassError(f"class labels {name} must be integers 0..{num_classes - 1}, the columns of p; "
                                       f"got dtype {y.dtype}.")
    if num_classes == 2:
        checks.fail_if((y == -1) & xp.any(y == 0), f"labels {name} mix the codings {{0, 1}} and {{-1, +1}}: both 0 "
                       f"and -1 occur{_AT}.", at=(f"the first -1 at {name}[{{index}}]", y))
        y = xp.where(y == -1, 0, y)
    whole = y == xp.round(y) if xp.issubdtype(y.dtype, xp.floating) else xp.ones(y.shape, bool)
    also = " (or -1, +1 for the two columns in that order)" if num_classes == 2 else ""
    checks.fail_if(~(whole & (y >= 0) & (y < num_classes)), f"class labels {name} must be whole numbers "
                   f"0..{num_classes - 1}{also}, the columns of p{_AT}.",
                   at=(f"the first that is not: {name}[{{index}}] = {{value}}", y))
    return xp.clip(xp.nan_to_num(y), 0, num_classes - 1).astype(xp.int32)


def _log_prob_true(y, p):
    """Natural log of the probability assigned to the true label, per case."""
    y, p = _checked(y, p)
    if p.ndim == 1:
        return jnp.where(y > 0, jnp.log(p), jnp.log1p(-p))
    return jnp.log(jnp.take_along_axis(p, y[:, None], axis=1)[:, 0])


def error_rate(y, p):
    """Fraction of misclassified test cases.

    Binary: a case is an error if ``(p > 0.5) != (y > 0)``, i.e. predictions
    are thresholded at 1/2 (symmetric costs; ``p == 0.5`` predicts -1) as in
    Kuss & Rasmussen (2005), Sec. 7. Multi-class: an error if
    ``argmax(p[i]) != y[i]``.

    Example::

        >>> y, p = jnp.array([1.0, -1.0, 1.0, -1.0]), jnp.array([0.9, 0.2, 0.4, 0.5])
        >>> float(gpc.metrics.error_rate(y, p))  # the third case is wrong (p = 0.5 predicts -1)
        0.25
        >>> P = jnp.array([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]])  # two cases, three classes
        >>> float(gpc.metrics.error_rate(jnp.array([0, 1]), P))
        0.5
    """
    y, p = _checked(y, p)
    wrong = (p > 0.5) != (y > 0) if p.ndim == 1 else jnp.argmax(p, axis=1) != y
    return jnp.mean(wrong.astype(p.dtype))


def _train_entropy_bits(y_train, p):
    """Entropy in bits of the empirical label distribution of ``y_train``, labels in the layout of ``p``."""
    traced, xp, checks = _checking(y_train)
    y_train = xp.asarray(y_train)
    if y_train.ndim != 1:
        raise _exceptions.GPClassError(f"y_train must have shape (n,), one label per training case; got shape "
                                       f"{y_train.shape}.")
    if p.ndim == 1:
        pi = jnp.mean(jnp.asarray(_binary(y_train, checks, "y_train", xp) > 0).astype(p.dtype))
        freqs = jnp.stack([pi, 1.0 - pi])
    else:
        labels = jnp.asarray(_class_index(y_train, p.shape[1], checks, "y_train", xp))
        freqs = jnp.mean((labels[:, None] == jnp.arange(p.shape[1])).astype(p.dtype), axis=0)
    entropy = jnp.sum(entr(freqs)) / _LN2
    return checks.attach(entropy) if traced else entropy


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

    Example: with balanced training labels (H = 1 bit), probability 0.8 for the true label of each case
    gives 1 + log2(0.8) bits::

        >>> y, p, y_train = jnp.array([1.0, -1.0]), jnp.array([0.8, 0.2]), jnp.array([1.0, -1.0])
        >>> round(float(gpc.metrics.information_bits(y, p, y_train)), 3)
        0.678
    """
    y, p = _checked(y, p)
    return jnp.mean(_log_prob_true(y, p)) / _LN2 + _train_entropy_bits(y_train, p)


def mean_negative_log_probability(y, p):
    """Mean negative log predictive probability (natural log) of the true labels.

    ``-mean_i log p(y_i | x_i)``, with p(y_i | x_i) = p_i if y_i = +1 and
    1 - p_i if y_i = -1 (binary), or ``p[i, y_i]`` (multi-class). Not clipped:
    a zero probability for the true label gives ``+inf``.

    Example::

        >>> y, p = jnp.array([1.0, -1.0]), jnp.array([0.8, 0.2])
        >>> round(float(gpc.metrics.mean_negative_log_probability(y, p)), 3)  # -log 0.8 for each case
        0.223
    """
    return -jnp.mean(_log_prob_true(y, p))


def _one_hot(y, p):
    """(outcome, p): the observed outcome in the layout of ``p`` (checked): 1{y = +1} (m,) for binary, one-hot
    rows (m, C) for classes."""
    y, p = _checked(y, p)
    if p.ndim == 1:
        return (y > 0).astype(p.dtype), p
    return (y[:, None] == jnp.arange(p.shape[1])).astype(p.dtype), p


def brier_score(y, p):
    """The Brier score (Brier 1950): the mean squared difference between the predicted probabilities and the
    outcome.  Binary: ``mean_i (p_i - 1{y_i = +1})^2``; multi-class: ``mean_i sum_c (p_ic - 1{y_i = c})^2``
    (scikit-learn's ``brier_score_loss``, whose binary score is the multi-class one halved).  0 is perfect.

    Example::

        >>> y, p = jnp.array([1.0, -1.0]), jnp.array([0.8, 0.4])
        >>> round(float(gpc.metrics.brier_score(y, p)), 6)  # ((0.8 - 1)^2 + (0.4 - 0)^2) / 2
        0.1
    """
    outcome, p = _one_hot(y, p)
    squared = (p - outcome) ** 2
    return jnp.mean(squared if squared.ndim == 1 else jnp.sum(squared, axis=1))


def _bins(values, num_bins: int):
    """The bin of each value among ``num_bins`` equal bins of [0, 1]; a value on an inner edge goes to the lower
    bin (scikit-learn's ``calibration_curve``: ``searchsorted`` on the inner edges)."""
    if not isinstance(num_bins, int) or isinstance(num_bins, bool) or num_bins < 1:
        raise _exceptions.GPClassError(f"num_bins must be an integer >= 1; got {num_bins!r}.")
    inner = jnp.linspace(0.0, 1.0, num_bins + 1, dtype=values.dtype)[1:-1]
    return jnp.searchsorted(inner, values, side="left")


def _bin_means(index, values, num_bins: int):
    """Per bin: the count and the mean of each of ``values`` (NaN in an empty bin)."""
    ones = jnp.ones(index.shape, values[0].dtype)
    counts = jnp.zeros(num_bins, ones.dtype).at[index].add(ones)
    means = [jnp.zeros(num_bins, v.dtype).at[index].add(v) / counts for v in values]
    return counts, means


def reliability(y, p, num_bins: int = 10):
    """The points of a reliability diagram: for ``num_bins`` equal bins of predicted probability on [0, 1], the
    mean predicted probability, the observed frequency of the event and the number of cases, per bin.

    Binary: the event is y = +1 and ``p`` its probability, arrays of shape (num_bins,).  Multi-class: one
    diagram per class (the event y = c against p[:, c]), arrays of shape (C, num_bins).  Empty bins hold NaN
    (scikit-learn's ``calibration_curve(y, p, n_bins=num_bins)`` drops them; otherwise the same numbers).

    Returns ``(mean_predicted, observed_frequency, counts)``.

    Example::

        >>> y, p = jnp.array([1.0, 1.0, -1.0, 1.0]), jnp.array([0.9, 0.7, 0.3, 0.1])
        >>> predicted, observed, counts = gpc.metrics.reliability(y, p, num_bins=2)  # bins [0, 1/2], (1/2, 1]
        >>> print(np.asarray(predicted).round(3), np.asarray(observed).round(3), np.asarray(counts))
        [0.2 0.8] [0.5 1. ] [2. 2.]
    """
    outcome, p = _one_hot(y, p)
    if p.ndim == 1:
        counts, (predicted, observed) = _bin_means(_bins(p, num_bins), (p, outcome), num_bins)
        return predicted, observed, counts
    per_class = [_bin_means(_bins(p[:, c], num_bins), (p[:, c], outcome[:, c]), num_bins) for c in range(p.shape[1])]
    return (jnp.stack([m[1][0] for m in per_class]), jnp.stack([m[1][1] for m in per_class]),
            jnp.stack([m[0] for m in per_class]))


def expected_calibration_error(y, p, num_bins: int = 10):
    """The expected calibration error of the predicted class (Guo et al. 2017, eq. 3):
    ``sum_b (n_b / n) |accuracy_b - confidence_b|`` over ``num_bins`` equal bins of the confidence on [0, 1],
    where the confidence of a case is the probability of its predicted class (binary: max(p, 1 - p), the
    predicted class +1 where p > 1/2 as in :func:`error_rate`; multi-class: max_c p_ic) and the accuracy of a
    bin is the fraction of its cases predicted correctly.  0 for a calibrated classifier (in the limit of many
    cases); empty bins add nothing.

    Example: all four cases right, three with confidence 0.9 and one with 0.6::

        >>> y, p = jnp.array([1.0, 1.0, -1.0, -1.0]), jnp.array([0.9, 0.9, 0.1, 0.4])
        >>> round(float(gpc.metrics.expected_calibration_error(y, p)), 3)  # (3 |1 - 0.9| + |1 - 0.6|) / 4
        0.175
    """
    y, p = _checked(y, p)
    if p.ndim == 1:
        confidence, correct = jnp.maximum(p, 1.0 - p), (p > 0.5) == (y > 0)
    else:
        confidence, correct = jnp.max(p, axis=1), jnp.argmax(p, axis=1) == y
    counts, (mean_confidence, accuracy) = _bin_means(_bins(confidence, num_bins),
                                                     (confidence, correct.astype(p.dtype)), num_bins)
    gaps = jnp.where(counts > 0, jnp.abs(accuracy - mean_confidence), 0.0)
    return jnp.sum(counts * gaps) / confidence.shape[0]
