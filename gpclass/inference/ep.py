"""Expectation propagation for binary GP classification (GPML section 3.6, Algorithm 3.5).

Each likelihood term p(y_i|f_i) is replaced by an unnormalised Gaussian site
with natural parameters (tau~_i, nu~_i); sites are refined until the marginals
of q(f) = N(mu, Sigma), Sigma = (K^-1 + S~)^-1, mu = Sigma nu~, match the
moments of the tilted distributions (GPML eqs. 3.56-3.59).

Gradients.  At the EP fixed point the derivative of log Z_EP through the site
parameters vanishes (Seeger 2005; Kuss & Rasmussen eq. 51): log Z_EP equals
log int N(f|0, K) prod_i t~_i(f_i) df with the sites (and hence the cavity
distributions and site normalisers Z~_i) held fixed.  So the gradient is the
explicit one: the converged sites and cavities enter the evaluation of eq.
3.65 through ``stop_gradient``, and only K (and the likelihood, through the
tilted normalisers at fixed cavities) carries derivatives.  No sweep is
differentiated, so memory does not grow with the number of sweeps.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .._linalg import factor_b, half_log_det, solve_b
from ._base import AbstractInference
from ._posterior import SolverInfo


class EP(AbstractInference):
    """Expectation propagation, sequential (GPML Algorithm 3.5) or parallel schedule.

    Attributes:
        schedule: ``"sequential"`` updates one site at a time with O(n^2)
            rank-one updates of Sigma, in a ``lax.scan`` over the sites, and
            recomputes Sigma from a fresh Cholesky factor after every sweep;
            ``"parallel"`` updates all sites from the current marginals and
            recomputes the posterior once per sweep.
        order: the site order of the sequential schedule, ``"fixed"`` (1..n)
            or ``"random"`` (a fresh permutation every sweep, drawn from the
            explicit ``key`` passed to :func:`gpclass.infer`).
        damping: the fraction of the new site parameters taken in each update
            (1 = undamped).  ``None`` means 1 for the sequential schedule with a
            log-concave likelihood, and 0.5 for the parallel schedule or a
            likelihood that is not log-concave (label noise), where undamped
            updates can oscillate.
        tol: convergence when, between two sweeps, the largest change of tau~
            and nu~ is at most ``tol (1 + max |.|)`` and log Z_EP changes by at
            most ``tol (1 + |log Z_EP|)``.  ``None`` means 1e-10 in float64 and
            1e-5 in float32.
        max_sweeps: largest number of sweeps.
        throw: raise if EP did not converge; otherwise report it in ``info``.
    """

    schedule: str = eqx.field(static=True, default="sequential")
    order: str = eqx.field(static=True, default="fixed")
    damping: float | None = eqx.field(static=True, default=None)
    tol: float | None = eqx.field(static=True, default=None)
    max_sweeps: int = eqx.field(static=True, default=200)
    throw: bool = eqx.field(static=True, default=True)

    def __check_init__(self):
        if self.schedule not in ("sequential", "parallel"):
            raise ValueError(f"schedule must be 'sequential' or 'parallel'; got {self.schedule!r}.")
        if self.order not in ("fixed", "random"):
            raise ValueError(f"order must be 'fixed' or 'random'; got {self.order!r}.")

    def solve(self, K, likelihood, y, init=None, key=None):
        if self.order == "random" and key is None:
            raise ValueError("EP(order='random') needs an explicit PRNG key: gpc.infer(..., key=jax.random.key(0)).")
        n = K.shape[0]
        dtype = K.dtype
        tol = (1e-10 if dtype == jnp.float64 else 1e-5) if self.tol is None else self.tol
        undamped = self.schedule == "sequential" and likelihood.log_concave
        damping = (1.0 if undamped else 0.5) if self.damping is None else self.damping
        # The sweeps are never differentiated (see the module docstring).
        K_fixed = lax.stop_gradient(K)
        lik_fixed = lax.stop_gradient(likelihood)
        y = lax.stop_gradient(y)

        def sweep(tau, nu, i):
            if self.schedule == "parallel":
                return _parallel_sweep(K_fixed, lik_fixed, y, tau, nu, damping)
            order = jnp.arange(n) if self.order == "fixed" else jax.random.permutation(jax.random.fold_in(key, i), n)
            return _sequential_sweep(K_fixed, lik_fixed, y, tau, nu, damping, order)

        def body(state):
            tau, nu, log_z, i, _, _ = state
            new_tau, new_nu = sweep(tau, nu, i)
            new_log_z = _log_marginal(K_fixed, lik_fixed, y, new_tau, new_nu)
            change = jnp.maximum(
                jnp.max(jnp.abs(new_tau - tau)) / (1.0 + jnp.max(jnp.abs(new_tau))),
                jnp.max(jnp.abs(new_nu - nu)) / (1.0 + jnp.max(jnp.abs(new_nu))),
            )
            converged = (change <= tol) & (jnp.abs(new_log_z - log_z) <= tol * (1.0 + jnp.abs(new_log_z)))
            return new_tau, new_nu, new_log_z, i + 1, converged, change

        def keep_going(state):
            *_, i, converged, _ = state
            return ~converged & (i < self.max_sweeps)

        tau0 = jnp.zeros(n, dtype) if init is None else jnp.asarray(init[0], dtype)
        nu0 = jnp.zeros(n, dtype) if init is None else jnp.asarray(init[1], dtype)
        state = (tau0, nu0, jnp.asarray(-jnp.inf, dtype), 0, jnp.asarray(False), jnp.asarray(jnp.inf, dtype))
        tau, nu, _, sweeps, converged, change = lax.while_loop(keep_going, body, state)
        converged = converged & jnp.all(jnp.isfinite(tau)) & jnp.all(jnp.isfinite(nu))
        if self.throw:
            tau = eqx.error_if(
                tau, ~converged, "EP did not converge (raise max_sweeps, add damping, or pass throw=False)."
            )
        tau, nu = lax.stop_gradient(tau), lax.stop_gradient(nu)
        sqrt_tau = jnp.sqrt(tau)
        L = factor_b(K, sqrt_tau)
        # Predictive form (GPML Algorithm 3.6): alpha = nu~ - S~^1/2 B^-1 S~^1/2 K nu~.
        alpha = nu - sqrt_tau * solve_b(L, sqrt_tau * (K @ nu))
        return dict(
            alpha=alpha,
            sqrt_w=sqrt_tau,
            chol=L,
            mean=K @ alpha,
            log_marginal=_log_marginal(K, likelihood, y, tau, nu, L),
            info=SolverInfo(num_steps=sweeps, converged=converged, max_change=change),
            warm_start=(tau, nu),
        )


def _marginals(K, tau, nu, L=None):
    """Diagonal of Sigma = K - K S~^1/2 B^-1 S~^1/2 K and mu = Sigma nu~ (GPML eq. 3.53, Algorithm 3.5 lines 13-15)."""
    sqrt_tau = jnp.sqrt(tau)
    L = factor_b(K, sqrt_tau) if L is None else L
    V = jax.scipy.linalg.solve_triangular(L, sqrt_tau[:, None] * K, lower=True)
    sigma_diag = jnp.diagonal(K) - jnp.sum(V**2, axis=0)
    mu = K @ nu - V.T @ (V @ nu)
    return sigma_diag, mu, L


def _cavity(sigma_diag, mu, tau, nu):
    """Cavity natural parameters tau_-i = 1/Sigma_ii - tau~_i, nu_-i = mu_i/Sigma_ii - nu~_i (GPML eq. 3.56)."""
    return 1.0 / sigma_diag - tau, mu / sigma_diag - nu


def _site_update(likelihood, y, tau_cav, nu_cav):
    """New site parameters matching the tilted moments (GPML eqs. 3.58-3.59).

    For a log-concave likelihood the tilted variance is below the cavity
    variance, so tau~ > 0.  Otherwise (label noise) tau~ could turn negative,
    which the stable factorisation of B cannot take: such a site precision is
    set to 0 (the site is switched off), as GPML's infEP does.
    """
    _, m_hat, v_hat = likelihood.tilted_moments(y, nu_cav / tau_cav, 1.0 / tau_cav)
    return jnp.maximum(1.0 / v_hat - tau_cav, 0.0), m_hat / v_hat - nu_cav


def _parallel_sweep(K, likelihood, y, tau, nu, damping):
    """All sites updated from the current marginals, then the posterior recomputed once."""
    sigma_diag, mu, _ = _marginals(K, tau, nu)
    new_tau, new_nu = _site_update(likelihood, y, *_cavity(sigma_diag, mu, tau, nu))
    return (1.0 - damping) * tau + damping * new_tau, (1.0 - damping) * nu + damping * new_nu


def _sequential_sweep(K, likelihood, y, tau, nu, damping, order):
    """One pass of GPML Algorithm 3.5 lines 4-12 as a ``lax.scan``: O(n^2) per site.

    Sigma is recomputed from a fresh Cholesky factor at the start of every
    sweep (lines 13-15), which stops rounding drift from the rank-one updates.
    """
    sigma_diag, mu, L = _marginals(K, tau, nu)
    sqrt_tau = jnp.sqrt(tau)
    V = jax.scipy.linalg.solve_triangular(L, sqrt_tau[:, None] * K, lower=True)
    Sigma = K - V.T @ V

    def update(carry, i):
        Sigma, mu, tau, nu = carry
        s_ii = Sigma[i, i]
        tau_cav, nu_cav = 1.0 / s_ii - tau[i], mu[i] / s_ii - nu[i]
        new_tau, new_nu = _site_update(likelihood, y[i][None], tau_cav[None], nu_cav[None])
        new_tau = (1.0 - damping) * tau[i] + damping * new_tau[0]
        new_nu = (1.0 - damping) * nu[i] + damping * new_nu[0]
        delta_tau, delta_nu = new_tau - tau[i], new_nu - nu[i]
        s_i = Sigma[:, i]
        # Sherman-Morrison (GPML eq. 3.70) and mu = Sigma nu~ updated in O(n).
        c = delta_tau / (1.0 + delta_tau * s_ii)
        mu = mu + s_i * (delta_nu - c * (mu[i] + s_ii * delta_nu))
        Sigma = Sigma - c * jnp.outer(s_i, s_i)
        return (Sigma, mu, tau.at[i].set(new_tau), nu.at[i].set(new_nu)), None

    (_, _, tau, nu), _ = lax.scan(update, (Sigma, mu, tau, nu), order)
    return tau, nu


def _log_marginal(K, likelihood, y, tau, nu, L=None):
    """log Z_EP by GPML eqs. 3.65, 3.73 and 3.74 from the Cholesky factor of B.

    The cavity parameters are computed from the (fixed) sites and enter
    through ``stop_gradient``: only the explicit dependence on K and on the
    likelihood (tilted normalisers at fixed cavities) is differentiated,
    which is the exact gradient at the fixed point (module docstring).
    """
    sigma_diag, mu, L = _marginals(K, tau, nu, L)
    tau_cav, nu_cav = lax.stop_gradient(_cavity(sigma_diag, mu, tau, nu))
    log_z_i, _, _ = likelihood.tilted_moments(y, nu_cav / tau_cav, 1.0 / tau_cav)
    sqrt_tau = jnp.sqrt(tau)
    # nu~^T Sigma nu~ = nu~^T K nu~ - |L^-1 S~^1/2 K nu~|^2 carries the K-dependence of eq. 3.74.
    k_nu = K @ nu
    v = jax.scipy.linalg.solve_triangular(L, sqrt_tau * k_nu, lower=True)
    nu_sigma_nu = jnp.dot(nu, k_nu) - jnp.dot(v, v)
    return (
        jnp.sum(log_z_i)
        - half_log_det(L)
        + 0.5 * nu_sigma_nu
        + 0.5 * jnp.sum(jnp.log1p(tau / tau_cav))
        - 0.5 * jnp.sum(nu**2 / (tau_cav + tau))
        + 0.5 * jnp.dot(nu_cav, (tau / tau_cav * nu_cav - 2.0 * nu) / (tau + tau_cav))
    )
