"""Kuss & Rasmussen's question for multi-class data: how far are Laplace, KL (and EP) from the truth?

    python benchmarks/kuss_rasmussen_multiclass.py                                  # the study (see README)
    python benchmarks/kuss_rasmussen_multiclass.py --datasets vehicle --grid 2      # smoke run

Kuss & Rasmussen (2005) compared Laplace and EP with annealed importance sampling (AIS) for binary GP
classification on a grid of hyperparameters.  This script asks the same of the multi-class methods (issue 36,
item 4), each against the gold standard *of its own likelihood*:

  * softmax (GPML eq. 3.34): Laplace (GPML Algorithm 3.3) and Gaussian KL (per-class q, ``gpc.KL()``) against
    AIS for ``Softmax(C)`` (``gpc.AIS()``: elliptical slice transitions on the (n, C) latents, whitened per
    class);
  * multinomial probit (Riihimaki, Jylanki & Vehtari 2013), if ``gpc.likelihoods.MultinomialProbit`` exists:
    nested EP (``gpc.EP()``) against AIS for that likelihood.

Per data set (Vehicle C = 4, Satellite C = 6, USPS-10 C = 10, bundled with gpclass): a training subset of
``--n-train`` cases and a test subset of ``--n-test`` (disjoint, fixed by seed 0), standardised with the
training subset's statistics; a shared squared-exponential kernel sigma_f^2 exp(-|x - x'|^2 / (2 l^2)) on the
grid log sigma_f^2 in ``--log-variances``, l = sqrt(d) x ``--length-factors``.  At each grid point and for each
method: the log marginal likelihood (Laplace: GPML eq. 3.44; KL: the ELBO; EP: log Z_EP; AIS: its estimate
and Monte Carlo standard error), and on the test subset the error rate, the information in bits about the
label (K&R eq. 34 with the training labels' entropy, ``gpc.metrics.information_bits``) and the mean negative
log probability.  Laplace's and KL's predictive probabilities are Monte Carlo averages over their Gaussian
(2000 draws, fixed key); AIS's over its weighted samples.  Then ML-II (``gpc.fit``) per Gaussian method from
the grid's middle point, and the same test numbers at the fitted hyperparameters.

float64.  Results are printed and written as JSON (``--out``, default
benchmarks/results/kuss_rasmussen_multiclass.json) after every data set; ``benchmarks/README.md`` holds the
table of the last full run.
"""

import argparse
import itertools
import json
import re
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

jax.config.update("jax_enable_x64", True)  # a benchmark script is a user's program: float64 is its choice

import gpclass as gpc  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import RESULTS, machine_header, write_results  # noqa: E402

PREDICT_SAMPLES = 2000


def subsets(name, n_train, n_test):
    X, y = gpc.datasets.load(name)
    idx = np.random.default_rng(0).permutation(len(y))
    train, test = idx[:n_train], idx[n_train:n_train + n_test]
    X_train, X_test = gpc.datasets.standardize(X[train], X[test])
    return np.asarray(X_train), y[train], np.asarray(X_test), y[test]


def kernel_at(log_variance, log_lengthscale):
    return gpc.kernels.SquaredExponential(jnp.exp(log_variance), jnp.exp(log_lengthscale))


def methods(args, num_classes):
    """name -> (method, likelihood, whether it samples); AIS for each likelihood present."""
    softmax = gpc.likelihoods.Softmax(num_classes)
    ais = gpc.AIS(num_temperatures=args.ais_temperatures, num_runs=args.ais_runs)
    out = {"laplace": (gpc.Laplace(), softmax, False), "kl": (gpc.KL(), softmax, False),
           "ais softmax": (ais, softmax, True)}
    probit = getattr(gpc.likelihoods, "MultinomialProbit", None)
    if probit is not None:
        out["ep probit"] = (gpc.EP(), probit(num_classes), False)
        out["ais probit"] = (ais, probit(num_classes), True)
    return out


def make_program(method, likelihood):
    """One compiled program per method: log q and the test predictions at traced (log sigma_f^2, log l)."""

    def run(theta, X, y, X_test, key):
        post = gpc.infer(method, kernel_at(theta[0], theta[1]), likelihood, X, y, key=key, throw=False)
        p = gpc.predict(post, X_test, key=jax.random.fold_in(key, 1),
                        integrator=gpc.integrators.MonteCarlo(PREDICT_SAMPLES))
        se = getattr(post, "log_marginal_se", jnp.nan)
        return post.log_marginal, se, p, post.info.status

    return gpc.jit(run)


def test_numbers(y_test, p, y_train):
    p = np.asarray(p)
    return dict(error=float(gpc.metrics.error_rate(y_test, p)),
                info_bits=float(gpc.metrics.information_bits(y_test, p, y_train)),
                nlp=float(gpc.metrics.mean_negative_log_probability(y_test, p)))


def grid_study(args, name):
    X, y, X_test, y_test = subsets(name, args.n_train, args.n_test)
    num_classes, d = int(y.max()) + 1, X.shape[1]
    grid = list(itertools.product(args.log_variances, np.log(np.sqrt(d) * np.asarray(args.length_factors))))
    rows = []
    for method_name, (method, likelihood, _) in methods(args, num_classes).items():
        if args.methods and method_name not in args.methods:
            continue
        program = make_program(method, likelihood)
        start = time.perf_counter()
        for i, theta in enumerate(grid):
            key = jax.random.key(i)
            log_q, se, p, status = jax.block_until_ready(program(np.asarray(theta), X, y, X_test, key))
            row = dict(dataset=name, method=method_name, log_variance=float(theta[0]),
                       lengthscale=float(np.exp(theta[1])), log_q=float(log_q), log_q_se=float(se),
                       status=gpc.Status(int(status)).name, **test_numbers(y_test, p, y))
            rows.append(row)
            print(f"{name:9s} {method_name:11s} log sf2 {theta[0]:5.1f} l {np.exp(theta[1]):6.2f}  "
                  f"log q {row['log_q']:9.3f} (se {row['log_q_se']:.3f})  err {row['error']:.3f}  "
                  f"info {row['info_bits']:.3f}  nlp {row['nlp']:.3f}  {row['status']}", flush=True)
        print(f"  {method_name}: {time.perf_counter() - start:.1f} s for {len(grid)} points (compile included)")
    return rows


def ml2_study(args, name):
    X, y, X_test, y_test = subsets(name, args.n_train, args.n_test)
    num_classes, d = int(y.max()) + 1, X.shape[1]
    start_theta = (float(np.median(args.log_variances)), float(np.log(np.sqrt(d) * np.median(args.length_factors))))
    rows = []
    for method_name, (method, likelihood, sampled) in methods(args, num_classes).items():
        if sampled or (args.methods and method_name not in args.methods):
            continue
        start = time.perf_counter()
        result = gpc.fit(method, kernel_at(*start_theta), likelihood, X, y, max_steps=args.max_steps, throw=False)
        p = gpc.predict(result.posterior, X_test, key=jax.random.key(0),
                        integrator=gpc.integrators.MonteCarlo(PREDICT_SAMPLES))
        row = dict(dataset=name, method=method_name, fitted_variance=float(result.kernel.variance),
                   fitted_lengthscale=float(result.kernel.lengthscale), log_q=float(result.objective),
                   status=gpc.Status(int(result.status)).name, seconds=time.perf_counter() - start,
                   **test_numbers(y_test, p, y))
        rows.append(row)
        print(f"{name:9s} ML-II {method_name:9s} sf2 {row['fitted_variance']:8.3f} l {row['fitted_lengthscale']:7.2f} "
              f"log q {row['log_q']:9.3f}  err {row['error']:.3f}  info {row['info_bits']:.3f}  "
              f"nlp {row['nlp']:.3f}  {row['status']}  {row['seconds']:.1f} s", flush=True)
    return rows


_GRID_LINE = re.compile(r"^(\S+)\s+(.+?)\s+log sf2\s+(\S+) l\s+(\S+)\s+log q\s+(\S+) \(se (\S+)\)\s+err (\S+)\s+"
                        r"info (\S+)\s+nlp (\S+)\s+(\S+)$")


def grid_rows_from_log(text):
    """The grid's rows from the lines :func:`grid_study` printed (4 digits of log q, 3 of the test numbers)."""
    rows = []
    for line in text.splitlines():
        match = _GRID_LINE.match(line.strip())
        if match:
            name, method, lv, ell, log_q, se, err, info, nlp, status = match.groups()
            rows.append(dict(dataset=name, method=method.strip(), log_variance=float(lv), lengthscale=float(ell),
                             log_q=float(log_q), log_q_se=float(se), status=status, error=float(err),
                             info_bits=float(info), nlp=float(nlp)))
    return rows


def summary(results):
    """Markdown tables: per data set and method, log q minus the AIS log Z of its likelihood over the grid (mean
    and range, and the AIS standard error's mean), and the test numbers' mean over the grid beside AIS's; then
    ML-II."""
    grid = results["grid"]
    lines = ["| data set | method | log q - AIS log Z: mean | min | max | AIS se (mean) | error | info (bits) | "
             "nlp |", "|---|---|---|---|---|---|---|---|---|"]
    for name in dict.fromkeys(r["dataset"] for r in grid):
        rows = [r for r in grid if r["dataset"] == name]
        for method in dict.fromkeys(r["method"] for r in rows):
            mine = [r for r in rows if r["method"] == method]
            truth_name = {"laplace": "ais softmax", "kl": "ais softmax", "ep probit": "ais probit"}.get(method)
            truth = [r for r in rows if r["method"] == truth_name]
            mean = lambda key, rs: np.mean([r[key] for r in rs])  # noqa: E731
            if truth:
                gaps = np.array([a["log_q"] - b["log_q"] for a, b in zip(mine, truth)])
                gap_text = f"{gaps.mean():+.2f} | {gaps.min():+.2f} | {gaps.max():+.2f} | {mean('log_q_se', truth):.2f}"
            else:
                gap_text = "(truth) | | | "
            lines.append(f"| {name} | {method} | {gap_text} | {mean('error', mine):.3f} | "
                         f"{mean('info_bits', mine):.3f} | {mean('nlp', mine):.3f} |")
    lines += ["", "| data set | ML-II method | sigma_f^2 | l | log q | error | info (bits) | nlp | status |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in results["ml2"]:
        lines.append(f"| {r['dataset']} | {r['method']} | {r['fitted_variance']:.3g} | {r['fitted_lengthscale']:.3g} | "
                     f"{r['log_q']:.2f} | {r['error']:.3f} | {r['info_bits']:.3f} | {r['nlp']:.3f} | {r['status']} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default="vehicle,satellite,usps10")
    parser.add_argument("--n-train", type=int, default=60)
    parser.add_argument("--n-test", type=int, default=300)
    parser.add_argument("--log-variances", type=float, nargs="+", default=[0.0, 2.0, 4.0])
    parser.add_argument("--length-factors", type=float, nargs="+", default=[0.5, 1.0, 2.0])
    parser.add_argument("--grid", type=int, default=None, help="use only the first G values of each grid axis")
    parser.add_argument("--ais-temperatures", type=int, default=300)
    parser.add_argument("--ais-runs", type=int, default=64)
    parser.add_argument("--max-steps", type=int, default=100)
    parser.add_argument("--skip-ml2", action="store_true", help="the grid only, no ML-II fits")
    parser.add_argument("--methods", type=lambda text: text.split(","), default=None,
                        help="comma-separated method names to run (default: all), e.g. 'laplace,kl,ais softmax'")
    parser.add_argument("--out", default="kuss_rasmussen_multiclass")
    parser.add_argument("--table", action="store_true", help="print the summary tables of the saved results only")
    parser.add_argument("--from-log", metavar="LOG",
                        help="write the JSON (--out) from the grid lines a run printed (a run stopped before its JSON)")
    args = parser.parse_args()
    if args.from_log:
        rows = grid_rows_from_log(Path(args.from_log).read_text())
        write_results(args.out, dict(machine_header("Kuss & Rasmussen, multi-class (from a log)", args),
                                     source_log=args.from_log), dict(grid=rows, ml2=[]))
        print(summary(dict(grid=rows, ml2=[])))
        return
    if args.table:
        record = json.loads((RESULTS / f"{args.out}.json").read_text())
        print(summary(record["results"]))
        return
    if args.grid:
        args.log_variances, args.length_factors = args.log_variances[:args.grid], args.length_factors[:args.grid]
    info = machine_header("Kuss & Rasmussen, multi-class", args)
    results = dict(grid=[], ml2=[])
    for name in args.datasets.split(","):
        results["grid"] += grid_study(args, name)
        write_results(args.out, info, results)
        if not args.skip_ml2:
            results["ml2"] += ml2_study(args, name)
            write_results(args.out, info, results)
    print(summary(results))


if __name__ == "__main__":
    main()
