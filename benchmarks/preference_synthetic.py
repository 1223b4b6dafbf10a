"""Preference learning on synthetic comparisons with a known utility: gpclass (EP, Laplace) against BoTorch's
PairwiseGP and against gpclass's MCMC (issue 35, item 4).

    python benchmarks/preference_synthetic.py 2>&1 | tee benchmarks/results/preference_synthetic.log
    python benchmarks/preference_synthetic.py --quick        # smoke run: 2 problems of the small size

The problems.  Items x in [0, 1]^2 drawn uniformly; the true utility u(x) = 2 sin(2 pi x_1) cos(pi x_2) + 2 x_2 - 1
(range about [-3, 3]); each comparison of two random distinct items (u, v) is won by u if
u(x_u) + e_u > u(x_v) + e_v, e ~ N(0, 0.3^2) (Chu & Ghahramani's model with sigma = 0.3: the truth is in the model
class up to the kernel).  Sizes (items, comparisons): (50, 100) and (100, 300); ``--problems`` random problems each.
Evaluation: 200 new items (Spearman rank correlation of the posterior mean utility with u) and 500 pairs of new
items (accuracy of p(a > b) > 1/2 against the noise-free u(a) > u(b)).

The models.  BoTorch's published setting: ``PairwiseGP(X, comparisons)`` with its defaults (a ScaleKernel'd RBF with
one length scale per input and its priors, sigma = 1 implicitly; Laplace's approximation), fitted by
``fit_gpytorch_mll(PairwiseLaplaceMarginalLogLikelihood)``, posterior mean at the new items, p(a > b) from
the joint posterior of (f(a), f(b)): Phi((m_a - m_b) / sqrt(2 + v_a + v_b - 2 c_ab)).  gpclass: the same model
without hyperpriors, ``SquaredExponential(1, [0.2, 0.2])`` and ``Preference(noise=1)`` held fixed, ML-II by
``gpc.fit`` (L-BFGS) with EP and with Laplace.  The gold standard: ``gpc.MCMC`` (elliptical slice sampling, 4
chains of 2000 after 500 warm-up) at EP's fitted hyperparameters, against which EP's and Laplace's p(a > b) at the
same hyperparameters are compared (mean |difference| over the 500 pairs).

Times: each problem's fit + prediction, gpclass's first call (compile + run) apart from the others (median);
BoTorch's median in the same process (torch, CPU).  One BLAS thread for numpy/jaxlib (OPENBLAS_NUM_THREADS=1)
and ``torch.set_num_threads(1)``, so neither library gets the two cores the other lacks.
"""

import argparse
import os
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import numpy as np  # noqa: E402
from harness import machine_header, write_results  # noqa: E402
from scipy import special, stats  # noqa: E402

import gpclass as gpc  # noqa: E402

SIZES = ((50, 100), (100, 300))
NOISE = 0.3
MCMC = gpc.MCMC(num_samples=2000, num_warmup=500, num_chains=4)


def utility(X):
    return 2.0 * np.sin(2 * np.pi * X[:, 0]) * np.cos(np.pi * X[:, 1]) + 2.0 * X[:, 1] - 1.0


def problem(n, m, seed):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 2))
    C = np.stack([rng.choice(n, size=2, replace=False) for _ in range(m)])
    noisy_u = utility(X[C[:, 0]]) + NOISE * rng.normal(size=m)
    noisy_v = utility(X[C[:, 1]]) + NOISE * rng.normal(size=m)
    C = np.where((noisy_u > noisy_v)[:, None], C, C[:, ::-1])
    X_new = rng.uniform(size=(200, 2))
    A, B = rng.uniform(size=(500, 2)), rng.uniform(size=(500, 2))
    return X, C.astype(np.int32), X_new, A, B


def scores(mean_new, p, X_new, A, B):
    return dict(spearman=float(stats.spearmanr(mean_new, utility(X_new))[0]),
                accuracy=float(np.mean((p > 0.5) == (utility(A) > utility(B)))))


KERNEL = gpc.kernels.SquaredExponential(1.0, [0.2, 0.2])
LIK = gpc.likelihoods.Preference(1.0)
TRAINABLE = (jax.tree.map(lambda _: True, KERNEL), jax.tree.map(lambda _: False, LIK))


@gpc.filter_jit
def gpclass_fit(method, X, C, X_new, A, B):
    result = gpc.fit(method, KERNEL, LIK, X, C, trainable=TRAINABLE, throw=False)
    return result, result.posterior.latent(X_new)[0], result.posterior.preference(A, B)


@gpc.filter_jit
def at_hyperparameters(method, kernel, X, C, X_new, A, B, key):
    posterior = gpc.infer(method, kernel, LIK, X, C, key=key, throw=False)
    return posterior.latent(X_new)[0], posterior.preference(A, B)


def botorch_fit(X, C, X_new, A, B):
    import torch
    from botorch.fit import fit_gpytorch_mll
    from botorch.models.pairwise_gp import PairwiseGP, PairwiseLaplaceMarginalLogLikelihood

    Xt, Ct = torch.tensor(X), torch.tensor(C.astype(np.int64))
    model = PairwiseGP(Xt, Ct)
    mll = PairwiseLaplaceMarginalLogLikelihood(model.likelihood, model)
    fit_gpytorch_mll(mll)
    model.eval()
    with torch.no_grad():
        mean_new = model.posterior(torch.tensor(X_new)).mean.squeeze(-1).numpy()
        joint = model.posterior(torch.stack([torch.tensor(A), torch.tensor(B)], dim=1))  # (500, 2) batches
        mu, cov = joint.mean.squeeze(-1).numpy(), joint.covariance_matrix.numpy()
    var_d = cov[:, 0, 0] + cov[:, 1, 1] - 2 * cov[:, 0, 1]
    p = special.ndtr((mu[:, 0] - mu[:, 1]) / np.sqrt(2.0 + var_d))
    outputscale = model.covar_module.outputscale.detach().item()
    lengthscale = model.covar_module.base_kernel.lengthscale.detach().numpy().ravel().tolist()
    return mean_new, p, dict(outputscale=outputscale, lengthscale=lengthscale)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=10)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--out", default="preference_synthetic")
    args = parser.parse_args()
    info = machine_header("Preference learning: gpclass EP / Laplace vs BoTorch PairwiseGP vs MCMC", args)
    try:
        import botorch
        import torch

        torch.set_num_threads(1)
        info["botorch"], info["torch"] = botorch.__version__, torch.__version__
        print(f"botorch {botorch.__version__}, torch {torch.__version__}")
    except ImportError:
        botorch = None
        print("botorch not installed: its column is skipped")
    sizes = SIZES[:1] if args.quick else SIZES
    problems = 2 if args.quick else args.problems
    rows = []
    for n, m in sizes:
        per = {"ep": [], "laplace": [], "botorch": []}
        for seed in range(problems):
            X, C, X_new, A, B = problem(n, m, seed)
            row = dict(n=n, m=m, seed=seed)
            for name, method in [("ep", gpc.EP()), ("laplace", gpc.Laplace())]:
                start = time.perf_counter()
                result, mean_new, p = jax.block_until_ready(gpclass_fit(method, X, C, X_new, A, B))
                row[name] = dict(scores(np.asarray(mean_new), np.asarray(p), X_new, A, B),
                                 seconds=time.perf_counter() - start, status=int(result.status),
                                 variance=float(result.kernel.variance),
                                 lengthscale=np.asarray(result.kernel.lengthscale).tolist())
                if name == "ep":
                    fitted = result.kernel
            key = jax.random.key(seed)
            mean_mcmc, p_mcmc = map(np.asarray, at_hyperparameters(MCMC, fitted, X, C, X_new, A, B, key))
            for name, method in [("ep", gpc.EP()), ("laplace", gpc.Laplace())]:
                p_same = np.asarray(at_hyperparameters(method, fitted, X, C, X_new, A, B, None)[1])
                row[name]["vs_mcmc"] = float(np.mean(np.abs(p_same - p_mcmc)))
            row["mcmc"] = scores(mean_mcmc, p_mcmc, X_new, A, B)
            if botorch is not None:
                start = time.perf_counter()
                mean_new, p, fitted_bt = botorch_fit(X, C, X_new, A, B)
                row["botorch"] = dict(scores(mean_new, p, X_new, A, B), seconds=time.perf_counter() - start,
                                      **fitted_bt)
            rows.append(row)
            line = "  ".join(f"{k} rho {row[k]['spearman']:.3f} acc {row[k]['accuracy']:.3f} {row[k]['seconds']:.2f}s"
                             for k in ("ep", "laplace", "botorch") if k in row)
            print(f"n={n} m={m} seed={seed}: {line}  |p-p_mcmc| EP {row['ep']['vs_mcmc']:.4f} "
                  f"Laplace {row['laplace']['vs_mcmc']:.4f}  MCMC acc {row['mcmc']['accuracy']:.3f}  "
                  f"status EP {row['ep']['status']} Laplace {row['laplace']['status']}", flush=True)
            for k in per:
                if k in row:
                    per[k].append(row[k])
        print(f"--- n={n} m={m}, {problems} problems (mean +- sd; time: first call | median of the rest)")
        for k, results in per.items():
            if not results:
                continue
            rho = np.array([r["spearman"] for r in results])
            acc = np.array([r["accuracy"] for r in results])
            t = np.array([r["seconds"] for r in results])
            extra = (f"  |p - p_mcmc| {np.mean([r['vs_mcmc'] for r in results]):.4f}" if "vs_mcmc" in results[0]
                     else "")
            print(f"{k:8s} spearman {rho.mean():.3f} +- {rho.std(ddof=1):.3f}  accuracy {acc.mean():.3f} +- "
                  f"{acc.std(ddof=1):.3f}  time {t[0]:.2f} s | {np.median(t[1:]):.3f} s{extra}", flush=True)
        write_results(args.out, info, rows)


if __name__ == "__main__":
    main()
