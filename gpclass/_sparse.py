"""Inducing-point covariance approximations: FITC, VFE and power EP behind one operator.

With m inducing inputs Z, K_uu + jitter = L_uu L_uu^T and Phi = K_nu L_uu^-T
(n x m, one row per case), the Nystroem approximation of K is Q = Phi Phi^T.
The sparse prior of GPML's ``apxSparse`` (Bui, Yan & Turner 2017, the
power-EP family) is

    K~ = Q + s diag(g),   g = diag(K) - diag(Q) >= 0,

with s = 1 for FITC (Snelson & Ghahramani 2006) and s = 0 for VFE (Titsias
2009).  Every operation an inference method needs costs O(n m^2) time and
O(n m) memory through the Woodbury identity for a diagonal W >= 0:

    (K~ + W^-1)^-1 = D - D Phi (I + Phi^T D Phi)^-1 Phi^T D,   D = diag(d),  d = W / (1 + s g W).

Rows are cases: the per-case sums (diag Q, diag Sigma) run along the contiguous
axis, which XLA's CPU backend reduces 40 times faster than across rows
(measured at n = 10^5, m = 100), and every O(n m^2) product is a matrix product
(BLAS-3): the triangular factors are applied through their m x m inverses.
Products with a vector are written x @ Phi, never Phi.T @ x: the same numbers, but
XLA's CPU backend takes 10 times longer over the transposed operand.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from . import _dense as dense
from ._compile import jit
from ._exceptions import GPClassError
from ._types import Array, Float
from ._validation import Checks, as_float, require_setting
from .kernels import AbstractKernel, PerClass

_APPROXIMATIONS = {"fitc": 1.0, "vfe": 0.0}


class Sparse(eqx.Module):
    """A sparse (inducing-point) prior, passed to ``gpc.infer`` and ``gpc.fit`` in place of a kernel.

    Attributes:
        kernel: the covariance function k being approximated.
        inducing: the inducing inputs Z, shape (m, d); fitted by ``gpc.fit``
            (unconstrained, not on the log scale).
        approximation: ``"fitc"`` (the default: K~ = Q + diag(K - Q)),
            ``"vfe"`` (K~ = Q, the collapsed variational bound's trace term
            in log q) or a power s in [0, 1] between them (power EP; Laplace only).
        jitter: ``jitter * mean(diag K_uu)`` is added to K_uu before it is
            factorised (GPML's ``apxSparse`` uses 1e-6 as well).
        fit_inducing: ``False`` holds Z fixed: nothing is differentiated
            with respect to it (``gpc.fit`` then fits the kernel only).

    ``gpc.infer(gpc.Laplace(), gpc.Sparse(kernel, Z), likelihood, X, y)``:
    Laplace (any approximation), EP (FITC), KL (FITC or VFE), binary
    likelihoods; each costs O(n m^2) per Newton step or sweep.  Laplace
    also takes ``gpc.likelihoods.Softmax(C)``, the classes sharing the
    kernel: O(n C^2 m^2 + C^3 m^3) per Newton step.
    """

    kernel: AbstractKernel
    inducing: Float[Array, "m d"] = eqx.field(converter=as_float)
    approximation: str | float = eqx.field(static=True, default="fitc")
    jitter: float = eqx.field(static=True, default=1e-6)
    fit_inducing: bool = eqx.field(static=True, default=True)

    unconstrained = ("inducing",)  # gpc.fit leaves these on their own scale

    def __check_init__(self):
        if isinstance(self.kernel, PerClass):
            raise GPClassError("Sparse: the classes share one kernel under a sparse prior; a PerClass kernel is not "
                               "supported (pass the kernel itself).")
        if self.inducing.ndim != 2:
            raise GPClassError(f"Sparse: the inducing inputs must have shape (m, d); got {self.inducing.shape}.")
        if isinstance(self.approximation, str):
            if self.approximation not in _APPROXIMATIONS:
                raise GPClassError(f"Sparse: approximation must be 'fitc', 'vfe' or a power in [0, 1]; "
                                   f"got {self.approximation!r}.")
        else:
            require_setting("Sparse", "the power s (approximation)", self.approximation, low_open=False, high=1.0,
                            high_open=False)
        require_setting("Sparse", "jitter", self.jitter, low_open=False)

    @property
    def power(self) -> float:
        """s: 1 for FITC, 0 for VFE."""
        return _APPROXIMATIONS.get(self.approximation, self.approximation)

    @classmethod
    def from_data(cls, kernel, X, num_inducing: int, *, key, **kwargs) -> "Sparse":
        """Z chosen among the rows of X by k-means++ seeding (Arthur & Vassilvitskii 2007), drawn from ``key``."""
        return cls(kernel, kmeans_plus_plus(jnp.asarray(X), num_inducing, key), **kwargs)

    def parameter_checks(self, checks: Checks) -> None:
        self.kernel.parameter_checks(checks)
        checks.fail_if(~jnp.isfinite(self.inducing), "Sparse: the inducing inputs contain NaN or infinite values.")

    def check_inputs(self, X) -> None:
        """Static checks: Z's width is X's, and there are no more inducing inputs than cases."""
        m, d = self.inducing.shape
        if d != X.shape[1]:
            raise GPClassError(f"Sparse: the inducing inputs have {d} dimensions but X has {X.shape[1]}.")
        if m > X.shape[0]:
            raise GPClassError(f"Sparse: {m} inducing inputs for {X.shape[0]} cases; use at most as many as cases "
                               "(or the dense kernel).")

    def covariance(self, X: Float[Array, "n d"]) -> "LowRankCovariance":
        """The operator K~ on the training inputs X (O(n m^2))."""
        Z = self.inducing if self.fit_inducing else jax.lax.stop_gradient(self.inducing)
        K_uu = self.kernel.gram(Z)
        m = K_uu.shape[0]
        K_uu = K_uu + self.jitter * jnp.mean(jnp.diagonal(K_uu)) * jnp.eye(m, dtype=K_uu.dtype)
        chol_uu = dense.cholesky(K_uu)
        Phi = times_inverse_transpose(self.kernel.gram(X, Z), chol_uu)
        g = jnp.maximum(self.kernel.diag(X) - jnp.sum(Phi**2, axis=1), 0.0)
        return LowRankCovariance(Phi=Phi, g=g, chol_uu=chol_uu, power=self.power)


def times_inverse_transpose(A: Float[Array, "n m"], L: Float[Array, "m m"]) -> Float[Array, "n m"]:
    """A L^-T for a lower-triangular m x m L, as one matrix product with L^-1 (formed by an m x m triangular
    solve).  A triangular solve with n right-hand sides took about twice as long on the CPU (n = 10^5,
    m = 100).  The tests compare every result built on it with dense n x n factorisations to 1e-10,
    stiff priors (largest eigenvalue of W^1/2 K~ W^1/2 about 2e6) included."""
    eye = jnp.eye(L.shape[0], dtype=L.dtype)
    return A @ dense.solve_triangular(L, eye, lower=True).T


class LowRankCovariance(eqx.Module):
    """K~ = Phi Phi^T + s diag(g) as an operator (module docstring); ``chol_uu`` is L_uu, kept for predictions."""

    Phi: Float[Array, "n m"]
    g: Float[Array, " n"]
    chol_uu: Float[Array, "m m"]
    power: float = eqx.field(static=True)

    @property
    def shape(self):
        n = self.g.shape[0]
        return (n, n)

    @property
    def dtype(self):
        return self.g.dtype

    def mv(self, x: Float[Array, " n"]) -> Float[Array, " n"]:
        """K~ x."""
        return self.Phi @ (x @ self.Phi) + self.power * self.g * x

    def abs_mv(self, x: Float[Array, "n ..."], abs_phi: Float[Array, "n m"] | None = None) -> Float[Array, "n ..."]:
        """|Phi| (|Phi|^T x) + s g x for x >= 0: a bound on |K~| x, the rounding scale of K~ x (columns of x
        separately).  ``abs_phi``: |Phi| if the caller holds it (a loop forms it once: n m entries)."""
        A = jnp.abs(self.Phi) if abs_phi is None else abs_phi
        g = self.power * self.g
        return A @ (A.T @ x) + (g if x.ndim == 1 else g[:, None]) * x

    def diagonal(self) -> Float[Array, " n"]:
        return jnp.sum(self.Phi**2, axis=1) + self.power * self.g

    def dense(self) -> Float[Array, "n n"]:
        """K~ as a dense matrix (tests: the brute-force oracle)."""
        return self.Phi @ self.Phi.T + jnp.diag(self.power * self.g)

    def inducing_weights(self, a: Float[Array, " n"]) -> Float[Array, " m"]:
        """K_uu^-1 K_un a = L_uu^-T Phi^T a: with k(x*, Z) it gives the predictive mean k(x*, Z) K_uu^-1 K_un a."""
        return dense.solve_triangular(self.chol_uu, a @ self.Phi, lower=True, trans=1)

    def factor(self, w: Float[Array, " n"]) -> "SparseFactor":
        """The O(n m^2) factorisation for a diagonal W = diag(w) >= 0 (GPML ``apx.m``, ``ldB2_sparse``)."""
        d = w / (1.0 + self.power * self.g * w)
        m = self.Phi.shape[1]
        chol = dense.cholesky(jnp.eye(m, dtype=self.dtype) + self.Phi.T @ (d[:, None] * self.Phi))
        return SparseFactor(w=w, d=d, chol=chol, PhiL=times_inverse_transpose(self.Phi, chol))


class SparseFactor(eqx.Module):
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

    def posterior_times(self, op: LowRankCovariance, v: Float[Array, " n"]) -> Float[Array, " n"]:
        """Sigma v = delta v + R (R^T v) (:meth:`posterior_covariance`), with no cancellation; R is not formed."""
        delta, shrink = self._diagonals(op)
        return delta * v + shrink * (self.PhiL @ ((shrink * v) @ self.PhiL))

    def posterior_quadratic(self, op: LowRankCovariance, v: Float[Array, " n"]) -> Float[Array, ""]:
        """v^T Sigma v = sum delta v^2 + |R^T v|^2: a sum of squares, where v^T K~ v - r^T (K~ + W^-1)^-1 r cancels."""
        delta, shrink = self._diagonals(op)
        return jnp.dot(delta * v, v) + jnp.sum(((shrink * v) @ self.PhiL) ** 2)

    def half_log_det_b(self, op: LowRankCovariance) -> Float[Array, ""]:
        """1/2 log|I + W^1/2 K~ W^1/2| = sum log L_ii + 1/2 sum log(1 + s g W)."""
        return jnp.sum(jnp.log(jnp.diagonal(self.chol))) + 0.5 * jnp.sum(jnp.log1p(op.power * op.g * self.w))

    def power_log_det(self, op: LowRankCovariance) -> Float[Array, ""]:
        """GPML's ldB2 of ``apxSparse``: sum log L_ii + 1/2 sum_i t_i, t_i = log(1 + s g_i W_i) / s (-> g_i W_i as s -> 0).

        For FITC (s = 1) it is :meth:`half_log_det_b`; for VFE (s = 0) it adds
        the trace term 1/2 tr(W (K - Q)) to 1/2 log|I + W^1/2 Q W^1/2|.
        """
        s = op.power
        z = op.g * self.w
        t = z if s == 0.0 else jnp.log1p(s * z) / s
        return jnp.sum(jnp.log(jnp.diagonal(self.chol))) + 0.5 * jnp.sum(t)

    def posterior_covariance(self, op: LowRankCovariance) -> tuple[Float[Array, " n"], Float[Array, "n m"]]:
        """Sigma = (K~^-1 + W)^-1 = diag(delta) + R R^T in O(n m^2): returns (delta, R).

        With G = s diag(g): Sigma = K~ - K~ P K~, P = (K~ + W^-1)^-1 = D - D Phi C^-1 Phi^T D,
        C = I + Phi^T D Phi; expanding and using C - Phi^T D Phi = I collapses it to
        delta = s g / (1 + s g W) and R = diag(1 / (1 + s g W)) Phi L^-T, L L^T = C.
        """
        delta, shrink = self._diagonals(op)
        return delta, self.PhiL * shrink[:, None]

    def posterior_products(self, op: LowRankCovariance):
        """x -> Sigma x and x -> (Sigma o Sigma) x (elementwise square) with Sigma = diag(delta) + R R^T
        (:meth:`posterior_covariance`), plain array operations in O(n m) and O(n m^2):
        (Sigma o Sigma) x = delta^2 x + 2 delta r x + rowsum(R o (R R^T diag(x) R)), r = rowsum(R^2)."""
        delta, R = self.posterior_covariance(op)
        r = jnp.sum(R**2, axis=1)

        def sigma(x):
            return delta * x + R @ (x @ R)

        def sigma_squared(x):
            return delta**2 * x + 2.0 * delta * r * x + jnp.sum(R * (R @ (R.T @ (x[:, None] * R))), axis=1)

        return sigma, sigma_squared

    def posterior_variance(self, op: LowRankCovariance) -> Float[Array, " n"]:
        """diag Sigma = delta + rowsum(R^2) (:meth:`posterior_covariance`); R is not formed."""
        delta, shrink = self._diagonals(op)
        return delta + shrink**2 * jnp.sum(self.PhiL**2, axis=1)

    def _diagonals(self, op: LowRankCovariance) -> tuple[Float[Array, " n"], Float[Array, " n"]]:
        """delta = s g / (1 + s g W) and shrink = 1 / (1 + s g W), R = diag(shrink) Phi L^-T."""
        G = op.power * op.g
        shrink = 1.0 / (1.0 + G * self.w)
        return G * shrink, shrink


@jit(static_argnums=1)  # one program: run op by op, its ~60 operations compiled one by one (1-2 s)
def kmeans_plus_plus(X: Float[Array, "n d"], num: int, key: Array) -> Float[Array, "num d"]:
    """``num`` distinct rows of X by k-means++ seeding: each next row drawn with probability ~ squared distance."""
    n = X.shape[0]
    if not 0 < num <= n:
        raise GPClassError(f"k-means++: need 0 < num_inducing <= n = {n}; got {num}.")
    keys = jax.random.split(key, num)
    first = jax.random.randint(keys[0], (), 0, n)
    chosen = jnp.zeros(num, dtype=first.dtype).at[0].set(first)
    dist = jnp.sum((X - X[first]) ** 2, axis=1)

    def body(i, carry):
        chosen, dist = carry
        # Rows already chosen have distance 0; if every distance is 0 (repeated rows), draw uniformly.
        p = jnp.where(jnp.sum(dist) > 0, dist, jnp.ones_like(dist))
        nxt = jax.random.choice(keys[i], n, p=p / jnp.sum(p))
        return chosen.at[i].set(nxt.astype(chosen.dtype)), jnp.minimum(dist, jnp.sum((X - X[nxt]) ** 2, axis=1))

    chosen, _ = jax.lax.fori_loop(1, num, body, (chosen, dist))
    return X[chosen]
