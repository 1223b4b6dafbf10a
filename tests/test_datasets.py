"""Tests for gpclass.datasets: bundled data, standardisation and splitting."""

import hashlib
from importlib import resources

import jax.numpy as jnp
import numpy as np
import pytest

from gpclass import datasets

ALL = ["crabs", "ionosphere", "pima", "satellite", "usps10", "usps35", "vehicle", "wisconsin"]
BINARY = {"crabs", "ionosphere", "pima", "usps35", "wisconsin"}
ORDINAL = ["boston", "machinecpu", "pyrimidines"]


def test_names_and_files():
    assert datasets.names() == sorted(ALL + ORDINAL)
    data = resources.files("gpclass.datasets") / "data"
    for name in ALL + ORDINAL:
        assert (data / f"{name}.csv.gz").is_file()
    provenance = (data / "PROVENANCE.md").read_text(encoding="utf-8")
    for name in ALL + ORDINAL:
        assert f"| {name} |" in provenance
        assert datasets.info(name)["source"] in provenance


@pytest.mark.parametrize("name", ALL)
def test_load_matches_manifest(name):
    entry = datasets.info(name)
    X, y = datasets.load(name)
    assert X.shape == (entry["n"], entry["d"])
    assert X.dtype == np.float64
    assert y.shape == (entry["n"],)
    assert np.all(np.isfinite(X))
    labels, counts = np.unique(y, return_counts=True)
    assert {str(int(c)): int(k) for c, k in zip(labels, counts)} == entry["classes"]
    if name in BINARY:
        assert y.dtype == np.float64
        assert set(np.unique(y)) == {-1.0, 1.0}
    else:
        assert y.dtype == np.int64
        assert np.array_equal(np.unique(y), np.arange(len(entry["classes"])))


def test_known_values():
    # first data rows as stored in the CSVs
    X, y = datasets.load("crabs")
    np.testing.assert_array_equal(X[0], [1, 8.1, 6.7, 16.1, 19, 7])
    assert y[0] == 1.0
    X, y = datasets.load("ionosphere")
    assert np.all(X[:, 1] == 0.0)  # constant column x2


@pytest.mark.parametrize("name", ["usps35", "usps10"])
def test_usps_pixel_scaling(name):
    raw, y_raw = datasets.load(name, scale_pixels=False)
    X, y = datasets.load(name)
    assert raw.min() >= 0 and raw.max() <= 255 and raw.max() > 127.5
    assert X.min() >= -1.0 and X.max() <= 1.0
    assert X.min() == -1.0  # background pixels are 0
    np.testing.assert_allclose(X, raw / 127.5 - 1.0)
    np.testing.assert_array_equal(y, y_raw)


def test_scale_pixels_ignored_for_other_sets():
    a, _ = datasets.load("pima", scale_pixels=True)
    b, _ = datasets.load("pima", scale_pixels=False)
    np.testing.assert_array_equal(a, b)


def test_unknown_name():
    with pytest.raises(ValueError, match="ionosphere"):
        datasets.load("iris")
    with pytest.raises(ValueError, match="available"):
        datasets.info("iris")


def test_info_is_a_copy():
    datasets.info("crabs")["n"] = -1
    assert datasets.info("crabs")["n"] == 200


def test_standardize_train_and_test():
    X, _ = datasets.load("ionosphere")
    Xtr, Xte = X[:200], X[200:]
    Str, Ste = datasets.standardize(Xtr, Xte)
    assert not np.any(np.isnan(Str)) and not np.any(np.isnan(Ste))
    assert np.all(Str[:, 1] == 0.0) and np.all(Ste[:, 1] == 0.0)
    keep = np.arange(X.shape[1]) != 1
    np.testing.assert_allclose(Str.mean(axis=0), 0.0, atol=1e-12)
    np.testing.assert_allclose(Str[:, keep].std(axis=0), 1.0, rtol=1e-12)
    # the test set uses the training statistics
    np.testing.assert_allclose(Ste[:, keep], (Xte[:, keep] - Xtr[:, keep].mean(0)) / Xtr[:, keep].std(0))
    np.testing.assert_array_equal(datasets.standardize(Xtr), Str)


def test_standardize_hand_example_and_constant_column():
    Xtr = np.array([[1.0, 0.1, 2.0], [3.0, 0.1, 2.0], [5.0, 0.1, 2.0]])
    Xte = np.array([[7.0, 0.1, 3.0]])
    Str, Ste = datasets.standardize(Xtr, Xte)
    s = np.sqrt(8.0 / 3.0)  # population std of (1, 3, 5)
    np.testing.assert_allclose(Str[:, 0], [-2 / s, 0.0, 2 / s])
    np.testing.assert_allclose(Str[:, 1:], 0.0, atol=1e-15)  # constant columns -> 0
    np.testing.assert_allclose(Ste[0], [4 / s, 0.0, 1.0], atol=1e-15)


def test_standardize_jax_and_int_input():
    X = np.arange(12).reshape(4, 3) ** 2
    S = datasets.standardize(X)
    assert S.dtype == np.float64
    Sj = datasets.standardize(jnp.asarray(X, dtype=jnp.float32))
    assert isinstance(Sj, type(jnp.zeros(1)))
    np.testing.assert_allclose(np.asarray(Sj), S, atol=1e-5)
    np.testing.assert_allclose(np.asarray(Sj).std(0), 1.0, rtol=1e-5)


def test_train_test_split():
    n = 50
    X = np.stack([np.arange(n), -np.arange(n)], axis=1).astype(float)
    y = np.arange(n)
    Xtr, Xte, ytr, yte = datasets.train_test_split(X, y, n_train=30, seed=3)
    assert Xtr.shape == (30, 2) and Xte.shape == (20, 2)
    assert ytr.shape == (30,) and yte.shape == (20,)
    np.testing.assert_array_equal(Xtr[:, 0], ytr)  # rows stay paired
    np.testing.assert_array_equal(Xte[:, 0], yte)
    assert not set(ytr) & set(yte)
    assert sorted(set(ytr) | set(yte)) == list(range(n))
    again = datasets.train_test_split(X, y, n_train=30, seed=3)
    np.testing.assert_array_equal(again[2], ytr)
    other = datasets.train_test_split(X, y, n_train=30, seed=4)
    assert not np.array_equal(other[2], ytr)


@pytest.mark.parametrize("n_train", [0, 50, -1, 51])
def test_train_test_split_bad_size(n_train):
    X, y = np.zeros((50, 2)), np.zeros(50)
    with pytest.raises(ValueError):
        datasets.train_test_split(X, y, n_train=n_train, seed=0)


@pytest.mark.parametrize("n,k", [(10, 10), (23, 5), (351, 10), (7, 2)])
def test_kfold_indices(n, k):
    folds = datasets.kfold_indices(n, k, seed=1)
    assert len(folds) == k
    all_test = np.concatenate([te for _, te in folds])
    np.testing.assert_array_equal(np.sort(all_test), np.arange(n))  # each index once
    sizes = [len(te) for _, te in folds]
    assert max(sizes) - min(sizes) <= 1
    for tr, te in folds:
        assert not set(tr) & set(te)
        np.testing.assert_array_equal(np.sort(np.concatenate([tr, te])), np.arange(n))
    again = datasets.kfold_indices(n, k, seed=1)
    for (a, b), (c, d) in zip(folds, again):
        np.testing.assert_array_equal(a, c)
        np.testing.assert_array_equal(b, d)


@pytest.mark.parametrize("k", [1, 0, 11])
def test_kfold_bad_k(k):
    with pytest.raises(ValueError):
        datasets.kfold_indices(10, k, seed=0)


# --------------------------------------------------------------------------- ordinal-regression sets


@pytest.mark.parametrize("name", ORDINAL)
def test_ordinal_checksums(name):
    data = resources.files("gpclass.datasets") / "data"
    sums = datasets.info(name)["sha256"]
    assert set(sums) == {f"{name}.csv.gz", f"{name}_ordinal.csv.gz"}
    for filename, digest in sums.items():
        assert hashlib.sha256((data / filename).read_bytes()).hexdigest() == digest


@pytest.mark.parametrize("name,n,d,n_train", [("boston", 506, 13, 300), ("machinecpu", 209, 6, 150),
                                               ("pyrimidines", 74, 27, 50)])
def test_ordinal_load_and_splits(name, n, d, n_train):
    X, y = datasets.load(name)
    assert X.shape == (n, d) and y.shape == (n,)
    assert X.dtype == np.float64 and y.dtype == np.float64
    assert np.all(np.isfinite(X)) and np.all(np.isfinite(y))
    assert len(np.unique(y)) > 10  # continuous targets, not labels
    for K in (5, 10):
        labels, splits = datasets.ordinal_splits(name, K)
        assert labels.shape == (n,) and labels.dtype == np.int64
        np.testing.assert_array_equal(np.unique(labels), np.arange(K))
        assert np.bincount(labels).tolist() == datasets.info(name)["bins"][str(K)]
        # the published labels are equal-length bins of the target (Pyrimidines, 5 bins: of [0.45, 0.9])
        lower = 0.45 if (name, K) == ("pyrimidines", 5) else None
        np.testing.assert_array_equal(labels, datasets.equal_length_bins(y, K, lower=lower))
        assert len(splits) == 20
        for train, test in splits:
            assert len(train) == n_train and len(test) == n - n_train
            np.testing.assert_array_equal(np.sort(np.concatenate([train, test])), np.arange(n))
        assert len({tuple(train) for train, _ in splits}) == 20  # 20 different partitions
    assert not np.array_equal(datasets.ordinal_splits(name, 5)[1][0][0], datasets.ordinal_splits(name, 10)[1][0][0])


def test_ordinal_known_rows():
    # first rows of the source files (bostonhousing/housing, machinecpu/machine, pyrimidines/pyrim)
    X, y = datasets.load("boston")
    np.testing.assert_array_equal(X[0], [0.00632, 18.0, 2.31, 0, 0.538, 6.575, 65.2, 4.09, 1, 296.0, 15.3, 396.9, 4.98])
    assert y[0] == 24.0
    X, y = datasets.load("machinecpu")
    np.testing.assert_array_equal(X[0], [125, 256, 6000, 256, 16, 128])
    assert y[0] == 198.0
    X, y = datasets.load("pyrimidines")
    np.testing.assert_array_equal(X[0, :4], [0.5, 0.26, 0.1, 0.9])
    assert X[0, 24] == 0.0 and X[0, 26] == 0.1 and y[0] == 0.571
    # the first line of machinecpu/5bins/machine_train_5.1 is "400 1000 3000 0 1 2 1": in split 1's training set
    X, y = datasets.load("machinecpu")
    labels, splits = datasets.ordinal_splits("machinecpu", 5)
    row = np.flatnonzero(np.all(X == [400, 1000, 3000, 0, 1, 2], axis=1))
    assert len(row) == 1 and row[0] in splits[0][0] and labels[row[0]] == 0


def test_ordinal_splits_bad_arguments():
    with pytest.raises(ValueError, match="ordinal"):
        datasets.ordinal_splits("crabs", 5)
    with pytest.raises(ValueError, match="num_bins"):
        datasets.ordinal_splits("boston", 4)


def test_equal_length_bins_hand_example():
    # edges 1, 2, 3; intervals closed on the right, the first also on the left
    np.testing.assert_array_equal(datasets.equal_length_bins([0, 1, 2, 2.5, 4], 4), [0, 0, 1, 2, 3])
    np.testing.assert_array_equal(datasets.equal_length_bins([0, 1, 2, 2.5, 4], 2), [0, 0, 0, 1, 1])
    # an explicit range: edges 2.5, 5, 7.5; values outside go to the end bins
    np.testing.assert_array_equal(datasets.equal_length_bins([-1, 2.5, 2.6, 11], 4, lower=0, upper=10),
                                  [0, 0, 1, 3])
    assert datasets.equal_length_bins(np.array([3.0, 1.0]), 3).dtype == np.int64


def test_equal_frequency_bins_hand_example():
    # edges = quantiles 1/3, 2/3 of 1..6 = 2.667, 4.333
    np.testing.assert_array_equal(datasets.equal_frequency_bins([5, 1, 4, 2, 3, 6], 3), [2, 0, 1, 0, 1, 2])
    # ties share a label: quantiles of (1, 1, 1, 2) at 1/2 is 1, so all ones are in the first bin
    np.testing.assert_array_equal(datasets.equal_frequency_bins([1, 2, 1, 1], 2), [0, 1, 0, 0])


@pytest.mark.parametrize("y,K", [([], 3), ([1.0, np.nan], 2), ([1.0, 2.0], 1), ([1.0, 2.0], 2.5)])
def test_bins_bad_arguments(y, K):
    with pytest.raises(ValueError):
        datasets.equal_length_bins(y, K)
    with pytest.raises(ValueError):
        datasets.equal_frequency_bins(y, K)
