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

Any prior operator (``gpclass._covariance``).  Under a sparse prior the bound's
quadratic log Q_n(a_n) is also averaged over p(a_n|u): for FITC (K~ = Q + diag(K - Q))
nothing changes, it is the bound of the FITC prior; for VFE (K~ = Q) it subtracts
lambda_n (K - Q)_nn = 1/2 W_n g_n, GPML's ``apxSparse`` log-determinant with its
trace term (``power_log_det``), and the optimum is nu_n^2 = Sigma_nn + m_n^2 + g_n
(``trace_variance``).  The Newton system is formed and solved by LU when the prior
is a matrix, and applied matrix-free by GMRES (O(n m^2) per product) under a
sparse prior (``_linear_solve``).

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

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .._covariance import AbstractCovariance, AbstractSitesCovariance, AbstractSitesFactor
from .._covariance._base import BOUND
from .._iterate import AbstractIterativeSolver, all_finite, relative_change, rounding_level, run, tolerance
from .._status import Status
from .._types import Array
from .._validation import require_setting
from ._base import AbstractInference
from ._implicit import implicit_fixed_point
from ._jaakkola_jordan import check_logistic, jj_lambda, jj_lambda_derivative
from ._linear_solve import Krylov, LinearMap, identity_minus, solve
from ._posterior import SolverInfo, gaussian_posterior


class JaakkolaJordan(AbstractInference):
    """Gibbs & MacKay's variational lower bound Z' for the logistic likelihood (their eqs. 11, 34).

    ``posterior.log_marginal`` is the maximised bound, log Z' <= log p(y|X, theta); it is a valid ML-II
    objective.  The upper bound is :class:`JaakkolaJordanUpper`.

    Attributes:
        tol: convergence when nu changes by at most ``tol (1 + max |nu|)`` and
            log Z' by at most ``tol (1 + |log Z'|)`` (or its rounding level, if
            larger) between steps.  ``None`` means 1e-10 in float64 and 1e-5 in
            float32.  Where rounding keeps nu from settling (steps that no
            longer raise log Z' above its rounding level nor shrink nu's
            change; e.g. float32 at signal variances from 100 on standardised
            Ionosphere), the solve ends as ``Status.IMPRECISE``.
        max_steps: largest number of Newton steps on the closed-form
            stationarity condition nu_n^2 = E_q[a_n^2], each safeguarded by the
            EM update nu_n <- E_q[a_n^2]^1/2 (log Z' never decreases).
        krylov_steps: the most GMRES iterations per Newton step under a sparse prior
            (``gpc.Sparse``, FITC or VFE), where the Newton system is solved matrix-free
            (GMRES stops earlier at a relative residual of 1e-8).

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.JaakkolaJordan(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> bool(post.info.converged), round(float(post.log_marginal), 1)  # log Z' <= log p(y|X)
        (True, -24.5)
    """

    tol: float | None = eqx.field(static=True, default=None)
    max_steps: int = eqx.field(static=True, default=200)

    krylov_steps: int = eqx.field(static=True, default=30)

    def __check_init__(self):
        require_setting("JaakkolaJordan", "tol", self.tol, optional=True)
        require_setting("JaakkolaJordan", "max_steps", self.max_steps, low=1, low_open=False, integer=True)
        require_setting("JaakkolaJordan", "krylov_steps", self.krylov_steps, low=1, low_open=False, integer=True)

    def solve(self, op, likelihood, y, init=None, key=None):
        """The maximised bound and its posterior (module docstring), on any prior operator."""
        check_logistic(likelihood)
        op.require(BOUND, "gpc.JaakkolaJordan()", "Use gpc.Sparse(..., approximation='fitc') or 'vfe'.")
        dtype = op.dtype
        # Start from the EM update applied to the prior (q = the prior): nu_n^2 = Var(f_n), also for the zero entries
        # of a warm start (nu = 0 carries no information: an all-zero warm start means no warm start, as for every
        # method).
        prior_nu = jnp.sqrt(op.diagonal() + op.trace_variance())
        nu0 = prior_nu if init is None else jnp.where(jnp.asarray(init, dtype) > 0, jnp.asarray(init, dtype), prior_nu)
        end = run(LowerBoundSolver(self, *lax.stop_gradient((op, y, nu0)), tolerance(self.tol, dtype, 1e-10, 1e-5)))
        nu, status = lax.stop_gradient(end.state.nu), end.status
        # Differentiable in the prior with nu held fixed: the envelope theorem (module docstring).
        factor = op.factor_given(2.0 * jj_lambda(nu), end.state.factor)
        # The posterior depends on nu, differentiable by the implicit function theorem at nu = nu_EM(nu) (solved
        # only when a prediction is differentiated); the bound holds nu fixed.
        nu_p = implicit_fixed_point(_em_system, nu, status == Status.CONVERGED, op, None, y, self.krylov_steps)
        factor_p = op.factor_given(2.0 * jj_lambda(nu_p), factor)
        alpha = factor_p.solve_i_plus_wk(op, 0.5 * y)  # alpha = H^-1 d, Gibbs & MacKay eq. 17
        return gaussian_posterior(
            op, factor_p, alpha=alpha, mean=op.mv(alpha),
            log_marginal=lower_bound(op, y, nu, factor),
            info=SolverInfo(num_steps=end.num_steps, status=status, max_change=end.state.change),
            warm_start=nu,
        )


def lower_bound(op: AbstractCovariance, y, nu, factor: AbstractSitesFactor | None = None, cov=None):
    """log Z'(K, nu), Gibbs & MacKay eq. 34 as re-derived in the module docstring, under the prior ``op``.

    ``factor`` is ``op.factor(2 lambda(nu))`` and ``cov`` its ``covariance(op)``, if already computed;
    d^T Sigma d (d = y / 2) is the operator's ``quadratic``, a sum of squares under a sparse prior.
    """
    factor = op.factor(2.0 * jj_lambda(nu)) if factor is None else factor
    cov = factor.covariance(op) if cov is None else cov
    per_point = jax.nn.log_sigmoid(nu) - 0.5 * nu + jj_lambda(nu) * nu**2
    return jnp.sum(per_point) + 0.5 * cov.quadratic(0.5 * y) - factor.power_log_det(op)


def _em_map(op: AbstractCovariance, y, nu, cov: AbstractSitesCovariance):
    """nu_EM = E_q[a_n^2]^1/2 at the sites 2 lambda(nu) (covariance ``cov``), and I - d nu_EM / d nu.

    With s_n = Sigma_nn + m_n^2 and w = 2 lambda(nu): ds_n/dw_k = -Sigma_nk^2 - 2 m_n Sigma_nk m_k
    (from dSigma = -Sigma dW Sigma and dm = -Sigma dW m), so the EM map has Jacobian
    J_nk = -(Sigma_nk^2 + 2 m_n Sigma_nk m_k) 2 lambda'(nu_k) / (2 nu_EM_n): formed from Sigma where the
    prior is a matrix (O(n^2) after Sigma), applied by Sigma's products otherwise (O(n m^2)).
    """
    cov = cov.formed()  # J is formed from Sigma where it is a matrix: m and nu_EM too (``formed``)
    m = cov.times(0.5 * y)
    nu_em = jnp.sqrt(jnp.maximum(cov.variance() + m**2 + op.trace_variance(), jnp.finfo(op.dtype).tiny))
    dw = -2.0 * jj_lambda_derivative(nu)  # dW / dnu

    def apply(x):
        return x - (cov.squared_times(dw * x) + 2.0 * m * cov.times(m * dw * x)) / (2.0 * nu_em)

    def matrix():
        Sigma = cov.matrix()
        S = Sigma**2 + 2.0 * (m[:, None] * Sigma * m[None, :])
        return identity_minus(nu.shape[0], S * dw[None, :] / (2.0 * nu_em)[:, None])

    return nu_em, LinearMap(apply, matrix if cov.has_matrix else None)


def _em_system(op, likelihood, y, nu):
    """(nu_EM(nu), I - d nu_EM / d nu): the fixed point's system for :func:`implicit_fixed_point` (the likelihood
    is the logistic)."""
    return _em_map(op, y, nu, op.factor(2.0 * jj_lambda(nu)).covariance(op))


class LowerState(eqx.Module):
    """nu, the factorisation of B at the sites 2 lambda(nu) and its Sigma, log Z'(nu), the last relative change
    of nu, and whether rounding stopped the iterations (``LowerBoundSolver.step``)."""

    nu: Array
    factor: AbstractSitesFactor
    cov: AbstractSitesCovariance
    log_z: Array
    change: Array
    converged: Array
    unresolved: Array


class LowerBoundSolver(AbstractIterativeSolver):
    """Newton steps on the stationarity condition nu_n^2 = E_q[a_n^2], safeguarded by EM (:func:`run`).

    A Newton candidate (I - J) delta = nu_EM - nu is taken when it does not lower log Z'; otherwise the
    EM update, which never lowers it.  EM alone converges linearly, at a rate that nears 1 for stiff
    kernels (thousands of steps at sigma_f^2 = e^8); near the optimum Newton converges quadratically.
    """

    method: JaakkolaJordan
    op: AbstractCovariance
    y: Array
    nu0: Array
    tol: float

    @property
    def max_steps(self):
        return self.method.max_steps

    def _evaluate(self, nu):
        factor = self.op.factor(2.0 * jj_lambda(nu))
        cov = factor.covariance(self.op)
        return nu, factor, cov, lower_bound(self.op, self.y, nu, factor, cov)

    def init(self) -> LowerState:
        return LowerState(*self._evaluate(self.nu0), jnp.asarray(jnp.inf, self.op.dtype), jnp.asarray(False),
                          jnp.asarray(False))

    def step(self, s: LowerState) -> LowerState:
        op, y, d = self.op, self.y, 0.5 * self.y
        nu_em, i_minus_j = _em_map(op, y, s.nu, s.cov)
        nu_newton = jnp.abs(s.nu + solve(i_minus_j, nu_em - s.nu, Krylov(self.method.krylov_steps, 1, 1e-8)))
        # (the bound is even in nu)
        noise = rounding_level(op.dtype, 1.0 + jnp.abs(s.log_z) + jnp.abs(jnp.dot(d, op.mv(d))) + jnp.sum(s.nu))
        newton = self._evaluate(nu_newton)
        nu, factor, cov, log_z = lax.cond(
            jnp.isfinite(newton[3]) & (newton[3] >= s.log_z - noise), lambda: newton, lambda: self._evaluate(nu_em)
        )
        change = relative_change(nu, s.nu)
        # log Z' is not asked to settle below its rounding level (in float32 at a signal variance of 10 it moves
        # by 0.005 while nu moves by 1e-5 relative: below the tolerance).
        settled = jnp.abs(log_z - s.log_z) <= jnp.maximum(self.tol * (1.0 + jnp.abs(log_z)), noise)
        converged = (change <= self.tol) & settled
        # Rounding, not the iterations, limits nu now: a step that raised log Z' by no more than its rounding level
        # and moved nu no less than the step before (in exact arithmetic Newton's and EM's changes shrink as log Z'
        # rises to its maximum).  In float32 at a signal variance of 100 nu then wanders by about 1e-4 relative and
        # log Z' by 0.05 (against float64's optimum) for every later step.
        unresolved = ~converged & (log_z <= s.log_z + noise) & (change >= s.change)
        return LowerState(nu, factor, cov, log_z, change, converged, unresolved)

    def terminate(self, s: LowerState):
        return s.converged, s.unresolved

    def finite(self, s: LowerState):
        return all_finite(s.nu)

    def status(self, s: LowerState, converged, num_steps):
        """As every solver's, but ``IMPRECISE`` where rounding stopped the iterations (``step``), and for a
        converged state that exact arithmetic rules out: a bound
        above 0 (log Z' <= log p(y|X) <= 0), a negative posterior variance at a training input, or the bound's
        d^T Sigma d below its floor (d^T K d)^2 / (d^T K d + d^T K W K d) by more than sqrt(tol) (Sigma =
        (K^-1 + W)^-1, d = y / 2: the variational form d^T Sigma d = max_x 2 d^T x - x^T Sigma^-1 x at
        x = c K d).  Rounding produces them in float32 at extreme hyperparameters: at a signal variance of 1e12,
        log Z' = +5e5; at 1e8, Sigma = K - K W^1/2 B^-1 W^1/2 K cancels to 0 where it is 4, and nu = 0 then
        looks stationary at a bound of -276 with -140 within reach."""
        status = super().status(s, converged, num_steps)
        status = jnp.where((status == Status.STALLED) & s.unresolved, Status.IMPRECISE, status)
        d = 0.5 * self.y
        k_d = self.op.mv(d)
        d_k_d = jnp.dot(d, k_d)
        floor = d_k_d**2 / (d_k_d + jnp.dot(k_d, 2.0 * jj_lambda(s.nu) * k_d))
        too_small = s.cov.quadratic(d) < floor * (1.0 - jnp.sqrt(self.tol))
        impossible = (s.log_z > 0) | jnp.any(s.cov.variance() < 0) | too_small
        return jnp.where((status == Status.CONVERGED) & impossible, Status.IMPRECISE, status)
