"""Input checks at the API boundary: static shapes in Python, values with eqx.error_if.

The value checks run inside jit and vmap and raise an ``EquinoxRuntimeError``
(an ``XlaRuntimeError`` when called from jitted code) carrying the message.
"""

import equinox as eqx
import jax.numpy as jnp

from ._types import Array, Float


def check_inputs(X, name: str = "X") -> Float[Array, "n d"]:
    """A finite (n, d) float array with n >= 1."""
    X = jnp.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"{name} must have shape (n, d); got shape {X.shape}. Use X[:, None] for one input dimension.")
    if X.shape[0] == 0:
        raise ValueError(f"{name} is empty (shape {X.shape}); at least one case is needed.")
    if not jnp.issubdtype(X.dtype, jnp.floating):
        X = X.astype(jnp.result_type(float))
    return eqx.error_if(X, ~jnp.all(jnp.isfinite(X)), f"{name} contains NaN or infinite values.")


def check_binary_labels(y, n: int, dtype) -> Float[Array, " n"]:
    """Labels as floats in {-1, +1}.

    Accepted codings: {-1, +1}; {0, 1} (0 means -1); booleans (False means -1).
    Anything else, or a vector mixing 0 and -1, is an error.
    """
    y = jnp.asarray(y)
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},) to match X; got shape {y.shape}.")
    if y.dtype == jnp.bool_:
        return jnp.where(y, 1.0, -1.0).astype(dtype)
    valid = (y == 1) | (y == -1) | (y == 0)
    y = eqx.error_if(y, ~jnp.all(valid), "binary labels must be in {-1, +1}, {0, 1} or booleans.")
    mixed = jnp.any(y == 0) & jnp.any(y == -1)
    y = eqx.error_if(y, mixed, "labels mix the codings {0, 1} and {-1, +1} (both 0 and -1 occur).")
    return jnp.where(y > 0, 1.0, -1.0).astype(dtype)


def check_class_labels(y, n: int, num_classes: int, dtype) -> Float[Array, "n C"]:
    """Integer class labels 0..C-1 as the 0/1 indicator matrix Y of shape (n, C) (GPML's y, eq. 3.35).

    Floats are accepted when they hold whole numbers; anything else (a
    fraction, a label outside 0..C-1, a NaN, booleans) is an error.
    """
    y = jnp.asarray(y)
    if y.shape != (n,):
        raise ValueError(f"y must have shape ({n},) to match X; got shape {y.shape}.")
    if y.dtype == jnp.bool_ or not (jnp.issubdtype(y.dtype, jnp.integer) or jnp.issubdtype(y.dtype, jnp.floating)):
        raise ValueError(f"multi-class labels must be integers 0..{num_classes - 1}; got dtype {y.dtype}.")
    whole = jnp.all(y == jnp.round(y)) if jnp.issubdtype(y.dtype, jnp.floating) else jnp.asarray(True)
    y = eqx.error_if(y, ~whole, f"multi-class labels must be whole numbers 0..{num_classes - 1} (got a fraction or NaN).")
    in_range = jnp.all((y >= 0) & (y <= num_classes - 1))
    y = eqx.error_if(y, ~in_range, f"multi-class labels must lie in 0..{num_classes - 1} for Softmax({num_classes}).")
    return (y.astype(jnp.int32)[:, None] == jnp.arange(num_classes)).astype(dtype)
