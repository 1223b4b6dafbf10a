"""A sparse prior's factorisation for the softmax's block-diagonal W: K~ = Q + s diag(g) shared by the C classes.

The C latent functions have independent priors with the one sparse covariance
K~ = Phi Phi^T + s G (``low_rank``); latents are (n, C) arrays, a = K~^-1 F.
Laplace's Newton steps (GPML Algorithm 3.3, eq. 3.39) solve with I + W K~ for
W = blockdiag_i(diag(pi_i) - pi_i pi_i^T) (eq. 3.38), exactly,
by Woodbury's identity on

    I + W K~ = A + W U^T U,   A = I + s G W (per case I + t_i W_i, t_i = s g_i),  U = I_C (x) Phi^T,

    (I + W K~)^-1 v = x - D U^T H^-1 U x,   x = A^-1 v,   D = A^-1 W,   H = I + U D U^T   (Cm x Cm).

Per case, with rho = pi / (1 + t pi) (elementwise), both A^-1 and D are a
diagonal plus a rank-one matrix (Sherman-Morrison, for W_i = diag(pi) - pi pi^T / s, s = sum_c pi_c, which
is 1 for the softmax and a case's weight w for w times it, ``dense_classes``):

    A^-1 = diag(1 / (1 + t pi)) + t rho rho^T / sum(rho),    D = diag(rho) - rho rho^T / sum(rho),
    |A| = prod_c (1 + t pi_c) sum(rho) / s,

(a case of weight 0 has rho = 0, D = 0 and |A| = 1: the divisions by sum(rho) and s are guarded there),

so H = I + blockdiag_c(Phi^T diag(rho^c) Phi) - P^T P with P = [rho~^c * Phi]_c (n x Cm), rho~ = rho / sqrt(sum rho):
O(n C^2 m^2) time (one matrix product) and one Cm x Cm Cholesky factorisation per Newton step.
log|I + W K~| = log|A| + log|H|, and log q is GPML's power-EP form, as for the binary case:

    log q = sum_i log p(y_i|f^_i) - 1/2 a^T f^ - 1/2 log|H| - 1/(2 s) sum_i log|A_i|   (a = y - pi at the mode),

the last term tending to 1/2 sum_i g_i tr(W_i) for VFE (power s = 0).  For FITC
(s = 1) this is eq. 3.44 on K~.  Predictions (``SparseSoftmaxPosterior``):
with w* = L_uu^-1 k(Z, x*), E[f*^c] = k(x*, Z) K_uu^-1 K_un a^c and
Cov[f*] = (k** - |w*|^2) I + W*^T H^-1 W*, W* = I_C (x) w*  (from k** - Q_*n (K~ + W^-1)^-1 Q_n*,
since U D U^T = H - I).
"""

import equinox as eqx
import jax.numpy as jnp

from .._inverse_factor import cholesky_and_inverse
from .._types import Array, Float
from ._base import AbstractFactor
from .dense_classes import case_totals


class LowRankClassFactor(AbstractFactor):
    """What pi brings under K~: rho = pi / (1 + t pi), t = s g, the Cholesky factor of H and its inverse (module
    docstring; both from ``_inverse_factor.cholesky_and_inverse``: no multi-threaded LAPACK call in the loops)."""

    g: Float[Array, " n"]
    pi: Float[Array, "n C"]
    rho: Float[Array, "n C"]
    chol_h: Float[Array, "Cm Cm"]
    inverse_h: Float[Array, "Cm Cm"]
    power: float = eqx.field(static=True)

    @property
    def t(self) -> Float[Array, "n 1"]:
        return (self.power * self.g)[:, None]

    def _rank_one(self, v):
        return self.rho * (jnp.sum(self.rho * v, axis=1, keepdims=True) / case_totals(self.rho)[:, None])

    def times_a_inverse(self, v: Float[Array, "n C"]) -> Float[Array, "n C"]:
        """A^-1 v, case by case: v / (1 + t pi) + t rho (rho^T v) / sum(rho)."""
        return v / (1.0 + self.t * self.pi) + self.t * self._rank_one(v)

    def times_d(self, v: Float[Array, "n C"]) -> Float[Array, "n C"]:
        """D v = rho * v - rho (rho^T v) / sum(rho), case by case."""
        return self.rho * v - self._rank_one(v)

    def solve_i_plus_wk(self, op, v: Float[Array, "n C"]) -> Float[Array, "n C"]:
        """(I + W K~)^-1 v = x - D U^T H^-1 U x, x = A^-1 v (no product with K~: nothing cancels)."""
        x = self.times_a_inverse(v)
        ux = (x.T @ op.Phi).reshape(-1)  # U x, class-major (c, j)
        h_inv_ux = (self.inverse_h.T @ (self.inverse_h @ ux)).reshape(x.shape[1], -1)  # H^-1 = L^-T L^-1
        return x - self.times_d(op.Phi @ h_inv_ux.T)

    def power_log_det(self, op) -> Float[Array, ""]:
        """GPML's ldB2 generalised to C classes: 1/2 log|H| + 1/(2 s) sum_i log|A_i| (VFE: 1/2 sum_i g_i tr W_i)."""
        totals = case_totals(self.pi)
        if self.power == 0.0:  # tr W_i = sum(pi) - |pi|^2 / s
            log_det_a = jnp.sum(self.g[:, None] * self.pi * (1.0 - self.pi / totals[:, None]))
        else:
            log_det_a = (jnp.sum(jnp.log1p(self.t * self.pi)) + jnp.sum(jnp.log(case_totals(self.rho)))
                         - jnp.sum(jnp.log(totals)))
            log_det_a = log_det_a / self.power
        return jnp.sum(jnp.log(jnp.diagonal(self.chol_h))) + 0.5 * log_det_a


def class_factor(op, pi: Float[Array, "n C"]) -> LowRankClassFactor:
    """H = I + blockdiag_c(Phi^T diag(rho^c) Phi) - P^T P and its Cholesky factor (module docstring)."""
    rho = pi / (1.0 + (op.power * op.g)[:, None] * pi)
    n, num_classes = pi.shape
    blocks = jnp.einsum("ncj,nk->cjk", rho[:, :, None] * op.Phi[:, None, :], op.Phi)  # Phi^T diag(rho^c) Phi
    P = ((rho / jnp.sqrt(case_totals(rho))[:, None])[:, :, None] * op.Phi[:, None, :]).reshape(n, -1)
    H = block_diagonal(blocks) - P.T @ P + jnp.eye(P.shape[1], dtype=P.dtype)
    chol_h, inverse_h = cholesky_and_inverse(H)
    return LowRankClassFactor(g=op.g, pi=pi, rho=rho, chol_h=chol_h, inverse_h=inverse_h, power=op.power)


def block_diagonal(blocks: Float[Array, "C m m"]) -> Float[Array, "Cm Cm"]:
    num_classes, m, _ = blocks.shape
    eye = jnp.eye(num_classes, dtype=blocks.dtype)
    return (eye[:, None, :, None] * blocks[:, :, None, :]).reshape(num_classes * m, num_classes * m)
