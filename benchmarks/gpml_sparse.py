"""Sparse (inducing-point) inference: gpclass against the GPML toolbox's apxSparse run by GNU Octave, same data.

    python benchmarks/gpml_sparse.py --gpml /path/to/gpml-v4.2                       # n = 300, m = 30
    python benchmarks/gpml_sparse.py --gpml /path/to/gpml-v4.2 --n 4000 --m 200 --repeats 3

Needs GNU Octave and a copy of the GPML toolbox v4.2 (neither is part of
gpclass).  For EP at a tight tolerance, give a copy whose ``inf/infEP.m`` has
``tol = 1e-12; max_sweep = 200`` (GPML's default stops when nlZ changes by
less than 1e-4 between sweeps).

Setup: the first n rows of usps35 after a fixed permutation (pixels in
[-1, 1]), labels +-1, squared-exponential kernel (``covSEiso``) at log l = 2.85,
log sigma_f = 2.35, and m inducing inputs: the first m of the n rows, moved by
0.05 (so that Z is not a subset of X).  Compared, for each approximation:

* Laplace (logistic) with ``apxSparse`` at s = 1 (FITC), s = 0 (VFE) and s = 0.5;
* EP (probit, ``likErf``) with ``apxSparse`` at s = 1 (FITC);

the value log Z, its gradient with respect to (log l, log sigma_f) and to the
inducing inputs (GPML's ``dnlZ.xu``, passed as ``hyp.xu``), and the run time of one
evaluation (value and gradient), median of ``--repeats`` after a warm-up
(GPML timed with tic/toc inside Octave; gpclass compile time apart).  GPML's
jitter on K_uu is 1e-6 trace(K_uu)/m, gpclass's default ``jitter`` the same.
"""

import argparse
import json
import shutil
import subprocess
import tempfile
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from harness import compile_and_time, machine_header, print_times, write_results  # noqa: E402

import gpclass as gpc  # noqa: E402

LOG_L, LOG_SF = 2.85, 2.35
CASES = {  # name: (GPML inference function, GPML likelihood, s, gpclass method, likelihood, approximation)
    "Laplace FITC": ("infLaplace", "likLogistic", 1.0, gpc.Laplace(), gpc.likelihoods.Logistic(), "fitc"),
    "Laplace VFE": ("infLaplace", "likLogistic", 0.0, gpc.Laplace(), gpc.likelihoods.Logistic(), "vfe"),
    "Laplace s=0.5": ("infLaplace", "likLogistic", 0.5, gpc.Laplace(), gpc.likelihoods.Logistic(), 0.5),
    "EP FITC": ("infEP", "likErf", 1.0, gpc.EP(), gpc.likelihoods.Probit(), "fitc"),
}

OCTAVE = r"""
more off;
run(fullfile('{gpml}', 'startup.m'));
x = dlmread('{x}'); y = dlmread('{y}'); xu = dlmread('{xu}');
hyp.cov = [{log_l}; {log_sf}]; hyp.mean = []; hyp.lik = []; hyp.xu = xu;
cov = {{@apxSparse, {{@covSEiso}}, xu}}; opt.s = {s};
times = zeros({repeats}, 1);
for r = 0:{repeats}
  clear {inf};
  t = tic; [post, nlZ, dnlZ] = {inf}(hyp, {{@meanZero}}, cov, {{@{lik}}}, x, y, opt); e = toc(t);
  if r > 0, times(r) = e; end
end
dlmwrite('{dxu}', dnlZ.xu, 'precision', '%.17g');
printf('RESULT {{"nlZ": %.17g, "dnlZ": [%.17g, %.17g], "times": [%s]}}\n', nlZ, dnlZ.cov(1), dnlZ.cov(2), ...
       strjoin(arrayfun(@(v) sprintf('%.6f', v), times', 'UniformOutput', false), ', '));
"""


def run_gpml(args, case, X, y, Z):
    """(log Z, gradient w.r.t. (log l, log sf), gradient w.r.t. Z, seconds per call) from GPML in Octave."""
    inf, lik, s = CASES[case][:3]
    with tempfile.TemporaryDirectory() as tmp:
        paths = {name: Path(tmp) / f"{name}.csv" for name in ("x", "y", "xu", "dxu")}
        for name, value in (("x", X), ("y", y), ("xu", Z)):
            np.savetxt(paths[name], value, delimiter=",", fmt="%.17g")
        script = OCTAVE.format(gpml=Path(args.gpml).resolve(), **{k: v for k, v in paths.items()}, log_l=LOG_L,
                               log_sf=LOG_SF, s=s, inf=inf, lik=lik, repeats=args.repeats)
        out = subprocess.run([args.octave, "--no-gui", "--quiet", "--eval", script], capture_output=True, text=True,
                             check=True).stdout
        d_xu = np.loadtxt(paths["dxu"], delimiter=",")
    record = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[len("RESULT "):])
    return -record["nlZ"], -np.asarray(record["dnlZ"]), -d_xu, np.asarray(record["times"])


def gpclass_function(method, likelihood, approximation):
    def log_z(params, X, y):
        theta, Z = params
        kernel = gpc.kernels.SquaredExponential(jnp.exp(2.0 * theta[1]), jnp.exp(theta[0]))
        post = gpc.infer(method, gpc.Sparse(kernel, Z, approximation=approximation), likelihood, X, y)
        return post.log_marginal, post.info.num_steps

    return gpc.jit(jax.value_and_grad(log_z, has_aux=True))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpml", required=True, help="directory of the GPML toolbox v4.2 (with startup.m)")
    parser.add_argument("--octave", default="octave")
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--m", type=int, default=30)
    parser.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="gpml_sparse")
    args = parser.parse_args()
    if shutil.which(args.octave) is None:
        parser.error(f"{args.octave!r} not found: install GNU Octave (apt-get install --no-install-recommends octave)")
    if not (Path(args.gpml) / "startup.m").exists():
        parser.error(f"{args.gpml} has no startup.m: give the GPML toolbox's directory")
    info = machine_header("Sparse inference: gpclass against GPML's apxSparse in Octave", args)
    X_all, y_all = gpc.datasets.load("usps35")
    perm = np.random.default_rng(0).permutation(len(y_all))
    X, y = np.asarray(X_all[perm[: args.n]], np.float64), np.asarray(y_all[perm[: args.n]], np.float64)
    Z = X[: args.m] + 0.05
    params = (jnp.array([LOG_L, LOG_SF]), jnp.asarray(Z))
    results = {}
    for case in args.cases:
        gpml_log_z, gpml_grad, gpml_dz, gpml_times = run_gpml(args, case, X, y, Z)
        fn = gpclass_function(*CASES[case][3:])
        times = compile_and_time({"gpclass": lambda: fn(params, X, y)}, repeats=args.repeats)
        times["GPML (Octave)"] = dict(compile=None, run=float(np.median(gpml_times)), run_min=float(np.min(gpml_times)))
        (value, steps), (grad, dz) = times["gpclass"]["out"]
        ratio = float(np.median(gpml_times)) / times["gpclass"]["run"]
        dz_diff = float(np.max(np.abs(np.asarray(dz) - gpml_dz)) / np.max(np.abs(gpml_dz)))
        print(f"{case}: n = {args.n}, m = {args.m}")
        print_times(times, reference="GPML (Octave)")
        print(f"  log Z {float(value):.12f} (GPML {gpml_log_z:.12f}, diff {float(value) - gpml_log_z:.1e}), "
              f"grad {np.asarray(grad)} (GPML {gpml_grad}), d/dZ max rel diff {dz_diff:.1e}, {int(steps)} steps, "
              f"GPML / gpclass time {ratio:.1f}x")
        results[case] = dict(
            n=args.n, m=args.m,
            gpml=dict(log_z=gpml_log_z, grad=gpml_grad.tolist(), seconds=gpml_times.tolist()),
            gpclass=dict(log_z=float(value), grad=np.asarray(grad).tolist(), steps=int(steps),
                         compile=times["gpclass"]["compile"], seconds=times["gpclass"]["run"]),
            log_z_diff=float(value) - gpml_log_z, grad_diff=(np.asarray(grad) - gpml_grad).tolist(),
            dz_max_relative_diff=dz_diff, ratio_gpml_over_gpclass=ratio,
        )
    write_results(f"{args.out}_n{args.n}_m{args.m}", info, results)


if __name__ == "__main__":
    main()
