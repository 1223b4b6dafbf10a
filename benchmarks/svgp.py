"""SVGP (binary) on Breiman's twonorm and ringnorm: test error against the Bayes error, time per epoch, memory.

    python benchmarks/svgp.py                                   # n = 10^4, m = 100, 20 epochs of batches of 500
    python benchmarks/svgp.py --sizes 10000 100000 --epochs 5   # larger n: same time per step, more steps per epoch
    python benchmarks/svgp.py --sklearn-n 0                     # without scikit-learn's dense reference

Data (Breiman 1996, "Bias, variance and arcing classifiers"; 20 inputs, equal
class probabilities):

* twonorm: x ~ N(+a 1, I) or N(-a 1, I), a = 2 / sqrt(20).  Bayes error
  Phi(-2) = 2.275 % (the classes are two unit-covariance Gaussians 4 apart).
* ringnorm: x ~ N(0, 4 I) or N(a 1, I), a = 1 / sqrt(20).  Bayes error 1.3 %
  (Breiman), here estimated by the Bayes rule on the test set.

gpclass: ``gpc.SVGP`` with m inducing inputs started at a random subset of the
training inputs (``--m``), SE kernel (sigma_f = 1, l = sqrt(20)), logistic
likelihood, ``gpc.fit_svgp`` with Adam (learning rate 0.01) on minibatches
(``--batch``) for ``--epochs`` epochs; hyperparameters, Z and q(v) trained
(with ``--natural-step g``, q(v) by natural-gradient steps of size g instead).
Reference: scikit-learn's ``GaussianProcessClassifier`` (dense Laplace,
O(n^3)) on the first ``--sklearn-n`` training cases.  Test sets have 10,000
cases.  Peak memory is the process's maximum resident set size.
"""

import argparse
import time

import jax

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from harness import machine_header, peak_mb, write_results  # noqa: E402
from scipy import stats  # noqa: E402

import gpclass as gpc  # noqa: E402

D = 20


def twonorm(n, rng):
    y = rng.choice([-1.0, 1.0], size=n)
    return y[:, None] * (2.0 / np.sqrt(D)) + rng.normal(size=(n, D)), y


def ringnorm(n, rng):
    y = rng.choice([-1.0, 1.0], size=n)
    X = np.where(y[:, None] > 0, 2.0 * rng.normal(size=(n, D)), 1.0 / np.sqrt(D) + rng.normal(size=(n, D)))
    return X, y


def bayes_error(name, X, y):
    """The Bayes rule's test error: exact for twonorm (Phi(-2)), the Bayes rule applied to the test set for ringnorm."""
    if name == "twonorm":
        return float(stats.norm.cdf(-2.0))
    log_ratio = stats.multivariate_normal(np.zeros(D), 4.0 * np.eye(D)).logpdf(X) - stats.multivariate_normal(
        np.full(D, 1.0 / np.sqrt(D)), np.eye(D)).logpdf(X)
    return float(np.mean(np.where(log_ratio > 0, 1.0, -1.0) != y))


def scaling_in_m(args):
    """Time per optimiser step against the number of inducing inputs m (twonorm, n = 10^4, batches of --batch)."""
    X, y = twonorm(10_000, np.random.default_rng(0))
    rows = []
    for m in args.scaling_m:
        kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(D)))
        start = gpc.SVGP.at_prior(kernel, gpc.likelihoods.Logistic(), X[:m])
        gpc.fit_svgp(start, X, y, key=jax.random.key(1), num_steps=1, batch_size=args.batch, throw=False)  # compile
        t0 = time.perf_counter()
        gpc.fit_svgp(start, X, y, key=jax.random.key(1), num_steps=50, batch_size=args.batch, throw=False)
        step_ms = 1e3 * (time.perf_counter() - t0) / 50
        rows.append(dict(m=m, batch=args.batch, step_ms=step_ms))
        print(f"m = {m:5d}, batch {args.batch}: {step_ms:.2f} ms per step", flush=True)
    return rows


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--datasets", nargs="+", default=["twonorm", "ringnorm"])
    parser.add_argument("--m", type=int, default=100)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--sklearn-n", type=int, default=2000)
    parser.add_argument("--natural-step", type=float, default=None,
                        help="natural-gradient steps of this size for q(v); Adam for the rest")
    parser.add_argument("--scaling-m", type=int, nargs="*", default=[],
                        help="instead: time per step of batch --batch for these m (twonorm, n = 10^4)")
    parser.add_argument("--out", default="svgp_twonorm_ringnorm")
    args = parser.parse_args()
    info = machine_header("SVGP on twonorm and ringnorm", args)
    if args.scaling_m:
        return write_results(args.out, info, scaling_in_m(args))
    generators = dict(twonorm=twonorm, ringnorm=ringnorm)
    results = {}
    for name in args.datasets:
        rng = np.random.default_rng(0)
        X_test, y_test = generators[name](10_000, rng)
        bayes = bayes_error(name, X_test, y_test)
        for n in args.sizes:
            X, y = generators[name](n, rng)
            kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(D)))
            start = gpc.SVGP.at_prior(kernel, gpc.likelihoods.Logistic(), X[rng.permutation(n)[: args.m]])
            steps_per_epoch = n // args.batch
            t0 = time.perf_counter()
            options = dict(batch_size=args.batch, natural_gradient_step=args.natural_step)
            gpc.fit_svgp(start, X, y, key=jax.random.key(1), num_steps=1, **options, throw=False)  # compile
            compile_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            fit = gpc.fit_svgp(start, X, y, key=jax.random.key(1), num_steps=args.epochs * steps_per_epoch, **options,
                               throw=False)
            fit_s = time.perf_counter() - t0
            error = float(gpc.metrics.error_rate(y_test, gpc.predict(fit.model, X_test)))
            row = dict(n=n, m=args.m, batch=args.batch, epochs=args.epochs, error=error, bayes_error=bayes,
                       fit_s=fit_s, epoch_s=fit_s / args.epochs, step_ms=1e3 * fit_s / (args.epochs * steps_per_epoch),
                       compile_s=compile_s, status=gpc.Status(int(fit.status)).name,
                       last_epoch_elbo_per_case=float(np.mean(fit.elbo[-steps_per_epoch:])) / n,
                       max_rss_mb=peak_mb())
            results[f"{name}_{n}"] = row
            print(f"{name} n = {n}: test error {100 * error:.2f} % (Bayes {100 * bayes:.2f} %), "
                  f"{fit_s:.1f} s for {args.epochs} epochs ({row['epoch_s']:.2f} s per epoch, {row['step_ms']:.2f} ms "
                  f"per step of {args.batch}), compile {compile_s:.1f} s, ELBO per case in the last epoch "
                  f"{row['last_epoch_elbo_per_case']:.4f}, max RSS {row['max_rss_mb']:.0f} MB", flush=True)
        if args.sklearn_n:
            from sklearn.gaussian_process import GaussianProcessClassifier
            from sklearn.gaussian_process.kernels import RBF, ConstantKernel

            X, y = generators[name](args.sklearn_n, np.random.default_rng(2))
            t0 = time.perf_counter()
            sk = GaussianProcessClassifier(ConstantKernel(1.0) * RBF(np.sqrt(D)), random_state=0).fit(X, y)
            sk_s = time.perf_counter() - t0
            sk_error = float(np.mean(sk.predict(X_test) != y_test))
            results[f"{name}_sklearn_{args.sklearn_n}"] = dict(n=args.sklearn_n, error=sk_error, fit_s=sk_s)
            print(f"{name} scikit-learn dense Laplace, n = {args.sklearn_n}: test error {100 * sk_error:.2f} %, "
                  f"fit {sk_s:.1f} s", flush=True)
    write_results(args.out, info, results)


if __name__ == "__main__":
    main()
