"""Gaussian KL (variational) inference under a sparse prior: FITC, or VFE's collapsed bound (Titsias 2009).

q(f) = N(mu, Sigma) is the sparse prior times diagonal Gaussian sites (tau~, nu~)
as in ``kl.py``, Sigma = (K~^-1 + S~)^-1, mu = Sigma nu~, and

    ELBO = sum_i E_{N(mu_i, v_i)}[log p(y_i|f_i)] - KL(q || N(0, K~)),
    KL = 1/2 [mu^T alpha - sum_i tau~_i Sigma_ii] + 1/2 log|I + S~^1/2 K~ S~^1/2|,

with v_i = Sigma_ii for FITC (K~ = Q + diag(K - Q): the ELBO of the FITC
prior) and v_i = Sigma_ii + (K - Q)_ii for VFE (K~ = Q): then q(f) is
p(f|u) q(u) and the ELBO is the bound of Titsias (2009) and of SVGP
(Hensman et al. 2015) at q(u) = the sites' Gaussian.  Every evaluation costs
O(n m^2).

Solver: as ``kl.py``, Newton steps on the fixed point s = T(s) of the
natural-gradient (conjugate-computation, Khan & Lin 2017) target sites
tau~ = -2 dE/dv, nu~ = dE/dmu + tau~ mu at the current marginals, each
taken only if the ELBO does not decrease, else the damped step towards T(s),
halved until the ELBO does not decrease.  The Newton system is solved
matrix-free by GMRES (:func:`_newton`) in O(n m^2) per product.  The ELBO is stationary in the sites at the
optimum, so its gradient is the explicit one with the sites held fixed
(``stop_gradient``; the envelope theorem).  The posterior (predictions)
differentiates the sites implicitly at s = T(s), by GMRES with the Newton
step's products transposed (:func:`_transposed_fixed_point`).
"""

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from .._covariance import LowRankCovariance
from .._exceptions import GPClassError
from .._iterate import all_finite, iterate, relative_change, rounding_level, tolerance
from .._status import Status
from .._types import Array
from ._expectations import expected_log_lik_derivatives, expected_log_lik_gradient
from ._implicit import implicit_fixed_point_krylov, transposed
from ._posterior import SolverInfo, SparsePosterior
from .ep_sparse import marginals


def solve_sparse_kl(method, op: LowRankCovariance, likelihood, y, init=None) -> SparsePosterior:
    """Sparse KL: the sites' optimum on ``stop_gradient`` inputs, then the ELBO at it."""
    if op.power not in (0.0, 1.0):
        raise GPClassError("KL under a sparse prior supports approximation='fitc' or 'vfe', not a fractional power.")
    n = op.shape[0]
    tau0 = jnp.zeros(n, op.dtype) if init is None else jnp.asarray(init[0], op.dtype)
    nu0 = jnp.zeros(n, op.dtype) if init is None else jnp.asarray(init[1], op.dtype)
    tau, nu, steps, status, change = _optimise(method, *lax.stop_gradient((op, likelihood, y, tau0, nu0)))
    tau, nu = lax.stop_gradient(tau), lax.stop_gradient(nu)
    # The posterior depends on the sites: the implicit function theorem at the fixed point s = T(s), solved only
    # when a prediction is differentiated; the ELBO holds them fixed.
    tau_p, nu_p = implicit_fixed_point_krylov(_target_map, _transposed_fixed_point, (tau, nu),
                                              status == Status.CONVERGED, op, likelihood, y, method.krylov_steps)
    factor = op.factor(tau_p)  # the posterior's; the same values as the ELBO's (XLA computes them once)
    mu, _, _, alpha = _moments(op, tau_p, nu_p, factor)
    return SparsePosterior(
        alpha=op.inducing_weights(alpha),
        chol_uu=op.chol_uu,
        chol_u=factor.chol,
        mean=mu,
        log_marginal=elbo(op, likelihood, y, tau, nu),  # envelope theorem: sites held fixed
        info=SolverInfo(num_steps=steps, status=status, max_change=change),
        warm_start=(tau, nu),
    )


def _moments(op, tau, nu, factor):
    """mu, the variances v the expected log-likelihood sees (module docstring), and alpha = K~^-1 mu."""
    sigma_diag, mu = marginals(op, tau, nu, factor)
    alpha = factor.solve_i_plus_wk(op, nu)
    return mu, sigma_diag, sigma_diag + (1.0 - op.power) * op.g, alpha


def elbo(op, likelihood, y, tau, nu, factor=None):
    """The ELBO of the sites (tau~, nu~) under K~ (module docstring); ``factor`` is ``op.factor(tau)`` if computed."""
    factor = op.factor(tau) if factor is None else factor
    mu, sigma_diag, v, alpha = _moments(op, tau, nu, factor)
    kl = 0.5 * (jnp.dot(mu, alpha) - jnp.dot(tau, sigma_diag)) + factor.half_log_det_b(op)
    return jnp.sum(likelihood.expected_log_prob(y, mu, v)) - kl


def _target(op, likelihood, y, tau, nu):
    """The natural-gradient target sites T(tau~, nu~) at the current marginals, and mu (for the rounding level)."""
    mu, _, v, _ = _moments(op, tau, nu, op.factor(tau))
    g_m, g_v = expected_log_lik_gradient(likelihood, y, mu, v)
    t_tau = jnp.maximum(-2.0 * g_v, 0.0)  # >= 0 for a log-concave likelihood, up to quadrature rounding
    return (t_tau, g_m + t_tau * mu), mu


def _newton(op, likelihood, y, tau, nu, target, krylov_steps):
    """A Newton step on the fixed point s = T(s): (I - J) delta = T(s) - s, solved by GMRES.

    J is never formed.  With Sigma = diag(delta) + R R^T (``LowRankFactor.posterior_covariance``),
    d mu = Sigma (d nu~ - d tau~ * mu) and d v = -(Sigma o Sigma) d tau~ (as in ``kl.py``); Sigma x
    costs O(n m), (Sigma o Sigma) x = delta^2 x + 2 delta r x + rowsum(R o (R R^T diag(x) R)), r the
    diagonal of R R^T, costs O(n m^2).  T depends on the sites only through (mu, v), elementwise.
    Where the natural-gradient iteration crawls (spectral radius of J near 1, stiff kernels) J has few
    eigenvalues near 1, which GMRES resolves in a few products.
    """
    residual_map = _linearised_fixed_point(op, likelihood, y, tau, nu, target[0])
    rhs = (target[0] - tau, target[1] - nu)
    step, _ = jax.scipy.sparse.linalg.gmres(residual_map, rhs, x0=rhs, restart=krylov_steps, maxiter=1,
                                            tol=1e-8, solve_method="incremental")
    return jnp.maximum(tau + step[0], 0.0), nu + step[1]


def _linearised_fixed_point(op, likelihood, y, tau, nu, t_tau):
    """ds -> (I - J) ds, J = dT/ds at the sites (:func:`_newton`), from plain array operations (transposable)."""
    factor = op.factor(tau)
    sigma, sigma_squared = factor.posterior_products(op)
    mu, _, v, _ = _moments(op, tau, nu, factor)
    _, g_v, h_mm, h_mv, h_vm, h_vv = expected_log_lik_derivatives(likelihood, y, mu, v)
    active = -2.0 * g_v > 0.0  # where T's precision is not clipped at 0

    def residual_map(ds):
        d_tau, d_nu = ds
        d_mu = sigma(d_nu - d_tau * mu)
        d_v = -sigma_squared(d_tau)
        j_tau = jnp.where(active, -2.0 * (h_vm * d_mu + h_vv * d_v), 0.0)
        j_nu = h_mm * d_mu + h_mv * d_v + j_tau * mu + t_tau * d_mu
        return d_tau - j_tau, d_nu - j_nu

    return residual_map


def _target_map(op, likelihood, y, sites):
    """T(tau~, nu~) (:func:`_target`) as a map of the sites."""
    return _target(op, likelihood, y, *sites)[0]


def _transposed_fixed_point(op, likelihood, y, sites):
    """lambda -> (I - J)^T lambda at the sites, for :func:`implicit_fixed_point_krylov`."""
    tau, nu = sites
    return transposed(_linearised_fixed_point(op, likelihood, y, tau, nu, _target_map(op, likelihood, y, sites)[0]),
                      sites)


class _State(NamedTuple):
    tau: Array
    nu: Array
    value: Array
    beta: Array
    change: Array
    converged: Array
    stalled: Array


def _optimise(method, op, likelihood, y, tau0, nu0):
    """Damped natural-gradient steps (:func:`iterate`); the ELBO never decreases."""
    dtype = op.dtype
    tol = tolerance(method.tol, dtype, 1e-10, 1e-6)
    site_tol = tolerance(method.site_tol, dtype, 1e-8, 1e-4)

    def site_change(new_tau, new_nu, tau, nu):
        return jnp.maximum(relative_change(new_tau, tau), relative_change(new_nu, nu))

    def step(s: _State) -> _State:
        target, mu = _target(op, likelihood, y, s.tau, s.nu)
        newton = _newton(op, likelihood, y, s.tau, s.nu, target, method.krylov_steps)
        noise = rounding_level(dtype, 1.0 + jnp.abs(s.value) + jnp.sum(jnp.abs(target[1] * mu)))

        def candidate(k, b):
            use_newton = k == 0
            tau = jnp.where(use_newton, newton[0], (1.0 - b) * s.tau + b * target[0])
            nu = jnp.where(use_newton, newton[1], (1.0 - b) * s.nu + b * target[1])
            return tau, nu, elbo(op, likelihood, y, tau, nu)

        def good(tau, nu, value):
            return (value >= s.value - noise) | (site_change(tau, nu, s.tau, s.nu) <= site_tol)

        def try_again(a):
            tau, nu, value, _, k = a
            return (k == 0) | (~good(tau, nu, value) & (k <= method.max_halvings + 1))

        def attempt(a):
            *_, b, k = a
            b = jnp.where(k <= 1, b, 0.5 * b)  # k = 0: Newton; k = 1: natural gradient with beta; then halve
            return (*candidate(k, b), b, k + 1)

        # A do-while loop: the ELBO (the expensive graph) is traced once per step.
        tau, nu, value, b, k = lax.while_loop(try_again, attempt, (s.tau, s.nu, s.value, s.beta, 0))
        accepted = good(tau, nu, value)
        change = site_change(tau, nu, s.tau, s.nu)
        small = (change <= site_tol) & (jnp.abs(value - s.value) <= tol * (1.0 + jnp.abs(value)))
        keep = lambda new, old: jnp.where(accepted, new, old)  # noqa: E731
        return _State(keep(tau, s.tau), keep(nu, s.nu), keep(value, s.value),
                      jnp.where(k > 1, jnp.minimum(2.0 * b, 1.0), s.beta), change, accepted & small, ~accepted)

    false = jnp.asarray(False)
    start = _State(tau0, nu0, elbo(op, likelihood, y, tau0, nu0), jnp.ones((), dtype),
                   jnp.asarray(jnp.inf, dtype), false, false)
    end = iterate(step, lambda s: (s.converged, s.stalled), start, max_steps=method.max_steps,
                  finite=lambda s: all_finite(s.tau, s.nu))
    return end.state.tau, end.state.nu, end.num_steps, end.status, end.state.change
