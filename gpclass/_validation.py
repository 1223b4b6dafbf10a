"""Input checks at the API boundary: static shapes in Python, values with eqx.error_if.

The value checks run inside jit and vmap and raise an ``EquinoxRuntimeError``
(an ``XlaRuntimeError`` when called from jitted code) carrying the message.
"""

import equinox as eqx
import jax.numpy as jnp

from ._types import Array, Float


def check_inputs(X, name: str = "X", *, allow_empty: bool = False) -> Float[Array, "n d"]:
    """A finite (n, d) float array with n >= 1 (n >= 0 with ``allow_empty``: test inputs)."""
    X = jnp.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"{name} must have shape (n, d); got shape {X.shape}. Use X[:, None] for one input dimension.")
    if X.shape[0] == 0 and not allow_empty:
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
    y = _check_no_nan(y, "binary labels contain NaN; missing labels are not supported (drop those cases).")
    valid = (y == 1) | (y == -1) | (y == 0) | jnp.isnan(y)  # NaN has its own message above
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
    y = _check_no_nan(
        y,
        f"multi-class labels contain NaN; they must be whole numbers 0..{num_classes - 1} "
        "(missing labels are not supported: drop those cases).",
    )
    whole = jnp.all((y == jnp.round(y)) | jnp.isnan(y)) if jnp.issubdtype(y.dtype, jnp.floating) else jnp.asarray(True)
    y = eqx.error_if(y, ~whole, f"multi-class labels must be whole numbers 0..{num_classes - 1} (got a fraction).")
    in_range = jnp.all(((y >= 0) & (y <= num_classes - 1)) | jnp.isnan(y))
    y = eqx.error_if(y, ~in_range, f"multi-class labels must lie in 0..{num_classes - 1} for Softmax({num_classes}).")
    return (y.astype(jnp.int32)[:, None] == jnp.arange(num_classes)).astype(dtype)


def check_two_classes(y):
    """Checked labels ({-1, +1} floats, or the (n, C) indicators of ``check_class_labels``) of at least two
    classes, else an error.

    With one class, ML-II has no finite maximiser: the evidence keeps
    increasing as the length scale and the signal variance grow (a constant
    latent function of the observed class's sign; log q tends to about
    log 1/2, measured with Laplace and EP).  ``eqx.error_if``, so the check
    also raises inside jit and vmap.
    """
    if y.ndim == 2:
        classes_seen = jnp.sum(jnp.any(y > 0, axis=0))
        one_class = classes_seen < 2
    else:
        one_class = jnp.all(y > 0) | jnp.all(y < 0)
    return eqx.error_if(
        y,
        one_class,
        "fit: every training label is of one class; ML-II needs labels of at least two classes "
        "(with one class the evidence keeps increasing with the length scale and signal variance: "
        "no finite maximiser).",
    )


def _check_no_nan(y, message: str):
    """y, raising (inside jit too) if a floating-point y holds a NaN."""
    if not jnp.issubdtype(y.dtype, jnp.inexact):
        return y
    return eqx.error_if(y, jnp.any(jnp.isnan(y)), message)


def check_covariance(K: Float[Array, "*C n n"]) -> Float[Array, "*C n n"]:
    """A prior covariance matrix whose entries are finite and whose diagonal (the prior variances) is >= 0.

    These are the O(n^2) necessary conditions for a positive semi-definite K;
    they catch NaN or infinite hyperparameters, zero length scales, negative
    variances and inputs so large that the kernel overflows.  Positive
    semi-definiteness itself needs a factorisation: the sampling methods
    factorise K and raise if that fails, the Gaussian methods factorise only
    B = I + W^1/2 K W^1/2 and trust the kernel (every built-in kernel with
    valid hyperparameters is positive semi-definite).
    """
    K = eqx.error_if(
        K,
        ~jnp.all(jnp.isfinite(K)),
        "the kernel matrix K contains NaN or infinite values (a NaN or infinite hyperparameter, a zero length "
        "scale, or inputs so large that the kernel overflows).",
    )
    diagonal = jnp.diagonal(K, axis1=-2, axis2=-1)
    return eqx.error_if(
        K,
        ~jnp.all(diagonal >= 0),
        "the kernel matrix K has a negative diagonal entry (a negative prior variance): not a covariance matrix.",
    )
