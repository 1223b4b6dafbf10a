"""Matérn 5/2 ML-II, gpclass versus scikit-learn, on every bundled binary data set (issue 34, item 7).

    python benchmarks/matern_vs_sklearn.py 2>&1 | tee benchmarks/results/matern_vs_sklearn.log
    python benchmarks/matern_vs_sklearn.py --quick          # smoke run: 100 training cases, one repeat
    python benchmarks/matern_vs_sklearn.py --max-train 300 --repeats 5 --out matern_vs_sklearn_300
    python benchmarks/matern_vs_sklearn.py --blas-threads 1  # one BLAS thread (numpy, scipy = jaxlib's LAPACK)

Both estimators get the same scikit-learn kernel, ``ConstantKernel(1.0) * Matern(length_scale=sqrt(d), nu=2.5)``
(scikit-learn's default bounds 1e-5..1e5 on both hyperparameters), Laplace's approximation with the logistic
likelihood, ML-II from that start: ``gpclass.sklearn.GaussianProcessClassifier(kernel)`` (the kernel translated to
``gpc.kernels.Matern52``, box-aware L-BFGS) and ``sklearn.gaussian_process.GaussianProcessClassifier(kernel)``
(``fmin_l_bfgs_b``, ``n_restarts_optimizer=0``).  The start l = sqrt(d) is gpclass's default (on usps35, d = 256,
scikit-learn's l = 1 leaves every pair of standardised inputs ~20 length scales apart: K = I, a flat objective).

Data: each set permuted with ``numpy.random.default_rng(0)``; the first half (at most ``--max-train`` cases) trains,
the rest (at most ``--max-test``) tests; standardised with the training mean and deviation.

Measured, per data set, in one process: the fitted log marginal likelihood of each (and scikit-learn's own value
at gpclass's fitted theta, the same objective), their relative difference (agreement to 1e-6 expected where both
optimisers converge), test error of each, the disagreements of their predicted classes, the fit time of each
(median of ``--repeats`` calls, gpclass's and scikit-learn's interleaved so both see the same machine load; each
call a new estimator's ``fit``), gpclass's first call (compile + run) and compile time (first call minus the
median), and the ratio scikit-learn / gpclass.  On a busy machine multi-threaded OpenBLAS stalls (README,
``laplace_vs_sklearn.py``); ``--blas-threads 1`` limits every BLAS pool of the process, scikit-learn's and jaxlib's
LAPACK alike (XLA's own threads are unaffected).
"""

import argparse
import warnings

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from harness import fmt_t, interleaved, load_average, machine_header, timed, write_results  # noqa: E402
from sklearn.exceptions import ConvergenceWarning  # noqa: E402
from sklearn.gaussian_process import GaussianProcessClassifier as SklearnGPC  # noqa: E402
from sklearn.gaussian_process.kernels import ConstantKernel, Matern  # noqa: E402

import gpclass as gpc  # noqa: E402
from gpclass.sklearn import GaussianProcessClassifier  # noqa: E402

BINARY = ("crabs", "ionosphere", "pima", "usps35", "wisconsin")


def split(name, max_train, max_test):
    X, y = gpc.datasets.load(name)
    order = np.random.default_rng(0).permutation(len(y))
    n_train = min(len(y) // 2, max_train)
    train, test = order[:n_train], order[n_train:][:max_test]
    X_train, X_test = gpc.datasets.standardize(X[train], X[test])
    return X_train, y[train], X_test, y[test]


def quiet_fit(estimator, X, y):
    """``estimator.fit(X, y)`` and whether its optimiser converged: scikit-learn's L-BFGS-B warns "lbfgs failed to
    converge" otherwise (its other ConvergenceWarning, a hyperparameter close to a bound, is no failure), gpclass's
    estimator "ML-II stopped with ..." (its status, CONVERGED or AT_BOUND otherwise)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        estimator.fit(X, y)
    return estimator, not any(issubclass(w.category, ConvergenceWarning) and "close to the specified" not in
                              str(w.message) for w in caught)


def compare(name, args):
    X, y, X_test, y_test = split(name, args.max_train, args.max_test)
    n, d = X.shape
    kernel = ConstantKernel(1.0) * Matern(length_scale=np.sqrt(d), nu=2.5)
    print(f"--- {name}: {n} training cases, {len(y_test)} test cases, d = {d}; start {kernel} ({load_average()})",
          flush=True)

    def ours():
        return quiet_fit(GaussianProcessClassifier(kernel, max_steps=args.max_steps), X, y)

    def theirs():
        return quiet_fit(SklearnGPC(kernel, optimizer="fmin_l_bfgs_b", n_restarts_optimizer=0), X, y)

    (model, ours_ok), t_first = timed(ours)
    (sk, sk_ok), t_sk_first = timed(theirs)
    times = interleaved({"gpclass": ours, "sklearn": theirs}, args.repeats)
    t_gp, t_sk = times["gpclass"][0], times["sklearn"][0]
    value, sk_value = model.log_marginal_likelihood_value_, sk.log_marginal_likelihood_value_
    sk_at_ours = float(sk.log_marginal_likelihood(model.kernel_.theta))
    rel = (value - sk_value) / abs(sk_value)
    err_gp = float(np.mean(model.predict(X_test) != y_test))
    err_sk = float(np.mean(sk.predict(X_test) != y_test))
    disagree = int(np.sum(model.predict(X_test) != sk.predict(X_test)))
    row = dict(
        data=name, n_train=n, n_test=len(y_test), d=d,
        lml_gpclass=value, lml_sklearn=sk_value, sklearn_lml_at_gpclass_theta=sk_at_ours, rel_diff=rel,
        agree_1e6=abs(rel) <= 1e-6, kernel_gpclass=repr(model.kernel_), kernel_sklearn=repr(sk.kernel_),
        status_gpclass=model.fit_status_.name, converged_sklearn=sk_ok,
        test_error_gpclass=err_gp, test_error_sklearn=err_sk, predictions_disagreeing=disagree,
        fit_first_call_gpclass=t_first, compile_gpclass=t_first - t_gp, fit_gpclass=t_gp, fit_gpclass_min=times[
            "gpclass"][1], fit_sklearn=t_sk, fit_sklearn_min=times["sklearn"][1], fit_sklearn_first=t_sk_first,
        ratio_sklearn_over_gpclass=t_sk / t_gp,
    )
    print(f"  log marginal likelihood: gpclass {value:.10f} ({model.fit_status_.name})  sklearn {sk_value:.10f} "
          f"({'converged' if sk_ok else 'did not converge'})  rel diff {rel:+.1e}  "
          f"[sklearn's value at gpclass's theta {sk_at_ours:.10f}]")
    print(f"  fitted kernel: gpclass {model.kernel_}   sklearn {sk.kernel_}")
    print(f"  test error: gpclass {100 * err_gp:.2f} %  sklearn {100 * err_sk:.2f} %  "
          f"({disagree} of {len(y_test)} predictions differ)")
    print(f"  fit: gpclass first call {fmt_t(t_first)} (compile ~{fmt_t(t_first - t_gp)}), then median "
          f"{fmt_t(t_gp)} (min {fmt_t(times['gpclass'][1])}); sklearn median {fmt_t(t_sk)} "
          f"(min {fmt_t(times['sklearn'][1])}) -> sklearn / gpclass {t_sk / t_gp:.2f}x", flush=True)
    return row


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", nargs="+", default=list(BINARY), choices=BINARY)
    parser.add_argument("--max-train", type=int, default=500, help="largest training set (default 500)")
    parser.add_argument("--max-test", type=int, default=2000, help="largest test set (default 2000)")
    parser.add_argument("--repeats", type=int, default=3, help="timed fits of each after the first (default 3)")
    parser.add_argument("--max-steps", type=int, default=200, help="gpclass's largest number of L-BFGS steps")
    parser.add_argument("--out", default="matern_vs_sklearn", help="name of the JSON file in benchmarks/results/")
    parser.add_argument("--quick", action="store_true", help="smoke run: 100 training cases, one repeat")
    parser.add_argument("--blas-threads", type=int, default=None,
                        help="limit every BLAS pool (numpy's, scipy's = jaxlib's LAPACK) to this many threads")
    args = parser.parse_args(argv)
    if args.blas_threads is not None:
        gpc.limit_lapack_threads(args.blas_threads)
    if args.quick:
        args.max_train, args.repeats = 100, 1
    info = machine_header("Matern 5/2 ML-II (Laplace, logistic): gpclass.sklearn vs scikit-learn "
                          "GaussianProcessClassifier, the same scikit-learn kernel and start", args)
    rows = [compare(name, args) for name in args.data]
    print("=" * 100)
    print(f"SUMMARY ({load_average()}); times: median fit, gpclass's compile = first call - median")
    print(f"  {'data':11s} {'n':>5s} {'d':>4s} {'lml gpclass':>15s} {'lml sklearn':>15s} {'rel diff':>9s} "
          f"{'err gp %':>8s} {'err sk %':>8s} {'gpclass':>9s} {'compile':>9s} {'sklearn':>9s} {'sk/gp':>6s}")
    for r in rows:
        print(f"  {r['data']:11s} {r['n_train']:5d} {r['d']:4d} {r['lml_gpclass']:15.8f} {r['lml_sklearn']:15.8f} "
              f"{r['rel_diff']:+9.1e} {100 * r['test_error_gpclass']:8.2f} {100 * r['test_error_sklearn']:8.2f} "
              f"{fmt_t(r['fit_gpclass']):>9s} {fmt_t(r['compile_gpclass']):>9s} {fmt_t(r['fit_sklearn']):>9s} "
              f"{r['ratio_sklearn_over_gpclass']:6.2f}")
    write_results(args.out, info, rows)


if __name__ == "__main__":
    main()
