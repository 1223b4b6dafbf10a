"""The number of threads of the BLAS library that runs jaxlib's CPU LAPACK kernels (Cholesky, triangular solves).

On the CPU, jaxlib calls LAPACK from SciPy's BLAS (OpenBLAS in SciPy's wheels),
which starts threads of its own inside XLA's thread pool and waits for all of
them at every step of a factorisation.  When other work keeps the cores busy
(another process, parallel test workers, jobs sharing a machine), a waiting
thread is descheduled for a whole time slice at each of those steps.  Measured
on a 2-core machine beside one process factorising matrices with NumPy
(``benchmarks/lapack_threads.py``): binary Laplace's log q and gradient at
n = 1000 took 5.1 s with OpenBLAS's two threads and 0.37 s with one, EP's at
n = 600 10.6 s and 0.79 s; on the quiet machine one thread made Laplace 1.3x
slower and EP 1.2x faster.  gpclass therefore changes nothing by itself and
offers this limit for machines whose cores are shared.
"""

import threadpoolctl


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

    Args:
        num_threads: the largest number of BLAS threads; ``None`` lifts the limit.
    """
    if num_threads is not None and (isinstance(num_threads, bool) or not isinstance(num_threads, int)
                                    or num_threads < 1):
        raise ValueError(f"num_threads must be a positive integer or None; got {num_threads!r}.")
    import scipy.linalg  # noqa: F401  loads the BLAS library jaxlib's LAPACK kernels call

    return threadpoolctl.threadpool_limits(limits=num_threads, user_api="blas")
