"""Is the Laplace evidence right where Laplace ML-II ends on Pyrimidines?  Laplace, EP and AIS log Z at both optima.

    python benchmarks/chu_ghahramani_laplace_check.py                      # splits 1-3 (5 bins), 1-2 (10 bins)
    python benchmarks/chu_ghahramani_laplace_check.py --cases 1:5 7:10     # split:bins pairs

For each case (partition, number of bins) of Chu & Ghahramani's Pyrimidines benchmark, fit the ordinal GP by
Laplace ML-II and by EP ML-II exactly as ``chu_ghahramani_ordinal.py`` does (same start, ARD Gaussian kernel
with unit variance, 200 L-BFGS steps), then evaluate at each of the two fitted hyperparameter settings
the Laplace approximation, the EP approximation and an annealed-importance-sampling estimate
(``gpc.AIS``, Kuss & Rasmussen's settings: 8000 temperatures, 3 runs, tau = (t/T)^4) of log Z, and
print, at the Laplace point, the training cases' margins to the nearer cutpoint in units of sigma and
the curvature W of -log p(y|f) at the Laplace mode.  A Laplace evidence far above EP and AIS at its own
optimum, and close to them at EP's, says that Laplace ML-II maximised an error of the approximation, not
the evidence (benchmarks/README.md, section ``chu_ghahramani_ordinal.py``).
"""

import argparse
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import equinox as eqx  # noqa: E402
import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from chu_ghahramani_ordinal import NOISE0, start_cutpoints  # noqa: E402
from harness import machine_header, timed  # noqa: E402

import gpclass as gpc  # noqa: E402


def check(split, K, max_steps, key):
    X, _ = gpc.datasets.load("pyrimidines")
    labels, splits = gpc.datasets.ordinal_splits("pyrimidines", K)
    train, _ = splits[split - 1]
    X_train, _ = gpc.datasets.standardize(X[train], X[train])
    y_train = labels[train]
    d = X.shape[1]
    kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=np.full(d, np.sqrt(d)))
    likelihood = gpc.likelihoods.Ordinal(K, cutpoints=start_cutpoints(y_train, K), noise=NOISE0)
    trainable = eqx.tree_at(lambda t: t[0].variance, jax.tree.map(lambda _: True, (kernel, likelihood)), False)
    fits = {name: gpc.fit(method, kernel, likelihood, X_train, y_train, trainable=trainable, max_steps=max_steps,
                          throw=False)
            for name, method in (("Laplace", gpc.Laplace()), ("EP", gpc.EP()))}
    for at, fit in fits.items():
        values = []
        for name, method in (("Laplace", gpc.Laplace()), ("EP", gpc.EP()), ("AIS", gpc.AIS())):
            post, seconds = timed(lambda: gpc.infer(method, fit.kernel, fit.likelihood, X_train, y_train,
                                                    throw=False, key=key))
            se = getattr(post, "log_marginal_se", None)
            values.append(f"{name} {float(post.log_marginal):9.2f}" + (f" (se {float(se):.2f})" if se is not None
                                                                        else "") + f" [{seconds:.1f} s]")
        print(f"split {split:2d}, {K:2d} bins, at the {at:7s} optimum (sigma {float(fit.likelihood.noise):.3g}): "
              + "   ".join(values), flush=True)
        if at == "Laplace":
            post = gpc.infer(gpc.Laplace(), fit.kernel, fit.likelihood, X_train, y_train, throw=False)
            f = np.asarray(post.mean)
            b = np.concatenate([[-np.inf], np.asarray(fit.likelihood.cutpoints), [np.inf]])
            sigma = float(fit.likelihood.noise)
            margin = np.minimum(f - b[y_train], b[y_train + 1] - f) / sigma
            W = np.asarray(post.sqrt_w) ** 2
            q = [0, 0.1, 0.5, 0.9, 1]
            print(f"    at the Laplace mode: margins / sigma, quantiles 0/10/50/90/100 %: "
                  f"{np.round(np.quantile(margin, q), 2).tolist()}, {np.mean(margin > 3):.0%} of the cases beyond "
                  f"3 sigma; W quantiles {np.quantile(W, q).round(3).tolist()} (1/sigma^2 = {1 / sigma**2:.0f})",
                  flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["1:5", "2:5", "3:5", "1:10", "2:10"],
                        help="split:bins pairs (default 1:5 2:5 3:5 1:10 2:10)")
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0, help="PRNG seed of AIS")
    args = parser.parse_args(argv)
    machine_header("Chu & Ghahramani 2005, Pyrimidines: Laplace, EP and AIS log Z at the Laplace and EP ML-II "
                   "optima, float64", args)
    for case in args.cases:
        split, K = (int(v) for v in case.split(":"))
        check(split, K, args.max_steps, jax.random.key(args.seed))


if __name__ == "__main__":
    main()
