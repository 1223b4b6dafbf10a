"""The Jaakkola-Jordan lower bound in float32 (x64 off, as a GPU user runs) against float64: how each solve stops,
in how many steps, how far its log Z' is from float64's; then float32 ML-II fits with the bound, timed.

Solves: each bundled data set named below, all of its cases standardised, an SE kernel with l = sqrt(d) and signal
variances 1, 10, 100, 1e3 and 1e4, ``gpc.infer(gpc.JaakkolaJordan(), ...)`` in float32 and in float64 (the
reference).  Where rounding keeps nu moving the float32 solve ends as IMPRECISE; before that rule it ran its 200
steps to MAX_STEPS.  Fits: ``gpc.fit`` with the bound from sigma_f^2 = 1, l = sqrt(d), in float32 and in float64,
the first call of each (compilation included).

    python benchmarks/float32_jj_grid.py            # about 2 minutes on 2 cores
"""

import argparse
import time

import jax
import numpy as np
from harness import machine_header, write_results

import gpclass as gpc

DATASETS = ("ionosphere", "pima", "wisconsin")
VARIANCES = (1.0, 10.0, 100.0, 1e3, 1e4)


def solve(X, y, variance, dtype):
    kernel = gpc.kernels.SquaredExponential(dtype(variance), dtype(np.sqrt(X.shape[1])))
    post = gpc.infer(gpc.JaakkolaJordan(), kernel, gpc.likelihoods.Logistic(), X.astype(dtype), y, throw=False)
    return gpc.Status(int(post.info.status)).name, int(post.info.num_steps), float(post.log_marginal)


def fit(X, y, dtype):
    kernel = gpc.kernels.SquaredExponential(dtype(1.0), dtype(np.sqrt(X.shape[1])))
    start = time.perf_counter()
    result = jax.block_until_ready(gpc.fit(gpc.JaakkolaJordan(), kernel, gpc.likelihoods.Logistic(),
                                           X.astype(dtype), y, throw=False))
    return dict(status=gpc.Status(int(result.status)).name, steps=int(result.num_steps),
                log_q=float(result.objective), variance=float(result.kernel.variance),
                seconds=time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="float32_jj_grid")
    args = parser.parse_args()
    info = machine_header("Jaakkola-Jordan in float32 against float64", args)
    solves, fits = [], []
    for name in DATASETS:
        X, y = gpc.datasets.load(name)
        X = gpc.datasets.standardize(X)
        for variance in VARIANCES:
            with jax.enable_x64(True):
                reference = solve(X, y, variance, np.float64)
            with jax.enable_x64(False):
                status, steps, log_z = solve(X, y, variance, np.float32)
            row = dict(data=name, variance=variance, status=status, steps=steps, log_z=log_z,
                       float64_status=reference[0], float64_log_z=reference[2], gap=log_z - reference[2])
            solves.append(row)
            print(f"  {name:10s} sigma_f^2 {variance:7g}  float32 {status:9s} {steps:3d} steps, log Z' "
                  f"{log_z:11.4f}  float64 {reference[0]:9s} {reference[2]:11.4f}  gap {row['gap']:+.2e}", flush=True)
        with jax.enable_x64(False):
            single = fit(X, y, np.float32)
        with jax.enable_x64(True):
            double = fit(X, y, np.float64)
        fits.append(dict(data=name, n=len(y), float32=single, float64=double))
        for label, record in (("float32", single), ("float64", double)):
            print(f"  {name:10s} ML-II {label} {record['status']:9s} {record['seconds']:6.1f} s, log q "
                  f"{record['log_q']:.4f} (sigma_f^2 {record['variance']:.3g})", flush=True)
    write_results(args.out, info, dict(solves=solves, fits=fits))


if __name__ == "__main__":
    main()
