"""Converged variational parameters held fixed under differentiation, and said so.

KL, the Jaakkola-Jordan bounds and the sparse EP, KL and JJ differentiate their
log marginal likelihood (or bound) with their converged parameters held fixed,
which the envelope theorem (or the stationarity of log Z_EP) makes exact.  The
posterior depends on those parameters too, and their own derivative with
respect to the hyperparameters is not computed: reverse mode through a
posterior built from them raises, naming the method, instead of returning the
gradient of a prediction with that term missing (10-40 % off, measured on
60-case pima).  Laplace and dense EP differentiate their posteriors exactly.
"""

import functools

import jax
from jax import lax

_MESSAGE = (
    "{method}: the gradient of its posterior (predictions) with respect to the hyperparameters is not available. "
    "Its converged {params} are held fixed under differentiation, which is exact for the log marginal likelihood "
    "(the envelope theorem) but not for the posterior, whose gradient would miss their own dependence on the "
    "hyperparameters. Differentiate `log_marginal` only, or use gpc.Laplace() or dense gpc.EP(), whose "
    "posteriors are differentiable."
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
