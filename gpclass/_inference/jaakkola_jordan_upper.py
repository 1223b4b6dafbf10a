"""The Jaakkola-Jordan variational upper bound on the evidence of logistic GP classification (Gibbs & MacKay 2000).

With labels y in {-1, +1}, the sigmoid is bounded above by the exponential of a
linear function of the latent a (Gibbs & MacKay eq. 9):

    g(y a) <= exp[mu y a - H2(mu)],  mu in [0, 1],

so p(y|X, theta) <= Z'' with a Gaussian integral (eq. 32).  The lower bound Z'
is ``jaakkola_jordan.py``.

The bound.  log Z'' = -sum_n H2(mu_n) + 1/2 b^T C b with b_n = y_n mu_n
(eq. 38) is convex in mu and minimised by Newton's method (below); the
approximate posterior (eq. 26) is the prior shifted to mean C b with the prior
covariance, so at a test point the latent is N(k^T b, kappa).  (The scanned
eqs. 27-28 mix in the conditional variance kappa - k^T C^-1 k; the marginal of
eq. 26 is the one above.)

Gradients.  log Z'' is minimised over mu at fixed hyperparameters; at the
optimum the derivative through mu vanishes (envelope theorem), so
d log Z'' / d theta is the explicit derivative with mu held fixed (a
``stop_gradient``, exact at convergence).  The posterior (predictions) depends
on eta = logit(mu)'s own derivative, by the implicit function theorem at the
stationarity condition eta = -y (C b) (:func:`_upper_target_and_jacobian`).
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .._exceptions import GPClassError
from .._iterate import AbstractIterativeSolver, all_finite, rounding_level, run, tolerance
from .._linalg import factor_b, solve_b
from .._status import Status
from .._types import Array
from .._validation import require_setting
from ._base import AbstractInference
from ._implicit import implicit_fixed_point
from ._jaakkola_jordan import check_logistic
from ._linear_solve import LinearMap, identity_minus
from ._posterior import GaussianPosterior, SolverInfo
from ._search import halving_search


class JaakkolaJordanUpper(AbstractInference):
    """Gibbs & MacKay's variational upper bound Z'' for the logistic likelihood (their eqs. 9, 38).

    ``posterior.log_marginal`` is the minimised bound, log p(y|X, theta) <= log Z''.  It is not an ML-II
    objective (it grows without limit in the signal variance): fit with :class:`JaakkolaJordan` (the lower
    bound) and evaluate this one at the fitted hyperparameters.

    Attributes:
        tol: convergence when mu changes by at most ``tol`` and log Z'' by at
            most ``tol (1 + |log Z''|)`` between steps.  ``None`` means 1e-10
            in float64 and 1e-5 in float32.
        max_steps: largest number of Newton steps (convex problem, in eta = logit(mu)).
        max_halvings: largest number of step halvings of the backtracking line search in one step.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> lik = gpc.likelihoods.Logistic()
        >>> lower = gpc.infer(gpc.JaakkolaJordan(), kernel, lik, X, y)
        >>> upper = gpc.infer(gpc.JaakkolaJordanUpper(), kernel, lik, X, y)
        >>> bool(lower.log_marginal <= upper.log_marginal)  # log Z' <= log p(y|X) <= log Z''
        True
        >>> round(float(upper.log_marginal), 1)
        -22.3
    """

    tol: float | None = eqx.field(static=True, default=None)
    max_steps: int = eqx.field(static=True, default=200)
    max_halvings: int = eqx.field(static=True, default=40)

    def __check_init__(self):
        require_setting("JaakkolaJordanUpper", "tol", self.tol, optional=True)
        require_setting("JaakkolaJordanUpper", "max_steps", self.max_steps, low=1, low_open=False, integer=True)
        require_setting("JaakkolaJordanUpper", "max_halvings", self.max_halvings, low_open=False, integer=True)

    def check_ml2(self):
        raise GPClassError(
            "The Jaakkola-Jordan upper bound has no finite maximum over the hyperparameters (it grows without "
            "limit in the signal variance; Gibbs & MacKay sec. IV-C). Fit the lower bound gpc.JaakkolaJordan(), "
            "then evaluate gpc.JaakkolaJordanUpper() at the fitted hyperparameters."
        )

    def solve_matrix(self, K, likelihood, y, init=None, key=None):
        check_logistic(likelihood)
        return _solve_upper(self, K, y, init, tolerance(self.tol, K.dtype, 1e-10, 1e-5))


def upper_bound(K, y, eta):
    """log Z'' = -sum_n H2(mu_n) + 1/2 b^T C b, b = y mu, mu = sigmoid(eta)  (Gibbs & MacKay eq. 38)."""
    mu = jax.nn.sigmoid(eta)
    negative_entropy = mu * jax.nn.log_sigmoid(eta) + (1.0 - mu) * jax.nn.log_sigmoid(-eta)
    b = y * mu
    return jnp.sum(negative_entropy) + 0.5 * jnp.dot(b, K @ b)


def _upper_newton_direction(K, y, eta):
    """The Newton step for log Z'' in mu (eq. 39 and its Hessian), expressed in eta = logit(mu).

    Gradient in mu: g = eta + y (C b); Hessian: D^-1 + Y C Y with D = diag(mu (1 - mu)).
    The Newton step in mu divided by D is d eta = -(I + Y C Y D)^-1 g
    = -Y (u - C D^1/2 B^-1 D^1/2 u), u = y g, B = I + D^1/2 C D^1/2: no division
    by D, so saturated points (mu near 0 or 1) take the step eta <- -y (C b),
    the stationarity condition itself.  It is a descent direction for every
    eta (its inner product with the eta-gradient D g is -g^T (D^-1 + Y C Y)^-1 g).
    """
    mu = jax.nn.sigmoid(eta)
    g = eta + y * (K @ (y * mu))
    sqrt_d = jnp.sqrt(mu * jax.nn.sigmoid(-eta))
    u = y * g
    L = factor_b(K, sqrt_d)
    return -y * (u - K @ (sqrt_d * solve_b(L, sqrt_d * u)))


def _upper_fixed_point(K, likelihood, y, eta):
    """The stationarity condition g = 0 (:func:`_upper_newton_direction`) as the fixed point eta = -y (C b),
    b = y sigmoid(eta), and I - J with its Jacobian J = -Y C Y D: the system for :func:`implicit_fixed_point`."""
    mu = jax.nn.sigmoid(eta)
    jacobian = -(y[:, None] * K * y[None, :]) * (mu * jax.nn.sigmoid(-eta))[None, :]
    return -y * (K @ (y * mu)), LinearMap(lambda x: x - jacobian @ x, lambda: identity_minus(y.shape[0], jacobian))


class UpperState(eqx.Module):
    """eta = logit(mu), log Z''(eta), the last change of mu, and how the last step ended."""

    eta: Array
    value: Array
    change: Array
    converged: Array
    stalled: Array


class UpperBoundSolver(AbstractIterativeSolver):
    """Damped Newton iterations on the convex log Z''(mu) (:func:`gpclass._iterate.run`)."""

    K: Array
    y: Array
    eta0: Array
    tol: float
    max_steps: int
    max_halvings: int

    def init(self) -> UpperState:
        false = jnp.asarray(False)
        return UpperState(self.eta0, upper_bound(self.K, self.y, self.eta0), jnp.asarray(jnp.inf, self.K.dtype),
                          false, false)

    def step(self, s: UpperState) -> UpperState:
        K, y = self.K, self.y
        direction = _upper_newton_direction(K, y, s.eta)
        # Rounding level of the objective: the largest terms are |b^T C b| and the entropies.
        scale = jnp.abs(s.value) + jnp.dot(jnp.abs(y), jnp.abs(K) @ jnp.ones_like(y)) + y.shape[0]
        noise = rounding_level(K.dtype, scale)

        t, new_value = halving_search(lambda t: upper_bound(K, y, s.eta + t * direction),
                                      lambda value: value <= s.value + noise,
                                      upper_bound(K, y, s.eta + direction), self.max_halvings, K.dtype)
        new_eta = s.eta + t * direction
        change = jnp.max(jnp.abs(jax.nn.sigmoid(new_eta) - jax.nn.sigmoid(s.eta)))
        converged = (change <= self.tol) & (jnp.abs(new_value - s.value) <= self.tol * (1.0 + jnp.abs(new_value)))
        accepted = new_value <= s.value + noise
        # A direction that cannot be accepted at any length ends the iterations unconverged (stalled).
        return UpperState(
            jnp.where(accepted, new_eta, s.eta), jnp.where(accepted, new_value, s.value), change,
            converged & accepted, ~accepted,
        )

    def terminate(self, s: UpperState):
        return s.converged, s.stalled

    def finite(self, s: UpperState):
        return all_finite(s.eta)

    def status(self, s: UpperState, converged, num_steps):
        """As every solver's, but ``IMPRECISE`` for a converged bound above 0, which exact arithmetic never
        reaches (mu = 0 gives log Z'' = 0, so its minimum is at most 0): rounding stops the descent in float32
        at extreme hyperparameters (a signal variance of 1e12: log Z'' = +3.75e12)."""
        status = super().status(s, converged, num_steps)
        return jnp.where((status == Status.CONVERGED) & (s.value > 0), Status.IMPRECISE, status)


def _solve_upper(method, K, y, init, tol):
    """log Z'' at its minimum (:class:`UpperBoundSolver`) and the posterior N(C b, C) of eq. 26."""
    dtype = K.dtype
    eta0 = jnp.zeros_like(y) if init is None else jnp.asarray(init, dtype)
    end = run(UpperBoundSolver(K, y, eta0, tol, method.max_steps, method.max_halvings))
    eta, steps, status, change = end.state.eta, end.num_steps, end.status, end.state.change
    eta = lax.stop_gradient(eta)
    n = K.shape[0]
    # The posterior depends on eta, differentiable by the implicit function theorem (solved only when a prediction
    # is differentiated); the bound holds eta fixed.
    b = y * jax.nn.sigmoid(implicit_fixed_point(_upper_fixed_point, eta, status == Status.CONVERGED, K,
                                                None, y, krylov_steps=1))
    return GaussianPosterior(
        alpha=b,  # the posterior of eq. 26 is N(C b, C): test mean k^T b, test variance kappa
        sqrt_w=jnp.zeros_like(b),
        chol=jnp.eye(n, dtype=dtype),
        mean=K @ b,
        log_marginal=upper_bound(K, y, eta),  # envelope theorem: eta held fixed
        info=SolverInfo(num_steps=steps, status=status, max_change=change),
        warm_start=eta,
    )
