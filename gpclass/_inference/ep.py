"""Expectation propagation for binary GP classification (GPML section 3.6, Algorithm 3.5).

Each likelihood term p(y_i|f_i) is replaced by an unnormalised Gaussian site
with natural parameters (tau~_i, nu~_i); sites are refined until the marginals
of q(f) = N(mu, Sigma), Sigma = (K^-1 + S~)^-1, mu = Sigma nu~, match the
moments of the tilted distributions (GPML eqs. 3.56-3.59).

Any prior operator (``gpclass._covariance``) that is the model's prior
covariance itself: a kernel's K, or a sparse prior's FITC K~ = Q + diag(K - Q)
(GPML ``infEP`` with ``apxSparse``; Snelson & Ghahramani 2006).  The
sequential schedule updates Sigma by exact rank-one changes and needs K as a
matrix; the parallel schedule updates every site from the current marginals
and refactorises once per sweep (O(n m^2) under FITC, where GPML updates the
sites one at a time with rank-one Cholesky updates, O(m^2) each; both stop at
the same EP fixed point).

Gradients.  log Z_EP (eqs. 3.65, 3.73, 3.74) is a function L(theta, s) of the
hyperparameters and the converged sites s = (tau~, nu~); no sweep is
differentiated and memory does not depend on the number of sweeps.

* Log-concave likelihoods: every site precision is positive and at the EP
  fixed point L is stationary in every site, dL/ds = 0 (Seeger 2005; Kuss &
  Rasmussen eq. 51), so dL/dtheta is the explicit partial derivative: log Z_EP
  holds the sites fixed (``stop_gradient``) and no sweep costs anything in
  reverse mode.  For a kernel's K the partial derivative in K is GPML eq. 5.27,
  1/2 (b b^T - S~^1/2 B^-1 S~^1/2) with b = K^-1 mu, computed from the last
  sweep's factor of B (:func:`_dense_log_marginal_at_fixed_point`): no
  factorisation is repeated or differentiated.  This is exact at the fixed
  point; at the computed sites its error is of the order of the convergence
  residual (``EP.tol`` bounds the undamped update, so a damped schedule does
  not stop further from the fixed point than an undamped one).
* Predictions, and log Z_EP of other likelihoods (label noise, the step
  function: a site whose precision is clipped at 0 is not a stationary point
  of L), depend on the sites' own dependence on theta.  s*(theta) is the
  fixed point of the undamped parallel update s = F(s, theta) (damping does
  not enter: the damped map d F + (1 - d) I has the same fixed points, and d
  cancels between (I - J) and dF/dtheta), so ds* = (I - J)^-1 dF/dtheta with
  J = dF/ds: the implicit adjoint (``_implicit``) solves (I - J)^T lambda = s_bar
  with J formed from Sigma for a kernel's K (:func:`_parallel_system`) or by
  GMRES on its products under FITC, only when the sites receive a cotangent.
  It must not be solved by the iteration lambda <- dL/ds + J^T lambda: F need
  not be a contraction, and with strongly correlated inputs (repeated and
  near-repeated rows) J has an eigenvalue of -1.3 to -1.4, the oscillating
  mode of undamped parallel EP, where the iteration diverged (gradients of
  1e10 to 1e22 from a convergence residual of 1e-8 on Wisconsin subsets).
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .. import _anderson as anderson
from .._covariance import AbstractCovariance, AbstractSitesCovariance, AbstractSitesFactor
from .._covariance._base import MATRIX, PRIOR
from .._exceptions import GPClassError
from .._iterate import AbstractIterativeSolver, all_finite, relative_change, run, tolerance
from .._linalg import inverse_from_cholesky
from .._status import Status
from .._types import Array
from .._validation import require_setting
from . import ep_classes
from ._base import AbstractInference
from ._ep_updates import ep_log_marginal, extrapolate_sites, site_log_normalisers, site_update
from ._implicit import implicit_fixed_point
from ._linear_solve import LinearMap, identity_minus
from ._posterior import SolverInfo, gaussian_posterior

# The GMRES restart of the sites' implicit adjoint under a sparse prior (EP has no Newton solve of its own).
_ADJOINT_KRYLOV_STEPS = 50


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
            ``None`` (the default): parallel under a sparse prior and for a
            likelihood whose tilted moments are in closed form (probit, step,
            their label noise, preferences); otherwise sequential, as with
            ``order="random"``.  With Anderson acceleration the parallel
            sweeps reach the fixed point in about twice as many sweeps as the
            sequential ones, each without the n x n updates of Sigma: faster
            on every bundled data set with the probit, and as robust on the
            hard problems measured (``benchmarks/ep_schedules.py``,
            ``benchmarks/ep_anderson_grid.py``).  With tilted moments by
            quadrature (the logistic) the extra sweeps cost more than they
            save up to n of several hundred.  The sequential schedule is
            GPML's infEP; both reach the same fixed point.
        order: the site order of the sequential schedule, ``"fixed"`` (1..n)
            or ``"random"`` (a fresh permutation every sweep, drawn from the
            explicit ``key`` passed to :func:`gpclass.infer`); the parallel
            schedule has no order, and refuses ``"random"``.
        damping: the fraction of the new site parameters taken in each update
            (1 = undamped).  ``None`` means, for a log-concave likelihood, 1
            for the sequential schedule and 0.7 for the parallel one (with
            Anderson acceleration as robust as 0.5 on the problems measured,
            in fewer sweeps: ``benchmarks/ep_anderson_grid.py``,
            ``benchmarks/ep_schedules.py``), and 0.5 for a likelihood that is
            not log-concave (label noise) and for nested EP, where undamped
            updates can oscillate.
        tol: convergence when, between two sweeps, the largest change of tau~
            and nu~ by the sweep's undamped update (a damped sweep's change
            divided by ``damping``) is at most ``tol (1 + max |.|)`` and
            log Z_EP changes by at most ``tol (1 + |log Z_EP|)``.  ``None`` means 1e-10 in float64 and
            1e-5 in float32.
        max_steps: largest number of sweeps.
        anderson: how many past sweeps Anderson acceleration combines
            (``gpclass._anderson``; Walker & Ni 2011): each sweep's output is
            extrapolated from the last ``anderson`` sweeps, which removes the
            slow linear modes of the sweep map: fewer sweeps to the same
            tolerance, sequential and parallel, dense and sparse
            (``benchmarks/gpml_ep.py``, ``benchmarks/sparse_ep_sweeps.py``;
            figures in benchmarks/README.md).  The fixed point is the
            same.  0 gives the plain sweeps; so does ``order="random"``, whose
            sweeps are different maps.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.EP(), kernel, gpc.likelihoods.Probit(), X, y)
        >>> bool(post.info.converged), round(float(post.log_marginal), 1)  # log Z_EP
        (True, -22.4)
        >>> print(np.asarray(gpc.predict(post, X[:3])).round(2))
        [0.74 0.69 0.74]
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

    def multiclass_for(self, likelihood) -> bool:
        """Nested EP (``ep_classes``) for a likelihood of probit factors (``MultinomialProbit``)."""
        return getattr(likelihood, "probit_factors", False)

    def solve(self, op, likelihood, y, init=None, key=None):
        """Sweeps to the fixed point on ``stop_gradient`` inputs, then log Z_EP and the posterior at the sites;
        nested EP (``ep_classes``) for several latent functions per case."""
        if likelihood.num_latent > 1:
            return ep_classes.solve(self, op, likelihood, y, init, key)
        op.require(PRIOR, "gpc.EP()", "EP under a sparse prior supports FITC only (gpc.Sparse(..., "
                   "approximation='fitc')); for VFE use gpc.KL() or gpc.Laplace().")
        sequential = self._sequential_on(op, likelihood)
        if self.order == "random" and key is None:
            raise GPClassError("EP(order='random') needs an explicit PRNG key: gpc.infer(..., key=jax.random.key(0)).")
        n, dtype = op.shape[0], op.dtype
        tau0 = jnp.zeros(n, dtype) if init is None else jnp.asarray(init[0], dtype)
        nu0 = jnp.zeros(n, dtype) if init is None else jnp.asarray(init[1], dtype)
        end = run(SweepSolver(self, sequential, *lax.stop_gradient((op, likelihood, y, tau0, nu0)), key))
        sites = lax.stop_gradient((end.state.tau, end.state.nu))
        # The sites as a differentiable function of the prior and the likelihood (module docstring): the posterior
        # depends on them, and their adjoint is solved only when something differentiated depends on them.
        tau_p, nu_p = implicit_fixed_point(_parallel_system, sites, end.status == Status.CONVERGED, op, likelihood, y,
                                           _ADJOINT_KRYLOV_STEPS)
        factor_p = op.factor_given(tau_p, end.state.factor)  # the last sweep's factor
        if likelihood.log_concave:  # dL/ds = 0 at the fixed point: log Z_EP's gradient holds the sites fixed
            log_z = _log_marginal_at_fixed_point(op, likelihood, y, *sites, end.state.factor, end.state.cov)
        else:
            log_z = log_marginal(op, likelihood, y, tau_p, nu_p, factor_p)
        alpha = factor_p.solve_i_plus_wk(op, nu_p)  # K^-1 mu = (I + S~ K)^-1 nu~ (GPML Algorithm 3.6, line 4)
        return gaussian_posterior(
            op, factor_p, alpha=alpha, mean=op.mv(alpha), log_marginal=log_z,
            info=SolverInfo(num_steps=end.num_steps, status=end.status, max_change=end.state.change),
            warm_start=sites,
        )

    def _sequential_on(self, op, likelihood) -> bool:
        """Whether the sweeps are sequential on ``op`` for ``likelihood`` (``schedule``): refuses the settings the
        operator cannot run."""
        if self.schedule == "sequential":
            op.require(MATRIX, "EP(schedule='sequential')", "Under a sparse prior EP updates every site at once: "
                       "use schedule='parallel' or the default schedule=None.")
        if self.order == "random":  # only the sequential schedule has an order
            op.require(MATRIX, "EP(order='random')", "It orders the sequential schedule's site updates, which need a "
                       "dense K; under a sparse prior EP runs the parallel schedule, which has no order: use "
                       "order='fixed'.")
            return True
        if self.schedule is None:
            return MATRIX in op.capabilities and not likelihood.closed_form_tilted
        return self.schedule == "sequential"

    def resolved_tol(self, dtype):
        return tolerance(self.tol, dtype, 1e-10, 1e-5)

    def resolved_damping(self, likelihood, sequential: bool):
        """``damping``, or its default: 1 for sequential sweeps and 0.7 for parallel ones with a log-concave
        likelihood of one latent function, 0.5 otherwise (label noise; nested EP's outer sweeps)."""
        if self.damping is not None:
            return self.damping
        if not likelihood.log_concave or likelihood.num_latent > 1:
            return 0.5
        return 1.0 if sequential else 0.7


def log_marginal(op: AbstractCovariance, likelihood, y, tau, nu, factor: AbstractSitesFactor | None = None,
                 cov: AbstractSitesCovariance | None = None):
    """log Z_EP by GPML eqs. 3.65, 3.73 and 3.74 under the prior ``op``, from the factor of B.

    A differentiable function of the prior, the likelihood and the sites; the cavity parameters follow from
    them (eq. 3.56).  nu~^T Sigma nu~ (the prior's part of eq. 3.74) is the operator's ``quadratic``, a sum of
    squares under a sparse prior.  ``factor`` and ``cov`` are ``op.factor(tau)`` and its covariance if computed.
    """
    factor = op.factor(tau) if factor is None else factor
    cov = factor.covariance(op) if cov is None else cov
    return _log_marginal_from(op, likelihood, y, tau, nu, factor, cov, cov.variance(), cov.times(nu))


def _log_marginal_from(op, likelihood, y, tau, nu, factor, cov, sigma_diag, mu):
    """:func:`log_marginal` given the marginals (sigma_diag, mu) = (diag Sigma, Sigma nu~) at the sites."""
    return ep_log_marginal(likelihood, y, tau, nu, sigma_diag, mu, factor.half_log_det_b(op), cov.quadratic(nu))


def _log_marginal_at_fixed_point(op, likelihood, y, tau, nu, factor, cov):
    """log Z_EP at converged sites of a log-concave likelihood, differentiable with the sites held fixed: through
    the factor for a sparse prior, by GPML eq. 5.27 for a kernel's K (:func:`_dense_log_marginal_at_fixed_point`)."""
    if MATRIX in op.capabilities:
        return _dense_log_marginal_at_fixed_point(op, likelihood, y, tau, nu, factor, cov)
    return log_marginal(op, likelihood, y, tau, nu, op.factor_given(tau, factor))


@jax.custom_vjp
def _dense_log_marginal_at_fixed_point(op, likelihood, y, tau, nu, factor, cov):
    """log Z_EP (:func:`log_marginal`) at converged sites, from their factor of B and covariance, for a kernel's K.

    Reverse mode gives the explicit partial derivatives at fixed sites, which
    at the EP fixed point are the total derivatives (module docstring): for K,
    GPML eq. 5.27, K_bar = 1/2 (b b^T - S~^1/2 B^-1 S~^1/2) with b = K^-1 mu
    (GPML Algorithm 3.6, line 4) and B^-1 from the factor; for the likelihood,
    that of sum_i log Z_i at fixed cavities (eq. 3.65).  Nothing for y, the
    sites and the factor.  (Reverse mode through the factor instead costs a
    second factorisation and its derivative.)
    """
    return log_marginal(op, likelihood, y, tau, nu, factor, cov)


def _dense_log_marginal_at_fixed_point_fwd(op, likelihood, y, tau, nu, factor, cov):
    return log_marginal(op, likelihood, y, tau, nu, factor, cov), (op, likelihood, y, tau, nu, factor, cov)


def _dense_log_marginal_at_fixed_point_bwd(residuals, g):
    op, likelihood, y, tau, nu, factor, cov = residuals
    b = factor.solve_i_plus_wk(op, nu)
    sqrt_tau = factor.sqrt_w
    K_bar = 0.5 * g * (jnp.outer(b, b) - sqrt_tau[:, None] * inverse_from_cholesky(factor.chol) * sqrt_tau[None, :])
    sigma_diag, mu = cov.variance(), cov.times(nu)
    _, pull = jax.vjp(lambda lik: jnp.sum(site_log_normalisers(lik, y, sigma_diag, mu, tau, nu)), likelihood)
    (likelihood_bar,) = pull(g)
    zeros = jax.tree.map(jnp.zeros_like, (y, tau, nu, factor, cov))
    return (eqx.tree_at(lambda o: o.K, op, K_bar), likelihood_bar, *zeros)


_dense_log_marginal_at_fixed_point.defvjp(_dense_log_marginal_at_fixed_point_fwd,
                                          _dense_log_marginal_at_fixed_point_bwd)


def _parallel_system(op, likelihood, y, sites):
    """F(s), the undamped parallel update of every site from the marginals of q (its fixed point: the sites), and
    I - J, J = dF/ds: the system for :func:`implicit_fixed_point`.

    Site i's update depends on its own (tau~_i, nu~_i) and on its marginal
    (Sigma_ii, mu_i), so J = D_s + D_m M with per-site derivatives D (four
    elementwise vectors each, from two reverse passes through the elementwise
    site update) and the derivative M of the marginals, from dSigma = -Sigma dS~ Sigma
    and mu = Sigma nu~: dSigma_ii/dtau~_j = -Sigma_ij^2, dmu_i/dtau~_j = -Sigma_ij mu_j,
    dmu_i/dnu~_j = Sigma_ij.  Formed from Sigma for a kernel's K (O(n^2) after Sigma), applied by Sigma's
    products under a sparse prior (O(n m^2)).
    """
    tau, nu = sites
    cov = op.factor(tau).covariance(op)
    sigma_diag, mu = cov.variance(), cov.times(nu)
    update = lambda s, m, t, v: site_update(likelihood, y, s, m, t, v)  # noqa: E731
    new_sites, pull = jax.vjp(update, sigma_diag, mu, tau, nu)
    ones, zeros = jnp.ones_like(tau), jnp.zeros_like(tau)
    rows = pull((ones, zeros)), pull((zeros, ones))  # d(new tau~), d(new nu~) by (Sigma_ii, mu_i, tau~_i, nu~_i)

    def apply(ds):
        d_tau, d_nu = ds
        d_sigma, d_mu = -cov.squared_times(d_tau), cov.times(d_nu - mu * d_tau)  # dSigma_ii, dmu_i by the sites
        j = [by_sigma * d_sigma + by_mu * d_mu + by_tau * d_tau + by_nu * d_nu
             for by_sigma, by_mu, by_tau, by_nu in rows]
        return d_tau - j[0], d_nu - j[1]

    def matrix():
        Sigma = cov.matrix()

        def block_row(by_sigma, by_mu, by_tau, by_nu):
            by_tau = jnp.diag(by_tau) - by_sigma[:, None] * Sigma**2 - by_mu[:, None] * Sigma * mu[None, :]
            return jnp.concatenate([by_tau, jnp.diag(by_nu) + by_mu[:, None] * Sigma], axis=1)

        return identity_minus(2 * tau.shape[0], jnp.concatenate([block_row(*r) for r in rows], axis=0))

    return new_sites, LinearMap(apply, matrix if cov.has_matrix else None)


class Sweeps(eqx.Module):
    """EP's state after a sweep: the sites, their factorisation, Sigma and the marginals, log Z_EP, and the last
    sweep's changes."""

    tau: Array
    nu: Array
    factor: AbstractSitesFactor
    cov: AbstractSitesCovariance
    sigma_diag: Array  # the marginals at (tau, nu): shared by log Z_EP after a sweep and the next sweep's cavities
    mu: Array
    log_z: Array
    sweep: Array  # sweeps taken: the random order's permutation index
    change: Array  # relative change of the sites (tau~ and nu~ separately, the larger)
    log_z_change: Array
    memory: anderson.Memory | None  # Anderson acceleration's past sweeps (EP.anderson)


class SweepSolver(AbstractIterativeSolver):
    """EP sweeps (:func:`gpclass._iterate.run`) until the sites and log Z_EP stop changing.

    One factorisation per sweep (``op.factor``), shared by log Z_EP and the next sweep's marginals; the
    sweep's output is extrapolated by Anderson acceleration (``EP.anderson``).
    """

    method: EP
    sequential: bool
    op: AbstractCovariance
    likelihood: object
    y: Array
    tau0: Array
    nu0: Array
    key: Array | None

    @property
    def max_steps(self):
        return self.method.max_steps

    @property
    def _accelerate(self):
        return self.method.anderson > 0 and (not self.sequential or self.method.order == "fixed")

    @property
    def _damping(self):
        return self.method.resolved_damping(self.likelihood, self.sequential)

    def _sweep(self, s: Sweeps):
        damping = self._damping
        if not self.sequential:  # every site from the current marginals
            new_tau, new_nu = site_update(self.likelihood, self.y, s.sigma_diag, s.mu, s.tau, s.nu)
            return (1.0 - damping) * s.tau + damping * new_tau, (1.0 - damping) * s.nu + damping * new_nu
        n = self.op.shape[0]
        order = (None if self.method.order == "fixed"
                 else jax.random.permutation(jax.random.fold_in(self.key, s.sweep), n))
        return _sequential_sweep(s.cov.matrix(), s.mu, self.likelihood, self.y, s.tau, s.nu, damping, order)

    def _evaluate(self, tau, nu):
        op, likelihood, y = self.op, self.likelihood, self.y
        factor = op.factor(tau)
        cov = factor.covariance(op)
        sigma_diag, mu = cov.variance(), cov.times(nu)
        return factor, cov, sigma_diag, mu, _log_marginal_from(op, likelihood, y, tau, nu, factor, cov, sigma_diag, mu)

    def init(self) -> Sweeps:
        inf = jnp.asarray(jnp.inf, self.op.dtype)
        tau0, nu0 = self.tau0, self.nu0
        memory = anderson.start(jnp.concatenate([tau0, nu0]), self.method.anderson) if self._accelerate else None
        factor, cov, sigma_diag, mu, _ = self._evaluate(tau0, nu0)
        return Sweeps(tau0, nu0, factor, cov, sigma_diag, mu, -inf, jnp.asarray(0), inf, inf, memory)

    def step(self, s: Sweeps) -> Sweeps:
        tau, nu = self._sweep(s)
        # The size of the sweep's undamped update: a damped sweep moves the sites by only a fraction of it, and
        # stopping on that fraction would stop a damped schedule further from the fixed point than an undamped one.
        change = jnp.maximum(relative_change(tau, s.tau), relative_change(nu, s.nu)) / self._damping
        memory = s.memory
        if self._accelerate:
            tau, nu, memory = extrapolate_sites(memory, s.tau, s.nu, tau, nu)
        factor, cov, sigma_diag, mu, log_z = self._evaluate(tau, nu)
        return Sweeps(tau, nu, factor, cov, sigma_diag, mu, log_z, s.sweep + 1, change, jnp.abs(log_z - s.log_z),
                      memory)

    def terminate(self, s: Sweeps):
        tol = self.method.resolved_tol(self.op.dtype)
        return (s.change <= tol) & (s.log_z_change <= tol * (1.0 + jnp.abs(s.log_z))), jnp.asarray(False)

    def finite(self, s: Sweeps):
        return all_finite(s.tau, s.nu)


def _sequential_sweep(Sigma, mu, likelihood, y, tau, nu, damping, order=None, block=64, panels=None):
    """One pass of GPML Algorithm 3.5 lines 4-12: sites updated one at a time, in ``order`` (``None``: 1..n).

    Sigma and mu are the marginals at the sites, recomputed from a fresh Cholesky factor
    at the start of every sweep (lines 13-15), which stops rounding drift.  Each site update is the
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
    n = Sigma.shape[0]
    if order is not None:
        Sigma, mu, y_visit, tau_visit, nu_visit = Sigma[order][:, order], mu[order], y[order], tau[order], nu[order]
    else:
        y_visit, tau_visit, nu_visit = y, tau, nu
    b = min(block, n)
    num_blocks = -(-n // b)
    pad = num_blocks * b - n
    if pad:  # padded sites: variance 1, label 1 and no update (see _block_sweep)
        Sigma = jnp.pad(Sigma, (0, pad)) + jnp.diag(jnp.arange(num_blocks * b) >= n).astype(Sigma.dtype)
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
            new_tau, new_nu = site_update(likelihood, y_b[k][None], s_kk[None], mu_k[None], tau_b[k][None],
                                          nu_b[k][None])
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
        start_carry = (jnp.zeros((2 * b, b), dtype), zeros, zeros, tau_b, nu_b)
        (a_and_t, coef, gain, tau_b, nu_b), _ = lax.scan(site, start_carry,
                                                         jnp.arange(b))
        U = S @ a_and_t[b:]
        tau, nu = lax.dynamic_update_slice(tau, tau_b, (first,)), lax.dynamic_update_slice(nu, nu_b, (first,))
        return (Sigma - (U * coef) @ U.T, mu + U @ gain, tau, nu), None

    (Sigma, mu, tau, nu), _ = lax.scan(block_update, (Sigma, mu, tau, nu), jnp.arange(start, stop, b))
    return tau, nu, Sigma, mu
