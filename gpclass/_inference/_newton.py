"""Damped Newton iterations to a posterior mode, shared by binary and multi-class Laplace.

Both problems maximise a concave Psi(a) = log p(y|K a) - 1/2 a^T K a in the
variable a = K^-1 f (GPML eqs. 3.12 and 3.35); they differ only in how Psi and
the Newton direction are computed (GPML Algorithms 3.1 and 3.3).  The loop
runs in ``lax.while_loop`` and halves a step until Psi does not decrease
beyond its rounding level, which guarantees progress for a concave Psi.

Convergence needs two things: a small full Newton step, and a small residual
of the mode's equation f = K grad log p(y|f), which is what predictions see
(the predictive mean at the training inputs is K grad log p(y|f^)).  The two
differ by the factor I + K W: r = -(I + K W) (Newton step in f), so where
K W is large (a large signal variance, long length scales) a step below the
tolerance can leave a residual many times larger.  One more step usually
removes it; but in float32 rounding can hold the residual far above any
useful accuracy (raw Pima at its ML-II optimum: predictive means off by up
to 40), and the iterations then stop with ``Status.IMPRECISE`` instead of
reporting convergence.
"""

from collections.abc import Callable

import equinox as eqx
import jax.numpy as jnp
from jax import lax

from .._iterate import AbstractIterativeSolver, Solution, all_finite, relative_change
from .._status import Status
from .._types import Array
from ._search import halving_search


class NewtonState(eqx.Module):
    """The current point a, f = K a and Psi(a); the last full step's relative size in f, the residual
    (:func:`mode_residual`) where the last small step ended, and how it ended."""

    a: Array
    f: Array
    psi: Array
    change: Array
    residual: Array
    converged: Array
    stalled: Array
    imprecise: Array


# The default largest residual of a converged mode, relative to 1 + max |f|: predictive means at the training
# inputs within 1e-3 (1 + max |f|) of the mode.  benchmarks/float32_laplace_grid.py (five data sets, raw and
# standardised, 16 kernels each): every float64 mode converges, at residuals far below it (stiff kernels,
# sigma_f^2 = 2e4, reach 1e-5); float32 modes that converge give float64's test-point means to about 1e-3,
# those it stops as IMPRECISE are off by more, up to 10 times 1 + max |mean|.
RESIDUAL_TOL = 1e-3


def mode_residual(f: Array, k_grad: Array, k_abs_grad: Array) -> Array:
    """How far f is from solving f = K g, g = grad log p(y|f), beyond rounding, relative to 1 + max |f|.

    ``k_grad`` is K g and ``k_abs_grad`` is |K| |g| (elementwise absolute
    values): computing K g rounds by up to about eps (|f| + |K| |g|) per
    component, which 8 times over is not counted.  The result is
    max_i max(|f_i - (K g)_i| - 8 eps (|f_i| + (|K| |g|)_i), 0) / (1 + max |f|).
    """
    eps = jnp.finfo(f.dtype).eps
    excess = jnp.maximum(jnp.abs(f - k_grad) - 8.0 * eps * (jnp.abs(f) + k_abs_grad), 0.0)
    return jnp.max(excess) / (1.0 + jnp.max(jnp.abs(f)))


class Newton(AbstractIterativeSolver):
    """Maximise Psi from a0 (:func:`gpclass._iterate.run`); the result is (f^, a^, steps, status, size of the
    last full step).

    Fields:
        psi: ``psi(a) -> (Psi(a), f = K a)``.
        direction: ``direction(a, f) -> (Newton step in a, rounding level of Psi at a)``.
        residual: ``residual(f)``, the residual of the mode's equation at f as :func:`mode_residual`
            measures it.
        a0: the starting point (any shape: (n,) binary, (n, C) multi-class).
        tol: stop when the full Newton step changes f by at most
            ``tol * (1 + max|f|)`` in every component (that step is then taken)
            and the residual at the point it reaches is at most ``residual_tol``;
            ``None`` means sqrt(machine epsilon).
        residual_tol: the largest residual (:func:`mode_residual`) of a converged
            mode; ``None`` means 1e-3 (``RESIDUAL_TOL``).  A small step that
            leaves the residual above it and no smaller than half the last ends
            the iterations as ``Status.IMPRECISE``: the precision cannot resolve
            the mode.
        max_steps, max_halvings: iteration limits.
        until_unresolved: also stop (as converged) after a step that needed
            halving or raised Psi by no more than its rounding level: as far
            as a lower-precision start should go.  Where the kernel is stiff
            its directions are poor, and it would otherwise run on with
            halved steps and no resolvable progress.
    """

    psi: Callable[[Array], tuple[Array, Array]]
    direction: Callable[[Array, Array], tuple[Array, Array]]
    residual: Callable[[Array], Array]
    a0: Array
    tol: float | None
    max_steps: int
    max_halvings: int
    residual_tol: float | None = None
    until_unresolved: bool = False

    def init(self) -> NewtonState:
        psi0, f0 = self.psi(self.a0)
        false = jnp.asarray(False)
        inf = jnp.asarray(jnp.inf, self.a0.dtype)
        return NewtonState(self.a0, f0, psi0, inf, inf, false, false, false)

    def step(self, s: NewtonState) -> NewtonState:
        eps = jnp.finfo(s.a.dtype).eps
        tol = jnp.sqrt(eps) if self.tol is None else self.tol
        residual_tol = RESIDUAL_TOL if self.residual_tol is None else self.residual_tol

        def rounding(psi_now, noise):
            return 8.0 * (noise + eps * jnp.abs(psi_now))

        def acceptable(psi_t, psi_now, noise):
            # Psi must not decrease beyond its rounding level: near the mode a Newton
            # step of size delta changes Psi by O(delta^2), below what Psi resolves.
            return psi_t >= psi_now - rounding(psi_now, noise)

        da, noise = self.direction(s.a, s.f)
        psi_t, f_t = self.psi(s.a + da)
        # Converged when the full Newton step is small (then it is taken whatever
        # Psi says, as Psi cannot resolve such a step); otherwise halve the step
        # until Psi does not decrease: the Newton direction ascends Psi (concave
        # for log-concave likelihoods), so some t in {1, 1/2, 1/4, ...} works.
        change = relative_change(f_t, s.f)
        small = change <= tol

        t, (psi_t, f_t) = halving_search(lambda t: self.psi(s.a + t * da),
                                         lambda value: small | acceptable(value[0], s.psi, noise),
                                         (psi_t, f_t), self.max_halvings, s.a.dtype)
        accepted = small | acceptable(psi_t, s.psi, noise)
        keep = lambda new, old: jnp.where(accepted, new, old)  # noqa: E731
        # The residual where a small step ends, which is what the result will be (in low precision a small
        # last step can still move it, by up to (I + K W) times the step).  Only a small step needs it: the
        # products with K it takes (memory-bound, a noticeable part of a sparse Newton step) are skipped otherwise.
        residual_t = lax.cond(small, self.residual, lambda f: s.residual, f_t)
        resolved = residual_t <= residual_tol
        # A small step that leaves the residual above tol and no smaller than half the last small step's:
        # rounding, not the iterations, limits it now (module docstring).
        imprecise = small & ~resolved & (residual_t > 0.5 * s.residual)
        done = small & resolved
        if self.until_unresolved:  # a start for higher precision: as far as this precision goes, residual or not
            done = small | (accepted & ((t < 1) | (psi_t <= s.psi + rounding(s.psi, noise))))
            imprecise = jnp.asarray(False)
        # A step that cannot be accepted at any length ends the iterations unconverged (stalled).
        return NewtonState(keep(s.a + t * da, s.a), keep(f_t, s.f), keep(psi_t, s.psi), change, residual_t,
                           done & jnp.isfinite(psi_t), ~accepted | imprecise, imprecise)

    def terminate(self, s: NewtonState):
        return s.converged, s.stalled

    def finite(self, s: NewtonState):
        return all_finite(s.f)

    def status(self, s: NewtonState, converged, num_steps):
        status = super().status(s, converged, num_steps)
        return jnp.where((status == Status.STALLED) & s.imprecise, Status.IMPRECISE, status).astype(status.dtype)

    def postprocess(self, solution: Solution):
        s = solution.state
        return s.f, s.a, solution.num_steps, solution.status, s.change


def better_start(psi: Callable[[Array], tuple[Array, Array]], a_init, dtype) -> Array:
    """A warm start a_init unless a = 0 (f = 0) has the larger Psi (as GPML's ``infLaplace`` does)."""
    a_init = jnp.asarray(a_init, dtype=dtype)
    zero = jnp.zeros_like(a_init)
    return jnp.where(psi(a_init)[0] > psi(zero)[0], a_init, zero)
