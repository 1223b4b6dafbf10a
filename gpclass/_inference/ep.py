"""Expectation propagation for binary GP classification (GPML section 3.6, Algorithm 3.5).

Each likelihood term p(y_i|f_i) is replaced by an unnormalised Gaussian site
with natural parameters (tau~_i, nu~_i); sites are refined until the marginals
of q(f) = N(mu, Sigma), Sigma = (K^-1 + S~)^-1, mu = Sigma nu~, match the
moments of the tilted distributions (GPML eqs. 3.56-3.59).

Gradients.  log Z_EP (eqs. 3.65, 3.73, 3.74) is a function L(theta, s) of the
hyperparameters and the converged sites s = (tau~, nu~); no sweep is
differentiated and memory does not depend on the number of sweeps.

* Log-concave likelihoods: every site precision is positive and at the EP
  fixed point L is stationary in every site, dL/ds = 0 (Seeger 2005; Kuss &
  Rasmussen eq. 51), so dL/dtheta is the explicit partial derivative: log Z_EP
  holds the sites fixed (``stop_gradient``) and no sweep costs anything in
  reverse mode.
  At the fixed point the partial derivative in K is GPML eq. 5.27,
  1/2 (b b^T - S~^1/2 B^-1 S~^1/2) with b = K^-1 mu, computed from the last
  sweep's factor of B (:func:`_log_marginal_at_fixed_point`): no
  factorisation is repeated or differentiated.  This is exact at the fixed
  point; at the computed sites its error is of the order of the convergence
  residual (measured at the default ``tol`` on the stiff problem of
  tests/test_gradients_hard.py: 1.3e-8 absolute for the parallel schedule,
  whose damped sweeps stop furthest from the fixed point; the adjoint solve
  below would remove it at the cost of a 2n x 2n solve).
* Predictions, and log Z_EP of other likelihoods (label noise, the step
  function: a site whose precision is clipped at 0 is not a stationary point
  of L), depend on the sites' own dependence on theta.  s*(theta) is the
  fixed point of the undamped parallel update s = F(s, theta), so
  ds* = (I - J)^-1 dF/dtheta with J = dF/ds; :func:`_fixed_point_bwd`
  assembles J densely in O(n^3) from Sigma and solves the adjoint system
  (I - J)^T lambda = s_bar as a linear system, only when the sites receive a
  cotangent.  It must not be solved by the iteration lambda <- dL/ds + J^T lambda:
  F need not be a contraction, and with strongly correlated inputs (repeated
  and near-repeated rows) J has an eigenvalue of -1.3 to -1.4, the
  oscillating mode of undamped parallel EP, where the iteration diverges.
"""

import functools
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import _anderson as anderson
from .. import _dense as dense
from .._covariance._base import MATRIX
from .._exceptions import GPClassError
from .._iterate import all_finite, iterate, relative_change, tolerance
from .._linalg import factor_b, factor_b_given, half_log_det, inverse_from_cholesky, sqrt_precision
from .._status import Status
from .._types import Array
from .._validation import require_setting
from ._base import AbstractInference
from ._ep_updates import cavity, ep_log_marginal, extrapolate_sites, site_update
from ._implicit import instantiated, primal_values
from ._posterior import SolverInfo
from ._sites import covariance_root, factor_sites, site_alpha, site_covariance, site_marginals, site_posterior
from .ep_sparse import solve_sparse_ep


class EP(AbstractInference):
    """Expectation propagation, sequential (GPML Algorithm 3.5) or parallel schedule.

    Attributes:
        schedule: ``"sequential"`` updates one site at a time (exact
            rank-one updates of Sigma, applied per block of sites as matrix
            products) and recomputes Sigma from a fresh Cholesky factor after
            every sweep: it needs the dense prior covariance, so a sparse
            prior (``gpc.Sparse``) refuses it;
            ``"parallel"`` updates all sites from the current marginals and
            recomputes the posterior once per sweep;
            ``None`` (the default): sequential for a kernel's K, parallel
            under a sparse prior.
        order: the site order of the sequential schedule, ``"fixed"`` (1..n)
            or ``"random"`` (a fresh permutation every sweep, drawn from the
            explicit ``key`` passed to :func:`gpclass.infer`); the parallel
            schedule has no order, and refuses ``"random"``.
        damping: the fraction of the new site parameters taken in each update
            (1 = undamped).  ``None`` means 1 for the sequential schedule with a
            log-concave likelihood, and 0.5 for the parallel schedule or a
            likelihood that is not log-concave (label noise), where undamped
            updates can oscillate.
        tol: convergence when, between two sweeps, the largest change of tau~
            and nu~ is at most ``tol (1 + max |.|)`` and log Z_EP changes by at
            most ``tol (1 + |log Z_EP|)``.  ``None`` means 1e-10 in float64 and
            1e-5 in float32.
        max_steps: largest number of sweeps.
        anderson: how many past sweeps Anderson acceleration combines
            (``gpclass._anderson``; Walker & Ni 2011): each sweep's output is
            extrapolated from the last ``anderson`` sweeps, which removes the
            slow linear modes of the sweep map (the first 600 cases of usps35:
            23 -> 14 sequential sweeps to the default tolerance; the parallel
            schedule and sparse EP need about half the sweeps).  The fixed point is the
            same.  0 gives the plain sweeps; so does ``order="random"``, whose
            sweeps are different maps.
    """

    supports_mask = True

    schedule: str | None = eqx.field(static=True, default=None)
    order: str = eqx.field(static=True, default="fixed")
    damping: float | None = eqx.field(static=True, default=None)
    tol: float | None = eqx.field(static=True, default=None)
    max_steps: int = eqx.field(static=True, default=200)
    anderson: int = eqx.field(static=True, default=3)

    def __check_init__(self):
        if self.schedule not in (None, "sequential", "parallel"):
            raise GPClassError(f"EP: schedule must be 'sequential', 'parallel' or None; got {self.schedule!r}.")
        if self.order not in ("fixed", "random"):
            raise GPClassError(f"EP: order must be 'fixed' or 'random'; got {self.order!r}.")
        if self.schedule == "parallel" and self.order == "random":
            raise GPClassError("EP(schedule='parallel', order='random'): the parallel schedule updates every site at "
                               "once and has no order; order='random' is for the sequential schedule.")
        require_setting("EP", "damping", self.damping, high=1.0, high_open=False, optional=True)
        require_setting("EP", "tol", self.tol, optional=True)
        require_setting("EP", "max_steps", self.max_steps, low=1, low_open=False, integer=True)
        require_setting("EP", "anderson", self.anderson, low_open=False, integer=True)

    def solve(self, op, likelihood, y, init=None, key=None):
        """The sequential or parallel schedule on a kernel's K, the parallel one under a sparse prior."""
        if MATRIX in op.capabilities:  # schedule None runs the sequential sweeps here (_run_sweeps)
            return self.solve_matrix(op.K, likelihood, y, init, key)
        if self.schedule == "sequential":
            op.require(MATRIX, "EP(schedule='sequential')", "Under a sparse prior EP updates every site at once: "
                       "use schedule='parallel' or the default schedule=None.")
        if self.order == "random":
            raise GPClassError("EP(order='random') orders the sequential schedule's site updates; under a sparse prior "
                               "(gpc.Sparse) EP runs the parallel schedule, which has no order: use order='fixed'.")
        return solve_sparse_ep(self, op, likelihood, y, init)

    def solve_matrix(self, K, likelihood, y, init=None, key=None):
        if self.order == "random" and key is None:
            raise GPClassError("EP(order='random') needs an explicit PRNG key: gpc.infer(..., key=jax.random.key(0)).")
        n = K.shape[0]
        dtype = K.dtype
        tau0 = jnp.zeros(n, dtype) if init is None else jnp.asarray(init[0], dtype)
        nu0 = jnp.zeros(n, dtype) if init is None else jnp.asarray(init[1], dtype)
        # The sites as a differentiable function of K and the likelihood: the posterior (predictions) depends on
        # them, and their adjoint is solved only when something differentiated depends on them.
        tau, nu, sweeps, status, change, factor = _fixed_point(self, K, likelihood, y, tau0, nu0, key)
        if likelihood.log_concave:
            # dL/ds = 0 at the fixed point (module docstring): log Z_EP's gradient holds the sites fixed.
            log_marginal = _log_marginal_at_fixed_point(K, likelihood, y, *lax.stop_gradient((tau, nu, factor)))
            L = factor_b_given(K, sqrt_precision(tau), factor[0])  # the last sweep's factor
        else:
            L = factor_b(K, sqrt_precision(tau))
            log_marginal = _log_marginal(K, likelihood, y, tau, nu, L)
        return site_posterior(  # the predictive form of GPML Algorithm 3.6
            K, tau, nu, L,
            log_marginal=log_marginal,
            info=SolverInfo(num_steps=sweeps, status=status, max_change=change),
            warm_start=(lax.stop_gradient(tau), lax.stop_gradient(nu)),
        )

    def resolved_tol(self, dtype):
        return tolerance(self.tol, dtype, 1e-10, 1e-5)

    def resolved_damping(self, likelihood):
        undamped = self.schedule != "parallel" and likelihood.log_concave  # None on a kernel's K is sequential
        return (1.0 if undamped else 0.5) if self.damping is None else self.damping


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _fixed_point(method: EP, K, likelihood, y, tau0, nu0, key):
    """:func:`_run_sweeps`, the converged sites (tau~, nu~) a differentiable function of K and the likelihood
    (:func:`_fixed_point_bwd`; the factor of B and the counts carry no derivative)."""
    return _run_sweeps(method, K, likelihood, y, tau0, nu0, key)


class _Sweeps(NamedTuple):
    """EP's state after a sweep: the sites, their factorisation, log Z_EP, and the last sweep's changes."""

    tau: Array
    nu: Array
    factor: tuple[Array, Array]
    log_z: Array
    sweep: Array  # sweeps taken: the random order's permutation index
    change: Array  # relative change of the sites (tau~ and nu~ separately, the larger)
    log_z_change: Array
    memory: anderson.Memory | None  # Anderson acceleration's past sweeps


def _run_sweeps(method, K, likelihood, y, tau0, nu0, key):
    """EP sweeps (:func:`gpclass._iterate.iterate`) until the sites and log Z_EP stop changing.

    Returns (tau~, nu~, sweeps, status, the last relative change of the sites, ``factor_sites(K, tau~)``).
    """
    n = K.shape[0]
    tol = method.resolved_tol(K.dtype)
    damping = method.resolved_damping(likelihood)

    def sweep(tau, nu, i, factor):
        if method.schedule == "parallel":
            return _parallel_sweep(K, likelihood, y, tau, nu, damping, factor)
        order = None if method.order == "fixed" else jax.random.permutation(jax.random.fold_in(key, i), n)
        return _sequential_sweep(K, likelihood, y, tau, nu, damping, order, factor)

    accelerate = method.anderson > 0 and (method.schedule == "parallel" or method.order == "fixed")

    def step(s: _Sweeps) -> _Sweeps:
        tau, nu = sweep(s.tau, s.nu, s.sweep, s.factor)
        change = jnp.maximum(relative_change(tau, s.tau), relative_change(nu, s.nu))  # the sweep's own
        memory = s.memory
        if accelerate:
            tau, nu, memory = extrapolate_sites(memory, s.tau, s.nu, tau, nu)
        # One factorisation per sweep, shared by log Z_EP here and the next sweep's marginals.
        factor = factor_sites(K, tau)
        log_z = _log_marginal(K, likelihood, y, tau, nu, factor=factor)
        return _Sweeps(tau, nu, factor, log_z, s.sweep + 1, change, jnp.abs(log_z - s.log_z), memory)

    def terminate(s: _Sweeps):
        return (s.change <= tol) & (s.log_z_change <= tol * (1.0 + jnp.abs(s.log_z))), jnp.asarray(False)

    inf = jnp.asarray(jnp.inf, K.dtype)
    memory = anderson.start(jnp.concatenate([tau0, nu0]), method.anderson) if accelerate else None
    start = _Sweeps(tau0, nu0, factor_sites(K, tau0), -inf, jnp.asarray(0), inf, inf, memory)
    end = iterate(step, terminate, start, max_steps=method.max_steps, finite=lambda s: all_finite(s.tau, s.nu))
    return end.state.tau, end.state.nu, end.num_steps, end.status, end.state.change, end.state.factor


def _fixed_point_fwd(method, K, likelihood, y, tau0, nu0, key):
    K, likelihood, y, tau0, nu0, key = primal_values((K, likelihood, y, tau0, nu0, key))
    out = _run_sweeps(method, K, likelihood, y, tau0, nu0, key)
    return out, (K, likelihood, y, out[0], out[1], out[3] == Status.CONVERGED)


def _fixed_point_bwd(method, residuals, cotangents):
    """Implicit adjoint of the fixed point s = F(s, theta) of the undamped parallel update F.

    With J = dF/ds the sites' sensitivity is ds = (I - J)^-1 dF/dtheta dtheta,
    so theta_bar = (dF/dtheta)^T lambda with (I - J)^T lambda = s_bar, solved
    as a dense linear system (:func:`_update_jacobian`, one LU factorisation of
    size 2n).  Damping does not enter: the damped map d F + (1 - d) I has the
    same fixed points, and d cancels between (I - J) and dF/dtheta.  (The
    iteration lambda <- s_bar + J^T lambda, used here before, diverged where
    F is not a contraction: on Wisconsin subsets with near-repeated rows,
    where J has an eigenvalue near -1.4, it turned a convergence residual
    s_bar ~ 1e-8 into gradients of 1e10 to 1e22.)  No adjoint for an
    unconverged forward solve (its gradient is meaningless, and gpc.fit
    discards it): there lambda = s_bar.  Nothing to solve when the sites'
    cotangents are symbolic zeros (log Z_EP of a log-concave likelihood alone
    was differentiated).
    """
    K, likelihood, y, tau, nu, converged = residuals
    n = K.shape[0]
    site_bars = instantiated(cotangents[:2], (tau, nu))
    if site_bars is None:
        return None, None, None, None, None, None
    tau_bar, nu_bar = site_bars
    s_bar = jnp.concatenate([tau_bar, nu_bar])
    I_minus_J = jnp.eye(2 * n, dtype=K.dtype) - _update_jacobian(K, likelihood, y, tau, nu)
    lam = jnp.where(converged, dense.solve(I_minus_J.T, s_bar), s_bar)
    _, vjp_theta = jax.vjp(lambda K, likelihood: _parallel_sweep(K, likelihood, y, tau, nu, 1.0), K, likelihood)
    K_bar, likelihood_bar = vjp_theta((lam[:n], lam[n:]))
    return K_bar, likelihood_bar, jnp.zeros_like(y), jnp.zeros_like(tau), jnp.zeros_like(nu), None


_fixed_point.defvjp(_fixed_point_fwd, _fixed_point_bwd, symbolic_zeros=True)


def _update_jacobian(K, likelihood, y, tau, nu):
    """J = dF/ds, 2n x 2n, of the undamped parallel update F(s) = site_update(marginals(s), s), s = (tau~, nu~).

    Site i's update depends on its own (tau~_i, nu~_i) and on its marginal
    (Sigma_ii, mu_i), so J = D_s + D_m M with per-site derivatives D (four
    elementwise vectors each, from two reverse passes through the elementwise
    site update) and the dense derivative M of the marginals, known in closed
    form from dSigma = -Sigma dS~ Sigma and mu = Sigma nu~:
    dSigma_ii/dtau~_j = -Sigma_ij^2, dmu_i/dtau~_j = -Sigma_ij mu_j,
    dmu_i/dnu~_j = Sigma_ij.  O(n^3) for Sigma, O(n^2) for the rest.
    """
    factor = factor_sites(K, tau)
    sigma_diag, mu, _ = site_marginals(K, tau, nu, factor)
    Sigma = site_covariance(K, factor)

    def update(sigma_diag, mu, tau, nu):
        return site_update(likelihood, y, *cavity(sigma_diag, mu, tau, nu))

    _, pull = jax.vjp(update, sigma_diag, mu, tau, nu)
    ones, zeros = jnp.ones_like(tau), jnp.zeros_like(tau)

    def rows(cotangent):
        d_sigma, d_mu, d_tau, d_nu = pull(cotangent)  # elementwise: the update of site i depends on site i only
        by_tau = jnp.diag(d_tau) - d_sigma[:, None] * Sigma**2 - d_mu[:, None] * Sigma * mu[None, :]
        by_nu = jnp.diag(d_nu) + d_mu[:, None] * Sigma
        return jnp.concatenate([by_tau, by_nu], axis=1)

    return jnp.concatenate([rows((ones, zeros)), rows((zeros, ones))], axis=0)


def _parallel_sweep(K, likelihood, y, tau, nu, damping, factor=None):
    """All sites updated from the current marginals, then the posterior recomputed once."""
    sigma_diag, mu, _ = site_marginals(K, tau, nu, factor)
    new_tau, new_nu = site_update(likelihood, y, *cavity(sigma_diag, mu, tau, nu))
    return (1.0 - damping) * tau + damping * new_tau, (1.0 - damping) * nu + damping * new_nu


def _sequential_sweep(K, likelihood, y, tau, nu, damping, order=None, factor=None, block=64, panels=None):
    """One pass of GPML Algorithm 3.5 lines 4-12: sites updated one at a time, in ``order`` (``None``: 1..n).

    Sigma is recomputed from a fresh Cholesky factor at the start of every
    sweep (lines 13-15), which stops rounding drift.  Each site update is the
    rank-one change Sigma <- Sigma - c s_i s_i^T (GPML eq. 3.70, s_i = Sigma[:, i])
    and mu <- mu + g s_i.  Sigma, mu and the sites are put in the visiting
    order, and the sites are taken in blocks of ``block`` (:func:`_block_sweep`):
    a site's cavity needs only its own entries of Sigma and mu, and the rows
    and columns of the sites already visited are never read again in the
    sweep.  So the blocks are grouped into ``panels`` (default: one per four
    blocks, at most four) and each panel updates only the trailing part of
    Sigma that the sites from the panel on still read: 2 n^3 (1/3 + 1/2P +
    1/6P^2) multiply-adds for P panels instead of 2 n^3.  The arithmetic is
    the same sequence of exact rank-one updates.
    """
    n = K.shape[0]
    factor = factor_sites(K, tau) if factor is None else factor
    _, mu, _ = site_marginals(K, tau, nu, factor)
    Sigma = site_covariance(K, factor)
    if order is not None:
        Sigma, mu, y_visit, tau_visit, nu_visit = Sigma[order][:, order], mu[order], y[order], tau[order], nu[order]
    else:
        y_visit, tau_visit, nu_visit = y, tau, nu
    b = min(block, n)
    num_blocks = -(-n // b)
    pad = num_blocks * b - n
    if pad:  # padded sites: variance 1, label 1 and no update (see _block_sweep)
        Sigma = jnp.pad(Sigma, (0, pad)) + jnp.diag(jnp.arange(num_blocks * b) >= n).astype(K.dtype)
        mu, tau_visit, nu_visit = (jnp.pad(v, (0, pad)) for v in (mu, tau_visit, nu_visit))
        y_visit = jnp.pad(y_visit, (0, pad), constant_values=1)
    num_panels = max(1, min(4, num_blocks // 4)) if panels is None else max(1, min(panels, num_blocks))
    start = 0
    for blocks_in_panel in np.array_split(np.arange(num_blocks), num_panels):
        stop = (int(blocks_in_panel[-1]) + 1) * b
        tau_visit, nu_visit, Sigma, mu = _block_sweep(
            likelihood, y_visit, tau_visit, nu_visit, damping, Sigma, mu, start, stop, b, n
        )
        Sigma, mu, start = Sigma[stop - start:, stop - start:], mu[stop - start:], stop
    tau_visit, nu_visit = tau_visit[:n], nu_visit[:n]
    if order is None:
        return tau_visit, nu_visit
    return tau.at[order].set(tau_visit), nu.at[order].set(nu_visit)


def _block_sweep(likelihood, y, tau, nu, damping, Sigma, mu, start, stop, b, n):
    """Sites start..stop-1 (in visiting order, blocks of b) on Sigma and mu of the sites from ``start`` on.

    Within a block only the block's columns are formed: with A = Sigma[block, block]
    at the block's start, the block's part of s_j at its update is
    a_j = A e_j - sum_{l<j} c_l a_l a_l[j], and the whole column is s_j = S t_j,
    S = Sigma[:, block] at the block's start, t_j = e_j - sum_{l<j} c_l a_l[j] t_l
    (in b dimensions): one product of [a; t] (2b x b) with the vector c_l a_l[j]
    per site, and mu_j now = mu_j + sum_{l<j} g_l a_l[j].  After the block, Sigma
    and mu take the block's rank-b update U diag(c) U^T, U = S T, as matrix
    products.  Sites at n and beyond are padding: no update.
    Returns (tau~, nu~, Sigma, mu) after the sites.
    """
    dtype = Sigma.dtype
    basis = jnp.concatenate([jnp.zeros((b, b), dtype), jnp.eye(b, dtype=dtype)])  # [A e_j; e_j] less A

    def block_update(carry, first):  # first: the block's first site, in visiting order
        Sigma, mu, tau, nu = carry
        local = first - start  # its row and column in Sigma
        S = lax.dynamic_slice_in_dim(Sigma, local, b, axis=1)
        start_columns = basis + jnp.concatenate([lax.dynamic_slice_in_dim(S, local, b), jnp.zeros((b, b), dtype)])
        mu_b = lax.dynamic_slice_in_dim(mu, local, b)
        y_b, tau_b, nu_b = (lax.dynamic_slice_in_dim(v, first, b) for v in (y, tau, nu))
        ok = first + jnp.arange(b) < n

        def site(carry, k):
            a_and_t, coef, gain, tau_b, nu_b = carry  # columns j < k filled: [a_j; t_j]; c_j, g_j
            row = a_and_t[k, :]  # a_j[k] for the block's earlier sites j, 0 for later ones
            column = start_columns[:, k] - a_and_t @ (coef * row)  # [a_k; t_k]
            s_kk, mu_k = column[k], mu_b[k] + jnp.dot(row, gain)
            tau_cav, nu_cav = 1.0 / s_kk - tau_b[k], mu_k / s_kk - nu_b[k]
            new_tau, new_nu = site_update(likelihood, y_b[k][None], tau_cav[None], nu_cav[None])
            new_tau = jnp.where(ok[k], (1.0 - damping) * tau_b[k] + damping * new_tau[0], tau_b[k])
            new_nu = jnp.where(ok[k], (1.0 - damping) * nu_b[k] + damping * new_nu[0], nu_b[k])
            delta_tau, delta_nu = new_tau - tau_b[k], new_nu - nu_b[k]
            # Sherman-Morrison (GPML eq. 3.70) and mu = Sigma nu~.
            c = delta_tau / (1.0 + delta_tau * s_kk)
            g = delta_nu - c * (mu_k + s_kk * delta_nu)
            put = functools.partial(lax.dynamic_update_index_in_dim, index=k, axis=0)  # k is in bounds: no check
            return (lax.dynamic_update_slice(a_and_t, column[:, None], (0, k)), put(coef, c), put(gain, g),
                    put(tau_b, new_tau), put(nu_b, new_nu)), None

        zeros = jnp.zeros(b, dtype)
        (a_and_t, coef, gain, tau_b, nu_b), _ = lax.scan(site, (jnp.zeros((2 * b, b), dtype), zeros, zeros, tau_b, nu_b),
                                                         jnp.arange(b))
        U = S @ a_and_t[b:]
        tau, nu = lax.dynamic_update_slice(tau, tau_b, (first,)), lax.dynamic_update_slice(nu, nu_b, (first,))
        return (Sigma - (U * coef) @ U.T, mu + U @ gain, tau, nu), None

    (Sigma, mu, tau, nu), _ = lax.scan(block_update, (Sigma, mu, tau, nu), jnp.arange(start, stop, b))
    return tau, nu, Sigma, mu


@jax.custom_vjp
def _log_marginal_at_fixed_point(K, likelihood, y, tau, nu, factor):
    """log Z_EP (:func:`_log_marginal`) at converged sites, from their factor ``factor_sites(K, tau~)``.

    Reverse mode gives the explicit partial derivatives at fixed sites, which
    at the EP fixed point are the total derivatives (module docstring): for K,
    GPML eq. 5.27, K_bar = 1/2 (b b^T - S~^1/2 B^-1 S~^1/2) with b = K^-1 mu
    (GPML Algorithm 3.6, line 4) and B^-1 from the factor; for the likelihood,
    that of sum_i log Z_i at fixed cavities (eq. 3.65).  Nothing for y, the
    sites and the factor.
    """
    return _log_marginal(K, likelihood, y, tau, nu, factor=factor)


def _log_marginal_at_fixed_point_fwd(K, likelihood, y, tau, nu, factor):
    return _log_marginal(K, likelihood, y, tau, nu, factor=factor), (K, likelihood, y, tau, nu, factor)


def _log_marginal_at_fixed_point_bwd(residuals, g):
    K, likelihood, y, tau, nu, factor = residuals
    L = factor[0]
    sqrt_tau = sqrt_precision(tau)
    b = site_alpha(K, tau, nu, L)
    K_bar = 0.5 * g * (jnp.outer(b, b) - sqrt_tau[:, None] * inverse_from_cholesky(L) * sqrt_tau[None, :])
    sigma_diag, mu, _ = site_marginals(K, tau, nu, factor)
    tau_cav, nu_cav = cavity(sigma_diag, mu, tau, nu)
    _, pull = jax.vjp(lambda lik: jnp.sum(lik.tilted_moments(y, nu_cav / tau_cav, 1.0 / tau_cav)[0]), likelihood)
    (likelihood_bar,) = pull(g)
    zeros = jax.tree.map(jnp.zeros_like, (y, tau, nu, factor))
    return (K_bar, likelihood_bar, *zeros)


_log_marginal_at_fixed_point.defvjp(_log_marginal_at_fixed_point_fwd, _log_marginal_at_fixed_point_bwd)


def _log_marginal(K, likelihood, y, tau, nu, L=None, factor=None):
    """log Z_EP by GPML eqs. 3.65, 3.73 and 3.74 from the Cholesky factor of B.

    A differentiable function of K, the likelihood and the sites; the cavity
    parameters follow from them (eq. 3.56).  See the module docstring for how
    the sites' own dependence on the hyperparameters enters the gradient.
    """
    if factor is None:
        L = factor_b(K, sqrt_precision(tau)) if L is None else L
        factor = (L, covariance_root(K, tau, L))
    sigma_diag, mu, L = site_marginals(K, tau, nu, factor)
    sqrt_tau = sqrt_precision(tau)
    # nu~^T Sigma nu~ = nu~^T K nu~ - |L^-1 S~^1/2 K nu~|^2 carries the K-dependence of eq. 3.74.
    k_nu = K @ nu
    v = dense.solve_triangular(L, sqrt_tau * k_nu, lower=True)
    nu_sigma_nu = jnp.dot(nu, k_nu) - jnp.dot(v, v)
    return ep_log_marginal(likelihood, y, tau, nu, sigma_diag, mu, half_log_det(L), nu_sigma_nu)
