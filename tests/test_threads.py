"""gpc.limit_lapack_threads: the BLAS libraries behind jaxlib's CPU LAPACK kernels, limited and restored."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import threadpoolctl

import gpclass as gpc


def blas_threads():
    return [c["num_threads"] for c in threadpoolctl.threadpool_info() if c["user_api"] == "blas"]


def test_limit_as_a_block_and_as_a_call():
    cholesky = jax.jit(jnp.linalg.cholesky)
    A = np.random.default_rng(0).normal(size=(300, 300))
    A = A @ A.T / 300 + np.eye(300)
    before_factor = np.asarray(cholesky(A))  # jaxlib loads SciPy's BLAS at its first LAPACK call
    before = blas_threads()
    with gpc.limit_lapack_threads(1):
        assert blas_threads() and all(t == 1 for t in blas_threads())
        inside = np.asarray(jax.block_until_ready(cholesky(A)))
    assert blas_threads() == before  # restored on exit
    np.testing.assert_allclose(inside, before_factor, rtol=1e-12, atol=1e-14)
    limit = gpc.limit_lapack_threads(1)  # as a call: holds until changed
    try:
        assert all(t == 1 for t in blas_threads())
    finally:
        limit.restore_original_limits()
    assert blas_threads() == before


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "1"])
def test_bad_thread_counts_are_errors(bad):
    with pytest.raises(ValueError, match="positive integer"):
        gpc.limit_lapack_threads(bad)
