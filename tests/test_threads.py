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


# ---------------------------------------------------------------------------------------------
# gpclass leaves the BLAS threads to the user (gpclass._threads): its calls run with the process's threads


def threads_seen_inside(call):
    """The BLAS libraries' thread counts seen by a host callback while ``call(callback)`` runs."""
    seen = []

    def record(x):
        seen.append(blas_threads())
        return x

    call(lambda x: jax.pure_callback(record, jax.ShapeDtypeStruct(x.shape, x.dtype), x))
    assert seen
    return seen[-1]


def through_jit(callback):
    jax.block_until_ready(gpc.jit(lambda x: callback(x) + 1.0)(jnp.ones(3)))


def through_fit(callback):
    X = np.linspace(-1.0, 1.0, 12)[:, None]
    y = np.where(np.sin(3.0 * X[:, 0]) > 0, 1.0, -1.0)
    gpc.fit(gpc.Laplace(), gpc.kernels.SquaredExponential(1.0, 1.0), gpc.likelihoods.Logistic(), X, y, max_steps=2,
            throw=False, progress=lambda info: callback(jnp.zeros(())))


@pytest.mark.parametrize("call", [through_jit, through_fit], ids=["gpc.jit", "gpc.fit"])
@pytest.mark.slow
def test_calls_run_with_the_process_blas_threads(call):
    """gpclass used to run each call with one BLAS thread on machines with at most two cores (a process-wide
    change behind the user's back); now a call sees the threads the process has, and the user's limit."""
    jax.block_until_ready(jnp.linalg.cholesky(jnp.eye(3)))  # loads SciPy's BLAS
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        if not all(t == 2 for t in blas_threads()):
            pytest.skip("the BLAS libraries cannot run two threads on this machine")
        assert all(t == 2 for t in threads_seen_inside(call))
        with gpc.limit_lapack_threads(1):
            assert all(t == 1 for t in threads_seen_inside(call))
        assert all(t == 2 for t in blas_threads())
