"""Compile and run time of each method with gpclass's XLA options against XLA's defaults, in one process.

    python benchmarks/compile_options.py                 # n = 30 (compile) and n = 400 / 1000 (run)
    python benchmarks/compile_options.py --repeats 9
    python benchmarks/compile_options.py --candidate '{"xla_backend_optimization_level": 1}'

For each method, the jitted value and gradient of log q(y|X, theta) with
respect to (log sigma_f, log l) is compiled with ``gpc.compiler_options()``
(on CPU: XLA's fusion emitters off, LLVM optimisation level 1) and with XLA's defaults, from the same
program.  Compile time is the process CPU time and the wall time of
``.compile()`` (XLA compiles on several threads), the lesser of two
compilations of each, interleaved; run time is the median over ``--repeats`` interleaved calls of the two
executables, so both see the same machine load.  The values of the two must
agree to rounding.  ``--candidate`` adds a third configuration, gpclass's
options updated with the given ones (a JSON object), to measure an option
before adopting it.  Data: standardised Wisconsin (n = 30, compile) and the
first n rows of usps35 (run), SE kernel, float64.
"""

import argparse
import json
import time

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from harness import fmt_t, interleaved, machine_header, write_results  # noqa: E402

import gpclass as gpc  # noqa: E402

LOGISTIC, PROBIT = gpc.likelihoods.Logistic(), gpc.likelihoods.Probit()
METHODS = {
    "laplace": (gpc.Laplace(), LOGISTIC, 1000),
    "ep-sequential": (gpc.EP(schedule="sequential"), PROBIT, 400),
    "ep-parallel": (gpc.EP(schedule="parallel"), PROBIT, 400),
    "kl": (gpc.KL(), LOGISTIC, 400),
    "jj-lower": (gpc.JaakkolaJordan(), LOGISTIC, 1000),
    "softmax-laplace": (gpc.Laplace(), gpc.likelihoods.Softmax(4), 400),
}


def lowered(method, likelihood, X, y):
    def log_marginal(theta):
        kernel = gpc.kernels.SquaredExponential(jnp.exp(2 * theta[0]), jnp.exp(theta[1]))
        return gpc.infer(method, kernel, likelihood, X, y).log_marginal

    return jax.jit(jax.value_and_grad(log_marginal)).lower(jnp.array([1.0, 1.5]))


def compile_all(lower, configurations):
    """{'gpclass': (executable, cpu s, wall s), 'xla-default': ...}, each compiled from a new ``lower()``.

    Each is compiled twice, in the order of ``configurations`` and then in reverse, and the lesser times are kept:
    the first compilation in a process pays one-time costs, and the order must not favour any.
    """
    out = {}
    for name, options in [*configurations.items(), *reversed(configurations.items())]:
        lowering = lower()  # a new module: a repeated compilation of the same one is served from a cache
        cpu, wall = time.process_time(), time.perf_counter()
        executable = lowering.compile(compiler_options=options or None)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        _, best_cpu, best_wall = out.get(name, (None, np.inf, np.inf))
        out[name] = (executable, min(cpu, best_cpu), min(wall, best_wall))
    return out


def labels(name, y, X):
    if name != "softmax-laplace":
        return y
    return (X[:, 0] > 0).astype(np.int32) + 2 * (X[:, 1] > 0)  # four classes from two pixels' signs


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--candidate", type=json.loads, default=None, help="extra XLA options (JSON) to compare")
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--out", default="compile_options")
    args = parser.parse_args()
    configurations = {"gpclass": gpc.compiler_options(), "xla-default": {}}
    if args.candidate:
        configurations["candidate"] = {**gpc.compiler_options(), **args.candidate}
    info = machine_header("gpclass compiler options against XLA's defaults (value and gradient of log q)", args)
    for name, options in configurations.items():
        print(f"{name} options: {options}")
    Xw, yw = gpc.datasets.load("wisconsin")
    Xw, yw = gpc.datasets.standardize(Xw[:30]), yw[:30]
    Xu, yu = gpc.datasets.load("usps35")
    perm = np.random.default_rng(0).permutation(len(yu))
    Xu, yu = Xu[perm], yu[perm]
    theta = jnp.array([1.0, 1.5])
    results = {}
    print("compile at n = 30: cpu / wall; run: median; ratios to gpclass's options")
    for name in args.methods:
        method, lik, n = METHODS[name]
        small = compile_all(lambda: lowered(method, lik, Xw, labels(name, yw, Xw)), configurations)
        big = compile_all(lambda: lowered(method, lik, Xu[:n], labels(name, yu[:n], Xu[:n])), configurations)
        values = {k: float(big[k][0](theta)[0]) for k in big}
        times = interleaved({k: (lambda e=big[k][0]: e(theta)) for k in big}, args.repeats)
        results[name] = dict(
            n_run=n,
            compile_cpu={k: v[1] for k, v in small.items()}, compile_wall={k: v[2] for k, v in small.items()},
            compile_cpu_at_n={k: v[1] for k, v in big.items()},
            run_median={k: v[0] for k, v in times.items()}, run_min={k: v[1] for k, v in times.items()},
            values=values,
        )
        for k in values:
            assert abs(values[k] - values["gpclass"]) <= 1e-9 * (1 + abs(values["gpclass"])), values
        print(f"{name} (run at n = {n}):")
        for k in configurations:
            print(f"  {k:12s} compile {fmt_t(small[k][1]):>8s} / {fmt_t(small[k][2]):>8s} "
                  f"({small[k][1] / small['gpclass'][1]:4.2f})   run {fmt_t(times[k][0]):>9s} "
                  f"(min {fmt_t(times[k][1])}, {times[k][0] / times['gpclass'][0]:4.2f})", flush=True)
    write_results(args.out, info, results)


if __name__ == "__main__":
    main()
