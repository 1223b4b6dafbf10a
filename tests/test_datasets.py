"""Tests for gpclass.datasets: bundled data, standardisation and splitting."""

from importlib import resources

import jax.numpy as jnp
import numpy as np
import pytest

from gpclass import datasets

ALL = ["crabs", "ionosphere", "pima", "satellite", "usps10", "usps35", "vehicle", "wisconsin"]
BINARY = {"crabs", "ionosphere", "pima", "usps35", "wisconsin"}


def test_names_and_files():
    assert datasets.names() == ALL
    data = resources.files("gpclass.datasets") / "data"
    for name in ALL:
        assert (data / f"{name}.csv.gz").is_file()
    provenance = (data / "PROVENANCE.md").read_text(encoding="utf-8")
    for name in ALL:
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
