"""jaxlib's CPU LAPACK kernels with the BLAS library's default threads and with one, on a quiet and a busy CPU.

    python benchmarks/lapack_threads.py                 # quiet, then with one busy process beside it
    python benchmarks/lapack_threads.py --hogs 0 1 2    # also with two

Workloads (float64, compiled once, medians of ``--repeats`` calls, the two thread
settings interleaved, ``--gap`` seconds apart so that threads one setting woke
have stopped spinning before the other is timed):

* the mechanism: one Cholesky factorisation (n = 600) followed by ten 600 x 600
  matrix products in one program, and the products alone;
* one Cholesky factorisation and one triangular solve with n right-hand sides
  at n = 1000;
* value and gradient of binary Laplace's log q (n = 300, 1000, logistic), EP's
  log Z (n = 300, 600, probit) and KL's bound (n = 300, probit): usps35, SE
  kernel at GPML's log l = 2.85, log sigma_f = 2.35, compiled with ``gpc.jit``.

"One thread" is what ``gpc.limit_lapack_threads(1)`` sets (gpclass did it by itself
on machines with at most two cores until it became the user's choice:
``gpclass._threads``); "default threads" is the process's BLAS threads left as
they are.  Both are set with threadpoolctl around each call.  "Busy":
``--hogs`` other processes running for the whole measurement, each either
factorising 800 x 800 matrices with NumPy in a loop (``--hog blas``: another
scientific job, with its own multi-threaded OpenBLAS) or spinning a pure Python
loop (``--hog python``: one busy thread).
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
    """{name: (function, whether it is a gpclass program)}."""
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

    def products(A, factorise):
        L = jnp.linalg.cholesky(A) if factorise else A
        B = A * L[0, 0]
        for _ in range(10):
            B = B @ A * 1e-3
        return B

    rng = np.random.default_rng(1)
    A600 = rng.normal(size=(600, 600))
    A600 = A600 @ A600.T / 600 + np.eye(600)
    n = 1000
    A = rng.normal(size=(n, n))
    A = A @ A.T / n + np.eye(n)
    L = np.linalg.cholesky(A)
    after_cholesky, alone = jax.jit(lambda A: products(A, True)), jax.jit(lambda A: products(A, False))
    cholesky = jax.jit(jnp.linalg.cholesky)
    triangular = jax.jit(lambda L, B: jax.scipy.linalg.solve_triangular(L, B, lower=True))
    probit, logistic = gpc.likelihoods.Probit(), gpc.likelihoods.Logistic()
    return {
        "10 products after a Cholesky, n = 600": (lambda: after_cholesky(A600), False),
        "10 products alone, n = 600": (lambda: alone(A600), False),
        "Cholesky, n = 1000": (lambda: cholesky(A), False),
        "triangular solve, 1000 x 1000": (lambda: triangular(L, A), False),
        "Laplace log q + gradient, n = 300": (log_q_and_gradient(gpc.Laplace(), logistic, 300), True),
        "Laplace log q + gradient, n = 1000": (log_q_and_gradient(gpc.Laplace(), logistic, 1000), True),
        "EP log Z + gradient, n = 300": (log_q_and_gradient(gpc.EP(), probit, 300), True),
        "EP log Z + gradient, n = 600": (log_q_and_gradient(gpc.EP(), probit, 600), True),
        "KL bound + gradient, n = 300": (log_q_and_gradient(gpc.KL(), probit, 300), True),
    }


def call(fn, gpclass_program, threads, default):
    """Seconds of one call with ``threads`` BLAS threads (``gpclass_program``: whether it is one of gpclass's,
    kept for the record's layout)."""
    with threadpoolctl.threadpool_limits(threads, user_api="blas"):
        start = time.perf_counter()
        jax.block_until_ready(fn())
        return time.perf_counter() - start


def measure(work, default, repeats, gap):
    times = {(name, t): [] for name in work for t in (default, 1)}
    for r in range(repeats):
        for name, (fn, own) in work.items():
            for threads in (default, 1) if r % 2 == 0 else (1, default):
                time.sleep(gap)
                call(fn, own, threads, default)  # a warm call in this setting, then the timed one
                times[(name, threads)].append(call(fn, own, threads, default))
    return {name: {"default_s": float(np.median(times[(name, default)])), "one_s": float(np.median(times[(name, 1)])),
                   "default_max_s": float(np.max(times[(name, default)])), "one_max_s": float(np.max(times[(name, 1)]))}
            for name in work}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hogs", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--hog", choices=list(HOGS), default="blas")
    parser.add_argument("--gap", type=float, default=0.3, help="seconds between two settings' calls")
    parser.add_argument("--out", default="lapack_threads")
    args = parser.parse_args()
    info = machine_header("jaxlib LAPACK: BLAS threads on a quiet and a busy CPU", args)
    work = workloads()
    for fn, _ in work.values():  # compile, and load SciPy's BLAS
        jax.block_until_ready(fn())
    default = max(c["num_threads"] for c in threadpoolctl.threadpool_info() if c["user_api"] == "blas")
    results = {"default_threads": default}
    for hogs in args.hogs:
        procs = [subprocess.Popen([sys.executable, "-c", HOGS[args.hog]]) for _ in range(hogs)]
        try:
            time.sleep(1.0)
            rows = measure(work, default, args.repeats, args.gap)
        finally:
            for p in procs:
                p.kill()
        results[f"{hogs}_busy"] = rows
        print(f"-- {hogs} other busy process(es) ({args.hog}): medians (max) of {args.repeats} calls")
        for name, r in rows.items():
            print(f"  {name:38s} {default} threads {1e3 * r['default_s']:8.1f} ms ({1e3 * r['default_max_s']:7.1f})   "
                  f"1 thread {1e3 * r['one_s']:8.1f} ms ({1e3 * r['one_max_s']:7.1f})   "
                  f"default / one {r['default_s'] / r['one_s']:6.2f}", flush=True)
    write_results(args.out, info, results)


if __name__ == "__main__":
    main()
