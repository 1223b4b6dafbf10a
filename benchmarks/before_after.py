"""A/B in one process: the same workloads through this tree's gpclass and an earlier commit's, interleaved.

The earlier commit's package is extracted with ``git archive`` into a temporary directory as
``gpclass_before`` (the package imports itself relatively, so two versions live side by side), and each
workload is compiled once per version and then timed in alternation (``alternating``): both see the
same machine load, which on a shared 2-core machine moves single timings by 10-20 %.

    python benchmarks/before_after.py --before 0fce531          # about 3 minutes
"""

import argparse
import importlib
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp
import numpy as np
from harness import compile_and_time, machine_header, print_times, timed, write_results
from svgp import twonorm

import gpclass

ROOT = Path(__file__).resolve().parent.parent


def import_before(commit: str, directory: Path):
    """The package ``gpclass/`` of ``commit``, imported as ``gpclass_before``."""
    archive = directory / "before.tar"
    subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), commit, "gpclass"], check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(directory, filter="data")
    (directory / "gpclass").rename(directory / "gpclass_before")
    sys.path.insert(0, str(directory))
    return importlib.import_module("gpclass_before")


def workloads(gpc, X, y) -> dict:
    """Value and gradient of log q in the log hyperparameters, each compiled with the version's ``gpc.jit``."""
    logistic, probit = gpc.likelihoods.Logistic(), gpc.likelihoods.Probit()
    rng = np.random.default_rng(0)
    X_big = rng.normal(size=(20000, 5))
    y_big = np.sign(X_big[:, 0] + 0.5 * rng.normal(size=20000))
    classes = np.arange(len(y)) % 3
    X_two, y_two = twonorm(20000, np.random.default_rng(0))  # issue 37's VFE-KL data (svgp_vs_gpflow.py's)

    def value_and_grad(method, likelihood, X, y, sparse=None, approximation="fitc", predict=False):
        def log_q(p):
            kernel = gpc.kernels.SquaredExponential(jnp.exp(p[0]), jnp.exp(p[1]))
            if sparse is not None:
                kernel = gpc.Sparse(kernel, X[:sparse], approximation=approximation)
            post = gpc.infer(method, kernel, likelihood, X, y)
            if predict:  # a prediction's gradient: the converged solution's implicit adjoint
                return jnp.sum(gpc.predict(post, X[:50]))
            return post.log_marginal

        program = gpc.jit(jax.value_and_grad(log_q))
        start = jnp.array([1.0, 2.5])
        return lambda: program(start)

    def ml2(X, y):
        """A whole gpc.fit (Laplace, ML-II from sigma_f^2 = e, l = e^2.5): the optimiser's loop and Newton's."""
        kernel = gpc.kernels.SquaredExponential(jnp.exp(1.0), jnp.exp(2.5))
        program = gpc.jit(lambda X, y: gpc.fit(gpc.Laplace(), kernel, logistic, X, y, throw=False).objective)
        return lambda: program(X, y)

    def em_ep(X, y):
        """Five EM-EP steps (Kim & Ghahramani's model: step likelihood with label noise, SE + white kernel)."""
        kernel = gpc.kernels.SquaredExponential(jnp.exp(1.0), jnp.exp(2.5)) + gpc.kernels.White(0.1)
        likelihood = gpc.likelihoods.LabelNoise(gpc.likelihoods.Heaviside(), 0.01)
        program = gpc.jit(lambda X, y: gpc.fit_em_ep(gpc.EP(), kernel, likelihood, X, y, max_steps=5,
                                                     throw=False).log_marginal)
        return lambda: program(X, y)

    def svgp(m, batch, steps=100):
        """``steps`` steps of gpc.fit_svgp on twonorm (n = 20,000; svgp_vs_gpflow.py's model and data)."""
        kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(X_two.shape[1])))
        start = gpc.SVGP.at_prior(kernel, logistic, X_two[:m])
        return lambda: gpc.fit_svgp(start, X_two, y_two, key=jax.random.key(0), num_steps=steps,
                                    batch_size=batch).model.q_mu

    return {
        "SVGP 100 steps m=100 b=500": svgp(100, 500),
        "SVGP 100 steps m=300 b=1000": svgp(300, 1000),
        "SVGP 100 steps m=500 b=256": svgp(500, 256),
        "SVGP 20 steps m=1000 b=256": svgp(1000, 256, steps=20),
        "Laplace n=300": value_and_grad(gpc.Laplace(), logistic, X[:300], y[:300]),
        "Laplace n=1000": value_and_grad(gpc.Laplace(), logistic, X[:1000], y[:1000]),
        "EP n=600": value_and_grad(gpc.EP(), probit, X[:600], y[:600]),  # the default: parallel for the probit
        "sequential EP n=600": value_and_grad(gpc.EP(schedule="sequential"), probit, X[:600], y[:600]),
        "KL n=300": value_and_grad(gpc.KL(), logistic, X[:300], y[:300]),
        "JJ n=300": value_and_grad(gpc.JaakkolaJordan(), logistic, X[:300], y[:300]),
        "softmax Laplace n=600": value_and_grad(gpc.Laplace(), gpc.likelihoods.Softmax(3), X[:600], classes[:600]),
        "FITC Laplace n=1500": value_and_grad(gpc.Laplace(), logistic, X[:1500], y[:1500], sparse=200),
        "FITC Laplace n=2e4": value_and_grad(gpc.Laplace(), logistic, X_big, y_big, sparse=200),
        "FITC EP n=2e4": value_and_grad(gpc.EP(), probit, X_big, y_big, sparse=100),
        "parallel EP n=600": value_and_grad(gpc.EP(schedule="parallel"), probit, X[:600], y[:600]),
        "FITC KL n=5000": value_and_grad(gpc.KL(), logistic, X_big[:5000], y_big[:5000], sparse=100),
        "VFE KL n=2e4": value_and_grad(gpc.KL(), logistic, X_big, y_big, sparse=100, approximation="vfe"),
        "VFE KL twonorm n=2e4": value_and_grad(gpc.KL(), logistic, X_two, y_two, sparse=100, approximation="vfe"),
        "VFE JJ n=5000": value_and_grad(gpc.JaakkolaJordan(), logistic, X_big[:5000], y_big[:5000], sparse=100,
                                        approximation="vfe"),
        "EP prediction n=300": value_and_grad(gpc.EP(), probit, X[:300], y[:300], predict=True),
        "KL prediction n=300": value_and_grad(gpc.KL(), logistic, X[:300], y[:300], predict=True),
        "FITC EP prediction n=2000": value_and_grad(gpc.EP(), probit, X_big[:2000], y_big[:2000], sparse=100,
                                                    predict=True),
        "fit Laplace n=300": ml2(X[::5][:300], y[::5][:300]),  # both classes (usps35 is sorted by label)
        "EM-EP 5 steps n=200": em_ep(X[::7][:200], y[::7][:200]),
    }


def alternating(fns: dict, repeats: int) -> dict:
    """(median, minimum) seconds of each function over ``repeats`` rounds, each workload's two versions called
    one after the other, in the order before-after in even rounds and after-before in odd ones."""
    runs = {key: [] for key in fns}
    keys = list(fns)
    for round_ in range(repeats):
        for pair in range(0, len(keys), 2):
            order = keys[pair:pair + 2] if round_ % 2 == 0 else keys[pair:pair + 2][::-1]
            for key in order:
                runs[key].append(timed(fns[key])[1])
    return {key: (float(np.median(t)), float(np.min(t))) for key, t in runs.items()}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True, help="the earlier commit")
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--name", default="before_after")
    parser.add_argument("--only", default=None, help="comma-separated workload names (default: all)")
    parser.add_argument("--blas-threads", type=int, default=None,
                        help="limit every BLAS pool of the process (gpc.limit_lapack_threads) for both versions: "
                             "compares the code alone where the earlier version limited its own calls")
    args = parser.parse_args()
    if args.blas_threads is not None:
        gpclass.limit_lapack_threads(args.blas_threads)
    info = machine_header(f"A/B in one process: gpclass at {args.before} against this tree", args)
    X, y = gpclass.datasets.load("usps35")
    X = gpclass.datasets.standardize(X)
    with tempfile.TemporaryDirectory() as directory:
        before = import_before(args.before, Path(directory))
        only = None if args.only is None else set(args.only.split(","))
        versions = {label: {name: fn for name, fn in workloads(gpc, X, y).items() if only is None or name in only}
                    for label, gpc in (("before", before), ("after", gpclass))}
        fns = {f"{name} | {label}": versions[label][name] for name in versions["before"] for label in versions}
        times = compile_and_time(fns, repeats=0)  # compile (and a first run) of each
        for key, (median, minimum) in alternating(fns, args.repeats).items():
            times[key].update(run=median, run_min=minimum, compile=times[key]["run"] - median)
    print_times(times)
    rows = []
    print(f"\n  {'workload':28s} {'before':>10s} {'after':>10s} {'after/before':>13s} {'log q diff':>11s}")
    for name in [key.split(" | ")[0] for key in fns if key.endswith("| before")]:
        b, a = times[f"{name} | before"], times[f"{name} | after"]
        out_a, out_b = (np.ravel(np.asarray(t["out"][0] if isinstance(t["out"], tuple) else t["out"])) for t in (a, b))
        difference = float(np.max(np.abs(out_a - out_b) / np.abs(out_b)))
        rows.append(dict(workload=name, before_run=b["run"], after_run=a["run"], before_compile=b["compile"],
                         after_compile=a["compile"], ratio=a["run"] / b["run"], log_q_relative_difference=difference))
        print(f"  {name:28s} {b['run'] * 1e3:8.1f} ms {a['run'] * 1e3:8.1f} ms {a['run'] / b['run']:13.3f} "
              f"{difference:11.1e}")
    before_commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", args.before], check=True,
                                   capture_output=True, text=True).stdout.strip()
    write_results(args.name, info, dict(before=before_commit, rows=rows))


if __name__ == "__main__":
    main()
