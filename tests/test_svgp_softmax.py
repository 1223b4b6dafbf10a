"""Multi-class (softmax) SVGP: the Monte Carlo estimator against quadrature, dense NumPy formulas, the binary
logistic quadrature at C = 2, minibatch identities, finite differences, natural-gradient stationarity, Vehicle.

Compile time dominates: the three-class tests share one data shape (N = 30, M = 6), and the models whose gradients
are taken one static configuration (Monte Carlo with NUM_SAMPLES draws), so that ``elbo_and_grad`` compiles once for
them; results are read as NumPy arrays (indexing a JAX array outside jit compiles a program per operation).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import central_difference, gram, jit_call, standardised_subset
from scipy import special

import gpclass as gpc
from gpclass import _svgp

C = 3
SOFTMAX = gpc.likelihoods.Softmax(C)
KERNEL = gpc.kernels.SquaredExponential(np.float64(1.3), np.float64(0.8))
KEY = jax.random.key(0)
N, M = 30, 6
NUM_SAMPLES = 10_000  # the Monte Carlo natural-gradient test's draws per case; the finite-difference test's too


def toy_classes(n=N, seed=0, num_classes=C):
    """Labels 0..C-1 from the largest of C smooth functions of 2-D inputs, with noise."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    scores = np.stack([np.sin(1.5 * X[:, 0] + c) + np.cos(X[:, 1] - 2 * c) for c in range(num_classes)], axis=1)
    return X, np.argmax(scores + 0.3 * rng.normal(size=scores.shape), axis=1)


def random_model(X, seed, num_classes=C, **settings):
    """q(v_c) = N(mu_c, S_c S_c^T) at random; S_c's upper triangles hold values the model must not read."""
    rng = np.random.default_rng(seed)
    q_sqrt = 0.3 * rng.normal(size=(num_classes, M, M)) + 0.8 * np.eye(M)
    return gpc.SVGP(KERNEL, gpc.likelihoods.Softmax(num_classes), X[:M] + 0.1 * rng.normal(size=(M, 2)),
                    rng.normal(size=(M, num_classes)), q_sqrt, **settings)


@gpc.filter_jit
def elbo_and_grad(model, X, y, num_data, key):
    return jax.value_and_grad(lambda mdl: mdl.elbo(X, y, num_data, key=key))(model)


@gpc.filter_jit
def elbo_value(model, X, y, num_data, key):
    return model.elbo(X, y, num_data, key=key)


def elbo(model, X, y, num_data=None, key=KEY):
    return float(elbo_value(model, X, y, num_data, key))


@gpc.filter_jit
def mc_expected_log_softmax(y, mean, var, key, num_samples):
    eps = _svgp.standard_normal_per_case(key, mean.shape[0], (num_samples, mean.shape[1]), mean.dtype)
    return (_svgp.expected_log_softmax(y, mean, var, eps, "monte_carlo"),
            _svgp.expected_log_softmax(y, mean, var, None, "jensen"))


def quadrature_log_sum_exp(mean, var, nodes=40):
    """E[logsumexp f] and sd[logsumexp f] for f ~ N(mean, diag var), by a tensor Gauss-Hermite rule."""
    z, w = np.polynomial.hermite_e.hermegauss(nodes)
    w = w / np.sqrt(2 * np.pi)
    grid = np.stack(np.meshgrid(*([z] * len(mean)), indexing="ij"), -1).reshape(-1, len(mean))
    weights = np.prod(np.stack(np.meshgrid(*([w] * len(mean)), indexing="ij"), -1).reshape(-1, len(mean)), axis=1)
    values = special.logsumexp(mean + np.sqrt(var) * grid, axis=1)
    first = weights @ values
    return first, np.sqrt(weights @ values**2 - first**2)


def test_monte_carlo_expected_log_softmax_converges_to_quadrature_and_jensen_is_below():
    """20000 draws per case against a 40^3-node Gauss-Hermite rule, within 4 standard errors (the standard
    deviation from the same rule); Jensen's bound log sum exp(m + v / 2) at or below the quadrature value."""
    mean = np.array([[0.0, 0.0, 0.0], [2.0, -1.0, 0.5], [-3.0, 1.0, 4.0], [0.3, 0.2, -0.1]])
    var = np.array([[1.0, 1.0, 1.0], [0.5, 3.0, 0.1], [4.0, 2.0, 0.2], [1e-6, 1e-4, 1e-2]])
    y = np.array([0, 1, 2, 1])
    num_samples = 20_000
    mc, jensen = (np.asarray(a) for a in mc_expected_log_softmax(y, mean, var, KEY, num_samples))
    for i in range(len(y)):
        first, sd = quadrature_log_sum_exp(mean[i], var[i])
        exact = mean[i, y[i]] - first
        assert abs(mc[i] - exact) < 4 * sd / np.sqrt(num_samples) + 1e-12, (i, mc[i], exact, sd)
        assert jensen[i] <= exact + 1e-12
        np.testing.assert_allclose(jensen[i], mean[i, y[i]] - special.logsumexp(mean[i] + var[i] / 2), rtol=1e-13)
    # Jensen's gap grows with the variances: 0.10-0.21 for the first three cases, 0.0003 for the tiny ones.
    assert np.all(jensen[:3] < mc[:3] - 0.05)


def test_kl_is_the_sum_over_classes_of_the_dense_gaussian_kl():
    model = random_model(toy_classes()[0], seed=1)
    S = np.tril(np.asarray(model.q_sqrt))  # the model reads lower triangles only
    expected = 0.0
    for c in range(C):
        Sigma, mu = S[c] @ S[c].T, np.asarray(model.q_mu)[:, c]
        expected += 0.5 * (np.trace(Sigma) + mu @ mu - M - np.linalg.slogdet(Sigma)[1])
    np.testing.assert_allclose(float(jit_call(model.kl)), expected, rtol=1e-12)


def test_minibatches_with_their_cases_keys_average_exactly_to_the_full_batch_estimate():
    """Case i's noise comes from its own key: the full batch with one key (split into a key per case) is the
    average of a partition's estimates, each batch given its cases' keys and scaled by n / b, exactly.  (The
    full batch through the gradient tests' compiled ``elbo_and_grad``, the batches through ``elbo_value``.)"""
    X, y = toy_classes()
    model = random_model(X, seed=2, num_samples=NUM_SAMPLES)
    full = float(elbo_and_grad(model, X, y, None, KEY)[0])
    keys = jax.random.split(KEY, N)
    batches = [elbo(model, X[i:i + 10], y[i:i + 10], N, keys[i:i + 10]) for i in (0, 10, 20)]
    np.testing.assert_allclose(np.mean(batches), full, rtol=1e-12)
    other_key = float(elbo_and_grad(model, X, y, None, jax.random.key(1))[0])
    assert abs(other_key - full) > 1e-3, (other_key, full)  # the key is used


def test_gradient_matches_finite_differences_with_the_key_fixed():
    """With the noise fixed the Monte Carlo objective is smooth: autodiff equals central differences in the log
    hyperparameters (by the chain rule from the model's own, d/d log v = v d/dv), an inducing coordinate, a
    class's mean and a class's Cholesky entry.  The model has the Monte Carlo natural-gradient test's
    configuration, so value and gradient come from that test's compiled ``elbo_and_grad``."""
    X, y = toy_classes()
    base = random_model(X, seed=3, num_samples=NUM_SAMPLES)
    inducing, q_mu, q_sqrt = (np.asarray(a) for a in (base.inducing, base.q_mu, base.q_sqrt))

    def with_params(p):
        Z, mu, S = inducing.copy(), q_mu.copy(), q_sqrt.copy()
        Z[2, 0], mu[1, 2], S[1, 3, 1] = p[2:]
        kernel = gpc.kernels.SquaredExponential(np.exp(p[0]), np.exp(p[1]))
        return gpc.SVGP(kernel, SOFTMAX, Z, mu, S, num_samples=NUM_SAMPLES)

    p0 = np.array([np.log(1.3), np.log(0.8), inducing[2, 0], q_mu[1, 2], q_sqrt[1, 3, 1]])
    g = jax.device_get(elbo_and_grad(with_params(p0), X, y, None, KEY)[1])
    grad = np.array([np.exp(p0[0]) * g.kernel.variance, np.exp(p0[1]) * g.kernel.lengthscale, g.inducing[2, 0],
                     g.q_mu[1, 2], g.q_sqrt[1, 3, 1]])
    fd = central_difference(lambda p: float(elbo_and_grad(with_params(p), X, y, None, KEY)[0]), p0, h=1e-5)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


@gpc.filter_jit
def two_class_terms(model, X, y, key):
    """q(f)'s marginals at X, the Monte Carlo data term (the ELBO plus the KL term) and the binary Logistic
    likelihood's quadrature of the same expectation at N(m^0 - m^1, v^0 + v^1): one program."""
    mean, cov = gpc.predict_latent(model, X)
    data = model.elbo(X, y, key=key) + model.kl()
    var = jnp.diagonal(cov, axis1=1, axis2=2)
    exact = jnp.sum(gpc.likelihoods.Logistic().expected_log_prob(jnp.where(y == 0, 1.0, -1.0),
                                                                  mean[:, 0] - mean[:, 1], var.sum(1)))
    return mean, cov, data, exact


def test_two_classes_marginals_are_dense_formulas_and_the_data_term_is_the_logistic_quadrature():
    """C = 2: q(f^c) = N(A^T mu_c, k - diag(A^T A) + diag(A^T S_c S_c^T A)) from NumPy; since
    log softmax_y(f) = log sigmoid(+-(f^0 - f^1)), the Monte Carlo data term (20000 draws) equals the
    binary Logistic likelihood's quadrature at N(m^0 - m^1, v^0 + v^1) within 4 standard errors
    (sd[logsumexp f] <= max_c sqrt(v^c), the Gaussian Poincare inequality)."""
    X, y = toy_classes(num_classes=2, seed=4)
    model = random_model(X, seed=4, num_classes=2, num_samples=20_000)
    Z, q_mu, q_sqrt = (np.asarray(a) for a in (model.inducing, model.q_mu, model.q_sqrt))
    K_zz = gram(KERNEL, Z)
    L = np.linalg.cholesky(K_zz + model.jitter * np.mean(np.diag(K_zz)) * np.eye(M))
    A = np.linalg.solve(L, gram(KERNEL, Z, X))
    mean, cov, data, exact = jax.device_get(two_class_terms(model, X, y, KEY))
    assert mean.shape == (N, 2) and cov.shape == (N, 2, 2)
    for c in range(2):
        S = np.tril(q_sqrt[c])
        np.testing.assert_allclose(mean[:, c], A.T @ q_mu[:, c], atol=1e-12)
        dense_var = float(KERNEL.variance) - np.sum(A**2, 0) + np.diag(A.T @ S @ S.T @ A)
        np.testing.assert_allclose(cov[:, c, c], dense_var, rtol=1e-10)
    np.testing.assert_array_equal(cov[:, 0, 1], 0.0)
    var = cov[:, [0, 1], [0, 1]]
    assert abs(data - exact) < 4 * np.sqrt(np.sum(var.max(1)) / 20_000), (data, exact)


@functools.cache
def natural_fit(estimator, devices=None):
    """20 (Jensen: 80) full-batch natural-gradient steps of size 1 on q, the hyperparameters and Z frozen."""
    X, y = toy_classes(seed=5)
    num_samples, num_steps = (NUM_SAMPLES, 20) if estimator == "monte_carlo" else (1, 80)
    start = gpc.SVGP.at_prior(KERNEL, SOFTMAX, X[:M], estimator=estimator, num_samples=num_samples)
    fit = gpc.fit_svgp(start, X, y, key=KEY, num_steps=num_steps, natural_gradient_step=1.0,
                       fit_hyperparameters=False, fit_inducing=False, devices=devices)
    return X, y, start, fit


@pytest.mark.parametrize("estimator, tolerance", [("jensen", 1e-6), ("monte_carlo", 0.04)])
@pytest.mark.slow
def test_natural_gradient_steps_reach_a_stationary_point(estimator, tolerance):
    """With the hyperparameters and Z frozen, natural-gradient steps on q (per class, their gradients from
    Bonnet's and Price's theorems with the step's samples, or Jensen's bound's) end where autodiff's gradient
    of the objective in q vanishes: for Jensen's bound to rounding, for the Monte Carlo ELBO (10000 draws per
    case) to its noise, in mu and in S each under 4 % of the start's (measured 0.2-0.3 % and 1-1.7 %; 7-8 %
    with Price's factor 1/2 made 0.45)."""
    X, y, start, fit = natural_fit(estimator)
    history = np.asarray(fit.elbo)
    assert np.all(np.isfinite(history)) and history[-1] > history[0] + 1.0
    check_key = jax.random.key(7)  # noise apart from training's
    g_start, g_end = (elbo_and_grad(model, X, y, None, check_key)[1] for model in (start, fit.model))
    for part in (lambda g: g.q_mu, lambda g: np.tril(g.q_sqrt)):
        start_size, end_size = np.max(np.abs(part(g_start))), np.max(np.abs(part(g_end)))
        assert end_size < tolerance * start_size, (end_size, start_size)


@gpc.filter_jit
def monte_carlo_and_mean_field(model, X, key):
    """Class probabilities by Monte Carlo (1000 draws) and by the mean-field approximation: one program."""
    return (gpc.predict(model, X, key=key, integrator=gpc.integrators.MonteCarlo(1000)),
            gpc.predict(model, X, integrator=gpc.integrators.MeanField()))


@pytest.mark.slow
def test_training_on_vehicle_raises_the_elbo_and_predicts_well():
    """Vehicle (4 classes, chance error 0.75): 300 training cases, 15 inducing inputs, 150 Adam steps
    (learning rate 0.03) on minibatches of 50.  The ELBO's minibatch estimates rise by over 100 nats, the test
    error is below 0.4, Monte Carlo and mean-field probabilities sum to one and agree to 0.1."""
    X, y = standardised_subset("vehicle", 0, n=500)
    X_train, y_train, X_test, y_test = X[:300], y[:300], X[300:], y[300:]
    kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(X.shape[1])))
    start = gpc.SVGP.at_prior(kernel, gpc.likelihoods.Softmax(4), X_train[:15])
    fit = gpc.fit_svgp(start, X_train, y_train, key=KEY, num_steps=150, batch_size=50, optimizer=optax.adam(0.03))
    assert gpc.Status(int(fit.status)) == gpc.Status.COMPLETED and fit.elbo.shape == (150,)
    assert fit.model.q_mu.shape == (15, 4) and fit.model.q_sqrt.shape == (4, 15, 15)
    history = np.asarray(fit.elbo)
    before, after = np.mean(history[:5]), np.mean(history[-10:])  # minibatch estimates, each scaled by n / b
    assert after > before + 100.0, (before, after)
    p, p_mean_field = jax.device_get(monte_carlo_and_mean_field(fit.model, X_test, jax.random.key(4)))
    assert p.shape == (200, 4)
    np.testing.assert_allclose(p.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(p_mean_field.sum(1), 1.0, atol=1e-12)
    assert np.max(np.abs(p - p_mean_field)) < 0.1
    assert np.mean(np.argmax(p, axis=1) != y_test) < 0.4


@pytest.mark.slow
def test_devices_give_the_same_history():
    """``devices=`` (one device here: the mesh placement, the replicated sample key, the natural step's
    samples on the split batch) trains exactly as without it."""
    _, _, _, one = natural_fit("monte_carlo")
    _, _, _, on_devices = natural_fit("monte_carlo", tuple(jax.devices()[:1]))
    np.testing.assert_allclose(on_devices.elbo, one.elbo, rtol=1e-12)
    np.testing.assert_allclose(on_devices.model.q_sqrt, one.model.q_sqrt, rtol=1e-12, atol=1e-15)


def test_bad_input_is_a_clear_error():
    X, y = toy_classes(n=12, seed=7)
    model = gpc.SVGP.at_prior(KERNEL, SOFTMAX, X[:4])
    fit = lambda labels: gpc.fit_svgp(model, X, labels, key=KEY, num_steps=1)
    with pytest.raises(ValueError, match="lie in 0..2"):
        fit(np.where(y == 0, 3, y))
    with pytest.raises(ValueError, match="lie in 0..2"):
        fit(np.where(y == 0, -1, y))
    with pytest.raises(ValueError, match="whole numbers"):
        fit(y + 0.5)
    with pytest.raises(ValueError, match="integers 0..2"):
        fit(y > 0)
    with pytest.raises(ValueError, match="shape"):
        fit(y[:, None])
    with pytest.raises(ValueError, match="explicit key"):
        elbo_value(model, X, y, None, None)
    with pytest.raises(ValueError, match="one per case"):
        elbo_value(model, X, y, None, jax.random.split(KEY, 5))
    with pytest.raises(ValueError, match=r"q_mu of shape \(m, C\)"):
        gpc.SVGP(KERNEL, SOFTMAX, X[:4], np.zeros(4), np.eye(4))
    with pytest.raises(ValueError, match=r"q_sqrt of shape \(C, m, m\)"):
        gpc.SVGP(KERNEL, SOFTMAX, X[:4], np.zeros((4, C)), np.eye(4))
    with pytest.raises(ValueError, match="estimator must be"):
        gpc.SVGP.at_prior(KERNEL, SOFTMAX, X[:4], estimator="quadrature")
    with pytest.raises(ValueError, match="explicit key"):
        gpc.predict(model, X)
    with pytest.raises(ValueError, match="averages a binary likelihood"):
        gpc.predict(model, X, integrator=gpc.integrators.MacKay())
