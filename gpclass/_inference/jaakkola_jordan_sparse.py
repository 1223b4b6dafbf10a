"""The Jaakkola-Jordan lower bound under a sparse prior: FITC, or VFE's collapsed form.

As in ``jaakkola_jordan.py`` (Gibbs & MacKay eq. 34 as re-derived there), the
bound's sites have precisions W = 2 lambda(nu) and precision-means d = y / 2, so

    log Z' = sum_n [log g(nu_n) - nu_n/2 + lambda(nu_n) nu_n^2] + 1/2 d^T Sigma d - ldB2,

with Sigma = (K~^-1 + W)^-1.  For FITC (K~ = Q + diag(K - Q)) ldB2 = 1/2 log|I + W^1/2 K~ W^1/2|:
the bound of the FITC prior.  For VFE (K~ = Q) the bound's quadratic log Q_n(a_n) is
averaged over p(a_n|u) as well, which subtracts lambda_n (K - Q)_nn = 1/2 W_n g_n: GPML's
``apxSparse`` log determinant with its trace term (``LowRankFactor.power_log_det``) in both cases.
The optimum satisfies nu_n^2 = E_q[a_n^2] = Sigma_nn + m_n^2 (+ g_n for VFE); the solver takes
Newton steps on it by GMRES (matrix-free, O(n m^2) per product), safeguarded by the EM update,
and the gradient holds nu fixed (the envelope theorem).  The posterior (predictions)
differentiates nu implicitly at nu = nu_EM(nu) (:func:`_transposed_em_system`).
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
from ._implicit import implicit_fixed_point_krylov, transposed
from ._jaakkola_jordan import jj_lambda, jj_lambda_derivative
from ._posterior import SolverInfo, SparsePosterior


def solve_sparse_lower(method, op: LowRankCovariance, y, init=None) -> SparsePosterior:
    """The maximised sparse lower bound (module docstring) and its posterior."""
    if op.power not in (0.0, 1.0):
        raise GPClassError("the Jaakkola-Jordan bound under a sparse prior supports approximation='fitc' or 'vfe'.")
    dtype = op.dtype
    tol = tolerance(method.tol, dtype, 1e-10, 1e-5)
    prior_nu = jnp.sqrt(op.diagonal() + (1.0 - op.power) * op.g)  # the EM update at q = the prior
    nu0 = prior_nu if init is None else jnp.where(jnp.asarray(init, dtype) > 0, jnp.asarray(init, dtype), prior_nu)
    nu, steps, status, change = _optimise(method, *lax.stop_gradient((op, y, nu0)), tol)
    nu = lax.stop_gradient(nu)
    # The posterior depends on nu: the implicit function theorem at nu = nu_EM(nu), solved only when a prediction is
    # differentiated; the bound holds nu fixed.
    nu_p = implicit_fixed_point_krylov(_em_map, _transposed_em_system, nu, status == Status.CONVERGED, op, None, y,
                                       method.krylov_steps)
    factor = op.factor(2.0 * jj_lambda(nu_p))
    d = 0.5 * y
    alpha = factor.solve_i_plus_wk(op, d)
    return SparsePosterior(
        alpha=op.inducing_weights(alpha),
        chol_uu=op.chol_uu,
        chol_u=factor.chol,
        mean=op.mv(alpha),
        log_marginal=lower_bound(op, y, nu),
        info=SolverInfo(num_steps=steps, status=status, max_change=change),
        warm_start=nu,
    )


def lower_bound(op, y, nu):
    """log Z'(K~, nu) (module docstring); d^T Sigma d, d = y / 2, as a sum of squares (``posterior_quadratic``)."""
    factor = op.factor(2.0 * jj_lambda(nu))
    per_point = jax.nn.log_sigmoid(nu) - 0.5 * nu + jj_lambda(nu) * nu**2
    return jnp.sum(per_point) + 0.5 * factor.posterior_quadratic(op, 0.5 * y) - factor.power_log_det(op)


def _candidates(op, y, nu, krylov_steps):
    """The EM update nu_EM = E_q[a_n^2]^1/2 and a Newton step on nu = nu_EM(nu) by GMRES.

    dE_q[a_n^2] / dW_k = -(Sigma_nk^2 + 2 m_n Sigma_nk m_k) (``jaakkola_jordan._lower_candidates``); with
    Sigma = diag(delta) + R R^T both products cost O(n m^2).
    """
    nu_em, jacobian = _em_map_and_jacobian(op, y, nu)
    step, _ = jax.scipy.sparse.linalg.gmres(lambda x: x - jacobian(x), nu_em - nu, x0=nu_em - nu,
                                            restart=krylov_steps, maxiter=1, tol=1e-8, solve_method="incremental")
    return nu_em, jnp.abs(nu + step)  # the bound is even in nu


def _em_map_and_jacobian(op, y, nu):
    """nu_EM(nu) and x -> (d nu_EM / d nu) x (:func:`_candidates`), the latter from plain array operations."""
    factor = op.factor(2.0 * jj_lambda(nu))
    sigma, sigma_squared = factor.posterior_products(op)
    m = sigma(0.5 * y)
    nu_em = jnp.sqrt(jnp.maximum(factor.posterior_variance(op) + m**2 + (1.0 - op.power) * op.g,
                                 jnp.finfo(op.dtype).tiny))

    def jacobian(x):
        dw = -2.0 * jj_lambda_derivative(nu) * x
        return (sigma_squared(dw) + 2.0 * m * sigma(m * dw)) / (2.0 * nu_em)

    return nu_em, jacobian


def _em_map(op, likelihood, y, nu):
    """nu_EM(nu) as a map of nu, for :func:`implicit_fixed_point_krylov` (the likelihood is the logistic)."""
    return _em_map_and_jacobian(op, y, nu)[0]


def _transposed_em_system(op, likelihood, y, nu):
    """lambda -> (I - d nu_EM / d nu)^T lambda at nu, for :func:`implicit_fixed_point_krylov`."""
    jacobian = _em_map_and_jacobian(op, y, nu)[1]
    return transposed(lambda x: x - jacobian(x), nu)


class _State(NamedTuple):
    nu: Array
    log_z: Array
    change: Array
    converged: Array


def _optimise(method, op, y, nu0, tol):
    """Newton steps, each taken when it does not lower log Z', else the EM update (which never does)."""
    dtype = op.dtype
    d = 0.5 * y

    def step(s: _State) -> _State:
        nu_em, nu_newton = _candidates(op, y, s.nu, method.krylov_steps)
        noise = rounding_level(dtype, 1.0 + jnp.abs(s.log_z) + jnp.abs(jnp.dot(d, op.mv(d))) + jnp.sum(s.nu))
        newton = lower_bound(op, y, nu_newton)
        take = jnp.isfinite(newton) & (newton >= s.log_z - noise)
        nu, log_z = lax.cond(take, lambda: (nu_newton, newton), lambda: (nu_em, lower_bound(op, y, nu_em)))
        change = relative_change(nu, s.nu)
        converged = (change <= tol) & (jnp.abs(log_z - s.log_z) <= tol * (1.0 + jnp.abs(log_z)))
        return _State(nu, log_z, change, converged)

    start = _State(nu0, lower_bound(op, y, nu0), jnp.asarray(jnp.inf, dtype), jnp.asarray(False))
    end = iterate(step, lambda s: (s.converged, jnp.asarray(False)), start, max_steps=method.max_steps,
                  finite=lambda s: all_finite(s.nu))
    return end.state.nu, end.num_steps, end.status, end.state.change
