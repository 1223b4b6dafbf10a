"""Tests run in float64 (enabled here, never inside the library)."""

import os

# jaxlib 0.10.2 can deadlock on CPU in batched (vmapped) Cholesky factorisations under the
# concurrency-optimised scheduler (all XLA worker threads wait in LAPACK's parallel batch map).
# Turning that scheduler off avoids it; set before JAX starts its backend.
os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_cpu_enable_concurrency_optimized_scheduler=false").strip()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import gpclass as gpc  # noqa: E402

# Tolerances keyed by dtype (tinygp's convention).
TOL = {np.dtype("float32"): 5e-4, np.dtype("float64"): 5e-7}


@pytest.fixture(scope="session")
def ionosphere_small():
    """60 standardised Ionosphere cases (a real, small problem)."""
    X, y = gpc.datasets.load("ionosphere")
    rng = np.random.default_rng(1)
    idx = rng.permutation(len(y))[:60]
    return gpc.datasets.standardize(X[idx]), y[idx]


@pytest.fixture(scope="session")
def pima_small():
    """60 standardised Pima cases."""
    X, y = gpc.datasets.load("pima")
    rng = np.random.default_rng(2)
    idx = rng.permutation(len(y))[:60]
    return gpc.datasets.standardize(X[idx]), y[idx]


def toy_data(n=30, d=2, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = np.where(X[:, 0] + 0.5 * np.sin(3 * X[:, 1]) + 0.3 * rng.normal(size=n) > 0, 1.0, -1.0)
    return X, y

