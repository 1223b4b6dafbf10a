"""The main job on a CSV file of your own: ``python -m gpclass --csv FILE --target COLUMN``.

Reads the file with the standard library's ``csv`` module (a header row naming
the columns is required), codes the target's values as classes (two: binary
labels -1 / +1; more: softmax Laplace with labels 0..C-1; with ``--ordinal``:
ordered classes, ranks 0..K-1, one ``gpc.likelihoods.Ordinal(K)`` model),
standardises the features with the training statistics, fits the
hyperparameters by ML-II (``gpc.fit``) on a held-out split or in each fold of
k-fold cross-validation, and reports held-out metrics on stdout and, when
asked, as JSON and a plot.

Ordinal targets (``--ordinal``).  The classes' order is the numbers' order when
every value is a number, else it must be given: ``--order low,mid,high`` lists
every value of the target column from the lowest to the highest (text is not
ordered by guessing: alphabetical order would put "high" before "low").  A
value missing from the list, or a listed value no row holds, is an error.
The model is the cumulative probit (``--ordinal logit``: the cumulative logit) with the noise sigma held at 1 and the
kernel's variance fitted with the length scales and the K - 1 cutpoints (the
model is unchanged when f, the cutpoints and sigma are scaled together, so one
of sigma and the variance has to be held: the choice of
``gpclass.sklearn.GaussianProcessClassifier``), from cutpoints at the
quantiles of the prior predictive of the training cases' cumulative
class frequencies (:func:`ordinal_start`).  Reported besides the multi-class metrics: the accuracy and
the mean absolute rank error |predicted rank - true rank| of the predicted
class, the most probable one (as Chu & Ghahramani 2005), and the fitted
cutpoints.

A problem with the file is a :class:`DataError` naming the column and line;
``main`` turns it into a one-line message and exit status 1.
"""

import importlib.util
import json
import math
import os
import time

import jax
import jax.numpy as jnp
import numpy as np

import gpclass as gpc

from ._csv_table import MISSING, DataError, class_codes, ordinal_codes, read_csv, split_names
from ._ordinal_start import link_quantiles, noise_held, prior_scale

METHODS = {"laplace": gpc.Laplace, "ep": gpc.EP, "kl": gpc.KL, "jj": gpc.JaakkolaJordan}
# --kernel: the covariance function's class and its name in the report.
KERNELS = {
    "se": (gpc.kernels.SquaredExponential, "squared_exponential"),
    "matern12": (gpc.kernels.Matern12, "matern12"),
    "matern32": (gpc.kernels.Matern32, "matern32"),
    "matern52": (gpc.kernels.Matern52, "matern52"),
    "rq": (gpc.kernels.RationalQuadratic, "rational_quadratic"),
    "nn": (gpc.kernels.NeuralNetwork, "neural_network"),
}


def make_kernel(name: str, d: int, ard: bool, dtype):
    """The job's starting kernel: variance 1 and length scale sqrt(d) (one per feature with ``ard``), and for the
    rational quadratic alpha = 1; the neural-network kernel (GPML's covNNone) has one length scale."""
    cls, _ = KERNELS[name]
    lengthscale = np.full(d, np.sqrt(d)) if ard else np.sqrt(d)
    extra = {"alpha": jnp.asarray(1.0, dtype)} if name == "rq" else {}
    return cls(variance=jnp.asarray(1.0, dtype), lengthscale=jnp.asarray(lengthscale, dtype), **extra)


def kernel_hyperparameters(kernel) -> dict:
    """sigma_f, the length scale(s) and, for the rational quadratic, alpha, as JSON numbers."""
    lengthscale = np.asarray(kernel.lengthscale, np.float64)
    out = {"sigma_f": float(np.sqrt(kernel.variance)),
           "lengthscale": lengthscale.tolist() if lengthscale.ndim else float(lengthscale)}
    if isinstance(kernel, gpc.kernels.RationalQuadratic):
        out["alpha"] = float(kernel.alpha)
    return out


def add_arguments(parser) -> None:
    """The CSV job's options (the likelihood, seed, dtype and cache options are shared with the bundled job)."""
    group = parser.add_argument_group("your own data", "fit and evaluate on a CSV file instead of a bundled data set")
    group.add_argument("--csv", metavar="FILE", help="CSV file with a header row naming the columns")
    group.add_argument("--target", metavar="COLUMN", help="the column holding the class labels (any values)")
    group.add_argument("--features", metavar="A,B,C",
                       help="comma-separated feature columns (default: every column but the target)")
    group.add_argument("--delimiter", default=",", help="field separator (default: ',')")
    group.add_argument("--drop-missing", action="store_true",
                       help=f"leave out rows with a missing value ({', '.join(repr(m) for m in sorted(MISSING))}) "
                            "in a used column instead of stopping")
    split = group.add_mutually_exclusive_group()
    split.add_argument("--test-fraction", type=float, default=None,
                       help="held-out fraction of the cases, drawn with --seed (default: 0.3)")
    split.add_argument("--folds", type=int, default=None, metavar="K", help="K-fold cross-validation instead")
    group.add_argument("--method", default="laplace", choices=list(METHODS),
                       help="inference: laplace, ep, kl (Gaussian KL) or jj (Jaakkola-Jordan lower bound, logistic "
                            "only); more than two classes: laplace (softmax); --ordinal: laplace, ep or kl")
    group.add_argument("--ordinal", nargs="?", const="probit", default=None, choices=["probit", "logit"],
                       metavar="LINK",
                       help="the target's values are ordered classes (ordinal regression; LINK probit, the default, "
                            "for the cumulative probit, or logit): numbers in their numeric order, text in the "
                            "order of --order")
    group.add_argument("--order", metavar="LOW,...,HIGH",
                       help="with --ordinal: every value of the target column, comma-separated, from the lowest "
                            "to the highest (needed when the values are not all numbers)")
    group.add_argument("--ard", action="store_true", help="one length scale per feature (default: one for all)")
    group.add_argument("--report", metavar="OUT.json", help="write the results as JSON")
    group.add_argument("--plot", metavar="OUT.png",
                       help="draw a reliability diagram and an error-reject curve (needs matplotlib)")


def check_arguments(args, parser) -> None:
    """Options of one job given to the other are usage errors (exit status 2).  Keeps the program's name
    (``args.prog``) for the data errors of :func:`main`, which name the command as the usage errors do."""
    args.prog = parser.prog
    csv_only = ["target", "features", "drop_missing", "test_fraction", "folds", "report", "plot", "ordinal", "order"]
    if args.kernel == "nn" and args.ard:
        parser.error("--kernel nn (GPML's covNNone) has one length scale; --ard is not available for it")
    if args.csv is None:
        given = [name for name in csv_only if getattr(args, name) not in (None, False)]
        given += ["method"] if args.method != "laplace" else []
        given += ["delimiter"] if args.delimiter != "," else []
        if given:
            parser.error(f"--{given[0].replace('_', '-')} needs --csv FILE")
        return
    if args.dataset is not None or args.n_train is not None:
        parser.error("--dataset and --n-train choose a bundled data set; with --csv the file is the data")
    if args.target is None:
        parser.error("--csv needs --target COLUMN, the column holding the class labels")
    if args.test_fraction is not None and not 0.0 < args.test_fraction < 1.0:
        parser.error(f"--test-fraction must lie strictly between 0 and 1, got {args.test_fraction}")
    if args.folds is not None and args.folds < 2:
        parser.error(f"--folds must be at least 2, got {args.folds}")
    if args.order is not None and not args.ordinal:
        parser.error("--order gives the order of ordinal classes; it needs --ordinal")
    if args.ordinal and args.method == "jj":
        parser.error("--ordinal takes --method laplace, ep or kl; jj (the Jaakkola-Jordan bound) is for the "
                     "logistic likelihood only")
    if args.method == "jj" and args.likelihood != "logistic":
        parser.error("--method jj (the Jaakkola-Jordan bound) needs --likelihood logistic")
    problem = output_path_problem(args)
    if problem:
        parser.error(problem)


# What matplotlib's savefig writes without extra packages, by file extension.
_PLOT_FORMATS = ("eps", "jpeg", "jpg", "pdf", "pgf", "png", "ps", "raw", "rgba", "svg", "svgz", "tif", "tiff", "webp")


def output_path_problem(args) -> str | None:
    """Why ``--report`` or ``--plot`` cannot be written, checked before any fitting; None if both can.

    An output may not be the input file (the job would overwrite the data with
    its report) or the other output; its directory must exist and be
    writable, and it may not be a directory; a plot's extension must name a
    format matplotlib writes, and matplotlib must be installed.
    """
    outputs = [(option, path) for option, path in (("--report", args.report), ("--plot", args.plot)) if path]
    data = os.path.realpath(args.csv)
    for option, path in outputs:
        where = os.path.realpath(path)
        if where == data:
            return f"{option} {path} is the input file --csv {args.csv}: it would be overwritten; choose another file"
        if os.path.isdir(where):
            return f"{option} {path} is a directory; give a file name"
        directory = os.path.dirname(where)
        if not os.path.isdir(directory):
            return f"{option} {path}: the directory {directory} does not exist"
        if not os.access(directory, os.W_OK) or (os.path.exists(where) and not os.access(where, os.W_OK)):
            return f"{option} {path}: not writable"
    if len(outputs) == 2 and os.path.realpath(args.report) == os.path.realpath(args.plot):
        return f"--report and --plot name the same file {args.report}"
    if args.plot:
        extension = os.path.splitext(args.plot)[1].lower().lstrip(".")
        if extension not in _PLOT_FORMATS:
            return (f"--plot {args.plot}: the file extension must name an image format ({', '.join(_PLOT_FORMATS)}); "
                    "e.g. --plot reliability.png")
        if importlib.util.find_spec("matplotlib") is None:
            return "--plot needs matplotlib (pip install matplotlib)"
    return None


def main(args, enable_cache) -> None:
    """Run the CSV job; a problem with the data exits with status 1 and a one-line message."""
    start = time.perf_counter()
    try:
        table = read_csv(args.csv, args.target, split_names(args.features), args.drop_missing, args.delimiter)
        names, codes = ordinal_codes(table, args.order) if args.ordinal else class_codes(table)
        if len(names) > 2 and args.method != "laplace" and not args.ordinal:
            raise DataError(f"{len(names)} classes: multi-class classification is softmax Laplace only "
                            f"(--method laplace), not --method {args.method}")
        splits = make_splits(args, codes, names)
    except DataError as error:
        raise SystemExit(f"{getattr(args, 'prog', 'gpclass')}: error: {error}") from None
    read_time = time.perf_counter() - start
    enable_cache()
    if args.float32:
        report = run(args, table, names, codes, splits, jnp.float32)
    else:
        with jax.enable_x64(True):  # scoped to this job: the library sets no global configuration
            report = run(args, table, names, codes, splits, jnp.float64)
    report["wall_time_s"] = {"read": read_time, "total": time.perf_counter() - start}
    if args.report:
        with open(args.report, "w", encoding="utf-8") as f:
            # Strict JSON: an infinite metric (a certain prediction that was wrong) is written as null.
            json.dump(_finite_or_none(report), f, indent=2, allow_nan=False)
            f.write("\n")
        print(f"report written to {args.report}")


def _finite_or_none(value):
    """The report with every non-finite float replaced by None (JSON has no infinity or NaN)."""
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite_or_none(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def ordinal_start(y_train, num_classes, dtype, link="probit"):
    """Ordinal(K, link=link) to start ML-II from (``gpclass._ordinal_start``'s module docstring, kernel variance 1); the
    frequencies clipped to [0.5/n, 1 - 0.5/n] and the cutpoints made increasing by at least 0.01 where a class has
    no training case."""
    n = len(y_train)
    cumulative = np.cumsum(np.bincount(np.asarray(y_train, np.int64), minlength=num_classes))[:-1] / n
    cuts = list(prior_scale(1.0, link) * link_quantiles(np.clip(cumulative, 0.5 / n, 1.0 - 0.5 / n), link))
    for j in range(1, len(cuts)):
        cuts[j] = max(cuts[j], cuts[j - 1] + 0.01)
    return gpc.likelihoods.Ordinal(num_classes, jnp.asarray(cuts, dtype), noise=jnp.asarray(1.0, dtype), link=link)


def make_splits(args, codes, names):
    """(train, test) index pairs: one held-out split, or the folds of k-fold cross-validation."""
    n = len(codes)
    if args.folds is not None:
        if args.folds > n:
            raise DataError(f"--folds {args.folds} is more than the {n} cases: use at most {n} folds")
        splits = gpc.datasets.kfold_indices(n, args.folds, args.seed)
    else:
        fraction = 0.3 if args.test_fraction is None else args.test_fraction
        num_test = int(round(fraction * n))
        if not 1 <= num_test <= n - 2:
            raise DataError(f"--test-fraction {fraction} of {n} cases leaves {num_test} test and "
                            f"{n - num_test} training cases; at least 1 test and 2 training cases are needed: choose "
                            "another --test-fraction")
        perm = np.random.default_rng(args.seed).permutation(n)  # as gpc.datasets.train_test_split
        splits = [(perm[num_test:], perm[:num_test])]
    coded = [-1.0, 1.0] if len(names) == 2 and not args.ordinal else range(len(names))
    for i, (train, _) in enumerate(splits):
        absent = [name for name, c in zip(names, coded) if not np.any(codes[train] == c)]
        if absent:
            where = f"fold {i + 1}'s training cases have" if args.folds else "the training cases have"
            raise DataError(f"{where} no case of class {absent[0]!r}: try another --seed or fewer folds")
    return splits


def run(args, table, names, codes, splits, dtype) -> dict:
    n, d = table.X.shape
    ordinal = bool(args.ordinal)
    binary = len(names) == 2 and not ordinal
    task = "ordinal" if ordinal else "binary" if binary else "multiclass"
    method = METHODS[args.method]()
    if binary:
        likelihood = gpc.likelihoods.Logistic() if args.likelihood == "logistic" else gpc.likelihoods.Probit()
        mapping = {name: int(c) for name, c in zip(names, [-1, 1])}
    else:  # ordinal: each training set's own start (ordinal_start), built in the loop
        likelihood = None if ordinal else gpc.likelihoods.Softmax(len(names))
        mapping = {name: c for c, name in enumerate(names)}
    kernel = make_kernel(args.kernel, d, args.ard, dtype)
    model = (f"{args.likelihood} likelihood" if binary else
             f"ordinal likelihood ({args.ordinal} link), {len(names)} ordered classes" if ordinal else
             f"softmax likelihood, {len(names)} classes")
    scheme = f"{args.folds}-fold CV" if args.folds else f"{len(splits[0][0])} train / {len(splits[0][1])} test"
    print(f"gpclass {gpc.__version__}: {args.method} ML-II on {args.csv} ({n} cases, d = {d}, {scheme}, {model}, "
          f"{KERNELS[args.kernel][1]} kernel, {'ARD, ' if args.ard else ''}{jnp.dtype(dtype).name}), L-BFGS from "
          f"sigma_f = 1, l = sqrt(d){', alpha = 1' if args.kernel == 'rq' else ''}")
    print(("classes, lowest first: " if ordinal else "classes: ")
          + ", ".join(f"{name!r} -> {code:+d}" if binary else f"{name!r} -> {code}" for name, code in mapping.items()))
    if table.num_dropped:
        print(f"left out {table.num_dropped} of {table.num_rows} rows with a missing value")

    # Every case's out-of-fold prediction (held out: the test cases'), for the plot and the pooled metrics.
    runs, pooled, tested = [], np.zeros((n,) if binary else (n, len(names))), np.zeros(n, bool)
    for i, (train, test) in enumerate(splits):
        start = ordinal_start(codes[train], len(names), dtype, args.ordinal) if ordinal else likelihood
        record, p = _fit_and_test(args, method, kernel, start, table.X, codes, train, test, i, dtype)
        pooled[test] = p
        tested[test] = True
        runs.append(record)
        label = f"fold {i + 1}/{len(splits)}: " if args.folds else ""
        _print_run(label, record)

    summary = {key: _mean_std([r["test"][key] for r in runs]) for key in runs[0]["test"]}
    if args.folds:
        print("cross-validation: " + ", ".join(f"{key.replace('_', ' ')} {s['mean']:.4f} +- {s['std']:.4f}"
                                               for key, s in summary.items()))
    if args.plot:
        from . import plot  # matplotlib only when a plot is asked for

        which = "out-of-fold predictions" if args.folds else "held-out predictions"
        title = f"{os.path.basename(args.csv)}: {args.method}, {which}"
        figure = plot.calibration_figure(codes[tested], pooled[tested], title=title)
        figure.savefig(args.plot, dpi=100)
        print(f"plot written to {args.plot}")
    counts = {name: int(np.sum(codes == c)) for name, c in mapping.items()}
    return {
        "gpclass_version": gpc.__version__,
        "data": {"file": args.csv, "target": table.target, "features": table.features, "num_cases": n,
                 "num_features": d, "rows_read": table.num_rows, "rows_dropped_missing": table.num_dropped,
                 "class_counts": counts},
        "task": task,
        "class_mapping": mapping,
        "positive_class": names[1] if binary else None,
        "model": {"method": args.method,
                  "likelihood": args.likelihood if binary else ("ordinal" if args.ordinal == "probit" else
                                                                "ordinal_logit") if ordinal else "softmax",
                  "kernel": KERNELS[args.kernel][1], "ard": bool(args.ard), "dtype": jnp.dtype(dtype).name,
                  "initial": {"sigma_f": 1.0, "lengthscale": float(np.sqrt(d)),
                              **({"alpha": 1.0} if args.kernel == "rq" else {}),
                              **({"noise": 1.0, "cutpoints": ("sqrt(2) Phi^-1" if args.ordinal == "probit" else
                                                              "sqrt(1 + pi / 8) logit")
                                  + " of each training set's cumulative class frequencies"} if ordinal else {})},
                  **({"noise": "held at 1 (the scale of f, the cutpoints and sigma is the kernel's sigma_f)"}
                     if ordinal else {}),
                  "inputs": "standardised with the training cases' mean and standard deviation",
                  "prediction": ("p(y = +1) averaged over the latent Gaussian" if binary else
                                 "exact class probabilities; the predicted class is the most probable" if ordinal
                                 else "Monte Carlo, 10000 samples, key from --seed")},
        "evaluation": ({"scheme": "kfold", "folds": args.folds, "seed": args.seed} if args.folds else
                       {"scheme": "holdout", "test_fraction": len(splits[0][1]) / n, "seed": args.seed}),
        "runs": runs,
        "summary": summary,
        "pooled": {"num_cases": int(tested.sum()),
                   "error_rate": float(gpc.metrics.error_rate(codes[tested], pooled[tested])),
                   "mean_negative_log_probability":
                       float(gpc.metrics.mean_negative_log_probability(codes[tested], pooled[tested])),
                   **(_ordinal_metrics(codes[tested], pooled[tested]) if ordinal else {})},
        "plot": args.plot,
    }


def _fit_and_test(args, method, kernel, likelihood, X, codes, train, test, fold, dtype):
    X_train, X_test = gpc.datasets.standardize(X[train], X[test])
    X_train, X_test = jnp.asarray(X_train, dtype), jnp.asarray(X_test, dtype)
    y_train, y_test = codes[train], codes[test]
    ordinal = isinstance(likelihood, gpc.likelihoods.Ordinal)
    # Ordinal: the cutpoints fitted with the kernel, the noise held at 1 (see the module notes).
    options = {"trainable": (True, noise_held(likelihood))} if ordinal else {}
    start = time.perf_counter()
    result = jax.block_until_ready(gpc.fit(method, kernel, likelihood, X_train, y_train, throw=False,
                                           progress=None if args.progress is False else True, **options))
    fit_time = time.perf_counter() - start
    if likelihood.num_latent > 1:  # the softmax: Monte Carlo class probabilities
        key = jax.random.fold_in(jax.random.key(args.seed), fold)
        p = gpc.predict(result.posterior, X_test, key=key)
    else:
        p = gpc.predict(result.posterior, X_test)
    p = np.asarray(jax.block_until_ready(p), np.float64)
    predict_time = time.perf_counter() - start - fit_time
    status = gpc.Status(int(result.status))
    record = {
        "fold": fold + 1 if args.folds else None,  # 1-based, as printed
        "num_train": len(train),
        "num_test": len(test),
        "hyperparameters": {**kernel_hyperparameters(result.kernel),
                            **({"cutpoints": np.asarray(result.likelihood.cutpoints, np.float64).tolist(),
                                "noise": float(result.likelihood.noise)} if ordinal else {})},
        "log_marginal_likelihood": float(result.objective),
        "fit": {"status": status.name, "message": status.describe("fit", grad_norm=float(result.grad_norm)),
                "converged": bool(result.converged), "num_steps": int(result.num_steps),
                "grad_norm": float(result.grad_norm),
                "history": np.asarray(result.history)[: int(result.num_steps)].tolist()},
        "test": {"error_rate": float(gpc.metrics.error_rate(y_test, p)),
                 "information_bits": float(gpc.metrics.information_bits(y_test, p, y_train)),
                 "mean_negative_log_probability": float(gpc.metrics.mean_negative_log_probability(y_test, p)),
                 **(_ordinal_metrics(y_test, p) if ordinal else {})},
        "wall_time_s": {"fit": fit_time, "predict": predict_time},
    }
    return record, p


def _ordinal_metrics(y, p) -> dict:
    """Accuracy and mean absolute rank error |predicted - true| of the most probable class (ranks 0..K-1)."""
    predicted = np.argmax(np.asarray(p), axis=1)
    y = np.asarray(y, np.int64)
    return {"accuracy": float(np.mean(predicted == y)),
            "mean_absolute_rank_error": float(np.mean(np.abs(predicted - y)))}


def _print_run(label, record) -> None:
    hyper, fit, test = record["hyperparameters"], record["fit"], record["test"]
    ell = hyper["lengthscale"]
    ell = f"{ell:.4g}" if isinstance(ell, float) else "[" + ", ".join(f"{v:.3g}" for v in ell) + "]"
    alpha = f", alpha = {hyper['alpha']:.4g}" if "alpha" in hyper else ""
    cuts = ("; cutpoints = [" + ", ".join(f"{b:.4g}" for b in hyper["cutpoints"]) + f"] (noise {hyper['noise']:.4g}, "
            "held)") if "cutpoints" in hyper else ""
    print(f"{label}fitted: sigma_f = {hyper['sigma_f']:.4g}, lengthscale = {ell}{alpha}{cuts}; log marginal "
          f"likelihood {record['log_marginal_likelihood']:.4f} ({fit['num_steps']} L-BFGS steps, stopped: "
          f"{fit['status'].lower().replace('_', ' ')})")
    ordinal = (f"  accuracy: {100 * test['accuracy']:.2f} %  mean absolute rank error: "
               f"{test['mean_absolute_rank_error']:.4f}") if "accuracy" in test else ""
    print(f"{label}test error: {100 * test['error_rate']:.2f} % ({record['num_test']} cases){ordinal}  information: "
          f"{test['information_bits']:.3f} bits  mean NLP: {test['mean_negative_log_probability']:.4f}  "
          f"(fit {record['wall_time_s']['fit']:.2f} s)")


def _mean_std(values) -> dict:
    values = np.asarray(values, np.float64)
    return {"mean": float(np.mean(values)), "std": float(np.std(values, ddof=1)) if len(values) > 1 else 0.0,
            "per_run": values.tolist()}

