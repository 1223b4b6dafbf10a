"""Converged variational parameters under differentiation: implicit, or held fixed and said so.

KL, the Jaakkola-Jordan bounds and sparse EP, KL and JJ differentiate their
log marginal likelihood (or bound) with their converged parameters held fixed,
which the envelope theorem (or the stationarity of log Z_EP) makes exact.  The
posterior depends on those parameters too.  Where the method's solver has the
Jacobian of its fixed-point map in closed form (dense KL and the two JJ
bounds), :func:`implicit_fixed_point` differentiates the parameters by the
implicit function theorem; elsewhere (the sparse priors, whose solvers are
matrix-free) :func:`held_fixed` makes reverse mode
through the posterior raise, naming the method, instead of returning the
gradient of a prediction with that term missing (10-40 % off, measured on
60-case pima).  Laplace and dense EP have their own implicit adjoints.
"""

import functools

import jax
import jax.flatten_util
import jax.numpy as jnp
from jax import lax

from .. import _dense as dense

_MESSAGE = (
    "{method}: the gradient of its posterior (predictions) with respect to the hyperparameters is not available. "
    "Its converged {params} are held fixed under differentiation, which is exact for the log marginal likelihood "
    "(the envelope theorem) but not for the posterior, whose gradient would miss their own dependence on the "
    "hyperparameters. Differentiate `log_marginal` only, use the method with the dense prior, or use "
    "gpc.Laplace(), whose posteriors are differentiable."
)


def held_fixed(params, prior, method: str, what: str):
    """``params`` without a derivative; reverse mode raises if anything differentiated depends on them.

    ``prior`` is what carries the hyperparameters (K, or the sparse prior's
    operator): through it reverse mode reaches this point.  A cotangent that is
    a symbolic zero (only the log marginal likelihood was differentiated, as
    :func:`gpclass.fit` does) passes.
    """
    return _held_fixed(_MESSAGE.format(method=method, params=what), lax.stop_gradient(params), prior)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _held_fixed(message, params, prior):
    return params


def _held_fixed_fwd(message, params, prior):
    return primal_values(params), None


def primal_values(tree):
    """The values of a ``symbolic_zeros`` custom VJP's inputs (``CustomVJPPrimal`` leaves) as a plain tree."""
    primal = jax.custom_derivatives.CustomVJPPrimal
    return jax.tree.map(lambda p: p.value if isinstance(p, primal) else p, tree, is_leaf=lambda p: isinstance(p, primal))


def _held_fixed_bwd(message, residuals, cotangent):
    symbolic = jax.custom_derivatives.SymbolicZero
    if all(isinstance(c, symbolic) for c in jax.tree.leaves(cotangent, is_leaf=lambda c: isinstance(c, symbolic))):
        return None, None
    raise NotImplementedError(message)


_held_fixed.defvjp(_held_fixed_fwd, _held_fixed_bwd, symbolic_zeros=True)


def implicit_fixed_point(target_and_jacobian, params, converged, K, likelihood, y):
    """``params``, converged to p = T(p; K, likelihood), differentiable in K and the likelihood.

    ``target_and_jacobian(K, likelihood, y, params) -> (T(p) as one vector, dT/dp)``, p flattened in the
    order of ``jax.flatten_util.ravel_pytree(params)``.  dp = (I - dT/dp)^-1 dT, so reverse mode solves
    (I - dT/dp)^T lambda = p_bar (one dense LU factorisation) and pulls lambda back through T: only when
    the parameters receive a cotangent (symbolic zeros otherwise: log q alone, held fixed by the envelope
    theorem, costs nothing).  An unconverged solve gets lambda = p_bar, as EP's.
    """
    return _implicit(target_and_jacobian, lax.stop_gradient(params), converged, K, likelihood, y)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def _implicit(target_and_jacobian, params, converged, K, likelihood, y):
    return params


def _implicit_fwd(target_and_jacobian, params, converged, K, likelihood, y):
    params, converged, K, likelihood, y = primal_values((params, converged, K, likelihood, y))
    return params, (params, converged, K, likelihood, y)


def _implicit_bwd(target_and_jacobian, residuals, cotangent):
    symbolic = jax.custom_derivatives.SymbolicZero
    leaves = jax.tree.leaves(cotangent, is_leaf=lambda c: isinstance(c, symbolic))
    if all(isinstance(c, symbolic) for c in leaves):
        return None, None, None, None, None
    params, converged, K, likelihood, y = residuals
    cotangent = jax.tree.map(lambda c, p: jnp.zeros_like(p) if isinstance(c, symbolic) else c, cotangent, params,
                             is_leaf=lambda c: isinstance(c, symbolic))
    p_bar = jax.flatten_util.ravel_pytree(cotangent)[0]
    _, jacobian = target_and_jacobian(K, likelihood, y, params)
    eye = jnp.eye(p_bar.shape[0], dtype=p_bar.dtype)
    lam = jnp.where(converged, dense.solve((eye - jacobian).T, p_bar), p_bar)
    _, pull = jax.vjp(lambda K, likelihood: target_and_jacobian(K, likelihood, y, params)[0], K, likelihood)
    K_bar, likelihood_bar = pull(lam)
    return None, None, K_bar, likelihood_bar, None


_implicit.defvjp(_implicit_fwd, _implicit_bwd, symbolic_zeros=True)
