"""The estimator's ML-II restarts (``n_restarts_optimizer``): the starts drawn, fitted, and the one kept."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from ._compile import filter_jit
from ._exceptions import GPClassError
from ._fit import fit as _fit
from ._sklearn_kernels import Translation, translate
from ._status import Status

# Where n_restarts_optimizer draws the starts of a gpclass kernel's hyperparameters (log-uniformly): scikit-learn's
# default hyperparameter bounds.  The fit itself keeps gpc.fit's box [1e-8, 1e8].
DEFAULT_START_BOUNDS = (1e-5, 1e5)


def random_starts(kernel, num_features, dtype, restarts: int, rng):
    """``restarts`` kernels to start ML-II from beside ``kernel``, gpclass kernels of its structure drawn from the
    NumPy ``rng``: each fitted hyperparameter log-uniformly within its bounds (a scikit-learn kernel's, in the order
    and with the draws of scikit-learn's ``theta``), or within scikit-learn's default bounds
    (``DEFAULT_START_BOUNDS``) for a gpclass kernel.  None without a fitted kernel hyperparameter."""
    if isinstance(kernel, Translation):
        sk = kernel.sklearn
        if not kernel.fits_anything:
            return []
        bounds = sk.bounds
        if not np.all(np.isfinite(bounds)):
            raise GPClassError(
                "n_restarts_optimizer > 0 draws starts within the kernel's bounds, which must then be finite; "
                f"got log bounds {bounds.tolist()} for {sk!r}."
            )
        return [translate(_sklearn_start(sk, rng.uniform(bounds[:, 0], bounds[:, 1])), num_features,
                          dtype).kernel for _ in range(restarts)]
    params, static = eqx.partition(kernel, eqx.is_inexact_array)
    leaves, treedef = jax.tree.flatten(params)
    if not leaves:
        return []
    sizes = [int(np.size(leaf)) for leaf in leaves]
    low, high = np.log(DEFAULT_START_BOUNDS[0]), np.log(DEFAULT_START_BOUNDS[1])
    starts = []
    for _ in range(restarts):
        values = np.split(np.exp(rng.uniform(low, high, size=sum(sizes))), np.cumsum(sizes)[:-1])
        new = [jnp.asarray(v.reshape(np.shape(leaf)), dtype) for v, leaf in zip(values, leaves)]
        starts.append(eqx.combine(jax.tree.unflatten(treedef, new), static))
    return starts


def _sklearn_start(kernel, theta):
    """A copy of scikit-learn ``kernel`` with log hyperparameters ``theta`` (in the order of ``kernel.theta``),
    each value clipped into its bounds (exp(log b) may round past b, and translate checks the start)."""
    from sklearn.base import clone

    values, i = {}, 0
    for hyperparameter in kernel.hyperparameters:
        if hyperparameter.fixed:
            continue
        size = hyperparameter.n_elements
        bounds = np.asarray(hyperparameter.bounds, np.float64).reshape(-1, 2)
        value = np.clip(np.exp(theta[i : i + size]), bounds[:, 0], bounds[:, 1])
        scalar = np.ndim(kernel.get_params()[hyperparameter.name]) == 0
        values[hyperparameter.name] = float(value[0]) if scalar else value
        i += size
    return clone(kernel).set_params(**values)


def _stacked(trees):
    """Pytrees of one structure stacked along a new first axis of every array leaf (``gpc.fit`` under vmap)."""
    return jax.tree.map(lambda *leaves: jnp.stack([jnp.asarray(leaf) for leaf in leaves]), *trees)


def _vmap_restarts(setting):
    """``vmap_restarts``: None chooses one vmapped gpc.fit over the stacked starts off a CPU, and on a CPU the
    single-start program once per start (faster there: benchmarks/README.md, ``restarts.py``; as gpc.sharded_vmap's
    one problem at a time); True or False forces either."""
    if setting is not None:
        return bool(setting)
    return jax.default_backend() != "cpu"


@filter_jit
def _fit_from_starts(method, kernels, likelihoods, X, y, mask, weights, max_steps, options):
    """``gpc.fit`` from each start (the leading axis of ``kernels`` and ``likelihoods``) on the same data in one
    vmapped call; ``throw=False``: each fit's status is in the result."""
    def one(kernel, likelihood):
        return _fit(method, kernel, likelihood, X, y, max_steps=max_steps, mask=mask, weights=weights, throw=False,
                    **options)

    return eqx.filter_vmap(one)(kernels, likelihoods)


def _best_start(values, statuses):
    """The start to keep: the largest log marginal likelihood among the converged fits (CONVERGED or AT_BOUND);
    if none converged, the largest finite one that did not fail (fit then warns with its status); failing that,
    the first
    (whose FAILED status fit reports).  Ties go to the earliest start, the given kernel first."""
    finite = np.isfinite(values)
    pool = finite & (statuses <= Status.AT_BOUND)
    pool = pool if pool.any() else finite & (statuses != Status.FAILED)
    if not pool.any():
        return 0
    return int(np.argmax(np.where(pool, values, -np.inf)))
