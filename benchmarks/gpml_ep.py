"""EP (probit) log Z and its gradient: gpclass against the GPML toolbox's infEP run by GNU Octave, same data.

    python benchmarks/gpml_ep.py --gpml /path/to/gpml-v4.2                 # n = 600, 3 repeats
    python benchmarks/gpml_ep.py --gpml /path/to/gpml-v4.2 --sizes 300 600 1000 --repeats 5

Needs GNU Octave (Debian: ``apt-get install --no-install-recommends octave``)
and a copy of the GPML toolbox v4.2 (Rasmussen & Nickisch; its ``startup.m``
is run).  Neither is part of gpclass.

Setup, as in ``ep_timing.py``: the first n rows of usps35 (pixels in [-1, 1])
after a fixed permutation, labels +-1, probit likelihood (GPML's ``likErf``),
squared-exponential kernel (``covSEiso``, zero mean) at GPML's USPS region
log l = 2.85, log sigma_f = 2.35.  One evaluation is log Z_EP and its gradient
with respect to (log l, log sigma_f) from zero sites:

* GPML: ``[post, nlZ, dnlZ] = infEP(hyp, {@meanZero}, {@covSEiso}, {@likErf}, x, y)``
  after ``clear infEP`` (infEP otherwise starts from the sites of its previous
  call).  Its sweeps visit the sites in random order and stop when nlZ changes
  by at most 1e-4 between sweeps (2 to 10 sweeps).  Timed with tic/toc inside
  Octave (process start and data loading excluded); the first call is a
  warm-up.
* gpclass: a compiled ``jax.value_and_grad`` of ``gpc.infer(gpc.EP(), ...).log_marginal``,
  at its default tolerance (sites and log Z to 1e-10 relative) and at
  ``tol=1e-4``, compiled by ``gpc.jit``, and at the default tolerance by plain
  ``jax.jit`` as research code calls it; compile time apart.  The default
  schedule for the probit is the parallel one; a fourth row runs GPML's own,
  the sequential schedule (``schedule="sequential"``).

Reported: median seconds per evaluation, ratio GPML / gpclass, and the
differences of log Z and the gradient (GPML's converged to its own 1e-4).
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

OCTAVE = r"""
more off;
run(fullfile('{gpml}', 'startup.m'));
x = dlmread('{x}'); y = dlmread('{y}');
hyp.cov = [{log_l}; {log_sf}]; hyp.mean = []; hyp.lik = [];
times = zeros({repeats}, 1);
for r = 0:{repeats}
  clear infEP;
  t = tic; [post, nlZ, dnlZ] = infEP(hyp, {{@meanZero}}, {{@covSEiso}}, {{@likErf}}, x, y); e = toc(t);
  if r > 0, times(r) = e; end
end
printf('RESULT {{"nlZ": %.15g, "dnlZ": [%.15g, %.15g], "times": [%s]}}\n', nlZ, dnlZ.cov(1), dnlZ.cov(2), ...
       strjoin(arrayfun(@(v) sprintf('%.6f', v), times', 'UniformOutput', false), ', '));
"""


def run_gpml(args, X, y):
    """(log Z, gradient w.r.t. (log l, log sf), seconds per call) from GPML's infEP in Octave."""
    with tempfile.TemporaryDirectory() as tmp:
        np.savetxt(Path(tmp) / "x.csv", X, delimiter=",")
        np.savetxt(Path(tmp) / "y.csv", y, delimiter=",")
        script = OCTAVE.format(gpml=Path(args.gpml).resolve(), x=Path(tmp) / "x.csv", y=Path(tmp) / "y.csv",
                               log_l=LOG_L, log_sf=LOG_SF, repeats=args.repeats)
        out = subprocess.run([args.octave, "--no-gui", "--quiet", "--eval", script], capture_output=True, text=True,
                             check=True).stdout
    record = json.loads(next(line for line in out.splitlines() if line.startswith("RESULT "))[len("RESULT "):])
    return -record["nlZ"], -np.asarray(record["dnlZ"]), np.asarray(record["times"])


def gpclass_function(method, wrapper=gpc.jit):
    def log_z(theta, X, y):
        kernel = gpc.kernels.SquaredExponential(jnp.exp(2.0 * theta[1]), jnp.exp(theta[0]))
        post = gpc.infer(method, kernel, gpc.likelihoods.Probit(), X, y)
        return post.log_marginal, post.info.num_steps

    return wrapper(jax.value_and_grad(log_z, has_aux=True))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpml", required=True, help="directory of the GPML toolbox v4.2 (with startup.m)")
    parser.add_argument("--octave", default="octave")
    parser.add_argument("--sizes", type=int, nargs="+", default=[600])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="gpml_ep")
    args = parser.parse_args()
    if shutil.which(args.octave) is None:
        parser.error(f"{args.octave!r} not found: install GNU Octave (apt-get install --no-install-recommends octave)")
    if not (Path(args.gpml) / "startup.m").exists():
        parser.error(f"{args.gpml} has no startup.m: give the GPML toolbox's directory")
    info = machine_header("EP (probit): gpclass against GPML's infEP in Octave", args)
    X_all, y_all = gpc.datasets.load("usps35")
    perm = np.random.default_rng(0).permutation(len(y_all))
    theta = jnp.array([LOG_L, LOG_SF])
    methods = {"gpclass EP, tol 1e-10 (default)": (gpc.EP(), gpc.jit),
               "gpclass EP, tol 1e-4": (gpc.EP(tol=1e-4), gpc.jit),
               "gpclass EP, default, plain jax.jit": (gpc.EP(), jax.jit),
               "gpclass EP, sequential (infEP's schedule)": (gpc.EP(schedule="sequential"), gpc.jit)}
    results = {}
    for n in args.sizes:
        X, y = np.asarray(X_all[perm[:n]], np.float64), np.asarray(y_all[perm[:n]], np.float64)
        gpml_log_z, gpml_grad, gpml_times = run_gpml(args, X, y)
        functions = {label: gpclass_function(method, wrapper) for label, (method, wrapper) in methods.items()}
        times = compile_and_time({label: (lambda f=f: f(theta, X, y)) for label, f in functions.items()},
                                 repeats=args.repeats)
        times["GPML infEP (Octave)"] = dict(compile=None, run=float(np.median(gpml_times)),
                                            run_min=float(np.min(gpml_times)))
        print(f"n = {n}")
        print_times(times, reference="GPML infEP (Octave)")
        row = dict(gpml=dict(log_z=gpml_log_z, grad=gpml_grad.tolist(), seconds=gpml_times.tolist()))
        for label in functions:
            (value, sweeps), grad = times[label]["out"]
            row[label] = dict(log_z=float(value), grad=np.asarray(grad).tolist(), sweeps=int(sweeps),
                              seconds=times[label]["run"], ratio_gpml_over_gpclass=float(np.median(gpml_times))
                              / times[label]["run"])
            print(f"  {label:42s} log Z {float(value):.10f} "
                  f"(GPML {gpml_log_z:.10f}, diff {float(value) - gpml_log_z:.1e})"
                  f"  grad {np.asarray(grad)} (GPML {gpml_grad}), {int(sweeps)} sweeps,"
                  f"  GPML / gpclass time {row[label]['ratio_gpml_over_gpclass']:.1f}x")
        results[n] = row
    write_results(args.out, info, results)


if __name__ == "__main__":
    main()
