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
right-hand sides.  Parallel EP is damped (0.7 by default) and needs more sweeps.
"""

import argparse

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from harness import compile_and_time, machine_header, print_times, write_results  # noqa: E402

import gpclass as gpc  # noqa: E402

LOG_SF, LOG_L = 2.35, 2.85
LIKELIHOODS = {"probit": gpc.likelihoods.Probit(), "logistic": gpc.likelihoods.Logistic()}
METHODS = {
    "laplace": gpc.Laplace(),
    "ep-sequential": gpc.EP(schedule="sequential"),
    "ep-parallel": gpc.EP(schedule="parallel"),
    "jj-lower": gpc.JaakkolaJordan(),  # logistic only
    "jj-upper": gpc.JaakkolaJordanUpper(),  # logistic only
    "kl": gpc.KL(),
}


def value_and_grad_fn(method, likelihood):
    def log_marginal(theta, X, y):
        kernel = gpc.kernels.SquaredExponential(jnp.exp(2 * theta[0]), jnp.exp(theta[1]))
        post = gpc.infer(method, kernel, likelihood, X, y)
        return post.log_marginal, post.info.num_steps

    return gpc.jit(jax.value_and_grad(log_marginal, has_aux=True))


def run_size(X_all, y_all, n, repeats, methods, likelihood):
    """Every method's value and gradient at size n, interleaved with one Cholesky of K + I (the reference)."""
    X, y = jnp.asarray(X_all[:n]), jnp.asarray(y_all[:n])
    theta = jnp.array([LOG_SF, LOG_L])
    K = gpc.kernels.SquaredExponential(np.exp(2 * LOG_SF), np.exp(LOG_L)).gram(X) + jnp.eye(n)
    chol = gpc.jit(jnp.linalg.cholesky)
    calls = {"cholesky": lambda: chol(K)}
    for name in methods:
        fn = value_and_grad_fn(METHODS[name], likelihood)
        calls[name] = lambda fn=fn: fn(theta, X, y)
    times = compile_and_time(calls, repeats)
    print(f"\nn = {n}")
    print_times(times, reference="cholesky")
    rows = []
    for name in methods:
        (value, iters), grad = times[name]["out"]
        t = times[name]
        rows.append(dict(n=n, method=name, log_z=float(value), grad=np.asarray(grad).tolist(), iters=int(iters),
                         compile=t["compile"], run=t["run"], run_min=t["run_min"],
                         choleskys=t["run"] / times["cholesky"]["run"]))
        print(f"  {name:14s} log Z {rows[-1]['log_z']:12.4f}  grad {rows[-1]['grad'][0]:10.4f} "
              f"{rows[-1]['grad'][1]:10.4f}  inner iterations {rows[-1]['iters']:4d}")
    if "ep-sequential" in methods and "ep-parallel" in methods:
        (a, _), ga = times["ep-sequential"]["out"]
        (b, _), gb = times["ep-parallel"]["out"]
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
    parser.add_argument("--out", default="ep_timing", help="name of the JSON file in benchmarks/results/")
    args = parser.parse_args()
    if args.blas_threads:
        from threadpoolctl import threadpool_limits

        threadpool_limits(args.blas_threads)
    info = machine_header(f"Time per evaluation on USPS 3 vs 5, float64, {args.likelihood}, SE at "
                          f"(log sf, log l) = ({LOG_SF}, {LOG_L})", args)
    X_all, y_all = gpc.datasets.load("usps35")
    perm = np.random.default_rng(0).permutation(len(y_all))
    X_all, y_all = X_all[perm], y_all[perm]
    rows = [row for n in args.sizes
            for row in run_size(X_all, y_all, n, args.repeats, args.methods, LIKELIHOODS[args.likelihood])]
    write_results(args.out, info, rows)


if __name__ == "__main__":
    main()
