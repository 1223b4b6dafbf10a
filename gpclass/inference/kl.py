"""Gaussian variational inference: q(f) = N(m, V) maximising the evidence lower bound (Opper & Archambeau 2009).

    log p(y|X, theta) >= ELBO(q) = sum_i E_q[log p(y_i|f_i)] - KL(q || N(0, K)).

At the optimum (Opper & Archambeau) m = K alpha and V = (K^-1 + diag(lambda))^-1
with alpha_i = d E_i / d m_i and lambda_i = -2 d E_i / d V_ii (E_i the expected
log-likelihood of case i): 2n parameters, the same "prior times diagonal
Gaussian sites" form as EP with site precisions tau~ = lambda and
precision-means nu~ (m = Sigma nu~).  In that form, with B = I + S~^1/2 K S~^1/2
and Sigma = (K^-1 + S~)^-1,

    KL = 1/2 [tr(K^-1 Sigma) + m^T K^-1 m - n + log|K| - log|Sigma|]
       = 1/2 [m^T alpha - sum_i tau~_i Sigma_ii] + 1/2 log|B|,

using tr(K^-1 Sigma) = n - tr(S~ Sigma) and |K| / |Sigma| = |B|.

Solver: the natural-gradient (conjugate-computation, Khan & Lin 2017) update
of the sites to the fixed point above: from the current marginals (m_i, s_i),
target sites tau~_i = -2 dE_i/ds_i, nu~_i = dE_i/dm_i + tau~_i m_i, taken with a
step beta in (0, 1]; beta starts at 1 (the fixed point of Opper & Archambeau)
and is halved until the ELBO does not decrease, then doubled again for the next
step: the ELBO increases monotonically.  One Cholesky factorisation of B per
trial step.  For a log-concave likelihood E_q[-d^2 log p / df^2] >= 0, so
tau~ >= 0 and B stays well conditioned.

Gradient.  At the optimum the ELBO is stationary in the sites, so its
derivative with respect to the hyperparameters is the explicit one with the
sites held fixed (envelope theorem): a ``stop_gradient`` on the converged
sites, exact at convergence, memory independent of the iteration count.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .._linalg import half_log_det, sqrt_precision
from ._base import AbstractInference
from ._posterior import SolverInfo
from ._sites import factor_sites, site_alpha, site_marginals


class KL(AbstractInference):
    """Gaussian KL variational inference: ``posterior.log_marginal`` is the maximised ELBO <= log p(y|X, theta).

    Attributes:
        tol: convergence when, between two steps, the largest site change is
            at most ``tol (1 + max |.|)`` (tau~ and nu~ separately) and the ELBO
            changes by at most ``tol (1 + |ELBO|)``.  ``None`` means 1e-10 in
            float64 and 1e-5 in float32.
        max_steps: largest number of site updates.
        max_halvings: largest number of step halvings within one update.
        throw: raise if the optimisation did not converge; otherwise report it in ``info``.

    Works with any log-concave likelihood that has ``expected_log_prob``
    (logistic, probit); the expectations use its quadrature.
    """

    tol: float | None = eqx.field(static=True, default=None)
    max_steps: int = eqx.field(static=True, default=1000)
    max_halvings: int = eqx.field(static=True, default=30)
    throw: bool = eqx.field(static=True, default=True)

    def solve(self, K, likelihood, y, init=None, key=None):
        if not likelihood.log_concave:
            raise ValueError(
                f"gpc.KL() needs a log-concave likelihood (non-negative site precisions); "
                f"{type(likelihood).__name__} is not. Use gpc.EP() instead."
            )
        n = K.shape[0]
        dtype = K.dtype
        tol = (1e-10 if dtype == jnp.float64 else 1e-5) if self.tol is None else self.tol
        tau0 = jnp.zeros(n, dtype) if init is None else jnp.asarray(init[0], dtype)
        nu0 = jnp.zeros(n, dtype) if init is None else jnp.asarray(init[1], dtype)
        tau, nu, steps, converged, change = _optimise(self, K, likelihood, y, tau0, nu0, tol)
        tau, nu = lax.stop_gradient(tau), lax.stop_gradient(nu)
        if self.throw:
            tau = eqx.error_if(tau, ~converged, "KL did not converge (raise max_steps, or pass throw=False).")
        factor = factor_sites(K, tau)
        alpha = site_alpha(K, tau, nu, factor[0])
        return dict(
            alpha=alpha,
            sqrt_w=sqrt_precision(tau),
            chol=factor[0],
            mean=K @ alpha,
            log_marginal=elbo(K, likelihood, y, tau, nu, factor),  # envelope theorem: sites held fixed
            info=SolverInfo(num_steps=steps, converged=converged, max_change=change),
            warm_start=(tau, nu),
        )


def elbo(K, likelihood, y, tau, nu, factor=None):
    """sum_i E_q[log p(y_i|f_i)] - KL(q || N(0, K)) for q = prior x sites (tau~, nu~)  (module docstring)."""
    factor = factor_sites(K, tau) if factor is None else factor
    sigma_diag, m, L = site_marginals(K, tau, nu, factor)
    alpha = site_alpha(K, tau, nu, L)
    kl = 0.5 * (jnp.dot(m, alpha) - jnp.dot(tau, sigma_diag)) + half_log_det(L)
    return jnp.sum(likelihood.expected_log_prob(y, m, sigma_diag)) - kl


def _target_sites(likelihood, y, m, s):
    """The fixed point of Opper & Archambeau as sites: tau~ = -2 dE/ds, nu~ = dE/dm + tau~ m."""
    grad_m, grad_s = jax.grad(lambda m, s: jnp.sum(likelihood.expected_log_prob(y, m, s)), argnums=(0, 1))(m, s)
    tau = jnp.maximum(-2.0 * grad_s, 0.0)  # >= 0 for log-concave likelihoods, up to quadrature rounding
    return tau, grad_m + tau * m


def _optimise(method: KL, K, likelihood, y, tau0, nu0, tol):
    """Natural-gradient site updates with step halving in ``lax.while_loop``; the ELBO never decreases."""
    dtype = K.dtype
    eps = jnp.finfo(dtype).eps

    def trial(tau, nu, target, beta):
        new_tau = (1.0 - beta) * tau + beta * target[0]
        new_nu = (1.0 - beta) * nu + beta * target[1]
        factor = factor_sites(K, new_tau)
        return new_tau, new_nu, factor, elbo(K, likelihood, y, new_tau, new_nu, factor)

    def relative_change(new_tau, new_nu, tau, nu):
        return jnp.maximum(
            jnp.max(jnp.abs(new_tau - tau)) / (1.0 + jnp.max(jnp.abs(new_tau))),
            jnp.max(jnp.abs(new_nu - nu)) / (1.0 + jnp.max(jnp.abs(new_nu))),
        )

    def step(state):
        tau, nu, factor, value, beta, i, _, _, _ = state
        sigma_diag, m, _ = site_marginals(K, tau, nu, factor)
        target = _target_sites(likelihood, y, m, sigma_diag)
        noise = 8.0 * eps * (1.0 + jnp.abs(value) + jnp.sum(jnp.abs(target[1] * m)))

        def worse(s):
            new_tau, new_nu, _, new_value, _, k = s
            return (new_value < value - noise) & (relative_change(new_tau, new_nu, tau, nu) > tol) & (
                k < method.max_halvings
            )

        def halve(s):
            *_, b, k = s
            return (*trial(tau, nu, target, 0.5 * b), 0.5 * b, k + 1)

        new_tau, new_nu, new_factor, new_value, beta, _ = lax.while_loop(
            worse, halve, (*trial(tau, nu, target, beta), beta, 0)
        )
        change = relative_change(new_tau, new_nu, tau, nu)
        accepted = (new_value >= value - noise) | (change <= tol)
        converged = accepted & (change <= tol) & (jnp.abs(new_value - value) <= tol * (1.0 + jnp.abs(new_value)))
        keep = lambda new, old: jnp.where(accepted, new, old)  # noqa: E731
        return (
            keep(new_tau, tau),
            keep(new_nu, nu),
            jax.tree.map(keep, new_factor, factor),
            keep(new_value, value),
            jnp.minimum(2.0 * beta, 1.0),
            i + 1,
            converged,
            ~accepted,
            change,
        )

    def keep_going(state):
        *_, i, converged, stuck, _ = state
        return ~converged & ~stuck & (i < method.max_steps)

    factor0 = factor_sites(K, tau0)
    false = jnp.asarray(False)
    value0 = elbo(K, likelihood, y, tau0, nu0, factor0)
    state = (tau0, nu0, factor0, value0, jnp.ones((), dtype), 0, false, false, jnp.asarray(jnp.inf, dtype))
    tau, nu, _, _, _, steps, converged, _, change = lax.while_loop(keep_going, step, state)
    converged = converged & jnp.all(jnp.isfinite(tau)) & jnp.all(jnp.isfinite(nu))
    return tau, nu, steps, converged, change
