"""Many small ML-II fits in one call: jax.vmap on one device, gpc.sharded_vmap over host devices, scikit-learn's loop.

    python benchmarks/many_fits.py                      # 64 fits of n = 60 (Ionosphere subsets), devices 1 and 2
    python benchmarks/many_fits.py --num-sets 256 --devices 1 2 4

Each configuration runs in a new process whose CPU is split into D host
devices (``XLA_FLAGS=--xla_force_host_platform_device_count=D``, set for that
child process only; D = 1 is the default machine): one ``gpc.jit(jax.vmap(fit))``
call (all fits vectorised together, on one device), and ``gpc.sharded_vmap(fit)``
(each device loops over its block of fits one at a time, its default on CPU).
Laplace, logistic likelihood, SE kernel from sigma_f = 1, l = sqrt(d); each
set is 60 random standardised Ionosphere cases (seeds 1000...).  Reference:
scikit-learn's ``GaussianProcessClassifier`` fitted to each set in a Python
loop, same start.  Times exclude compilation (reported apart); the fitted log
marginal likelihoods are compared with scikit-learn's.
"""

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
from harness import machine_header, write_results

CHILD = r"""
import json, sys, time
import jax
jax.config.update("jax_enable_x64", True)
import numpy as np
import gpclass as gpc
num_sets, n, devices = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
X_all, y_all = gpc.datasets.load("ionosphere")
idx = [np.random.default_rng(1000 + s).permutation(len(y_all))[:n] for s in range(num_sets)]
Xs = np.stack([np.asarray(gpc.datasets.standardize(X_all[i])) for i in idx])
ys = np.stack([y_all[i] for i in idx])
kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(Xs.shape[2])))
fit = lambda X, y: gpc.fit(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y, throw=False).objective
batched = gpc.jit(jax.vmap(fit)) if sys.argv[4] == "vmap" else gpc.sharded_vmap(fit)
t0 = time.perf_counter(); jax.block_until_ready(batched(Xs, ys)); first = time.perf_counter() - t0
runs = []
for _ in range(3):
    t0 = time.perf_counter(); values = jax.block_until_ready(batched(Xs, ys)); runs.append(time.perf_counter() - t0)
print(json.dumps(dict(devices=len(jax.devices()), run=float(np.median(runs)), compile=first - float(np.median(runs)),
                      values=np.asarray(values).tolist())))
"""


def sklearn_loop(num_sets, n):
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel

    import gpclass as gpc

    X_all, y_all = gpc.datasets.load("ionosphere")
    values, start = [], time.perf_counter()
    for s in range(num_sets):
        i = np.random.default_rng(1000 + s).permutation(len(y_all))[:n]
        X = np.asarray(gpc.datasets.standardize(X_all[i]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            model = GaussianProcessClassifier(ConstantKernel(1.0) * RBF(np.sqrt(X.shape[1])), random_state=0)
            values.append(model.fit(X, y_all[i]).log_marginal_likelihood_value_)
    return time.perf_counter() - start, np.asarray(values)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-sets", type=int, default=64)
    parser.add_argument("--n", type=int, default=60)
    parser.add_argument("--devices", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--out", default="many_fits")
    args = parser.parse_args()
    info = machine_header("Many small ML-II fits: vmap, sharded_vmap over host devices, scikit-learn loop", args)
    sk_time, sk_values = sklearn_loop(args.num_sets, args.n)
    print(f"  scikit-learn loop: {sk_time:.2f} s for {args.num_sets} fits "
          f"({1e3 * sk_time / args.num_sets:.1f} ms per fit)")
    results = dict(sklearn=dict(run=sk_time))
    for mode, count in [("vmap", 1)] + [("sharded", count) for count in args.devices]:
        env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={count}"}
        out = subprocess.run([sys.executable, "-c", CHILD, str(args.num_sets), str(args.n), str(count), mode],
                             env=env, capture_output=True, text=True, check=True).stdout
        record = json.loads(out.strip().splitlines()[-1])
        diff = float(np.max(np.abs(np.asarray(record.pop("values")) - sk_values)))
        record.update(max_lml_diff_vs_sklearn=diff, ratio_sklearn_over_gpclass=sk_time / record["run"])
        results[f"{mode}_{count}"] = record
        how = "gpc.jit(jax.vmap(fit))" if mode == "vmap" else f"gpc.sharded_vmap(fit), {count} device(s)"
        print(f"  {how:36s}: {record['run']:.2f} s ({1e3 * record['run'] / args.num_sets:.1f} ms per fit), "
              f"compile {record['compile']:.1f} s, {record['ratio_sklearn_over_gpclass']:.2f}x scikit-learn's loop, "
              f"max |log q - scikit-learn's| {diff:.1e}", flush=True)
    write_results(args.out, info, results)


if __name__ == "__main__":
    main()
