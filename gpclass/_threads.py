"""The threads of the BLAS library that runs jaxlib's CPU LAPACK kernels (Cholesky factorisations, triangular solves).

On the CPU, jaxlib calls LAPACK from SciPy's BLAS (OpenBLAS in SciPy's
wheels).  OpenBLAS and XLA each keep a pool of threads, one per core.  After
a multi-threaded call OpenBLAS's worker threads keep spinning for a while
(about 0.1 s), so the XLA work that follows a factorisation (matrix products,
EP's site loop) shares the cores with them.  Measured on a 2-core machine
(``benchmarks/lapack_threads.py``, calls apart by 0.3 s): ten 600 x 600 matrix
products took 82 ms after a 600 x 600 Cholesky factorisation and 46 ms with one
BLAS thread (44 ms alone); value and gradient with one BLAS thread against two:
EP n = 600 256 against 321 ms, KL n = 300 181 against 250 ms, Laplace
n = 1000 124 against 135 ms.  When other processes keep the cores busy, a
multi-threaded factorisation also waits for descheduled threads at every step
(beside one NumPy process: EP n = 600 0.57 against 2.6 s).

So on a machine with at most two usable cores gpclass runs each call of its
compiled programs (:func:`gpclass.infer`, :func:`gpclass.fit`, everything
wrapped in :func:`gpclass.jit` or :func:`gpclass.filter_jit`) with one BLAS
thread (:func:`one_blas_thread_per_call`) and restores the process's numbers
when the call's results are ready (the limit is the process's: NumPy and
SciPy calls made meanwhile by other Python threads run with one thread too).
With p cores one thread costs the factorisations up to a factor p and saves
the XLA work between them a factor of about 2, so with more cores the threads
are left alone.  Once
:func:`limit_lapack_threads` has been called, or when ``OPENBLAS_NUM_THREADS``,
``MKL_NUM_THREADS``, ``OMP_NUM_THREADS`` or ``BLIS_NUM_THREADS`` is set, the
threads are the user's and gpclass changes nothing.
"""

import contextlib
import functools
import os
import threading

import jax
import threadpoolctl

from ._exceptions import GPClassError

_THREAD_VARIABLES = ("OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "OMP_NUM_THREADS", "BLIS_NUM_THREADS")


class _State:
    user_control = False  # set by limit_lapack_threads
    lock = threading.Lock()
    owner = None  # the thread whose call holds the limit: it sets it and it restores it (see below)


def limit_lapack_threads(num_threads: int | None) -> threadpoolctl.threadpool_limits:
    """Limit the threads of the process's BLAS libraries, among them the one behind jaxlib's CPU LAPACK kernels.

    Use it as a call (the limit holds until changed) or as a context manager
    (the previous numbers are restored on exit)::

        gpc.limit_lapack_threads(1)            # this process, from now on
        with gpc.limit_lapack_threads(1):      # only inside the block
            result = gpc.fit(...)

    It is ``threadpoolctl.threadpool_limits(num_threads, user_api="blas")``
    applied after loading SciPy's BLAS (jaxlib loads it lazily, at its first
    LAPACK call), so it covers NumPy's and SciPy's BLAS libraries (OpenBLAS,
    MKL, BLIS): NumPy and SciPy calls in the process are limited too.  It does
    not touch XLA's own thread pool (matrix products, elementwise work).
    Within a context manager, call ``jax.block_until_ready`` on results before
    the block ends: JAX dispatches computations asynchronously.

    After the first call the BLAS threads are the caller's for the rest of the
    process: gpclass no longer runs its calls with one thread on machines with
    at most two cores (module docstring); ``gpc.limit_lapack_threads(None)``
    does only that.

    Args:
        num_threads: the largest number of BLAS threads; ``None`` lifts the limit.
    """
    if num_threads is not None and (isinstance(num_threads, bool) or not isinstance(num_threads, int)
                                    or num_threads < 1):
        raise GPClassError(f"num_threads must be a positive integer or None; got {num_threads!r}.")
    _load_lapack_blas()
    _State.user_control = True
    return threadpoolctl.threadpool_limits(limits=num_threads, user_api="blas")


def _load_lapack_blas():
    import scipy.linalg  # noqa: F401  loads the BLAS library jaxlib's LAPACK kernels call


@functools.cache
def _usable_cores() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        return os.cpu_count() or 1


@functools.cache
def _controller() -> threadpoolctl.ThreadpoolController:
    _load_lapack_blas()
    return threadpoolctl.ThreadpoolController().select(user_api="blas")


def one_blas_thread_applies() -> bool:
    """Whether calls run with one BLAS thread: programs on the CPU, at most two usable cores, the threads not
    the user's."""
    return (_usable_cores() <= 2 and not _State.user_control
            and not any(os.environ.get(name) for name in _THREAD_VARIABLES) and jax.default_backend() == "cpu")


@contextlib.contextmanager
def one_blas_thread_per_call():
    """One BLAS thread inside the block where :func:`one_blas_thread_applies`, the process's numbers after it.

    Yields whether it limits; if so the block must wait for its results
    (``jax.block_until_ready``).  Calls from several Python threads share one
    limit, set and lifted by the thread whose call came first: threadpoolctl
    (3.8) lets only one thread at a time change OpenBLAS's threads (the first
    that does, until it gives the claim up) and ignores the others, so a limit
    lifted by another thread would stay.  The claim is given up afterwards.
    A call that starts while another thread's call holds the limit runs under
    it until that call ends.
    """
    if not one_blas_thread_applies():
        yield False
        return
    with _State.lock:
        own = _State.owner is None
        if own:
            _State.owner = threading.current_thread()
    if not own:  # another thread's call (or an outer call of this thread) holds the limit
        yield True
        return
    try:
        limiter = _controller().limit(limits=1)
        try:
            yield True
        finally:
            limiter.restore_original_limits()
            _give_up_threadpoolctl_claim()
    finally:
        with _State.lock:
            _State.owner = None


def _give_up_threadpoolctl_claim():
    """Let other threads change OpenBLAS's threads again (threadpoolctl >= 3.8; a no-op before, and when this
    thread holds no claim)."""
    clear = getattr(getattr(threadpoolctl, "OpenBLASController", None), "clear_controlling_thread", None)
    if clear is not None:
        clear()
