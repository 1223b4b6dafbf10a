"""gpc.fit's parameter space: which leaves are fitted (``trainable``), the unconstrained coordinates of each
(log theta, logit(theta / u), or the value itself) and the box of each coordinate (``bounds``).

See :func:`gpclass.fit` for the arguments and ``_fit.py``'s module docstring for what the box does.
"""

import math
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from . import _box as box
from ._errors import AT
from ._exceptions import GPClassError
from ._validation import Checks, parameter_at


def trainable_spec(tree, trainable, who: str = "fit"):
    """A boolean pytree with the structure of ``tree``: True at the floating-point parameters ``fit`` fits.

    A Python number where a parameter would be fitted is refused (:func:`_refuse_python_numbers`): arrays are the
    parameters, as in equinox, and skipping the number would leave it at its start without a word."""
    if trainable is None:
        _refuse_python_numbers(tree, None, who)
        return _without_data(tree, jax.tree.map(eqx.is_inexact_array, tree))

    def broadcast(flag, subtree):
        if not isinstance(flag, (bool, np.bool_)):
            shown = f"an array of dtype {flag.dtype}" if hasattr(flag, "dtype") else repr(flag)
            raise GPClassError(
                f"{who}: trainable must hold True or False (Python booleans); got {shown}. Build it with "
                "jax.tree.map(lambda _: True, (kernel, likelihood)) and eqx.tree_at (kernel constructors turn "
                "booleans into floats)."
            )
        return jax.tree.map(lambda _: bool(flag), subtree)

    try:
        wanted = jax.tree.map(broadcast, trainable, tree)
    except GPClassError:
        raise
    except (ValueError, TypeError) as error:
        raise GPClassError(
            f"{who}: trainable must be True, False or a pytree of them with the structure of (kernel, likelihood), "
            f"or a prefix of it; got {trainable!r} ({error})"
        ) from None
    _refuse_python_numbers(tree, wanted, who)
    return _without_data(tree, jax.tree.map(lambda want, leaf: want and eqx.is_inexact_array(leaf), wanted, tree))


def _without_data(tree, spec):
    """``spec`` with False at the leaves a module declares ``data_fields`` (``Precomputed``'s Gram matrix): data
    that no fit changes, not N^2 hyperparameters."""
    declared, _ = _declared(tree, tree, "data_fields")
    flags, treedef = jax.tree.flatten(spec)
    return jax.tree.unflatten(treedef, [flag and data is None for flag, data in zip(flags, declared)])


def _refuse_python_numbers(tree, wanted, who):
    """Raise if a leaf to be fitted (True in ``wanted``, or any leaf if ``wanted`` is None) is a Python number: a
    field declared ``variance: float = 1.0`` in a kernel of one's own.  Only floating-point arrays are parameters
    (equinox's convention, which ``eqx.filter_jit`` and ``eqx.partition(model, eqx.is_inexact_array)`` follow), so
    fitting would pass over it."""
    paths = jax.tree_util.tree_flatten_with_path(tree)[0]
    flags = [True] * len(paths) if wanted is None else jax.tree.leaves(wanted)
    for (path, leaf), want in zip(paths, flags):
        if want and isinstance(leaf, (int, float)) and not isinstance(leaf, bool):
            name = parameter_names_of_paths([path], isinstance(tree, tuple))[0]
            raise GPClassError(
                f"{who}: {name} is the Python {type(leaf).__name__} {leaf!r}, which {who} would not fit (only "
                "floating-point arrays are parameters, as in equinox). To fit it, declare the field with "
                "eqx.field(converter=gpc.kernels.as_float); to keep it fixed, declare it eqx.field(static=True)"
                + (" or pass trainable with False there." if who == "fit" else ".")
            )


def _per_parameter(value, tree, spec, what):
    """``value`` (a number, an array, or a pytree with the structure of ``tree`` or a prefix of it) as a list:
    its entry for each fitted parameter (the True leaves of ``spec``), in the order of ``jax.tree.leaves``."""
    try:
        full = jax.tree.map(lambda v, subtree: jax.tree.map(lambda _: _Leaf(v), subtree), value, tree)
    except (ValueError, TypeError) as error:
        raise GPClassError(
            f"fit: {what} must be a number or a pytree with the structure of (kernel, likelihood), or a prefix "
            f"of it, holding one value per parameter; got {value!r} ({error})"
        ) from None
    leaves = jax.tree.leaves(full, is_leaf=lambda x: isinstance(x, _Leaf))
    return [leaf.value for leaf, fitted in zip(leaves, jax.tree.leaves(spec)) if fitted]


class _Leaf(NamedTuple):
    """A value of a bounds tree, kept whole (a tuple or array stays one leaf) while it is matched to a parameter."""

    value: object


def global_bounds(bounds) -> bool:
    """``bounds`` is None or one (lower, upper) pair of numbers for every parameter."""
    def number(b):
        return isinstance(b, (int, float, np.integer, np.floating)) and not isinstance(b, bool)

    return bounds is None or (isinstance(bounds, (tuple, list)) and len(bounds) == 2 and all(map(number, bounds)))


def coordinate_box(params, tree, spec, bounds, dtype, checks):
    """Per free coordinate: [log lower, log upper] for hyperparameters (+-inf without ``bounds``), +-inf for
    unconstrained parameters (inducing inputs), as arrays of the coordinates' dtype: numpy arrays when the
    bounds are numbers, traced ones when a bound is an array (``fit`` traces arrays)."""
    free = unconstrained_leaves(params, tree)
    leaves = jax.tree.leaves(params)
    if global_bounds(bounds):
        lo, hi = (-math.inf, math.inf) if bounds is None else _log_bounds(bounds)
        sizes = [leaf.size for leaf in leaves]
        free = np.repeat(free, sizes)
        return np.where(free, -np.inf, lo).astype(dtype), np.where(free, np.inf, hi).astype(dtype)
    if not (isinstance(bounds, (tuple, list)) and len(bounds) == 2):
        raise GPClassError(f"fit: bounds must be None or a pair (lower, upper); got {bounds!r}.")
    lower = _per_parameter(bounds[0], tree, spec, "the lower bounds")
    upper = _per_parameter(bounds[1], tree, spec, "the upper bounds")
    xp = jnp if any(isinstance(b, jax.Array) for b in lower + upper) else np
    lo, hi, valid = [], [], []
    for leaf, unconstrained, a, b in zip(leaves, free, lower, upper):
        try:
            a, b = (xp.broadcast_to(xp.asarray(v, dtype), leaf.shape).ravel() for v in (a, b))
        except (ValueError, TypeError):
            raise GPClassError(
                f"fit: a parameter of shape {leaf.shape} has bounds of shapes {np.shape(a)} and {np.shape(b)}; "
                "a bound is a number or an array broadcastable to its parameter's shape."
            ) from None
        if unconstrained:
            a, b = xp.full(a.shape, -np.inf, dtype), xp.full(b.shape, np.inf, dtype)
        else:
            valid.append((0 < a) & (a < b) & (b < np.inf))
            a, b = xp.log(a), xp.log(b)
        lo.append(a)
        hi.append(b)
    if valid:
        ok = xp.all(xp.concatenate(valid))
        message = "fit: every bound must satisfy 0 < lower < upper < inf, parameter by parameter"
        if xp is jnp:  # traced: raised from the program
            checks.fail_if(~ok, message + ".")
        elif not ok:
            raise GPClassError(f"{message}; got bounds={bounds!r}.")
    return xp.concatenate(lo).astype(dtype), xp.concatenate(hi).astype(dtype)


def check_start_in_box(params, z0, lo, hi, bounds, checks: Checks) -> None:
    """Each fitted parameter's starting value inside its box beyond rounding (``_box.tolerance``), else an error
    naming the parameter (:func:`parameter_names`) and its first value outside; ``z0`` is ``params`` as
    free coordinates, raveled, ``lo`` and ``hi`` their box (:func:`coordinate_box`)."""
    tol = box.tolerance(z0, lo, hi)
    outside = (z0 < lo - tol) | (z0 > hi + tol)
    where = f"bounds={bounds}" if global_bounds(bounds) else "its bounds"
    offset = 0
    for leaf, name in zip(jax.tree.leaves(params), parameter_names(params)):
        checks.fail_if(outside[offset:offset + leaf.size].reshape(leaf.shape),
                       f"fit: the starting {name} lies outside {where}{AT}; start inside the bounds or widen them.",
                       at=parameter_at(name, leaf))
        offset += leaf.size


def _log_bounds(bounds):
    lower, upper = bounds
    if not (0.0 < lower < upper < math.inf):
        raise GPClassError(f"fit: bounds must be (lower, upper) with 0 < lower < upper < inf; got {bounds}.")
    return math.log(lower), math.log(upper)


def _declared(tree, params, attribute):
    """For each array leaf of ``params``, what its module declares for it in ``attribute`` (a dict of
    field -> value, or a tuple of field names, meaning True), or None.

    Matched by position in the tree (the path of each field), never by object identity: one array passed as
    two parameters (a kernel variance and a flip rate) gets each its own transform.
    """

    def declares(x):
        return isinstance(x, eqx.Module) and hasattr(x, attribute)

    found = {}
    for path, node in jax.tree_util.tree_flatten_with_path(tree, is_leaf=declares)[0]:
        if declares(node):
            values = getattr(node, attribute)
            items = values.items() if isinstance(values, dict) else ((name, True) for name in values)
            for name, value in items:
                found[(*path, jax.tree_util.GetAttrKey(name))] = value
    paths_and_leaves, treedef = jax.tree_util.tree_flatten_with_path(params)
    # A declared field may hold a pytree of arrays: match every leaf below it.
    def lookup(path):
        for k in range(len(path), 0, -1):
            if tuple(path[:k]) in found:
                return found[tuple(path[:k])]
        return None

    return [lookup(path) for path, _ in paths_and_leaves], treedef


def parameter_names(params) -> list[str]:
    """Each array leaf's name as a user writes it, its path in ``(kernel, likelihood)`` (or in the kernel alone):
    ``kernel.lengthscale``, ``kernel.k1.variance``, ``likelihood.noise``."""
    paths = [path for path, _ in jax.tree_util.tree_flatten_with_path(params)[0]]
    return parameter_names_of_paths(paths, isinstance(params, tuple))


def parameter_names_of_paths(paths, pair: bool) -> list[str]:
    """Names of leaves at ``paths`` of ``(kernel, likelihood)`` (``pair``) or of a kernel alone."""
    if pair:
        return [("kernel", "likelihood")[path[0].idx] + jax.tree_util.keystr(path[1:]) for path in paths]
    return ["kernel" + jax.tree_util.keystr(path) for path in paths]


def unconstrained_leaves(params, tree) -> list[bool]:
    """Which array leaves are declared ``unconstrained`` (e.g. ``gpc.Sparse``'s inducing inputs): real numbers
    that ``gpc.fit`` optimises on their own scale, outside the box of the log hyperparameters."""
    return [u is not None for u in _declared(tree, params, "unconstrained")[0]]


# How each caller of ``parameter_transforms`` lets a user hold a parameter fixed, as its errors say (fit_svgp
# transforms every parameter, fit_hyperparameters or not; fit_em_ep fits every kernel parameter).
_HOLD = {"fit": ", or hold it fixed with trainable", "fit_svgp": "", "fit_em_ep": ""}


def parameter_transforms(params, tree, who: str = "fit"):
    """Maps between hyperparameters and unconstrained coordinates, leaf by leaf (``who``: the caller, ``"fit"``,
    ``"fit_svgp"`` or ``"fit_em_ep"``, as its errors name it).

    A parameter in (0, inf) maps to log theta; one with a declared upper
    bound u (``upper_bounds = {"field": u}`` on its module, e.g.
    ``LabelNoise.epsilon < 1/2``) maps to logit(theta / u); one declared
    ``unconstrained = ("field",)`` (inducing inputs) maps to itself.
    ``params`` is the array part of ``tree``; out-of-range values raise (inside
    jit too): ``to_free`` adds that check to ``checks`` if given, else attaches
    it to its result.
    """
    bounds, treedef = _declared(tree, params, "upper_bounds")
    free = unconstrained_leaves(params, tree)

    def to_free(params, checks=None):
        own = checks is None
        checks = Checks() if own else checks
        out = []
        for p, u, identity, name in zip(jax.tree.leaves(params), bounds, free, parameter_names(params)):
            if identity:
                remedy = "check the inducing inputs Z" if "inducing" in name else "start from a finite value"
                checks.fail_if(~jnp.isfinite(p), f"{who}: {name} must be finite{AT}; {remedy}.",
                               at=parameter_at(name, p))
                out.append(p)
                continue
            upper = jnp.inf if u is None else u
            if u is None:
                space, start = "> 0 to be fitted in log space", "> 0, e.g. 1.0"
            else:
                space, start = f"in (0, {u:g}) to be fitted as the log-odds of theta / {u:g}", f"in (0, {u:g})"
            checks.fail_if((p <= 0) | (p >= upper), f"{who}: {name} must be {space}{AT}; start from a value "
                           f"{start}{_HOLD[who]}.", at=parameter_at(name, p))
            out.append(jnp.log(p) if u is None else jnp.log(p / u) - jnp.log1p(-p / u))
        free_params = jax.tree.unflatten(treedef, out)
        return checks.attach(free_params) if own else free_params

    def from_free(free_params):
        return jax.tree.unflatten(
            treedef,
            [x if identity else (jnp.exp(x) if u is None else u * jax.nn.sigmoid(x))
             for x, u, identity in zip(jax.tree.leaves(free_params), bounds, free)],
        )

    return to_free, from_free
