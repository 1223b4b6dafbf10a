"""The inducing-point prior K~ = Phi Phi^T + s diag(g): FITC, VFE and power EP behind one operator.

With m inducing inputs Z, K_uu + jitter = L_uu L_uu^T and Phi = K_nu L_uu^-T
(n x m, one row per case), the Nystroem approximation of K is Q = Phi Phi^T.
The sparse prior of GPML's ``apxSparse`` (Bui, Yan & Turner 2017, the
power-EP family) is

    K~ = Q + s diag(g),   g = diag(K) - diag(Q) >= 0,

with s = 1 for FITC (Snelson & Ghahramani 2006) and s = 0 for VFE (Titsias
2009); ``gpc.Sparse`` builds it.  Every operation an inference method needs
costs O(n m^2) time and O(n m) memory through the Woodbury identity for a
diagonal W >= 0:

    (K~ + W^-1)^-1 = D - D Phi (I + Phi^T D Phi)^-1 Phi^T D,   D = diag(d),  d = W / (1 + s g W).

Rows are cases: the per-case sums (diag Q, diag Sigma) run along the contiguous
axis, which XLA's CPU backend reduces much faster than across rows (measured
at large n), and every O(n m^2) product is a matrix product (BLAS-3): the
triangular factors are applied through their m x m inverses (a triangular solve
with n right-hand sides was slower on the CPU, measured at large n), both from
``_inverse_factor.cholesky_and_inverse``: XLA's products, with LAPACK only on
blocks of at most 24 rows, so no multi-threaded OpenBLAS call competes with XLA
for the cores (FITC-EP and VFE-KL at n = 20,000, m = 100 ran about 1.5-2x
faster than with LAPACK's factorisation and solve of the m x m matrices).  The
tests compare every result built on them with dense n x n factorisations to
1e-10, stiff priors (largest eigenvalue of W^1/2 K~ W^1/2 about 2e6) included.
Products with a
vector are written x @ Phi, never Phi.T @ x: the same numbers, but XLA's CPU
backend takes much longer over the transposed operand.
"""

import equinox as eqx
import jax.numpy as jnp

from .. import _dense as dense
from .._inverse_factor import cholesky_and_inverse
from .._types import Array, Float
from .._validation import check_covariance_operator
from . import low_rank_classes
from ._base import BOUND, PRIOR, AbstractCovariance, AbstractSitesCovariance, AbstractSitesFactor


class LowRankCovariance(AbstractCovariance):
    """K~ = Phi Phi^T + s diag(g) as an operator (module docstring); ``chol_uu`` is L_uu, kept for predictions."""

    Phi: Float[Array, "n m"]
    g: Float[Array, " n"]
    chol_uu: Float[Array, "m m"]
    power: float = eqx.field(static=True)

    @property
    def capabilities(self):
        return frozenset({PRIOR, BOUND} if self.power == 1.0 else {BOUND} if self.power == 0.0 else ())

    def describe(self):
        kind = {1.0: "FITC", 0.0: "VFE"}.get(self.power, f"power {self.power}")
        return f"a sparse prior, gpc.Sparse, {kind}"

    def trace_variance(self):
        """(1 - s) g: VFE's g, 0 for FITC (module docstring)."""
        return (1.0 - self.power) * self.g

    def value_checks(self, checks):
        check_covariance_operator(self, checks)
        return self

    def factor_given(self, w: Float[Array, " n"], factor: "LowRankFactor") -> "LowRankFactor":
        """``self.factor(w)`` computed again, differentiably: XLA merges it with the loop's identical
        computation (measured: a factor held from the loop, with its derivative recomputed in reverse mode,
        made FITC Laplace's value and gradient slower)."""
        return self.factor(w)

    @property
    def shape(self):
        n = self.g.shape[0]
        return (n, n)

    @property
    def dtype(self):
        return self.g.dtype

    def mv(self, x: Float[Array, "n ..."]) -> Float[Array, "n ..."]:
        """K~ x (every column of an (n, C) x: K~ for each class)."""
        if x.ndim == 2:
            return self.Phi @ (x.T @ self.Phi).T + (self.power * self.g)[:, None] * x
        return self.Phi @ (x @ self.Phi) + self.power * self.g * x

    def abs_mv(self, x: Float[Array, "n ..."]) -> Float[Array, "n ..."]:
        """|Phi| (|Phi|^T x) + s g x for x >= 0: a bound on |K~| x, the rounding scale of K~ x (columns of x
        separately)."""
        A = jnp.abs(self.Phi)
        g = self.power * self.g
        return A @ (A.T @ x) + (g if x.ndim == 1 else g[:, None]) * x

    def product_scale(self, v, product):
        """|K~ v| + diag(K~) |v|: an estimate of |K~| |v| in O(n), where the products with |Phi| would cost a
        tenth of a Newton step (memory-bound n x m reads); the cancellation it does not see is that between
        inducing directions, which the diagonal term bounds for the part each case carries itself."""
        diagonal = self.diagonal()
        return jnp.abs(product) + (diagonal if v.ndim == 1 else diagonal[:, None]) * jnp.abs(v)

    def diagonal(self) -> Float[Array, " n"]:
        return jnp.sum(self.Phi**2, axis=1) + self.power * self.g

    def dense(self) -> Float[Array, "n n"]:
        """K~ as a dense matrix (tests: the brute-force oracle)."""
        return self.Phi @ self.Phi.T + jnp.diag(self.power * self.g)

    def inducing_weights(self, a: Float[Array, "n ..."]) -> Float[Array, "m ..."]:
        """K_uu^-1 K_un a = L_uu^-T Phi^T a: with k(x*, Z) it gives the predictive mean k(x*, Z) K_uu^-1 K_un a
        (per class for an (n, C) a: (m, C))."""
        return dense.solve_triangular(self.chol_uu, (a.T @ self.Phi).T, lower=True, trans=1)

    def class_factor(self, pi):
        """The Woodbury form for the softmax's block W (``low_rank_classes``)."""
        return low_rank_classes.class_factor(self, pi)

    def factor(self, w: Float[Array, " n"]) -> "LowRankFactor":
        """The O(n m^2) factorisation for a diagonal W = diag(w) >= 0 (GPML ``apx.m``, ``ldB2_sparse``)."""
        d = w / (1.0 + self.power * self.g * w)
        m = self.Phi.shape[1]
        chol, inverse = cholesky_and_inverse(jnp.eye(m, dtype=self.dtype) + self.Phi.T @ (d[:, None] * self.Phi))
        return LowRankFactor(w=w, d=d, chol=chol, PhiL=self.Phi @ inverse.T)


class LowRankFactor(AbstractSitesFactor):
    """What W brings: d = W / (1 + s g W), L L^T = I + Phi^T D Phi and Phi L^-T (n x m)."""

    w: Float[Array, " n"]
    d: Float[Array, " n"]
    chol: Float[Array, "m m"]
    PhiL: Float[Array, "n m"]

    def solve_i_plus_wk(self, op: LowRankCovariance, v: Float[Array, " n"]) -> Float[Array, " n"]:
        """(I + W K~)^-1 v = x - D Phi (I + Phi^T D Phi)^-1 Phi^T x,  x = (I + s G W)^-1 v.

        Woodbury on I + W K~ = (I + s G W) + W Phi Phi^T.  It never forms K~ v:
        the equal v - (K~ + W^-1)^-1 K~ v cancels digits in proportion to the
        largest eigenvalue of W^1/2 K~ W^1/2 (1e8 for a stiff kernel at
        n = 10^5, where Newton's steps then went astray).
        """
        x = v / (1.0 + op.power * op.g * self.w)
        return x - self.d * (self.PhiL @ (x @ self.PhiL))

    def covariance(self, op: LowRankCovariance) -> "LowRankSitesCovariance":
        """Sigma = (K~^-1 + W)^-1 = diag(delta) + R R^T in O(n m^2), R = diag(shrink) Phi L^-T.

        With G = s diag(g): Sigma = K~ - K~ P K~, P = (K~ + W^-1)^-1 = D - D Phi C^-1 Phi^T D,
        C = I + Phi^T D Phi; expanding and using C - Phi^T D Phi = I collapses it to
        delta = s g / (1 + s g W) and shrink = 1 / (1 + s g W).
        """
        G = op.power * op.g
        shrink = 1.0 / (1.0 + G * self.w)
        return LowRankSitesCovariance(delta=G * shrink, shrink=shrink, PhiL=self.PhiL)

    def half_log_det_b(self, op: LowRankCovariance) -> Float[Array, ""]:
        """1/2 log|I + W^1/2 K~ W^1/2| = sum log L_ii + 1/2 sum log(1 + s g W)."""
        return jnp.sum(jnp.log(jnp.diagonal(self.chol))) + 0.5 * jnp.sum(jnp.log1p(op.power * op.g * self.w))

    def power_log_det(self, op: LowRankCovariance) -> Float[Array, ""]:
        """GPML's ldB2 of ``apxSparse``: sum log L_ii + 1/2 sum_i t_i, t_i = log(1 + s g_i W_i) / s
        (-> g_i W_i as s -> 0).

        For FITC (s = 1) it is :meth:`half_log_det_b`; for VFE (s = 0) it adds
        the trace term 1/2 tr(W (K - Q)) to 1/2 log|I + W^1/2 Q W^1/2|.
        """
        s = op.power
        z = op.g * self.w
        t = z if s == 0.0 else jnp.log1p(s * z) / s
        return jnp.sum(jnp.log(jnp.diagonal(self.chol))) + 0.5 * jnp.sum(t)



class LowRankSitesCovariance(AbstractSitesCovariance):
    """Sigma = diag(delta) + R R^T, R = diag(shrink) Phi L^-T (:meth:`LowRankFactor.covariance`): every product a
    sum of squares or a matrix product in O(n m) or O(n m^2), with no cancellation (R is formed only by
    :meth:`squared_times`)."""

    delta: Float[Array, " n"]
    shrink: Float[Array, " n"]
    PhiL: Float[Array, "n m"]

    def times(self, v):
        return self.delta * v + self.shrink * (self.PhiL @ ((self.shrink * v) @ self.PhiL))

    def squared_times(self, x):
        """(Sigma o Sigma) x = delta^2 x + 2 delta r x + rowsum(R o (R R^T diag(x) R)), r = rowsum(R^2)."""
        R = self.PhiL * self.shrink[:, None]
        r = jnp.sum(R**2, axis=1)
        return self.delta**2 * x + 2.0 * self.delta * r * x + jnp.sum(R * (R @ (R.T @ (x[:, None] * R))), axis=1)

    def variance(self):
        return self.delta + self.shrink**2 * jnp.sum(self.PhiL**2, axis=1)

    def quadratic(self, v):
        """sum delta v^2 + |R^T v|^2: a sum of squares, where v^T K~ v - r^T (K~ + W^-1)^-1 r cancels."""
        return jnp.dot(self.delta * v, v) + jnp.sum(((self.shrink * v) @ self.PhiL) ** 2)
