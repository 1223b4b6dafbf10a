"""EP with and without Anderson acceleration on hard problems: does it converge wherever the plain sweeps do?

    python benchmarks/ep_anderson_grid.py                 # Wisconsin, 120 cases, 4 x 3 grid, 4 likelihoods

The first ``--n`` cases of Wisconsin (standardised; its repeated rows kept),
an SE kernel on a grid of signal variances (1e-3 to 1e6) and length scales
(0.01 to 100), four likelihoods (probit, logistic, the step function with
10 % label noise, probit with 30 % label noise) and both schedules.  For each
problem ``gpc.EP()`` (Anderson, the default) and ``gpc.EP(anderson=0)`` (plain
sweeps) run from zero sites with ``throw=False``.  Reported per likelihood and
schedule: how many problems converged with each, the total sweeps, and every
problem that Anderson did not converge, where the statuses differ or where
both converged to log Z more than 1e-7 apart.
"""

import argparse
import itertools

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from harness import machine_header, write_results  # noqa: E402

import gpclass as gpc  # noqa: E402

LIKELIHOODS = {
    "probit": gpc.likelihoods.Probit(),
    "logistic": gpc.likelihoods.Logistic(),
    "step + 10 % label noise": gpc.likelihoods.LabelNoise(gpc.likelihoods.Heaviside(), 0.1),
    "probit + 30 % label noise": gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), 0.3),
}
VARIANCES = [1e-3, 1.0, 1e3, 1e6]
LENGTHSCALES = [0.01, 1.0, 100.0]


def program(method, likelihood, X, y):
    @gpc.jit
    def run(log_variance, log_lengthscale):
        kernel = gpc.kernels.SquaredExponential(jnp.exp(log_variance), jnp.exp(log_lengthscale))
        post = gpc.infer(method, kernel, likelihood, X, y, throw=False)
        return post.log_marginal, post.info.status, post.info.num_steps

    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=120)
    parser.add_argument("--out", default="ep_anderson_grid")
    args = parser.parse_args()
    info = machine_header("EP with and without Anderson acceleration on hard problems", args)
    X, y = gpc.datasets.load("wisconsin")
    X, y = gpc.datasets.standardize(X)[: args.n], y[: args.n]
    results = {}
    for (name, likelihood), schedule in itertools.product(LIKELIHOODS.items(), ["sequential", "parallel"]):
        runs = {label: program(gpc.EP(schedule=schedule, anderson=m), likelihood, X, y)
                for label, m in [("anderson", 3), ("plain", 0)]}
        row = dict(converged={"anderson": 0, "plain": 0}, sweeps={"anderson": 0, "plain": 0}, differences=[])
        for variance, lengthscale in itertools.product(VARIANCES, LENGTHSCALES):
            out = {label: jax.device_get(f(np.log(variance), np.log(lengthscale))) for label, f in runs.items()}
            for label, (_, status, sweeps) in out.items():
                row["converged"][label] += int(status) == gpc.Status.CONVERGED
                row["sweeps"][label] += int(sweeps)
            (za, sa, na), (zp, sp, np_) = out["anderson"], out["plain"]
            differ = int(sa) != int(sp) or (int(sa) == gpc.Status.CONVERGED and abs(za - zp) > 1e-7 * (1 + abs(zp)))
            if differ or int(sa) != gpc.Status.CONVERGED:
                row["differences"].append(dict(
                    variance=variance, lengthscale=lengthscale,
                    status=[gpc.Status(int(sa)).name, gpc.Status(int(sp)).name],
                    log_z=[float(za), float(zp)], sweeps=[int(na), int(np_)]))
        problems = len(VARIANCES) * len(LENGTHSCALES)
        print(f"{name:26s} {schedule:10s} converged: Anderson {row['converged']['anderson']}/{problems}, plain "
              f"{row['converged']['plain']}/{problems}; sweeps {row['sweeps']['anderson']} against "
              f"{row['sweeps']['plain']}", flush=True)
        for d in row["differences"]:
            print(f"    at sigma_f^2 = {d['variance']:g}, l = {d['lengthscale']:g}: status {d['status']}, "
                  f"log Z {d['log_z']}, sweeps {d['sweeps']}")
        results[f"{name}, {schedule}"] = row
    write_results(args.out, info, results)


if __name__ == "__main__":
    main()
