"""The estimator's case weights: ``sample_weight`` times ``class_weight``, and whole-number weights as copies."""

import numpy as np
from sklearn.utils.class_weight import compute_sample_weight
from sklearn.utils.validation import _check_sample_weight

from ._exceptions import GPClassError


def _case_weights(X, y, sample_weight, class_weight):
    """``sample_weight`` times the weights of the cases' classes (``class_weight``), checked (finite, >= 0, not all
    0); ``None`` when every weight is 1."""
    if sample_weight is None and class_weight is None:
        return None
    weight = _check_sample_weight(sample_weight, X, dtype=np.float64, ensure_non_negative=True)
    if class_weight is not None:
        weight = weight * compute_sample_weight(class_weight, y)
    if not np.all(np.isfinite(weight)):
        first = int(np.argmax(~np.isfinite(weight)))
        raise GPClassError(f"sample_weight (times class_weight) must be finite (the first that is not: weight[{first}] "
                           f"= {weight[first]}); drop those cases or give them a finite weight (0 leaves a case out).")
    if not np.any(weight > 0):
        raise GPClassError("sample_weight (times class_weight) is zero for every case: there is nothing to fit; give "
                           "at least one case a positive weight.")
    return None if np.all(weight == 1.0) else weight


def _whole_numbers(weight):
    return bool(np.all(np.abs(weight - np.rint(weight)) <= 1e-8 * np.maximum(1.0, np.rint(weight))))


def _repeat_rows(weight, method, ordinal):
    """The rows of the data repeated by whole-number weights (``weight`` > 0); anything else is an error."""
    if not _whole_numbers(weight):
        model = "the ordinal model" if ordinal else f"method={type(method).__name__}"
        raise GPClassError(
            f"sample_weight (times class_weight) must hold whole numbers for {model}: a weight k means k copies of "
            "the case; fractional weights (the power likelihood p(y|f)^w) need a binary, one-vs-rest or one-vs-one "
            "model with method='laplace', 'ep' or 'kl', or the softmax with 'laplace' or 'kl'."
        )
    counts = np.rint(weight).astype(np.int64)
    total, limit = int(np.sum(counts)), max(len(counts), MAX_REPEATED_CASES)
    if total > limit:
        raise GPClassError(
            f"sample_weight sums to {total}: a weight k means k copies of the case, so the fit would have {total} "
            f"cases; at most {limit} are allowed (the larger of the number of cases and {MAX_REPEATED_CASES}; a "
            "dense prior over 20 000 cases already holds 3.2 GB). Scale the weights down to the repeat counts you "
            "mean, or drop the weights."
        )
    return np.repeat(np.arange(len(counts)), counts)


# The most cases whole-number weights may expand a training set to (see _repeat_rows).
MAX_REPEATED_CASES = 20_000


def _refuse_weightless_classes(y, weight):
    """Raise if every case of a class has weight 0: leaving its cases out would drop the class from ``classes_``
    without a word (``predict_proba`` one column short), where scikit-learn's classifiers keep every class of y."""
    classes = np.unique(y)
    weighted = np.unique(y[weight > 0])
    missing = [c.item() if isinstance(c, np.generic) else c for c in classes if c not in weighted]
    if missing:
        raise GPClassError(f"sample_weight (times class_weight) is zero for every case of class(es) {missing}: the "
                           "model could not predict them, and leaving them out would change classes_. Give some of "
                           "their cases a weight > 0, or remove them from y.")
