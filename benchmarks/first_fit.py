"""The first ML-II fit in a new process (compile dominated) against scikit-learn's in a new process.

    python benchmarks/first_fit.py                # 138 Ionosphere cases, 3 fresh processes per configuration
    python benchmarks/first_fit.py --n 200 --repeats 5
    python benchmarks/first_fit.py --before 9627896 --repeats 8   # this tree against an earlier commit's

Each measurement is a new Python process that loads the data, then times its
first ``gpc.fit`` (Laplace, logistic, SE kernel from sigma_f = 1,
l = sqrt(d), float64: tracing, compilation and the L-BFGS run) and the whole
process (interpreter start and imports included), against the same for
scikit-learn's ``GaussianProcessClassifier`` (Laplace, logistic, L-BFGS-B from
the same start, no restarts), the reference.  gpclass runs three ways:
without the persistent compilation cache, with an empty cache
(``gpc.enable_compilation_cache`` on a new directory: compiles and stores),
and with a warm cache (the directory a previous process filled: loads).

The data are the first n cases of Ionosphere after a fixed permutation,
standardised.  Runs of the configurations are interleaved.

With ``--before COMMIT`` it compares the first fit (no cache) of this tree with that commit's package
(``git archive``, put first on ``PYTHONPATH``), both with one BLAS thread (``OPENBLAS_NUM_THREADS=1``: earlier
versions limited their own calls), in alternating order.
"""

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import fmt_t, machine_header, write_results

CHILD = r"""
import json, sys, time
start = time.perf_counter()
mode, n, cache = sys.argv[1], int(sys.argv[2]), sys.argv[3]
import numpy as np
import gpclass as gpc
if cache:
    gpc.enable_compilation_cache(cache)
X, y = gpc.datasets.load("ionosphere")
idx = np.random.default_rng(0).permutation(len(y))[:n]
X, y = gpc.datasets.standardize(X[idx]), y[idx]
if mode == "sklearn":
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel
    t0 = time.perf_counter()
    model = GaussianProcessClassifier(ConstantKernel(1.0) * RBF(np.sqrt(X.shape[1])), random_state=0).fit(X, y)
    fit = time.perf_counter() - t0
    value = float(model.log_marginal_likelihood_value_)
else:
    import jax
    jax.config.update("jax_enable_x64", True)
    kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(X.shape[1])))
    t0 = time.perf_counter()
    result = jax.block_until_ready(gpc.fit(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y, throw=False))
    fit = time.perf_counter() - t0
    value = float(result.objective)
print(json.dumps(dict(fit=fit, process=time.perf_counter() - start, value=value, package=gpc.__file__)))
"""


def run_child(mode, n, cache="", env=None, cwd=None):
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", CHILD, mode, str(n), cache], capture_output=True, text=True,
                         check=True, env=env, cwd=cwd).stdout
    record = json.loads(out.strip().splitlines()[-1])
    record["process"] = time.perf_counter() - start  # interpreter start included
    return record


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=138)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--before", default=None, help="compare this tree's first fit with this commit's")
    parser.add_argument("--out", default=None, help="results name (default: first_fit_n<n>, first_fit_before_<commit>)")
    args = parser.parse_args()
    if args.before is not None:
        return compare(args)
    info = machine_header("First ML-II fit in a new process (Laplace, logistic) against scikit-learn's", args)
    runs = {mode: [] for mode in ("gpclass", "gpclass, empty cache", "gpclass, warm cache", "sklearn")}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as cache:
            runs["gpclass"].append(run_child("gpclass", args.n))
            runs["gpclass, empty cache"].append(run_child("gpclass", args.n, cache))
            runs["gpclass, warm cache"].append(run_child("gpclass", args.n, cache))
        runs["sklearn"].append(run_child("sklearn", args.n))
    results = {}
    print(f"  {'':22s} {'first fit':>10s} {'process':>10s} {'x sklearn fit':>14s}   log marginal likelihood")
    sk_fit = float(np.median([r["fit"] for r in runs["sklearn"]]))
    for mode, records in runs.items():
        fit = float(np.median([r["fit"] for r in records]))
        process = float(np.median([r["process"] for r in records]))
        results[mode] = dict(fit_median=fit, process_median=process, runs=records)
        print(f"  {mode:22s} {fmt_t(fit):>10s} {fmt_t(process):>10s} {fit / sk_fit:14.2f}   {records[0]['value']:.6f}")
    write_results(args.out or f"first_fit_n{args.n}", info, results)


def compare(args):
    """The first fit (no cache) of ``args.before``'s package against this tree's, one BLAS thread each."""
    info = machine_header(f"First ML-II fit in a new process: {args.before} against this tree", args)
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as directory:
        archive = Path(directory) / "before.tar"
        subprocess.run(["git", "-C", str(root), "archive", "-o", str(archive), args.before, "gpclass"], check=True)
        before = Path(directory) / "before"  # not the children's working directory, which comes first on sys.path
        with tarfile.open(archive) as tar:
            tar.extractall(before, filter="data")
        trees = {args.before: str(before), "this tree": str(root)}
        runs = {label: [] for label in trees}
        for round_ in range(args.repeats):
            order = list(trees) if round_ % 2 == 0 else list(trees)[::-1]
            for label in order:
                env = dict(os.environ, PYTHONPATH=trees[label], OPENBLAS_NUM_THREADS="1")
                runs[label].append(run_child("gpclass", args.n, env=env, cwd=directory))
    results = {}
    for label, records in runs.items():
        fits = [r["fit"] for r in records]
        results[label] = dict(fit_median=float(np.median(fits)), fit_min=float(np.min(fits)), runs=records)
        print(f"  {label:12s} first fit median {fmt_t(float(np.median(fits)))}, minimum {fmt_t(float(np.min(fits)))}, "
              f"runs {[round(f, 2) for f in fits]}, log q {records[0]['value']:.12f}, "
              f"package {records[0]['package']}")
    write_results(args.out or f"first_fit_before_{args.before}", info, results)


if __name__ == "__main__":
    main()
