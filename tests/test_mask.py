"""Ragged data sets in one batched call: padded cases (``mask=False``) contribute nothing.

The truth is the unpadded problem: the same method on the kept cases only.  Padding rows are arbitrary finite
inputs (copies of real cases and far-away points) with arbitrary labels.

Every test pads the same 40 cases by the same 6 rows where it can, so that the programs compiled for one test
serve the others (the Laplace programs of the padded and the gradient tests, the sparse one of the bad masks).
The tests' own programs (the unpadded truths, Laplace's value and gradient, the batched fit) are compiled with
``FAST``; the other padded problems are solved by the library's entry points as they are.
"""

import functools

import jax
import numpy as np
import pytest
from conftest import FAST_COMPILE, fast_filter_jit, se_kernel, standardised_subset

import gpclass as gpc

LOGISTIC, PROBIT = gpc.likelihoods.Logistic(), gpc.likelihoods.Probit()
KERNEL = gpc.kernels.SquaredExponential(np.float64(2.0), np.float64(3.0))
X, Y = standardised_subset("pima", 5, n=40)

# gpclass's XLA options with LLVM's optimisations off as well, for the tests' own programs: they compile 2-4 times
# faster and run for milliseconds.  The arithmetic is the same IEEE operations (XLA uses no fast math): values agree
# with the optimised programs' to the last digit or two.
FAST = FAST_COMPILE


@functools.cache
def _fast_program(fn):
    return fast_filter_jit(fn)


def fast_call(fn, *args, **kwargs):
    """``fn(*args, **kwargs)`` as one program compiled with ``FAST`` (arrays traced, everything else static; a failed
    run-time check raises EquinoxRuntimeError)."""
    return _fast_program(fn)(*args, **kwargs)


def padded(X, y, extra, seed=0):
    """X, y with ``extra`` padding rows appended (a repeated real row, random far points), and the mask."""
    rng = np.random.default_rng(seed)
    pad_X = np.concatenate([X[:1], 5.0 * rng.normal(size=(extra - 1, X.shape[1]))])
    pad_y = rng.choice([-1.0, 1.0], size=extra)
    mask = np.concatenate([np.ones(len(y), bool), np.zeros(extra, bool)])
    return np.concatenate([X, pad_X]), np.concatenate([y, pad_y]), mask


XP, YP, MASK = padded(X, Y, 6)
LOG_V, LOG_L = np.log(np.float64(2.0)), np.log(np.float64(3.0))  # KERNEL's, as float64 values to differentiate


def _laplace_log_q(log_v, log_l, X, y, mask):
    post = gpc.infer(gpc.Laplace(), se_kernel(log_v, log_l), LOGISTIC, X, y, mask=mask)
    return post.log_marginal, post


# ((log q, posterior), (d/d log sigma_f^2, d/d log l)) of Laplace with the logistic likelihood: one compiled program
# per data shape (the padded and the unpadded problem), shared by the padded-case and the gradient tests.
laplace_value_and_grad = gpc.jit(jax.value_and_grad(_laplace_log_q, argnums=(0, 1), has_aux=True),
                                 compiler_options=FAST)


def full_and_masked(method, likelihood):
    """The posteriors of the unpadded problem (no mask) and of the padded one (mask)."""
    if isinstance(method, gpc.Laplace) and likelihood is LOGISTIC:  # gpc.infer inside laplace_value_and_grad
        return (laplace_value_and_grad(LOG_V, LOG_L, X, Y, None)[0][1],
                laplace_value_and_grad(LOG_V, LOG_L, XP, YP, MASK)[0][1])
    return fast_call(gpc.infer, method, KERNEL, likelihood, X, Y), gpc.infer(method, KERNEL, likelihood, XP, YP,
                                                                             mask=MASK)


@pytest.mark.parametrize("method, likelihood", [
    (gpc.Laplace(), LOGISTIC), (gpc.EP(), PROBIT), (gpc.KL(), LOGISTIC),
    (gpc.EP(), gpc.likelihoods.LabelNoise(PROBIT, np.float64(0.05))),  # the implicit adjoint of its clipped sites
])
@pytest.mark.slow
def test_padded_cases_change_nothing(method, likelihood):
    full, masked = full_and_masked(method, likelihood)
    np.testing.assert_allclose(masked.log_marginal, full.log_marginal, rtol=1e-9)
    np.testing.assert_allclose(np.asarray(masked.mean)[:40], full.mean, atol=1e-7)
    X_test = np.random.default_rng(3).normal(size=(5, X.shape[1]))
    np.testing.assert_allclose(gpc.predict(masked, X_test), fast_call(gpc.predict, full, X_test), atol=1e-8)


SPARSE = gpc.Sparse(KERNEL, X[:6] + 0.1)


def test_sparse_prior_with_padding():
    full = fast_call(gpc.infer, gpc.Laplace(), SPARSE, LOGISTIC, X, Y)
    masked = gpc.infer(gpc.Laplace(), SPARSE, LOGISTIC, XP, YP, mask=MASK)
    np.testing.assert_allclose(masked.log_marginal, full.log_marginal, rtol=1e-10)


def test_gradients_equal_the_unpadded_problem():
    """d log q / d (log sigma_f^2, log l) of the padded problem equal the unpadded problem's (no mask)."""
    padded_grad = laplace_value_and_grad(LOG_V, LOG_L, XP, YP, MASK)[1]
    np.testing.assert_allclose(padded_grad, laplace_value_and_grad(LOG_V, LOG_L, X, Y, None)[1], rtol=1e-8)


def _vmapped_fit(X, y, mask):
    """Fits of stacked padded data sets (``fast_call``: one program; an eager vmap would compile it without
    gpclass's options)."""
    return jax.vmap(lambda X, y, m: gpc.fit(gpc.Laplace(), KERNEL, LOGISTIC, X, y, mask=m))(X, y, mask)


def ragged_data_sets(sizes):
    """The first ``sizes`` cases, each set padded to 41 rows, stacked: X, y, mask."""
    Xs, ys, masks = [], [], []
    for k, n in enumerate(sizes):
        Xk, yk, mk = padded(X[:n], Y[:n], 40 - n + 1, seed=k)
        Xs.append(Xk[:41]), ys.append(yk[:41]), masks.append(mk[:41])
    return np.stack(Xs), np.stack(ys), np.stack(masks)


@pytest.mark.slow
def test_ragged_data_sets_in_one_vmapped_fit():
    """Data sets of 40 and 27 cases padded to 41 and fitted in one vmap: each equals its own fit (objective and
    hyperparameters)."""
    sizes = [40, 27]
    fits = fast_call(_vmapped_fit, *ragged_data_sets(sizes))
    for k, n in enumerate(sizes):
        one = fast_call(gpc.fit, gpc.Laplace(), KERNEL, LOGISTIC, X[:n], Y[:n])
        np.testing.assert_allclose(np.asarray(fits.objective)[k], one.objective, rtol=1e-9)
        np.testing.assert_allclose(np.asarray(fits.kernel.lengthscale)[k], one.kernel.lengthscale, rtol=1e-4)


def test_bad_masks_raise():
    with pytest.raises(ValueError, match="booleans of shape"):
        gpc.infer(gpc.Laplace(), KERNEL, LOGISTIC, X, Y, mask=np.ones(39, bool))
    with pytest.raises(ValueError, match="mask: supported"):
        gpc.infer(gpc.JaakkolaJordan(), KERNEL, LOGISTIC, X, Y, mask=np.ones(40, bool))
    with pytest.raises(ValueError, match="mask: supported"):  # (Softmax takes a mask: test_softmax_weights.py)
        gpc.infer(gpc.EP(), KERNEL, gpc.likelihoods.MultinomialProbit(3), X, np.zeros(40, int), mask=np.ones(40, bool))
    # A run-time check of the mask, before the prior is used: the sparse padded problem's program (compiled above).
    with pytest.raises(gpc.GPClassError, match="every case is left out"):
        gpc.infer(gpc.Laplace(), SPARSE, LOGISTIC, XP, YP, mask=np.zeros(46, bool))
    # fit's run-time check (it also raises inside vmap): the ragged test's program, the first set keeping one class.
    Xs, ys, masks = ragged_data_sets([40, 27])
    masks[0] &= ys[0] > 0
    with pytest.raises(gpc.GPClassError, match="one class"):
        fast_call(_vmapped_fit, Xs, ys, masks)
