"""Sparse priors (FITC, VFE) on Breiman's twonorm and ringnorm, and how their cost grows with n and m.

    python benchmarks/sparse.py                                  # ML-II fits at n = 10^4, m = 100
    python benchmarks/sparse.py --sizes 10000 100000 1000000 --fit-max-n 10000
    python benchmarks/sparse.py --scaling                        # one log q + gradient against n and m, log-log plot

Data: ``svgp.py``'s generators (20 inputs; Bayes errors 2.28 % and about 1.3 %),
test sets of 10,000 cases.  Methods, each with m inducing inputs chosen by
k-means++ seeding (``gpc.Sparse.from_data``, key 0), SE kernel started at
sigma_f = 1, l = sqrt(20):

* FITC-EP (probit), VFE-KL (logistic, Titsias' bound), FITC-Laplace (logistic).

Up to ``--fit-max-n`` cases, ``gpc.fit`` fits the kernel (and with
``--fit-inducing`` the inducing inputs; L-BFGS, ``--fit-steps`` steps at most); beyond it the hyperparameters and Z
fitted at the largest fitted n are reused and only ``gpc.infer`` runs (its time
is the fit's cost per objective evaluation).  Reported: test error, the
Bayes error, wall time (a fit's including its compilation, an inference's
also of a second, identical call), the number of optimiser (or inner) steps
and the status, and the process's peak resident memory.

``--scaling``: the run time of one value and gradient of log q (compiled
once per shape, median of 3) for n in ``--scaling-n`` and m in ``--scaling-m``,
against one Cholesky factorisation of n x n where n <= 8000 and the dense
Laplace method where n <= 4000; a table and a log-log plot
(``benchmarks/results/sparse_scaling.png``, matplotlib).
"""

import argparse

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from harness import machine_header, median_time, peak_mb, timed, write_results  # noqa: E402
from svgp import D, bayes_error, ringnorm, twonorm  # noqa: E402

import gpclass as gpc  # noqa: E402

METHODS = {
    "FITC-EP": (gpc.EP(), gpc.likelihoods.Probit(), "fitc"),
    "VFE-KL": (gpc.KL(), gpc.likelihoods.Logistic(), "vfe"),
    "FITC-Laplace": (gpc.Laplace(), gpc.likelihoods.Logistic(), "fitc"),
}


def accuracy(args, info):
    generators = dict(twonorm=twonorm, ringnorm=ringnorm)
    results = {}
    for name in args.datasets:
        rng = np.random.default_rng(0)
        X_test, y_test = generators[name](10_000, rng)
        bayes = bayes_error(name, X_test, y_test)
        fitted = {}
        for n in args.sizes:
            X, y = generators[name](n, rng)
            for label in args.methods:
                method, likelihood, approximation = METHODS[label]
                if n <= args.fit_max_n:
                    kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(D)))
                    sparse = gpc.Sparse.from_data(kernel, X, args.m, key=jax.random.key(0),
                                                  approximation=approximation, fit_inducing=args.fit_inducing)

                    def call():
                        return gpc.fit(method, sparse, likelihood, X, y, max_steps=args.fit_steps, throw=False)
                else:
                    sparse = fitted[label]

                    def call():
                        return gpc.infer(method, sparse, likelihood, X, y, throw=False)
                out, first = timed(call)
                # A fit is timed once (compilation, 1-2 s, included); an inference twice, the second without it.
                second = timed(call)[1] if n > args.fit_max_n and not args.infer_once else None
                posterior = out.posterior if n <= args.fit_max_n else out
                if n <= args.fit_max_n:
                    fitted[label] = out.kernel
                    steps, status = int(out.num_steps), gpc.Status(int(out.status)).name
                else:
                    steps, status = int(out.info.num_steps), gpc.Status(int(out.info.status)).name
                error = float(gpc.metrics.error_rate(y_test, gpc.predict(posterior, X_test)))
                kernel = (out.kernel if n <= args.fit_max_n else sparse).kernel
                row = dict(dataset=name, n=n, m=args.m, method=label, fitted=n <= args.fit_max_n, error=error,
                           variance=float(kernel.variance), lengthscale=float(kernel.lengthscale),
                           bayes_error=bayes, first_s=first, second_s=second, steps=steps, status=status,
                           max_rss_mb=peak_mb())
                results[f"{name}_{n}_{label}"] = row
                what = (f"fit ({steps} L-BFGS steps, {status})" if row["fitted"]
                        else f"infer ({steps} inner steps, {status})")
                what += f" sigma_f^2 {row['variance']:.3g} l {row['lengthscale']:.3g}"
                when = f"{first:.2f} s with compilation" + ("" if second is None else f", {second:.2f} s without")
                print(f"{name} n = {n:8d} {label:13s} test error {100 * error:5.2f} % (Bayes {100 * bayes:.2f} %)  "
                      f"{what}: {when}  peak RSS {row['max_rss_mb']:.0f} MB", flush=True)
    return results


def scaling(args):
    rows = []
    rng = np.random.default_rng(0)
    X_all, y_all = twonorm(max(args.scaling_n), rng)
    theta = jnp.array([0.0, np.log(np.sqrt(D))])
    for label in args.methods:
        method, likelihood, approximation = METHODS[label]

        def log_q(theta, X, y, Z):
            kernel = gpc.kernels.SquaredExponential(jnp.exp(2.0 * theta[0]), jnp.exp(theta[1]))
            return gpc.infer(method, gpc.Sparse(kernel, Z, approximation=approximation), likelihood, X, y,
                             throw=False).log_marginal

        fn = gpc.jit(jax.value_and_grad(log_q, argnums=(0, 3)))
        for m in args.scaling_m:
            for n in args.scaling_n:
                X, y, Z = X_all[:n], y_all[:n], X_all[:m] + 0.01
                _, compile_s = timed(lambda: fn(theta, X, y, Z))
                run, _ = median_time(lambda: jax.block_until_ready(fn(theta, X, y, Z)), 3)
                rows.append(dict(method=label, n=n, m=m, seconds=run, compile_s=compile_s))
                print(f"{label:13s} n = {n:7d} m = {m:4d}: {1e3 * run:9.1f} ms", flush=True)
    for n in args.scaling_n:
        if n <= 8000:
            A = np.asarray(twonorm(n, rng)[0] @ twonorm(n, rng)[0].T / D + np.eye(n))
            chol = jax.jit(jnp.linalg.cholesky)
            jax.block_until_ready(chol(A))
            run, _ = median_time(lambda: jax.block_until_ready(chol(A)), 3)
            rows.append(dict(method="one Cholesky (n x n)", n=n, m=None, seconds=run))
            print(f"one n x n Cholesky, n = {n}: {1e3 * run:.1f} ms", flush=True)
        if n <= 4000:
            def dense(theta, X, y):
                kernel = gpc.kernels.SquaredExponential(jnp.exp(2.0 * theta[0]), jnp.exp(theta[1]))
                return gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y).log_marginal
            fn = gpc.jit(jax.value_and_grad(dense))
            X, y = X_all[:n], y_all[:n]
            jax.block_until_ready(fn(theta, X, y))
            run, _ = median_time(lambda: jax.block_until_ready(fn(theta, X, y)), 3)
            rows.append(dict(method="dense Laplace", n=n, m=None, seconds=run))
            print(f"dense Laplace log q + gradient, n = {n}: {1e3 * run:.1f} ms", flush=True)
    plot(rows, args)
    return rows


def plot(rows, args):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 5))
    for key in sorted({(r["method"], r["m"]) for r in rows}, key=str):
        pts = sorted((r["n"], r["seconds"]) for r in rows if (r["method"], r["m"]) == key)
        label = key[0] if key[1] is None else f"{key[0]}, m = {key[1]}"
        style = "k--" if key[1] is None else "o-"
        ax.loglog(*zip(*pts), style if key[0] != "dense Laplace" else "k:", marker="o", label=label)
    ax.set_xlabel("n (training cases)")
    ax.set_ylabel("seconds per log q + gradient")
    ax.set_title("Sparse priors: cost against n and m (2-core CPU, float64)")
    ax.legend(fontsize=7)
    ax.grid(True, which="both", alpha=0.3)
    fig.tight_layout()
    fig.savefig(f"results/{args.out}_scaling.png", dpi=110)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000])
    parser.add_argument("--datasets", nargs="+", default=["twonorm", "ringnorm"])
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--m", type=int, default=100)
    parser.add_argument("--fit-steps", type=int, default=30)
    parser.add_argument("--fit-max-n", type=int, default=10_000)
    parser.add_argument("--fit-inducing", action="store_true", help="fit Z too (m d more parameters)")
    parser.add_argument("--infer-once", action="store_true", help="time an inference once (with compilation)")
    parser.add_argument("--scaling", action="store_true")
    parser.add_argument("--scaling-n", type=int, nargs="+", default=[1000, 4000, 16000, 64000, 256000])
    parser.add_argument("--scaling-m", type=int, nargs="+", default=[50, 100, 200])
    parser.add_argument("--out", default="sparse")
    args = parser.parse_args()
    info = machine_header("Sparse priors: " + ("cost against n and m" if args.scaling else "twonorm and ringnorm"),
                          args)
    if args.scaling:
        return write_results(f"{args.out}_scaling", info, scaling(args))
    write_results(f"{args.out}_twonorm_ringnorm", info, accuracy(args, info))


if __name__ == "__main__":
    main()
