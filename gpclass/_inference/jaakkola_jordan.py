"""The Jaakkola-Jordan variational lower bound on the evidence of logistic GP classification (Gibbs & MacKay 2000).

With labels y in {-1, +1}, the sigmoid g(y a) is bounded below and above by
exponentials of quadratic and linear functions of a (Gibbs & MacKay eqs. 8-9):

    g(y a) >= g(nu) exp[(y a - nu)/2 - lambda(nu)(a^2 - nu^2)],  lambda(nu) = (g(nu) - 1/2) / (2 nu)   (eq. 11)
    g(y a) <= exp[mu y a - H2(mu)],  mu in [0, 1]                                                       (eq. 9)

so Z' <= p(y|X, theta) <= Z'' with both integrals Gaussian (eqs. 30-32).  This file is the lower bound Z';
the upper bound Z'' is ``jaakkola_jordan_upper.py``.

Lower bound.  The product of the lower bounds is a Gaussian site with
precision 2 lambda(nu_n) and precision-mean d_n = y_n / 2 (eq. 15), so with
W = 2 Lambda, B = I + W^1/2 C W^1/2 = L L^T and Sigma = (C^-1 + W)^-1,

    log Z' = sum_n [log g(nu_n) - nu_n/2 + lambda(nu_n) nu_n^2] + 1/2 d^T Sigma d - 1/2 log|B|.

This is eq. 34 re-derived from eqs. 15-16 and 33: the scanned text shows
d^T (C^-1 + 2 Lambda) d, which has lost the inverse.  The approximate posterior
(eq. 16) is q(a) = N(Sigma d, Sigma); at a test point its mean and variance
are k^T H^-1 d and kappa - 2 k^T H^-1 Lambda k with H = I + 2 Lambda C (eqs.
17-19; the scan has lost the minus sign of eq. 18).  Stationarity in nu_n:
d log Z'/d nu_n = E_q[d log Q_n / d nu_n] = -lambda'(nu_n) (E_q[a_n^2] - nu_n^2),
and lambda' < 0 for nu > 0, so the optimum satisfies nu_n^2 = E_q[a_n^2] =
Sigma_nn + m_n^2.  Iterating that closed form is an EM algorithm (q is the
E-step, nu the M-step maximising E_q[log Q]), so log Z' never decreases; it
converges linearly and slowly for stiff kernels, so the solver takes Newton
steps on the same condition and falls back to EM where Newton would lower Z'.

Gradients.  The bound is optimised over its variational parameters at
fixed hyperparameters; at the optimum the derivative through the variational
parameters vanishes (envelope theorem), so d log Z' / d theta is the explicit
derivative with nu held fixed: a ``stop_gradient``, exact at
convergence, memory independent of the iteration count.  The posterior
(predictions) depends on nu's own derivative: at the fixed point
nu = nu_EM(nu) it is (I - J)^-1 d nu_EM with the Newton step's J, solved in
reverse mode only when a prediction is differentiated
(:func:`gpclass._inference._implicit.implicit_fixed_point`).
"""

from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .. import _dense as dense
from .._iterate import all_finite, iterate, relative_change, rounding_level, tolerance
from .._linalg import factor_b_given, half_log_det, sqrt_precision
from .._status import Status
from .._types import Array
from .._validation import require_setting
from ._base import AbstractInference
from ._implicit import implicit_fixed_point
from ._jaakkola_jordan import check_logistic, jj_lambda, jj_lambda_derivative
from ._posterior import SolverInfo
from ._sites import factor_sites, site_covariance, site_posterior
from .jaakkola_jordan_sparse import solve_sparse_lower


class JaakkolaJordan(AbstractInference):
    """Gibbs & MacKay's variational lower bound Z' for the logistic likelihood (their eqs. 11, 34).

    ``posterior.log_marginal`` is the maximised bound, log Z' <= log p(y|X, theta); it is a valid ML-II
    objective.  The upper bound is :class:`JaakkolaJordanUpper`.

    Attributes:
        tol: convergence when nu changes by at most ``tol (1 + max |nu|)`` and
            log Z' by at most ``tol (1 + |log Z'|)`` between steps.  ``None``
            means 1e-10 in float64 and 1e-5 in float32.
        max_steps: largest number of Newton steps on the closed-form
            stationarity condition nu_n^2 = E_q[a_n^2], each safeguarded by the
            EM update nu_n <- E_q[a_n^2]^1/2 (log Z' never decreases).
        krylov_steps: the most GMRES iterations per Newton step under a sparse prior
            (``gpc.Sparse``, FITC or VFE), where the Newton system is solved matrix-free
            (GMRES stops earlier at a relative residual of 1e-8).
    """

    tol: float | None = eqx.field(static=True, default=None)
    max_steps: int = eqx.field(static=True, default=200)

    krylov_steps: int = eqx.field(static=True, default=30)

    def __check_init__(self):
        require_setting("JaakkolaJordan", "tol", self.tol, optional=True)
        require_setting("JaakkolaJordan", "max_steps", self.max_steps, low=1, low_open=False, integer=True)
        require_setting("JaakkolaJordan", "krylov_steps", self.krylov_steps, low=1, low_open=False, integer=True)

    def solve_low_rank(self, K, likelihood, y, init=None, key=None):
        check_logistic(likelihood)
        return solve_sparse_lower(self, K, y, init)

    def solve_matrix(self, K, likelihood, y, init=None, key=None):
        check_logistic(likelihood)
        return _solve_lower(self, K, y, init, tolerance(self.tol, K.dtype, 1e-10, 1e-5))


def lower_bound(K, y, nu, factor=None):
    """log Z'(C, nu), Gibbs & MacKay eq. 34 as re-derived in the module docstring.

    ``factor`` is ``factor_sites(K, 2 lambda(nu))`` if already computed.
    """
    tau = 2.0 * jj_lambda(nu)
    L, Vt = factor_sites(K, tau) if factor is None else factor
    d = 0.5 * y
    v = Vt.T @ d  # L^-1 W^1/2 C d, so d^T Sigma d = d^T C d - |v|^2
    per_point = jax.nn.log_sigmoid(nu) - 0.5 * nu + jj_lambda(nu) * nu**2
    return jnp.sum(per_point) + 0.5 * (jnp.dot(d, K @ d) - jnp.dot(v, v)) - half_log_det(L)


def _lower_candidates(K, y, nu, factor):
    """The EM update nu_EM = (Sigma_nn + m_n^2)^1/2 and a Newton step on the fixed-point equation nu = nu_EM(nu).

    With s_n = Sigma_nn + m_n^2 and w = 2 lambda(nu): ds_n/dw_k = -Sigma_nk^2 - 2 m_n Sigma_nk m_k
    (from dSigma = -Sigma dW Sigma and dm = -Sigma dW m), so the EM map has Jacobian
    J_nk = -(Sigma_nk^2 + 2 m_n Sigma_nk m_k) 2 lambda'(nu_k) / (2 nu_EM_n) and Newton solves
    (I - J) delta = nu_EM - nu.  Forming Sigma and the dense solve cost O(n^3), a few Cholesky
    factorisations; EM alone converges linearly, at a rate that nears 1 for stiff kernels
    (thousands of steps at sigma_f^2 = e^8).
    """
    n = K.shape[0]
    nu_em, J = _lower_target(K, y, nu, factor)
    delta = dense.solve(jnp.eye(n, dtype=K.dtype) - J, nu_em - nu)
    return nu_em, jnp.abs(nu + delta)  # the bound is even in nu


def _lower_target_and_jacobian(K, likelihood, y, nu):
    """(nu_EM(nu), J): the fixed point's map for :func:`implicit_fixed_point` (the likelihood is the logistic)."""
    return _lower_target(K, y, nu)


def _lower_target(K, y, nu, factor=None):
    """The EM map nu_EM(nu) and its Jacobian J (:func:`_lower_candidates`)."""
    Sigma = site_covariance(K, factor_sites(K, 2.0 * jj_lambda(nu)) if factor is None else factor)
    m = Sigma @ (0.5 * y)
    nu_em = jnp.sqrt(jnp.maximum(jnp.diagonal(Sigma) + m**2, jnp.finfo(K.dtype).tiny))
    S = Sigma**2 + 2.0 * (m[:, None] * Sigma * m[None, :])
    return nu_em, S * (-2.0 * jj_lambda_derivative(nu))[None, :] / (2.0 * nu_em)[:, None]


class _LowerState(NamedTuple):
    """nu, the factorisation of B at the sites 2 lambda(nu), log Z'(nu), the last relative change of nu."""

    nu: Array
    factor: tuple[Array, Array]
    log_z: Array
    change: Array
    converged: Array


def _solve_lower(method, K, y, init, tol):
    """Newton steps on the stationarity condition nu_n^2 = E_q[a_n^2], safeguarded by EM, (:func:`gpclass._iterate.iterate`).

    A Newton candidate is taken when it does not lower log Z'; otherwise the EM
    update, which never lowers it.  Near the optimum Newton converges quadratically.
    """
    dtype = K.dtype
    d = 0.5 * y
    # Start from the EM update applied to the prior (q = N(0, C)): nu_n^2 = C_nn, also for the zero entries of a
    # warm start (nu = 0 carries no information: an all-zero warm start means no warm start, as for every method).
    prior_nu = jnp.sqrt(jnp.diagonal(K))
    nu0 = prior_nu if init is None else jnp.where(jnp.asarray(init, dtype) > 0, jnp.asarray(init, dtype), prior_nu)

    def evaluate(nu):
        factor = factor_sites(K, 2.0 * jj_lambda(nu))
        return nu, factor, lower_bound(K, y, nu, factor)

    def step(s: _LowerState) -> _LowerState:
        nu_em, nu_newton = _lower_candidates(K, y, s.nu, s.factor)
        noise = rounding_level(dtype, 1.0 + jnp.abs(s.log_z) + jnp.abs(jnp.dot(d, K @ d)) + jnp.sum(s.nu))
        newton = evaluate(nu_newton)
        nu, factor, log_z = lax.cond(
            jnp.isfinite(newton[2]) & (newton[2] >= s.log_z - noise), lambda: newton, lambda: evaluate(nu_em)
        )
        change = relative_change(nu, s.nu)
        converged = (change <= tol) & (jnp.abs(log_z - s.log_z) <= tol * (1.0 + jnp.abs(log_z)))
        return _LowerState(nu, factor, log_z, change, converged)

    start = _LowerState(*evaluate(nu0), jnp.asarray(jnp.inf, dtype), jnp.asarray(False))
    end = iterate(step, lambda s: (s.converged, jnp.asarray(False)), start, max_steps=method.max_steps,
                  finite=lambda s: all_finite(s.nu))
    nu, steps, status, change = end.state.nu, end.num_steps, end.status, end.state.change
    nu = lax.stop_gradient(nu)
    # Differentiable in K with nu held fixed: the envelope theorem (module docstring).
    tau = 2.0 * jj_lambda(nu)
    factor = factor_sites(K, tau)
    # The posterior depends on nu, differentiable by the implicit function theorem at nu = nu_EM(nu) (solved
    # only when a prediction is differentiated); the bound holds nu fixed (module docstring).
    nu_p = implicit_fixed_point(_lower_target_and_jacobian, nu, status == Status.CONVERGED, K, None, y)
    tau_p = 2.0 * jj_lambda(nu_p)
    return site_posterior(  # alpha = H^-1 d, Gibbs & MacKay eq. 17
        K, tau_p, d, factor_b_given(K, sqrt_precision(tau_p), factor[0]),
        log_marginal=lower_bound(K, y, nu, factor),
        info=SolverInfo(num_steps=steps, status=status, max_change=change),
        warm_start=nu,
    )
