"""USPS, all ten digits: sparse (FITC) softmax Laplace against the dense softmax Laplace method.

    python benchmarks/usps10_sparse.py                     # m = 100 200 on 5,500 / 5,500, dense at n = 4,649

The bundled usps10 (11,000 images, 1,100 per digit, pixels scaled to [-1, 1])
is split by a fixed permutation into 5,500 training and 5,500 test images.
GPML section 3.5.3 used the 9,298-image USPS set with a 4,649 / 4,649 split and
found, at the maximum (log l, log sigma_f) = (2.35, 2.6) of the dense softmax
Laplace log q, a test error of 3.1 % and 2.67 bits of information.  Here:

* sparse: ``gpc.Sparse(kernel, Z)`` (FITC, Z by k-means++ from the training
  inputs, key 0) with m inducing inputs on all 5,500 training images, at
  GPML's hyperparameters; with ``--fit``, an ML-II fit of (l, sigma_f) with Z
  fixed, started there;
* dense: the dense softmax Laplace method on the first 4,649 of the training
  images (GPML's training-set size), at the same hyperparameters.

Both are tested on the same 5,500 images: error and information in bits
(``gpc.metrics``), predictions by Monte Carlo (``--mc-samples``) in batches.
Reported: log q, Newton steps and status, wall time of the first call (with
compilation) and of a second identical call, and peak resident memory.
"""

import argparse

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from harness import machine_header, peak_mb, timed, write_results  # noqa: E402

import gpclass as gpc  # noqa: E402

LOG_L, LOG_SF = 2.35, 2.6  # GPML section 3.5.3's maximum of log q
SOFTMAX = gpc.likelihoods.Softmax(10)


def kernel(log_l=LOG_L, log_sf=LOG_SF):
    return gpc.kernels.SquaredExponential(np.float64(np.exp(2.0 * log_sf)), np.float64(np.exp(log_l)))


def scores(post, X_test, y_test, y_train, samples, batch=500):
    """Test error and information (bits) of Monte Carlo predictions, batch by batch."""
    key = jax.random.key(0)
    p = np.concatenate([
        np.asarray(gpc.predict(post, X_test[s:s + batch], key=jax.random.fold_in(key, s),
                               integrator=gpc.integrators.MonteCarlo(samples)))
        for s in range(0, len(X_test), batch)
    ])
    return float(gpc.metrics.error_rate(y_test, p)), float(gpc.metrics.information_bits(y_test, p, y_train))


def report(label, post, first, second, X_test, y_test, y_train, args, **extra):
    error, bits = scores(post, X_test, y_test, y_train, args.mc_samples)
    row = dict(log_marginal=float(post.log_marginal), newton_steps=int(post.info.num_steps),
               status=gpc.Status(int(post.info.status)).name, error=error, information_bits=bits,
               first_s=first, second_s=second, max_rss_mb=peak_mb(), **extra)
    print(f"{label:28s} log q {row['log_marginal']:10.2f}  {row['newton_steps']:2d} Newton steps {row['status']:9s} "
          f"test error {100 * error:5.2f} %  information {bits:.3f} bits  {first:7.2f} s with compilation, "
          f"{second:7.2f} s without  peak RSS {row['max_rss_mb']:.0f} MB", flush=True)
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--m", type=int, nargs="+", default=[100, 200])
    parser.add_argument("--n-dense", type=int, default=4649)
    parser.add_argument("--mc-samples", type=int, default=2000)
    parser.add_argument("--fit", action="store_true", help="ML-II fit of (l, sigma_f) with Z fixed, smallest m")
    parser.add_argument("--fit-steps", type=int, default=30)
    parser.add_argument("--out", default="usps10_sparse")
    args = parser.parse_args()
    info = machine_header("USPS 10 classes: sparse softmax Laplace against dense", args)

    X, y = gpc.datasets.load("usps10")
    order = np.random.default_rng(0).permutation(len(y))
    train, test = order[:5500], order[5500:]
    X_train, y_train, X_test, y_test = X[train], y[train], X[test], y[test]
    results = {}
    for m in args.m:
        sparse = gpc.Sparse.from_data(kernel(), X_train, m, key=jax.random.key(0), fit_inducing=False)
        call = lambda: gpc.infer(gpc.Laplace(), sparse, SOFTMAX, X_train, y_train, throw=False)  # noqa: E731
        post, first = timed(call)
        second = timed(call)[1]
        results[f"sparse_m{m}"] = report(f"FITC n = 5500, m = {m}", post, first, second, X_test, y_test, y_train,
                                         args, n=5500, m=m)
        if args.fit and m == min(args.m):
            fit_call = lambda: gpc.fit(gpc.Laplace(), sparse, SOFTMAX, X_train, y_train,  # noqa: E731
                                       max_steps=args.fit_steps, throw=False)
            fitted, seconds = timed(fit_call)
            k = fitted.kernel.kernel
            log_l, log_sf = float(jnp.log(k.lengthscale)), float(0.5 * jnp.log(k.variance))
            print(f"  ML-II fit (Z fixed): {int(fitted.num_steps)} L-BFGS steps, "
                  f"{gpc.Status(int(fitted.status)).name}, (log l, log sf) = ({log_l:.3f}, {log_sf:.3f}), "
                  f"{seconds:.1f} s with compilation", flush=True)
            results[f"sparse_m{m}_fit"] = report(
                f"FITC m = {m}, fitted", fitted.posterior, seconds, float("nan"), X_test, y_test, y_train, args,
                n=5500, m=m, log_l=log_l, log_sf=log_sf, lbfgs_steps=int(fitted.num_steps),
                fit_status=gpc.Status(int(fitted.status)).name)
    n = args.n_dense
    call = lambda: gpc.infer(gpc.Laplace(), kernel(), SOFTMAX, X_train[:n], y_train[:n], throw=False)  # noqa: E731
    post, first = timed(call)
    second = timed(call)[1]
    results["dense"] = report(f"dense n = {n}", post, first, second, X_test, y_test, y_train[:n], args, n=n)
    write_results(args.out, info, results)


if __name__ == "__main__":
    main()
