"""Expectation propagation under a sparse FITC prior (GPML ``infEP`` with ``apxSparse``; Snelson & Ghahramani 2006).

The sites and log Z_EP are those of ``ep.py`` with K replaced by
K~ = Q + diag(K - Q).  Every sweep updates all sites from the current
marginals (the parallel schedule, damped) and refactorises once in
O(n m^2) (``LowRankFactor``); GPML instead updates the sites one at a time
with rank-one Cholesky updates, O(m^2) each.  Both stop at the same EP fixed
point.  As for the dense method with a log-concave likelihood, log Z_EP is
stationary in the sites at the fixed point, so its gradient is the explicit
one with the converged sites held fixed (``stop_gradient``); the posterior
(predictions) differentiates the sites implicitly at the fixed point of the
parallel update (:func:`_transposed_update`).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from .. import _anderson as anderson
from .._covariance import LowRankCovariance, LowRankFactor
from .._exceptions import GPClassError
from .._iterate import all_finite, iterate, relative_change
from .._status import Status
from .._types import Array
from ._ep_updates import cavity, ep_log_marginal, extrapolate_sites, site_update
from ._implicit import implicit_fixed_point_krylov, transposed
from ._posterior import SolverInfo, SparsePosterior


def solve_sparse_ep(method, op: LowRankCovariance, likelihood, y, init=None) -> SparsePosterior:
    """Sparse EP: sweeps to the fixed point on ``stop_gradient`` inputs, then log Z_EP at the converged sites."""
    if op.power != 1.0:
        raise GPClassError("EP under a sparse prior supports FITC only (gpc.Sparse(..., approximation='fitc')); "
                           "for VFE use gpc.KL() or gpc.Laplace().")
    if not likelihood.log_concave:
        raise GPClassError(f"sparse EP needs a log-concave likelihood (its gradient holds the sites fixed); "
                           f"{type(likelihood).__name__} is not.")
    n = op.shape[0]
    tau0 = jnp.zeros(n, op.dtype) if init is None else jnp.asarray(init[0], op.dtype)
    nu0 = jnp.zeros(n, op.dtype) if init is None else jnp.asarray(init[1], op.dtype)
    constants = lax.stop_gradient((op, likelihood, y, tau0, nu0))
    tau, nu, sweeps, status, change = _run_sweeps(method, *constants)
    tau, nu = lax.stop_gradient(tau), lax.stop_gradient(nu)
    factor = op.factor(tau)
    sigma_diag, mu = marginals(op, tau, nu, factor)
    # The posterior depends on the sites: the implicit function theorem at the fixed point of the undamped
    # parallel update, solved only when a prediction is differentiated; log Z_EP holds them fixed.
    tau_p, nu_p = implicit_fixed_point_krylov(_parallel_update, _transposed_update, (tau, nu),
                                              status == Status.CONVERGED, op, likelihood, y, krylov_steps=50)
    factor_p = op.factor(tau_p)  # the posterior's; the same values as factor (XLA computes them once)
    return SparsePosterior(
        alpha=op.inducing_weights(_alpha(op, factor_p, nu_p)),
        chol_uu=op.chol_uu,
        chol_u=factor_p.chol,
        mean=marginals(op, tau_p, nu_p, factor_p)[1],
        log_marginal=_log_marginal_at(op, likelihood, y, tau, nu, factor, sigma_diag, mu),
        info=SolverInfo(num_steps=sweeps, status=status, max_change=change),
        warm_start=(tau, nu),
    )


def _parallel_update(op, likelihood, y, sites):
    """The undamped parallel EP update of every site from the marginals of q (its fixed point: the sites)."""
    tau, nu = sites
    sigma_diag, mu = marginals(op, tau, nu, op.factor(tau))
    return site_update(likelihood, y, *cavity(sigma_diag, mu, tau, nu))


def _transposed_update(op, likelihood, y, sites):
    """lambda -> (I - J)^T lambda, J the Jacobian of :func:`_parallel_update` (dense EP's ``_update_jacobian``)
    applied matrix-free (``LowRankFactor.posterior_products``: O(n m^2)); the per-site derivatives of the update
    come from reverse mode."""
    tau, nu = sites
    factor = op.factor(tau)
    sigma, sigma_squared = factor.posterior_products(op)
    sigma_diag, mu = marginals(op, tau, nu, factor)
    _, pull = jax.vjp(lambda s, m, t, v: site_update(likelihood, y, *cavity(s, m, t, v)), sigma_diag, mu, tau, nu)
    ones, zeros = jnp.ones_like(tau), jnp.zeros_like(tau)
    rows = pull((ones, zeros)), pull((zeros, ones))  # d(new tau~), d(new nu~) by (Sigma_ii, mu_i, tau~_i, nu~_i)

    def i_minus_j(ds):
        d_tau, d_nu = ds
        d_sigma, d_mu = -sigma_squared(d_tau), sigma(d_nu - mu * d_tau)  # dSigma_ii, dmu_i by the sites
        j = [by_sigma * d_sigma + by_mu * d_mu + by_tau * d_tau + by_nu * d_nu
             for by_sigma, by_mu, by_tau, by_nu in rows]
        return d_tau - j[0], d_nu - j[1]

    return transposed(i_minus_j, sites)


def _alpha(op, factor: LowRankFactor, nu):
    """alpha = K~^-1 mu = (I + S~ K~)^-1 nu~ (GPML ``infEP``: alpha = tnu - solveKiW(K.mvm(tnu)), in a stable form)."""
    return factor.solve_i_plus_wk(op, nu)


def marginals(op, tau, nu, factor: LowRankFactor):
    """diag Sigma and mu = Sigma nu~ of q(f) = N(mu, (K~^-1 + S~)^-1), Sigma = diag(delta) + R R^T.

    mu is Sigma nu~ (``LowRankFactor.posterior_times``), not the equal K~ alpha:
    alpha comes from a solve with I + Phi^T D Phi, whose rounding (condition
    number ~1e6 at n = 10^5) moved mu by 1e-9 and kept the sites from meeting
    a 1e-10 tolerance at n = 10^6; Sigma nu~ moved by 4e-13 (rows permuted).
    """
    return factor.posterior_variance(op), factor.posterior_times(op, nu)


def _log_marginal_at(op, likelihood, y, tau, nu, factor, sigma_diag, mu):
    """log Z_EP under K~ from the marginals at (tau~, nu~), with nu~^T Sigma nu~ as a sum of squares
    (``LowRankFactor.posterior_quadratic``)."""
    nu_sigma_nu = factor.posterior_quadratic(op, nu)
    return ep_log_marginal(likelihood, y, tau, nu, sigma_diag, mu, factor.half_log_det_b(op), nu_sigma_nu)


class _Sweeps(NamedTuple):
    tau: Array
    nu: Array
    sigma_diag: Array  # the marginals at (tau, nu): shared by log Z_EP after a sweep and the next sweep's cavities
    mu: Array
    log_z: Array
    change: Array
    log_z_change: Array
    memory: anderson.Memory | None  # Anderson acceleration's past sweeps (EP.anderson)


def _run_sweeps(method, op, likelihood, y, tau0, nu0):
    """Damped parallel sweeps until the sites and log Z_EP stop changing (the dense method's test).

    Each sweep factorises once (``op.factor``, two n x m x m matrix products) and makes a few O(n m) passes;
    its output is extrapolated by Anderson acceleration as in the dense method (``EP.anderson``).
    """
    tol = method.resolved_tol(op.dtype)
    damping = 0.5 if method.damping is None else method.damping
    accelerate = method.anderson > 0

    def step(s: _Sweeps) -> _Sweeps:
        new_tau, new_nu = site_update(likelihood, y, *cavity(s.sigma_diag, s.mu, s.tau, s.nu))
        tau = (1.0 - damping) * s.tau + damping * new_tau
        nu = (1.0 - damping) * s.nu + damping * new_nu
        change = jnp.maximum(relative_change(tau, s.tau), relative_change(nu, s.nu))  # the sweep's own
        memory = s.memory
        if accelerate:
            tau, nu, memory = extrapolate_sites(memory, s.tau, s.nu, tau, nu)
        factor = op.factor(tau)
        sigma_diag, mu = marginals(op, tau, nu, factor)
        log_z = _log_marginal_at(op, likelihood, y, tau, nu, factor, sigma_diag, mu)
        return _Sweeps(tau, nu, sigma_diag, mu, log_z, change, jnp.abs(log_z - s.log_z), memory)

    def terminate(s: _Sweeps):
        return (s.change <= tol) & (s.log_z_change <= tol * (1.0 + jnp.abs(s.log_z))), jnp.asarray(False)

    inf = jnp.asarray(jnp.inf, op.dtype)
    memory = anderson.start(jnp.concatenate([tau0, nu0]), method.anderson) if accelerate else None
    start = _Sweeps(tau0, nu0, *marginals(op, tau0, nu0, op.factor(tau0)), -inf, inf, inf, memory)
    end = iterate(step, terminate, start, max_steps=method.max_steps, finite=lambda s: all_finite(s.tau, s.nu))
    return end.state.tau, end.state.nu, end.num_steps, end.status, end.state.change
