"""The scikit-learn estimator's checks of its inputs X beyond scikit-learn's ``validate_data``."""

import warnings

import numpy as np

from ._exceptions import GPClassError


def _warn_if_far_from_zero(X, dtype):
    """Warn when casting X to float32 loses the digits its spread lives in: after the cast a column whose mean is
    more than 1e4 times its spread (a timestamp) is known to about eps32 |mean| / spread > 6e-4 of its spread, and
    distances computed from the cast values carry that error (measured with unit spread: an offset of 1e6 moved
    probabilities by 0.004, 1e7 by 0.08).  gpclass centres distances, but only the values it is given."""
    if np.dtype(dtype) != np.float32 or X.size == 0:
        return
    mean, spread = np.abs(X.mean(axis=0)), X.std(axis=0)
    far = np.flatnonzero(mean > 1e4 * np.maximum(spread, np.finfo(np.float64).tiny))
    if far.size:
        j = far[np.argmax(mean[far] / np.maximum(spread[far], np.finfo(np.float64).tiny))]
        warnings.warn(f"dtype='float32': column {j} of X has mean {X[:, j].mean():.6g} and spread {spread[j]:.3g}; "
                      "cast to float32 it keeps only about 7 significant digits of the mean, so the differences "
                      "between cases lose accuracy. Standardise X (e.g. sklearn.preprocessing.StandardScaler in a "
                      "pipeline), or use dtype='float64'.", stacklevel=3)


def _refuse_text_ordinal(y, ordinal: bool):
    """An ordinal model ranks the classes in the order of their sorted values; text sorts alphabetically ("high" <
    "low" < "mid"), which is rarely the classes' order, and the fit would be of another model without a word."""
    classes = sorted(set(np.asarray(y).tolist())) if ordinal and np.asarray(y).dtype.kind in "OUS" else []
    if len(classes) >= 3:  # two classes in either order are one model (f -> -f, the prior being symmetric)
        shown = ", ".join(repr(c) for c in classes[:4]) + (", ..." if len(classes) > 4 else "")
        raise GPClassError(f"likelihood='ordinal' ranks the classes by their sorted values, and text labels sort "
                           f"alphabetically ({shown}), which is rarely their order: encode them as integers in their "
                           "order, e.g. y.map({'low': 0, 'mid': 1, 'high': 2}) or pandas.Categorical(y, "
                           "categories=[...], ordered=True).codes.")
