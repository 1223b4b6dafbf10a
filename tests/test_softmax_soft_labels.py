"""Soft multi-class labels: rows of class probabilities as the softmax's labels (issue 36, item 5).

log p = sum_c y_ic log softmax(f_i)_c, the expected log-likelihood under the labels' distribution.  Checked
against a dense NumPy Laplace approximation built from the kernel's blocks (the mode by scipy, log q from the
nC x nC matrices), against the hard labels for one-hot rows, and the refusals.
"""

import jax
import numpy as np
import pytest
from conftest import fast_infer, numpy_softmax_laplace

import gpclass as gpc

X = np.array([[0.0], [0.4], [0.4], [1.1], [2.0], [2.6]])  # a repeated input
Y_SOFT = np.array([[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.3, 0.4], [0.0, 1.0, 0.0], [0.2, 0.2, 0.6],
                   [1 / 3, 1 / 3, 1 / 3]])
KERNEL = gpc.kernels.SquaredExponential(2.0, 0.9)
LIK = gpc.likelihoods.Softmax(3)


def test_soft_labels_laplace_against_numpy_and_one_hot_rows_are_hard_labels():
    """The mode (1e-6) and log q (1e-8) of Laplace with soft labels against the dense NumPy evaluation; one-hot
    rows give the hard labels' log q and mode to rounding (1e-12)."""
    post = fast_infer(gpc.Laplace(), KERNEL, LIK, X, Y_SOFT)
    F, log_q = numpy_softmax_laplace(X[:, 0], 2.0, 0.9, Y_SOFT)
    np.testing.assert_allclose(np.asarray(post.mean), F, atol=1e-6)
    np.testing.assert_allclose(float(post.log_marginal), log_q, rtol=1e-8)
    hard = np.array([0, 1, 2, 1, 2, 0])
    one_hot = np.eye(3)[hard]
    a = fast_infer(gpc.Laplace(), KERNEL, LIK, X, one_hot)
    b = fast_infer(gpc.Laplace(), KERNEL, LIK, X, hard)
    np.testing.assert_allclose(float(a.log_marginal), float(b.log_marginal), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(a.mean), np.asarray(b.mean), rtol=1e-12, atol=1e-12)


def test_soft_label_refusals():
    """Rows that are not probabilities raise (inside jit too); the multinomial probit takes integer labels only;
    a wrong shape is refused at the boundary."""
    bad = Y_SOFT.copy()
    bad[0] = [0.7, 0.2, 0.2]
    with pytest.raises(Exception, match="sum to one"):
        jax.block_until_ready(fast_infer(gpc.Laplace(), KERNEL, LIK, X, bad))
    negative = Y_SOFT.copy()
    negative[1] = [1.2, -0.1, -0.1]
    with pytest.raises(Exception, match=">= 0"):
        jax.block_until_ready(fast_infer(gpc.Laplace(), KERNEL, LIK, X, negative))
    with pytest.raises(gpc.GPClassError, match="soft labels must have shape"):
        gpc.infer(gpc.Laplace(), KERNEL, LIK, X, Y_SOFT[:, :2])
    with pytest.raises(gpc.GPClassError, match="MultinomialProbit takes integer labels"):
        gpc.infer(gpc.EP(), KERNEL, gpc.likelihoods.MultinomialProbit(3), X, Y_SOFT)
