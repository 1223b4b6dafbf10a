"""The first ML-II fit in a new process (compile dominated) against scikit-learn's in a new process.

    python benchmarks/first_fit.py                # 138 Ionosphere cases, 3 fresh processes per configuration
    python benchmarks/first_fit.py --n 200 --repeats 5
    python benchmarks/first_fit.py --before 9627896 --repeats 8   # this tree against an earlier commit's
    python benchmarks/first_fit.py --drivers 138 300 1000         # gpc.fit's host loop against one program

Each measurement is a new Python process that loads the data, then times its
first ``gpc.fit`` (Laplace, logistic, SE kernel from sigma_f = 1,
l = sqrt(d), float64: tracing, compilation and the L-BFGS run) and the whole
process (interpreter start and imports included), against the same for
scikit-learn's ``GaussianProcessClassifier`` (Laplace, logistic, L-BFGS-B from
the same start, no restarts), the reference.  gpclass runs three ways:
without the persistent compilation cache, with an empty cache
(``gpc.enable_compilation_cache`` on a new directory: compiles and stores),
and with a warm cache (the directory a previous process filled: loads).

The data are the first n cases of Ionosphere after a fixed permutation,
standardised.  Runs of the configurations are interleaved.

With ``--floor`` two minimal programs written for this one model join the runs, to show what any JAX
implementation of the fit pays in a new process (the floor under gpclass's first fit): "floor: one program",
Laplace's Newton iterations (GPML's algorithm 3.1) and optax's L-BFGS with its zoom line search in one
``jax.jit`` program, the way a JAX user would write the whole fit; and "floor: host loop", only the value and
gradient compiled, driven by SciPy's L-BFGS-B on the host, the way scikit-learn drives its fit.  Each compiles
with the XLA options of its gpclass counterpart (the one program with ``gpc.compiler_options()``, the host
loop's objective with LLVM optimisation level 0 on top, as ``gpc.fit``'s host loop compiles its own) and
both reach the same log q.

With ``--drivers N ...`` it compares gpc.fit's two drivers on the first N cases of usps35 (256 inputs), each in
new processes: called directly (the objective compiled alone, L-BFGS on the host) and through ``gpc.jit`` (the
whole fit one program), timing the first fit and a second fit of the same shape (run time alone).

With ``--before COMMIT`` it compares the first fit (no cache) of this tree with that commit's package
(``git archive``, put first on ``PYTHONPATH``), both with one BLAS thread (``OPENBLAS_NUM_THREADS=1``: earlier
versions limited their own calls), in alternating order.
"""

import argparse
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
from harness import fmt_t, machine_header, write_results

CHILD = r"""
import json, sys, time
start = time.perf_counter()
mode, n, cache = sys.argv[1], int(sys.argv[2]), sys.argv[3]
import numpy as np
import gpclass as gpc
if cache:
    gpc.enable_compilation_cache(cache)
X, y = gpc.datasets.load("ionosphere")
idx = np.random.default_rng(0).permutation(len(y))[:n]
X, y = gpc.datasets.standardize(X[idx]), y[idx]
if mode == "sklearn":
    from sklearn.gaussian_process import GaussianProcessClassifier
    from sklearn.gaussian_process.kernels import RBF, ConstantKernel
    t0 = time.perf_counter()
    model = GaussianProcessClassifier(ConstantKernel(1.0) * RBF(np.sqrt(X.shape[1])), random_state=0).fit(X, y)
    fit = time.perf_counter() - t0
    value = float(model.log_marginal_likelihood_value_)
elif mode.startswith("floor"):
    import jax, jax.numpy as jnp, optax, scipy.optimize
    jax.config.update("jax_enable_x64", True)
    X, t = jnp.asarray(X), jnp.asarray((y > 0).astype(float))
    theta0 = jnp.array([0.0, np.log(np.sqrt(X.shape[1]))])
    t0 = time.perf_counter()
    options = gpc.compiler_options()
    if mode == "floor-host" and "xla_backend_optimization_level" in options:
        options = {**options, "xla_backend_optimization_level": 0}  # as gpc.fit's host loop compiles its objective
    if mode == "floor-program":
        value = -float(jax.jit(one_program_fit, compiler_options=options)(theta0, X, t))
    else:
        value_and_grad = jax.jit(lambda theta: jax.value_and_grad(negative_log_q)(theta, X, t),
                                 compiler_options=options)
        def fun(theta):
            v, g = value_and_grad(jnp.asarray(theta))
            return float(v), np.asarray(g)
        value = -float(scipy.optimize.minimize(fun, np.asarray(theta0), jac=True, method="L-BFGS-B").fun)
    fit = time.perf_counter() - t0
elif mode.startswith("driver"):
    import jax
    jax.config.update("jax_enable_x64", True)
    X, y = gpc.datasets.load("usps35")
    idx = np.random.default_rng(0).permutation(len(y))[:n]
    X, y = X[idx], y[idx]
    kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(X.shape[1])))
    fit_fn = gpc.fit if mode == "driver-host" else gpc.jit(gpc.fit, static_argnames=("throw",))
    run = lambda: jax.block_until_ready(fit_fn(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y, throw=False))
    t0 = time.perf_counter()
    result = run()
    fit = time.perf_counter() - t0
    t0 = time.perf_counter()
    run()
    second = time.perf_counter() - t0
    value = float(result.objective)
else:
    import jax
    jax.config.update("jax_enable_x64", True)
    kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(X.shape[1])))
    t0 = time.perf_counter()
    result = jax.block_until_ready(gpc.fit(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y, throw=False))
    fit = time.perf_counter() - t0
    value = float(result.objective)
print(json.dumps(dict(fit=fit, process=time.perf_counter() - start, value=value, package=gpc.__file__,
                      **({"second": second} if mode.startswith("driver") else {}))))
"""

# The floor's model (defined ahead of CHILD in every child process), written for it alone: SE kernel, logistic
# likelihood, targets t in {0, 1}; log q by GPML's eq. 3.32 at the mode found by Newton's iterations (algorithm
# 3.1, B = I + W^1/2 K W^1/2), its gradient through one more Newton step from the (stopped) mode, which has the
# mode's derivative (Newton's map is flat there), and B's factor at that step's f.
FLOOR = r"""
def gram(theta, X):
    Xs = X / jnp.exp(theta[1])
    sq = jnp.sum(Xs ** 2, 1)
    return jnp.exp(2 * theta[0]) * jnp.exp(-0.5 * jnp.maximum(sq[:, None] + sq[None, :] - 2 * Xs @ Xs.T, 0.0))

def newton_step(f, K, t):
    pi = jax.nn.sigmoid(f)
    W = pi * (1 - pi)
    sW = jnp.sqrt(W)
    L = jnp.linalg.cholesky(jnp.eye(len(t)) + sW[:, None] * K * sW[None, :])
    b = W * f + t - pi
    a = b - sW * jax.scipy.linalg.cho_solve((L, True), sW * (K @ b))
    return K @ a, a, L

def newton_mode(K, t):
    def body(c):
        f, it, _ = c
        f_new = newton_step(f, K, t)[0]
        return f_new, it + 1, jnp.max(jnp.abs(f_new - f))
    f0 = jnp.zeros_like(t)
    return jax.lax.stop_gradient(jax.lax.while_loop(lambda c: (c[2] > 1e-10) & (c[1] < 50), body,
                                                    (f0, 0, jnp.inf))[0])

def negative_log_q(theta, X, t):
    K = gram(theta, X)
    f, a, _ = newton_step(newton_mode(K, t), K, t)
    L = newton_step(f, K, t)[2]  # B's factor at f, which carries the mode's derivative
    return 0.5 * a @ f - jnp.sum(t * f - jnp.logaddexp(0.0, f)) + jnp.sum(jnp.log(jnp.diag(L)))

def one_program_fit(theta0, X, t):
    optimizer = optax.lbfgs()
    fn = lambda theta: negative_log_q(theta, X, t)
    value_and_grad = optax.value_and_grad_from_state(fn)
    def body(c):
        theta, state = c
        v, g = value_and_grad(theta, state=state)
        updates, state = optimizer.update(g, state, theta, value=v, grad=g, value_fn=fn)
        return optax.apply_updates(theta, updates), state
    def running(c):
        count, g = optax.tree.get(c[1], "count"), optax.tree.get(c[1], "grad")
        return (count == 0) | ((count < 100) & (jnp.max(jnp.abs(g)) > 1e-5))
    theta, state = jax.lax.while_loop(running, body, (theta0, optimizer.init(theta0)))
    return optax.tree.get(state, "value")
"""


def run_child(mode, n, cache="", env=None, cwd=None):
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", FLOOR + CHILD, mode, str(n), cache], capture_output=True, text=True,
                         check=True, env=env, cwd=cwd).stdout
    record = json.loads(out.strip().splitlines()[-1])
    record["process"] = time.perf_counter() - start  # interpreter start included
    return record


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=138)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--floor", action="store_true", help="also time the two minimal programs (docstring)")
    parser.add_argument("--before", default=None, help="compare this tree's first fit with this commit's")
    parser.add_argument("--out", default=None, help="results name (default: first_fit_n<n>, first_fit_before_<commit>)")
    parser.add_argument("--drivers", type=int, nargs="+", default=None, metavar="N",
                        help="compare gpc.fit called directly with gpc.jit(gpc.fit) at these sizes (usps35)")
    args = parser.parse_args()
    if args.before is not None:
        return compare(args)
    if args.drivers is not None:
        return drivers(args)
    info = machine_header("First ML-II fit in a new process (Laplace, logistic) against scikit-learn's", args)
    runs = {mode: [] for mode in ("gpclass", "gpclass, empty cache", "gpclass, warm cache", "sklearn")}
    if args.floor:
        runs.update({"floor: one program": [], "floor: host loop": []})
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as cache:
            runs["gpclass"].append(run_child("gpclass", args.n))
            runs["gpclass, empty cache"].append(run_child("gpclass", args.n, cache))
            runs["gpclass, warm cache"].append(run_child("gpclass", args.n, cache))
        runs["sklearn"].append(run_child("sklearn", args.n))
        if args.floor:
            runs["floor: one program"].append(run_child("floor-program", args.n))
            runs["floor: host loop"].append(run_child("floor-host", args.n))
    results = {}
    print(f"  {'':22s} {'first fit':>10s} {'process':>10s} {'x sklearn fit':>14s}   log marginal likelihood")
    sk_fit = float(np.median([r["fit"] for r in runs["sklearn"]]))
    for mode, records in runs.items():
        fit = float(np.median([r["fit"] for r in records]))
        process = float(np.median([r["process"] for r in records]))
        results[mode] = dict(fit_median=fit, process_median=process, runs=records)
        print(f"  {mode:22s} {fmt_t(fit):>10s} {fmt_t(process):>10s} {fit / sk_fit:14.2f}   {records[0]['value']:.6f}")
    write_results(args.out or f"first_fit_n{args.n}", info, results)


def drivers(args):
    """gpc.fit called directly (host loop) against gpc.jit(gpc.fit) (one program): first and second fit."""
    info = machine_header("gpc.fit's drivers: the host loop against one program (Laplace, logistic, usps35)", args)
    results = {}
    for n in args.drivers:
        runs = {"host loop": [], "one program": []}
        for round_ in range(args.repeats):
            order = ["host loop", "one program"] if round_ % 2 == 0 else ["one program", "host loop"]
            for label in order:
                runs[label].append(run_child("driver-host" if label == "host loop" else "driver-program", n))
        for label, records in runs.items():
            first = float(np.median([r["fit"] for r in records]))
            second = float(np.median([r["second"] for r in records]))
            results[f"n = {n}, {label}"] = dict(fit_median=first, second_median=second, runs=records)
            print(f"  n = {n:5d} {label:12s} first fit {fmt_t(first):>9s}  second fit {fmt_t(second):>9s}  "
                  f"log q {records[0]['value']:.8f}")
    write_results(args.out or "first_fit_drivers", info, results)


def compare(args):
    """The first fit (no cache) of ``args.before``'s package against this tree's, one BLAS thread each."""
    info = machine_header(f"First ML-II fit in a new process: {args.before} against this tree", args)
    root = Path(__file__).resolve().parent.parent
    with tempfile.TemporaryDirectory() as directory:
        archive = Path(directory) / "before.tar"
        subprocess.run(["git", "-C", str(root), "archive", "-o", str(archive), args.before, "gpclass"], check=True)
        before = Path(directory) / "before"  # not the children's working directory, which comes first on sys.path
        with tarfile.open(archive) as tar:
            tar.extractall(before, filter="data")
        trees = {args.before: str(before), "this tree": str(root)}
        runs = {label: [] for label in trees}
        for round_ in range(args.repeats):
            order = list(trees) if round_ % 2 == 0 else list(trees)[::-1]
            for label in order:
                env = dict(os.environ, PYTHONPATH=trees[label], OPENBLAS_NUM_THREADS="1")
                runs[label].append(run_child("gpclass", args.n, env=env, cwd=directory))
    results = {}
    for label, records in runs.items():
        fits = [r["fit"] for r in records]
        results[label] = dict(fit_median=float(np.median(fits)), fit_min=float(np.min(fits)), runs=records)
        print(f"  {label:12s} first fit median {fmt_t(float(np.median(fits)))}, minimum {fmt_t(float(np.min(fits)))}, "
              f"runs {[round(f, 2) for f in fits]}, log q {records[0]['value']:.12f}, "
              f"package {records[0]['package']}")
    write_results(args.out or f"first_fit_before_{args.before}", info, results)


if __name__ == "__main__":
    main()
