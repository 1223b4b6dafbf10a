"""Laplace GP classification: gpclass (JAX, jit) versus scikit-learn, on USPS 3 vs 5.

    python benchmarks/laplace_vs_sklearn.py                      # n = 500 1000 2000, 256 small sets
    python benchmarks/laplace_vs_sklearn.py --quick              # smoke run (small sizes, 32 small sets)
    python benchmarks/laplace_vs_sklearn.py --sizes 500 1000 --repeats 7 --no-profile
    env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE python benchmarks/laplace_vs_sklearn.py
    python benchmarks/laplace_vs_sklearn.py --blas-threads 1     # single-threaded BLAS (robust on busy machines)

Everything runs in float64, logistic likelihood, squared-exponential kernel
k(x, x') = sf^2 exp(-|x - x'|^2 / (2 l^2)), which in scikit-learn is
``ConstantKernel(sf^2) * RBF(l)``; both libraries use the hyperparameters
theta = (log sf^2, log l).  Training sets are the first n rows of usps35 after a
fixed random permutation.

Sections
  1. one log marginal likelihood + gradient evaluation (gpclass: jitted
     jax.value_and_grad w.r.t. the log hyperparameters; sklearn:
     ``log_marginal_likelihood(theta, eval_gradient=True)``, which re-runs the
     Newton iterations from f = 0); agreement of value and gradient.
  2. one n x n Cholesky (jitted jnp.linalg.cholesky and scipy.linalg.cholesky)
     and the number of Newton steps, to compare with the floor
     "one Cholesky per Newton step plus a few for the gradient".
  3. a full ML-II fit from the same start (gpclass.fit with L-BFGS versus
     sklearn's fmin_l_bfgs_b with bounds wide enough not to bind).
  4. throughput: one jax.vmap of gpclass.fit over many small random subsets of
     usps35 versus a Python loop of sklearn fits.
  P. (unless --no-profile) where gpclass's time goes: the Newton solve alone,
     the gradient's share, warm starts, single operations, and the number of
     objective evaluations / Newton steps inside gpclass.fit.

Times are medians over --repeats calls (gpclass and sklearn calls interleaved,
so both see the same machine load), measured with time.perf_counter after
jax.block_until_ready.  Compile time = first call minus a later call.
"""

import argparse
import os
import sys
import warnings
from time import perf_counter as now
from typing import NamedTuple

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import jax.scipy.linalg as jsl  # noqa: E402
import numpy as np  # noqa: E402
import scipy  # noqa: E402
import scipy.linalg  # noqa: E402
import sklearn.gaussian_process._gpc as sk_gpc  # noqa: E402
from harness import fmt_t, interleaved, load_average, machine_header, median_time, timed, write_results  # noqa: E402
from sklearn.gaussian_process import GaussianProcessClassifier  # noqa: E402
from sklearn.gaussian_process.kernels import RBF, ConstantKernel  # noqa: E402

import gpclass as gpc  # noqa: E402
from gpclass import _dense as gpc_dense  # noqa: E402

LOG_SF = 2.35  # GPML's region for USPS 3 vs 5 (log sigma_f)
LOG_L = 2.85  # log length scale
BOUNDS = (1e-20, 1e20)  # sklearn bounds on sf^2 and l: |log| <= 46, never binding here
LIK = gpc.likelihoods.Logistic()
SUMMARY = []  # (section, quantity, value) rows for the final table


# --------------------------------------------------------------------------- helpers


def add(section, quantity, value):
    SUMMARY.append((section, quantity, value))


def se_kernel(log_v, log_l):
    return gpc.kernels.SquaredExponential(variance=jnp.exp(log_v), lengthscale=jnp.exp(log_l))


def sk_kernel(log_v, log_l):
    return ConstantKernel(float(np.exp(log_v)), constant_value_bounds=BOUNDS) * RBF(
        float(np.exp(log_l)), length_scale_bounds=BOUNDS
    )


class SklearnCounter:
    """Counts sklearn's Newton iterations (one Cholesky each) and objective evaluations.

    Patches ``scipy.linalg.cholesky`` as imported by sklearn's _gpc module and
    the binary Laplace estimator's ``log_marginal_likelihood``; the overhead is
    one Python counter increment per call.
    """

    def __init__(self):
        self.cholesky = 0
        self.evals = 0

    def __enter__(self):
        self._chol = sk_gpc.cholesky
        self._lml = sk_gpc._BinaryGaussianProcessClassifierLaplace.log_marginal_likelihood
        orig_chol, orig_lml, counter = self._chol, self._lml, self

        def cholesky(*args, **kwargs):
            counter.cholesky += 1
            return orig_chol(*args, **kwargs)

        def log_marginal_likelihood(est, theta=None, eval_gradient=False, clone_kernel=True):
            if theta is not None:
                counter.evals += 1
            return orig_lml(est, theta, eval_gradient, clone_kernel)

        sk_gpc.cholesky = cholesky
        sk_gpc._BinaryGaussianProcessClassifierLaplace.log_marginal_likelihood = log_marginal_likelihood
        return self

    def __exit__(self, *exc):
        sk_gpc.cholesky = self._chol
        sk_gpc._BinaryGaussianProcessClassifierLaplace.log_marginal_likelihood = self._lml
        return False


# Instrumented kernel / likelihood for the profile: host callbacks count, at run
# time, every Gram matrix built (= one inner solve, with or without gradient),
# every reverse pass through the Gram matrix (= one gradient evaluation), and
# every call of likelihood.derivatives (= one per Newton step, one after the
# mode, one in the implicit-gradient backward pass).
COUNTS = {"gram": 0, "grad": 0, "derivatives": 0}


def _count(name):
    def callback(*_):
        COUNTS[name] += 1

    return callback


@jax.custom_vjp
def _tap(K):
    return K


def _tap_fwd(K):
    return K, None


def _tap_bwd(_, K_bar):
    jax.debug.callback(_count("grad"))
    return (K_bar,)


_tap.defvjp(_tap_fwd, _tap_bwd)


class CountingSE(gpc.kernels.SquaredExponential):
    def gram(self, X1, X2=None):
        jax.debug.callback(_count("gram"))
        return _tap(super().gram(X1, X2))


class CountingLogistic(gpc.likelihoods.Logistic):
    def derivatives(self, y, f):
        jax.debug.callback(_count("derivatives"))
        return super().derivatives(y, f)


# --------------------------------------------------------------------------- header


def header(args):
    """The machine (harness) and what matters here beyond it: the BLAS thread pools and whether they stall."""
    from threadpoolctl import threadpool_info

    # jaxlib's CPU LAPACK kernels (potrf, trsm) are scipy's cython_lapack, i.e. scipy's
    # OpenBLAS; make sure it is loaded before asking threadpoolctl.
    jax.block_until_ready(jnp.linalg.cholesky(jnp.eye(2)))
    info = machine_header("gpclass Laplace vs scikit-learn GaussianProcessClassifier -- USPS 3 vs 5, logistic, "
                          f"SE kernel, float64 (scipy {scipy.__version__})", args)
    print(f"  OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '<unset>')}  "
          f"OPENBLAS_L2_SIZE={os.environ.get('OPENBLAS_L2_SIZE', '<unset>')}")
    print("threadpoolctl.threadpool_info():")
    for lib in threadpool_info():
        which = "numpy" if "numpy" in lib.get("filepath", "") else (
            "scipy (+ jaxlib LAPACK)" if "scipy" in lib.get("filepath", "") else "?")
        print(f"  {lib.get('user_api')}: internal_api={lib.get('internal_api')}  "
              f"kernel/architecture={lib.get('architecture')}  version={lib.get('version')}  "
              f"threads={lib.get('num_threads')}  [{which}] {os.path.basename(lib.get('filepath', ''))}")
    info["threadpools"] = threadpool_info()
    stall_check()
    print()
    return info


def stall_check(n=400, calls=10):
    """Warn when multi-threaded OpenBLAS stalls (several thread pools on few, busy cores).

    numpy and scipy each bring an OpenBLAS with its own thread pool, XLA has
    another; on a small or loaded machine, a multi-threaded LAPACK call can then
    wait for descheduled worker threads for hundreds of milliseconds.
    """
    from threadpoolctl import threadpool_limits

    A = np.random.default_rng(1).normal(size=(n, n))
    S = A @ A.T + n * np.eye(n)

    def times():
        scipy.linalg.cholesky(S, lower=True)  # warm-up (thread start-up, first touch)
        np.dot(S, S[:, 0])
        out = []
        for _ in range(calls):
            t0 = now()
            scipy.linalg.cholesky(S, lower=True)
            np.dot(S, S[:, 0])  # touch numpy's BLAS too, as sklearn does between LAPACK calls
            out.append(now() - t0)
        return np.array(out)

    default = times()
    with threadpool_limits(limits=1):
        single = times()
    ratio = np.median(default) / np.median(single)
    print(f"stall check ({calls} x scipy cholesky {n}x{n} + numpy matvec): current threads median "
          f"{fmt_t(np.median(default))} (max {fmt_t(default.max())}), 1 BLAS thread median {fmt_t(np.median(single))}"
          f" -> {ratio:.1f}x")
    if ratio > 3 or default.max() > 20 * np.median(single):
        print("  WARNING: multi-threaded OpenBLAS is stalling on this machine right now (thread pools fighting for "
              "cores); timings below may be distorted by such stalls. Compare with --blas-threads 1.")


# --------------------------------------------------------------------------- sections


def section_eval(X_all, y_all, n, args, profile_rows):
    """Sections 1 and 2 (and the profile P) for training size n."""
    print(f"--- n = {n}: one log marginal likelihood + gradient evaluation ({load_average()})")
    Xn, yn = X_all[:n], y_all[:n]
    Xj, yj = jnp.asarray(Xn), jnp.asarray(yn)
    lv0, ll0 = jnp.asarray(2 * LOG_SF), jnp.asarray(LOG_L)

    def lml(log_v, log_l, X, y):
        return gpc.infer(gpc.Laplace(), se_kernel(log_v, log_l), LIK, X, y).log_marginal

    vg = gpc.jit(jax.value_and_grad(lml, argnums=(0, 1)))
    infer = gpc.jit(lambda log_v, log_l, X, y, init: gpc.infer(
        gpc.Laplace(), se_kernel(log_v, log_l), LIK, X, y, init=init))

    (value_gp, grad_gp), t_first = timed(lambda: vg(lv0, ll0, Xj, yj))

    sk = GaussianProcessClassifier(sk_kernel(2 * LOG_SF, LOG_L), optimizer=None).fit(Xn, yn)
    theta = sk.kernel_.theta
    assert np.allclose(theta, [2 * LOG_SF, LOG_L]), theta
    with SklearnCounter() as count:
        value_sk, grad_sk = sk.log_marginal_likelihood(theta, eval_gradient=True)
    sk_newton = count.cholesky

    res = interleaved({
        "gp": lambda: vg(lv0, ll0, Xj, yj),
        "sk": lambda: sk.log_marginal_likelihood(theta, eval_gradient=True),
    }, args.repeats)
    t_gp, t_sk = res["gp"][0], res["sk"][0]
    compile_vg = t_first - t_gp

    post = jax.block_until_ready(infer(lv0, ll0, Xj, yj, None))
    steps = int(post.info.num_steps)
    grad_gp = np.array([float(grad_gp[0]), float(grad_gp[1])])
    rel_val = abs(float(value_gp) - value_sk) / abs(value_sk)
    rel_grad = np.abs(grad_gp - grad_sk) / np.maximum(np.abs(grad_sk), 1e-300)

    # Section 2: one Cholesky of an n x n SPD matrix, here B = I + W^1/2 K W^1/2 at the mode.
    K = gpc.jit(lambda log_v, log_l, X: se_kernel(log_v, log_l).gram(X))(lv0, ll0, Xj)
    B = jnp.eye(n) + post.sqrt_w[:, None] * K * post.sqrt_w[None, :]
    B_np = np.asarray(B)
    chol_jax = gpc.jit(jnp.linalg.cholesky)
    jax.block_until_ready(chol_jax(B))
    scipy.linalg.cholesky(B_np, lower=True)
    res_c = interleaved({
        "jax": lambda: chol_jax(B),
        "scipy": lambda: scipy.linalg.cholesky(B_np, lower=True),
    }, max(args.repeats, 5))
    t_cj, t_cs = res_c["jax"][0], res_c["scipy"][0]

    print(f"  gpclass value_and_grad : median {fmt_t(t_gp)} (min {fmt_t(res['gp'][1])}), "
          f"first call {fmt_t(t_first)} -> compile ~{fmt_t(compile_vg)}; Newton steps {steps}")
    print(f"  sklearn lml(theta, eval_gradient=True): median {fmt_t(t_sk)} (min {fmt_t(res['sk'][1])}); "
          f"Newton iterations {sk_newton}")
    print(f"  ratio sklearn/gpclass per evaluation: {t_sk / t_gp:.2f}x (medians), "
          f"{res['sk'][1] / res['gp'][1]:.2f}x (minima)")
    print(f"  values: gpclass {float(value_gp):.10f}  sklearn {value_sk:.10f}  rel diff {rel_val:.1e}")
    print(f"  grad  : gpclass [{grad_gp[0]:.8f}, {grad_gp[1]:.8f}]  sklearn [{grad_sk[0]:.8f}, {grad_sk[1]:.8f}]  "
          f"rel diff [{rel_grad[0]:.1e}, {rel_grad[1]:.1e}]")
    print(f"  one Cholesky {n}x{n}: jnp (jit) {fmt_t(t_cj)}   scipy {fmt_t(t_cs)}")
    print(f"  gpclass eval = {t_gp / t_cj:.1f} jnp Choleskys (floor ~ steps + 3 = {steps + 3}); "
          f"sklearn eval = {t_sk / t_cs:.1f} scipy Choleskys ({sk_newton} Newton iterations)")
    sec = f"1/2 n={n}"
    add(sec, "gpclass value+grad (median)", fmt_t(t_gp))
    add(sec, "gpclass compile (first - median)", fmt_t(compile_vg))
    add(sec, "sklearn lml+grad (median)", fmt_t(t_sk))
    add(sec, "RATIO sklearn/gpclass per evaluation", f"{t_sk / t_gp:.2f}x  (ratio of minima "
        f"{res['sk'][1] / res['gp'][1]:.2f}x)")
    add(sec, "rel diff value | grad", f"{rel_val:.1e} | {rel_grad.max():.1e}")
    add(sec, "Cholesky jnp(jit) | scipy", f"{fmt_t(t_cj)} | {fmt_t(t_cs)}")
    add(sec, "Newton steps gpclass | sklearn", f"{steps} | {sk_newton}")
    add(sec, "gpclass eval / jnp Cholesky", f"{t_gp / t_cj:.1f}  (floor ~{steps + 3})")
    add(sec, "sklearn eval / scipy Cholesky", f"{t_sk / t_cs:.1f}")

    if args.profile:
        evaluation = Evaluation(n, Xj, yj, lv0, ll0, vg, infer, post, K, B, sk, theta, t_gp, t_sk, t_cj, steps)
        profile_eval(evaluation, args, profile_rows)
    print()


class Evaluation(NamedTuple):
    """What section 1 measured at one size, for the profile: data, start, compiled functions, times, steps."""

    n: int
    X: object
    y: object
    log_v: object
    log_l: object
    value_and_grad: object  # jitted (log_v, log_l, X, y) -> (log q, grads)
    infer: object  # jitted (log_v, log_l, X, y, init) -> posterior
    posterior: object
    K: object
    B: object
    sklearn: object  # the fitted GaussianProcessClassifier
    theta: object  # sklearn's log hyperparameters
    t_gpclass: float
    t_sklearn: float
    t_cholesky: float
    steps: int


def profile_eval(ev: Evaluation, args, rows):
    """Where a gpclass evaluation's time goes (uses private gpclass functions, read-only)."""
    n, Xj, yj, lv0, ll0, vg, infer, post, K, B, sk, theta, t_gp, t_sk, t_cj, steps = ev
    # Private helpers, looked up defensively: the library's internals may change.
    from gpclass import _linalg
    from gpclass._inference import laplace as _laplace

    factor_b = getattr(_linalg, "factor_b", None)
    half_log_det = getattr(_linalg, "half_log_det", None)
    solve_i_plus_wk = getattr(_linalg, "solve_i_plus_wk", None)
    _newton_step = getattr(_laplace, "_newton_direction", None) or getattr(_laplace, "_newton_step", None)
    _psi = getattr(_laplace, "_psi", None)

    r = max(3, args.repeats)
    print(f"  [profile n={n}]")
    # Newton solve alone (gpc.infer without gradient: Newton + final factorisation + lml), cold start.
    t_inf = median_time(lambda: infer(lv0, ll0, Xj, yj, None), r)[0]
    # Warm start from the mode at the same theta, and from a neighbouring theta.
    alpha = post.alpha
    p_same = infer(lv0, ll0, Xj, yj, alpha)
    t_inf_same = median_time(lambda: infer(lv0, ll0, Xj, yj, alpha), r)[0]
    lv1, ll1 = lv0 + 0.1, ll0 - 0.1
    steps_cold1 = int(infer(lv1, ll1, Xj, yj, None).info.num_steps)
    steps_warm1 = int(infer(lv1, ll1, Xj, yj, alpha).info.num_steps)
    vg_warm = gpc.jit(jax.value_and_grad(
        lambda log_v, log_l, X, y, init: gpc.infer(gpc.Laplace(), se_kernel(log_v, log_l), LIK, X, y,
                                                   init=init).log_marginal, argnums=(0, 1)))
    jax.block_until_ready(vg_warm(lv1, ll1, Xj, yj, alpha))
    t_vg_warm1 = median_time(lambda: vg_warm(lv1, ll1, Xj, yj, alpha), r)[0]
    t_vg_cold1 = median_time(lambda: vg(lv1, ll1, Xj, yj), r)[0]

    # Single operations at the mode.
    a, f, sw, L = post.alpha, post.mean, post.sqrt_w, post.chol
    newton_step = gpc.jit(_newton_step) if _newton_step else None
    psi = gpc.jit(_psi) if _psi else None
    fb = gpc.jit(factor_b) if factor_b else None
    chol_nosym = gpc.jit(lambda B: jax.lax.linalg.cholesky(B, symmetrize_input=False))
    chol_sym = gpc.jit(jnp.linalg.cholesky)
    solve = gpc.jit(solve_i_plus_wk) if solve_i_plus_wk else None
    trsm = gpc.jit(lambda L, M: jsl.solve_triangular(L, M, lower=True))
    matmul = gpc.jit(lambda A, M: A @ M)
    logdet_vjp = gpc.jit(jax.grad(lambda K, sw: half_log_det(factor_b(K, sw))))
    half_log_det_b = getattr(_linalg, "half_log_det_b", None)  # hand-written reverse mode, if the library has it
    logdet_vjp_lib = gpc.jit(jax.grad(half_log_det_b)) if half_log_det_b else None
    # half_log_det_b(K, sqrt_w) or, since it reuses the factor, half_log_det_b(K, sqrt_w, L)
    extra_l = ()
    if half_log_det_b is not None:
        import inspect

        try:
            if len(inspect.signature(half_log_det_b).parameters) >= 3:
                extra_l = (L,)
        except (TypeError, ValueError):
            pass
    gram = gpc.jit(lambda log_v, log_l, X: se_kernel(log_v, log_l).gram(X))
    gram_vjp = gpc.jit(lambda log_v, log_l, X, K_bar: jax.vjp(
        lambda log_v, log_l: se_kernel(log_v, log_l).gram(X), log_v, log_l)[1](K_bar))
    ops = {
        "gram K (forward)": lambda: gram(lv0, ll0, Xj),
        "gram VJP K_bar -> (log sf^2, log l)": lambda: gram_vjp(lv0, ll0, Xj, K),
        "one Newton direction (_newton_direction)": lambda: newton_step(K, LIK, yj, a, f),
        "Psi(a) (_psi: K@a + likelihood)": lambda: psi(K, LIK, yj, a),
        "factor_b (build B + cholesky)": lambda: fb(K, sw),
        "jnp.linalg.cholesky (symmetrize_input=True)": lambda: chol_sym(B),
        "lax cholesky symmetrize_input=False": lambda: chol_nosym(B),
        "solve_i_plus_wk (matvec + 2 trsv)": lambda: solve(K, sw, L, f),
        "triangular solve, n x n right side": lambda: trsm(L, K),
        "matmul n x n (XLA dot)": lambda: matmul(K, K),
        "grad_K of 1/2 log|B| via cholesky": lambda: logdet_vjp(K, sw),
        "grad_K of _linalg.half_log_det_b (custom VJP)": lambda: logdet_vjp_lib(K, sw, *extra_l),
    }
    op_t = {}
    for name, fn in ops.items():
        try:
            jax.block_until_ready(fn())
            op_t[name] = median_time(fn, r)[1]  # minimum: single operations are what stalls distort most
        except Exception as err:  # a private helper that no longer exists or changed signature
            print(f"    ({name}: skipped, {type(err).__name__}: {str(err)[:80]})")
            op_t[name] = float("nan")
    # sklearn's Newton solve alone (log_marginal_likelihood without gradient re-runs Newton).
    t_sk_val = median_time(lambda: sk.log_marginal_likelihood(theta), r)[0]

    print(f"    gpclass infer (Newton+final factor, no grad), cold: {fmt_t(t_inf)} = {t_inf / t_cj:.1f} Chol; "
          f"{steps} steps -> {fmt_t(t_inf / max(steps, 1))}/step incl. final factor")
    print(f"    gpclass value_and_grad, cold: {fmt_t(t_gp)} = {t_gp / t_cj:.1f} Chol; gradient part "
          f"(vg - infer) {fmt_t(t_gp - t_inf)} = {(t_gp - t_inf) / t_cj:.1f} Chol")
    print(f"    sklearn Newton only (lml without grad): {fmt_t(t_sk_val)}; gradient part {fmt_t(t_sk - t_sk_val)}")
    print(f"    warm start at the same theta: {int(p_same.info.num_steps)} step(s), infer {fmt_t(t_inf_same)} "
          f"(cold {fmt_t(t_inf)})")
    print(f"    at theta + (0.1, -0.1): Newton steps cold {steps_cold1} / warm {steps_warm1}; "
          f"value_and_grad cold {fmt_t(t_vg_cold1)} / warm {fmt_t(t_vg_warm1)}")
    # Single operations: minimum over the repeats, in units of the minimum of the jnp Cholesky above.
    t_chol_min = op_t.get("jnp.linalg.cholesky (symmetrize_input=True)", t_cj)
    print(f"    single operations (min of {r} calls; 'Chol' = min jnp cholesky {fmt_t(t_chol_min)}):")
    for name, t in op_t.items():
        print(f"    {name:46s} {fmt_t(t):>10s}  = {t / t_chol_min:5.2f} Chol")
    sec = f"P n={n}"
    rows.append((sec, "infer (no grad) cold | value_and_grad cold",
                 f"{fmt_t(t_inf)} | {fmt_t(t_gp)}  ({t_inf / t_cj:.1f} | {t_gp / t_cj:.1f} Chol)"))
    rows.append((sec, "sklearn Newton only | lml+grad", f"{fmt_t(t_sk_val)} | {fmt_t(t_sk)}"))
    rows.append((sec, "one Newton direction | jnp cholesky",
                 f"{fmt_t(op_t['one Newton direction (_newton_direction)'])} | "
                 f"{fmt_t(op_t['jnp.linalg.cholesky (symmetrize_input=True)'])}"))
    rows.append((sec, "chol sym | nosym | logdet-VJP AD | custom",
                 f"{fmt_t(op_t['jnp.linalg.cholesky (symmetrize_input=True)'])} | "
                 f"{fmt_t(op_t['lax cholesky symmetrize_input=False'])} | "
                 f"{fmt_t(op_t['grad_K of 1/2 log|B| via cholesky'])} | "
                 f"{fmt_t(op_t['grad_K of _linalg.half_log_det_b (custom VJP)'])}"))
    rows.append((sec, "steps at theta+d: cold | warm", f"{steps_cold1} | {steps_warm1}  "
                 f"(vg {fmt_t(t_vg_cold1)} | {fmt_t(t_vg_warm1)})"))


def section_fit(X_all, y_all, n, args):
    """Section 3: a full ML-II fit from (LOG_SF, LOG_L)."""
    print(f"--- n = {n}: full ML-II fit from log sf = {LOG_SF}, log l = {LOG_L} ({load_average()})")
    Xn, yn = X_all[:n], y_all[:n]
    Xj, yj = jnp.asarray(Xn), jnp.asarray(yn)
    k0 = se_kernel(jnp.asarray(2 * LOG_SF), jnp.asarray(LOG_L))

    def run_fit(kernel, likelihood, X, y):
        return gpc.fit(gpc.Laplace(), kernel, likelihood, X, y, max_steps=args.max_steps, gtol=args.gtol, throw=False)

    fit_jit = gpc.jit(run_fit)
    _, t_first = timed(lambda: fit_jit(k0, LIK, Xj, yj))
    res, t_gp = timed(lambda: fit_jit(k0, LIK, Xj, yj))
    compile_fit = t_first - t_gp
    log_v, log_l = float(jnp.log(res.kernel.variance)), float(jnp.log(res.kernel.lengthscale))

    with SklearnCounter() as count:
        t0 = now()
        sk = GaussianProcessClassifier(sk_kernel(2 * LOG_SF, LOG_L), optimizer="fmin_l_bfgs_b",
                                       n_restarts_optimizer=0).fit(Xn, yn)
        t_sk = now() - t0
    theta_sk = sk.kernel_.theta
    lml_sk = float(sk.log_marginal_likelihood_value_)
    at_bound = np.any(np.abs(theta_sk) > 0.99 * np.log(BOUNDS[1]))
    gp_obj = float(res.objective)

    evals, grads, newton_total = None, None, None
    if args.profile and n <= args.count_max_n:
        COUNTS.update(gram=0, grad=0, derivatives=0)
        kc = CountingSE(variance=k0.variance, lengthscale=k0.lengthscale)
        jax.block_until_ready(fit_jit(kc, CountingLogistic(), Xj, yj))
        evals, grads = COUNTS["gram"], COUNTS["grad"]
        # derivatives(): one per Newton step + one after the mode (every solve) + one in the
        # implicit-gradient backward pass (every gradient evaluation).
        newton_total = COUNTS["derivatives"] - evals - grads

    print(f"  gpclass fit (L-BFGS): first call {fmt_t(t_first)}, second call {fmt_t(t_gp)} -> compile ~"
          f"{fmt_t(compile_fit)}; L-BFGS steps {int(res.num_steps)}, converged {bool(res.converged)}, "
          f"max|grad| {float(res.grad_norm):.1e}")
    if evals is not None:
        print(f"    (instrumented run) inner solves {evals}, of which {grads} with gradient; "
              f"Newton steps in total {newton_total} ({newton_total / evals:.1f} per solve)")
    print(f"  sklearn fit (fmin_l_bfgs_b): {fmt_t(t_sk)}; lml+grad evaluations {count.evals - 1} in L-BFGS-B "
          f"(+1 value-only at the end), Newton iterations in total {count.cholesky}; bound hit: {bool(at_bound)}")
    print(f"  ratio sklearn/gpclass per fit (gpclass without compile): {t_sk / t_gp:.2f}x; "
          f"with compile: {t_sk / t_first:.2f}x")
    print(f"  final lml: gpclass {gp_obj:.8f}  sklearn {lml_sk:.8f}  diff {gp_obj - lml_sk:.2e}")
    print(f"  final theta (log sf^2, log l): gpclass ({log_v:.5f}, {log_l:.5f})  "
          f"sklearn ({theta_sk[0]:.5f}, {theta_sk[1]:.5f})")
    print()
    sec = f"3 fit n={n}"
    add(sec, "gpclass fit (2nd call) | compile", f"{fmt_t(t_gp)} | {fmt_t(compile_fit)}")
    add(sec, "sklearn fit", fmt_t(t_sk))
    add(sec, "RATIO sklearn/gpclass per fit", f"{t_sk / t_gp:.2f}x  (incl. compile {t_sk / t_first:.2f}x)")
    add(sec, "steps/evals gpclass | sklearn",
        f"{int(res.num_steps)} L-BFGS steps"
        + (f", {evals} solves ({grads} w/ grad), {newton_total} Newton" if evals is not None else "")
        + f" | {count.evals - 1} evals, {count.cholesky} Newton")
    add(sec, "final lml gpclass | sklearn", f"{gp_obj:.6f} | {lml_sk:.6f}  (diff {gp_obj - lml_sk:.1e})")


def section_batch(X_all, y_all, args):
    """Section 4: one vmapped gpclass.fit over many small data sets vs a loop of sklearn fits."""
    S, m = args.num_sets, args.set_size
    print(f"--- throughput: {S} random subsets of usps35 with n = {m} each (seeds 10000..{10000 + S - 1}) "
          f"({load_average()})")
    idx = np.stack([np.random.default_rng(10_000 + s).choice(len(X_all), m, replace=False) for s in range(S)])
    Xs, ys = X_all[idx], y_all[idx]
    assert np.all(np.abs(ys.sum(axis=1)) < m), "a subset with a single class"
    Xs_j, ys_j = jnp.asarray(Xs), jnp.asarray(ys)
    k0 = se_kernel(jnp.asarray(2 * LOG_SF), jnp.asarray(LOG_L))

    def one_fit(X, y):
        return gpc.fit(gpc.Laplace(), k0, LIK, X, y, max_steps=args.max_steps, gtol=args.gtol, throw=False)

    batched = gpc.jit(jax.vmap(one_fit))
    _, t_first = timed(lambda: batched(Xs_j, ys_j))
    res, t_gp = timed(lambda: batched(Xs_j, ys_j))
    compile_b = t_first - t_gp
    obj_gp = np.asarray(res.objective)
    steps_gp = np.asarray(res.num_steps)
    conv_gp = np.asarray(res.converged)

    # The same fits one at a time through one jitted (unbatched) function.
    single = gpc.jit(one_fit)
    _, t1_first = timed(lambda: single(Xs_j[0], ys_j[0]))
    t0 = now()
    for s in range(S):
        jax.block_until_ready(single(Xs_j[s], ys_j[s]))
    t_loop_gp = now() - t0

    obj_sk = np.empty(S)
    with SklearnCounter() as count:
        t0 = now()
        for s in range(S):
            sk = GaussianProcessClassifier(sk_kernel(2 * LOG_SF, LOG_L), optimizer="fmin_l_bfgs_b",
                                           n_restarts_optimizer=0).fit(Xs[s], ys[s])
            obj_sk[s] = sk.log_marginal_likelihood_value_
        t_sk = now() - t0
    diff = obj_gp - obj_sk

    # Floor: one batched Cholesky of S matrices m x m, as gpclass runs it (a loop on the CPU, gpclass/_dense.py).
    K = gpc.jit(jax.vmap(lambda X: k0.gram(X)))(Xs_j)
    Bs = jnp.eye(m) + 0.25 * K  # W <= 1/4 for the logistic likelihood
    Bs_np = np.asarray(Bs)
    chol_b = gpc.jit(jax.vmap(gpc_dense.cholesky))
    jax.block_until_ready(chol_b(Bs))
    np.linalg.cholesky(Bs_np)
    res_c = interleaved({
        "jax": lambda: chol_b(Bs),
        "numpy": lambda: np.linalg.cholesky(Bs_np),
        "scipy loop": lambda: [scipy.linalg.cholesky(B, lower=True) for B in Bs_np],
    }, max(args.repeats, 5))
    t_cb = res_c["jax"][0]

    print(f"  gpclass vmap(fit): first call {fmt_t(t_first)}, second call {fmt_t(t_gp)} -> compile ~"
          f"{fmt_t(compile_b)}; per data set {fmt_t(t_gp / S)}")
    print(f"    L-BFGS steps per set: min {steps_gp.min()} median {np.median(steps_gp):.0f} max {steps_gp.max()} "
          f"(the batched loop runs max-steps iterations for every set); converged {conv_gp.sum()}/{S}")
    print(f"  gpclass jit(fit) in a Python loop: {fmt_t(t_loop_gp)} total, {fmt_t(t_loop_gp / S)} per set "
          f"(compile ~{fmt_t(t1_first - t_loop_gp / S)})")
    print(f"  sklearn loop: {fmt_t(t_sk)} total, {fmt_t(t_sk / S)} per set; {count.evals - S} lml+grad evaluations "
          f"({(count.evals - S) / S:.1f} per set), {count.cholesky / S:.1f} Newton iterations per set")
    print(f"  ratio sklearn loop / gpclass vmap: {t_sk / t_gp:.2f}x (incl. compile {t_sk / t_first:.2f}x); "
          f"sklearn loop / gpclass jit loop: {t_sk / t_loop_gp:.2f}x")
    print(f"  agreement of fitted lml (gpclass - sklearn): max |diff| {np.abs(diff).max():.2e}, "
          f"median |diff| {np.median(np.abs(diff)):.2e}; gpclass higher in {(diff > 1e-6).sum()}, "
          f"sklearn higher in {(diff < -1e-6).sum()} of {S}")
    for s in range(min(4, S)):
        print(f"    set {s}: gpclass {obj_gp[s]:.8f}  sklearn {obj_sk[s]:.8f}")
    if args.profile:
        # One batched evaluation (value_and_grad at the start) versus a loop of unbatched ones.
        def lml(log_v, log_l, X, y):
            post = gpc.infer(gpc.Laplace(), se_kernel(log_v, log_l), LIK, X, y)
            return post.log_marginal, post.info.num_steps

        vg = jax.value_and_grad(lml, argnums=(0, 1), has_aux=True)
        lv0, ll0 = jnp.asarray(2 * LOG_SF), jnp.asarray(LOG_L)
        vg_b = gpc.jit(jax.vmap(vg, in_axes=(None, None, 0, 0)))
        vg_1 = gpc.jit(vg)
        (_, steps_b), _ = jax.block_until_ready(vg_b(lv0, ll0, Xs_j, ys_j))
        t_vgb = median_time(lambda: vg_b(lv0, ll0, Xs_j, ys_j), max(3, args.repeats))[0]
        jax.block_until_ready(vg_1(lv0, ll0, Xs_j[0], ys_j[0]))
        t0 = now()
        for s in range(S):
            jax.block_until_ready(vg_1(lv0, ll0, Xs_j[s], ys_j[s]))
        t_vg1 = now() - t0
        steps_b = np.asarray(steps_b)
        print(f"  [profile] one value_and_grad on all {S} sets: vmap {fmt_t(t_vgb)} "
              f"({fmt_t(t_vgb / S)} per set), loop of jit calls {fmt_t(t_vg1)} ({fmt_t(t_vg1 / S)} per set); "
              f"Newton steps per set min {steps_b.min()} mean {steps_b.mean():.1f} max {steps_b.max()} "
              f"(vmap runs max for all); = {t_vgb / t_cb:.0f} batched Choleskys")
        add(f"4 {S}x n={m}", "[profile] one value_and_grad: vmap | jit loop", f"{fmt_t(t_vgb)} | {fmt_t(t_vg1)}  "
            f"(Newton steps mean {steps_b.mean():.1f}, max {steps_b.max()})")
    print(f"  one batched Cholesky of {S} x {m}x{m}: jnp (jit) {fmt_t(t_cb)}, numpy stacked "
          f"{fmt_t(res_c['numpy'][0])}, scipy loop {fmt_t(res_c['scipy loop'][0])}; "
          f"vmap(fit) = {t_gp / t_cb:.0f} batched Choleskys")
    print()
    sec = f"4 {S}x n={m}"
    add(sec, "gpclass vmap(fit) total | per set", f"{fmt_t(t_gp)} | {fmt_t(t_gp / S)}")
    add(sec, "gpclass vmap compile", fmt_t(compile_b))
    add(sec, "gpclass jit(fit) loop total", fmt_t(t_loop_gp))
    add(sec, "sklearn loop total | per set", f"{fmt_t(t_sk)} | {fmt_t(t_sk / S)}")
    add(sec, "RATIO sklearn loop / gpclass vmap", f"{t_sk / t_gp:.2f}x  (incl. compile {t_sk / t_first:.2f}x)")
    add(sec, "RATIO sklearn loop / gpclass jit loop", f"{t_sk / t_loop_gp:.2f}x")
    add(sec, "L-BFGS steps min/median/max", f"{steps_gp.min()}/{np.median(steps_gp):.0f}/{steps_gp.max()}")
    add(sec, "max |lml diff| vs sklearn", f"{np.abs(diff).max():.1e}")
    add(sec, "batched Cholesky jnp | vmap(fit)/Chol", f"{fmt_t(t_cb)} | {t_gp / t_cb:.0f}")


# --------------------------------------------------------------------------- main


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=None,
                        help="training-set sizes for sections 1-2 (default 500 1000 2000)")
    parser.add_argument("--fit-sizes", type=int, nargs="*", default=None,
                        help="sizes for the full fit, section 3 (default: --sizes); give none to skip")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per measurement (default 5)")
    parser.add_argument("--num-sets", type=int, default=None, help="small data sets in section 4 (default 256)")
    parser.add_argument("--set-size", type=int, default=100, help="n of each small data set (default 100)")
    parser.add_argument("--max-steps", type=int, default=100, help="fit: largest number of L-BFGS steps")
    parser.add_argument("--gtol", type=float, default=1e-5,
                        help="fit: max |grad| w.r.t. log hyperparameters (scipy L-BFGS-B's pgtol is 1e-5 too)")
    parser.add_argument("--out", default="laplace_vs_sklearn", help="name of the JSON file in benchmarks/results/")
    parser.add_argument("--quick", action="store_true", help="smoke run: sizes 200 400, 2 repeats, 32 small sets")
    parser.add_argument("--no-profile", dest="profile", action="store_false",
                        help="skip the profile of where gpclass's time goes")
    parser.add_argument("--blas-threads", type=int, default=None,
                        help="limit every BLAS/OpenMP pool (numpy's, scipy's = jaxlib's LAPACK) with threadpoolctl")
    parser.add_argument("--count-max-n", type=int, default=1000,
                        help="profile: count evaluations / Newton steps inside gpclass.fit (one extra instrumented "
                             "fit) only for n <= this (default 1000)")
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(raw_argv)
    if args.sizes is None:
        args.sizes = [200, 400] if args.quick else [500, 1000, 2000]
    if args.fit_sizes is None:
        args.fit_sizes = list(args.sizes)
    if args.repeats is None:
        args.repeats = 2 if args.quick else 5
    if args.num_sets is None:
        args.num_sets = 32 if args.quick else 256

    warnings.filterwarnings("ignore", category=UserWarning, module="equinox")
    if args.blas_threads is not None:
        from threadpoolctl import threadpool_limits

        jax.block_until_ready(jnp.linalg.cholesky(jnp.eye(2)))  # load scipy's OpenBLAS (jaxlib LAPACK) first
        threadpool_limits(limits=args.blas_threads)
    X, y = gpc.datasets.load("usps35")
    perm = np.random.default_rng(0).permutation(len(X))
    X, y = X[perm], y[perm]
    t_start = now()
    info = header(args)
    if max(args.sizes + args.fit_sizes) > len(X):
        sys.exit(f"usps35 has {len(X)} cases")

    profile_rows = []
    print("SECTIONS 1-2: one evaluation of log q(y|X,theta) and its gradient; one Cholesky")
    for n in args.sizes:
        section_eval(X, y, n, args, profile_rows)
    if args.fit_sizes:
        print("SECTION 3: full ML-II fit")
        for n in args.fit_sizes:
            section_fit(X, y, n, args)
    if args.num_sets > 0:
        print("SECTION 4: throughput on many small data sets")
        section_batch(X, y, args)

    print("=" * 100)
    print(f"SUMMARY (medians; ratios > 1 mean gpclass is faster)   total run time {fmt_t(now() - t_start)}, "
          f"{load_average()}")
    print("=" * 100)
    width = max(len(q) for _, q, _ in SUMMARY + profile_rows)
    last = None
    for sec, q, v in SUMMARY + profile_rows:
        if sec != last:
            print(f"[{sec}]")
            last = sec
        print(f"  {q:{width}s}  {v}")
    write_results(args.out, info, [dict(section=sec, quantity=q, value=v) for sec, q, v in SUMMARY + profile_rows])


if __name__ == "__main__":
    main()
