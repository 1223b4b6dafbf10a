"""Laplace's method for GP classification (GPML section 3.4, Algorithm 3.1; section 3.5 for the softmax).

The mode f^ of Psi(f) = log p(y|f) - 1/2 f^T K^-1 f is found by Newton's
method in the variable a = K^-1 f (f = K a), each step a solve with
I + W K through the prior's factorisation of B = I + W^1/2 K W^1/2
(``op.factor(W)``: GPML's Cholesky factor for a kernel's K, the Woodbury form
for a sparse prior's K~), and a step-halving safeguard that guarantees Psi
increases at every accepted step.  One algorithm for every prior: the
dense K, and K~ = Q + s diag(K - Q) of ``gpc.Sparse`` (GPML ``infLaplace``
with ``apxSparse``: log q uses its power-EP log-determinant ldB2, which for
VFE adds the trace term 1/2 tr(W (K - Q))).  Gradients of the approximate
log marginal likelihood flow through the mode by the implicit function
theorem (a ``custom_vjp`` on the mode): no Newton iteration is stored for
reverse mode.

Multi-class (softmax) likelihoods run the same code: latents are (n, C)
arrays and W = diag(pi) - pi pi^T is block-diagonal (GPML Algorithm 3.3,
eqs. 3.38-3.44); the likelihood asks the prior for that factorisation
(``likelihood.factor``: ``op.class_factor``, conjugate gradients for a Newton
step on a kernel's K, section 3.5.1's blocks at the mode, the Woodbury form
under a sparse prior).
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .._covariance._base import MATRIX
from .._exceptions import GPClassError
from .._iterate import run
from .._validation import require_setting
from ._base import AbstractInference
from ._newton import Newton, better_start, mode_residual
from ._posterior import SolverInfo, gaussian_posterior


class Laplace(AbstractInference):
    """Laplace approximation q(f) = N(f^, (K^-1 + W)^-1) at the posterior mode f^.

    Binary likelihoods use GPML Algorithm 3.1; ``gpc.likelihoods.Softmax(C)``
    uses the multi-class Algorithm 3.3 with the same Newton safeguard and
    settings.

    Attributes:
        tol: stop when the full Newton step changes f by at most
            ``tol * (1 + max|f|)`` in every component (that step is then
            taken).  Newton converges quadratically, so the returned mode is
            accurate to about tol^2 relative.  ``None`` means sqrt(machine epsilon) of the
            data's dtype (1.5e-8 in float64, 3.5e-4 in float32).
        residual_tol: a converged mode also satisfies its equation
            f = K grad log p(y|f) to ``residual_tol * (1 + max|f|)`` in every
            component: the predictive means at the training inputs are that
            close to the mode (``_newton.mode_residual``, rounding of the
            product K grad log p excluded).  ``None`` means 1e-3.  Where the
            working precision cannot get there (float32 with a large signal
            variance or long length scales: the factor I + K W amplifies its
            rounding), Newton stops with ``Status.IMPRECISE`` instead of
            ``CONVERGED``.
        max_steps: largest number of Newton steps.
        max_halvings: largest number of step halvings within one Newton step.
        float32_start: for float64 data, start the
            Newton iterations in float32 and continue in
            float64 from where float32 stops: at its tolerance, or at the
            first step that needs halving or whose gain in Psi float32 cannot
            resolve (a stiff kernel).  Only the starting point changes: the
            float64 iterations, their convergence test and the returned mode
            are as without it, and the float32 point is used only if its
            float64 Psi is higher than the start's.  A float32 factorisation
            is cheaper, and from a float32 mode the float64 iterations need
            far fewer steps than from zero (``benchmarks/laplace_vs_sklearn.py``;
            figures in benchmarks/README.md).  ``None`` means on for float64 problems of at
            least 512 cases; smaller ones are dominated by the loops' fixed
            costs, where a second loop only adds compile time; off for a
            sparse prior or the softmax unless ``True``.
            ``num_steps`` counts the steps of both precisions.

    B is well conditioned without jitter; a nugget on K belongs to the model:
    ``kernel + gpc.kernels.White(v)``.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> gpc.Status(int(post.info.status)).name, round(float(post.log_marginal), 1)
        ('CONVERGED', -24.4)
        >>> print(np.asarray(post.mean[:3]).round(2))  # the mode f^ at the first training inputs
        [0.78 0.65 0.8 ]
    """

    supports_mask = True

    tol: float | None = eqx.field(static=True, default=None)
    residual_tol: float | None = eqx.field(static=True, default=None)
    max_steps: int = eqx.field(static=True, default=100)
    max_halvings: int = eqx.field(static=True, default=30)
    float32_start: bool | None = eqx.field(static=True, default=None)

    multiclass = True

    def multiclass_for(self, likelihood) -> bool:
        """The softmax: its block-diagonal W is what multi-class Laplace factorises (``block_curvature``)."""
        return getattr(likelihood, "block_curvature", False)

    def __check_init__(self):
        require_setting("Laplace", "tol", self.tol, optional=True)
        require_setting("Laplace", "residual_tol", self.residual_tol, optional=True)
        require_setting("Laplace", "max_steps", self.max_steps, low=1, low_open=False, integer=True)
        require_setting("Laplace", "max_halvings", self.max_halvings, low_open=False, integer=True)
        if self.float32_start not in (None, True, False):
            raise GPClassError(f"Laplace: float32_start must be None, True or False; got {self.float32_start!r}.")

    def solve(self, op, likelihood, y, init=None, key=None):
        _check_log_concave(likelihood)
        psi = lambda a: _psi(op, likelihood, y, a)
        a0 = jnp.zeros(y.shape, dtype=op.dtype) if init is None else better_start(psi, init, op.dtype)
        start_steps = 0
        if self._starts_in_float32(op, likelihood):
            a0, start_steps = _float32_start(self, op, likelihood, y, a0)
        f, num_steps, status, a, max_change, factor = _mode(self, op, likelihood, y, a0)
        log_lik, grad, W = likelihood.derivatives(y, f)
        factor = likelihood.factor_given(op, W, factor)  # the mode's factor, shared with its adjoint
        # GPML eqs. 3.32 and 3.44: log q(y|X) = log p(y|f^) - 1/2 a^T f^ - 1/2 log|B|, where a = K^-1 f^ =
        # grad log p(y|f^) at the mode (eq. 3.17); a sparse prior's log-determinant is ldB2 (module docstring).
        log_marginal = jnp.sum(log_lik) - 0.5 * jnp.vdot(grad, f) - factor.power_log_det(op)
        return gaussian_posterior(
            op, factor, alpha=grad, mean=f, log_marginal=log_marginal,
            info=SolverInfo(num_steps=num_steps + start_steps, status=status, max_change=max_change),
            warm_start=lax.stop_gradient(a),
        )

    def warm_start_shape(self, op, likelihood, y, key=None):
        """a = K^-1 f, one per site label (``solve``'s warm start), in the prior's dtype: no trace of ``solve``."""
        return jax.ShapeDtypeStruct(jnp.shape(y), op.dtype)

    def _starts_in_float32(self, op, likelihood):
        if op.dtype != jnp.float64:
            return False
        if self.float32_start is None:  # on for a kernel's K from 512 cases, one latent function (class docstring)
            return MATRIX in op.capabilities and op.shape[0] >= _FLOAT32_START_MIN_CASES and likelihood.num_latent == 1
        return self.float32_start


_FLOAT32_START_MIN_CASES = 512


def _float32_start(method: Laplace, op, likelihood, y, a0):
    """A float64 starting point from Newton's method run in float32 from a0 (no derivative), and its steps.

    The float32 iterations stop at float32's tolerance (sqrt(eps) = 3.5e-4) or
    at the first step that needs halving or raises Psi by no more than its
    rounding level (``until_unresolved``), so that a stiff kernel, which
    float32 cannot resolve, costs a step or two.  The point is kept only if
    it has the higher Psi in float64.
    """
    single = lambda x: x.astype(jnp.float32) if eqx.is_inexact_array(x) else x  # noqa: E731
    op32, likelihood32, y32, a32 = jax.tree.map(single, lax.stop_gradient((op, likelihood, y, a0)))
    _, a32, steps, _, _ = _newton(op32, likelihood32, y32, a32, tol=None, max_steps=method.max_steps,
                                  max_halvings=method.max_halvings, until_unresolved=True)
    op, likelihood = lax.stop_gradient((op, likelihood))
    start = a32.astype(op.dtype)
    higher = _psi(op, likelihood, y, start)[0] > _psi(op, likelihood, y, a0)[0]  # False where either is NaN
    return jnp.where(higher, start, a0), steps


# A start for another method needs the mode only roughly: that method's own iterations converge from it.
_START_TOL = 1e-3
_START_MAX_STEPS = 50


def sites_at_mode(op, likelihood, y, max_halvings: int):
    """Laplace's approximation as Gaussian sites: tau~ = W(f^), nu~ = W f^ + grad log p(y|f^), at a mode found to
    ``tol`` = 1e-3, shaped as the latents ((n,), or (n, C) for the softmax); zeros where that point is not
    finite.  No derivative (a starting point).

    With these sites the prior times the sites is Laplace's q: precision K^-1 + W (GPML eq. 3.27), and mean
    (K^-1 + W)^-1 (W f^ + grad) = f^, because K^-1 f^ = grad log p(y|f^) at the mode (GPML eq. 3.17).  For the
    softmax, whose W has blocks coupling the classes, tau~ is the blocks' diagonal
    (``likelihood.curvature_diagonal``): q per class as Gaussian KL's classes are.  Newton's steps here cost one
    factorisation of B each, no quadrature: Gaussian KL starts from them (``kl.py``, ``kl_classes.py``).
    """
    op, likelihood, y = lax.stop_gradient((op, likelihood, y))
    f = _newton(op, likelihood, y, jnp.zeros(y.shape, op.dtype), tol=_START_TOL, max_steps=_START_MAX_STEPS,
                max_halvings=max_halvings)[0]
    tau = likelihood.curvature_diagonal(y, f)
    nu = tau * f + likelihood.derivatives(y, f)[1]
    usable = jnp.all(jnp.isfinite(tau)) & jnp.all(jnp.isfinite(nu))
    return jnp.where(usable, tau, 0.0), jnp.where(usable, nu, 0.0)


def _check_log_concave(likelihood):
    if not likelihood.log_concave:
        raise GPClassError(
            f"Laplace's method needs a log-concave likelihood (W >= 0 for the stable factorisation of "
            f"B = I + W^1/2 K W^1/2); {type(likelihood).__name__} is not. Use gpc.EP() instead."
        )


def _newton(op, likelihood, y, a0, **settings):
    """Newton's method on Psi from a0 (``_newton.Newton`` with ``settings``): (f^, a^, steps, status, change)."""
    return run(Newton(
        lambda a: _psi(op, likelihood, y, a),
        lambda a, f: _direction(op, likelihood, y, a, f),
        lambda f: _residual(op, likelihood, y, f),
        a0,
        **settings,
    ))


def _psi(op, likelihood, y, a):
    """Psi(a) = log p(y|K a) - 1/2 a^T K a  (GPML eq. 3.12 in the variable a = K^-1 f), and f = K a."""
    f = op.mv(a)
    return jnp.sum(likelihood.log_prob(y, f)) - 0.5 * jnp.vdot(a, f), f


def _direction(op, likelihood, y, a, f):
    """The Newton step in a (GPML Algorithm 3.1 lines 4-7) and the rounding level of Psi at a.

    Algorithm 3.1's new point (I + W K)^-1 (W f + grad log p(y|f)) is taken as the step
    da = (I + W K)^-1 (grad log p(y|f) - a) (f = K a): its right-hand side, the gradient
    of Psi in f, vanishes at the mode instead of cancelling against a.
    Psi = log p(y|K a) - 1/2 a^T K a is computed with an absolute rounding error
    of about eps (sum |log p| + sum (|grad| + |a|) |K| |a|); for stiff kernels
    (large K entries) this dwarfs eps |Psi| and decides which changes of Psi
    the step-length test can trust.
    """
    log_lik, grad, W = likelihood.derivatives(y, f)
    da = likelihood.newton_factor(op, W).solve_i_plus_wk(op, grad - a)
    scale = op.product_scale(a, f)
    noise = jnp.finfo(op.dtype).eps * (jnp.sum(likelihood.log_prob_scale(y, f, log_lik))
                                       + jnp.sum((jnp.abs(grad) + jnp.abs(a)) * scale))
    return da, noise


def _residual(op, likelihood, y, f):
    """The residual of the mode's equation f = K grad log p(y|f) (``_newton.mode_residual``)."""
    grad = likelihood.derivatives(y, f)[1]
    return mode_residual(f, op.mv(grad), op.abs_mv(jnp.abs(grad)))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _mode(method: Laplace, op, likelihood, y, a0):
    """The posterior mode f^(K, likelihood), differentiable by the implicit function theorem.

    Also returns the factorisation of B at f^ (no derivative): the adjoint solve and the log marginal
    likelihood share it.
    """
    f, a, steps, status, change = _newton(op, likelihood, y, a0, tol=method.tol, residual_tol=method.residual_tol,
                                          max_steps=method.max_steps, max_halvings=method.max_halvings)
    factor = likelihood.factor(op, likelihood.derivatives(y, f)[2])
    return f, steps, status, a, change, factor


def _mode_fwd(method, op, likelihood, y, a0):
    out = _mode(method, op, likelihood, y, a0)
    return out, (op, likelihood, y, out[0], out[5])


def _mode_bwd(method, residuals, cotangents):
    """Adjoint of f^ = K grad log p(y|f^) (Kuss & Rasmussen eqs. 46-47; GPML eq. 5.24).

    With R(f, theta) = f - K grad log p(y|f), dR/df = I + K W, so
    d f^ = (I + K W)^-1 d(K grad log p)|_f^ and the vector-Jacobian product is
    theta_bar = (d(K grad log p)/d theta)^T u  with  u = (I + W K)^-1 f_bar.
    """
    op, likelihood, y, f, factor = residuals
    u = factor.solve_i_plus_wk(op, cotangents[0])
    _, vjp = jax.vjp(lambda op, likelihood: op.mv(likelihood.derivatives(y, f)[1]), op, likelihood)
    op_bar, likelihood_bar = vjp(u)
    return op_bar, likelihood_bar, jnp.zeros_like(y), jnp.zeros_like(f)


_mode.defvjp(_mode_fwd, _mode_bwd)
