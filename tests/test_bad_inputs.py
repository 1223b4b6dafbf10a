"""Bad input with no defined answer is a clear error (eagerly and under jit); input that has one gets it.

Issue 13 part 5.  Every case here runs on the same three training cases in two dimensions and a kernel of
one type, ``SquaredExponential + Linear``, so that the many error cases share a handful of compiled
programs (the suite is compile-dominated).  Setting the SE variance to 0 leaves the Linear kernel alone,
whose Gram matrix X X^T has rank 2 < 3: positive semi-definite, not definite.

Independent truths: the Gaussian methods' answers are checked against a dense evaluation in the
eigen-coordinates of K (f = U S^1/2 z over the non-zero eigenvalues, so a singular K is fine) with a plain
numpy Newton iteration, and evidences against brute-force quadrature in the same coordinates.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import gram, jit_call
from scipy.special import expit, log_expit, logsumexp, softmax
from scipy.stats import norm

import gpclass as gpc
from gpclass._validation import Checks

LOGISTIC = gpc.likelihoods.Logistic()
PROBIT = gpc.likelihoods.Probit()
SOFTMAX = gpc.likelihoods.Softmax(3)
X = np.array([[0.0, 0.2], [0.7, -0.4], [1.5, 0.5]])
X_TEST = np.array([[0.3, 0.0], [-1.0, 1.2]])
Y = np.array([1.0, -1.0, 1.0])
KEY = jax.random.key(0)


def kernel(se_variance=1.0, lengthscale=0.8, linear_variance=0.0):
    """SE + Linear with float64 (never weakly typed) parameters: every call shares one compilation."""
    f64 = lambda v: jnp.asarray(v, jnp.float64)  # noqa: E731
    return gpc.kernels.SquaredExponential(f64(se_variance), f64(lengthscale)) + gpc.kernels.Linear(f64(linear_variance))


SE = kernel()
LINEAR = kernel(se_variance=0.0, linear_variance=1.0)  # K = X X^T, rank 2 < n = 3


class OffDiagonal(gpc.kernels.AbstractKernel):
    """k(x, x') = rho for x != x', 0 for x = x': with rho = -2 added to a unit-variance kernel, |K_ij| > K_ii.

    Not a covariance function (for rho != 0), yet its K is finite with a non-negative diagonal, so only a
    factorisation of K can tell; it has no parameter checks of its own (the default of AbstractKernel).
    """

    rho: jax.Array

    def evaluate(self, x1, x2):
        return jnp.where(jnp.all(x1 == x2), 0.0, self.rho)


# --- the compiled programs every test shares ------------------------------------------------------------


@gpc.jit
def laplace(kernel, X, y):
    return gpc.infer(gpc.Laplace(), kernel, LOGISTIC, X, y)


@gpc.jit
def laplace_softmax(kernel, X, y):
    return gpc.infer(gpc.Laplace(), kernel, SOFTMAX, X, y)


@gpc.jit
def predict(posterior, X_test):
    """Binary: (p, mean, var); softmax: (mean-field p, mean, cov)."""
    integrator = gpc.integrators.MeanField() if isinstance(posterior, gpc.SoftmaxPosterior) else None
    return (gpc.predict(posterior, X_test, integrator=integrator), *gpc.predict_latent(posterior, X_test))


@gpc.jit
def other_methods(kernel, X, y):
    """log Z of EP (probit) and the KL lower bound (logistic)."""
    return (
        gpc.infer(gpc.EP(), kernel, PROBIT, X, y).log_marginal,
        gpc.infer(gpc.KL(), kernel, LOGISTIC, X, y).log_marginal,
    )


# The checks below do not depend on gpc.infer's throw (a failed factorisation of K raises regardless)
MCMC = gpc.MCMC(num_samples=1000, num_warmup=100, num_chains=4)
AIS = gpc.AIS(num_temperatures=2000, num_runs=4)


NO_RHO = (np.float64(0.0), np.float64(0.0))


@gpc.jit
def samplers(kernel, X, y, key, rho_mcmc, rho_ais):
    """MCMC's posterior mean of f and AIS's log Z (probit), each with OffDiagonal(rho) added to the kernel.

    rho = 0 adds nothing; rho = -2 makes the kernel invalid for one sampler only, so that one compiled
    program shows each sampler raising.  Always pass rho as float64 arrays (a default would be baked in).
    """
    key_mcmc, key_ais = jax.random.split(key)
    mcmc = gpc.infer(MCMC, kernel + OffDiagonal(rho_mcmc), PROBIT, X, y, key=key_mcmc)
    ais = gpc.infer(AIS, kernel + OffDiagonal(rho_ais), PROBIT, X, y, key=key_ais)
    return jnp.mean(mcmc.samples, axis=0), ais.log_marginal


# --- independent truths -----------------------------------------------------------------------------------


def whitening(K, tol=1e-10):
    """A with A A^T = K, over the eigenvalues above tol * max (f = A z, z ~ N(0, I)): works for singular K."""
    s, U = np.linalg.eigh(K)
    keep = s > tol * s.max()
    return U[:, keep] * np.sqrt(s[keep])


def log_lik_logistic(y, f):
    return log_expit(y * f)


def log_lik_probit(y, f):
    return norm.logcdf(y * f)


def exact_log_z(K, log_lik, y, nodes=60):
    """log int p(y|f) N(f|0, K) df by a tensor Gauss-Hermite rule in z (rank K <= 3)."""
    A = whitening(K)
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    r = A.shape[1]
    Z = np.stack(np.meshgrid(*([z] * r), indexing="ij"), -1).reshape(-1, r)
    log_w = np.sum(np.log(np.stack(np.meshgrid(*([w / np.sqrt(2 * np.pi)] * r), indexing="ij"), -1).reshape(-1, r)), 1)
    return logsumexp(log_w + np.sum(log_lik(y, Z @ A.T), axis=1))


def dense_laplace(K, y, K_cross, k_test):
    """Binary logistic Laplace by Newton in z (f = A z): log q (GPML eq. 3.32 via Sylvester), f^, test moments."""
    A = whitening(K)
    z = np.zeros(A.shape[1])
    for _ in range(50):
        f = A @ z
        t = (y + 1) / 2
        grad, W = t - expit(f), expit(f) * expit(-f)
        H = np.eye(len(z)) + A.T @ (W[:, None] * A)
        z = z + np.linalg.solve(H, A.T @ grad - z)
    f = A @ z
    grad, W = (y + 1) / 2 - expit(f), expit(f) * expit(-f)
    assert np.max(np.abs(A.T @ grad - z)) < 1e-13  # the Newton iteration converged
    H = np.eye(len(z)) + A.T @ (W[:, None] * A)
    log_q = np.sum(log_lik_logistic(y, f)) - 0.5 * z @ z - 0.5 * np.linalg.slogdet(H)[1]
    mean = K_cross @ grad  # f^ = K grad log p(y|f^) at the mode
    var = k_test - np.sum(K_cross * np.linalg.solve(K + np.diag(1 / W), K_cross.T).T, axis=1)
    return log_q, f, mean, var


def dense_softmax_laplace(K, labels, num_classes):
    """Softmax Laplace by Newton in z (f_c = A z_c), with the full Cn x Cn Hessian: log q (eq. 3.44) and F^."""
    A = whitening(K)
    n, r = A.shape
    Y = np.eye(num_classes)[labels]
    big_A = np.kron(np.eye(num_classes), A)  # vec by class: index c * n + i

    def precision(pi):
        """W = diag(vec pi) - Pi Pi^T (GPML eq. 3.38), Pi stacking diag(pi^c) vertically."""
        Pi = np.vstack([np.diag(pi[:, c]) for c in range(num_classes)])
        return np.diag(pi.T.reshape(-1)) - Pi @ Pi.T

    z = np.zeros(num_classes * r)
    for _ in range(50):
        F = (big_A @ z).reshape(num_classes, n).T
        pi = softmax(F, axis=1)
        H = np.eye(len(z)) + big_A.T @ precision(pi) @ big_A
        z = z + np.linalg.solve(H, big_A.T @ (Y - pi).T.reshape(-1) - z)
    F = (big_A @ z).reshape(num_classes, n).T
    assert np.max(np.abs(big_A.T @ (Y - softmax(F, axis=1)).T.reshape(-1) - z)) < 1e-13
    H = np.eye(len(z)) + big_A.T @ precision(softmax(F, axis=1)) @ big_A
    log_lik = np.sum(Y * F) - np.sum(logsumexp(F, axis=1))
    return log_lik - 0.5 * z @ z - 0.5 * np.linalg.slogdet(H)[1], F


def raises_everywhere(program, args, message, eager=None):
    """The error from a jitted program (and, if given, from the same call made eagerly)."""
    with pytest.raises(Exception, match=message):
        jax.block_until_ready(program(*args))
    if eager is not None:
        with pytest.raises(Exception, match=message):
            jax.block_until_ready(eager())


# --- labels of one class only: a well-defined posterior, answered correctly --------------------------------


@pytest.mark.parametrize("y", [np.ones(3), -np.ones(3), np.zeros(3)], ids=["+1", "-1", "0"])
def test_one_class_binary_laplace_matches_a_dense_evaluation(y):
    """One class only: the prior still pins f down, the mode is finite; log q, f^ and the predictions are right."""
    post = laplace(SE, X, y)
    y_pm = np.where(np.asarray(y, float) > 0, 1.0, -1.0)
    K_cross = gram(SE, X_TEST, X)
    log_q, f, mean, var = dense_laplace(gram(SE, X), y_pm, K_cross, np.asarray(jit_call(SE.diag, X_TEST)))
    np.testing.assert_allclose(post.log_marginal, log_q, rtol=1e-10)
    np.testing.assert_allclose(post.mean, f, rtol=1e-8)
    assert np.all(np.sign(post.mean) == y_pm)
    p, m, v = predict(post, X_TEST)
    np.testing.assert_allclose(m, mean, rtol=1e-8)
    np.testing.assert_allclose(v, var, rtol=1e-8)
    assert np.all((np.asarray(p) - 0.5) * y_pm[0] > 0)


@pytest.mark.slow
def test_one_class_binary_ep_and_kl_against_the_exact_evidence():
    """EP and KL with one class: the KL bound below the quadrature log Z, EP close to it."""
    y = -np.ones(3)
    ep, kl = other_methods(SE, X, y)
    K = gram(SE, X)
    assert float(kl) <= exact_log_z(K, log_lik_logistic, y)
    np.testing.assert_allclose(ep, exact_log_z(K, log_lik_probit, y), atol=2e-3)


def test_one_class_softmax_laplace_matches_a_dense_evaluation():
    """Multi-class with every label 1 (classes 0 and 2 unseen): log q and F^ equal a dense Cn x Cn Newton solve."""
    labels = np.array([1.0, 1.0, 1.0])  # float labels throughout: one compilation
    post = laplace_softmax(SE, X, labels)
    log_q, F = dense_softmax_laplace(gram(SE, X), labels.astype(int), 3)
    np.testing.assert_allclose(post.log_marginal, log_q, rtol=1e-10)
    np.testing.assert_allclose(post.mean, F, rtol=1e-8, atol=1e-12)
    p, _, _ = predict(post, X_TEST)
    assert np.all(np.argmax(np.asarray(p), axis=1) == 1)


@pytest.mark.slow
def test_one_class_samplers_match_quadrature():
    """AIS's log Z and MCMC's posterior mean with one class, against brute-force quadrature (Monte Carlo tolerances)."""
    y = np.ones(3)
    mean, log_z = samplers(SE, X, y, KEY, *NO_RHO)
    K = gram(SE, X)
    np.testing.assert_allclose(log_z, exact_log_z(K, log_lik_probit, y), atol=0.05)
    A = whitening(K)
    z, w = np.polynomial.hermite_e.hermegauss(40)
    Z = np.stack(np.meshgrid(z, z, z, indexing="ij"), -1).reshape(-1, 3)
    W = np.prod(np.stack(np.meshgrid(w, w, w, indexing="ij"), -1).reshape(-1, 3), axis=1)
    F = Z @ A.T
    W = W * np.exp(np.sum(log_lik_probit(y, F), axis=1))
    np.testing.assert_allclose(mean, W @ F / W.sum(), atol=0.1)  # 4000 correlated draws


# --- NaN or infinite inputs, NaN labels -------------------------------------------------------------------


def test_infinite_training_inputs_are_an_error():
    X_inf = X.copy()
    X_inf[1, 0] = np.inf
    raises_everywhere(
        laplace, (SE, X_inf, Y), "X contains NaN or infinite", lambda: gpc.infer(gpc.Laplace(), SE, LOGISTIC, X_inf, Y)
    )
    # Called directly, the error names the first offending entry and its value, and the remedy.
    with pytest.raises(gpc.GPClassError, match=r"X contains NaN or infinite values \(the first: X\[1, 0\] = inf\); "
                       "drop or impute those cases"):
        gpc.infer(gpc.Laplace(), SE, LOGISTIC, X_inf, Y)
    X_big = X * 1e200  # finite inputs, but the kernel overflows
    raises_everywhere(laplace, (SE, X_big, Y), "kernel matrix K contains NaN or infinite")


@pytest.mark.parametrize("bad", [np.inf, -np.inf, np.nan])
def test_non_finite_test_inputs_are_an_error(bad):
    post = laplace(SE, X, Y)
    X_bad = X_TEST.copy()
    X_bad[1, 1] = bad
    raises_everywhere(predict, (post, X_bad), "X_test contains NaN or infinite", lambda: gpc.predict(post, X_bad))
    with pytest.raises(gpc.GPClassError, match=rf"\(the first: X_test\[1, 1\] = {bad}\); drop or impute"):
        gpc.predict(post, X_bad)
    with pytest.raises(Exception, match="X_test contains NaN or infinite"):
        gpc.predict_latent(post, X_bad)


def test_nan_labels_are_an_error():
    y = Y.copy()
    y[1] = np.nan
    raises_everywhere(
        laplace, (SE, X, y), "binary labels y contain NaN", lambda: gpc.infer(gpc.Laplace(), SE, LOGISTIC, X, y)
    )
    with pytest.raises(gpc.GPClassError, match=r"y contain NaN \(the first at y\[1\]\); .*drop those cases"):
        gpc.infer(gpc.Laplace(), SE, LOGISTIC, X, y)
    labels = np.array([0.0, np.nan, 2.0])
    raises_everywhere(laplace_softmax, (SE, X, labels), "multi-class labels y contain NaN")


# --- parameter shapes that do not fit the inputs (static: ValueError while tracing) ------------------------


@pytest.mark.parametrize(
    "k, message",
    [
        (
            gpc.kernels.SquaredExponential(1.0, jnp.ones(3)),
            r"SquaredExponential: lengthscale has shape \(3,\) but the inputs have 2",
        ),
        (
            gpc.kernels.SquaredExponential(1.0, jnp.ones(1)),
            r"SquaredExponential: lengthscale has shape \(1,\) but the inputs have 2",
        ),
        (gpc.kernels.SquaredExponential(1.0, jnp.ones((2, 2))), r"lengthscale has shape \(2, 2\)"),
        (gpc.kernels.SquaredExponential(jnp.ones(2), 1.0), "SquaredExponential: variance must be a scalar"),
        (gpc.kernels.Linear(jnp.ones(2)), "Linear: variance must be a scalar"),
        (gpc.kernels.CategoricalOverlap(jnp.ones(3)), r"CategoricalOverlap: lengthscale has shape \(3,\)"),
        (gpc.kernels.CategoricalOverlap(jnp.ones(1)), r"CategoricalOverlap: lengthscale has shape \(1,\)"),
        (gpc.kernels.OnDims(gpc.kernels.SquaredExponential(), (0, 2)), r"OnDims: dims \(0, 2\) do not select columns"),
        (gpc.kernels.OnDims(gpc.kernels.SquaredExponential(), ()), r"OnDims: dims \(\) do not select"),
        (
            gpc.kernels.OnDims(gpc.kernels.SquaredExponential(1.0, jnp.ones(2)), (1,)),
            r"lengthscale has shape \(2,\) but the inputs have 1",
        ),
        (
            gpc.kernels.PerClass([gpc.kernels.SquaredExponential(1.0, jnp.ones(3))] * 3),
            r"lengthscale has shape \(3,\) but the inputs have 2",
        ),
    ],
    ids=[
        "se-ard-3",
        "se-ard-1",
        "se-2d",
        "se-variance",
        "linear-variance",
        "cat-3",
        "cat-1",
        "ondims-range",
        "ondims-empty",
        "ondims-ard",
        "perclass",
    ],
)
def test_parameter_shapes_that_do_not_fit_the_inputs_are_a_value_error(k, message):
    likelihood = SOFTMAX if isinstance(k, gpc.kernels.PerClass) else LOGISTIC
    y = np.array([0.0, 1.0, 2.0]) if isinstance(k, gpc.kernels.PerClass) else Y
    with pytest.raises(ValueError, match=message):
        gpc.infer(gpc.Laplace(), k, likelihood, X, y)
    with pytest.raises(ValueError, match=message):
        gpc.jit(lambda X: gpc.infer(gpc.Laplace(), k, likelihood, X, y).log_marginal)(X)
    if not isinstance(k, gpc.kernels.PerClass):
        with pytest.raises(ValueError, match=message):
            k.gram(jnp.asarray(X))


def test_matching_parameter_shapes_work():
    """ARD with one entry per dimension, OnDims with negative (Python-style) dims: the same matrices as by hand."""
    Xj = jnp.asarray(X)
    ard = gpc.kernels.SquaredExponential(2.0, jnp.array([0.5, 3.0]))
    r = (X[:, None, :] - X[None, :, :]) / np.array([0.5, 3.0])
    np.testing.assert_allclose(ard.gram(Xj), 2.0 * np.exp(-0.5 * np.sum(r**2, -1)), rtol=1e-12)
    on_last = gpc.kernels.OnDims(gpc.kernels.SquaredExponential(1.0, jnp.ones(1)), (-1,))
    np.testing.assert_allclose(on_last.gram(Xj), gpc.kernels.SquaredExponential().gram(Xj[:, 1:]), rtol=1e-12)
    np.testing.assert_allclose(on_last.diag(Xj), np.ones(3))


# --- empty test inputs: the empty prediction ----------------------------------------------------------------


def test_empty_test_inputs_give_empty_predictions():
    """A prediction at no test points is the empty array of the usual trailing shape (not an error)."""
    empty = np.zeros((0, 2))
    post = laplace(SE, X, Y)
    p, mean, var = predict(post, empty)
    assert p.shape == mean.shape == var.shape == (0,) and p.dtype == jnp.float64
    assert gpc.predict(post, empty, integrator=gpc.integrators.MacKay()).shape == (0,)
    p, mean, cov = predict(laplace_softmax(SE, X, np.array([0.0, 1.0, 2.0])), empty)
    assert (p.shape, mean.shape, cov.shape) == ((0, 3), (0, 3), (0, 3, 3))
    with pytest.raises(ValueError, match="X_test has 3 input dimensions"):
        gpc.predict(post, np.zeros((0, 3)))
    with pytest.raises(ValueError, match=r"X_test must have shape \(n, d\)"):
        gpc.predict(post, np.zeros(0))
    with pytest.raises(ValueError, match="X is empty"):  # training data stay non-empty
        gpc.infer(gpc.Laplace(), SE, LOGISTIC, empty, np.zeros(0))


# --- invalid and singular kernels ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "k, message",
    [
        (kernel(se_variance=-1.0), "SquaredExponential: variance must be finite and >= 0"),
        (kernel(se_variance=np.nan), "SquaredExponential: variance must be finite and >= 0"),
        (kernel(lengthscale=np.nan), "SquaredExponential: lengthscale must be finite and > 0"),
        (kernel(lengthscale=0.0), "SquaredExponential: lengthscale must be finite and > 0"),
        (kernel(linear_variance=-0.1), "Linear: variance must be finite and >= 0"),
    ],
    ids=["negative-variance", "nan-variance", "nan-lengthscale", "zero-lengthscale", "negative-linear"],
)
def test_invalid_kernels_are_an_error_for_every_method(k, message):
    """Every method names the bad parameter (not a solver's 'did not converge' or a failed factorisation of K)."""
    raises_everywhere(laplace, (k, X, Y), message, lambda: gpc.infer(gpc.Laplace(), k, LOGISTIC, X, Y))
    raises_everywhere(laplace_softmax, (k, X, np.array([0.0, 1.0, 2.0])), message)
    raises_everywhere(other_methods, (k, X, Y), message)
    raises_everywhere(samplers, (k, X, Y, KEY, *NO_RHO), message)


def test_other_kernels_check_their_parameters():
    """White, Constant and CategoricalOverlap (no compiled inference needed: the checks run eagerly)."""
    for k, message in [
        (gpc.kernels.White(-1e-3), "White: variance must be"),
        (gpc.kernels.Constant(np.nan), "Constant: variance must be"),
        (gpc.kernels.CategoricalOverlap(np.array([1.0, 0.0])),
         "CategoricalOverlap: lengthscale must be finite and > 0"),
        (gpc.kernels.OnDims(gpc.kernels.White(-1.0), (0,)) * gpc.kernels.Constant(), "White: variance must be"),
        (gpc.kernels.PerClass([gpc.kernels.SquaredExponential(v, 1.0) for v in (1.0, -1.0)]), "variance must be"),
    ]:
        with pytest.raises(Exception, match=message):
            jax.block_until_ready(jax.tree.leaves(k.check_parameters()))
    assert isinstance(gpc.kernels.PerClass([gpc.kernels.Linear(1.0)] * 2).check_parameters(), gpc.kernels.PerClass)


def test_positive_semidefinite_kernel_gives_the_correct_answer():
    """K = X X^T of rank 2 < n: Laplace equals the dense evaluation, KL is below the quadrature log Z and EP
    close to it, AIS (with the samplers' default jitter) agrees with it."""
    K = gram(LINEAR, X)
    assert np.linalg.matrix_rank(K) == 2
    post = laplace(LINEAR, X, Y)
    K_cross = gram(LINEAR, X_TEST, X)
    log_q, f, mean, var = dense_laplace(K, Y, K_cross, np.asarray(jit_call(LINEAR.diag, X_TEST)))
    np.testing.assert_allclose(post.log_marginal, log_q, rtol=1e-10)
    np.testing.assert_allclose(post.mean, f, rtol=1e-8)
    _, m, v = predict(post, X_TEST)
    np.testing.assert_allclose(m, mean, rtol=1e-8)
    np.testing.assert_allclose(v, var, rtol=1e-7, atol=1e-12)
    ep, kl = other_methods(LINEAR, X, Y)
    assert float(kl) <= exact_log_z(K, log_lik_logistic, Y)
    exact_probit = exact_log_z(K, log_lik_probit, Y)
    np.testing.assert_allclose(ep, exact_probit, atol=2e-3)
    _, log_z = samplers(LINEAR, X, Y, KEY, *NO_RHO)
    np.testing.assert_allclose(log_z, exact_probit, atol=0.05)


@pytest.mark.parametrize("sampler", ["MCMC", "AIS"])
def test_non_positive_definite_kernel_matrix_reaching_a_sampler_is_an_error(sampler):
    """A kernel that is not a covariance function but passes the cheap checks (finite K, diagonal >= 0):
    the samplers factorise K, and a failed factorisation raises (with throw=False too) instead of sampling NaN."""
    rho = (np.float64(-2.0), np.float64(0.0)) if sampler == "MCMC" else (np.float64(0.0), np.float64(-2.0))
    assert np.linalg.eigvalsh(gram(SE + OffDiagonal(-2.0), X))[0] < -1
    with pytest.raises(Exception, match="K is not positive definite"):
        jax.block_until_ready(samplers(SE, X, Y, KEY, *rho))


@gpc.jit
def gathered_checks(a, b):
    """Two failure conditions gathered and attached to a and b together (one compilation)."""
    checks = Checks()
    checks.fail_if(a < 0, "first: a is negative")
    checks.fail_if(b < 0, "second: b is negative")
    return checks.attach((a, b))


def test_gathered_checks_raise_the_first_failure_and_pass_good_values_through():
    np.testing.assert_array_equal(gathered_checks(np.ones(2), np.ones(3))[1], np.ones(3))
    for a, b, message in [(-1.0, -1.0, "first"), (1.0, -1.0, "second"), (-1.0, 1.0, "first")]:
        with pytest.raises(Exception, match=message):
            jax.block_until_ready(gathered_checks(np.array([1.0, a]), np.array([b, 1.0, 1.0])))
    batched = gpc.jit(jax.vmap(gathered_checks))
    np.testing.assert_array_equal(batched(np.ones((4, 2)), np.ones((4, 3)))[0], np.ones((4, 2)))
    a = np.ones((4, 2))
    a[2, 1] = -1.0  # one element of the batch fails
    with pytest.raises(Exception, match="first"):
        jax.block_until_ready(batched(a, np.ones((4, 3))))
