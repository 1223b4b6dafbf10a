"""Case weights for the softmax (issue 36, item 5): w_i log p(y_i|f_i), the rows of the labels times w_i.

Oracles: a dense NumPy Laplace approximation of the weighted model built from the kernel's blocks (the mode by
scipy, log q from the nC x nC matrices with W_i = w_i (diag pi_i - pi_i pi_i^T)); whole-number weights against
repeated rows (exact for the dense prior and VFE, whose copies share one latent value); a weight of 0 against
leaving the case out; KL's bound against a NumPy evaluation with the same rule points; central differences.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import assert_directional_derivatives, fast_filter_jit, fast_infer, numpy_softmax_laplace
from scipy import special

import gpclass as gpc
from gpclass._inference.kl_classes import rule_points

X = np.array([[0.0], [0.4], [0.4], [1.1], [2.0], [2.6]])  # a repeated input
Y = np.array([0, 1, 2, 1, 2, 0])
W = np.array([2.0, 0.5, 1.0, 3.0, 0.0, 1.7])  # fractional, whole and 0
KERNEL = gpc.kernels.SquaredExponential(2.0, 0.9)
LIK = gpc.likelihoods.Softmax(3)
X_TEST = np.array([[-0.5], [0.7], [1.5], [3.0]])


@pytest.mark.parametrize("soft", [False, True], ids=["hard", "soft"])
def test_weighted_laplace_against_numpy(soft):
    """Fractional, whole and zero weights, a repeated input: the mode (1e-6) and log q (1e-8) against NumPy; hard
    labels and soft rows (class probabilities) alike."""
    Y_rows = np.eye(3)[Y]
    if soft:
        Y_rows = 0.7 * Y_rows + 0.1
    post = fast_infer(gpc.Laplace(), KERNEL, LIK, X, Y_rows if soft else Y, weights=W)
    F, log_q = numpy_softmax_laplace(X[:, 0], 2.0, 0.9, Y_rows, W)
    assert int(post.info.status) == gpc.Status.CONVERGED
    np.testing.assert_allclose(np.asarray(post.mean), F, atol=1e-6)
    np.testing.assert_allclose(float(post.log_marginal), log_q, rtol=1e-8)


@pytest.mark.slow
def test_whole_numbers_are_repeated_rows_and_zero_is_left_out():
    """Dense prior: weights (2, 1, 1, 3, 0, 1) give the log q and the test predictions (latent means and
    covariances) of the data with those rows repeated and the 0 left out (1e-10); ``mask`` is weight 0 or 1.
    VFE, whose copies share one latent value (K~ = Q), the same."""
    w = np.array([2.0, 1.0, 1.0, 3.0, 0.0, 1.0])
    rep = np.repeat(np.arange(6), w.astype(int))
    for prior in (KERNEL, gpc.Sparse(KERNEL, X[[0, 3, 5]], "vfe")):
        a = fast_infer(gpc.Laplace(), prior, LIK, X, Y, weights=w)
        b = fast_infer(gpc.Laplace(), prior, LIK, X[rep], Y[rep])
        np.testing.assert_allclose(float(a.log_marginal), float(b.log_marginal), rtol=1e-10)
        for u, v in zip(a._latent(X_TEST), b._latent(X_TEST)):
            np.testing.assert_allclose(np.asarray(u), np.asarray(v), atol=1e-10)
    masked = fast_infer(gpc.Laplace(), KERNEL, LIK, X, Y, mask=w > 0)
    dropped = fast_infer(gpc.Laplace(), KERNEL, LIK, X[w > 0], Y[w > 0])
    np.testing.assert_allclose(float(masked.log_marginal), float(dropped.log_marginal), rtol=1e-10)


def test_fitc_at_z_equal_x_is_dense():
    """FITC with the distinct inputs as inducing points is the dense prior (K~ = K up to the sparse prior's jitter):
    weighted log q to 1e-6, the latent test means and covariances to 2e-5 (unweighted, the gap is the same:
    5e-6)."""
    prior = gpc.Sparse(KERNEL, X[[0, 1, 3, 4, 5]], "fitc")
    a = fast_infer(gpc.Laplace(), prior, LIK, X, Y, weights=W)
    b = fast_infer(gpc.Laplace(), KERNEL, LIK, X, Y, weights=W)
    np.testing.assert_allclose(float(a.log_marginal), float(b.log_marginal), rtol=1e-6)
    for u, v in zip(a._latent(X_TEST), b._latent(X_TEST)):
        np.testing.assert_allclose(np.asarray(u), np.asarray(v), atol=2e-5)


@pytest.mark.parametrize("prior", ["dense", "fitc", "per_class"])
def test_weighted_laplace_gradients(prior):
    """d log q / d(log variance, log length scale) against central differences, with the fractional and zero
    weights and the repeated input; dense, FITC and a PerClass kernel (variances 1, 2, 3 times e^theta_0)."""
    def value_and_grad(theta):
        kernel = gpc.kernels.SquaredExponential(jnp.exp(theta[0]), jnp.exp(theta[1]))
        p = kernel if prior == "dense" else gpc.Sparse(kernel, X[[0, 3, 5]], "fitc")
        if prior == "per_class":
            p = gpc.kernels.PerClass([gpc.kernels.SquaredExponential(c * jnp.exp(theta[0]), jnp.exp(theta[1]))
                                      for c in (1.0, 2.0, 3.0)])
        return gpc.infer(gpc.Laplace(), p, LIK, X, Y, weights=W).log_marginal

    assert_directional_derivatives(fast_filter_jit(jax.value_and_grad(value_and_grad)),
                                   jnp.array([0.3, -0.2]), rtol=1e-6, atol=1e-8)


@pytest.mark.slow
def test_weighted_kl_against_numpy_bound():
    """KL's ELBO with weights against a NumPy evaluation of sum_i w_i E_i - KL with the method's own rule points
    (1e-9), V_c = (K^-1 + diag tau_c)^-1."""
    method = gpc.KL()
    post = gpc.infer(method, KERNEL, LIK, X, Y, weights=W)
    assert int(post.info.status) == gpc.Status.CONVERGED
    z = np.asarray(rule_points(jax.random.key(method.seed), 6, method.num_samples, 3, X.dtype))
    tau, nu = (np.asarray(s) for s in post.warm_start)
    K = np.asarray(KERNEL.gram(X, X))
    bound = 0.0
    for c in range(3):
        A = np.eye(6) + tau[c][:, None] * K
        A_inv = np.linalg.inv(A)
        V = K @ A_inv
        m, v = V @ nu[c], np.diag(V)
        bound -= 0.5 * (np.trace(A_inv) + m @ np.linalg.solve(A, nu[c]) - 6 + np.linalg.slogdet(A)[1])
        if c == 0:
            means, variances = np.zeros((6, 3)), np.zeros((6, 3))
        means[:, c], variances[:, c] = m, v
    for i in range(6):
        F = means[i] + z[i] * np.sqrt(variances[i])
        bound += W[i] * np.mean(F[:, Y[i]] - special.logsumexp(F, axis=1))
    np.testing.assert_allclose(float(post.log_marginal), bound, rtol=1e-9)


def test_log_prob_is_weighted_and_refusals():
    """log p with weighted rows is w log softmax (what MCMC and AIS use), with Y - w pi as its slope; nested EP
    refuses weights, naming the combination; negative weights raise inside jit."""
    F = np.random.default_rng(0).normal(size=(6, 3))
    rows = W[:, None] * np.eye(3)[Y]
    expected = W * (F[np.arange(6), Y] - special.logsumexp(F, axis=1))
    np.testing.assert_allclose(np.asarray(LIK.log_prob(rows, F)), expected, rtol=1e-13)
    lp, slope, _ = LIK.derivatives(rows, F)
    np.testing.assert_allclose(np.asarray(slope), rows - W[:, None] * special.softmax(F, axis=1), atol=1e-14)
    with pytest.raises(gpc.GPClassError, match="MultinomialProbit"):
        gpc.infer(gpc.EP(), KERNEL, gpc.likelihoods.MultinomialProbit(3), X, Y, weights=W)
    with pytest.raises(Exception, match="finite and >= 0"):
        jax.block_until_ready(fast_infer(gpc.Laplace(), KERNEL, LIK, X, Y, weights=-W))


@pytest.mark.slow
def test_estimator_softmax_weights():
    """The estimator's softmax with fractional sample weights and with class_weight='balanced' is gpc.infer's
    weighted model (log q 1e-8; optimize=False)."""
    from gpclass.sklearn import GaussianProcessClassifier

    fractional = np.linspace(0.2, 2.0, 6)
    balanced = 6 / (3 * np.array([np.sum(Y == c) for c in Y]))
    for kwargs, w in [({}, fractional), ({"class_weight": "balanced"}, balanced)]:
        clf = GaussianProcessClassifier(optimize=False, **kwargs)
        clf.fit(X, Y, sample_weight=None if kwargs else w)
        post = gpc.infer(gpc.Laplace(), clf.gpc_kernel_, LIK, X, Y, weights=w)
        np.testing.assert_allclose(clf.log_marginal_likelihood_value_, float(post.log_marginal), rtol=1e-8)
