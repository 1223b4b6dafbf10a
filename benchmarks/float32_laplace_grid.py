"""When is float32 Laplace safe?  Status and accuracy of float32 against float64 on a grid of real problems.

Five bundled data sets (at most 300 training cases, the rest held out), raw and standardised, an SE kernel
at signal variance e^{0, 3, 6, 10} and length scale e^{-1, 1, 3, 6}, logistic likelihood: 160 problems.
Each is solved by binary Laplace in float64 and in float32 (x64 off, as a GPU user runs); the table gives
the float32 status (CONVERGED or IMPRECISE, the residual check of the mode, or MAX_STEPS), the mode's
residual in the working precision (``_newton.mode_residual``: the error of the predictive mean at the
training inputs relative to 1 + max |f|) and the largest difference of the test-point latent means from
float64's.  A CONVERGED float32 result should be close to float64; an IMPRECISE one is where it is not.

    python benchmarks/float32_laplace_grid.py            # about 10 minutes on 2 cores
"""

import argparse
import itertools

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
from harness import machine_header, write_results

import gpclass as gpc
from gpclass._inference._newton import mode_residual

DATASETS = ("ionosphere", "pima", "crabs", "wisconsin", "usps35")
LOG_VARIANCES = (0, 3, 6, 10)
LOG_LENGTHSCALES = (-1, 1, 3, 6)


def solve(X_train, y_train, X_test, log_variance, log_lengthscale, dtype):
    """(status name, Newton steps, residual in the working precision, test-point latent means as float64)."""
    kernel = gpc.kernels.SquaredExponential(dtype(np.exp(log_variance)), dtype(np.exp(log_lengthscale)))
    X_train, X_test = X_train.astype(dtype), X_test.astype(dtype)
    post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X_train, y_train, throw=False)
    K = kernel.gram(jnp.asarray(X_train))
    residual = float(mode_residual(post.mean, K @ post.alpha, jnp.abs(K) @ jnp.abs(post.alpha)))
    mean, _ = gpc.predict_latent(post, X_test)
    return gpc.Status(int(post.info.status)).name, int(post.info.num_steps), residual, np.asarray(mean, np.float64)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--name", default="float32_laplace_grid")
    args = parser.parse_args()
    info = machine_header("float32 Laplace against float64: status, residual, test-point means", args)
    rows = []
    for name in DATASETS:
        X, y = gpc.datasets.load(name)
        X_train, X_test, y_train, _ = gpc.datasets.train_test_split(X, y, min(300, len(y) - 50), seed=0)
        for standardised in (True, False):
            A, B = gpc.datasets.standardize(X_train, X_test) if standardised else (X_train, X_test)
            for lv, ll in itertools.product(LOG_VARIANCES, LOG_LENGTHSCALES):
                status64, steps64, residual64, mean64 = solve(A, y_train, B, lv, ll, np.float64)
                with jax.enable_x64(False):
                    status32, steps32, residual32, mean32 = solve(A, y_train, B, lv, ll, np.float32)
                row = dict(data=name, standardised=standardised, log_variance=lv, log_lengthscale=ll,
                           status64=status64, steps64=steps64, residual64=residual64,
                           status32=status32, steps32=steps32, residual32=residual32,
                           test_mean_difference=float(np.max(np.abs(mean32 - mean64))),
                           test_mean_scale=float(1 + np.max(np.abs(mean64))))
                rows.append(row)
                print(f"{name:10s} std={standardised:d} log v={lv:2d} log l={ll:2d}  float64 {status64:9s} "
                      f"r={residual64:.1e}  float32 {status32:9s} ({steps32:3d} steps) r={residual32:.1e}  "
                      f"test means off by {row['test_mean_difference']:.1e}", flush=True)
    summary = {}
    for precision in ("64", "32"):
        for status in sorted({r["status" + precision] for r in rows}):
            chosen = [r for r in rows if r["status" + precision] == status]
            entry = dict(count=len(chosen), residual_max=max(r["residual" + precision] for r in chosen))
            if precision == "32":  # float32's test-point means against float64's
                differences = [r["test_mean_difference"] / r["test_mean_scale"] for r in chosen]
                entry.update(relative_test_mean_difference_min=min(differences),
                             relative_test_mean_difference_max=max(differences))
            summary[f"float{precision} {status}"] = entry
    print("\nstatus: count, largest residual, float32's test-point means off by (relative to 1 + max |mean|)")
    for key, s in summary.items():
        spread = (f"{s['relative_test_mean_difference_min']:.1e}..{s['relative_test_mean_difference_max']:.1e}"
                  if "relative_test_mean_difference_min" in s else "")
        print(f"  {key:20s} {s['count']:4d}  {s['residual_max']:.1e}  {spread}")
    write_results(args.name, info, dict(rows=rows, summary=summary))


if __name__ == "__main__":
    main()
