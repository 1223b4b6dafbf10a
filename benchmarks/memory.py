"""Memory of one value-and-gradient evaluation per method: XLA's buffer assignment at n = 2000 and 4000.

    python benchmarks/memory.py                      # n = 2000 4000
    python benchmarks/memory.py --sizes 1000 2000 --max-steps 10 1000

For each method, the jitted value and gradient of log q(y|X, theta) with
respect to (log sigma_f, log l) is compiled (not run) and XLA's memory
analysis of the executable is read: argument, output and temporary bytes
(``temp`` is the peak of everything the program allocates besides its inputs
and outputs, from XLA's buffer assignment: deterministic, unlike a process's
resident set).  It is printed in units of one n x n float64 matrix.  The same
program is compiled with two iteration limits (``--max-steps``): a gradient
by implicit differentiation stores nothing per iteration, so the two must
need the same memory (an unrolled or checkpointed loop would grow with the
limit).  Data: the first n rows of usps35 (n = 4000 repeats the 2200 cases
with a small shift, so that K stays positive definite), SE kernel, float64.
"""

import argparse

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from harness import machine_header, write_results  # noqa: E402

import gpclass as gpc  # noqa: E402

LOGISTIC, PROBIT = gpc.likelihoods.Logistic(), gpc.likelihoods.Probit()
METHODS = {
    "laplace": (lambda s: gpc.Laplace(max_steps=s), LOGISTIC),
    "ep-sequential": (lambda s: gpc.EP(max_steps=s), PROBIT),
    "ep-parallel": (lambda s: gpc.EP(schedule="parallel", max_steps=s), PROBIT),
    "kl": (lambda s: gpc.KL(max_steps=s), LOGISTIC),
    "jj-lower": (lambda s: gpc.JaakkolaJordan(max_steps=s), LOGISTIC),
}


def data(n):
    X, y = gpc.datasets.load("usps35")
    reps = -(-n // len(y))
    shifts = 0.01 * np.arange(reps)[:, None, None]
    X = (np.asarray(X)[None] + shifts).reshape(-1, X.shape[1])[:n]
    return X, np.tile(y, reps)[:n]


def memory(method, likelihood, X, y):
    def log_marginal(theta, X, y):
        kernel = gpc.kernels.SquaredExponential(jnp.exp(2 * theta[0]), jnp.exp(theta[1]))
        return gpc.infer(method, kernel, likelihood, X, y).log_marginal

    lowered = gpc.jit(jax.value_and_grad(log_marginal)).lower(jnp.array([1.0, 2.0]), X, y)
    stats = lowered.compile().memory_analysis()
    return dict(argument=stats.argument_size_in_bytes, output=stats.output_size_in_bytes,
                temp=stats.temp_size_in_bytes)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[2000, 4000])
    parser.add_argument("--max-steps", type=int, nargs=2, default=[10, 1000])
    args = parser.parse_args()
    info = machine_header("Memory of value and gradient (XLA buffer assignment), per method", args)
    results = {}
    low, high = args.max_steps
    print(f"  {'method':14s} {'n':>5s} {'temp (MB)':>10s} {'= n x n':>8s} {'arguments':>10s}   "
          f"temp with max_steps {low} / {high}")
    for n in args.sizes:
        X, y = data(n)
        matrix = n * n * 8
        for name, (make, lik) in METHODS.items():
            few, many = memory(make(low), lik, X, y), memory(make(high), lik, X, y)
            results[f"{name}/n={n}"] = dict(n=n, max_steps={low: few, high: many},
                                            temp_in_matrices=many["temp"] / matrix)
            same = "equal" if few["temp"] == many["temp"] else f"DIFFER: {few['temp']} / {many['temp']}"
            print(f"  {name:14s} {n:5d} {many['temp'] / 1e6:10.1f} {many['temp'] / matrix:8.2f} "
                  f"{many['argument'] / 1e6:9.1f}M   {same}", flush=True)
    write_results("memory", info, results)


if __name__ == "__main__":
    main()
