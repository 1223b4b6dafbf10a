"""USPS 3s vs 5s on a grid of (log l, log sigma_f): GPML Figures 3.7 (Laplace) and 3.8 (EP), probit likelihood.

    python benchmarks/usps35_grid.py                          # 11 x 11 grid, Laplace and EP
    python benchmarks/usps35_grid.py --grid 5 5               # smoke run
    python benchmarks/usps35_grid.py --grid 21 21 --methods laplace

What is reproduced.  Rasmussen & Williams, GPML section 3.7.3, Figures 3.7
and 3.8: the approximate log marginal likelihood log q(y|X, theta) and the
information about the test labels (bits, GPML eq. 3.76: mean log2 p(y*|x*)
plus the entropy of the training labels) as functions of
theta = (log l, log sigma_f) of the squared-exponential kernel
sigma_f^2 exp(-|x - x'|^2 / (2 l^2)), for Laplace's method and for EP, with
the probit likelihood; also the number of test errors (threshold 1/2),
GPML's panel (d).  GPML's grid: log l in [1, 5], log sigma_f in [0, 5]
(17 x 23 points).  GPML reports the Laplace maximum -99 at (2.85, 2.35) with
21 test errors there (15 the fewest on the grid), and for EP about -90 at
(2.6, 4.1) on a ridge that extends towards large log sigma_f.

How.
  * Data: ``gpc.datasets.load("usps35")`` (2200 images, pixels in [-1, 1]);
    ``p = numpy.random.default_rng(0).permutation(2200)``; training cases
    p[:767], test cases p[767:1540] (GPML's sizes; the same 1540 images as
    benchmarks/kuss_rasmussen_table1.py).  Not GPML's sample of the USPS
    database: compare the shapes and locations, not the exact values.
  * One ``gpc.jit(jax.vmap(...))`` call per method over all grid points,
    each point ``gpc.infer`` + ``gpc.predict`` + metrics, from the
    default start (f = 0, all EP sites 0).  ``gpc.Laplace()``
    and ``gpc.EP(schedule="parallel")`` with ``throw=False``: the parallel schedule
    because a sequential sweep is a ``lax.scan`` of n rank-one updates of the
    n x n Sigma, which vmapped over the grid is far slower (same fixed point).
    Points whose inner solve did not converge are counted, left out of the
    maxima and blanked in the plots.  Under vmap the while loops run until the
    slowest point has converged, so the run time is set by the largest
    number of Newton steps / EP sweeps on the grid.
  * Compile time (``.lower(...).compile()``) is reported apart from run time.
  * Maxima: the grid point with the largest log q(y|X, theta) and a sub-grid
    estimate of its location: the maximum of a quadratic fitted to its 3 x 3
    neighbourhood, or, for a maximum on one border of the grid (EP's ridge
    runs off the top), of a parabola through the three points along the border.

Outputs (in --outdir, default benchmarks/results/): usps35_grid_<method>_<N>x<M>.png
(contours of log q and of the information, and the test-error table) and
usps35_grid_<N>x<M>.json (every grid value, timings, maxima).
"""

import argparse
import os
from pathlib import Path

# Single-threaded OpenBLAS (jaxlib's CPU LAPACK is scipy's OpenBLAS): on this small, shared machine its
# worker threads stall behind XLA's and other processes' threads (see benchmarks/README.md); a fit
# measured 429 s with the default threads and 13 s with one.  Set OPENBLAS_NUM_THREADS to override.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from harness import RESULTS, machine_header, pyplot, timed, write_results  # noqa: E402

import gpclass as gpc  # noqa: E402

LIK = gpc.likelihoods.Probit()
N_TRAIN, N_TEST, SPLIT_SEED = 767, 773, 0
LOG_L_RANGE, LOG_SF_RANGE = (1.0, 5.0), (0.0, 5.0)  # GPML Figures 3.7 and 3.8
# GPML's maxima: (log l, log sigma_f, log q, test errors there).
PUBLISHED = {"laplace": dict(log_l=2.85, log_sf=2.35, log_marginal=-99.0, errors=21),
             "ep": dict(log_l=2.6, log_sf=4.1, log_marginal=-90.0, errors=None)}


def load_split():
    """GPML-sized split of usps35: 767 training and 773 test cases, pixels in [-1, 1]."""
    X, y = gpc.datasets.load("usps35")
    perm = np.random.default_rng(SPLIT_SEED).permutation(len(y))
    train, test = perm[:N_TRAIN], perm[N_TRAIN:N_TRAIN + N_TEST]
    return X[train], y[train], X[test], y[test]


def make_method(name, max_steps, max_sweeps):
    if name == "laplace":
        return gpc.Laplace(max_steps=max_steps)
    return gpc.EP(schedule="parallel", max_steps=max_sweeps)


def grid_function(method):
    """jit(vmap) over grid points of: posterior, predictions and metrics at one (log l, log sigma_f)."""

    def one_point(log_l, log_sf, X_train, y_train, X_test, y_test):
        kernel = gpc.kernels.SquaredExponential(variance=jnp.exp(2.0 * log_sf), lengthscale=jnp.exp(log_l))
        post = gpc.infer(method, kernel, LIK, X_train, y_train, throw=False)
        p = gpc.predict(post, X_test)
        return dict(
            log_marginal=post.log_marginal,
            info=gpc.metrics.information_bits(y_test, p, y_train),
            errors=jnp.sum((p > 0.5) != (y_test > 0)),
            norm_m=jnp.linalg.norm(post.mean),
            steps=post.info.num_steps,
            converged=post.info.converged,
        )

    return gpc.jit(jax.vmap(one_point, in_axes=(0, 0, None, None, None, None)))


def run_grid(method, log_l, log_sf, data):
    """One vmapped call over the flattened grid; compile and run timed separately."""
    args = (jnp.asarray(log_l.ravel()), jnp.asarray(log_sf.ravel()), *(jnp.asarray(a) for a in data))
    compiled, compile_time = timed(lambda: grid_function(method).lower(*args).compile())
    out, run_time = timed(lambda: compiled(*args))
    return {k: np.asarray(v).reshape(log_l.shape) for k, v in out.items()}, compile_time, run_time


def quadratic_peak(Z, i, j, x, y):
    """Sub-grid estimate of the maximum at grid point Z[i, j] (rows: y, columns: x), or None.

    Inside the grid: the maximum of a quadratic fitted (least squares) to the
    3 x 3 neighbourhood.  On one border (a maximum that runs off the grid,
    e.g. EP's ridge towards large log sigma_f): a parabola through the three
    points along that border, which locates the ridge in the other variable.
    """
    inside_i, inside_j = 0 < i < Z.shape[0] - 1, 0 < j < Z.shape[1] - 1
    if inside_i and inside_j:
        xs, ys = np.meshgrid(x[j - 1:j + 2] - x[j], y[i - 1:i + 2] - y[i])
        zs = Z[i - 1:i + 2, j - 1:j + 2]
        if not np.all(np.isfinite(zs)):
            return None
        A = np.stack([np.ones(9), xs.ravel(), ys.ravel(), xs.ravel() ** 2, xs.ravel() * ys.ravel(), ys.ravel() ** 2], 1)
        c = np.linalg.lstsq(A, zs.ravel(), rcond=None)[0]
        H = np.array([[2 * c[3], c[4]], [c[4], 2 * c[5]]])
        if np.any(np.linalg.eigvalsh(H) >= 0):  # not a maximum
            return None
        delta = np.linalg.solve(H, -c[1:3])
        if np.any(np.abs(delta) > 0.75 * np.array([x[1] - x[0], y[1] - y[0]])):  # not near the grid maximum
            return None
        value = c[0] + c[1:3] @ delta + 0.5 * delta @ H @ delta
        return dict(log_l=float(x[j] + delta[0]), log_sf=float(y[i] + delta[1]), log_marginal=float(value),
                    fit="3 x 3 quadratic")
    if inside_j:  # on the bottom or top row: parabola in log l
        dx, z = _parabola_peak(Z[i, j - 1:j + 2], x[1] - x[0])
        return None if dx is None else dict(log_l=float(x[j] + dx), log_sf=float(y[i]), log_marginal=z,
                                            fit="parabola in log l along the border")
    if inside_i:  # on the left or right column: parabola in log sigma_f
        dy, z = _parabola_peak(Z[i - 1:i + 2, j], y[1] - y[0])
        return None if dy is None else dict(log_l=float(x[j]), log_sf=float(y[i] + dy), log_marginal=z,
                                            fit="parabola in log sigma_f along the border")
    return None


def _parabola_peak(z, h):
    """Offset and value of the maximum of the parabola through (-h, z0), (0, z1), (h, z2); None if not a maximum."""
    curvature = z[0] - 2 * z[1] + z[2]
    if not np.all(np.isfinite(z)) or curvature >= 0:
        return None, None
    offset = 0.5 * h * (z[0] - z[2]) / curvature
    return float(offset), float(z[1] - (z[0] - z[2]) ** 2 / (8 * curvature))


def summarise(out, log_l_axis, log_sf_axis):
    """Maximum of log q over the converged points, the metrics there, and grid-wide extremes."""
    ok = out["converged"]
    lml = np.where(ok, out["log_marginal"], -np.inf)
    i, j = np.unravel_index(np.argmax(lml), lml.shape)
    info = np.where(ok, out["info"], -np.inf)
    ii, ij = np.unravel_index(np.argmax(info), info.shape)
    errors = np.where(ok, out["errors"], np.iinfo(np.int64).max)
    return dict(
        points=int(ok.size),
        not_converged=int(ok.size - ok.sum()),
        not_converged_at=[(float(log_l_axis[b]), float(log_sf_axis[a])) for a, b in zip(*np.nonzero(~ok))],
        max_steps_taken=int(out["steps"].max()),
        max=dict(log_l=float(log_l_axis[j]), log_sf=float(log_sf_axis[i]), log_marginal=float(lml[i, j]),
                 info=float(out["info"][i, j]), errors=int(out["errors"][i, j]), norm_m=float(out["norm_m"][i, j]),
                 on_border=bool(i in (0, lml.shape[0] - 1) or j in (0, lml.shape[1] - 1))),
        max_refined=quadratic_peak(np.where(ok, out["log_marginal"], np.nan), i, j, log_l_axis, log_sf_axis),
        max_info=dict(log_l=float(log_l_axis[ij]), log_sf=float(log_sf_axis[ii]), info=float(info[ii, ij])),
        min_errors=int(errors.min()),
    )


def plot(name, out, summary, log_l_axis, log_sf_axis, path):
    """GPML-style panels: (a) log q contours, (b) information contours, (c) test errors; False without matplotlib."""
    plt = pyplot()
    if plt is None:
        return False
    ok = out["converged"]
    lml = np.where(ok, out["log_marginal"], np.nan)
    info = np.where(ok, out["info"], np.nan)
    top = summary["max"]["log_marginal"]
    pub = PUBLISHED[name]
    fig, axes = plt.subplots(1, 3, figsize=(17, 5.2))
    lml_levels = np.sort(top - np.array([500, 200, 100, 50, 20, 10, 5, 2, 1]))
    info_levels = np.array([0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9])
    panels = [(lml, lml_levels, "log q(y|X, theta)"), (info, info_levels, "information about test labels (bits)")]
    for ax, (Z, lev, title) in zip(axes[:2], panels):
        lev = lev[(lev > np.nanmin(Z)) & (lev < np.nanmax(Z))]
        cs = ax.contour(log_l_axis, log_sf_axis, Z, levels=lev if len(lev) > 1 else 10)
        ax.clabel(cs, fontsize=7, fmt="%.4g")
        ax.set_title(title)
    dl, ds = log_l_axis[1] - log_l_axis[0], log_sf_axis[1] - log_sf_axis[0]  # cells centred on the grid points
    axes[2].imshow(np.where(ok, out["errors"], np.nan), origin="lower", aspect="auto", cmap="viridis",
                   extent=[log_l_axis[0] - dl / 2, log_l_axis[-1] + dl / 2, log_sf_axis[0] - ds / 2,
                           log_sf_axis[-1] + ds / 2])
    if len(log_l_axis) * len(log_sf_axis) <= 21 * 21:
        for a, s in enumerate(log_sf_axis):
            for b, log_l in enumerate(log_l_axis):
                text = str(int(out["errors"][a, b])) if ok[a, b] else "x"
                axes[2].text(log_l, s, text, ha="center", va="center", fontsize=6 if len(log_l_axis) > 11 else 8,
                             color="w")
    axes[2].set_title(f"test errors (out of {N_TEST}); fewest {summary['min_errors']}")
    for ax in axes:
        ax.plot(summary["max"]["log_l"], summary["max"]["log_sf"], "r+", ms=14, mew=2, label="our max log q")
        ax.plot(pub["log_l"], pub["log_sf"], "k*", ms=10, label="GPML's max")
        ax.set_xlabel("log lengthscale, log(l)")
        ax.set_ylabel("log magnitude, log(sigma_f)")
    axes[0].legend(loc="lower right", fontsize=8)
    fig.suptitle(f"USPS 3s vs 5s, {N_TRAIN} train / {N_TEST} test, probit, {name}: max log q = {top:.1f} at "
                 f"(log l, log sf) = ({summary['max']['log_l']:.2f}, {summary['max']['log_sf']:.2f}); "
                 f"GPML {pub['log_marginal']:.0f} at ({pub['log_l']}, {pub['log_sf']})")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def print_summary(name, s, compile_time, run_time):
    m, pub, r = s["max"], PUBLISHED[name], s["max_refined"]
    iterations = "Newton steps" if name == "laplace" else "sweeps"
    print(f"  {name}: compile {compile_time:.1f} s, run {run_time:.1f} s for {s['points']} points "
          f"({run_time / s['points']:.2f} s/point); largest number of {iterations} "
          f"{s['max_steps_taken']}; not converged: {s['not_converged']} of {s['points']}"
          + (f" at {s['not_converged_at']}" if s["not_converged"] else ""))
    print(f"    max log q = {m['log_marginal']:.2f} at grid point (log l, log sf) = "
          f"({m['log_l']:.2f}, {m['log_sf']:.2f}){' [on the grid border]' if m['on_border'] else ''}; "
          f"info {m['info']:.3f} bits, {m['errors']} test errors, |m| {m['norm_m']:.1f}")
    if r is not None:
        print(f"    sub-grid estimate ({r['fit']}): max {r['log_marginal']:.2f} at "
              f"({r['log_l']:.2f}, {r['log_sf']:.2f})")
    print(f"    GPML: max {pub['log_marginal']:.0f} at ({pub['log_l']}, {pub['log_sf']})"
          + (f", {pub['errors']} test errors there" if pub["errors"] is not None else ""))
    print(f"    most information on the grid: {s['max_info']['info']:.3f} bits at ({s['max_info']['log_l']:.2f}, "
          f"{s['max_info']['log_sf']:.2f}); fewest test errors on the grid: {s['min_errors']} (GPML Laplace: 15)")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid", type=int, nargs=2, default=[11, 11], metavar=("N_LOG_L", "N_LOG_SF"),
                        help="grid points in log l (over [1, 5]) and log sigma_f (over [0, 5]); default 11 11")
    parser.add_argument("--methods", nargs="+", default=["laplace", "ep"], choices=["laplace", "ep"])
    parser.add_argument("--max-steps", type=int, default=100, help="Laplace: largest number of Newton steps")
    parser.add_argument("--max-sweeps", type=int, default=200, help="EP: largest number of sweeps")
    parser.add_argument("--outdir", default=str(RESULTS))
    args = parser.parse_args(argv)

    info = machine_header("USPS 3 vs 5 grid (GPML Fig. 3.7 / 3.8), probit, float64", args)
    outdir = Path(args.outdir).resolve()
    outdir.mkdir(parents=True, exist_ok=True)
    data = load_split()
    log_l_axis = np.linspace(*LOG_L_RANGE, args.grid[0])
    log_sf_axis = np.linspace(*LOG_SF_RANGE, args.grid[1])
    log_l, log_sf = np.meshgrid(log_l_axis, log_sf_axis)  # rows: log sigma_f, columns: log l
    tag = f"{args.grid[0]}x{args.grid[1]}"
    results = {}
    for name in args.methods:
        method = make_method(name, args.max_steps, args.max_sweeps)
        print(f"--- {name}: {method}, {log_l.size} points, one vmapped call", flush=True)
        out, compile_time, run_time = run_grid(method, log_l, log_sf, data)
        summary = summarise(out, log_l_axis, log_sf_axis)
        print_summary(name, summary, compile_time, run_time)
        png = outdir / f"usps35_grid_{name}_{tag}.png"
        if plot(name, out, summary, log_l_axis, log_sf_axis, png):
            print(f"    plot: {png}", flush=True)
        results[name] = dict(summary=summary, published=PUBLISHED[name], compile_time=compile_time,
                             run_time=run_time, grid={k: v.tolist() for k, v in out.items()})
        write_results(str(outdir / f"usps35_grid_{tag}"), info,
                      dict(arguments=vars(args), split=f"default_rng({SPLIT_SEED}).permutation(2200): "
                           f"[:{N_TRAIN}] train, [{N_TRAIN}:{N_TRAIN + N_TEST}] test",
                           log_l=log_l_axis.tolist(), log_sf=log_sf_axis.tolist(), results=results))


if __name__ == "__main__":
    main()
