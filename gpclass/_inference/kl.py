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

Any prior operator (``gpclass._covariance``).  Under a sparse prior, Sigma =
(K~^-1 + S~)^-1 and the expected log-likelihood sees v_i = Sigma_ii + (K - K~)_ii
(``trace_variance``): for FITC (K~ = Q + diag(K - Q)) the ELBO of the FITC
prior; for VFE (K~ = Q) q(f) is p(f|u) q(u) and the ELBO is the bound of
Titsias (2009) and of SVGP (Hensman et al. 2015) at q(u) = the sites' Gaussian.

Solver: Newton's method on the fixed-point equations of the sites (2n
unknowns: a dense 2n x 2n LU solve per step where the prior is a matrix,
GMRES on the Jacobian's products under a sparse prior: :func:`_fixed_point_map`), safeguarded
by the natural-gradient (conjugate-computation, Khan & Lin 2017) update: from
the current marginals (m_i, s_i), target sites tau~_i = -2 dE_i/ds_i,
nu~_i = dE_i/dm_i + tau~_i m_i, taken with a step beta in (0, 1] that is halved
until the ELBO does not decrease.  A Newton candidate is taken only when it
does not lower the ELBO, so the ELBO never decreases; near the optimum Newton
converges quadratically.  Without a warm start the sites begin at Laplace's
approximation (tau~ = W(f^), nu~ = W f^ + grad log p(y|f^) at a mode found to
1e-3: ``laplace.sites_at_mode``, Newton steps without quadrature; an all-zero
warm start, ``gpc.fit``'s first, counts as none).  From zero sites (q = the
prior) the first Newton candidates lowered the ELBO and the natural-gradient
steps made slow progress (VFE-KL on twonorm, n = 20,000: 11 steps, 5 of them
with a rejected Newton candidate, against 4 Newton steps from Laplace's sites,
the same ELBO).  The natural-gradient iteration alone converges linearly, and
for stiff kernels so slowly that stopping it on a small change left gradients
2e-5 off (Ionosphere, sigma_f^2 = e^5).  For a log-concave
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

import equinox as eqx
import jax.numpy as jnp
from jax import lax

from .._covariance import AbstractCovariance, AbstractSitesCovariance, AbstractSitesFactor
from .._covariance._base import BOUND
from .._exceptions import GPClassError
from .._iterate import run
from .._status import Status
from .._types import Array
from .._validation import require_setting
from ._base import AbstractInference
from ._expectations import expected_log_lik, expected_log_lik_derivatives
from ._implicit import implicit_fixed_point
from ._kl_solver import AbstractKLSolver, starting_sites
from ._linear_solve import LinearMap, identity_minus
from ._posterior import SolverInfo, gaussian_posterior
from .kl_classes import solve_classes
from .laplace import sites_at_mode


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
            earlier, at a relative residual of a tenth of the last step's site change,
            between 1e-8 and 1e-2: inexact Newton).

        num_samples: multi-class likelihoods (``gpc.likelihoods.Softmax(C)``): the points per case of the rule
            that computes E_q[log p(y_i|f_i)] (``kl_classes``: S/2 antithetic pairs, whitened; even, >= 2 C).
        seed: multi-class likelihoods: the rule's points are drawn from ``jax.random.key(seed)`` unless
            ``gpc.infer(..., key=)`` gives a key (no hidden randomness: the same points at every call).

    Without a warm start (``gpc.infer(..., init=)``, or an all-zero one) the sites start at Laplace's
    approximation (a few Newton steps without quadrature), from which Newton's steps are taken at once.

    Works with any log-concave likelihood that has ``expected_log_prob``
    (logistic, probit); the expectations use its quadrature.  With ``Softmax(C)``
    q(F) = prod_c N(m_c, V_c) (independent classes, per-class sites; ``kl_classes``), any
    prior with the bound (a kernel's, ``PerClass``, ``gpc.Sparse`` FITC or VFE), and the
    posterior is a ``SoftmaxPosterior`` (``SparseSoftmaxPosterior``) without coupling between the classes.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.KL(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> bool(post.info.converged), round(float(post.log_marginal), 1)  # the maximised ELBO
        (True, -24.3)
        >>> print(np.asarray(gpc.predict(post, X[:3])).round(2))
        [0.68 0.65 0.69]
    """

    supports_mask = True
    multiclass = True

    def multiclass_for(self, likelihood) -> bool:
        """The softmax (``kl_classes``); the multinomial probit's expectations are untested here: refused."""
        return getattr(likelihood, "block_curvature", False)

    tol: float | None = eqx.field(static=True, default=None)
    site_tol: float | None = eqx.field(static=True, default=None)
    max_steps: int = eqx.field(static=True, default=1000)
    max_halvings: int = eqx.field(static=True, default=30)
    krylov_steps: int = eqx.field(static=True, default=30)
    num_samples: int = eqx.field(static=True, default=256)
    seed: int = eqx.field(static=True, default=0)

    def __check_init__(self):
        require_setting("KL", "tol", self.tol, optional=True)
        require_setting("KL", "site_tol", self.site_tol, optional=True)
        require_setting("KL", "max_steps", self.max_steps, low=1, low_open=False, integer=True)
        require_setting("KL", "max_halvings", self.max_halvings, low_open=False, integer=True)
        require_setting("KL", "krylov_steps", self.krylov_steps, low=1, low_open=False, integer=True)
        require_setting("KL", "num_samples", self.num_samples, low=2, low_open=False, integer=True)
        require_setting("KL", "seed", self.seed, low=0, low_open=False, integer=True)

    def solve(self, op, likelihood, y, init=None, key=None):
        """The sites' optimum on ``stop_gradient`` inputs, then the ELBO and the posterior at it."""
        _check_log_concave(likelihood)
        if likelihood.num_latent > 1:
            return solve_classes(self, op, likelihood, y, init, key)
        op.require(BOUND, "gpc.KL()", "Use gpc.Sparse(..., approximation='fitc') or 'vfe'.")
        n, dtype = op.shape[0], op.dtype
        tau0 = jnp.zeros(n, dtype) if init is None else jnp.asarray(init[0], dtype)
        nu0 = jnp.zeros(n, dtype) if init is None else jnp.asarray(init[1], dtype)
        tau0, nu0 = starting_sites(tau0, nu0, lambda: sites_at_mode(op, likelihood, y, self.max_halvings))
        end = run(KLSolver(self, *lax.stop_gradient((op, likelihood, y, tau0, nu0))))
        tau, nu = lax.stop_gradient((end.state.tau, end.state.nu))
        factor = op.factor_given(tau, end.state.factor)
        # The posterior depends on the sites, differentiable by the implicit function theorem (solved only when
        # a prediction is differentiated); the ELBO holds them fixed (module docstring).
        tau_p, nu_p = implicit_fixed_point(_fixed_point_system, (tau, nu), end.status == Status.CONVERGED, op,
                                           likelihood, y, self.krylov_steps)
        factor_p = op.factor_given(tau_p, factor)
        alpha = factor_p.solve_i_plus_wk(op, nu_p)  # K^-1 mu = (I + S~ K)^-1 nu~ (GPML Algorithm 3.6, line 4)
        return gaussian_posterior(
            op, factor_p, alpha=alpha, mean=op.mv(alpha),
            log_marginal=elbo(op, likelihood, y, tau, nu, factor),  # envelope theorem: sites held fixed
            info=SolverInfo(num_steps=end.num_steps, status=end.status, max_change=end.state.change),
            warm_start=(tau, nu),
        )


def _check_log_concave(likelihood):
    if not likelihood.log_concave:
        raise GPClassError(
            f"gpc.KL() needs a log-concave likelihood (non-negative site precisions); "
            f"{type(likelihood).__name__} is not. Use gpc.EP() instead."
        )


def _moments(op: AbstractCovariance, nu, cov: AbstractSitesCovariance):
    """mu = Sigma nu~, diag Sigma, and the variances v = diag Sigma + diag(K - K~) the expected log-likelihood
    sees (module docstring)."""
    sigma_diag = cov.variance()
    return cov.times(nu), sigma_diag, sigma_diag + op.trace_variance()


def elbo(op: AbstractCovariance, likelihood, y, tau, nu, factor: AbstractSitesFactor | None = None, cov=None):
    """sum_i E_q[log p(y_i|f_i)] - KL(q || N(0, K)) for q = prior x sites (tau~, nu~)  (module docstring).

    ``factor`` is ``op.factor(tau)`` and ``cov`` its ``covariance(op)``, if already computed.
    """
    factor = op.factor(tau) if factor is None else factor
    cov = factor.covariance(op) if cov is None else cov
    mu, sigma_diag, v = _moments(op, nu, cov)
    alpha = factor.solve_i_plus_wk(op, nu)
    kl = 0.5 * (jnp.dot(mu, alpha) - jnp.dot(tau, sigma_diag)) + factor.half_log_det_b(op)
    return jnp.sum(_expected_log_lik(likelihood, y, mu, v)) - kl


def _expected_log_lik(likelihood, y, mu, v):
    """E[log p(y_i|f_i)] under f_i ~ N(mu_i, v_i), and log p(y_i|mu_i) where v_i <= 0: a latent value with no
    prior variance (the linear kernel at 0, a preference between items with the same inputs) is known, and the
    quadrature's derivative in v (through sqrt v) would be infinite there."""
    known = v <= 0.0
    return jnp.where(known, likelihood.log_prob(y, mu),
                     expected_log_lik(likelihood, y, mu, jnp.where(known, 1.0, v)))


def _fixed_point_map(op, likelihood, y, tau, nu, cov: AbstractSitesCovariance):
    """The natural-gradient target sites T(tau~, nu~), I - J with J = dT/ds, and the marginal means mu.

    T: tau~ = -2 dE/dv (clipped at 0: >= 0 for a log-concave likelihood, up to quadrature rounding),
    nu~ = dE/dm + tau~ mu at the marginals (mu, v) of q.  T depends on the sites only through (mu, v),
    elementwise, and d mu = Sigma (d nu~ - d tau~ * mu), d v = -(Sigma o Sigma) d tau~ (from
    dSigma = -Sigma dS~ Sigma).  J is formed where Sigma is a matrix (2n x 2n, solved by LU: about 16
    Cholesky factorisations of n x n), applied by Sigma's products otherwise; where the natural-gradient
    iteration crawls (spectral radius of J near 1, stiff kernels) J has few eigenvalues near 1, which
    GMRES resolves in a few products.
    """
    cov = cov.formed()  # J is formed from Sigma where it is a matrix: the marginals too (``formed``)
    mu, _, v = _moments(op, nu, cov)
    known = v <= 0.0  # a known latent value (``_expected_log_lik``): its site stays at 0, T's row is constant
    g_m, g_v, h_mm, h_mv, h_vm, h_vv = expected_log_lik_derivatives(likelihood, y, mu, jnp.where(known, 1.0, v))
    active = (-2.0 * g_v > 0.0) & ~known  # where T's precision is not clipped at 0
    t_tau = jnp.where(active, -2.0 * g_v, 0.0)
    # Diagonal derivatives of T with respect to (mu, v), then the chain rule through (mu, v)(tau~, nu~).
    tau_m, tau_v = jnp.where(active, -2.0 * h_vm, 0.0), jnp.where(active, -2.0 * h_vv, 0.0)
    nu_m = jnp.where(known, 0.0, h_mm + t_tau + mu * tau_m)
    nu_v = jnp.where(known, 0.0, h_mv + mu * tau_v)

    def apply(ds):
        d_tau, d_nu = ds
        d_mu, d_v = cov.times(d_nu - d_tau * mu), -cov.squared_times(d_tau)
        return d_tau - (tau_m * d_mu + tau_v * d_v), d_nu - (nu_m * d_mu + nu_v * d_v)

    def matrix():
        Sigma = cov.matrix()
        mu_tau, v_tau = -Sigma * mu[None, :], -(Sigma**2)
        J = jnp.block([
            [tau_m[:, None] * mu_tau + tau_v[:, None] * v_tau, tau_m[:, None] * Sigma],
            [nu_m[:, None] * mu_tau + nu_v[:, None] * v_tau, nu_m[:, None] * Sigma],
        ])
        return identity_minus(2 * mu.shape[0], J)

    return (t_tau, jnp.where(known, 0.0, g_m + t_tau * mu)), LinearMap(apply, matrix if cov.has_matrix else None), mu


def _fixed_point_system(op, likelihood, y, sites):
    """(T(s), I - dT/ds) at the sites s = (tau~, nu~): the system for :func:`implicit_fixed_point`."""
    tau, nu = sites
    return _fixed_point_map(op, likelihood, y, tau, nu, op.factor(tau).covariance(op))[:2]


class KLSolver(AbstractKLSolver):
    """:class:`AbstractKLSolver` for one latent function per case."""

    method: KL
    op: AbstractCovariance
    likelihood: object
    y: Array
    tau0: Array
    nu0: Array

    def _evaluate(self, tau, nu):
        factor = self.op.factor(tau)
        cov = factor.covariance(self.op)
        return tau, nu, factor, cov, elbo(self.op, self.likelihood, self.y, tau, nu, factor, cov)

    def _fixed_point(self, tau, nu, cov):
        return _fixed_point_map(self.op, self.likelihood, self.y, tau, nu, cov)
