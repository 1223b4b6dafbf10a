"""How a solver, a sampler or a fit ended: the one failure value of gpclass.

Every result carries a :class:`Status` code as an integer array (it survives
``jit`` and ``vmap``); ``throw`` is decided once, at the call
(``gpc.infer(..., throw=True)``, ``gpc.fit(..., throw=True)``), and
:func:`raise_unless_successful` attaches the check to every array of the
returned object, so that no use of it escapes the check.

What a code means depends on what ran: ``CONVERGED`` after ``gpc.fit`` is its
gradient test, after ``gpc.infer(gpc.Laplace(), ...)`` the Newton iterations'
test, after ``gpc.infer(gpc.MCMC(), ...)`` only that every sample and its log-likelihood is finite.
:meth:`Status.describe` names the one that applies; :attr:`Status.message`
says what holds for every kind.
"""

import enum

import equinox as eqx
import jax
import jax.numpy as jnp

from ._errors import branched_error_if
from ._types import Array, Int


class Status(enum.IntEnum):
    """Why an iteration stopped: ``gpc.Status(int(code)).describe(who)`` explains a code for what ran.

    Codes up to ``AT_BOUND``, and ``COMPLETED``, are successes: a solver (or a sampler:
    every value finite) ends in ``CONVERGED``; a fit also in ``AT_BOUND``; a training
    run without a convergence test (``gpc.fit_svgp``) in ``COMPLETED``.

    ``describe(who)`` says what the code means for ``who``: ``"fit"``
    (:func:`gpclass.fit`; with ``grad_norm``, and ``gtol`` if known, it gives
    the achieved value of the gradient test), ``"fit_em_ep"``, ``"fit_svgp"``,
    or an inference method (its name or the method itself: ``"Laplace"``,
    ``gpc.EP()``; ``"MCMC"`` and ``"AIS"`` are samplers).  ``message`` says
    what holds whatever ran.

    >>> status = gpc.Status(0)
    >>> status.name
    'CONVERGED'
    >>> print(status.describe("fit", grad_norm=3.2e-7, gtol=1e-5))
    converged: the gradient test was met: the largest component of the projected gradient of the objective with
    respect to the log hyperparameters is 3.2e-07, at most gtol = 1e-05, with every hyperparameter inside the box.
    >>> print(gpc.Status.MAX_STEPS.describe(gpc.Laplace()))
    the step limit was reached before Laplace's convergence test was met (the full Newton step changes f by at most
    tol * (1 + max |f|), ...): raise max_steps, e.g. gpc.Laplace(max_steps=...), ...
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
        """What the code means whatever ran (:meth:`describe` says it for a fit, a solver or a sampler)."""
        return _MESSAGES[self]

    def describe(self, who=None, *, grad_norm=None, gtol=None) -> str:
        """What the code means for ``who`` (see the class docstring); ``who=None`` is :attr:`message`.

        ``grad_norm`` and ``gtol`` (numbers, a fit's only): the achieved largest
        projected gradient (``FitResult.grad_norm``) and the tolerance it was
        tested against, quoted in the text.
        """
        if who is None:
            return self.message
        name = who if isinstance(who, str) else type(who).__name__
        kind = _kind(name)
        if kind == "fit":
            return _fit_message(self, _number(grad_norm), _number(gtol))
        table = {"fit_em_ep": _EM_EP, "fit_svgp": _TRAINING, "sampler": _SAMPLER, "solver": _SOLVER}[kind]
        template = table.get(self)
        if template is None:
            return self.message
        criterion = _SAMPLER_CRITERIA.get(name) if kind == "sampler" else _SOLVER_CRITERIA.get(name, _ANY_SOLVER)
        return template.format(who=name, criterion=criterion, advice=_SAMPLER_ADVICE.get(name, ""))


# What holds whatever ran: no definition of one kind of iteration in another's message.
_MESSAGES = {
    Status.CONVERGED: "converged: the convergence test was met.",
    Status.AT_BOUND: (
        "converged at a bound: the gradient test was met with at least one hyperparameter at a bound of the box "
        "(widen `bounds` or add a hyperprior if the optimum may lie outside it)."
    ),
    Status.STALLED: (
        "stalled: no step (no step length of the line search) could make progress while the convergence test "
        "still failed."
    ),
    Status.MAX_STEPS: "the step limit was reached before the convergence test was met (raise max_steps).",
    Status.FAILED: "failed: a value is not finite.",
    Status.IMPRECISE: (
        "imprecise: the iterations stopped moving, but the solution does not satisfy its own equation to the "
        "tolerance in this floating-point precision (for Laplace, the residual f - K grad log p(y|f), which is the "
        "error of the predictive mean at the training inputs; for the Jaakkola-Jordan bounds, a bound above 0, a "
        "negative posterior variance, or nu still moving by more than tol while steps no longer raise the bound "
        "above its rounding level); the problem is too ill-conditioned for this precision: typically float32 "
        "with a large signal variance or long length scales. Compute in float64 (jax_enable_x64), or standardise "
        "the inputs and start from moderate hyperparameters."
    ),
    Status.COMPLETED: (
        "completed: every requested step ran with finite values; the method has no convergence test (stochastic "
        "optimisation, gpc.fit_svgp): judge convergence from its record (the ELBO estimates)."
    ),
}

_SAMPLERS = ("MCMC", "AIS")


def _kind(name: str) -> str:
    if name in ("fit", "fit_em_ep", "fit_svgp"):
        return name
    return "sampler" if name in _SAMPLERS else "solver"


def _number(x) -> float | None:
    return None if x is None else float(x)


_GRADIENT = "the largest component of the projected gradient of the objective with respect to the log hyperparameters"


def _fit_message(status: Status, grad_norm: float | None, gtol: float | None) -> str:
    """gpc.fit's statuses: its gradient test (max |projected gradient| <= gtol), with the values when given."""
    achieved = " is" if grad_norm is None else f" is {grad_norm:.2g},"  # "... is at most gtol" without the values
    tolerance = "gtol" if gtol is None else f"gtol = {gtol:.2g}"
    above = ("" if grad_norm is None else f" ({grad_norm:.2g})") + f" was still above {tolerance}"
    resolution = (grad_norm is not None and gtol is not None and grad_norm > gtol)
    if status == Status.CONVERGED and resolution:
        return (f"converged to the objective's precision: {_GRADIENT}{above}, but a line search along the L-BFGS "
                "direction found no gain above ftol * (1 + |objective|), and the direction's quadratic model "
                "predicted none (in float32 the objective's rounding stops ML-II there); every hyperparameter is "
                "inside the box.")
    if status == Status.CONVERGED:
        either = ("" if grad_norm is not None else ", or (L-BFGS) no step could raise the objective by more than "
                  "ftol * (1 + |objective|), as the direction's quadratic model predicted")
        return (f"converged: the gradient test was met: {_GRADIENT}{achieved} at most {tolerance}, with every "
                f"hyperparameter inside the box{either}.")
    if status == Status.AT_BOUND and resolution:
        return (f"converged at a bound to the objective's precision: {_GRADIENT}{above}, but a line search along "
                "the L-BFGS direction found no gain above ftol * (1 + |objective|), and the direction's quadratic "
                "model predicted none; at least one hyperparameter sits at a bound of the box.")
    if status == Status.AT_BOUND:
        return (f"converged at a bound: the gradient test was met: {_GRADIENT}{achieved} at most {tolerance}, and at "
                "least one hyperparameter sits at a bound of the box, typically because the objective still rises "
                "beyond it (a flat direction, such as the length scale of an irrelevant input, or an optimum outside "
                "the box): widen `bounds` or add a hyperprior (log_prior) if that matters.")
    if status == Status.STALLED:
        return (f"stalled: two steps in a row, the second from a restarted optimiser, could not change the objective "
                f"by more than ftol * (1 + |objective|) while {_GRADIENT}{above}: rounding in the objective, or a "
                "neighbourhood where the inner solver fails, limits progress. Judge the result by its grad_norm; "
                "a larger gtol, float64, standardised inputs or another start may help.")
    if status == Status.MAX_STEPS:
        return (f"the step limit was reached: max_steps optimiser steps ran while {_GRADIENT}{above}. Raise "
                "max_steps, or continue from this result's kernel and likelihood.")
    if status == Status.FAILED:
        return ("failed: a value is not finite: the inner solver did not converge at the starting hyperparameters, "
                "or the objective or its gradient is not finite there. Start from moderate hyperparameters "
                "(standardise the inputs), or check the inner method's status with gpc.infer(..., throw=False).")
    return status.message


_ANY_SOLVER = "its tol"
# Each method's convergence test, as its docstring states it (``tol`` and the other settings are the method's).
_SOLVER_CRITERIA = {
    "Laplace": ("the full Newton step changes f by at most tol * (1 + max |f|), and the mode's residual "
                "f - K grad log p(y|f) is at most residual_tol * (1 + max |f|)"),
    "EP": ("between two sweeps the site parameters tau~ and nu~ change by at most tol * (1 + max |.|) and log Z_EP "
           "by at most tol * (1 + |log Z_EP|)"),
    "KL": ("between two steps the sites tau~ and nu~ change by at most site_tol * (1 + max |.|) and the ELBO by at "
           "most tol * (1 + |ELBO|)"),
    "JaakkolaJordan": "between two steps nu changes by at most tol * (1 + max |nu|) and log Z' by at most "
                      "tol * (1 + |log Z'|) or its rounding level",
    "JaakkolaJordanUpper": "between two steps mu changes by at most tol and log Z'' by at most tol * (1 + |log Z''|)",
}
_SOLVER = {
    Status.CONVERGED: "converged: {who}'s convergence test was met: {criterion}.",
    Status.STALLED: (
        "stalled: no step length was acceptable (every trial made the objective worse beyond its rounding level) "
        "while {who}'s convergence test ({criterion}) still failed: rounding limits progress at these "
        "hyperparameters. Compute in float64 (jax_enable_x64), or standardise the inputs and start from moderate "
        "hyperparameters."
    ),
    Status.MAX_STEPS: (
        "the step limit was reached before {who}'s convergence test was met ({criterion}): raise max_steps, e.g. "
        "gpc.{who}(max_steps=...), or start from an earlier solution (gpc.infer(..., init=posterior.warm_start))."
    ),
    Status.FAILED: (
        "failed: {who}'s iterations reached a value that is not finite. Standardise the inputs and start from "
        "moderate hyperparameters, or compute in float64 (jax_enable_x64)."
    ),
}
_SAMPLER_CRITERIA = {"MCMC": "every sample and its log p(y|f) is finite",
                     "AIS": "the log marginal likelihood estimate is finite"}
_SAMPLER = {
    Status.CONVERGED: (
        "converged as a sampler can: {criterion}. {who} has no convergence test: judge its mixing from "
        "posterior.info (acceptance rate) and by comparing independent runs."
    ),
    Status.STALLED: (
        "stalled: a chain stood still, every one of its kept samples the same point (HMC rejected every proposal: "
        "see posterior.info.acceptance_rate), so its samples are its starting point, not draws of the posterior. "
        "Lower the HMC step_size, or use gpc.samplers.EllipticalSlice() (it always moves)."
    ),
    Status.FAILED: "failed: not every value is finite (the test: {criterion}). {advice}",
}
_SAMPLER_ADVICE = {
    "MCMC": ("With HMC lower the step_size; standardise the inputs and start from moderate hyperparameters. MCMC's "
             "chains start at f = 0 unless init= is given: with a likelihood that is zero there (Heaviside) they "
             "cannot move; start them inside its support (init=) or use LabelNoise(Heaviside(), epsilon)."),
    "AIS": ("AIS weighs draws of the prior by the likelihood: with one that is zero on part of the latent space "
            "(Heaviside) every run can end with weight zero; use LabelNoise(Heaviside(), epsilon). With HMC lower "
            "the step_size; standardise the inputs and start from moderate hyperparameters."),
}
_EM_EP = {
    Status.CONVERGED: (
        "converged: the EP log marginal likelihood log q changed by at most tol * (1 + |log q|) in the last EM step, "
        "with a converged EP solution."
    ),
    Status.MAX_STEPS: (
        "the step limit was reached: max_steps EM steps ran before log q changed by at most tol * (1 + |log q|) in "
        "one step (with a converged EP solution). Raise max_steps, or loosen tol."
    ),
    Status.FAILED: (
        "failed: the EP log marginal likelihood is not finite. The kernel must give a non-singular Gram matrix "
        "(include a White term); start from moderate hyperparameters."
    ),
}
_TRAINING = {
    Status.FAILED: (
        "failed: an ELBO estimate is not finite; training stopped there (the model holds the parameters at which it "
        "was computed). Lower the optimiser's learning rate, or standardise the inputs."
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


def unsuccessful_message(status: Status, who: str) -> str:
    """The error a ``throw=True`` call raises when it ends with ``status``."""
    return (f"{who} did not converge ({status.name}): {status.describe(who)} Pass throw=False to get the result with "
            "its status.")


def raise_unless_successful(x, status: Int[Array, ""], who: str):
    """``x`` with an error naming ``who`` and the status unless ``status`` is a success (``successful``).

    One ``_errors.branched_error_if`` returns the non-float arrays of ``x`` and a
    checked 1, and every float array of ``x`` is multiplied by that 1 (exact),
    so every array depends on the check: any use of ``x`` raises, a gradient
    too, whose backward pass needs the checked 1 (a check attached to the
    outputs alone is dead code in a program that only differentiates them).
    """
    messages = [unsuccessful_message(s, who) for s in Status]
    status = jax.lax.stop_gradient(status)  # an integer: no derivative (it may come out of a custom_vjp)
    leaves, treedef = jax.tree.flatten(x)
    is_float = [eqx.is_inexact_array(leaf) for leaf in leaves]
    others = [leaf for leaf, f in zip(leaves, is_float) if not f]
    one, others = branched_error_if((jnp.ones(()), others), ~successful(status), status, messages)
    others = iter(others)
    leaves = [leaf * one.astype(leaf.dtype) if f else next(others) for leaf, f in zip(leaves, is_float)]
    return jax.tree.unflatten(treedef, leaves)
