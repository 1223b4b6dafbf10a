"""Input checks at the API boundary: static shapes in Python, values with one branched check.

The value checks run inside jit and vmap and raise a :class:`gpclass.GPClassError`
carrying the message (``_errors.branched_error_if``: from the compiled program,
or, for an entry point called at the top level, from Python after the call).
An entry point gathers its value checks in one :class:`Checks` and attaches
them together: each separately attached check adds a conditional (and, raised
from the program, host callbacks) to every compiled program (the compiled
Laplace evidence held 5 conditionals and 10 callbacks with separate checks, 2
and 4 with gathered ones, one pair being the solver's convergence check).
"""

import jax
import jax.numpy as jnp
import numpy as np

from ._errors import AT, Located, branched_error_if, placed_message, static_message
from ._exceptions import GPClassError
from ._types import Array, Bool, Float


class Checks:
    """Failure conditions gathered at trace time and attached together: the first true one is raised.

    ``fail_if(pred, message)`` records a condition; ``attach(x)`` returns ``x``
    (any pytree) with one ``eqx.branched_error_if`` over all of them, so the
    check runs wherever anything computed from ``x`` is used.
    """

    def __init__(self):
        self._conditions: list[tuple[Bool[Array, ""], str, Located | None]] = []

    def fail_if(self, pred, message: str, at: tuple[str, object] | None = None) -> None:
        """Fail with ``message`` if any entry of ``pred`` is true.

        ``at = (describe, values)``: the message names its first offending
        entry where it holds ``{at}`` (``_errors.Located``: ``describe`` formats
        ``index`` and ``value``, e.g. ``"y[{index}] = {value}"``; ``values`` has
        ``pred``'s shape), when raised by an entry point called at the top
        level; a check raised from the program drops ``{at}``.
        """
        located = None if at is None else Located(at[0], pred, at[1])
        self._conditions.append((jnp.any(pred), message, located))

    def raise_now(self) -> None:
        """On the host, with concrete values (``gpc.fit_svgp``'s set-up): raise the first failed condition as a
        returned check gives it, with its first offending entry."""
        for pred, message, located in self._conditions:
            if bool(pred):
                if located is None:
                    raise GPClassError(static_message(message))
                position, value = located.place()
                raise GPClassError(placed_message(message, located.static(), position, value))

    def attach(self, x):
        if not self._conditions:
            return x
        preds = jnp.stack([pred for pred, _, _ in self._conditions])
        return branched_error_if(x, jnp.any(preds), jnp.argmax(preds), [m for _, m, _ in self._conditions],
                                 [located for _, _, located in self._conditions])


def parameter_at(name: str, value) -> tuple[str, object]:
    """``Checks.fail_if``'s ``at`` for a parameter: ``got name = v`` for a scalar, ``the first: name[i] = v`` for an
    array (an ARD length scale, a kernel stacked per class)."""
    describe = f"got {name} = {{value}}" if jnp.ndim(value) == 0 else f"the first: {name}[{{index}}] = {{value}}"
    return describe, value


def _own(checks):
    """(checks, whether the caller made them): a check function called alone attaches its own checks."""
    return (Checks(), True) if checks is None else (checks, False)


def concrete_or_none(x) -> np.ndarray | None:
    """``x`` as a NumPy array if its value is known now, None if it is traced: a constructor checks a concrete
    parameter at once and leaves a traced one to the run-time checks (``parameter_checks``)."""
    try:
        return np.asarray(x)
    except jax.errors.TracerArrayConversionError:
        return None


def check_inputs(X, name: str = "X", *, allow_empty: bool = False, checks: Checks | None = None) -> Float[Array, "n d"]:
    """A finite (n, d) float array with n >= 1 (n >= 0 with ``allow_empty``: test inputs).

    Integers and booleans are cast to JAX's default float dtype, half
    precision (float16, bfloat16) to float32, the lowest precision the
    factorisations support; other floats are kept.

    With ``checks``, the value check is added to them (the caller attaches
    them); without, it is attached to the result.  The same for every check
    below.
    """
    X = jnp.asarray(X)
    if X.ndim != 2:
        remedy = (f"use {name}[:, None] for one input dimension" if X.ndim == 1 else
                  f"flatten each case's inputs into one row, {name}.reshape(len({name}), -1)" if X.ndim > 2 else
                  "pass one row per case")
        raise GPClassError(f"{name} must have shape (n, d), one row per case and one column per input; got shape "
                           f"{X.shape}: {remedy}.")
    if X.shape[0] == 0 and not allow_empty:
        raise GPClassError(f"{name} is empty (shape {X.shape}); pass at least one case (one row).")
    if not jnp.issubdtype(X.dtype, jnp.floating):
        X = X.astype(jnp.result_type(float))
    elif jnp.finfo(X.dtype).bits < 32:  # float16, bfloat16: no factorisations; computed in float32
        X = X.astype(jnp.float32)
    checks, own = _own(checks)
    checks.fail_if(~jnp.isfinite(X), f"{name} contains NaN or infinite values{AT}; drop or impute those cases "
                   f"(np.isfinite({name}).all(axis=1) marks the rows that are usable).",
                   at=(f"the first: {name}[{{index}}] = {{value}}", X))
    return checks.attach(X) if own else X


def check_binary_labels(y, n: int, dtype, checks: Checks | None = None) -> Float[Array, " n"]:
    """Labels as floats in {-1, +1}.

    Accepted codings: {-1, +1}; {0, 1} (0 means -1); booleans (False means -1).
    Anything else, or a vector mixing 0 and -1, is an error.
    """
    y = jnp.asarray(y)
    check_label_shape(y, n)
    if y.dtype == jnp.bool_:
        return jnp.where(y, 1.0, -1.0).astype(dtype)
    checks, own = _own(checks)
    for pred, message, describe in _binary_label_failures(y, jnp):
        checks.fail_if(pred, message, at=(describe, y))
    labels = jnp.where(y > 0, 1.0, -1.0).astype(dtype)
    return checks.attach(labels) if own else labels


def host_binary_labels(y: np.ndarray, dtype) -> np.ndarray:
    """:func:`check_binary_labels` on the host, in NumPy (``gpc.fit_svgp`` checks its data before any reach a
    device), with the same messages; the shape is the caller's to check."""
    if y.dtype == np.bool_:
        return np.where(y, 1.0, -1.0).astype(dtype)
    raise_first_failure(_binary_label_failures(y, np), y)
    return np.where(y > 0, 1.0, -1.0).astype(dtype)


def _binary_label_failures(y, xp):
    """(pred, message, describe) of each value check of binary labels ``y`` (not booleans), in order; ``xp`` is
    ``jnp`` or ``np``."""
    failures = []
    if xp.issubdtype(y.dtype, xp.inexact):
        failures.append((xp.isnan(y), f"binary labels y contain NaN{AT}; missing labels are not supported: drop "
                         "those cases.", "the first at y[{index}]"))
    valid = (y == 1) | (y == -1) | (y == 0) | xp.isnan(y)  # NaN has its own message above
    failures.append((~valid, f"binary labels y must be in {{-1, +1}}, {{0, 1}} or booleans{AT}. For more than two "
                     "classes use gpc.likelihoods.Softmax(C) with labels 0..C-1.",
                     "the first that is not: y[{index}] = {value}"))
    failures.append(((y == -1) & xp.any(y == 0), f"binary labels y mix the codings {{0, 1}} and {{-1, +1}}: both 0 "
                     f"and -1 occur{AT}; use one coding, 0/1 or -1/+1.", "the first -1 at y[{index}]"))
    return failures


def raise_first_failure(failures, values) -> None:
    """On the host: raise the message of the first failure (pred, message, describe) whose ``pred`` (a NumPy
    array of ``values``' shape) holds anywhere, naming its first offending entry as a returned check does."""
    for pred, message, describe in failures:
        pred = np.broadcast_to(pred, np.shape(values))
        if np.any(pred):
            position = int(np.argmax(pred.ravel()))
            raise GPClassError(placed_message(message, (describe, np.shape(values)), position,
                                              np.ravel(values)[position]))


def check_label_shape(y, n: int) -> None:
    """Labels of shape (n,), one per row of X, else an error saying how to get them."""
    if jnp.shape(y) != (n,):
        remedy = ("flatten them, np.ravel(y)" if jnp.size(y) == n else
                  f"pass the labels of the same cases as X (X has {n} rows)")
        raise GPClassError(f"y must have shape ({n},) to match X, one label per case; got shape {jnp.shape(y)}: "
                           f"{remedy}.")


def check_class_labels(y, n: int, num_classes: int, dtype, checks: Checks | None = None, likelihood: str = "Softmax",
                       soft: bool = False) -> Float[Array, "n C"]:
    """Integer class labels 0..C-1 as the 0/1 indicator matrix Y of shape (n, C) (GPML's y, eq. 3.35).

    Floats are accepted when they hold whole numbers; anything else (a
    fraction, a label outside 0..C-1, a NaN, booleans) is an error.  With ``soft``, an (n, C) array is taken
    as it is: each row the class probabilities of a case (soft labels), checked finite, >= 0 and summing to
    one (to 1e-6 in float64, 1e-4 in float32).
    """
    checks, own = _own(checks)
    if jnp.ndim(y) == 2:
        if not soft:
            raise GPClassError(f"{likelihood} takes integer labels 0..{num_classes - 1} of shape ({n},); y has "
                               f"shape {jnp.shape(y)}. Rows of class probabilities (soft labels) are for "
                               "gpc.likelihoods.Softmax; for one-hot rows pass np.argmax(y, axis=1).")
        Y = _class_probabilities(y, n, num_classes, checks).astype(dtype)
        return checks.attach(Y) if own else Y
    y = class_indices(y, n, num_classes, checks, "multi-class", likelihood)
    indicators = (y.astype(jnp.int32)[:, None] == jnp.arange(num_classes)).astype(dtype)
    return checks.attach(indicators) if own else indicators


def _class_probabilities(y, n: int, num_classes: int, checks: Checks):
    """Soft multi-class labels: an (n, C) float array whose rows are probabilities (shape and dtype now, the
    values in ``checks``)."""
    y = jnp.asarray(y)
    if y.shape != (n, num_classes):
        raise GPClassError(f"soft labels must have shape ({n}, {num_classes}), a row of class probabilities per "
                           f"case; y has shape {y.shape}. Integer labels 0..{num_classes - 1} have shape ({n},).")
    if not jnp.issubdtype(y.dtype, jnp.floating):
        raise GPClassError(f"soft labels must be floats (class probabilities); y has dtype {y.dtype}: pass "
                           "y.astype(float), or integer labels of shape (n,).")
    tol = 1e-6 if y.dtype == jnp.float64 else 1e-4
    checks.fail_if(~jnp.isfinite(y) | (y < 0), f"soft labels y must be finite probabilities >= 0{AT}.",
                   at=("the first that is not: y[{index}] = {value}", y))
    sums = jnp.sum(y, axis=1)
    checks.fail_if(jnp.abs(sums - 1.0) > tol,
                   f"each row of soft labels y must sum to one (to {tol:g}): a case's class probabilities{AT}; "
                   "normalise the rows, y / y.sum(axis=1, keepdims=True).", at=("row {index} sums to {value}", sums))
    return y


def check_ordinal_labels(y, n: int, num_classes: int, dtype, checks: Checks | None = None) -> Float[Array, " n"]:
    """Ordered class labels 0..K-1 as floats of ``dtype`` (``gpc.likelihoods.Ordinal``).

    Integers, or floats holding whole numbers; anything else (a fraction, a
    label outside 0..K-1, a NaN, booleans) is an error.
    """
    checks, own = _own(checks)
    labels = class_indices(y, n, num_classes, checks, "ordinal", "Ordinal").astype(dtype)
    return checks.attach(labels) if own else labels


def class_indices(y, n: int, num_classes: int, checks: Checks, kind: str, likelihood: str):
    """``y`` as an array of class indices 0..num_classes-1: its shape and dtype checked now, its values (whole,
    not NaN, in range) added to ``checks``; ``kind`` and ``likelihood`` name the labels in the messages."""
    y = jnp.asarray(y)
    check_label_shape(y, n)
    _check_class_dtype(y, num_classes, kind)
    for pred, message, describe in _class_index_failures(y, num_classes, kind, likelihood, jnp):
        checks.fail_if(pred, message, at=(describe, y))
    return y


def host_class_indices(y: np.ndarray, num_classes: int, kind: str, likelihood: str) -> np.ndarray:
    """:func:`_class_indices` on the host, in NumPy (``gpc.fit_svgp``), with the same messages; the shape is the
    caller's to check."""
    _check_class_dtype(y, num_classes, kind)
    raise_first_failure(_class_index_failures(y, num_classes, kind, likelihood, np), y)
    return y


def _check_class_dtype(y, num_classes: int, kind: str) -> None:
    if y.dtype == np.bool_ or not (np.issubdtype(y.dtype, np.integer) or np.issubdtype(y.dtype, np.floating)):
        raise GPClassError(f"{kind} labels must be integers 0..{num_classes - 1}; y has dtype {y.dtype}: encode "
                           "the classes as integers, e.g. np.unique(y, return_inverse=True)[1].")


def _class_index_failures(y, num_classes: int, kind: str, likelihood: str, xp):
    """(pred, message, describe) of each value check of class indices ``y`` (whole, not NaN, in 0..C-1), in
    order; ``xp`` is ``jnp`` or ``np``."""
    last = num_classes - 1
    failures = []
    if xp.issubdtype(y.dtype, xp.floating):
        failures.append((xp.isnan(y), f"{kind} labels y contain NaN{AT}; they must be whole numbers 0..{last} "
                         "(missing labels are not supported: drop those cases).", "the first at y[{index}]"))
        failures.append(((y != xp.round(y)) & ~xp.isnan(y),
                         f"{kind} labels y must be whole numbers 0..{last}; got a fraction{AT}: encode the classes "
                         "as integers, e.g. np.unique(y, return_inverse=True)[1] numbers them in sorted order.",
                         "the first: y[{index}] = {value}"))
    failures.append((
        (y < 0) | (y > last),
        f"{kind} labels y must lie in 0..{last} for {likelihood}({num_classes}){AT}: number the classes "
        f"0..{last}, or give {likelihood} the number of classes the labels hold.",
        "the first outside: y[{index}] = {value}",
    ))
    return failures


def binary_one_class(y) -> Bool[Array, ""]:
    """Whether checked labels ({-1, +1} floats, or (n, C) indicators) show fewer than two classes."""
    if y.ndim == 2:
        return jnp.sum(jnp.any(y > 0, axis=0)) < 2
    return ~jnp.any(y > 0) | ~jnp.any(y < 0)  # left-out cases (label 0, ``mask``) are neither


def check_two_classes(y, checks: Checks | None = None, one_class=None):
    """Checked labels ({-1, +1} floats, or the (n, C) indicators of ``check_class_labels``) of at least two
    classes, else an error.

    With one class, ML-II has no finite maximiser: the evidence keeps
    increasing as the length scale and the signal variance grow (a constant
    latent function of the observed class's sign; log q tends to about
    log 1/2, measured with Laplace and EP).  A run-time check, so it also
    raises inside jit and vmap.  ``one_class``: the likelihood's own test
    (``likelihood.one_class(y)``: ordinal labels 0..K-1), if given.
    """
    if one_class is None:
        one_class = binary_one_class(y)
    checks, own = _own(checks)
    checks.fail_if(
        one_class,
        "fit: every training label in y is of one class; ML-II needs labels of at least two classes "
        "(with one class the evidence keeps increasing with the length scale and signal variance: "
        "no finite maximiser). Add cases of another class, or hold the hyperparameters fixed and call gpc.infer.",
    )
    return checks.attach(y) if own else y


def check_covariance(K: Float[Array, "*C n n"], checks: Checks | None = None) -> Float[Array, "*C n n"]:
    """A prior covariance matrix whose entries are finite and whose diagonal (the prior variances) is >= 0.

    These are the O(n^2) necessary conditions for a positive semi-definite K;
    they catch NaN or infinite hyperparameters, zero length scales, negative
    variances and inputs so large that the kernel overflows.  Positive
    semi-definiteness itself needs a factorisation: the sampling methods
    factorise K and raise if that fails, the Gaussian methods factorise only
    B = I + W^1/2 K W^1/2 and trust the kernel (every built-in kernel with
    valid hyperparameters is positive semi-definite).
    """
    checks, own = _own(checks)
    checks.fail_if(
        ~jnp.isfinite(K),
        "the kernel matrix K contains NaN or infinite values (a NaN or infinite hyperparameter, a zero length "
        "scale, or inputs so large that the kernel overflows): check the kernel's hyperparameters, and standardise "
        "X (gpc.datasets.standardize).",
    )
    checks.fail_if(
        jnp.diagonal(K, axis1=-2, axis2=-1) < 0,
        "the kernel matrix K has a negative diagonal entry (a negative prior variance): not a covariance matrix; "
        "check the kernel's variance parameters (a Precomputed K: its diagonal).",
    )
    return checks.attach(K) if own else K


def check_covariance_operator(op, checks: Checks | None = None):
    """A sparse prior's factors Phi = K_nu L_uu^-T and g = diag(K - Q) are finite (``check_covariance`` for K~)."""
    checks, own = _own(checks)
    checks.fail_if(
        ~(jnp.all(jnp.isfinite(op.Phi)) & jnp.all(jnp.isfinite(op.chol_uu))),
        "the sparse prior's K_un or K_uu contains NaN or infinite values (a NaN or infinite hyperparameter or "
        "inducing input, or a K_uu that is not positive definite: repeated inducing inputs with jitter=0): check "
        "the hyperparameters and the inducing inputs Z of gpc.Sparse(kernel, Z), or give Sparse a positive jitter.",
    )
    checks.fail_if(~jnp.isfinite(op.g), "the kernel's prior variances diag K contain NaN or infinite values: check "
                   "the kernel's hyperparameters, and standardise X (gpc.datasets.standardize).")
    return checks.attach(op) if own else op


def require_setting(owner: str, name: str, value, *, low: float = 0.0, high: float = float("inf"),
                    low_open: bool = True, high_open: bool = True, integer: bool = False,
                    optional: bool = False) -> None:
    """A static configuration value (a method's, a sampler's, a fit's) checked at construction, in Python.

    ``value`` must be a real number (an integer if ``integer``) in the interval
    from ``low`` to ``high``, open or closed at each end as given, or ``None``
    if ``optional``.  Booleans and NaN are refused.  Raises a
    :class:`gpclass.GPClassError` naming ``owner`` and ``name``: a setting
    such as ``EP(damping=0)`` would otherwise run and report success with a
    wrong answer (no site moves).
    """
    if value is None and optional:
        return
    interval = f"{'(' if low_open else '['}{_number(low)}, {_number(high)}{')' if high_open else ']'}"
    kind = "an integer" if integer else "a number"
    if integer:
        ok = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    else:
        ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if ok:
        v = float(value)
        ok = (v > low if low_open else v >= low) and (v < high if high_open else v <= high)
    if not ok:
        none = " or None" if optional else ""
        raise GPClassError(f"{owner}: {name} must be {kind} in {interval}{none}; got {value!r}.")


def _number(x: float) -> str:
    return {float("inf"): "inf", float("-inf"): "-inf"}.get(x, f"{x:g}")


def as_float(value) -> Array:
    """A parameter as a floating-point JAX array: integers and booleans are cast to JAX's default float dtype
    (float64 with x64 on, else float32), floats and traced values are kept as they are.

    The converter of every hyperparameter field (kernels, likelihoods,
    inducing inputs), so that ``SquaredExponential(1, 2)`` has parameters that
    ``gpc.fit`` can fit; use it for the fields of a kernel or likelihood of your own
    (``gpc.fit`` refuses a Python number where it would fit a parameter).

    Example::

        >>> gpc.kernels.as_float(2).dtype == jnp.result_type(float), gpc.kernels.as_float(jnp.float32(0.5)).dtype
        (True, dtype('float32'))
        >>> import equinox as eqx
        >>> class Brownian(gpc.kernels.AbstractKernel):
        ...     variance: jax.Array = eqx.field(converter=gpc.kernels.as_float, default=1.0)
        ...     def evaluate(self, x1, x2):
        ...         return self.variance * jnp.minimum(x1[0], x2[0])
        >>> Brownian(2).variance.dtype == jnp.result_type(float)
        True
    """
    if not isinstance(value, jax.Array) and np.asarray(value).dtype.kind not in "biufc":  # tracers are jax.Arrays
        raise GPClassError(f"a hyperparameter must be a number or an array of numbers; got {value!r} (of type "
                           f"{type(value).__name__}): pass a float such as 1.0, or an array of floats.")
    value = jnp.asarray(value)
    if not jnp.issubdtype(value.dtype, jnp.inexact):
        value = value.astype(jnp.result_type(float))
    return value


def require_key(who: str, key, *, optional: bool = False) -> None:
    """A JAX PRNG key (or an array of them): a typed key from ``jax.random.key`` or a raw uint32 one from
    ``jax.random.PRNGKey``, else an error naming ``who``; ``None`` passes when ``optional``."""
    if key is None and optional:
        return
    dtype = getattr(key, "dtype", None)
    typed = dtype is not None and jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key)
    raw = dtype == np.uint32 and np.shape(key)[-1:] == (2,)
    if not (typed or raw):
        shown = repr(key) if len(repr(key)) <= 40 else f"{type(key).__name__}"
        raise GPClassError(f"{who}: key must be a JAX PRNG key, e.g. key=jax.random.key(0); got {shown}.")


def require_optimizer(who: str, optimizer, *, default: str) -> None:
    """An optax transformation (anything with ``init`` and ``update``) or None, else an error naming ``who``."""
    if optimizer is not None and not (callable(getattr(optimizer, "init", None))
                                      and callable(getattr(optimizer, "update", None))):
        raise GPClassError(f"{who}: optimizer must be an optax transformation, e.g. optax.adam(0.01), or None "
                           f"({default}); got {optimizer!r}.")
