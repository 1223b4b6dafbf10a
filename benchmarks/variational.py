"""Variational methods (Gibbs & MacKay 2000; Kuss & Rasmussen 2005 sec. 7.4): reproductions and comparisons.

    python benchmarks/variational.py                              # every section
    python benchmarks/variational.py --sections crabs toy          # Gibbs & MacKay's crabs and 1-D toy
    python benchmarks/variational.py --sections table --datasets ionosphere pima

Sections (all float64, logistic likelihood unless stated):

* ``crabs``: Gibbs & MacKay's crabs experiment: sex of the crab from the six
  features, 80 training / 120 test cases (random splits: the paper's split is
  not published; ``--crabs-splits`` of them), inputs standardised with the
  training statistics, kernel theta1 SE-ARD + theta2 (their eq. 7 without the
  jitter J, which our B = I + W^1/2 C W^1/2 factorisation does not need),
  hyperparameters by maximising the JJ lower bound (``gpc.fit``), the upper
  bound then minimised over mu at those hyperparameters.  Test errors of the
  lower- and upper-bound predictions beside their 4/120; Laplace ML-II beside.
* ``joint``: the paper's joint optimisation of Z' over (nu, theta) (optax
  L-BFGS on n + d + 2 parameters) against gpclass's nested one (``gpc.fit``
  with a Newton solve for nu inside), crabs split 0: bound reached, steps, time.
* ``toy``: a 1-D problem drawn as their Fig. 2 describes (class 1 below
  x ~ 13, class 0 up to 29, a gentle ramp back to class 1 over 29..43, class 1
  above), fitted by the lower bound with a gamma prior on the length scale;
  lower- and upper-bound predictions plotted (``results/variational_toy.png``)
  and their confidence compared.
* ``table``: on Ionosphere (200 / 151), Pima (200 / 568) and USPS 3 vs 5
  (767 / 1433: the first 767 of a random permutation of the 2200 images train,
  the rest test): log Z of Laplace, EP, JJ lower, JJ upper and KL at the same
  hyperparameters (Laplace's ML-II fit), then each method fitted by its own
  objective (JJ upper at the JJ lower fit, as in the paper) with its test
  error and information.
* ``jensen``: Kuss & Rasmussen eq. 35, the Jensen bound F at the EP posterior
  (``gpc.variational_bound``), against log Z_EP over a grid of
  (log l, log sigma_f) on Ionosphere (200 / 151, probit, as their Fig. 8):
  where each is maximal and the test information there.

Timing per evaluation is ``benchmarks/ep_timing.py --likelihood logistic``.
"""

import argparse
from time import perf_counter as now

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from harness import RESULTS, machine_header, pyplot, timed, write_results  # noqa: E402

import gpclass as gpc  # noqa: E402

LOGISTIC = gpc.likelihoods.Logistic()
LOWER, UPPER = gpc.JaakkolaJordan(), gpc.JaakkolaJordanUpper()
METHODS = {"laplace": gpc.Laplace(), "ep": gpc.EP(), "jj-lower": LOWER, "jj-upper": UPPER, "kl": gpc.KL()}
SPLITS = {"ionosphere": 200, "pima": 200, "usps35": 767}


def errors_and_info(posterior, X_test, y_test, y_train):
    p = gpc.predict(posterior, X_test)
    return float(gpc.metrics.error_rate(y_test, p)), float(gpc.metrics.information_bits(y_test, p, y_train))


# --------------------------------------------------------------------------- crabs


def section_crabs(splits, max_steps):
    X_all, y_all = gpc.datasets.load("crabs")
    d = X_all.shape[1]
    fit = gpc.jit(lambda k, X, y: gpc.fit(LOWER, k, LOGISTIC, X, y, max_steps=max_steps, throw=False))
    fit_laplace = gpc.jit(lambda k, X, y: gpc.fit(gpc.Laplace(), k, LOGISTIC, X, y, max_steps=max_steps, throw=False))
    rows = []
    for seed in range(splits):
        Xtr, Xte, ytr, yte = gpc.datasets.train_test_split(X_all, y_all, 80, seed=seed)
        Xtr, Xte = gpc.datasets.standardize(Xtr, Xte)
        kernel = gpc.kernels.SquaredExponential(1.0, jnp.full(d, np.sqrt(d))) + gpc.kernels.Constant(1.0)
        res, secs = timed(lambda kernel=kernel, Xtr=Xtr, ytr=ytr: fit(kernel, Xtr, ytr))
        upper = gpc.infer(UPPER, res.kernel, LOGISTIC, Xtr, ytr)
        lap = fit_laplace(kernel, Xtr, ytr)
        row = dict(seed=seed, lower_bound=float(res.objective), upper_bound=float(upper.log_marginal),
                   laplace_lml=float(lap.objective), converged=bool(res.converged), steps=int(res.num_steps),
                   seconds=round(secs, 1))
        for name, post in [("lower", res.posterior), ("upper", upper), ("laplace", lap.posterior)]:
            p = np.asarray(gpc.predict(post, Xte))
            row[f"errors_{name}"] = int(np.sum(np.where(p > 0.5, 1.0, -1.0) != yte))
            row[f"info_{name}"] = float(gpc.metrics.information_bits(yte, p, ytr))
        row["lengthscales"] = np.asarray(res.kernel.k1.lengthscale).round(3).tolist()
        rows.append(row)
        print(f"crabs split {seed}: errors /120 lower {row['errors_lower']:3d} upper {row['errors_upper']:3d} "
              f"laplace {row['errors_laplace']:3d}; log Z' {row['lower_bound']:8.3f} <= log Z'' "
              f"{row['upper_bound']:8.3f} (Laplace {row['laplace_lml']:8.3f}); fit conv {row['converged']} "
              f"({row['steps']} steps, {secs:.1f} s incl. compile on split 0); ARD l {row['lengthscales']}", flush=True)
    for name in ("lower", "upper", "laplace"):
        e = np.array([r[f"errors_{name}"] for r in rows])
        info = np.array([r[f"info_{name}"] for r in rows])
        print(f"crabs {name:8s}: test errors mean {e.mean():.2f} /120 (min {e.min()}, max {e.max()}), "
              f"info {info.mean():.3f} bits   [Gibbs & MacKay VGC 4/120, HMC GP 3/120]")
    return rows


# --------------------------------------------------------------------------- joint (nu, theta) optimisation


def section_joint(max_steps):
    """Gibbs & MacKay optimise Z' jointly over (nu, theta) by conjugate gradients; gpclass nests a Newton
    solve for nu inside the hyperparameter fit (envelope-theorem gradient).  Both on crabs split 0."""
    import optax

    from gpclass._inference.jaakkola_jordan import lower_bound

    X_all, y_all = gpc.datasets.load("crabs")
    Xtr, Xte, ytr, yte = gpc.datasets.train_test_split(X_all, y_all, 80, seed=0)
    Xtr, Xte = gpc.datasets.standardize(Xtr, Xte)
    d = Xtr.shape[1]
    Xtr, ytr = jnp.asarray(Xtr), jnp.asarray(ytr)
    start = gpc.kernels.SquaredExponential(1.0, jnp.full(d, np.sqrt(d))) + gpc.kernels.Constant(1.0)

    def kernel_of(p):
        return gpc.kernels.SquaredExponential(jnp.exp(p["log_v"]), jnp.exp(p["log_l"])) + gpc.kernels.Constant(
            jnp.exp(p["log_b"]))

    def negative(p):
        return -lower_bound(kernel_of(p).covariance(Xtr), ytr, p["nu"])

    @gpc.jit
    def joint(p):
        opt = optax.lbfgs()
        value_and_grad = optax.value_and_grad_from_state(negative)

        def step(carry):
            p, state, i, _ = carry
            value, grad = value_and_grad(p, state=state)
            updates, state = opt.update(grad, state, p, value=value, grad=grad, value_fn=negative)
            p = optax.apply_updates(p, updates)
            g = jnp.max(jnp.stack([jnp.max(jnp.abs(x)) for x in jax.tree.leaves(grad)]))
            return p, state, i + 1, g

        return jax.lax.while_loop(lambda c: (c[2] < 20 * max_steps) & (c[3] > 1e-5), step,
                                  (p, opt.init(p), 0, jnp.inf))

    p0 = dict(log_v=jnp.asarray(0.0), log_l=jnp.full(d, np.log(np.sqrt(d))), log_b=jnp.asarray(0.0),
              nu=jnp.sqrt(jnp.diagonal(start.gram(Xtr))))
    nested = gpc.jit(lambda k, X, y: gpc.fit(LOWER, k, LOGISTIC, X, y, max_steps=max_steps, throw=False))
    out = {}
    for name, run in [("joint L-BFGS over (theta, nu)", lambda: joint(p0)),
                      ("nested (gpc.fit, Newton in nu)", lambda: nested(start, Xtr, ytr))]:
        timed(run)  # compile
        res, secs = timed(run)
        if name.startswith("joint"):
            p, _, steps, g = res
            value, kernel = -float(negative(p)), kernel_of(p)
            post = gpc.infer(LOWER, kernel, LOGISTIC, Xtr, ytr)  # the posterior at the joint optimum's theta
        else:
            value, kernel, steps, g, post = (float(res.objective), res.kernel, res.num_steps, res.grad_norm,
                                             res.posterior)
        p_test = np.asarray(gpc.predict(post, Xte))
        errors = int(np.sum(np.where(p_test > 0.5, 1.0, -1.0) != yte))
        out[name] = dict(log_z=value, steps=int(steps), max_grad=float(g), seconds=secs, errors=errors)
        print(f"joint vs nested, {name:32s}: log Z' {value:10.5f}  steps {int(steps):5d}  max|grad| {float(g):.1e}  "
              f"run {secs:6.2f} s (compile excluded)  test errors {errors}/120", flush=True)
    return out


# --------------------------------------------------------------------------- 1-D toy


def toy_data(seed=0, n=60):
    """Their Fig. 2 description: P(t=1) is 1 below 13, 0 on (13, 29), a linear ramp to 1 on (29, 43), 1 above."""
    rng = np.random.default_rng(seed)
    x = np.sort(rng.uniform(0.0, 60.0, n))
    p1 = np.where(x < 13, 1.0, np.where(x < 29, 0.0, np.clip((x - 29) / 14, 0.0, 1.0)))
    y = np.where(rng.uniform(size=n) < p1, 1.0, -1.0)
    return x[:, None], y


def section_toy(max_steps):
    X, y = toy_data()
    kernel = gpc.kernels.SquaredExponential(1.0, 5.0) + gpc.kernels.Constant(0.1)

    def log_prior(kernel, likelihood):  # gamma priors: length scale of moderate size (their section V-A)
        return (gpc.priors.log_gamma(kernel.k1.lengthscale, 4.0, 0.4)
                + gpc.priors.log_gamma(kernel.k1.variance, 2.0, 0.1))

    res = gpc.fit(LOWER, kernel, LOGISTIC, X, y, max_steps=max_steps, log_prior=log_prior, throw=False)
    upper = gpc.infer(UPPER, res.kernel, LOGISTIC, X, y)
    grid = np.linspace(-20.0, 80.0, 401)[:, None]
    p_lower, p_upper = np.asarray(gpc.predict(res.posterior, grid)), np.asarray(gpc.predict(upper, grid))
    inside = (grid[:, 0] >= 0) & (grid[:, 0] <= 60)
    conf_l, conf_u = np.mean(np.abs(p_lower - 0.5)[inside]), np.mean(np.abs(p_upper - 0.5)[inside])
    more = np.mean((np.abs(p_lower - 0.5) >= np.abs(p_upper - 0.5))[inside])
    print(f"toy: fitted variance {float(res.kernel.k1.variance):.3f}, "
          f"length scale {float(res.kernel.k1.lengthscale):.3f}, "
          f"bias {float(res.kernel.k2.variance):.3f}; log Z' {float(res.posterior.log_marginal):.3f} <= log Z'' "
          f"{float(upper.log_marginal):.3f}; mean |p - 1/2| over [0, 60]: lower {conf_l:.3f}, upper {conf_u:.3f}; "
          f"lower at least as confident at {100 * more:.0f}% of the grid; p at x = -20 / 80: lower "
          f"{p_lower[0]:.3f} / {p_lower[-1]:.3f}, upper {p_upper[0]:.3f} / {p_upper[-1]:.3f}")
    result = dict(confidence_lower=conf_l, confidence_upper=conf_u, fraction_lower_more_confident=more)
    plt = pyplot()
    if plt is None:
        return result
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.plot(grid[:, 0], p_lower, label="lower bound (Z')")
    ax.plot(grid[:, 0], p_upper, "--", label="upper bound (Z'')")
    ax.plot(X[:, 0], (y + 1) / 2, "k|", markersize=12, label="training data (t)")
    ax.set_xlabel("x")
    ax.set_ylabel("P(t = 1 | x, D)")
    ax.set_title("Gibbs & MacKay Fig. 2 style: 1-D toy, JJ lower- vs upper-bound predictions")
    ax.legend(loc="center right")
    fig.tight_layout()
    path = RESULTS / "variational_toy.png"
    fig.savefig(path, dpi=110)
    print(f"toy: plot {path}")
    return result


# --------------------------------------------------------------------------- comparison table


def section_table(datasets, max_steps):
    rows = []
    for name in datasets:
        X, y = gpc.datasets.load(name)
        Xtr, Xte, ytr, yte = gpc.datasets.train_test_split(X, y, SPLITS[name], seed=0)
        if name != "usps35":
            Xtr, Xte = gpc.datasets.standardize(Xtr, Xte)
        d = X.shape[1]
        start = gpc.kernels.SquaredExponential(np.exp(2.0), np.sqrt(d) if name != "usps35" else np.exp(2.85))
        t0 = now()
        lap = gpc.fit(gpc.Laplace(), start, LOGISTIC, Xtr, ytr, max_steps=max_steps, throw=False)
        kernel = lap.kernel
        values = {m: float(gpc.infer(METHODS[m], kernel, LOGISTIC, Xtr, ytr).log_marginal) for m in METHODS}
        print(f"table {name} (n = {len(ytr)}, logistic, SE at Laplace's ML-II fit log sf "
              f"{0.5 * np.log(float(kernel.variance)):.3f}, log l {np.log(float(kernel.lengthscale)):.3f}): log Z "
              + "  ".join(f"{m} {v:.3f}" for m, v in values.items()), flush=True)
        fits = {"laplace": lap}
        for m in ("ep", "jj-lower", "kl"):
            fits[m] = gpc.fit(METHODS[m], start, LOGISTIC, Xtr, ytr, max_steps=max_steps, throw=False)
        row = dict(dataset=name, n_train=len(ytr), n_test=len(yte), log_z_at_laplace_fit=values, fitted={})
        for m, res in fits.items():
            err, info = errors_and_info(res.posterior, Xte, yte, ytr)
            row["fitted"][m] = dict(objective=float(res.objective), error=err, info=info, converged=bool(res.converged),
                                    log_sf=0.5 * float(np.log(res.kernel.variance)),
                                    log_l=float(np.log(res.kernel.lengthscale)))
        upper = gpc.infer(UPPER, fits["jj-lower"].kernel, LOGISTIC, Xtr, ytr)
        err, info = errors_and_info(upper, Xte, yte, ytr)
        row["fitted"]["jj-upper (at jj-lower fit)"] = dict(objective=float(upper.log_marginal), error=err, info=info,
                                                          converged=bool(upper.info.converged))
        for m, f in row["fitted"].items():
            where = f" at (log sf, log l) = ({f['log_sf']:.2f}, {f['log_l']:.2f})" if "log_sf" in f else ""
            print(f"table {name} fitted {m:27s}: objective {f['objective']:9.3f}{where}  test error "
                  f"{100 * f['error']:5.2f} %  info {f['info']:.3f} bits  converged {f['converged']}", flush=True)
        print(f"table {name}: {now() - t0:.1f} s")
        rows.append(row)
    return rows


# --------------------------------------------------------------------------- EP Jensen bound vs EP evidence


def section_jensen(grid_size):
    X, y = gpc.datasets.load("ionosphere")
    Xtr, Xte, ytr, yte = gpc.datasets.train_test_split(X, y, 200, seed=0)
    Xtr, Xte = gpc.datasets.standardize(Xtr, Xte)
    probit = gpc.likelihoods.Probit()
    log_l = np.linspace(-1.0, 5.0, grid_size)
    log_sf = np.linspace(-1.0, 5.0, grid_size)
    LL, SS = np.meshgrid(log_l, log_sf)

    from gpclass._inference.kl import elbo

    def at(ll, ls):
        kernel = gpc.kernels.SquaredExponential(jnp.exp(2 * ls), jnp.exp(ll))
        post = gpc.infer(gpc.EP(schedule="parallel"), kernel, probit, Xtr, ytr, throw=False)
        p = gpc.predict(post, Xte)
        # K&R eq. 35c at q_EP, written in the sites' B-form (E_q log p - KL(q || p), no K^-1): equal to
        # gpc.variational_bound(post, ytr), which inverts K and is NaN where the SE Gram matrix is
        # numerically singular (long length scales on this grid).
        bound = elbo(kernel.gram(Xtr), probit, ytr, *post.warm_start)
        laplace = gpc.infer(gpc.Laplace(), kernel, probit, Xtr, ytr, throw=False)
        return (post.log_marginal, bound, laplace.log_marginal, gpc.metrics.information_bits(yte, p, ytr),
                post.info.converged & laplace.info.converged)

    values, secs = timed(lambda: gpc.jit(jax.vmap(at))(jnp.asarray(LL.ravel()), jnp.asarray(SS.ravel())))
    log_z, bound, laplace, info, conv = (np.asarray(a).reshape(LL.shape) for a in values)
    out = {}
    for name, Z in [("log Z_EP", log_z), ("Jensen bound at q_EP", bound), ("log Z_Laplace", laplace)]:
        Z = np.where(conv, Z, -np.inf)
        i, j = np.unravel_index(np.argmax(Z), Z.shape)
        out[name] = dict(log_l=float(LL[i, j]), log_sf=float(SS[i, j]), value=float(Z[i, j]), info=float(info[i, j]))
        print(f"jensen {name:21s}: max {Z[i, j]:9.3f} at (log l, log sf) = ({LL[i, j]:.2f}, {SS[i, j]:.2f}); "
              f"EP's test information there {info[i, j]:.3f} bits")
    ok = conv & np.isfinite(bound)
    gap_ep, gap_laplace = (log_z - bound)[ok], np.abs(laplace - bound)[ok]
    bad = [(float(a), float(b)) for a, b in zip(LL[~np.isfinite(bound)], SS[~np.isfinite(bound)])]
    print(f"jensen: log Z_EP - bound: median {np.median(gap_ep):.2f}, max {np.max(gap_ep):.2f} nats; "
          f"|log Z_Laplace - bound|: median {np.median(gap_laplace):.2f}, max {np.max(gap_laplace):.2f}; "
          f"bound not finite at {len(bad)} points (log l, log sf): {bad[:6]}")
    print(f"jensen: {grid_size} x {grid_size} grid in one vmapped call, {secs:.1f} s incl. compile; "
          f"bound <= log Z_EP everywhere: {bool(np.all(bound[conv] <= log_z[conv] + 1e-9))}; "
          f"not converged: {int((~conv).sum())}; best information on the grid {np.max(info[conv]):.3f} bits")
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", nargs="+", default=["crabs", "joint", "toy", "table", "jensen"],
                        choices=["crabs", "joint", "toy", "table", "jensen"])
    parser.add_argument("--datasets", nargs="+", default=list(SPLITS), choices=list(SPLITS))
    parser.add_argument("--crabs-splits", type=int, default=10)
    parser.add_argument("--grid", type=int, default=25, help="grid points per axis of the jensen section")
    parser.add_argument("--max-steps", type=int, default=200)
    parser.add_argument("--out", default=None,
                        help="name of the JSON file in benchmarks/results/ (default: by sections)")
    args = parser.parse_args()
    info = machine_header("Variational bounds (Gibbs & MacKay, Opper & Archambeau, Kuss & Rasmussen eq. 35), float64",
                          args)
    RESULTS.mkdir(exist_ok=True)
    out = {}
    if "crabs" in args.sections:
        out["crabs"] = section_crabs(args.crabs_splits, args.max_steps)
    if "joint" in args.sections:
        out["joint"] = section_joint(args.max_steps)
    if "toy" in args.sections:
        out["toy"] = section_toy(args.max_steps)
    if "table" in args.sections:
        out["table"] = section_table(args.datasets, args.max_steps)
    if "jensen" in args.sections:
        out["jensen"] = section_jensen(args.grid)
    write_results(args.out or "variational_" + "_".join(args.sections), info, out)


if __name__ == "__main__":
    main()
