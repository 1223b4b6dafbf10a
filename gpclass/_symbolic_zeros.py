"""Helpers for custom VJPs with ``symbolic_zeros=True``: their inputs' values, and cotangents that may be zero."""

import jax
import jax.numpy as jnp

_PRIMAL = jax.custom_derivatives.CustomVJPPrimal
_SYMBOLIC = jax.custom_derivatives.SymbolicZero


def _is_primal(p) -> bool:
    return isinstance(p, _PRIMAL)


def _is_symbolic(c) -> bool:
    return isinstance(c, _SYMBOLIC)


def primal_values(tree):
    """The values of a ``symbolic_zeros`` custom VJP's inputs (``CustomVJPPrimal`` leaves) as a plain tree."""
    return jax.tree.map(lambda p: p.value if _is_primal(p) else p, tree, is_leaf=_is_primal)


def all_symbolic(cotangent) -> bool:
    """Whether every leaf of a cotangent is a symbolic zero (nothing differentiated depends on the output)."""
    return all(_is_symbolic(c) for c in jax.tree.leaves(cotangent, is_leaf=_is_symbolic))


def instantiated(cotangent, like):
    """The cotangent with its symbolic zeros made arrays shaped like ``like``'s leaves, or None when all of it is
    symbolically zero."""
    if all_symbolic(cotangent):
        return None
    return jax.tree.map(lambda c, p: jnp.zeros_like(p) if _is_symbolic(c) else c, cotangent, like,
                        is_leaf=_is_symbolic)
