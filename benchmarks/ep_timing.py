"""Time per evaluation of each inference method (EP sequential / parallel, Laplace, JJ bounds, KL) on USPS 3 vs 5.

    python benchmarks/ep_timing.py                       # n = 500 1000 2000, probit: Laplace and EP
    python benchmarks/ep_timing.py --likelihood logistic --methods laplace ep-sequential jj-lower jj-upper kl
    python benchmarks/ep_timing.py --sizes 500 --repeats 5
    python benchmarks/ep_timing.py --blas-threads 1      # robust on a busy machine (see README)

One evaluation is a jitted ``jax.value_and_grad`` of the approximate log
marginal likelihood with respect to (log sigma_f, log l), starting from zero
sites / f = 0, float64, probit likelihood, SE kernel at GPML's USPS region
(log sigma_f = 2.35, log l = 2.85: a strongly non-Gaussian posterior).  Training
sets are the first n rows of usps35 (pixels in [-1, 1]) after a fixed
permutation.  Reported per method: compile time (first call minus the median),
the median run time over --repeats calls, the inner iterations (EP sweeps,
Newton steps), and the run time in units of one n x n Cholesky factorisation
(jitted ``jnp.linalg.cholesky`` of the prior covariance plus I, timed in the
same process).  Calls of the different methods are interleaved, so each sees
the same machine load.

What to expect: a sequential EP sweep is n rank-one updates of the n x n
Sigma (GPML Algorithm 3.5): O(n^3) flops but memory-bound, ~n^2 * 16 bytes
per site; a parallel sweep is one Cholesky plus one triangular solve with n
right-hand sides.  Parallel EP is damped (0.5) and needs more sweeps.
"""

import argparse
import os
import time

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import gpclass as gpc  # noqa: E402

LOG_SF, LOG_L = 2.35, 2.85
LIKELIHOODS = {"probit": gpc.likelihoods.Probit(), "logistic": gpc.likelihoods.Logistic()}
METHODS = {
    "laplace": gpc.Laplace(),
    "ep-sequential": gpc.EP(),
    "ep-parallel": gpc.EP(schedule="parallel"),
    "jj-lower": gpc.JaakkolaJordan(),  # logistic only
    "jj-upper": gpc.JaakkolaJordanUpper(),  # logistic only
    "kl": gpc.KL(),
}
LIK = LIKELIHOODS["probit"]


def value_and_grad_fn(method):
    def log_marginal(theta, X, y):
        kernel = gpc.kernels.SquaredExponential(jnp.exp(2 * theta[0]), jnp.exp(theta[1]))
        post = gpc.infer(method, kernel, LIK, X, y)
        return post.log_marginal, post.info.num_steps

    return jax.jit(jax.value_and_grad(log_marginal, has_aux=True))


def timed(fn, *args):
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn(*args))
    return out, time.perf_counter() - t0


def run_size(X_all, y_all, n, repeats, methods):
    X, y = jnp.asarray(X_all[:n]), jnp.asarray(y_all[:n])
    theta = jnp.array([LOG_SF, LOG_L])
    K = gpc.kernels.SquaredExponential(np.exp(2 * LOG_SF), np.exp(LOG_L)).gram(X) + jnp.eye(n)
    chol = jax.jit(jnp.linalg.cholesky)
    fns = {name: value_and_grad_fn(METHODS[name]) for name in methods}
    first, results = {}, {}
    _, first["cholesky"] = timed(chol, K)
    for name, fn in fns.items():
        results[name], first[name] = timed(fn, theta, X, y)
    times = {name: [] for name in ["cholesky", *fns]}
    for _ in range(repeats):
        for name, fn in [("cholesky", chol), *fns.items()]:
            args = (K,) if name == "cholesky" else (theta, X, y)
            times[name].append(timed(fn, *args)[1])
    t_chol = float(np.median(times["cholesky"]))
    print(f"\nn = {n}: one Cholesky {t_chol * 1e3:.1f} ms (min {min(times['cholesky']) * 1e3:.1f})")
    print(f"  {'method':14s} {'log Z':>12s} {'d/dlog sf':>10s} {'d/dlog l':>10s} {'iters':>6s} "
          f"{'compile s':>9s} {'run s':>8s} {'min s':>8s} {'Choleskys':>9s}")
    rows = []
    for name in fns:
        (value, iters), grad = results[name]
        t = float(np.median(times[name]))
        row = dict(n=n, method=name, log_z=float(value), grad=np.asarray(grad).tolist(), iters=int(iters),
                   compile=first[name] - t, run=t, run_min=min(times[name]), choleskys=t / t_chol)
        rows.append(row)
        print(f"  {name:14s} {row['log_z']:12.4f} {row['grad'][0]:10.4f} {row['grad'][1]:10.4f} {row['iters']:6d} "
              f"{row['compile']:9.2f} {t:8.3f} {row['run_min']:8.3f} {row['choleskys']:9.1f}")
    if "ep-sequential" in results and "ep-parallel" in results:
        (a, _), ga = results["ep-sequential"]
        (b, _), gb = results["ep-parallel"]
        print(f"  sequential vs parallel: |log Z diff| {abs(float(a) - float(b)):.2e}, "
              f"max |grad diff| {float(jnp.max(jnp.abs(ga - gb))):.2e}")
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[500, 1000, 2000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--methods", nargs="+", default=["laplace", "ep-sequential", "ep-parallel"],
                        choices=list(METHODS))
    parser.add_argument("--likelihood", choices=list(LIKELIHOODS), default="probit")
    parser.add_argument("--blas-threads", type=int, default=None)
    args = parser.parse_args()
    global LIK
    LIK = LIKELIHOODS[args.likelihood]
    if args.blas_threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.blas_threads)
    print(f"jax {jax.__version__}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}, float64, "
          f"{args.likelihood}, SE at (log sf, log l) = ({LOG_SF}, {LOG_L}), {args.repeats} repeats")
    X_all, y_all = gpc.datasets.load("usps35")
    perm = np.random.default_rng(0).permutation(len(y_all))
    X_all, y_all = X_all[perm], y_all[perm]
    for n in args.sizes:
        run_size(X_all, y_all, n, args.repeats, args.methods)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
