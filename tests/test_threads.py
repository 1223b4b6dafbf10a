"""gpc.limit_lapack_threads: the BLAS libraries behind jaxlib's CPU LAPACK kernels, limited and restored."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import threadpoolctl

import gpclass as gpc


def blas_threads():
    return [c["num_threads"] for c in threadpoolctl.threadpool_info() if c["user_api"] == "blas"]


def test_limit_as_a_block_and_as_a_call(monkeypatch):
    from gpclass import _threads

    monkeypatch.setattr(_threads._State, "user_control", False)  # limit_lapack_threads sets it for the process
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
# One BLAS thread per call on machines with at most two cores (gpclass._threads)


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


@pytest.fixture
def two_blas_threads(monkeypatch):
    """Two BLAS threads set directly (not through gpclass), gpclass's automatic limit in its default state."""
    from gpclass import _threads

    jax.block_until_ready(jnp.linalg.cholesky(jnp.eye(3)))  # loads SciPy's BLAS
    monkeypatch.setattr(_threads._State, "user_control", False)
    for name in _threads._THREAD_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        if not all(t == 2 for t in blas_threads()):
            pytest.skip("the BLAS libraries cannot run two threads on this machine")
        yield _threads


@pytest.mark.parametrize("call", [through_jit, through_fit], ids=["gpc.jit", "gpc.fit"])
def test_calls_run_with_one_blas_thread_on_two_cores_and_restore_them(two_blas_threads, monkeypatch, call):
    monkeypatch.setattr(two_blas_threads, "_usable_cores", lambda: 2)
    assert all(t == 1 for t in threads_seen_inside(call))
    assert all(t == 2 for t in blas_threads())  # restored when the call returns


@pytest.mark.parametrize("call", [through_jit, through_fit], ids=["gpc.jit", "gpc.fit"])
def test_blas_threads_are_left_alone_on_more_cores(two_blas_threads, monkeypatch, call):
    monkeypatch.setattr(two_blas_threads, "_usable_cores", lambda: 4)
    assert all(t == 2 for t in threads_seen_inside(call))


def test_blas_threads_are_left_alone_once_the_user_sets_them(two_blas_threads, monkeypatch):
    monkeypatch.setattr(two_blas_threads, "_usable_cores", lambda: 2)
    monkeypatch.setenv("OPENBLAS_NUM_THREADS", "2")
    assert all(t == 2 for t in threads_seen_inside(through_jit))
    monkeypatch.delenv("OPENBLAS_NUM_THREADS")
    with gpc.limit_lapack_threads(2):
        assert all(t == 2 for t in threads_seen_inside(through_jit))
    assert all(t == 2 for t in threads_seen_inside(through_jit))  # for the rest of the process


def test_a_call_that_raises_restores_the_threads(two_blas_threads, monkeypatch):
    monkeypatch.setattr(two_blas_threads, "_usable_cores", lambda: 2)

    def fail(x):
        raise RuntimeError("inside")

    with pytest.raises(Exception, match="inside"):
        jax.block_until_ready(gpc.jit(lambda x: jax.pure_callback(fail, jax.ShapeDtypeStruct(x.shape, x.dtype), x))(
            jnp.ones(3)))
    assert all(t == 2 for t in blas_threads())
    assert two_blas_threads._State.owner is None


def test_calls_from_several_python_threads_restore_the_threads(two_blas_threads, monkeypatch):
    """Concurrent calls from threads other than the main one: the limit is set and lifted by one of them
    (threadpoolctl >= 3.8 ignores a thread that did not set it), and the main thread can change the threads
    afterwards."""
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(two_blas_threads, "_usable_cores", lambda: 2)
    release = getattr(getattr(threadpoolctl, "OpenBLASController", None), "clear_controlling_thread", None)
    if release is not None:
        release()  # the fixture's limit claimed the threads for this thread: let the pool's threads set them
    program = gpc.jit(lambda x: jnp.linalg.cholesky(x @ x.T + 10.0 * jnp.eye(x.shape[0])).sum())
    x = np.random.default_rng(0).normal(size=(50, 50))
    with ThreadPoolExecutor(4) as pool:
        inside = list(pool.map(lambda i: threads_seen_inside(lambda cb: jax.block_until_ready(
            program(x + i) + gpc.jit(cb)(jnp.zeros(())))), range(8)))
    assert any(all(t == 1 for t in seen) for seen in inside)  # the limit held in some calls
    assert all(t == 2 for t in blas_threads())
    assert two_blas_threads._State.owner is None
    with threadpoolctl.threadpool_limits(3, user_api="blas"):  # the main thread still sets the threads
        assert all(t == 3 for t in blas_threads())
