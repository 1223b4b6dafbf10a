"""What the expected log-likelihood's quadrature costs SVGP and VFE-KL: the library's rule against a cheap one.

    python benchmarks/quadrature_cost.py                  # n = 20,000 for the rules and VFE-KL; SVGP 10^4, 100, 500
    python benchmarks/quadrature_cost.py --n 5000 --svgp-steps 100
    python benchmarks/quadrature_cost.py --n 1000000 --vfe-only --repeats 2   # VFE-KL against FITC-EP alone

Issue 37 asks for SVGP at 1.5x GPflow's speed and VFE-KL within 2x of FITC-EP.  Both spend their time partly in
E_q[log p(y|f)], which gpclass computes with three 64-node Gauss-Legendre panels per case (``gpclass/likelihoods/
_gaussian_average.py``: relative error below 1e-9 over means in [-40, 3] and variances in [1e-12, 1e4]; KL's
derivatives by Bonnet's and Price's theorems from one pass over the nodes), or, for the logistic and the probit
when no case's std exceeds 1.5, with 64-node Gauss-Hermite (as accurate there, a third of the nodes).  This script
measures what the rule costs by swapping in a K-node Gauss-Hermite rule (what GPflow uses, K = 20) through a
likelihood subclass: a rule that is *not* accurate in general (its error for the logistic is 6e-8 at std 1.5 and
3e-6 at std 2 with K = 20; for the probit 9e-8 at std 1 and 4e-4 at std 2), so the times below bound what a
cheaper rule could gain; they are not a proposal to use it.

1. The rules alone: value, and the first and second derivatives KL's Newton steps take
   (``expected_log_lik_derivatives``), at n cases with stds up to e^2 (gpclass's rule: the panels) and clipped
   at 1.5 (gpclass's rule: Gauss-Hermite 64); and each rule's worst relative error against the library's
   rule with 200-node panels over means in [-40, 4] and stds in [0.25, 2] (in [0.25, 1.5] for the clipped row).
2. SVGP (``svgp_vs_gpflow.py``'s twonorm model: m inducing inputs, batches of b, Adam 0.01): ms per step of
   ``gpc.fit_svgp`` with the library's rule and with Gauss-Hermite, and the marginal stds at the training inputs
   after the run (where the rule must be accurate).
3. VFE-KL (logistic) against FITC-EP (probit) at n cases, m = 100, value and gradient of log q, each with the
   default settings, with ``KL(krylov_steps=3)`` (fewer GMRES products per Newton step), and with Gauss-Hermite.
"""

import argparse
import sys
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)  # a benchmark is a user's program: float64 is its choice

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import gpclass as gpc  # noqa: E402
from gpclass._inference._expectations import expected_log_lik_derivatives  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import compile_and_time, machine_header, write_results  # noqa: E402
from svgp_vs_gpflow import D, twonorm  # noqa: E402


def hermite(base, nodes: int):
    """``base`` with a ``nodes``-point Gauss-Hermite expected log-likelihood (a subclass: nothing else changes)."""
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / np.sqrt(2.0 * np.pi)

    class Hermite(type(base)):
        def expected_log_prob(self, y, mean, var):
            f = mean[:, None] + jnp.sqrt(var)[:, None] * z
            return jnp.sum(w * self.log_prob(y[:, None], f), axis=-1)

    Hermite.__name__ = f"{type(base).__name__}Hermite{nodes}"
    return Hermite()


def panels(base, nodes: int):
    """``base`` with the library's three panels of ``nodes`` Gauss-Legendre nodes each (the accuracy reference)."""
    from gpclass.likelihoods import _gaussian_average as rule

    z, w = np.polynomial.legendre.leggauss(nodes)

    class Panels(type(base)):
        hermite_std = None  # the panels at every std

        def expected_log_prob(self, y, mean, var):
            saved = rule._GL_NODES, rule._GL_WEIGHTS
            rule._GL_NODES, rule._GL_WEIGHTS = z, w
            try:
                return super().expected_log_prob(y, mean, var)
            finally:
                rule._GL_NODES, rule._GL_WEIGHTS = saved

    return Panels()


def rules(args, rows):
    rng = np.random.default_rng(0)
    n = args.n
    y = jnp.asarray(rng.choice([-1.0, 1.0], n))
    m = jnp.asarray(3.0 * rng.normal(size=n))
    v = jnp.asarray(np.exp(2.0 * rng.normal(size=n)))
    grid_m, grid_s = np.meshgrid(np.concatenate([-np.linspace(0, 40, 41), np.linspace(0, 4, 17)]),
                                 np.linspace(0.25, 2.0, 8))
    gm, gv = jnp.asarray(grid_m.ravel()), jnp.asarray(grid_s.ravel() ** 2)
    gy = jnp.ones_like(gm)
    for base in (gpc.likelihoods.Logistic(), gpc.likelihoods.Probit()):
        reference = np.asarray(panels(base, 200).expected_log_prob(gy, gm, gv))
        clipped, low = jnp.minimum(v, 1.5**2), np.asarray(gv) <= 1.5**2
        for label, lik, v_run, on in [("gpclass (panels)", base, v, slice(None)),
                                      ("gpclass, stds <= 1.5 (GH 64)", base, clipped, low),
                                      ("Gauss-Hermite 20", hermite(base, 20), v, slice(None)),
                                      ("Gauss-Hermite 24", hermite(base, 24), v, slice(None))]:
            value = jax.jit(lambda y, m, v, lik=lik: lik.expected_log_prob(y, m, v))
            derivs = jax.jit(lambda y, m, v, lik=lik: expected_log_lik_derivatives(lik, y, m, v))
            times = compile_and_time({"value": lambda: value(y, m, v_run),
                                      "derivatives": lambda: derivs(y, m, v_run)}, repeats=args.repeats)
            got = np.asarray(lik.expected_log_prob(gy[on], gm[on], gv[on]))
            error = float(np.max(np.abs(got - reference[on]) / np.abs(reference[on])))
            row = dict(part="rule", likelihood=type(base).__name__, rule=label, n=n,
                       value_ms=1e3 * times["value"]["run"], derivatives_ms=1e3 * times["derivatives"]["run"],
                       max_rel_error=error)
            rows.append(row)
            print(f"{row['likelihood']:9s} {label:28s} value {row['value_ms']:7.1f} ms  derivatives "
                  f"{row['derivatives_ms']:7.1f} ms  worst relative error {error:.1e}", flush=True)


def svgp(args, rows):
    n, m, b = args.svgp
    X, y = twonorm(n, np.random.default_rng(0))
    for label, lik in [("gpclass", gpc.likelihoods.Logistic()),
                       ("Gauss-Hermite 24", hermite(gpc.likelihoods.Logistic(), 24))]:
        kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(D)))
        start = gpc.SVGP.at_prior(kernel, lik, X[:m])
        jax.block_until_ready(gpc.fit_svgp(start, X, y, key=jax.random.key(0), num_steps=20, batch_size=b))
        per_step = []
        for _ in range(args.repeats):
            t0 = time.perf_counter()
            fit = jax.block_until_ready(gpc.fit_svgp(start, X, y, key=jax.random.key(0), num_steps=args.svgp_steps,
                                                     batch_size=b))
            per_step.append((time.perf_counter() - t0) / args.svgp_steps)
        _, var = jax.jit(lambda model: model.marginals(X[:5000]))(fit.model)
        std = np.sqrt(np.asarray(var))
        row = dict(part="svgp", rule=label, n=n, m=m, batch=b, steps=args.svgp_steps,
                   step_ms=1e3 * float(np.median(per_step)), std_quantiles=np.quantile(std, [0.5, 0.9, 1.0]).tolist())
        rows.append(row)
        print(f"SVGP n={n} m={m} b={b} {label:24s} {row['step_ms']:6.2f} ms/step; std at training inputs: median "
              f"{row['std_quantiles'][0]:.2f}, 90 % {row['std_quantiles'][1]:.2f}, max {row['std_quantiles'][2]:.2f}",
              flush=True)


def vfe_kl(args, rows):
    n, m = args.n, 100
    X, y = twonorm(n, np.random.default_rng(0))
    X, y, Z = jnp.asarray(X), jnp.asarray(y), jnp.asarray(X[:m])
    kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(D)))
    logistic = gpc.likelihoods.Logistic()
    runs = {
        "FITC-EP (probit)": (gpc.EP(), gpc.likelihoods.Probit(), "fitc"),
        "VFE-KL": (gpc.KL(), logistic, "vfe"),
    }
    if not args.vfe_only:
        runs.update({
            "VFE-KL, krylov_steps=3": (gpc.KL(krylov_steps=3), logistic, "vfe"),
            "VFE-KL, Gauss-Hermite 20": (gpc.KL(), hermite(logistic, 20), "vfe"),
            "VFE-KL, both": (gpc.KL(krylov_steps=3), hermite(logistic, 20), "vfe"),
        })
    fns = {}
    for label, (method, lik, approximation) in runs.items():
        def objective(k, X, y, method=method, lik=lik, approximation=approximation):
            post = gpc.infer(method, gpc.Sparse(k, Z, approximation=approximation), lik, X, y)
            return post.log_marginal, post.info.num_steps

        program = jax.jit(jax.value_and_grad(objective, has_aux=True))
        fns[label] = lambda program=program: program(kernel, X, y)
    times = compile_and_time(fns, repeats=args.repeats)
    for label, t in times.items():
        (value, steps), _ = t["out"]
        row = dict(part="vfe_kl", run=label, n=n, m=m, seconds=t["run"], compile_s=t["compile"],
                   log_q=float(value), steps=int(steps),
                   over_fitc_ep=t["run"] / times["FITC-EP (probit)"]["run"])
        rows.append(row)
        print(f"n={n} m={m} {label:26s} {t['run']:6.2f} s ({row['over_fitc_ep']:.2f}x FITC-EP), {int(steps)} steps, "
              f"log q {float(value):.10f}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=20_000)
    parser.add_argument("--svgp", type=lambda s: [int(x) for x in s.split(",")], default=[10_000, 100, 500])
    parser.add_argument("--svgp-steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", default="quadrature_cost")
    parser.add_argument("--vfe-only", action="store_true",
                        help="part 3 alone, FITC-EP and VFE-KL with default settings (for n = 10^6)")
    args = parser.parse_args()
    info = machine_header("the expected log-likelihood's share of SVGP and VFE-KL", args)
    rows = []
    if not args.vfe_only:
        rules(args, rows)
        svgp(args, rows)
    vfe_kl(args, rows)
    write_results(args.out, info, rows)


if __name__ == "__main__":
    main()
