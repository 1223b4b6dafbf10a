"""jaxlib's CPU LAPACK kernels with the BLAS library's default threads and with one, on a quiet and a busy CPU.

    python benchmarks/lapack_threads.py                 # quiet, then with one busy process beside it
    python benchmarks/lapack_threads.py --hogs 0 1 2    # also with two

Workloads (float64, compiled once, medians of ``--repeats`` calls, the two thread
settings interleaved): one Cholesky factorisation and one triangular solve with
n right-hand sides at n = 1000; binary Laplace's log q and gradient at n = 1000
and EP's at n = 600 (usps35, SE kernel at GPML's log l = 2.85, log sigma_f = 2.35).
"Busy": ``--hogs`` other processes running for the whole measurement, each either
factorising 800 x 800 matrices with NumPy in a loop (``--hog blas``: another
scientific job, with its own multi-threaded OpenBLAS) or spinning a pure Python
loop (``--hog python``: one busy thread).  The thread limit is
``gpc.limit_lapack_threads``.
"""

import argparse
import subprocess
import sys
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import threadpoolctl  # noqa: E402
from harness import machine_header, write_results  # noqa: E402

import gpclass as gpc  # noqa: E402

HOGS = {
    "blas": "import numpy as np\nA = np.random.rand(800, 800)\nA = A @ A.T + 800 * np.eye(800)\n"
            "while True:\n    np.linalg.cholesky(A)",
    "python": "while True: pass",
}


def workloads():
    X, y = gpc.datasets.load("usps35")
    order = np.random.default_rng(0).permutation(len(y))
    theta = jnp.array([2.35, 2.85])

    def log_q_and_gradient(method, likelihood, n):
        Xn, yn = jnp.asarray(X[order[:n]]), jnp.asarray(y[order[:n]], jnp.float64)

        def log_q(t):
            kernel = gpc.kernels.SquaredExponential(jnp.exp(2 * t[0]), jnp.exp(t[1]))
            return gpc.infer(method, kernel, likelihood, Xn, yn).log_marginal

        fn = gpc.jit(jax.value_and_grad(log_q))
        return lambda: fn(theta)

    n = 1000
    A = np.random.default_rng(1).normal(size=(n, n))
    A = A @ A.T / n + np.eye(n)
    L = np.linalg.cholesky(A)
    cholesky = jax.jit(jnp.linalg.cholesky)
    triangular = jax.jit(lambda L, B: jax.scipy.linalg.solve_triangular(L, B, lower=True))
    return {
        "Cholesky, n = 1000": lambda: cholesky(A),
        "triangular solve, 1000 x 1000": lambda: triangular(L, A),
        "Laplace log q + gradient, n = 1000": log_q_and_gradient(gpc.Laplace(), gpc.likelihoods.Logistic(), 1000),
        "EP log Z + gradient, n = 600": log_q_and_gradient(gpc.EP(), gpc.likelihoods.Probit(), 600),
    }


def measure(work, default, repeats):
    times = {(name, t): [] for name in work for t in (default, 1)}
    for _ in range(repeats):
        for name, fn in work.items():
            for threads in (default, 1):
                with gpc.limit_lapack_threads(threads):
                    start = time.perf_counter()
                    jax.block_until_ready(fn())
                    times[(name, threads)].append(time.perf_counter() - start)
    return {name: {"default_s": float(np.median(times[(name, default)])), "one_s": float(np.median(times[(name, 1)])),
                   "default_max_s": float(np.max(times[(name, default)])), "one_max_s": float(np.max(times[(name, 1)]))}
            for name in work}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hog", choices=list(HOGS), default="blas")
    parser.add_argument("--out", default="lapack_threads")
    args = parser.parse_args()
    info = machine_header("jaxlib LAPACK: BLAS threads on a quiet and a busy CPU", args)
    work = workloads()
    for fn in work.values():  # compile, and load SciPy's BLAS
        jax.block_until_ready(fn())
    default = max(c["num_threads"] for c in threadpoolctl.threadpool_info() if c["user_api"] == "blas")
    results = {"default_threads": default}
    for hogs in args.hogs:
        procs = [subprocess.Popen([sys.executable, "-c", HOGS[args.hog]]) for _ in range(hogs)]
        try:
            time.sleep(1.0)
            rows = measure(work, default, args.repeats)
        finally:
            for p in procs:
                p.kill()
        results[f"{hogs}_busy"] = rows
        print(f"-- {hogs} other busy process(es) ({args.hog}): medians (max) of {args.repeats} calls")
        for name, r in rows.items():
            print(f"  {name:36s} {default} threads {1e3 * r['default_s']:8.1f} ms ({1e3 * r['default_max_s']:7.1f})   "
                  f"1 thread {1e3 * r['one_s']:8.1f} ms ({1e3 * r['one_max_s']:7.1f})   "
                  f"default / one {r['default_s'] / r['one_s']:6.2f}", flush=True)
    write_results(args.out, info, results)


if __name__ == "__main__":
    main()
