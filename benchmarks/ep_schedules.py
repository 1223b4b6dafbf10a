"""EP's sequential and parallel schedules across the bundled data sets and a grid of hyperparameters.

    python benchmarks/ep_schedules.py                  # probit, n <= 400 cases per data set, 4 x 4 grid
    python benchmarks/ep_schedules.py --max-n 600 --likelihood logistic

For each data set (standardised inputs, the first ``--max-n`` cases after a
fixed permutation) and each (log l, log sigma_f) of the grid, log Z_EP and its
gradient are computed with ``gpc.EP(schedule="sequential")`` and
``gpc.EP(schedule="parallel")`` (its default damping), ``throw=False``.  One compiled
program per schedule and data set evaluates the whole grid (``jax.lax.map``).
Reported per data set and schedule: how many grid points converged, the
median and largest number of sweeps, the time for the grid (compile apart),
and the largest differences between the schedules in log Z and in the
gradient where both converged.  The question it answers: which schedule is
the better default (issue 15: choose it by measurement).
"""

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from harness import machine_header, write_results  # noqa: E402

import gpclass as gpc  # noqa: E402

DATASETS = ["ionosphere", "pima", "wisconsin", "crabs", "usps35"]


def grid_program(method, likelihood):
    def one(theta, X, y):
        def log_z(theta):
            kernel = gpc.kernels.SquaredExponential(jnp.exp(2.0 * theta[1]), jnp.exp(theta[0]))
            post = gpc.infer(method, kernel, likelihood, X, y, throw=False)
            return post.log_marginal, post.info

        (value, info), grad = jax.value_and_grad(log_z, has_aux=True)(theta)
        return value, grad, info.status, info.num_steps

    return gpc.jit(lambda thetas, X, y: jax.lax.map(lambda t: one(t, X, y), thetas))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-n", type=int, default=400)
    parser.add_argument("--likelihood", default="probit", choices=["probit", "logistic"])
    parser.add_argument("--log-l", type=float, nargs="+", default=[0.0, 1.0, 2.0, 3.0])
    parser.add_argument("--log-sf", type=float, nargs="+", default=[0.0, 1.0, 2.5, 4.0])
    parser.add_argument("--datasets", nargs="+", default=DATASETS)
    parser.add_argument("--out", default="ep_schedules")
    args = parser.parse_args()
    info = machine_header("EP schedules: sequential vs parallel over data sets and hyperparameters", args)
    likelihood = gpc.likelihoods.Probit() if args.likelihood == "probit" else gpc.likelihoods.Logistic()
    thetas = jnp.asarray([(ll, ls) for ll in args.log_l for ls in args.log_sf])
    schedules = {"sequential": gpc.EP(schedule="sequential"), "parallel": gpc.EP(schedule="parallel")}
    results = {}
    for name in args.datasets:
        X, y = gpc.datasets.load(name)
        idx = np.random.default_rng(0).permutation(len(y))[: args.max_n]
        X, y = jnp.asarray(gpc.datasets.standardize(X[idx])), jnp.asarray(y[idx], jnp.float64)
        row, outputs = {}, {}
        for label, method in schedules.items():
            program = grid_program(method, likelihood)
            start = time.perf_counter()
            compiled = program.lower(thetas, X, y).compile()
            compile_s = time.perf_counter() - start
            start = time.perf_counter()
            value, grad, status, sweeps = jax.block_until_ready(compiled(thetas, X, y))
            run_s = time.perf_counter() - start
            converged = np.asarray(status) == gpc.Status.CONVERGED
            outputs[label] = (np.asarray(value), np.asarray(grad), converged)
            row[label] = dict(converged=int(converged.sum()), points=len(thetas), run_s=run_s, compile_s=compile_s,
                              median_sweeps=float(np.median(sweeps)), max_sweeps=int(np.max(sweeps)),
                              statuses=[gpc.Status(int(s)).name for s in np.asarray(status)])
        both = outputs["sequential"][2] & outputs["parallel"][2]
        row["max_log_z_diff"] = float(np.max(np.abs(outputs["sequential"][0] - outputs["parallel"][0])[both]))
        row["max_grad_diff"] = float(np.max(np.abs(outputs["sequential"][1] - outputs["parallel"][1])[both]))
        results[name] = row
        print(f"{name} (n = {len(y)}, d = {X.shape[1]}, {len(thetas)} grid points): " + "; ".join(
            f"{label} {row[label]['converged']}/{len(thetas)} converged, "
            f"sweeps median {row[label]['median_sweeps']:.0f} "
            f"max {row[label]['max_sweeps']}, {row[label]['run_s']:.2f} s" for label in schedules)
            + f"; max |log Z diff| {row['max_log_z_diff']:.1e}, max |grad diff| {row['max_grad_diff']:.1e}", flush=True)
    write_results(args.out, info, results)


if __name__ == "__main__":
    main()
