"""Kuss & Rasmussen's Ionosphere study: AIS and MCMC against EP and Laplace over (log l, log sigma).

    python benchmarks/ionosphere_ais.py --sections timing grid bounds   # 7 x 7 grid, T = 32000: about 1 h on one core
    python benchmarks/ionosphere_ais.py --grid 21 21                      # the paper's grid (about 9 h)
    python benchmarks/ionosphere_ais.py --sections timing marginals bounds

Set-up (Kuss & Rasmussen section 7.2): Ionosphere, inputs standardised, a
random 200 training / 151 test split (``default_rng(0).permutation(351)``),
probit likelihood, SE kernel sigma^2 exp(-|x - x'|^2 / (2 l^2)).

Sections
  grid       on a grid of (log l, log sigma): log Z by AIS (T temperatures,
             tau(t) = (t/T)^4, R = 3 runs, one elliptical-slice step per
             temperature; one vmapped call per grid row), EP and Laplace (one
             vmapped call each); test information (bits, K&R eq. 34) from MCMC
             (elliptical slice, three chains started from the AIS end states), EP
             and Laplace.  Contour plots as K&R Figure 4.  T defaults to 32000:
             with T = 2000 or 8000 the runs at log sigma >= 2 disagree by several
             nats and fall 2-40 nats short (results/ionosphere_ais_7x7_T2000.log).
  timing     wall time of one AIS estimate with T = 8000, R = 3 at n = 200
             (compile separately), elliptical slice and HMC transitions.
  marginals  K&R Figure 7: at the EP ML-II hyperparameters, the MCMC histogram
             of the most skewed latent f_i against the Laplace and EP Gaussians.
  bounds     logistic likelihood on a coarser grid: AIS log Z against the
             Jaakkola-Jordan lower / upper bounds and the KL ELBO.
"""

import argparse
import json
from time import perf_counter as now

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from harness import RESULTS, machine_header, pyplot, timed, write_results  # noqa: E402

import gpclass as gpc  # noqa: E402

PROBIT = gpc.likelihoods.Probit()
LOGISTIC = gpc.likelihoods.Logistic()


def load_split():
    X, y = gpc.datasets.load("ionosphere")
    idx = np.random.default_rng(0).permutation(len(y))
    tr, te = idx[:200], idx[200:]
    Xtr, Xte = gpc.datasets.standardize(X[tr], X[te])
    return jnp.asarray(Xtr), jnp.asarray(y[tr]), jnp.asarray(Xte), jnp.asarray(y[te])


def se(log_l, log_sigma):
    return gpc.kernels.SquaredExponential(variance=jnp.exp(2.0 * log_sigma), lengthscale=jnp.exp(log_l))


def gaussian_grid(method, likelihood, L, S, data):
    Xtr, ytr, Xte, yte = data

    def one(log_l, log_s):
        post = gpc.infer(method, se(log_l, log_s), likelihood, Xtr, ytr, throw=False)
        p = gpc.predict(post, Xte)
        return post.log_marginal, gpc.metrics.information_bits(yte, p, ytr), post.info.converged

    fn = gpc.jit(jax.vmap(one))
    out, seconds = timed(lambda: fn(L.ravel(), S.ravel()))
    return [np.asarray(o).reshape(L.shape) for o in out], seconds


def section_grid(args, record, data):
    Xtr, ytr, Xte, yte = data
    log_l = np.linspace(*args.log_l_range, args.grid[0])
    log_s = np.linspace(*args.log_sigma_range, args.grid[1])
    L, S = np.meshgrid(log_l, log_s)
    result = dict(log_l=log_l.tolist(), log_sigma=log_s.tolist(), temperatures=args.temperatures)
    for name, method in [("laplace", gpc.Laplace()), ("ep", gpc.EP(schedule="parallel"))]:
        (lml, info, conv), seconds = gaussian_grid(method, PROBIT, L, S, data)
        result[name] = dict(log_marginal=lml.tolist(), info=info.tolist(), converged=conv.tolist(), seconds=seconds)
        print(f"{name}: {L.size} points in {seconds:.1f} s (one vmapped call), unconverged {int((~conv).sum())}",
              flush=True)

    ais = gpc.AIS(num_temperatures=args.temperatures, num_runs=3)
    # MCMC chains start from the three AIS end states (approximate posterior draws), so
    # the warm-up need not find the posterior's typical set from f = 0 at large sigma.
    mcmc = gpc.MCMC(num_samples=args.mcmc_samples, num_warmup=args.mcmc_samples // 2, num_chains=3, thin=args.thin)

    def gold(log_l, log_s, key):
        key_ais, key_mcmc = jax.random.split(key)
        kernel = se(log_l, log_s)
        annealed = gpc.infer(ais, kernel, PROBIT, Xtr, ytr, key=key_ais)
        sampled = gpc.infer(mcmc, kernel, PROBIT, Xtr, ytr, init=annealed.warm_start, key=key_mcmc)
        p = gpc.predict(sampled, Xte)
        return (annealed.log_marginal, annealed.log_marginal_se, annealed.log_weights,
                gpc.metrics.information_bits(yte, p, ytr))

    gold_row = gpc.jit(jax.vmap(gold))  # one row of the grid (fixed log sigma) per call
    ais_lz = np.full(L.shape, np.nan)
    ais_se = np.full(L.shape, np.nan)
    ais_runs = np.full(L.shape + (3,), np.nan)
    mcmc_info = np.full(L.shape, np.nan)
    row_seconds = []
    t_start = now()
    for r in range(L.shape[0]):
        keys = jax.random.split(jax.random.fold_in(jax.random.key(0), r), L.shape[1])
        t0 = now()
        a, b, w, c = jax.block_until_ready(gold_row(jnp.asarray(L[r]), jnp.asarray(S[r]), keys))
        row_seconds.append(now() - t0)
        ais_lz[r], ais_se[r], ais_runs[r], mcmc_info[r] = np.asarray(a), np.asarray(b), np.asarray(w), np.asarray(c)
        for j in range(L.shape[1]):
            print(
                f"  log l {L[r, j]:5.2f} log sigma {S[r, j]:5.2f}: AIS {ais_lz[r, j]:9.3f} +- {ais_se[r, j]:.3f} "
                f"(runs {np.round(ais_runs[r, j], 2).tolist()})  EP {result['ep']['log_marginal'][r][j]:9.3f}  "
                f"Laplace {result['laplace']['log_marginal'][r][j]:9.3f}  info MCMC {mcmc_info[r, j]:.3f} "
                f"EP {result['ep']['info'][r][j]:.3f} Laplace {result['laplace']['info'][r][j]:.3f}",
                flush=True,
            )
        print(f"  row {r}: {L.shape[1]} points in {row_seconds[-1]:.1f} s "
              f"(one vmapped call, compile included in row 0)", flush=True)
    result["ais"] = dict(log_marginal=ais_lz.tolist(), se=ais_se.tolist(), runs=ais_runs.tolist(),
                         seconds=now() - t_start, row_seconds=row_seconds)
    result["mcmc"] = dict(info=mcmc_info.tolist(), samples=args.mcmc_samples, chains=3, thin=args.thin,
                          init="the AIS end states")
    ep = np.array(result["ep"]["log_marginal"])
    la = np.array(result["laplace"]["log_marginal"])
    gap_ep, gap_la = ep - ais_lz, la - ais_lz
    summary = dict(
        max_abs_ep_minus_ais=float(np.nanmax(np.abs(gap_ep))),
        max_run_spread=float(np.nanmax(ais_runs.max(-1) - ais_runs.min(-1))),
        median_run_spread=float(np.nanmedian(ais_runs.max(-1) - ais_runs.min(-1))),
        median_abs_ep_minus_ais=float(np.nanmedian(np.abs(gap_ep))),
        fraction_ep_within_1_nat=float(np.mean(np.abs(gap_ep) <= 1.0)),
        laplace_minus_ais_range=[float(np.nanmin(gap_la)), float(np.nanmax(gap_la))],
        max_abs_info_ep_minus_mcmc=float(np.nanmax(np.abs(np.array(result["ep"]["info"]) - mcmc_info))),
        mean_info_laplace_minus_mcmc=float(np.nanmean(np.array(result["laplace"]["info"]) - mcmc_info)),
        argmax=dict(
            ais=_argmax(ais_lz, L, S), ep=_argmax(ep, L, S), laplace=_argmax(la, L, S),
        ),
    )
    result["summary"] = summary
    print(json.dumps(summary, indent=1), flush=True)
    record["grid"] = result
    plot_grid(result, L, S, args)


def _argmax(Z, L, S):
    i = np.unravel_index(np.nanargmax(Z), Z.shape)
    return dict(log_l=float(L[i]), log_sigma=float(S[i]), value=float(Z[i]))


def plot_grid(result, L, S, args):
    plt = pyplot()
    if plt is None:
        return
    fig, axes = plt.subplots(2, 3, figsize=(15, 8.5))
    lz = [("Laplace", result["laplace"]["log_marginal"]), ("EP", result["ep"]["log_marginal"]),
          (f"AIS (T = {args.temperatures}, R = 3)", result["ais"]["log_marginal"])]
    info = [("Laplace", result["laplace"]["info"]), ("EP", result["ep"]["info"]), ("MCMC", result["mcmc"]["info"])]
    levels = [-200, -150, -120, -100, -90, -80, -70]
    for ax, (title, Z) in zip(axes[0], lz):
        cs = ax.contour(L, S, np.array(Z), levels=levels)
        ax.clabel(cs, fontsize=7)
        ax.set_title(f"log Z: {title}")
    for ax, (title, Z) in zip(axes[1], info):
        cs = ax.contour(L, S, np.array(Z), levels=[0.25, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7])
        ax.clabel(cs, fontsize=7)
        ax.set_title(f"test information (bits): {title}")
    for ax in axes.ravel():
        ax.set_xlabel("log lengthscale")
        ax.set_ylabel("log magnitude (log sigma)")
    fig.suptitle("Ionosphere, 200 train / 151 test, probit (cf. Kuss & Rasmussen Figure 4)")
    fig.tight_layout()
    path = RESULTS / f"ionosphere_ais_grid_{L.shape[1]}x{L.shape[0]}_T{args.temperatures}.png"
    fig.savefig(path, dpi=100)
    print("saved", path)


def section_timing(args, record, data):
    Xtr, ytr, _, _ = data
    kernel = se(2.0, 2.0)
    rows = {}
    for sampler in ("elliptical_slice", "hmc"):
        markov = (gpc.samplers.HMC(step_size=0.1, num_leapfrog=10) if sampler == "hmc"
                  else gpc.samplers.EllipticalSlice())
        method = gpc.AIS(num_temperatures=args.timing_temperatures, num_runs=3, sampler=markov)
        fn = gpc.jit(lambda key, method=method: gpc.infer(method, kernel, PROBIT, Xtr, ytr, key=key).log_marginal_se)
        _, first = timed(lambda: fn(jax.random.key(0)))
        _, run = timed(lambda: fn(jax.random.key(1)))
        rows[sampler] = dict(compile_s=first - run, run_s=run)
        print(f"AIS T = {args.timing_temperatures}, R = 3, n = 200, {sampler}: "
              f"run {run:.1f} s, compile {first - run:.1f} s", flush=True)
    record["timing"] = rows


def section_marginals(args, record, data):
    from scipy import stats

    plt = pyplot()

    Xtr, ytr, _, _ = data
    fitted = gpc.fit(gpc.EP(), se(1.0, 1.0), PROBIT, Xtr, ytr, throw=False)
    kernel = fitted.kernel
    ep = gpc.infer(gpc.EP(), kernel, PROBIT, Xtr, ytr)
    la = gpc.infer(gpc.Laplace(), kernel, PROBIT, Xtr, ytr)
    # Three chains started from the end states of an AIS run (T as for the grid), 3000 samples each.
    annealed = gpc.infer(gpc.AIS(num_temperatures=args.temperatures, num_runs=3), kernel, PROBIT, Xtr, ytr,
                         key=jax.random.key(4))
    sampled = gpc.infer(gpc.MCMC(num_samples=3000, num_warmup=1000, num_chains=3, thin=10), kernel, PROBIT, Xtr, ytr,
                        init=annealed.warm_start, key=jax.random.key(3))
    print(f"at the EP ML-II point: log Z AIS {float(annealed.log_marginal):.3f} "
          f"+- {float(annealed.log_marginal_se):.3f}, "
          f"EP {float(ep.log_marginal):.3f}, Laplace {float(la.log_marginal):.3f}", flush=True)
    f = np.asarray(sampled.samples)
    skew = stats.skew(f, axis=0)
    i = int(np.argmax(np.abs(skew)))

    def marginal_variance(post):
        K = np.asarray(kernel.gram(Xtr))
        sw = np.asarray(post.sqrt_w)
        B = np.eye(len(sw)) + sw[:, None] * K * sw[None, :]
        return np.diag(K - K @ (sw[:, None] * np.linalg.solve(B, sw[:, None] * K)))

    rows = {}
    for name, post in [("Laplace", la), ("EP", ep)]:
        rows[name] = dict(mean=float(np.asarray(post.mean)[i]), var=float(marginal_variance(post)[i]))
    rows["MCMC"] = dict(mean=float(f[:, i].mean()), var=float(f[:, i].var()), skewness=float(skew[i]), index=i)
    print("most skewed marginal", json.dumps(rows), flush=True)
    if plt is not None:
        grid = np.linspace(f[:, i].min() - 2, f[:, i].max() + 2, 400)
        fig, ax = plt.subplots(figsize=(6, 4))
        ax.hist(f[:, i], bins=60, density=True, color="0.8", label=f"MCMC ({len(f)} samples)")
        for name, style in [("Laplace", "b--"), ("EP", "r-")]:
            m, v = rows[name]["mean"], rows[name]["var"]
            ax.plot(grid, stats.norm.pdf(grid, m, np.sqrt(v)), style, label=f"{name}: N({m:.2f}, {v:.2f})")
        ax.legend(fontsize=8)
        ax.set_title(f"most skewed posterior marginal f_{i} (skewness {skew[i]:.2f}), cf. K&R Figure 7(a)")
        path = RESULTS / "ionosphere_skewed_marginal.png"
        fig.tight_layout()
        fig.savefig(path, dpi=100)
        print("saved", path, flush=True)
    record["marginals"] = dict(log_l=float(jnp.log(kernel.lengthscale)),
                               log_sigma=float(0.5 * jnp.log(kernel.variance)),
                               rows=rows,
                               log_z=dict(ais=float(annealed.log_marginal), ais_se=float(annealed.log_marginal_se),
                                          ep=float(ep.log_marginal), laplace=float(la.log_marginal)))


def section_bounds(args, record, data):
    Xtr, ytr, _, _ = data
    log_l = np.linspace(*args.log_l_range, args.bounds_grid[0])
    log_s = np.linspace(*args.log_sigma_range, args.bounds_grid[1])
    ais = gpc.AIS(num_temperatures=args.temperatures, num_runs=3)

    @gpc.jit
    def all_methods(a, b, key):
        k = se(a, b)
        return (
            gpc.infer(ais, k, LOGISTIC, Xtr, ytr, key=key).log_marginal,
            gpc.infer(gpc.JaakkolaJordan(), k, LOGISTIC, Xtr, ytr, throw=False).log_marginal,
            gpc.infer(gpc.KL(), k, LOGISTIC, Xtr, ytr, throw=False).log_marginal,
            gpc.infer(gpc.JaakkolaJordanUpper(), k, LOGISTIC, Xtr, ytr, throw=False).log_marginal,
        )

    rows = []
    for a in log_l:
        for b in log_s:
            vals = [float(v) for v in all_methods(a, b, jax.random.key(7))]
            rows.append(dict(log_l=float(a), log_sigma=float(b), ais=vals[0], jj_lower=vals[1], kl=vals[2],
                             jj_upper=vals[3]))
            ok = vals[1] <= vals[0] + 0.5 and vals[2] <= vals[0] + 0.5 and vals[3] >= vals[0] - 0.5
            print(f"  log l {a:5.2f} log sigma {b:5.2f}: JJ lower {vals[1]:9.3f} <= KL {vals[2]:9.3f} "
                  f"<= AIS {vals[0]:9.3f} <= JJ upper {vals[3]:9.3f}  {'ok' if ok else 'VIOLATED'}", flush=True)
    record["bounds"] = rows


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sections", nargs="+", default=["timing", "grid", "marginals", "bounds"])
    parser.add_argument("--grid", nargs=2, type=int, default=[7, 7], help="points in log l and in log sigma")
    parser.add_argument("--bounds-grid", nargs=2, type=int, default=[4, 4])
    parser.add_argument("--log-l-range", nargs=2, type=float, default=[0.0, 5.0])
    parser.add_argument("--log-sigma-range", nargs=2, type=float, default=[-1.0, 5.0])
    parser.add_argument("--temperatures", type=int, default=32000)
    parser.add_argument("--timing-temperatures", type=int, default=8000, help="T of the timing section")
    parser.add_argument("--mcmc-samples", type=int, default=1000)
    parser.add_argument("--thin", type=int, default=2)
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    info = machine_header("Kuss & Rasmussen's Ionosphere experiments: AIS against Laplace, EP and the variational "
                          "bounds, float64", args)
    data = load_split()
    record = dict(arguments=vars(args))
    for s in args.sections:
        dict(grid=section_grid, timing=section_timing, marginals=section_marginals,
             bounds=section_bounds)[s](args, record, data)
    out = args.out.removesuffix(".json") if args.out else f"ionosphere_ais_{'_'.join(args.sections)}"
    write_results(out, info, record)


if __name__ == "__main__":
    main()
