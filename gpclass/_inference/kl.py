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

Solver: Newton's method on the fixed-point equations of the sites (2n
unknowns, one dense 2n x 2n solve per step: :func:`_candidates`), safeguarded
by the natural-gradient (conjugate-computation, Khan & Lin 2017) update: from
the current marginals (m_i, s_i), target sites tau~_i = -2 dE_i/ds_i,
nu~_i = dE_i/dm_i + tau~_i m_i, taken with a step beta in (0, 1] that is halved
until the ELBO does not decrease.  A Newton candidate is taken only when it
does not lower the ELBO, so the ELBO never decreases; near the optimum Newton
converges quadratically.  The natural-gradient iteration alone converges
linearly, and for stiff kernels so slowly that stopping it on a small change
left gradients 2e-5 off (Ionosphere, sigma_f^2 = e^5).  For a log-concave
likelihood E_q[-d^2 log p / df^2] >= 0, so tau~ >= 0 and B stays well
conditioned.

Gradient.  At the optimum the ELBO is stationary in the sites, so its
derivative with respect to the hyperparameters is the explicit one with the
sites held fixed (envelope theorem): a ``stop_gradient`` on the converged
sites, exact at convergence, memory independent of the iteration count.  The
posterior (predictions) depends on the sites' own derivative: at the fixed
point (tau~, nu~) = T(tau~, nu~) it is (I - J)^-1 dT with the Newton step's J,
solved in reverse mode only when a prediction is differentiated
(:func:`gpclass._inference._implicit.implicit_fixed_point`).
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .. import _dense as dense
from .._exceptions import GPClassError
from .._iterate import all_finite, iterate, relative_change, rounding_level, tolerance
from .._linalg import factor_b_given, half_log_det, sqrt_precision
from .._status import Status
from .._types import Array
from .._validation import require_setting
from ._base import AbstractInference
from ._expectations import expected_log_lik_derivatives
from ._implicit import implicit_fixed_point
from ._posterior import SolverInfo
from ._sites import factor_sites, site_alpha, site_covariance, site_marginals, site_posterior
from .kl_sparse import solve_sparse_kl


class KL(AbstractInference):
    """Gaussian KL variational inference: ``posterior.log_marginal`` is the maximised ELBO <= log p(y|X, theta).

    Attributes:
        tol: convergence when, between two steps, the ELBO changes by at most
            ``tol (1 + |ELBO|)`` and the largest site change is at most
            ``site_tol (1 + max |.|)`` (tau~ and nu~ separately).  ``None`` means
            1e-10 in float64 and 1e-6 in float32.
        site_tol: see ``tol``; ``None`` means 1e-8 in float64 and 1e-4 in float32.
        max_steps: largest number of site updates.
        max_halvings: largest number of step halvings within one update.
        krylov_steps: the most GMRES iterations per Newton step under a sparse prior
            (``gpc.Sparse``), where the Newton system is solved matrix-free (GMRES stops
            earlier at a relative residual of 1e-8).

    Works with any log-concave likelihood that has ``expected_log_prob``
    (logistic, probit); the expectations use its quadrature.
    """

    supports_mask = True

    tol: float | None = eqx.field(static=True, default=None)
    site_tol: float | None = eqx.field(static=True, default=None)
    max_steps: int = eqx.field(static=True, default=1000)
    max_halvings: int = eqx.field(static=True, default=30)
    krylov_steps: int = eqx.field(static=True, default=30)

    def __check_init__(self):
        require_setting("KL", "tol", self.tol, optional=True)
        require_setting("KL", "site_tol", self.site_tol, optional=True)
        require_setting("KL", "max_steps", self.max_steps, low=1, low_open=False, integer=True)
        require_setting("KL", "max_halvings", self.max_halvings, low_open=False, integer=True)
        require_setting("KL", "krylov_steps", self.krylov_steps, low=1, low_open=False, integer=True)

    def solve_low_rank(self, K, likelihood, y, init=None, key=None):
        _check_log_concave(likelihood)
        return solve_sparse_kl(self, K, likelihood, y, init)

    def solve_matrix(self, K, likelihood, y, init=None, key=None):
        _check_log_concave(likelihood)
        n = K.shape[0]
        dtype = K.dtype
        tol = tolerance(self.tol, dtype, 1e-10, 1e-6)
        site_tol = tolerance(self.site_tol, dtype, 1e-8, 1e-4)
        tau0 = jnp.zeros(n, dtype) if init is None else jnp.asarray(init[0], dtype)
        nu0 = jnp.zeros(n, dtype) if init is None else jnp.asarray(init[1], dtype)
        tau, nu, steps, status, change = _optimise(self, K, likelihood, y, tau0, nu0, tol, site_tol)
        tau, nu = lax.stop_gradient(tau), lax.stop_gradient(nu)
        factor = factor_sites(K, tau)
        # The posterior depends on the sites, differentiable by the implicit function theorem (solved only when
        # a prediction is differentiated); the ELBO holds them fixed (module docstring).
        tau_p, nu_p = implicit_fixed_point(_target_and_jacobian, (tau, nu), status == Status.CONVERGED, K,
                                           likelihood, y)
        return site_posterior(
            K, tau_p, nu_p, factor_b_given(K, sqrt_precision(tau_p), factor[0]),
            log_marginal=elbo(K, likelihood, y, tau, nu, factor),  # envelope theorem: sites held fixed
            info=SolverInfo(num_steps=steps, status=status, max_change=change),
            warm_start=(tau, nu),
        )


def _check_log_concave(likelihood):
    if not likelihood.log_concave:
        raise GPClassError(
            f"gpc.KL() needs a log-concave likelihood (non-negative site precisions); "
            f"{type(likelihood).__name__} is not. Use gpc.EP() instead."
        )


def elbo(K, likelihood, y, tau, nu, factor=None):
    """sum_i E_q[log p(y_i|f_i)] - KL(q || N(0, K)) for q = prior x sites (tau~, nu~)  (module docstring)."""
    factor = factor_sites(K, tau) if factor is None else factor
    sigma_diag, m, L = site_marginals(K, tau, nu, factor)
    alpha = site_alpha(K, tau, nu, L)
    kl = 0.5 * (jnp.dot(m, alpha) - jnp.dot(tau, sigma_diag)) + half_log_det(L)
    return jnp.sum(likelihood.expected_log_prob(y, m, sigma_diag)) - kl


def _candidates(K, likelihood, y, tau, nu, factor):
    """The natural-gradient target sites and a Newton step on the fixed-point equations (module docstring).

    Target map T(tau~, nu~): tau~ = -2 dE/ds, nu~ = dE/dm + tau~ m at the marginals (m, s)
    of q.  With Sigma = (K^-1 + S~)^-1: dm/d nu~ = Sigma, dm_n/d tau~_k = -Sigma_nk m_k and
    ds_n/d tau~_k = -Sigma_nk^2, so the Jacobian J of T is dense 2n x 2n and Newton solves
    (I - J) delta = T - (tau~, nu~).  It costs forming Sigma and one dense 2n x 2n solve
    (about 16 Cholesky factorisations of n x n) and converges quadratically, where the
    natural-gradient iteration alone converges linearly and, for stiff kernels, slowly
    (the ELBO is nearly flat along some site directions).
    """
    n = K.shape[0]
    t_tau, t_nu, J, m, g_m = _target(K, likelihood, y, tau, nu, factor)
    residual = jnp.concatenate([t_tau - tau, t_nu - nu])
    delta = dense.solve(jnp.eye(2 * n, dtype=K.dtype) - J, residual)
    newton = (jnp.maximum(tau + delta[:n], 0.0), nu + delta[n:])
    # Natural-gradient target (tau~ >= 0 for log-concave likelihoods, up to quadrature rounding).
    target_tau = jnp.maximum(t_tau, 0.0)
    target = (target_tau, g_m + target_tau * m)
    return target, newton, m


def _target(K, likelihood, y, tau, nu, factor):
    """T(tau~, nu~), its 2n x 2n Jacobian J (:func:`_candidates`), the marginal means m and dE/dm."""
    Sigma = site_covariance(K, factor)
    m, s = Sigma @ nu, jnp.diagonal(Sigma)
    g_m, g_s, h_mm, h_ms, h_sm, h_ss = expected_log_lik_derivatives(likelihood, y, m, s)
    t_tau = -2.0 * g_s
    t_nu = g_m + t_tau * m
    # Diagonal derivatives of T with respect to (m, s), then the chain rule through (m, s)(tau~, nu~).
    tau_m, tau_s = -2.0 * h_sm, -2.0 * h_ss
    nu_m, nu_s = h_mm + t_tau + m * tau_m, h_ms + m * tau_s
    m_tau, s_tau = -Sigma * m[None, :], -(Sigma**2)
    J = jnp.block([
        [tau_m[:, None] * m_tau + tau_s[:, None] * s_tau, tau_m[:, None] * Sigma],
        [nu_m[:, None] * m_tau + nu_s[:, None] * s_tau, nu_m[:, None] * Sigma],
    ])
    return t_tau, t_nu, J, m, g_m


def _target_and_jacobian(K, likelihood, y, sites):
    """(T(tau~, nu~) as one vector, J): the fixed point's map for :func:`implicit_fixed_point`."""
    tau, nu = sites
    t_tau, t_nu, J, _, _ = _target(K, likelihood, y, tau, nu, factor_sites(K, tau))
    return jnp.concatenate([t_tau, t_nu]), J


class _KLState(NamedTuple):
    """The sites, their factorisation and the ELBO; the natural-gradient step; how the last step ended."""

    tau: Array
    nu: Array
    factor: tuple[Array, Array]
    value: Array
    beta: Array
    change: Array
    converged: Array
    stalled: Array


def _optimise(method: KL, K, likelihood, y, tau0, nu0, tol, site_tol):
    """Newton steps on the fixed point, safeguarded by damped natural-gradient steps (:func:`iterate`).

    Each step tries the Newton candidate, then the natural-gradient step with
    beta, beta/2, ... until the ELBO does not decrease: the ELBO never decreases.
    Returns (tau~, nu~, steps, status, the last relative change of the sites).
    """

    def site_change(new_tau, new_nu, tau, nu):
        return jnp.maximum(relative_change(new_tau, tau), relative_change(new_nu, nu))

    def step(s: _KLState) -> _KLState:
        target, newton, m = _candidates(K, likelihood, y, s.tau, s.nu, s.factor)
        noise = rounding_level(K.dtype, 1.0 + jnp.abs(s.value) + jnp.sum(jnp.abs(target[1] * m)))

        def candidate(k, b):
            use_newton = k == 0
            new_tau = jnp.where(use_newton, newton[0], (1.0 - b) * s.tau + b * target[0])
            new_nu = jnp.where(use_newton, newton[1], (1.0 - b) * s.nu + b * target[1])
            new_factor = factor_sites(K, new_tau)
            return new_tau, new_nu, new_factor, elbo(K, likelihood, y, new_tau, new_nu, new_factor)

        def try_again(a):
            new_tau, new_nu, _, new_value, _, k = a
            good = (new_value >= s.value - noise) | (site_change(new_tau, new_nu, s.tau, s.nu) <= site_tol)
            return (k == 0) | (~good & (k <= method.max_halvings + 1))

        def attempt(a):
            *_, b, k = a
            b = jnp.where(k <= 1, b, 0.5 * b)  # k = 0: Newton; k = 1: natural gradient with beta; then halve
            return (*candidate(k, b), b, k + 1)

        # A do-while loop, so that the ELBO (the expensive graph) is traced once per step.
        new_tau, new_nu, new_factor, new_value, b, k = lax.while_loop(
            try_again, attempt, (s.tau, s.nu, s.factor, s.value, s.beta, 0)
        )
        change = site_change(new_tau, new_nu, s.tau, s.nu)
        accepted = (new_value >= s.value - noise) | (change <= site_tol)
        small = (change <= site_tol) & (jnp.abs(new_value - s.value) <= tol * (1.0 + jnp.abs(new_value)))
        keep = lambda new, old: jnp.where(accepted, new, old)  # noqa: E731
        return _KLState(
            keep(new_tau, s.tau),
            keep(new_nu, s.nu),
            jax.tree.map(keep, new_factor, s.factor),
            keep(new_value, s.value),
            jnp.where(k > 1, jnp.minimum(2.0 * b, 1.0), s.beta),  # a natural-gradient step was taken
            change,
            accepted & small,
            ~accepted,
        )

    factor0 = factor_sites(K, tau0)
    false = jnp.asarray(False)
    value0 = elbo(K, likelihood, y, tau0, nu0, factor0)
    start = _KLState(tau0, nu0, factor0, value0, jnp.ones((), K.dtype), jnp.asarray(jnp.inf, K.dtype), false, false)
    end = iterate(step, lambda s: (s.converged, s.stalled), start, max_steps=method.max_steps,
                  finite=lambda s: all_finite(s.tau, s.nu))
    return end.state.tau, end.state.nu, end.num_steps, end.status, end.state.change
