"""The threads of the BLAS library that runs jaxlib's CPU LAPACK kernels (Cholesky factorisations, triangular solves):
the user's to set, with :func:`limit_lapack_threads`.

On the CPU, jaxlib calls LAPACK from SciPy's BLAS (OpenBLAS in SciPy's
wheels).  OpenBLAS and XLA each keep a pool of threads, one per core.  After
a multi-threaded call OpenBLAS's worker threads keep spinning for a while,
so the XLA work that follows a factorisation (matrix products,
EP's site loop) shares the cores with them.  On a 2-core machine one BLAS
thread made EP, KL and Laplace faster (``benchmarks/lapack_threads.py``;
figures in ``benchmarks/README.md``), and much faster beside another busy
process.  gpclass used to set one thread for each of its calls on machines with
at most two cores and wait for the results before restoring the process's
number; it no longer does: the limit is the process's (NumPy and SciPy calls
made meanwhile by other Python threads ran with one thread too), waiting gave
up JAX's asynchronous dispatch, and the gain was measured on one kind of
machine only.  A user who wants it says so, for the process or for a block.
"""

import threadpoolctl

from ._exceptions import GPClassError


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

    On a machine with one or two cores, one thread is usually faster for
    gpclass's programs (module docstring); gpclass never changes the threads itself.

    Args:
        num_threads: the largest number of BLAS threads; ``None`` lifts the limit.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> with gpc.limit_lapack_threads(1):  # one BLAS thread inside the block only
        ...     post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        ...     post = jax.block_until_ready(post)
        >>> bool(post.info.converged)
        True
    """
    if num_threads is not None and (isinstance(num_threads, bool) or not isinstance(num_threads, int)
                                    or num_threads < 1):
        raise GPClassError(f"num_threads must be a positive integer or None; got {num_threads!r}.")
    _load_lapack_blas()
    return threadpoolctl.threadpool_limits(limits=num_threads, user_api="blas")


def _load_lapack_blas():
    import scipy.linalg  # noqa: F401  loads the BLAS library jaxlib's LAPACK kernels call
