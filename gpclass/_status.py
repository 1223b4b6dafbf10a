"""How a solver, a sampler or a fit ended: the one failure value of gpclass.

Every result carries a :class:`Status` code as an integer array (it survives
``jit`` and ``vmap``); ``throw`` is decided once, at the call
(``gpc.infer(..., throw=True)``, ``gpc.fit(..., throw=True)``), and
:func:`raise_unless_successful` attaches the check to every array of the
returned object, so that no use of it escapes the check.
"""

import enum

import equinox as eqx
import jax
import jax.numpy as jnp

from ._errors import branched_error_if
from ._types import Array, Int


class Status(enum.IntEnum):
    """Why an iteration stopped.  ``gpc.Status(int(code)).message`` explains a code.

    Codes up to ``AT_BOUND``, and ``COMPLETED``, are successes: a solver (or a sampler:
    every value finite) ends in ``CONVERGED``; a fit also in ``AT_BOUND``; a training
    run without a convergence test (``gpc.fit_svgp``) in ``COMPLETED``.
    """

    CONVERGED = 0
    AT_BOUND = 1
    STALLED = 2
    MAX_STEPS = 3
    FAILED = 4
    IMPRECISE = 5
    COMPLETED = 6

    @property
    def message(self) -> str:
        return _MESSAGES[self]


_MESSAGES = {
    Status.CONVERGED: (
        "converged: the convergence test was met (an inner solver: the last step changed the solution by at most "
        "its tol; a fit: the largest projected gradient is at most gtol, inside the box; a sampler: every value is "
        "finite)."
    ),
    Status.AT_BOUND: (
        "converged at a bound: the projected gradient is at most gtol and at least one hyperparameter sits at a "
        "bound of the box, typically because the objective still rises beyond it (a flat direction, such as the "
        "length scale of an irrelevant input, or an optimum outside the box: widen `bounds` or add a hyperprior "
        "if that matters)."
    ),
    Status.STALLED: (
        "stalled: no step could make progress while the convergence test still failed (an inner solver: no step "
        "length was acceptable; a fit: two line searches in a row, the second from a restarted optimiser, could "
        "not change the objective by more than ftol * (1 + |objective|), rounding in the objective or a "
        "neighbourhood where the inner solver fails limiting progress)."
    ),
    Status.MAX_STEPS: "the step limit was reached before the convergence test was met (raise max_steps).",
    Status.FAILED: (
        "failed: a value is not finite (a fit: the inner solver did not converge at the starting hyperparameters, "
        "or the objective or its gradient is not finite there)."
    ),
    Status.IMPRECISE: (
        "imprecise: the iterations stopped moving, but the solution does not satisfy its own equation to the "
        "tolerance in this floating-point precision (for Laplace, the residual f - K grad log p(y|f), which is the "
        "error of the predictive mean at the training inputs); the problem is too ill-conditioned for this "
        "precision: typically float32 with a large signal variance or long length scales. Compute in float64 "
        "(jax_enable_x64), or standardise the inputs and start from moderate hyperparameters."
    ),
    Status.COMPLETED: (
        "completed: every requested step ran with finite values; the method has no convergence test (stochastic "
        "optimisation, gpc.fit_svgp): judge convergence from its record (the ELBO estimates)."
    ),
}


def successful(status: Int[Array, "..."]) -> Array:
    """Whether ``status`` is ``CONVERGED``, ``AT_BOUND`` or ``COMPLETED`` (elementwise)."""
    return (status <= Status.AT_BOUND) | (status == Status.COMPLETED)


def solver_status(converged, num_steps, max_steps: int, finite) -> Int[Array, ""]:
    """The status of an iteration that stopped: FAILED (not finite), else CONVERGED, else MAX_STEPS (the limit
    was reached), else STALLED (it stopped early without converging)."""
    status = jnp.where(converged, Status.CONVERGED, jnp.where(num_steps >= max_steps, Status.MAX_STEPS, Status.STALLED))
    return jnp.where(finite, status, Status.FAILED).astype(jnp.int32)


def finite_status(x) -> Int[Array, ""]:
    """The status of a sampler's result: ``CONVERGED`` if every entry of ``x`` is finite, else ``FAILED``."""
    return jnp.where(jnp.all(jnp.isfinite(x)), Status.CONVERGED, Status.FAILED).astype(jnp.int32)


def raise_unless_successful(x, status: Int[Array, ""], who: str):
    """``x`` with an error naming ``who`` and the status unless ``status`` is a success (``successful``).

    One ``_errors.branched_error_if`` returns the non-float arrays of ``x`` and a
    checked 1, and every float array of ``x`` is multiplied by that 1 (exact),
    so every array depends on the check: any use of ``x`` raises, a gradient
    too, whose backward pass needs the checked 1 (a check attached to the
    outputs alone is dead code in a program that only differentiates them).
    """
    messages = [f"{who} did not converge ({s.name}): {s.message} Pass throw=False to get the result with its status."
                for s in Status]
    status = jax.lax.stop_gradient(status)  # an integer: no derivative (it may come out of a custom_vjp)
    leaves, treedef = jax.tree.flatten(x)
    is_float = [eqx.is_inexact_array(leaf) for leaf in leaves]
    others = [leaf for leaf, f in zip(leaves, is_float) if not f]
    one, others = branched_error_if((jnp.ones(()), others), ~successful(status), status, messages)
    others = iter(others)
    leaves = [leaf * one.astype(leaf.dtype) if f else next(others) for leaf, f in zip(leaves, is_float)]
    return jax.tree.unflatten(treedef, leaves)
