"""Bundled GP-classification benchmark data sets and data-handling helpers.

The data are redistributed copies of public data sets, shipped with the
package so nothing is downloaded at run time; see ``data/PROVENANCE.md``.

::

    from gpclass import datasets
    X, y = datasets.load("ionosphere")
    Xtr, Xte, ytr, yte = datasets.train_test_split(X, y, n_train=200, seed=0)
    Xtr, Xte = datasets.standardize(Xtr, Xte)

Each function's docstring has an example that runs.
"""

from ._load import (
    equal_frequency_bins,
    equal_length_bins,
    info,
    kfold_indices,
    load,
    names,
    ordinal_splits,
    standardize,
    train_test_split,
)

__all__ = [
    "equal_frequency_bins",
    "equal_length_bins",
    "info",
    "kfold_indices",
    "load",
    "names",
    "ordinal_splits",
    "standardize",
    "train_test_split",
]
