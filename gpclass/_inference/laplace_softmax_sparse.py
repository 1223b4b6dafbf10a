"""Multi-class (softmax) Laplace under a sparse prior K~ = Q + s diag(g) shared by the C classes.

The C latent functions have independent priors with the one sparse covariance
K~ = Phi Phi^T + s G (``gpclass._sparse``); latents are (n, C) arrays, a = K~^-1 F.
Newton's method is GPML Algorithm 3.3's (eq. 3.39) with
W = blockdiag_i(diag(pi_i) - pi_i pi_i^T) (eq. 3.38), and every solve is exact,
by Woodbury's identity on

    I + W K~ = A + W U^T U,   A = I + s G W (per case I + t_i W_i, t_i = s g_i),  U = I_C (x) Phi^T,

    (I + W K~)^-1 v = x - D U^T H^-1 U x,   x = A^-1 v,   D = A^-1 W,   H = I + U D U^T   (Cm x Cm).

Per case, with rho = pi / (1 + t pi) (elementwise), both A^-1 and D are a
diagonal plus a rank-one matrix (Sherman-Morrison, using sum_c pi_c = 1):

    A^-1 = diag(1 / (1 + t pi)) + t rho rho^T / sum(rho),    D = diag(rho) - rho rho^T / sum(rho),
    |A| = prod_c (1 + t pi_c) sum(rho),

so H = I + blockdiag_c(Phi^T diag(rho^c) Phi) - P^T P with P = [rho~^c * Phi]_c (n x Cm), rho~ = rho / sqrt(sum rho):
O(n C^2 m^2) time (one matrix product) and one Cm x Cm Cholesky factorisation per Newton step.
log|I + W K~| = log|A| + log|H|, and log q is GPML's power-EP form, as for the binary case:

    log q = sum_i log p(y_i|f^_i) - 1/2 a^T f^ - 1/2 log|H| - 1/(2 s) sum_i log|A_i|   (a = y - pi at the mode),

the last term tending to 1/2 sum_i g_i tr(W_i) for VFE (s = 0).  For FITC
(s = 1) this is eq. 3.44 on K~.  Predictions (``_predict._sparse_softmax_latent``):
with w* = L_uu^-1 k(Z, x*), E[f*^c] = k(x*, Z) K_uu^-1 K_un a^c and
Cov[f*] = (k** - |w*|^2) I + W*^T H^-1 W*, W* = I_C (x) w*  (from k** - Q_*n (K~ + W^-1)^-1 Q_n*,
since U D U^T = H - I).  The mode is differentiated by the implicit function theorem.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .. import _dense as dense
from .._covariance import LowRankCovariance
from .._types import Array, Float
from ._newton import better_start, mode_residual, newton
from ._posterior import SolverInfo, SparseSoftmaxPosterior


class SoftmaxFactor(eqx.Module):
    """What pi brings under K~: rho = pi / (1 + t pi), t = s g, and the Cholesky factor of H (module docstring)."""

    g: Float[Array, " n"]
    pi: Float[Array, "n C"]
    rho: Float[Array, "n C"]
    chol_h: Float[Array, "Cm Cm"]
    power: float = eqx.field(static=True)

    @property
    def t(self) -> Float[Array, "n 1"]:
        return (self.power * self.g)[:, None]

    def _rank_one(self, v):
        return self.rho * (jnp.sum(self.rho * v, axis=1, keepdims=True) / jnp.sum(self.rho, axis=1, keepdims=True))

    def times_a_inverse(self, v: Float[Array, "n C"]) -> Float[Array, "n C"]:
        """A^-1 v, case by case: v / (1 + t pi) + t rho (rho^T v) / sum(rho)."""
        return v / (1.0 + self.t * self.pi) + self.t * self._rank_one(v)

    def times_d(self, v: Float[Array, "n C"]) -> Float[Array, "n C"]:
        """D v = rho * v - rho (rho^T v) / sum(rho), case by case."""
        return self.rho * v - self._rank_one(v)

    def solve_i_plus_wk(self, op: LowRankCovariance, v: Float[Array, "n C"]) -> Float[Array, "n C"]:
        """(I + W K~)^-1 v = x - D U^T H^-1 U x, x = A^-1 v (no product with K~: nothing cancels)."""
        x = self.times_a_inverse(v)
        ux = (x.T @ op.Phi).reshape(-1)  # U x, class-major (c, j)
        h_inv_ux = dense.cho_solve(self.chol_h, ux).reshape(x.shape[1], -1)
        return x - self.times_d(op.Phi @ h_inv_ux.T)

    def half_log_det(self) -> Float[Array, ""]:
        """GPML's ldB2 generalised to C classes: 1/2 log|H| + 1/(2 s) sum_i log|A_i| (VFE: 1/2 sum_i g_i tr W_i)."""
        if self.power == 0.0:
            log_det_a = jnp.sum(self.g[:, None] * self.pi * (1.0 - self.pi))
        else:
            log_det_a = jnp.sum(jnp.log1p(self.t * self.pi)) + jnp.sum(jnp.log(jnp.sum(self.rho, axis=1)))
            log_det_a = log_det_a / self.power
        return jnp.sum(jnp.log(jnp.diagonal(self.chol_h))) + 0.5 * log_det_a


def softmax_factor(op: LowRankCovariance, pi: Float[Array, "n C"]) -> SoftmaxFactor:
    """H = I + blockdiag_c(Phi^T diag(rho^c) Phi) - P^T P and its Cholesky factor (module docstring)."""
    rho = pi / (1.0 + (op.power * op.g)[:, None] * pi)
    n, num_classes = pi.shape
    blocks = jnp.einsum("ncj,nk->cjk", rho[:, :, None] * op.Phi[:, None, :], op.Phi)  # Phi^T diag(rho^c) Phi
    P = ((rho / jnp.sqrt(jnp.sum(rho, axis=1, keepdims=True)))[:, :, None] * op.Phi[:, None, :]).reshape(n, -1)
    H = _block_diagonal(blocks) - P.T @ P + jnp.eye(P.shape[1], dtype=P.dtype)
    return SoftmaxFactor(g=op.g, pi=pi, rho=rho, chol_h=dense.cholesky(H), power=op.power)


def _block_diagonal(blocks: Float[Array, "C m m"]) -> Float[Array, "Cm Cm"]:
    num_classes, m, _ = blocks.shape
    eye = jnp.eye(num_classes, dtype=blocks.dtype)
    return (eye[:, None, :, None] * blocks[:, :, None, :]).reshape(num_classes * m, num_classes * m)


def class_mv(op: LowRankCovariance, a: Float[Array, "n C"]) -> Float[Array, "n C"]:
    """K~ a for every class: Phi (Phi^T a) + s g a."""
    return op.Phi @ (a.T @ op.Phi).T + (op.power * op.g)[:, None] * a


def _log_lik(Y, F):
    return jnp.sum(Y * F) - jnp.sum(jax.nn.logsumexp(F, axis=1))


def _psi(op, Y, a):
    F = class_mv(op, a)
    return _log_lik(Y, F) - 0.5 * jnp.sum(a * F), F


def _direction(op, Y, a, F):
    """The Newton step da = (I + W K~)^-1 (y - pi - a) (the gradient of Psi in f; see ``laplace_softmax``) and the
    rounding level of Psi."""
    pi = jax.nn.softmax(F, axis=1)
    da = softmax_factor(op, pi).solve_i_plus_wk(op, Y - pi - a)
    eps = jnp.finfo(F.dtype).eps
    log_lik_scale = jnp.sum(jnp.abs(Y * F)) + jnp.sum(jnp.abs(jax.nn.logsumexp(F, axis=1)))
    noise = eps * (log_lik_scale + jnp.sum((jnp.abs(Y - pi) + jnp.abs(a)) * jnp.abs(F))
                   + jnp.sum(a * a * op.diagonal()[:, None]))
    return da, noise


def _residual(op, abs_phi, Y, F):
    """The residual of F = K~ (Y - pi(F)) (``_newton.mode_residual``); ``abs_phi`` is |Phi|."""
    g = Y - jax.nn.softmax(F, axis=1)
    return mode_residual(F, class_mv(op, g), op.abs_mv(jnp.abs(g), abs_phi))


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _mode(method, op, Y, a0):
    """F^(K~), differentiable by the implicit function theorem (no Newton step is stored)."""
    abs_phi = jnp.abs(op.Phi)  # formed once, not in every step
    F, a, steps, status, change = newton(
        lambda a: _psi(op, Y, a),
        lambda a, F: _direction(op, Y, a, F),
        lambda F: _residual(op, abs_phi, Y, F),
        a0,
        tol=method.tol,
        residual_tol=method.residual_tol,
        max_steps=method.max_steps,
        max_halvings=method.max_halvings,
    )
    return F, steps, status, a, change


def _mode_fwd(method, op, Y, a0):
    out = _mode(method, op, Y, a0)
    return out, (op, Y, out[0])


def _mode_bwd(method, residuals, cotangents):
    """F^ = K~ (Y - pi(F^)): u = (I + W K~)^-1 F_bar, op_bar = (d(K~ (Y - pi))/d op)^T u."""
    op, Y, F = residuals
    pi = jax.nn.softmax(F, axis=1)
    u = softmax_factor(op, pi).solve_i_plus_wk(op, cotangents[0])
    _, vjp = jax.vjp(lambda op: class_mv(op, Y - pi), op)
    (op_bar,) = vjp(u)
    return op_bar, jnp.zeros_like(Y), jnp.zeros_like(F)


_mode.defvjp(_mode_fwd, _mode_bwd)


def solve_sparse_softmax_laplace(method, op: LowRankCovariance, Y: Float[Array, "n C"], init=None):
    """The mode, log q (module docstring) and the predictive form for a softmax likelihood under K~."""
    psi = lambda a: _psi(op, Y, a)
    a0 = jnp.zeros(Y.shape, op.dtype) if init is None else better_start(psi, init, op.dtype)
    F, num_steps, status, a, max_change = _mode(method, op, Y, a0)
    pi = jax.nn.softmax(F, axis=1)
    factor = softmax_factor(op, pi)
    log_marginal = _log_lik(Y, F) - 0.5 * jnp.sum((Y - pi) * F) - factor.half_log_det()
    weights = dense.solve_triangular(op.chol_uu, ((Y - pi).T @ op.Phi).T, lower=True, trans=1)  # K_uu^-1 K_un a, (m, C)
    return SparseSoftmaxPosterior(
        alpha=weights,
        chol_uu=op.chol_uu,
        chol_h=factor.chol_h,
        mean=F,
        log_marginal=log_marginal,
        info=SolverInfo(num_steps=num_steps, status=status, max_change=max_change),
        warm_start=lax.stop_gradient(a),
    )

