"""The main job: ML-II Laplace on a bundled real data set, then held-out metrics.

    python -m gpclass [--dataset ionosphere] [--n-train 200] [--likelihood logistic|probit] [--seed 0]
                      [--kernel se|matern12|matern32|matern52|rq|nn] [--ard] [--cache-dir DIR | --no-cache]

The same on a CSV file of your own (``_csv_job.py``; held-out split or k-fold CV, any method, a JSON report):

    python -m gpclass --csv FILE --target COLUMN [--features A,B] [--test-fraction 0.3 | --folds K]
                      [--method laplace|ep|kl|jj] [--ard] [--report OUT.json] [--plot OUT.png]
                      [--ordinal [--order LOW,...,HIGH]]   (ordered classes: one gpc.likelihoods.Ordinal model)

``gpclass`` (the console script the package installs) is the same command: ``gpclass --help``.

Compiled programs are kept in JAX's persistent compilation cache
(``gpc.enable_compilation_cache``), so a second run loads them instead of
compiling them again.
"""

import argparse
import contextlib
import time

import jax
import jax.numpy as jnp
import numpy as np

import gpclass as gpc
from gpclass import _csv_job
from gpclass._jax_compat import every_program_stored


def main(argv=None, *, prog="gpclass") -> None:
    """The console script ``gpclass`` (argv=None reads ``sys.argv[1:]``); ``prog`` names the program in usage."""
    args = _parse(argv, prog)
    with every_program_stored():
        if args.csv is not None:
            _csv_job.main(args, lambda: _enable_cache(args))
            return
        args.dataset = "ionosphere" if args.dataset is None else args.dataset
        args.n_train = 200 if args.n_train is None else args.n_train
        _enable_cache(args)
        if args.float32:
            run(args, jnp.float32)
        else:
            with jax.enable_x64(True):  # scoped to this job: the library sets no global configuration
                run(args, jnp.float64)


def _enable_cache(args) -> None:
    if not args.no_cache:
        print(f"compilation cache: {gpc.enable_compilation_cache(args.cache_dir)}")


def _parse(argv, prog="gpclass"):
    parser = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    # No defaults here (filled in by main), so that giving them with --csv is caught as a usage error.
    parser.add_argument("--dataset", default=None, choices=["ionosphere", "wisconsin", "pima", "crabs", "usps35"],
                        help="bundled data set (default: ionosphere)")
    parser.add_argument("--n-train", type=int, default=None, help="training cases, the rest held out (default: 200)")
    parser.add_argument("--likelihood", default="logistic", choices=["logistic", "probit"])
    parser.add_argument("--kernel", default="se", choices=list(_csv_job.KERNELS),
                        help="covariance function: se (squared exponential), matern12, matern32, matern52 (Matérn "
                             "nu = 1/2, 3/2, 5/2), rq (rational quadratic), nn (neural network, GPML's covNNone); "
                             "default: se")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--float32", action="store_true", help="run in float32 (default: float64)")
    parser.add_argument("--cache-dir", default=None,
                        help="where compiled programs are kept (default: ~/.cache/gpclass/xla)")
    parser.add_argument("--no-cache", action="store_true", help="compile every program anew, keep nothing on disk")
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="report the fit's steps on stderr while fitting (default: on for --csv, off for the "
                             "bundled data, whose quick fit is kept by the compilation cache, which keeps no "
                             "program with a host callback)")
    _csv_job.add_arguments(parser)
    args = parser.parse_args(argv)
    _csv_job.check_arguments(args, parser)
    return args


def run(args, dtype) -> None:
    X, y = gpc.datasets.load(args.dataset)
    X_train, X_test, y_train, y_test = gpc.datasets.train_test_split(X, y, args.n_train, seed=args.seed)
    X_train, X_test = gpc.datasets.standardize(X_train, X_test)
    X_train, X_test = jnp.asarray(X_train, dtype), jnp.asarray(X_test, dtype)
    likelihood = gpc.likelihoods.Logistic() if args.likelihood == "logistic" else gpc.likelihoods.Probit()
    kernel = _csv_job.make_kernel(args.kernel, X.shape[1], args.ard, dtype)
    print(
        f"gpclass {gpc.__version__}: Laplace ML-II on {args.dataset} ({len(y_train)} train / {len(y_test)} test, "
        f"d = {X.shape[1]}, {args.likelihood} likelihood, {_csv_job.KERNELS[args.kernel][1]} kernel, "
        f"{jnp.dtype(dtype).name}), L-BFGS from sigma_f = 1, l = sqrt(d){' for every input (ARD)' if args.ard else ''}"
        f"{', alpha = 1' if args.kernel == 'rq' else ''}"
    )

    start = time.perf_counter()
    with _count_cache_hits() as cache_hits:
        result = jax.block_until_ready(gpc.fit(gpc.Laplace(), kernel, likelihood, X_train, y_train, throw=False,
                                                    progress=True if args.progress else None))
        fit_time = time.perf_counter() - start
        p = gpc.predict(result.posterior, X_test)
    for i, value in enumerate(np.asarray(result.history)[: int(result.num_steps)]):
        print(f"fit step {i + 1:4d}: log marginal likelihood {value: .10f}")

    k = result.kernel
    alpha = f", alpha = {float(k.alpha):.4g}" if args.kernel == "rq" else ""
    lengthscale = np.asarray(k.lengthscale, np.float64)
    shown = np.array2string(lengthscale, precision=4) if lengthscale.ndim else f"{float(lengthscale):.4g}"
    log_l = np.array2string(np.log(lengthscale), precision=3) if lengthscale.ndim else f"{np.log(lengthscale):.3f}"
    print(f"fitted: sigma_f = {float(jnp.sqrt(k.variance)):.4g}, lengthscale = {shown}{alpha}  "
          f"(log sigma_f = {float(0.5 * jnp.log(k.variance)):.3f}, log l = {log_l})")
    print(f"log marginal likelihood: {float(result.objective):.4f}  ({int(result.num_steps)} L-BFGS steps, "
          f"max|grad| = {float(result.grad_norm):.1e})")
    print(f"stopped: {gpc.Status(int(result.status)).describe('fit', grad_norm=float(result.grad_norm))}")
    print(f"test error: {100 * float(gpc.metrics.error_rate(y_test, p)):.2f} %  "
          f"information: {float(gpc.metrics.information_bits(y_test, p, y_train)):.3f} bits  "
          f"mean NLP: {float(gpc.metrics.mean_negative_log_probability(y_test, p)):.4f}")
    print(f"wall time (fit, compile included): {fit_time:.2f} s"
          + (f"; {cache_hits[0]} compiled programs loaded from the cache" if not args.no_cache else ""))


@contextlib.contextmanager
def _count_cache_hits():
    """A one-element list counting the programs JAX loads from its persistent cache while the block runs."""
    hits = [0]

    def listener(event, **_):
        if event == "/jax/compilation_cache/cache_hits":
            hits[0] += 1

    jax.monitoring.register_event_listener(listener)
    try:
        yield hits
    finally:
        jax.monitoring.unregister_event_listener(listener)


if __name__ == "__main__":
    main(prog="python -m gpclass")
