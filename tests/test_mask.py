"""Ragged data sets in one batched call: padded cases (``mask=False``) contribute nothing.

The truth is the unpadded problem: the same method on the kept cases only.  Padding rows are arbitrary finite
inputs (copies of real cases and far-away points) with arbitrary labels.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import standardised_subset

import gpclass as gpc

LOGISTIC, PROBIT = gpc.likelihoods.Logistic(), gpc.likelihoods.Probit()
KERNEL = gpc.kernels.SquaredExponential(np.float64(2.0), np.float64(3.0))
X, Y = standardised_subset("pima", 5, n=40)


def padded(X, y, extra, seed=0):
    """X, y with ``extra`` padding rows appended (a repeated real row, random far points), and the mask."""
    rng = np.random.default_rng(seed)
    pad_X = np.concatenate([X[:1], 5.0 * rng.normal(size=(extra - 1, X.shape[1]))])
    pad_y = rng.choice([-1.0, 1.0], size=extra)
    mask = np.concatenate([np.ones(len(y), bool), np.zeros(extra, bool)])
    return np.concatenate([X, pad_X]), np.concatenate([y, pad_y]), mask


@pytest.mark.parametrize("method, likelihood", [
    (gpc.Laplace(), LOGISTIC), (gpc.EP(), PROBIT), (gpc.KL(), LOGISTIC),
    (gpc.EP(), gpc.likelihoods.LabelNoise(PROBIT, np.float64(0.05))),  # the implicit adjoint of its clipped sites
])
def test_padded_cases_change_nothing(method, likelihood):
    Xp, yp, mask = padded(X, Y, 6)
    full = gpc.infer(method, KERNEL, likelihood, X, Y)
    masked = gpc.infer(method, KERNEL, likelihood, Xp, yp, mask=mask)
    np.testing.assert_allclose(masked.log_marginal, full.log_marginal, rtol=1e-9)
    np.testing.assert_allclose(masked.mean[:40], full.mean, atol=1e-7)
    X_test = np.random.default_rng(3).normal(size=(5, X.shape[1]))
    np.testing.assert_allclose(gpc.predict(masked, X_test), gpc.predict(full, X_test), atol=1e-8)


def test_sparse_prior_with_padding():
    Xp, yp, mask = padded(X, Y, 6)
    Z = X[:6] + 0.1
    full = gpc.infer(gpc.Laplace(), gpc.Sparse(KERNEL, Z), LOGISTIC, X, Y)
    masked = gpc.infer(gpc.Laplace(), gpc.Sparse(KERNEL, Z), LOGISTIC, Xp, yp, mask=mask)
    np.testing.assert_allclose(masked.log_marginal, full.log_marginal, rtol=1e-10)


def test_gradients_equal_the_unpadded_problem():
    Xp, yp, mask = padded(X, Y, 6)

    def log_q(log_v, X, y, mask):
        kernel = gpc.kernels.SquaredExponential(jnp.exp(log_v), np.float64(3.0))
        return gpc.infer(gpc.Laplace(), kernel, LOGISTIC, X, y, mask=mask).log_marginal

    grad = jax.grad(log_q)
    np.testing.assert_allclose(grad(np.log(2.0), Xp, yp, mask), grad(np.log(2.0), X, Y, np.ones(40, bool)), rtol=1e-8)


def test_ragged_data_sets_in_one_vmapped_fit():
    """Data sets of 40 and 27 cases padded to 41 and fitted in one vmap: each equals its own fit (objective and
    hyperparameters)."""
    sizes = [40, 27]
    Xs, ys, masks = [], [], []
    for k, n in enumerate(sizes):
        Xk, yk, mk = padded(X[:n], Y[:n], 40 - n + 1, seed=k)
        Xs.append(Xk[:41]), ys.append(yk[:41]), masks.append(mk[:41])
    fits = jax.vmap(lambda X, y, m: gpc.fit(gpc.Laplace(), KERNEL, LOGISTIC, X, y, mask=m))(
        np.stack(Xs), np.stack(ys), np.stack(masks))
    for k, n in enumerate(sizes):
        one = gpc.fit(gpc.Laplace(), KERNEL, LOGISTIC, X[:n], Y[:n])
        np.testing.assert_allclose(fits.objective[k], one.objective, rtol=1e-9)
        np.testing.assert_allclose(fits.kernel.lengthscale[k], one.kernel.lengthscale, rtol=1e-4)


def test_bad_masks_raise():
    with pytest.raises(ValueError, match="booleans of shape"):
        gpc.infer(gpc.Laplace(), KERNEL, LOGISTIC, X, Y, mask=np.ones(39, bool))
    with pytest.raises(ValueError, match="mask: supported"):
        gpc.infer(gpc.JaakkolaJordan(), KERNEL, LOGISTIC, X, Y, mask=np.ones(40, bool))
    with pytest.raises(ValueError, match="mask: supported"):
        gpc.infer(gpc.Laplace(), KERNEL, gpc.likelihoods.Softmax(3), X, np.zeros(40, int), mask=np.ones(40, bool))
    with pytest.raises(eqx.EquinoxRuntimeError, match="every case is left out"):
        gpc.infer(gpc.Laplace(), KERNEL, LOGISTIC, X, Y, mask=np.zeros(40, bool))
    one_class_kept = np.where(Y > 0, True, False)
    with pytest.raises(eqx.EquinoxRuntimeError, match="one class"):
        gpc.fit(gpc.Laplace(), KERNEL, LOGISTIC, X, Y, mask=one_class_kept)
