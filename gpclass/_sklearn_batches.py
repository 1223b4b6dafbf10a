"""The estimator's data in compiled programs of few shapes: training sets padded to ``_training_size`` cases
(masked copies), test points in padded batches of at most ``_BATCH``, and the compiled binary and softmax
predictions (``gpclass.sklearn``'s module docstring, "Compilation")."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from . import _dense as dense
from ._compile import filter_jit
from ._predict import predict_latent as _predict_latent


def _to_numpy(tree):
    """The same pytree with NumPy arrays for its JAX arrays: picklable, and independent of any device."""
    return jax.tree.map(lambda leaf: np.asarray(leaf) if isinstance(leaf, jax.Array) else leaf, tree)


def _training_size(n):
    """The number of cases a binary model is fitted on, n <= size: 32 up to 32 cases, then multiples of an
    eighth of the power of two below n (36, 40, ..., 64, 72, ..., 128, 144, ...).

    Training sets of nearby sizes (cross-validation folds, the refit) then share one compiled program.  The
    padding costs at most 12.5 % more cases above 32 (n = 2^k + 1), so at most 1.42 times the O(n^3) work;
    below 32 padding to 32 costs little next to compiling a program (benchmarks/README.md, ``first_fit.py``).
    """
    if n <= 32:
        return 32
    step = 1 << ((n - 1).bit_length() - 4)
    return -(-n // step) * step


def _padded_training_data(X, y, weight=None):
    """X, y and the case weights (or ``None``) padded to ``_training_size`` rows with copies of the first case
    (weight 0), and the mask (False on the copies).  Masked cases have likelihood 1 (``gpc.infer``'s ``mask``):
    the posterior of the others, log q and its gradient are those of the unpadded data, and their weights
    (alpha, W) are zero, so they change no prediction."""
    n = len(y)
    rows = np.concatenate([np.arange(n), np.zeros(_training_size(n) - n, dtype=int)])
    mask = np.arange(len(rows)) < n
    return X[rows], y[rows], mask, None if weight is None else np.where(mask, weight[rows], 0).astype(weight.dtype)


_BATCH = 4096  # test points per compiled call: bounds the memory of a prediction (softmax: O(C n m))


def _padded_size(m):
    """Test batches are padded to few sizes, so that test sets of similar sizes share one compiled program:
    powers of two from 32 to 256, then steps of a quarter of the power of two below (at most 25 % padding)."""
    if m <= 256:
        return max(32, 1 << (m - 1).bit_length())
    step = 1 << ((m - 1).bit_length() - 3)
    return -(-m // step) * step


def _batched(fn, posterior, X, *args):
    """``fn(posterior, X, *args)`` as NumPy, in batches of at most ``_BATCH`` rows padded with copies of the
    batch's first row (every prediction is per test point, so the padding changes nothing and is cut off;
    zero rows would widen the range of the inputs, and with it the rounding of their distances, when the
    features are far from 0)."""
    outputs = []
    for start in range(0, max(len(X), 1), _BATCH):
        batch = X[start : start + _BATCH]
        padded = np.zeros((_padded_size(len(batch)), X.shape[1]), X.dtype)
        padded[:] = batch[:1] if len(batch) else 0.0
        padded[: len(batch)] = batch
        out = jax.tree.map(lambda a: np.asarray(a)[: len(batch)], fn(posterior, padded, *args))
        outputs.append(out)
    return jax.tree.map(lambda *parts: np.concatenate(parts), *outputs)


@filter_jit
def _binary_predictions(posterior, X):
    """Latent mean and variance (GPML Algorithm 3.2) and p(y = +1), the likelihood averaged over them."""
    mean, var = _predict_latent(posterior, X)
    return mean, var, posterior.likelihood.predictive_probability(mean, var)


@filter_jit
def _softmax_predictions(posterior, X, normals):
    """Latent means and covariances, and E[softmax(f)] for f ~ N(mean_i, cov_i) at each test point from the
    same draws z (antithetic pairs: z and -z), so that a point's value does not depend on the others."""
    mean, cov = _predict_latent(posterior, X)
    chol = jax.vmap(dense.cholesky)(cov)

    def accumulate(total, z):
        offset = jnp.einsum("mcd,d->mc", chol, z)
        return total + jax.nn.softmax(mean + offset, axis=-1) + jax.nn.softmax(mean - offset, axis=-1), None

    total, _ = lax.scan(accumulate, jnp.zeros_like(mean), normals)
    return mean, cov, total / (2 * normals.shape[0])
