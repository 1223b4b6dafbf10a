"""Kuss & Rasmussen (2005), Table 1: Laplace and EP, ML-II, 10-fold CV on five benchmark data sets.

    python benchmarks/kuss_rasmussen_table1.py                                   # full run (long: see README)
    python benchmarks/kuss_rasmussen_table1.py --datasets crabs --folds 2        # smoke run
    python benchmarks/kuss_rasmussen_table1.py --datasets usps35 --usps-folds 3  # first 3 of the 10 usps35 folds
    python benchmarks/kuss_rasmussen_table1.py --methods laplace --max-steps 300

What is reproduced.  Kuss & Rasmussen, "Assessing approximate inference for
binary Gaussian process classification", JMLR 6 (2005), Table 1 (Laplace and
EP columns): probit likelihood, isotropic squared-exponential kernel
sigma_f^2 exp(-|x - x'|^2 / (2 l^2)), hyperparameters (sigma_f, l) fitted by
ML-II separately for each method and fold (each method maximises its own
approximate log marginal likelihood), 10-fold cross-validation.  Per data set
and method: the test error E (%), the information I (bits; K&R eq. 34, with
the entropy of the training-fold labels) and |m|, the Euclidean norm of the
posterior mean at the training inputs, each averaged over the folds.

How.
  * Data: ``gpc.datasets.load``.  ionosphere, wisconsin, pima, crabs are
    standardised per fold with ``gpc.datasets.standardize(X_train, X_test)``,
    which uses the training fold's mean and standard deviation only (constant
    columns, ionosphere's x2, become 0).  usps35: pixels in [-1, 1] (GPML's
    scaling, the units of GPML's hyperparameter ranges), not standardised
    (``--standardize-usps`` to standardise it too), a fixed random subset of
    1540 of the 2200 images (the first 1540 of
    ``numpy.random.default_rng(0).permutation(2200)``; K&R's USPS 3 vs 5 set
    has 767 + 773 = 1540 cases).  crabs has d = 6 here (K&R list d = 7,
    counting the index column).
  * Folds: ``gpc.datasets.kfold_indices(n, folds, seed=0)``.
  * Fit: ``gpc.fit(method, kernel, Probit(), X, y, max_steps=...)`` (optax
    L-BFGS on (log sigma_f^2, log l), gtol 1e-5 on the log-parameter
    gradient; K&R used conjugate gradients), from the same start for every
    fold and method: sigma_f = e (log sigma_f = 1), l = sqrt(d) (log l =
    log sqrt(d)); no warm start across folds.  Predictions
    ``gpc.predict(result.posterior, X_test)`` (exact probit average).
  * EP schedule: sequential (GPML Algorithm 3.5) for
    crabs and ionosphere; parallel (damped; same fixed point, tolerance
    1e-10) for wisconsin, pima and usps35.  Chosen from one measured sweep on
    fold 1 at the start point with the library at commit 7af2116, whose
    sequential sweep was a ``lax.scan`` of n rank-one updates of the n x n
    Sigma: sequential / parallel seconds per sweep 0.117 / 0.007 (n = 315),
    2.2 / 0.037 (n = 614), 10.1 / 0.29 (n = 1386), while parallel EP needs
    ~3x more sweeps.  The script prints this measurement before each data
    set's folds; ``--ep-schedule`` overrides the choice.  (A later, blocked
    sequential sweep in the library is much faster: 0.074 / 0.052 s at
    n = 614; with it, sequential may be the better choice everywhere.)
  * Likelihood: ``gpc.likelihoods.Probit()``.  (The runs of the first three
    usps35 folds and of the other data sets in results/ used a script-side
    workaround, ``ClippedProbit``, that evaluated Laplace's derivatives at
    min(y f, 30): the library's probit then gave W = 0 with a NaN derivative
    past y f ~ 37.7 and a NaN gradient.  The library now computes N/Phi with
    finite derivatives and sqrt(W) with a zero derivative at W = 0, so the
    workaround is gone; it changed d log p/df and W by less than 1e-195.)
  * float64; each fold's fit + predict + metrics is one jitted function,
    compiled ahead of time once per (method, training-fold shape), so the
    compile time is reported apart from the run time.

Results are printed (ours beside the published values) and saved as JSON
(``--out``, default benchmarks/results/kuss_rasmussen_table1.json) after
every data set.
"""

import argparse
import glob
import hashlib
import os
from time import perf_counter as now

# Single-threaded OpenBLAS (jaxlib's CPU LAPACK is scipy's OpenBLAS): on this small, shared machine its
# worker threads stall behind XLA's and other processes' threads (see benchmarks/README.md); a fit
# measured 429 s with the default threads and 13 s with one.  Set OPENBLAS_NUM_THREADS to override.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from harness import RESULTS, machine_header, median_time, timed, write_results  # noqa: E402

import gpclass as gpc  # noqa: E402

DATASETS = ("ionosphere", "wisconsin", "pima", "crabs", "usps35")
# Kuss & Rasmussen 2005, Table 1: (E %, I bits, |m|) per method.
PUBLISHED = {
    "ionosphere": {"laplace": (8.84, 0.591, 49.96), "ep": (7.99, 0.661, 124.94)},
    "wisconsin": {"laplace": (3.21, 0.804, 62.62), "ep": (3.21, 0.805, 84.95)},
    "pima": {"laplace": (22.77, 0.252, 29.05), "ep": (22.63, 0.253, 47.49)},
    "crabs": {"laplace": (2.0, 0.682, 112.34), "ep": (2.0, 0.908, 2552.97)},
    "usps35": {"laplace": (2.27, 0.849, 163.05), "ep": (2.21, 0.902, 22011.70)},
}
# EP schedule per data set, chosen from one measured sweep of each schedule (module docstring).
EP_SCHEDULE = {"crabs": "sequential", "ionosphere": "sequential", "wisconsin": "parallel", "pima": "parallel",
               "usps35": "parallel"}
USPS_CASES = 1540  # K&R's USPS 3 vs 5 size (GPML's 767 train + 773 test)
USPS_SEED = 0  # permutation of the 2200 usps35 images; the first USPS_CASES are used
FOLD_SEED = 0  # gpc.datasets.kfold_indices seed
START_LOG_SF = 1.0  # common start: log sigma_f = 1, log l = log sqrt(d)


# --------------------------------------------------------------------------- data


def load_dataset(name, standardize_usps):
    """Inputs, labels and whether to standardise per fold."""
    X, y = gpc.datasets.load(name)  # usps35: pixels already in [-1, 1]
    if name == "usps35":
        subset = np.random.default_rng(USPS_SEED).permutation(len(y))[:USPS_CASES]
        return X[subset], y[subset], standardize_usps
    return X, y, True


def fold_data(X, y, train, test, standardize):
    """One fold's (X_train, y_train, X_test, y_test), standardised with training-fold statistics."""
    X_train, X_test = X[train], X[test]
    if standardize:
        X_train, X_test = gpc.datasets.standardize(X_train, X_test)
    return X_train, y[train], X_test, y[test]


# --------------------------------------------------------------------------- one fold


def make_method(method, schedule):
    return gpc.Laplace() if method == "laplace" else gpc.EP(schedule=schedule)


def fold_function(method, likelihood, max_steps):
    """fit + predict + metrics for one fold, as one function of arrays (jitted by the caller)."""

    def run(log_sf, log_l, X_train, y_train, X_test, y_test):
        kernel = gpc.kernels.SquaredExponential(variance=jnp.exp(2.0 * log_sf), lengthscale=jnp.exp(log_l))
        result = gpc.fit(method, kernel, likelihood, X_train, y_train, max_steps=max_steps, throw=False)
        p = gpc.predict(result.posterior, X_test)
        return dict(
            error=100.0 * gpc.metrics.error_rate(y_test, p),
            info=gpc.metrics.information_bits(y_test, p, y_train),
            norm_m=jnp.linalg.norm(result.posterior.mean),
            log_marginal=result.objective,
            log_sf=0.5 * jnp.log(result.kernel.variance),
            log_l=jnp.log(result.kernel.lengthscale),
            steps=result.num_steps,
            grad_norm=result.grad_norm,
            fit_converged=result.converged,
            inner_converged=result.posterior.info.converged,
            inner_steps=result.posterior.info.num_steps,
        )

    return run


class CompiledFolds:
    """Ahead-of-time compiled fold functions, one per (method, schedule, shapes); compile time recorded."""

    def __init__(self, likelihood, max_steps):
        self.likelihood = likelihood
        self.max_steps = max_steps
        self.cache = {}

    def __call__(self, method, schedule, args):
        key = (method, schedule, tuple(np.shape(a) for a in args))
        compile_time = 0.0
        if key not in self.cache:
            fn = gpc.jit(fold_function(make_method(method, schedule), self.likelihood, self.max_steps))
            self.cache[key], compile_time = timed(lambda: fn.lower(*args).compile())
        return self.cache[key], compile_time


def run_fold(compiled, method, schedule, X_train, y_train, X_test, y_test):
    """Fit one method on one fold; returns a flat dict of Python numbers."""
    start = (jnp.asarray(START_LOG_SF), jnp.asarray(np.log(np.sqrt(X_train.shape[1]))))
    args = (*start, *(jnp.asarray(a) for a in (X_train, y_train, X_test, y_test)))
    fn, compile_time = compiled(method, schedule, args)
    out, run_time = timed(lambda: fn(*args))
    record = {k: (bool(v) if v.dtype == bool else int(v) if v.dtype.kind == "i" else float(v)) for k, v in out.items()}
    return dict(record, run_time=run_time, compile_time=compile_time, n_train=len(y_train), n_test=len(y_test))


# --------------------------------------------------------------------------- EP schedule measurement


def time_sweeps(X_train, y_train, repeats=3):
    """Seconds per EP sweep of each schedule at the start point, fold 1.

    The marginal cost of a sweep: (time of a 3-sweep solve - time of a 1-sweep
    solve) / 2, each the minimum of ``repeats`` compiled calls, so the set-up
    and the final factorisation of the solve cancel.
    """
    kernel = gpc.kernels.SquaredExponential(variance=np.exp(2.0 * START_LOG_SF),
                                            lengthscale=np.sqrt(X_train.shape[1]))
    X, y = jnp.asarray(X_train), jnp.asarray(y_train)
    lik = gpc.likelihoods.Probit()

    def solve_time(schedule, sweeps):
        method = gpc.EP(schedule=schedule, max_steps=sweeps)
        solve = gpc.jit(lambda X, y: gpc.infer(method, kernel, lik, X, y, throw=False).log_marginal)
        timed(lambda: solve(X, y))  # compile
        return median_time(lambda: solve(X, y), repeats)[1]  # the minimum

    return {s: max(solve_time(s, 3) - solve_time(s, 1), 0.0) / 2 for s in ("sequential", "parallel")}


def source_hash():
    """A hash of gpclass/*.py as imported (the commit is in the harness's header; the library may be edited)."""
    digest = hashlib.sha1()
    for path in sorted(glob.glob(os.path.join(os.path.dirname(gpc.__file__), "**", "*.py"), recursive=True)):
        with open(path, "rb") as f:
            digest.update(path.encode() + f.read())
    return digest.hexdigest()[:12]


# --------------------------------------------------------------------------- summaries and printing


def summarise(records):
    """Means over folds (and standard errors of E and I), convergence counts."""
    arr = {k: np.array([r[k] for r in records], dtype=float) for k in records[0] if k != "fold"}
    k = len(records)

    def se(x):
        return float(np.std(x, ddof=1) / np.sqrt(k)) if k > 1 else float("nan")

    return dict(
        folds=k,
        error=float(arr["error"].mean()),
        error_se=se(arr["error"]),
        info=float(arr["info"].mean()),
        info_se=se(arr["info"]),
        norm_m=float(arr["norm_m"].mean()),
        log_marginal=float(arr["log_marginal"].mean()),
        log_sf=float(arr["log_sf"].mean()),
        log_l=float(arr["log_l"].mean()),
        steps=float(arr["steps"].mean()),
        fits_not_converged=int(k - arr["fit_converged"].sum()),
        inner_not_converged=int(k - arr["inner_converged"].sum()),
        run_time=float(arr["run_time"].sum()),
        compile_time=float(arr["compile_time"].sum()),
    )


def print_fold(name, fold, method, r):
    print(f"  {name:10s} fold {fold:2d} {method:7s} E {r['error']:6.2f}%  I {r['info']:6.3f}  |m| {r['norm_m']:9.2f}  "
          f"lml {r['log_marginal']:10.3f}  log sf {r['log_sf']:6.2f}  log l {r['log_l']:5.2f}  steps {r['steps']:3d}  "
          f"conv {'y' if r['fit_converged'] else 'N'}/{'y' if r['inner_converged'] else 'N'} "
          f"(|g| {r['grad_norm']:.1e})  run {r['run_time']:6.1f} s  compile {r['compile_time']:5.1f} s", flush=True)


def print_tables(results, methods):
    """Table 1 (ours beside K&R) and the fit diagnostics."""
    print()
    print("Kuss & Rasmussen 2005, Table 1 -- ours (mean over folds, +- standard error) beside the published values")
    head = "".join(f" | {m + ' E %':>17s} {'I bits':>15s} {'|m|':>9s}" for m in methods)
    print(f"{'data set':10s} {'n':>5s} {'d':>4s} {'k':>3s} {'':5s}{head}")
    for name, res in results.items():
        n, d = res["n"], res["d"]
        ours = "".join(
            f" | {s['error']:7.2f} +- {s['error_se']:5.2f} {s['info']:6.3f} +- {s['info_se']:5.3f} {s['norm_m']:9.2f}"
            for s in (res["summary"][m] for m in methods))
        ref = "".join(f" | {PUBLISHED[name][m][0]:7.2f}{'':9s} {PUBLISHED[name][m][1]:6.3f}{'':9s} "
                      f"{PUBLISHED[name][m][2]:9.2f}" for m in methods)
        folds = res["summary"][methods[0]]["folds"]
        print(f"{name:10s} {n:5d} {d:4d} {folds:3d} ours {ours}")
        print(f"{'':10s} {'':5s} {'':4s} {'':3s} K&R  {ref}")
    print()
    print("Fit diagnostics (means over folds; 'not conv.' = fits whose gradient test failed / final inner solves "
          "not converged; times summed over folds)")
    print(f"{'data set':10s} {'method':8s} {'EP sched.':10s} {'log sf':>7s} {'log l':>6s} {'lml':>9s} {'steps':>6s} "
          f"{'fit not conv.':>13s} {'inner not conv.':>15s} {'run s':>8s} {'compile s':>9s}")
    for name, res in results.items():
        for m in methods:
            s = res["summary"][m]
            sched = res["ep_schedule"] if m == "ep" else "-"
            print(f"{name:10s} {m:8s} {sched:10s} {s['log_sf']:7.2f} {s['log_l']:6.2f} {s['log_marginal']:9.2f} "
                  f"{s['steps']:6.1f} {s['fits_not_converged']:>9d}/{s['folds']:<3d} "
                  f"{s['inner_not_converged']:>11d}/{s['folds']:<3d} {s['run_time']:8.1f} {s['compile_time']:9.1f}")


# --------------------------------------------------------------------------- main


def run_dataset(name, args, compiled):
    X, y, standardize = load_dataset(name, args.standardize_usps)
    folds = gpc.datasets.kfold_indices(len(y), args.folds, seed=FOLD_SEED)
    if args.first_folds is not None:
        folds = folds[: args.first_folds]
    if name == "usps35" and args.usps_folds is not None:
        folds = folds[: args.usps_folds]
    first = args.skip_folds
    schedule = args.ep_schedule or EP_SCHEDULE[name]
    res = dict(n=len(y), d=X.shape[1], standardized=standardize, ep_schedule=schedule, folds_total=args.folds,
               folds_run=len(folds) - first, first_fold=first + 1, records={m: [] for m in args.methods})
    print(f"--- {name}: n = {len(y)}, d = {X.shape[1]}, folds {first + 1}..{len(folds)} of {args.folds}, "
          f"{'standardised per fold' if standardize else 'not standardised'}, EP schedule {schedule}", flush=True)
    if "ep" in args.methods and args.time_sweeps:
        sweep = time_sweeps(*fold_data(X, y, *folds[first], standardize)[:2])
        res["sweep_seconds"] = sweep
        print(f"  one EP sweep at the start point, fold 1 (n = {len(folds[0][0])}): sequential "
              f"{sweep['sequential']:.4f} s, parallel {sweep['parallel']:.4f} s", flush=True)
    for i, (train, test) in list(enumerate(folds))[first:]:
        data = fold_data(X, y, train, test, standardize)
        for method in args.methods:
            record = run_fold(compiled, method, schedule, *data)
            res["records"][method].append(dict(record, fold=i))
            print_fold(name, i + 1, method, record)
    res["summary"] = {m: summarise(res["records"][m]) for m in args.methods}
    res["published"] = {m: dict(zip(("error", "info", "norm_m"), PUBLISHED[name][m])) for m in args.methods}
    return res


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS), choices=DATASETS)
    parser.add_argument("--folds", type=int, default=10, help="k of the k-fold cross-validation (default 10)")
    parser.add_argument("--usps-folds", type=int, default=None,
                        help="run only the first N of the k usps35 folds (default: all)")
    parser.add_argument("--first-folds", type=int, default=None,
                        help="run only the first N of the k folds of every data set (e.g. to estimate run time)")
    parser.add_argument("--methods", nargs="+", default=["laplace", "ep"], choices=["laplace", "ep"])
    parser.add_argument("--max-steps", type=int, default=200, help="largest number of L-BFGS steps per fit")
    parser.add_argument("--ep-schedule", choices=["sequential", "parallel"], default=None,
                        help="EP schedule for every data set (default: per data set, see the module docstring)")
    parser.add_argument("--standardize-usps", action="store_true", help="standardise usps35 too (default: pixels)")
    parser.add_argument("--skip-folds", type=int, default=0,
                        help="skip the first K folds of every data set (to complete an earlier partial run)")
    parser.add_argument("--no-time-sweeps", dest="time_sweeps", action="store_false",
                        help="skip timing one sweep of each EP schedule")
    parser.add_argument("--out", default=str(RESULTS / "kuss_rasmussen_table1.json"))
    args = parser.parse_args(argv)

    info = machine_header("Kuss & Rasmussen 2005 Table 1 (10-fold CV, Laplace and EP, ML-II), probit, float64", args)
    source = dict(gpclass_source_sha1=source_hash())
    print(f"gpclass source: {source}", flush=True)
    out = os.path.abspath(args.out).removesuffix(".json")
    compiled = CompiledFolds(gpc.likelihoods.Probit(), args.max_steps)
    results = {}
    t0 = now()
    for name in args.datasets:
        results[name] = run_dataset(name, args, compiled)
        write_results(out, info, dict(arguments=vars(args), source=source,
                                      start=dict(log_sf=START_LOG_SF, log_l="log sqrt(d)"),
                                      usps_subset=f"default_rng({USPS_SEED}).permutation(2200)[:{USPS_CASES}]",
                                      fold_seed=FOLD_SEED, results=results))
    print_tables(results, args.methods)
    print(f"\ntotal wall time {now() - t0:.1f} s; results saved to {out}.json")


if __name__ == "__main__":
    main()
