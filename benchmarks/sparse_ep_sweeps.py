"""How many sweeps FITC-EP needs as n grows: twonorm, m = 100, fixed hyperparameters.

    python benchmarks/sparse_ep_sweeps.py --sizes 100000 300000 1000000 --max-steps 1000

The hyperparameters are those ``sparse.py`` fitted at n = 10^4 (sigma_f^2 = 278.92,
l = 35.18); Z: 100 rows by k-means++ (key 0); probit likelihood; the default EP
tolerance (1e-10 relative change of the sites and of log Z_EP).  Reported per n:
sweeps, status, the last relative site change, log Z_EP, test error on 10,000
cases, wall time of one call (compilation included) and peak memory.
"""

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from harness import machine_header, peak_mb, write_results  # noqa: E402
from svgp import twonorm  # noqa: E402

import gpclass as gpc  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100_000, 300_000])
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--out", default="sparse_ep_sweeps")
    args = parser.parse_args()
    info = machine_header("FITC-EP sweeps against n", args)
    results = {}
    for n in args.sizes:
        rng = np.random.default_rng(0)
        X_test, y_test = twonorm(10_000, rng)
        X, y = twonorm(n, rng)
        kernel = gpc.kernels.SquaredExponential(np.float64(278.9229701783013), np.float64(35.18019936213216))
        sparse = gpc.Sparse.from_data(kernel, X, 100, key=jax.random.key(0))
        start = time.perf_counter()
        post = jax.block_until_ready(gpc.infer(gpc.EP(max_steps=args.max_steps), sparse, gpc.likelihoods.Probit(),
                                               X, y, throw=False))
        seconds = time.perf_counter() - start
        row = dict(n=n, sweeps=int(post.info.num_steps), status=gpc.Status(int(post.info.status)).name,
                   max_change=float(post.info.max_change), log_z=float(post.log_marginal), seconds=seconds,
                   error=float(gpc.metrics.error_rate(y_test, gpc.predict(post, X_test))), max_rss_mb=peak_mb())
        results[str(n)] = row
        print(f"n = {n:8d}: {row['sweeps']} sweeps, {row['status']}, last change {row['max_change']:.2e}, "
              f"log Z {row['log_z']:.4f}, test error {100 * row['error']:.2f} %, {seconds:.1f} s, "
              f"peak RSS {row['max_rss_mb']:.0f} MB", flush=True)
    write_results(args.out, info, results)


if __name__ == "__main__":
    main()
