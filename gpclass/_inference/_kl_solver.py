"""The solver of Gaussian KL inference (``kl.py``, ``kl_classes.py``): Newton on the sites' fixed point,
safeguarded by natural-gradient steps, for one latent function or one q per class."""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp

from .._iterate import AbstractIterativeSolver, all_finite, relative_change, rounding_level, tolerance
from .._types import Array
from ._linear_solve import Krylov, solve
from ._search import first_acceptable


def starting_sites(tau0, nu0, laplace_sites):
    """The sites KL starts from: (tau0, nu0), unless both are all zero, which is no warm start (``gpc.fit``'s first
    evaluation passes zeros): then ``laplace_sites()``, Laplace's approximation as sites (``kl.py``)."""
    return jax.lax.cond(jnp.all(tau0 == 0.0) & jnp.all(nu0 == 0.0), laplace_sites, lambda: (tau0, nu0))


class KLState(eqx.Module):
    """The sites, their factorisation and Sigma, the ELBO; the natural-gradient step; how the last step ended.
    (Multi-class: the sites (C, n) and the classes' factorisations, ``kl_classes``.)"""

    tau: Array
    nu: Array
    factor: eqx.Module
    cov: eqx.Module
    value: Array
    beta: Array
    change: Array
    converged: Array
    stalled: Array


class AbstractKLSolver(AbstractIterativeSolver):
    """Newton steps on the fixed point, safeguarded by damped natural-gradient steps (:func:`run`).

    Each step tries the Newton candidate, then the natural-gradient step with
    beta, beta/2, ... until the ELBO does not decrease (:func:`first_acceptable`): the ELBO never decreases.
    A subclass gives the evaluation at the sites (:meth:`_evaluate`) and the fixed-point map
    (:meth:`_fixed_point`): one latent function (``KLSolver``) or one q per class (``kl_classes``).
    """

    method: eqx.AbstractVar[eqx.Module]
    op: eqx.AbstractVar[eqx.Module]
    tau0: eqx.AbstractVar[Array]
    nu0: eqx.AbstractVar[Array]

    @abc.abstractmethod
    def _evaluate(self, tau, nu):
        """(tau, nu, factor, cov, ELBO) at the sites."""

    @abc.abstractmethod
    def _fixed_point(self, tau, nu, cov):
        """(the target sites T(s), I - dT/ds, the marginal means) at the sites."""

    @property
    def max_steps(self):
        return self.method.max_steps

    def init(self) -> KLState:
        dtype, false = self.op.dtype, jnp.asarray(False)
        return KLState(*self._evaluate(self.tau0, self.nu0), jnp.ones((), dtype), jnp.asarray(jnp.inf, dtype),
                       false, false)

    def step(self, s: KLState) -> KLState:
        method, dtype = self.method, self.op.dtype
        tol = tolerance(method.tol, dtype, 1e-10, 1e-6)
        site_tol = tolerance(method.site_tol, dtype, 1e-8, 1e-4)
        target, i_minus_j, mu = self._fixed_point(s.tau, s.nu, s.cov)
        # Inexact Newton (Eisenstat & Walker 1996): GMRES only to a relative residual of a tenth of the last step's
        # site change (at most 1e-2, at least 1e-8), which keeps Newton's step count (measured on three VFE-KL
        # problems at n = 20,000) and spares the Krylov products that exact solves spend far from the fixed point.
        forcing = jnp.clip(0.1 * s.change, 1e-8, 1e-2)
        delta = solve(i_minus_j, (target[0] - s.tau, target[1] - s.nu), Krylov(method.krylov_steps, 1, forcing))
        newton = (jnp.maximum(s.tau + delta[0], 0.0), s.nu + delta[1])
        noise = rounding_level(dtype, 1.0 + jnp.abs(s.value) + jnp.sum(jnp.abs(target[1] * mu)))

        def site_change(tau, nu):
            return jnp.maximum(relative_change(tau, s.tau), relative_change(nu, s.nu))

        def good(candidate):
            tau, nu, _, _, value = candidate
            return (value >= s.value - noise) | (site_change(tau, nu) <= site_tol)

        def candidate(i, scale):  # 0: Newton; i >= 1: natural gradient with beta 2^(1 - i) (scale = 2^-i)
            b = 2.0 * scale * s.beta
            tau = jnp.where(i == 0, newton[0], (1.0 - b) * s.tau + b * target[0])
            nu = jnp.where(i == 0, newton[1], (1.0 - b) * s.nu + b * target[1])
            return self._evaluate(tau, nu)

        # Candidate 0 inside the loop, so that the ELBO (the expensive graph) is traced once per step.
        found, i, scale = first_acceptable(candidate, good, (s.tau, s.nu, s.factor, s.cov, s.value),
                                           last=method.max_halvings + 1, evaluated=False, dtype=dtype)
        accepted = good(found)
        change = site_change(found[0], found[1])
        small = (change <= site_tol) & (jnp.abs(found[4] - s.value) <= tol * (1.0 + jnp.abs(found[4])))
        keep = lambda new, old: jax.tree.map(lambda a, b: jnp.where(accepted, a, b), new, old)  # noqa: E731
        tau, nu, factor, cov, value = keep(found, (s.tau, s.nu, s.factor, s.cov, s.value))
        beta = jnp.where(i >= 1, jnp.minimum(4.0 * scale * s.beta, 1.0), s.beta)  # a natural-gradient step: 2 b
        return KLState(tau, nu, factor, cov, value, beta, change, accepted & small, ~accepted)

    def terminate(self, s: KLState):
        return s.converged, s.stalled

    def finite(self, s: KLState):
        return all_finite(s.tau, s.nu)
