"""Nested expectation propagation for the multinomial probit (Riihimaki, Jylanki & Vehtari 2013, JMLR 14).

``gpc.EP()`` runs this when ``likelihood.num_latent > 1``; the likelihood must offer the probit-factor form
(``likelihood.probit_factors``: ``gpc.likelihoods.MultinomialProbit``).  With the auxiliary u_i ~ N(0, 1),
p(y_i|f_i) = int N(u_i) prod_{j != y_i} Phi(b_ij^T f_i + u_i) du_i with b_ij = e_y - e_j (the paper's
likelihood; ``difference_rows``): in w_i = (f_i, u_i) the tilted distribution of case i is a Gaussian times
C - 1 probit factors, whose moments the inner EP approximates with scalar sites exp(-1/2 a~_ij z^2 + b~_ij z),
z = b_ij^T f_i + u_i (the paper's inner EP, its Appendix A).  These inner sites (a~, b~), (n, C - 1) each,
are the state; case i's site in f_i follows by integrating u_i out (the paper's structured site form):

    T~_i = B_i^T (A_i^-1 + 1 1^T)^-1 B_i = diag(pi_i) - pi_i pi_i^T / sum(pi_i),
    pi_i = e_y + (a~_ij at the other classes j),   nu~_i = B_i^T (b~_i - a~_i sum(b~_i) / (1 + sum(a~_i))),

a rank C - 1 precision (the likelihood does not change when a constant is added to every f_i^c) of the
softmax's form, GPML eq. 3.38 with unnormalised pi (sum(pi_i) = 1 + sum(a~_i)).  So GPML section 3.5.1's
factorisation carries over (``dense_classes.softmax_blocks`` at pi, the paper's O(C n^3) posterior): with
E_c = D_c^1/2 (I + D_c^1/2 K_c D_c^1/2)^-1 D_c^1/2, D_c = diag(pi^c), and writing T~ = D - Pi Pi^T, Pi = D R N^-1/2
(R the stacked identities, N = diag_i sum(pi_i), so that R^T D R = N), Woodbury gives
(K + T~^-1)^-1 = E - E R (sum_c E_c)^-1 R^T E exactly as eq. 3.47 (N cancels), and
log|I + K T~| = sum_c log|B_c| + log|sum_c E_c| - sum_i log sum(pi_i): C Cholesky factorisations of n x n
matrices and one more, never an nC x nC one.  The posterior is a ``gpc.SoftmaxPosterior`` (that form: its
``e_blocks`` E_c, ``chol_sum_e`` and ``alpha`` = K^-1 mu), which predicts with the likelihood's exact class
probabilities.  Both a shared kernel and ``gpc.kernels.PerClass``.

Schedule.  Parallel outer EP (all cases from the marginals of q, then one refactorisation; damped by
``EP.damping``, default 0.5): per case, the inner EP starts from q's marginal of w_i (the cavity times case
i's inner sites: it continues from the previous sites, the paper's incremental update) and makes
``_INNER_SWEEPS`` sequential passes over the C - 1 factors by rank-one updates (GPstuff's
``lik_multinomprobit`` makes one).  At a fixed point every inner site matches its factor's tilted moments
under q: the fixed point of EP on the augmented model (f, u) with its n (C - 1) probit factors, whatever
the number of inner passes.  The damped sweeps are extrapolated by Anderson acceleration (``EP.anderson``,
as for one latent function: fewer sweeps to the same fixed point).  Cost: O(C n^3) per sweep,
memory O(C n^2).

Gradients.  No sweep is differentiated, and memory does not grow with the number of sweeps.

* log Z_EP is EP's marginal likelihood of that augmented model as a function of theta and the inner sites:
  sum_i kappa_i (u_i integrated out) - 1/2 log|I + K T~| + 1/2 nu~^T Sigma nu~ + sum_ij (log Z^_ij + the
  cavity terms of GPML eq. 3.65 for the scalar z_ij).  Its derivative in a site is a combination of the
  differences between the moments of q and of the tilted distributions at z_ij, which vanish at the fixed
  point (EP's fixed points are the stationary points of its free energy, Minka 2001; Seeger 2005): so its
  gradient in theta holds the converged sites fixed (``stop_gradient``) and reverse mode runs through one
  evaluation, at no further cost.  At the computed sites the error is of the order of the convergence
  residual (tests/test_ep_multinomial_probit.py: 1e-10 against central differences, with repeated inputs).
* The posterior (``mean``, ``alpha`` and the blocks E_c, M that predictions use) is not stationary in the
  sites: it is computed from the sites as a function of theta (the prior's hyperparameters and training
  inputs), differentiated by the implicit function theorem as for one latent function (``ep.py``).  The
  sites s = (a~, b~) are a fixed point of T, one undamped parallel sweep (the damped sweeps' fixed point), so
  ds = (I - dT/ds)^-1 dT/dtheta: reverse mode (``implicit_fixed_point``) solves (I - dT/ds)^T lambda = s_bar
  by GMRES, matrix-free (dT/ds by the chain rule through q's marginals, from q's covariance formed once, (n
  C)^2 numbers, and the sweep's ``jax.linearize``: O(C^3 n^2) per product), then pulls lambda back through T
  (one sweep's reverse mode), only when something differentiated depends on the posterior
  (:func:`_sweep_system`).  Against central differences: 1e-9 relative (the same test file); with
  the sites held fixed the gradients of predictions were 2 % to 30 % off, some 10x or of the wrong sign.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .. import _anderson as anderson
from .. import _dense as dense
from .._covariance._base import MATRIX
from .._covariance.dense_classes import ClassFactor, class_factor_given, half_log_det_softmax, softmax_blocks
from .._exceptions import GPClassError
from .._iterate import AbstractIterativeSolver, all_finite, relative_change, run
from .._status import Status
from .._types import Array
from ._implicit import implicit_fixed_point
from ._linear_solve import LinearMap
from ._posterior import SolverInfo, gaussian_posterior

_INNER_SWEEPS = 2  # sequential passes of the inner EP per outer update (any number: the same fixed point)
_ADJOINT_KRYLOV_STEPS = 50  # the implicit adjoint's GMRES restarts every this many products (as ep.py's)


def solve(method, op, likelihood, y, init=None, key=None):
    """Nested EP to the fixed point on ``stop_gradient`` inputs, then log Z_EP (the sites held fixed) and the
    posterior at the sites (differentiable through them by the implicit function theorem: module docstring)."""
    name = type(likelihood).__name__
    if not getattr(likelihood, "probit_factors", False):
        raise GPClassError(f"gpc.EP() with {name}: no exact tilted moments for this multi-class likelihood; EP "
                           "supports gpc.likelihoods.MultinomialProbit(C) (nested EP). Use gpc.Laplace() for "
                           "Softmax.")
    if MATRIX not in op.capabilities:
        raise GPClassError(f"gpc.EP() with {name} under a sparse prior (gpc.Sparse): not supported; nested EP "
                           "factorises the classes' n x n blocks of K (dense). Use a kernel's K.")
    if method.schedule == "sequential" or method.order == "random":
        raise GPClassError(f"gpc.EP(schedule={method.schedule!r}, order={method.order!r}) with {name}: nested EP "
                           "runs the parallel schedule only; use schedule=None or 'parallel' and order='fixed'.")
    B = likelihood.difference_rows(y)
    n, C = y.shape
    zeros = jnp.zeros((n, C - 1), op.dtype)
    start = (zeros, zeros) if init is None else tuple(jnp.asarray(s, op.dtype) for s in init)
    if start[0].shape != (n, C - 1) or start[1].shape != (n, C - 1):
        raise GPClassError(f"EP init for {name} must be the inner sites (a~, b~), each of shape (n, C - 1) = "
                           f"{(n, C - 1)}: a posterior's warm_start.")
    end = run(NestedSweeps(method, *lax.stop_gradient((op, likelihood, y, B, *start))))
    sites = lax.stop_gradient((end.state.a, end.state.b))
    ev = evaluate(op, likelihood, y, B, *sites)  # log Z_EP with the sites held fixed (module docstring)
    # The sites as a differentiable function of the prior (module docstring): the posterior depends on them, and
    # their adjoint is solved only when something differentiated depends on them.
    a_p, b_p = implicit_fixed_point(_sweep_system, sites, end.status == Status.CONVERGED, op, likelihood, y,
                                    _ADJOINT_KRYLOV_STEPS)
    pi_p, nu_p = site_factors(y, B, a_p, b_p)[:2]
    factor_p = class_factor_given(op.K, pi_p, ev.factor)  # ev's blocks, formed again only in reverse mode
    alpha = factor_p.solve_i_plus_wk(op, nu_p)  # K^-1 mu = (I + T~ K)^-1 nu~
    return gaussian_posterior(  # GPML section 3.5's form (a gpc.SoftmaxPosterior): module docstring
        op, factor_p, alpha=alpha, mean=op.mv(alpha), log_marginal=ev.log_z,
        info=SolverInfo(num_steps=end.num_steps, status=end.status, max_change=end.state.change),
        warm_start=sites,
    )


def site_factors(Y, B, a, b):
    """Case i's site in f_i from its inner sites (module docstring): pi_i (its precision is diag(pi_i) -
    pi_i pi_i^T / sum(pi_i)), nu~_i, the normaliser kappa_i of integrating u_i out, and q(u_i | f_i) =
    N(off_i - s_i^T f_i / (1 + sum a~_i), 1 / (1 + sum a~_i)) as (G_i, off_i, var_u_i) with G_i = B_i - 1
    s_i^T / (1 + sum a~_i) (z_ij = (G_i f_i)_j + the rest of u_i)."""
    sa, sb = jnp.sum(a, -1), jnp.sum(b, -1)
    s = jnp.einsum("ijc,ij->ic", B, a)  # B_i^T a~_i = sum(a~_i) e_y - (a~_i placed at the other classes)
    pi = Y * (1.0 + sa)[:, None] - s
    nu = jnp.einsum("ijc,ij->ic", B, b - a * (sb / (1.0 + sa))[:, None])
    kappa = -0.5 * jnp.log1p(sa) + 0.5 * sb**2 / (1.0 + sa)
    G = B - s[:, None, :] / (1.0 + sa)[:, None, None]
    return pi, nu, kappa, G, sb / (1.0 + sa), 1.0 / (1.0 + sa)


class Evaluation(eqx.Module):
    """q(f) = N(mu, Sigma) at the sites: GPML section 3.5's factorisation, the marginals per case, log Z_EP."""

    factor: ClassFactor  # L_c, E_c, M at pi
    alpha: Array  # (n, C) K^-1 mu
    mu: Array  # (n, C)
    sigma: Array  # (n, C, C) the marginal covariances Sigma_ii
    log_z: Array


def evaluate(op, likelihood, Y, B, a, b) -> Evaluation:
    """q and log Z_EP (module docstring) at the inner sites (a~, b~): C factorisations of n x n matrices and one
    more, O(C n^3) (``dense_classes.softmax_blocks`` at pi).  Differentiable in K; the sites enter without
    derivative wherever it is used for log Z_EP's gradient.

    log|I + K T~| = sum_c log|B_c| + log|sum_c E_c| - sum_i log sum(pi_i) (module docstring;
    ``half_log_det_softmax`` includes the last term).
    """
    pi, nu, kappa, G, off, var_u = site_factors(Y, B, a, b)
    factor, alpha, mu, sigma = marginals(op, pi, nu)
    half_log_det = half_log_det_softmax(op.K, pi, factor.L, factor.E, factor.M)
    m_z, v_z = factor_marginals(G, off, var_u, mu, sigma)
    tau_c, nu_c = 1.0 / v_z - a, m_z / v_z - b
    log_z_hat, _, _ = likelihood.factor_tilted_moments(nu_c / tau_c, 1.0 / tau_c)
    cavity_terms = (0.5 * jnp.log1p(a / tau_c) - 0.5 * b**2 / (tau_c + a)
                    + 0.5 * nu_c * (a / tau_c * nu_c - 2.0 * b) / (a + tau_c))
    log_z = jnp.sum(kappa) - half_log_det + 0.5 * jnp.vdot(nu, mu) + jnp.sum(log_z_hat + cavity_terms)
    return Evaluation(factor, alpha, mu, sigma, log_z)


def marginals(op, pi, nu):
    """q's factorisation at the site precisions pi, alpha = K^-1 mu, mu and the marginal covariances Sigma_ii
    (n, C, C), differentiable in K, pi and nu~.

    Sigma_ii = diag_c (K_c - K_c E_c K_c)_ii + (Z_c^T Z_d)_ii with Z_c = L_M^-1 E_c K_c (GPML eq. 3.47).
    """
    K = op.K
    factor = ClassFactor(pi, *softmax_blocks(K, pi))
    E, M = factor.E, factor.M
    alpha = factor.solve_i_plus_wk(op, nu)  # (I + T~ K)^-1 nu~ = K^-1 mu
    mu = op.mv(alpha)
    shared = K.ndim == 2
    EK = jnp.einsum("cij,jk->cik", E, K) if shared else jnp.einsum("cij,cjk->cik", E, K)
    C, n, _ = E.shape
    Z = dense.solve_triangular(M, EK.transpose(1, 0, 2).reshape(n, C * n), lower=True).reshape(n, C, n)
    prior_var = jnp.diagonal(K)[:, None] if shared else jnp.diagonal(K, axis1=1, axis2=2).T
    kek = jnp.einsum("ji,cji->ic", K, EK) if shared else jnp.einsum("cji,cji->ic", K, EK)
    sigma = jnp.einsum("jci,jdi->icd", Z, Z) + jax.vmap(jnp.diag)(prior_var - kek)
    return factor, alpha, mu, sigma


def factor_marginals(G, off, var_u, mu, sigma):
    """Mean and variance under q of every z_ij = b_ij^T f_i + u_i: (G_i mu_i + off_i, diag(G_i Sigma_ii
    G_i^T) + var_u_i), with u_i given f_i from :func:`site_factors`."""
    m_z = jnp.einsum("ijc,ic->ij", G, mu) + off[:, None]
    v_z = jnp.einsum("ijc,icd,ijd->ij", G, sigma, G) + var_u[:, None]
    return m_z, v_z


def inner_ep(likelihood, Bt, mean_w, cov_w, a, b, sweeps):
    """Case i's inner EP (Appendix A): ``sweeps`` sequential passes over its C - 1 probit factors
    Phi(Bt_j^T w) in w = (f_i, u_i), from the Gaussian N(mean_w, cov_w) that already includes the sites
    (a~, b~), by rank-one updates.  Returns the new sites and the final Gaussian."""
    k = a.shape[0]

    def update(step, carry):
        m, V, a, b = carry
        j = step % k
        bt = Bt[j]
        Vb = V @ bt
        v_i, m_i = bt @ Vb, bt @ m
        tau_c, nu_c = 1.0 / v_i - a[j], m_i / v_i - b[j]
        _, m_hat, v_hat = likelihood.factor_tilted_moments(nu_c / tau_c, 1.0 / tau_c)
        da, db = 1.0 / v_hat - tau_c - a[j], m_hat / v_hat - nu_c - b[j]
        V = V - jnp.outer(Vb, Vb) * (da / (1.0 + v_i * da))
        m = m + Vb * ((db - da * m_i) / (1.0 + da * v_i))
        return m, V, a.at[j].add(da), b.at[j].add(db)

    return lax.fori_loop(0, sweeps * k, update, (mean_w, cov_w, a, b))


class NestedState(eqx.Module):
    a: Array  # the inner sites
    b: Array
    log_z: Array  # log Z_EP at the previous sites (evaluated in the step that left them)
    change: Array  # relative change of the sites in the last sweep (a~ and b~ separately, the larger)
    log_z_change: Array  # |change of log Z_EP| between the last two evaluations
    memory: anderson.Memory | None  # Anderson acceleration's past sweeps (EP.anderson)


class NestedSweeps(AbstractIterativeSolver):
    """Outer parallel sweeps of nested EP (:func:`gpclass._iterate.run`) until the inner sites and log Z_EP
    stop changing (``EP.tol``, as for one latent function); damped by ``EP.damping`` (default 0.5).

    A step evaluates q and log Z_EP at its sites (one factorisation, :func:`evaluate`) and sweeps from there, so
    the convergence test sees log Z_EP one sweep late: converged means the sites moved by at most tol and log
    Z_EP by at most tol (1 + |log Z_EP|) between the last two evaluations.
    """

    method: eqx.Module
    op: eqx.Module
    likelihood: eqx.Module
    Y: Array
    B: Array
    a0: Array
    b0: Array

    @property
    def max_steps(self):
        return self.method.max_steps

    def init(self):
        inf = jnp.asarray(jnp.inf, self.op.dtype)
        memory = (anderson.start(jnp.concatenate([self.a0.ravel(), self.b0.ravel()]), self.method.anderson)
                  if self.method.anderson > 0 else None)
        return NestedState(self.a0, self.b0, -inf, inf, inf, memory)

    def step(self, s: NestedState):
        damping = self.method.resolved_damping(self.likelihood, False)
        ev = evaluate(self.op, self.likelihood, self.Y, self.B, s.a, s.b)
        a, b = _sweep(self.likelihood, self.Y, self.B, s.a, s.b, ev.mu, ev.sigma)
        a, b = (1.0 - damping) * s.a + damping * a, (1.0 - damping) * s.b + damping * b
        change = jnp.maximum(relative_change(a, s.a), relative_change(b, s.b))  # the sweep's own
        memory = s.memory
        if memory is not None:  # extrapolated from the last EP.anderson sweeps, site precisions kept >= 0
            size = a.size
            sites, memory = anderson.step(memory, jnp.concatenate([s.a.ravel(), s.b.ravel()]),
                                          jnp.concatenate([a.ravel(), b.ravel()]),
                                          project=lambda v: v.at[:size].max(0.0))
            a, b = sites[:size].reshape(a.shape), sites[size:].reshape(b.shape)
        return NestedState(a, b, ev.log_z, change, jnp.abs(ev.log_z - s.log_z), memory)

    def terminate(self, s: NestedState):
        tol = self.method.resolved_tol(self.op.dtype)
        return (s.change <= tol) & (s.log_z_change <= tol * (1.0 + jnp.abs(s.log_z))), jnp.asarray(False)

    def finite(self, s: NestedState):
        return all_finite(s.a, s.b, s.log_z)


def _sweep_system(op, likelihood, Y, sites):
    """(T(s), I - dT/ds) at the inner sites s = (a~, b~): the system for :func:`implicit_fixed_point`.

    T is one undamped outer sweep from q at s (:func:`marginals`, then :func:`_sweep`): the damped sweeps'
    fixed point, as damping d gives s + d (T(s) - s).  The adjoint pulls back through T(s) as a function of
    the prior (its reverse mode, through the factorisations), and solves with I - dT/ds by GMRES, matrix-free.

    dT/ds is the chain rule through q's marginals (mu_i, Sigma_ii), one sweep deep (memory does not depend on
    the number of sweeps): the sweep's own part (the inner EP's ``_INNER_SWEEPS`` passes per case, elementwise
    and per case) by ``jax.linearize``, and the marginals' by dSigma = -Sigma dT~ Sigma and dmu = Sigma (dnu~
    - dT~ mu) with the site precisions' dT~_i = diag(dpi_i) - (dpi_i pi_i^T + pi_i dpi_i^T) / s_i + pi_i pi_i^T
    ds_i / s_i^2 (s_i = sum(pi_i)), from q's covariance Sigma formed once, (n C)^2 numbers (O(C^2 n^3) from the
    blocks of :func:`marginals`; O(C^3 n^2) per product).  The product is plain array operations, so GMRES can
    transpose it (``_dense``'s factorisations have no forward mode, which ``jax.linearize`` of all of T would
    need) and ``vmap`` batch it.
    """
    B = likelihood.difference_rows(Y)

    def sweep(op, likelihood, s):
        a, b = s
        pi, nu = site_factors(Y, B, a, b)[:2]
        _, _, mu, sigma = marginals(op, pi, nu)
        return _sweep(likelihood, Y, B, a, b, mu, sigma)

    # I - dT/ds at the prior's values (stop_gradient: the pull-back through T(s) does not differentiate this)
    prior, lik = lax.stop_gradient((op, likelihood))
    a, b = sites
    (pi, nu), by_sites = jax.linearize(lambda a, b: site_factors(Y, B, a, b)[:2], a, b)
    factor, _, mu, sigma = marginals(prior, pi, nu)
    Sigma = covariance(prior, factor)  # (n, C, n, C)
    _, by_sweep = jax.linearize(lambda a, b, mu, sigma: _sweep(lik, Y, B, a, b, mu, sigma), a, b, mu, sigma)
    total = jnp.sum(pi, axis=-1)

    def times_dT(dpi, V):  # dT~_j V_j for V (n, C, ...): case j's C x C block of dT~ times V_j
        lead = (-1,) + (1,) * (V.ndim - 1)
        p, dp = (x.reshape(x.shape + (1,) * (V.ndim - 2)) for x in (pi, dpi))
        t, dt = total.reshape(lead), jnp.sum(dpi, axis=-1).reshape(lead)
        pi_v, dpi_v = jnp.sum(p * V, axis=1, keepdims=True), jnp.sum(dp * V, axis=1, keepdims=True)
        return dp * V - (dp * pi_v + p * dpi_v) / t + p * pi_v * (dt / t**2)

    def i_minus_jacobian(ds):
        da, db = ds
        dpi, dnu = by_sites(da, db)
        d_mu = jnp.einsum("icjd,jd->ic", Sigma, dnu - times_dT(dpi, mu))
        d_sigma = -jnp.einsum("icjd,jdie->ice", Sigma, times_dT(dpi, Sigma))
        ja, jb = by_sweep(da, db, d_mu, d_sigma)
        return da - ja, db - jb

    return sweep(op, likelihood, sites), LinearMap(i_minus_jacobian)


def covariance(op, factor: ClassFactor):
    """q's covariance Sigma as an (n, C, n, C) array from the blocks at pi: Sigma^cd = delta_cd (K_c - K_c E_c
    K_c) + Z_c^T Z_d with Z_c = L_M^-1 E_c K_c (GPML eq. 3.47)."""
    K, E, M = op.K, factor.E, factor.M
    shared = K.ndim == 2
    EK = jnp.einsum("cij,jk->cik", E, K) if shared else jnp.einsum("cij,cjk->cik", E, K)
    C, n, _ = E.shape
    Z = dense.solve_triangular(M, EK.transpose(1, 0, 2).reshape(n, C * n), lower=True).reshape(n, C, n)
    K_c = jnp.broadcast_to(K, (C, n, n))
    within = K_c - jnp.einsum("cij,cjk->cik", K_c, EK)
    return jnp.einsum("kci,kdj->icjd", Z, Z) + jnp.einsum("cd,cij->icjd", jnp.eye(C, dtype=K.dtype), within)


def _sweep(likelihood, Y, B, a, b, mu, sigma, sweeps=_INNER_SWEEPS):
    """Every case's inner EP from q's marginal of w_i = (f_i, u_i) (module docstring): the new inner sites."""
    _, _, _, G, off, var_u = site_factors(Y, B, a, b)
    return jax.vmap(lambda *args: _case_update(likelihood, *args, sweeps))(B, G, off, var_u, mu, sigma, a, b)


def _case_update(likelihood, B_i, G_i, off_i, var_u_i, mu_i, sigma_i, a_i, b_i, sweeps):
    mean_w, cov_w = joint_marginal(B_i, G_i, off_i, var_u_i, mu_i, sigma_i)
    Bt = jnp.concatenate([B_i, jnp.ones((B_i.shape[0], 1), B_i.dtype)], axis=1)
    _, _, a_new, b_new = inner_ep(likelihood, Bt, mean_w, cov_w, a_i, b_i, sweeps)
    return a_new, b_new


def joint_marginal(B_i, G_i, off_i, var_u_i, mu_i, sigma_i):
    """Mean (C + 1) and covariance of w_i = (f_i, u_i) under q, with u_i | f_i ~ N(off_i - h^T f_i, var_u_i),
    h = s_i / (1 + sum a~_i) = B_i[0] - G_i[0] (every row of G_i is its row of B_i less h)."""
    h = B_i[0] - G_i[0]
    cross = -sigma_i @ h
    mean_u = off_i - h @ mu_i
    var_u = var_u_i + h @ sigma_i @ h
    mean_w = jnp.concatenate([mu_i, mean_u[None]])
    cov_w = jnp.block([[sigma_i, cross[:, None]], [cross[None, :], var_u[None, None]]])
    return mean_w, cov_w
