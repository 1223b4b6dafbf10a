"""``gpc.Sparse``: an inducing-point prior (FITC, VFE, power EP), passed in place of a kernel.

Its :meth:`Sparse.covariance` builds the operator K~ = Phi Phi^T + s diag(g)
(``_covariance.low_rank``), on which every method's solve costs O(n m^2).
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from ._compile import jit
from ._covariance import LowRankCovariance
from ._errors import AT
from ._exceptions import GPClassError
from ._inverse_factor import cholesky_and_inverse
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

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> prior = gpc.Sparse(kernel, X[:10])  # FITC with 10 inducing inputs; approximation="vfe" for VFE
        >>> post = gpc.infer(gpc.Laplace(), prior, gpc.likelihoods.Logistic(), X, y)
        >>> bool(post.info.converged), round(float(post.log_marginal), 1)
        (True, -24.5)
        >>> prior = gpc.Sparse.from_data(kernel, X, 10, key=jax.random.key(0))  # Z: 10 rows of X by k-means++
        >>> prior.inducing.shape
        (10, 4)
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
        if self.inducing.shape[0] == 0:
            raise GPClassError("Sparse: no inducing inputs (shape (0, d)): the prior would be zero, every prediction "
                               "1/2. Pass at least one row, e.g. a subset of the training inputs.")
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
        checks.fail_if(~jnp.isfinite(self.inducing), f"Sparse: the inducing inputs Z contain NaN or infinite "
                       f"values{AT}; check Z (e.g. choose it among the rows of X: gpc.Sparse.from_data(kernel, X, m, "
                       "key=...)).", at=("the first: Z[{index}] = {value}", self.inducing))

    def check_inputs(self, X) -> None:
        """Static checks: Z's width is X's, there are no more inducing inputs than cases, and the kernel's own."""
        m, d = self.inducing.shape
        if d != X.shape[1]:
            raise GPClassError(f"Sparse: the inducing inputs Z have {d} dimensions but X has {X.shape[1]}: give Z the "
                               "columns (and preprocessing) of X.")
        if m > X.shape[0]:
            raise GPClassError(f"Sparse: {m} inducing inputs for {X.shape[0]} cases; use at most as many as cases "
                               "(or the dense kernel).")
        self.kernel.check_inputs(X)

    def covariance(self, X: Float[Array, "n d"]) -> "LowRankCovariance":
        """The operator K~ on the training inputs X (O(n m^2))."""
        Z = self.inducing if self.fit_inducing else jax.lax.stop_gradient(self.inducing)
        K_uu = self.kernel.gram(Z)
        m = K_uu.shape[0]
        K_uu = K_uu + self.jitter * jnp.mean(jnp.diagonal(K_uu)) * jnp.eye(m, dtype=K_uu.dtype)
        chol_uu, inverse_uu = cholesky_and_inverse(K_uu)
        Phi = self.kernel.gram(X, Z) @ inverse_uu.T
        g = jnp.maximum(self.kernel.diag(X) - jnp.sum(Phi**2, axis=1), 0.0)
        return LowRankCovariance(Phi=Phi, g=g, chol_uu=chol_uu, power=self.power)


@jit(static_argnums=1)  # one program: run op by op, its ~60 operations would each be compiled on their own
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
