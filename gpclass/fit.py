"""Type-II maximum likelihood (ML-II): fit hyperparameters with optax.

Every floating-point array in the kernel and likelihood is a hyperparameter,
optimised in an unconstrained space: log theta for the positive parameters,
logit(theta / u) for a parameter with an upper bound u (a module declares
these in its ``upper_bounds``, e.g. a label-flip rate epsilon < 1/2).  The
objective is the method's approximate log marginal likelihood, optionally plus
a log hyperprior, and its gradient comes from ``jax.grad`` through the
converged inner solution.  The optimiser runs inside ``lax.while_loop``, so
the whole fit is one jit-compiled call that also works under ``jax.vmap``.
"""

import dataclasses
from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
from jax import lax

from ._types import Array, Bool, Float, Int
from ._validation import check_inputs
from .inference import AbstractInference, GaussianPosterior, SoftmaxPosterior
from .inference._infer import check_labels, solve_posterior
from .kernels import AbstractKernel
from .likelihoods import AbstractLikelihood


class FitResult(eqx.Module):
    """The fitted kernel and likelihood, the posterior there, and the optimisation record.

    ``history[i]`` is the objective (log marginal likelihood plus log prior)
    after step i + 1; entries past ``num_steps`` are NaN (steps not taken).
    ``converged`` means the largest gradient component with respect to the log
    hyperparameters fell below ``gtol`` at a converged inner solution; a fit
    that stopped because the objective stalled, or that ran out of steps, has
    ``converged = False``.
    """

    kernel: AbstractKernel
    likelihood: AbstractLikelihood
    posterior: GaussianPosterior | SoftmaxPosterior
    objective: Float[Array, ""]
    history: Float[Array, " max_steps"]
    num_steps: Int[Array, ""]
    grad_norm: Float[Array, ""]
    converged: Bool[Array, ""]


@eqx.filter_jit
def fit(
    method: AbstractInference,
    kernel: AbstractKernel,
    likelihood: AbstractLikelihood,
    X,
    y,
    *,
    optimizer: optax.GradientTransformation | None = None,
    max_steps: int = 100,
    gtol: float | None = None,
    ftol: float = 1e-12,
    log_prior: Callable[[AbstractKernel, AbstractLikelihood], Float[Array, ""]] | None = None,
    warm_start: bool = True,
    key=None,
    verbose: bool = False,
) -> FitResult:
    """Maximise log q(y|X, theta) [+ log p(theta)] over the log hyperparameters.

    Args:
        method: inference configuration, e.g. ``gpc.Laplace()``.
        kernel, likelihood: the starting point; every float array leaf is fitted.
        X, y: training data as for :func:`gpclass.infer`.
        optimizer: any optax transformation; ``None`` means ``optax.lbfgs()``
            (zoom line search), which needs no tuning.  First-order optimisers
            such as ``optax.adam(0.05)`` work too.
        max_steps: largest number of optimiser steps.
        gtol: stop when max |d objective / d log theta| <= gtol (converged);
            ``None`` means 1e-5 in float64 and 1e-2 in float32, where rounding
            in the inner solve limits how small the gradient can get.
        ftol: stop when a step changes the objective by at most
            ``ftol * (1 + |objective|)`` (stalled; not counted as converged
            unless the gradient test also holds).
        log_prior: optional ``log_prior(kernel, likelihood) -> scalar``, e.g.
            built from :func:`gpclass.priors.log_gamma`.
        warm_start: start each inner solve from the previous step's solution
            (passed explicitly through the loop state).
        key: PRNG key for methods with randomness (the same key every step,
            so the objective stays a deterministic function of theta).
        verbose: print the objective after every step (``jax.debug.print``).

    Wrapped in ``eqx.filter_jit``: non-array arguments (``optimizer``,
    ``log_prior``) are static, so pass the same objects to reuse a compilation.
    """
    method.check_ml2()
    X = check_inputs(X)
    y = check_labels(likelihood, y, X)
    if gtol is None:
        gtol = 1e-5 if X.dtype == jnp.float64 else 1e-2
    params, static = eqx.partition((kernel, likelihood), eqx.is_inexact_array)
    if not jax.tree.leaves(params):
        raise ValueError("fit: the kernel and likelihood have no floating-point parameters to fit.")
    to_free, from_free = parameter_transforms(params, (kernel, likelihood))
    log_params = to_free(params)
    # Line searches probe extreme hyperparameters where the inner solver may fail;
    # there the objective is -inf (an infeasible point the line search backs off
    # from) instead of an exception.  The returned posterior reports convergence.
    inner = dataclasses.replace(method, throw=False)

    def build(log_params):
        return eqx.combine(from_free(log_params), static)

    def negative_objective(log_params, init):
        kernel, likelihood = build(log_params)
        posterior = solve_posterior(inner, kernel, likelihood, X, y, init if warm_start else None, key)
        value = posterior.log_marginal
        if log_prior is not None:
            value = value + log_prior(kernel, likelihood)
        return jnp.where(posterior.info.converged, -value, jnp.inf), posterior

    value_and_grad = jax.value_and_grad(negative_objective, has_aux=True)
    optimizer = optax.with_extra_args_support(optax.lbfgs() if optimizer is None else optimizer)

    def max_abs(tree):
        return jnp.max(jnp.stack([jnp.max(jnp.abs(g)) for g in jax.tree.leaves(tree)]))

    def step(state):
        log_params, opt_state, posterior, value, grad, i, history, _ = state
        init = posterior.warm_start
        updates, opt_state = optimizer.update(
            grad,
            opt_state,
            log_params,
            value=value,
            grad=grad,
            value_fn=lambda p: negative_objective(p, init)[0],
        )
        log_params = optax.apply_updates(log_params, updates)
        cached_value = optax.tree_utils.tree_get(opt_state, "value")
        if cached_value is None:
            (new_value, posterior), grad = value_and_grad(log_params, init)
        else:
            # A line search (L-BFGS's zoom) already evaluated the objective and its
            # gradient at the accepted point: reuse them, and solve forward only
            # (warm-started, no gradient) for the posterior and the next warm start.
            new_value, grad = cached_value, optax.tree_utils.tree_get(opt_state, "grad")
            _, posterior = negative_objective(lax.stop_gradient(log_params), init)
        history = history.at[i].set(-new_value)
        grad_norm = max_abs(grad)
        stalled = jnp.abs(new_value - value) <= ftol * (1.0 + jnp.abs(value))
        done = (grad_norm <= gtol) | stalled | ~jnp.isfinite(new_value)
        if verbose:
            jax.debug.print("fit step {i:4d}: objective {v: .8e}  max|grad| {g:.2e}", i=i + 1, v=-new_value, g=grad_norm)
        return log_params, opt_state, posterior, new_value, grad, i + 1, history, done

    (value, posterior), grad = value_and_grad(log_params, None)
    history = jnp.full((max_steps,), jnp.nan, dtype=X.dtype)
    state = (log_params, optimizer.init(log_params), posterior, value, grad, 0, history, max_abs(grad) <= gtol)
    log_params, _, posterior, value, grad, num_steps, history, _ = lax.while_loop(
        lambda s: ~s[-1] & (s[5] < max_steps), step, state
    )
    kernel, likelihood = build(log_params)
    grad_norm = max_abs(grad)
    return FitResult(
        kernel=kernel,
        likelihood=likelihood,
        posterior=posterior,
        objective=-value,
        history=history,
        num_steps=jnp.asarray(num_steps),
        grad_norm=grad_norm,
        converged=(grad_norm <= gtol) & posterior.info.converged,
    )


def parameter_transforms(params, tree):
    """Maps between hyperparameters and unconstrained coordinates, leaf by leaf.

    A parameter in (0, inf) maps to log theta; one with a declared upper
    bound u (``upper_bounds = {"field": u}`` on its module, e.g.
    ``LabelNoise.epsilon < 1/2``) maps to logit(theta / u).  ``params`` is the
    array part of ``tree``; out-of-range values raise (inside jit too).
    """
    bounded = {}
    for node in jax.tree.leaves(tree, is_leaf=lambda x: isinstance(x, eqx.Module) and hasattr(x, "upper_bounds")):
        for name, bound in getattr(node, "upper_bounds", {}).items():
            bounded[id(getattr(node, name))] = bound
    leaves, treedef = jax.tree.flatten(params)
    bounds = [bounded.get(id(leaf), None) for leaf in leaves]

    def check(p, u):
        upper = jnp.inf if u is None else u
        return eqx.error_if(
            p, jnp.any((p <= 0) | (p >= upper)), f"fit: every hyperparameter must lie in (0, {upper}) (log/logit space)."
        )

    def to_free(params):
        out = []
        for p, u in zip(jax.tree.leaves(params), bounds):
            p = check(p, u)
            out.append(jnp.log(p) if u is None else jnp.log(p / u) - jnp.log1p(-p / u))
        return jax.tree.unflatten(treedef, out)

    def from_free(free):
        return jax.tree.unflatten(
            treedef,
            [jnp.exp(x) if u is None else u * jax.nn.sigmoid(x) for x, u in zip(jax.tree.leaves(free), bounds)],
        )

    return to_free, from_free
