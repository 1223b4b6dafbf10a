"""Loading, standardising and splitting the bundled benchmark data sets.

The data live in ``gpclass/datasets/data/`` as gzipped CSV files (header row,
last column ``y``) next to ``MANIFEST.json``, which records each set's
provenance, size and class counts. Nothing is downloaded at run time.

The ordinal-regression sets (``task: "ordinal"`` in the manifest: boston,
machinecpu, pyrimidines) have continuous targets ``y``; their binned labels and
Chu & Ghahramani's (2005) 20 train/test partitions are in
``<name>_ordinal.csv.gz`` and are read by :func:`ordinal_splits`.
"""

from __future__ import annotations

import functools
import gzip
import json
from importlib import resources

import numpy as np

from .._exceptions import GPClassError

_PIXEL_SETS = ("usps35", "usps10")


def _data_dir():
    return resources.files(__package__) / "data"


@functools.lru_cache(maxsize=None)
def _manifest() -> dict:
    return json.loads((_data_dir() / "MANIFEST.json").read_text(encoding="utf-8"))


def names() -> list[str]:
    """Return the sorted names of the bundled data sets.

    Example::

        >>> gpc.datasets.names()
        ['boston', 'crabs', 'ionosphere', 'machinecpu', 'pima', 'pyrimidines', 'satellite', 'usps10', 'usps35',
         'vehicle', 'wisconsin']
    """
    return sorted(_manifest())


def info(name: str) -> dict:
    """Return (a copy of) the manifest entry of data set ``name``.

    The entry holds ``n``, ``d``, ``classes`` (label -> count, labels as
    strings), ``source`` and ``note``.

    Example::

        >>> entry = gpc.datasets.info("ionosphere")
        >>> entry["n"], entry["d"], entry["classes"]
        (351, 34, {'-1': 126, '1': 225})
    """
    _check_name(name)
    return json.loads(json.dumps(_manifest()[name]))


def _check_name(name: str) -> None:
    if name not in _manifest():
        raise GPClassError(f"unknown data set {name!r}; available: {', '.join(names())}")


def _is_binary(entry: dict) -> bool:
    return set(entry.get("classes", ())) == {"-1", "1"}


def _is_ordinal(entry: dict) -> bool:
    return entry.get("task") == "ordinal"


def load(name: str, *, scale_pixels: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Load a bundled data set.

    Parameters
    ----------
    name:
        One of :func:`names`: the classification sets crabs, ionosphere, pima,
        satellite, usps10, usps35, vehicle, wisconsin and the ordinal-regression
        sets boston, machinecpu, pyrimidines.
    scale_pixels:
        Only affects the USPS sets (``usps35``, ``usps10``), whose inputs are
        raw grey levels 0..255: if True (default) they are mapped to [-1, 1]
        by ``x / 127.5 - 1``. Ignored for the other sets.

    Returns
    -------
    X:
        float64 array of shape (n, d), unstandardised (see :func:`standardize`).
    y:
        Binary sets (crabs, ionosphere, pima, usps35, wisconsin): float64
        labels in {-1.0, +1.0}. Multi-class sets (satellite, usps10,
        vehicle): int64 labels in 0..C-1. Ordinal-regression sets (boston,
        machinecpu, pyrimidines): the continuous float64 targets (bin them with
        :func:`equal_length_bins`, or take the published labels and partitions
        from :func:`ordinal_splits`). See :func:`info` for the coding.

    Raises
    ------
    ValueError
        For an unknown ``name``.
    RuntimeError
        If the file does not match the manifest's n, d or class counts.

    Example::

        >>> X, y = gpc.datasets.load("ionosphere")
        >>> X.shape, y.shape
        ((351, 34), (351,))
        >>> print(np.unique(y))
        [-1.  1.]
    """
    _check_name(name)
    entry = _manifest()[name]
    header, table = _read_csv(f"{name}.csv.gz")
    if header[-1] != "y" or table.shape[1] != len(header):
        raise RuntimeError(f"{name}: malformed header {header!r}")
    X, y = table[:, :-1], table[:, -1]
    if X.shape != (entry["n"], entry["d"]):
        raise RuntimeError(f"{name}: shape {X.shape} != manifest ({entry['n']}, {entry['d']})")
    if _is_ordinal(entry):
        if not np.all(np.isfinite(table)):
            raise RuntimeError(f"{name}: non-finite values")
        return X, y
    if not _is_binary(entry):
        y = y.astype(np.int64)
    labels, counts = np.unique(y, return_counts=True)
    found = {str(int(c)): int(k) for c, k in zip(labels, counts)}
    if found != entry["classes"]:
        raise RuntimeError(f"{name}: class counts {found} != manifest {entry['classes']}")
    if scale_pixels and name in _PIXEL_SETS:
        X = X / 127.5 - 1.0
    return X, y


def _read_csv(filename: str) -> tuple[list[str], np.ndarray]:
    with (_data_dir() / filename).open("rb") as raw, gzip.open(raw, "rt") as f:
        header = f.readline().strip().split(",")
        table = np.loadtxt(f, delimiter=",", dtype=np.float64, ndmin=2)
    return header, table


def ordinal_splits(name: str, num_bins: int) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray]]]:
    """Chu & Ghahramani's (2005) ordinal labels and 20 train/test partitions of an ordinal-regression set.

    These are the published benchmark's own files (from W. Chu's "ordinal regression benchmark" page; see
    ``data/PROVENANCE.md``), mapped onto the rows of :func:`load`: the labels are their equal-length bins of the
    target and the partitions their 20 random splits (Pyrimidines 50/24, Machine CPU 150/59, Boston 300/206).
    The 5-bin and the 10-bin versions have different partitions.

    Parameters
    ----------
    name:
        An ordinal-regression set: boston, machinecpu or pyrimidines.
    num_bins:
        5 or 10.

    Returns
    -------
    labels:
        int64 array (n,) of ordinal labels 0..num_bins-1 (their files' 1..num_bins minus one), row i belonging to
        row i of ``load(name)``. They equal ``equal_length_bins(y, num_bins)`` except for eight cases of the 5-bin
        Pyrimidines set, which the published files bin as if the targets' range were [0.45, 0.9] instead of
        [0.44, 0.9]: ``equal_length_bins(y, 5, lower=0.45)`` reproduces all of them.
    splits:
        20 pairs ``(train_idx, test_idx)`` of sorted int64 row indices; each pair partitions ``0..n-1``.

    Raises
    ------
    ValueError
        For a name that is not an ordinal-regression set or ``num_bins`` not 5 or 10.
    RuntimeError
        If the file does not match the manifest.

    Example::

        >>> labels, splits = gpc.datasets.ordinal_splits("pyrimidines", 5)
        >>> print(np.bincount(labels))  # cases per label 0..4
        [ 7 28 17 12 10]
        >>> train, test = splits[0]
        >>> len(splits), len(train), len(test)
        (20, 50, 24)
    """
    _check_name(name)
    entry = _manifest()[name]
    if not _is_ordinal(entry):
        ordinal = ", ".join(n for n in names() if _is_ordinal(_manifest()[n]))
        raise GPClassError(f"{name!r} is not an ordinal-regression set ({ordinal})")
    if num_bins not in (5, 10):
        raise GPClassError(f"num_bins must be 5 or 10, got {num_bins!r}")
    header, table = _read_csv(f"{name}_ordinal.csv.gz")
    table = table.astype(np.int64)
    if table.shape[0] != entry["n"]:
        raise RuntimeError(f"{name}: {table.shape[0]} rows in the partitions != manifest n {entry['n']}")
    column = {h: j for j, h in enumerate(header)}
    labels = table[:, column[f"label{num_bins}"]]
    counts = np.bincount(labels, minlength=num_bins).tolist()
    if counts != entry["bins"][str(num_bins)]:
        raise RuntimeError(f"{name}: label counts {counts} != manifest {entry['bins'][str(num_bins)]}")
    splits = []
    for s in range(1, entry["splits"] + 1):
        train = table[:, column[f"train{num_bins}_{s:02d}"]].astype(bool)
        if int(train.sum()) != entry["n_train"]:
            raise RuntimeError(f"{name}: split {s} has {int(train.sum())} training cases, not {entry['n_train']}")
        splits.append((np.flatnonzero(train).astype(np.int64), np.flatnonzero(~train).astype(np.int64)))
    return labels, splits


def equal_length_bins(y, num_bins: int, *, lower=None, upper=None) -> np.ndarray:
    """Ordinal labels from continuous targets by equal-length binning (Chu & Ghahramani 2005, sec. 5.1).

    The range ``[lower, upper]`` (default: ``[min y, max y]``) is cut into ``num_bins`` intervals of equal length
    with edges ``e_k = lower + k (upper - lower) / num_bins``; a target gets label ``k`` (0-based) if it lies in
    ``(e_k, e_{k+1}]``, i.e. intervals are closed on the right, the first one also on the left, and targets
    outside the range go to the first or last bin. This reproduces the labels of Chu's benchmark files for
    Boston and Machine CPU (5 and 10 bins) and Pyrimidines (10 bins) exactly; see :func:`ordinal_splits` for
    Pyrimidines with 5 bins.

    Returns
    -------
    int64 array of labels in ``0..num_bins-1``, the shape of ``y``.

    Example::

        >>> print(gpc.datasets.equal_length_bins([0, 1, 2, 2.5, 4], 4))  # edges 1, 2, 3
        [0 0 1 2 3]
    """
    y = _check_bins(y, num_bins)
    lower = y.min() if lower is None else float(lower)
    upper = y.max() if upper is None else float(upper)
    if not upper > lower:
        raise GPClassError(f"equal-length bins need upper > lower; got lower={lower}, upper={upper}: pass a range "
                           "with upper > lower (by default the range of y, which must hold two different values)")
    edges = lower + (upper - lower) * np.arange(1, num_bins) / num_bins
    return np.searchsorted(edges, y, side="left").astype(np.int64)


def equal_frequency_bins(y, num_bins: int) -> np.ndarray:
    """Ordinal labels from continuous targets by equal-frequency binning (as in Chu & Keerthi 2005).

    The edges are the empirical quantiles ``q_k = quantile(y, k / num_bins)``, k = 1..num_bins-1 (numpy's
    default linear interpolation); a target gets label ``k`` (0-based) if it lies in ``(q_k, q_{k+1}]``, so equal
    targets always share a label and ties at an edge make the bins unequal. (Chu & Ghahramani's Gaussian-process
    benchmark, which :func:`ordinal_splits` bundles, used equal-length bins instead: :func:`equal_length_bins`.)

    Returns
    -------
    int64 array of labels in ``0..num_bins-1``, the shape of ``y``.

    Example::

        >>> print(gpc.datasets.equal_frequency_bins([5, 1, 4, 2, 3, 6], 3))  # edges 2.667 and 4.333
        [2 0 1 0 1 2]
    """
    y = _check_bins(y, num_bins)
    edges = np.quantile(y, np.arange(1, num_bins) / num_bins)
    return np.searchsorted(edges, y, side="left").astype(np.int64)


def _check_bins(y, num_bins) -> np.ndarray:
    y = np.asarray(y, dtype=np.float64)
    if y.size == 0:
        raise GPClassError("y is empty: pass at least one target")
    if not np.all(np.isfinite(y)):
        first = tuple(int(i) for i in np.argwhere(~np.isfinite(y))[0])
        raise GPClassError(f"y must hold finite numbers (the first that is not: y[{', '.join(map(str, first))}] = "
                           f"{y[first]}); drop or impute those cases")
    if isinstance(num_bins, bool) or int(num_bins) != num_bins or num_bins < 2:
        raise GPClassError(f"num_bins must be an integer >= 2, got {num_bins!r}")
    return y


def standardize(X_train, X_test=None):
    """Standardise columns with the training mean and standard deviation.

    Computes ``(X - mean) / std`` column-wise, with ``mean`` and ``std``
    (population std, ``ddof=0``) taken from ``X_train`` only and applied to
    both ``X_train`` and ``X_test``. Columns that are constant in the training
    data (std zero up to rounding, i.e. ``std <= 1000 * eps * max|x|``, such as
    ionosphere's all-zero column ``x2``) get std 1, so they become (numerically)
    0 instead of NaN.

    Works on numpy arrays (returns numpy) and jax arrays (returns jax); the
    namespace is taken from ``X_train``. Integer input is cast to float.

    Returns
    -------
    ``X_train_std`` if ``X_test`` is None, else ``(X_train_std, X_test_std)``.

    Example::

        >>> X_train, X_test = np.array([[1.0, 5.0], [3.0, 5.0]]), np.array([[2.0, 7.0]])
        >>> X_train, X_test = gpc.datasets.standardize(X_train, X_test)  # column 1 is constant: std 1
        >>> print(X_train)
        [[-1.  0.]
         [ 1.  0.]]
        >>> print(X_test)
        [[0. 2.]]
    """
    xp = _namespace(X_train)
    X_train = _as_float(xp, X_train)
    mean = X_train.mean(axis=0)
    std = X_train.std(axis=0)
    eps = xp.finfo(X_train.dtype).eps
    constant = std <= 1000 * eps * xp.abs(X_train).max(axis=0)
    std = xp.where(constant, xp.ones_like(std), std)
    train = (X_train - mean) / std
    if X_test is None:
        return train
    X_test = _as_float(xp, X_test)
    if X_train.ndim != 2 or X_test.ndim != 2 or X_test.shape[1] != X_train.shape[1]:
        raise GPClassError(f"standardize: X_train and X_test must be (n, d) and (m, d) arrays with the same columns; "
                           f"got shapes {tuple(X_train.shape)} and {tuple(X_test.shape)} (a narrower X_test was "
                           "broadcast across the training columns).")
    return train, (X_test - mean) / std


def _namespace(X):
    if isinstance(X, np.ndarray):
        return np
    try:
        import jax

        if isinstance(X, jax.Array):
            import jax.numpy as jnp

            return jnp
    except ImportError:  # pragma: no cover
        pass
    return np


def _as_float(xp, X):
    X = xp.asarray(X)
    if not xp.issubdtype(X.dtype, xp.floating):
        X = X.astype(float)
    return X


def train_test_split(X, y, n_train: int, seed: int):
    """Randomly split ``(X, y)`` into ``n_train`` training and ``n - n_train`` test cases.

    The split is a random permutation from ``numpy.random.default_rng(seed)``;
    the first ``n_train`` permuted indices form the training set.

    Returns
    -------
    ``(X_train, X_test, y_train, y_test)``.

    Raises
    ------
    ValueError
        If ``n_train`` is not in ``1..n-1`` or ``X`` and ``y`` differ in length.

    Example::

        >>> X, y = gpc.datasets.load("ionosphere")
        >>> X_train, X_test, y_train, y_test = gpc.datasets.train_test_split(X, y, n_train=200, seed=0)
        >>> X_train.shape, X_test.shape
        ((200, 34), (151, 34))
    """
    n = len(X)
    if len(y) != n:
        raise GPClassError(f"X has {n} rows but y has {len(y)} entries: pass the labels of the same rows, one per "
                           "row of X")
    if int(n_train) != n_train or not 1 <= n_train <= n - 1:
        raise GPClassError(f"n_train must be an integer in 1..{n - 1}, got {n_train!r}")
    perm = np.random.default_rng(seed).permutation(n)
    tr, te = perm[: int(n_train)], perm[int(n_train) :]
    return X[tr], X[te], y[tr], y[te]


def kfold_indices(n: int, k: int, seed: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Index sets for k-fold cross-validation.

    The indices ``0..n-1`` are permuted with ``numpy.random.default_rng(seed)``
    and cut into ``k`` folds of sizes differing by at most one. Fold ``i``'s
    test set is the i-th piece and its training set the rest; each index is a
    test index exactly once.

    Returns
    -------
    A list of ``k`` pairs ``(train_idx, test_idx)`` of sorted int64 arrays.

    Raises
    ------
    ValueError
        If ``k`` is not in ``2..n``.

    Example::

        >>> folds = gpc.datasets.kfold_indices(10, k=5, seed=0)
        >>> [(len(train), len(test)) for train, test in folds]
        [(8, 2), (8, 2), (8, 2), (8, 2), (8, 2)]
        >>> print(np.sort(np.concatenate([test for _, test in folds])))  # each case tested once
        [0 1 2 3 4 5 6 7 8 9]
    """
    if int(k) != k or not 2 <= k <= n:
        raise GPClassError(f"k must be an integer in 2..{n}, got {k!r}")
    perm = np.random.default_rng(seed).permutation(n)
    folds = np.array_split(perm, int(k))
    out = []
    for i, test in enumerate(folds):
        train = np.concatenate([f for j, f in enumerate(folds) if j != i])
        out.append((np.sort(train).astype(np.int64), np.sort(test).astype(np.int64)))
    return out
