"""Loading, standardising and splitting the bundled benchmark data sets.

The data live in ``gpclass/datasets/data/`` as gzipped CSV files (header row,
last column ``y``) next to ``MANIFEST.json``, which records each set's
provenance, size and class counts. Nothing is downloaded at run time.
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
    """Return the sorted names of the bundled data sets."""
    return sorted(_manifest())


def info(name: str) -> dict:
    """Return (a copy of) the manifest entry of data set ``name``.

    The entry holds ``n``, ``d``, ``classes`` (label -> count, labels as
    strings), ``source`` and ``note``.
    """
    _check_name(name)
    return json.loads(json.dumps(_manifest()[name]))


def _check_name(name: str) -> None:
    if name not in _manifest():
        raise GPClassError(f"unknown data set {name!r}; available: {', '.join(names())}")


def _is_binary(entry: dict) -> bool:
    return set(entry["classes"]) == {"-1", "1"}


def load(name: str, *, scale_pixels: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Load a bundled data set.

    Parameters
    ----------
    name:
        One of :func:`names` (crabs, ionosphere, pima, satellite, usps10,
        usps35, vehicle, wisconsin).
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
        vehicle): int64 labels in 0..C-1. See :func:`info` for the coding.

    Raises
    ------
    ValueError
        For an unknown ``name``.
    RuntimeError
        If the file does not match the manifest's n, d or class counts.
    """
    _check_name(name)
    entry = _manifest()[name]
    with (_data_dir() / f"{name}.csv.gz").open("rb") as raw, gzip.open(raw, "rt") as f:
        header = f.readline().strip().split(",")
        table = np.loadtxt(f, delimiter=",", dtype=np.float64, ndmin=2)
    if header[-1] != "y" or table.shape[1] != len(header):
        raise RuntimeError(f"{name}: malformed header {header!r}")
    X, y = table[:, :-1], table[:, -1]
    if X.shape != (entry["n"], entry["d"]):
        raise RuntimeError(f"{name}: shape {X.shape} != manifest ({entry['n']}, {entry['d']})")
    if not _is_binary(entry):
        y = y.astype(np.int64)
    labels, counts = np.unique(y, return_counts=True)
    found = {str(int(c)): int(k) for c, k in zip(labels, counts)}
    if found != entry["classes"]:
        raise RuntimeError(f"{name}: class counts {found} != manifest {entry['classes']}")
    if scale_pixels and name in _PIXEL_SETS:
        X = X / 127.5 - 1.0
    return X, y


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
    return train, (_as_float(xp, X_test) - mean) / std


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
    """
    n = len(X)
    if len(y) != n:
        raise GPClassError(f"X has {n} rows but y has {len(y)} entries")
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
