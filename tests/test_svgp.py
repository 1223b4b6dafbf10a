"""SVGP (gpclass/_svgp.py, _svgp_fit.py): against the dense KL method, minibatch identities, finite differences."""

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import central_difference, gram, standardised_subset, toy_data

import gpclass as gpc

LOGISTIC = gpc.likelihoods.Logistic()


@gpc.jit
def kl_posterior_moments(log_variance, log_lengthscale, X, y):
    """The dense KL method's q(f) = N(mean, Sigma) and its ELBO, Sigma = K - K S (I + S K S)^-1 S K."""
    kernel = gpc.kernels.SquaredExponential(jnp.exp(log_variance), jnp.exp(log_lengthscale))
    post = gpc.infer(gpc.KL(), kernel, LOGISTIC, X, y)
    K = kernel.gram(X)
    SK = post.sqrt_w[:, None] * K
    Sigma = K - SK.T @ jnp.linalg.solve(jnp.eye(len(y)) + SK * post.sqrt_w[None, :], SK)
    return post.mean, Sigma, post.log_marginal


@gpc.filter_jit
def elbo_and_grad(model, X, y, num_data=None):
    return jax.value_and_grad(lambda m: m.elbo(X, y, num_data))(model)


def test_with_z_equal_x_the_elbo_at_the_kl_optimum_is_the_kl_methods_and_stationary():
    """With Z = X (m = n) and no jitter, q(f) ranges over every Gaussian: setting q(v) from the KL method's
    optimum q(f) = N(m, Sigma) (v = L^-1 f) gives the same ELBO, and the ELBO is stationary there."""
    X, y = toy_data(n=25, seed=3)
    log_variance, log_lengthscale = np.log(2.0), np.log(1.2)
    mean, Sigma, kl_elbo = kl_posterior_moments(log_variance, log_lengthscale, X, y)
    kernel = gpc.kernels.SquaredExponential(np.exp(log_variance), np.exp(log_lengthscale))
    L = np.linalg.cholesky(gram(kernel, X))
    L_inv = np.linalg.inv(L)
    model = gpc.SVGP(kernel, LOGISTIC, X, L_inv @ np.asarray(mean), np.linalg.cholesky(L_inv @ Sigma @ L_inv.T),
                     jitter=0.0)
    value, grad = elbo_and_grad(model, X, y)
    np.testing.assert_allclose(float(value), float(kl_elbo), rtol=1e-10)
    assert np.max(np.abs(grad.q_mu)) < 1e-6 and np.max(np.abs(np.tril(grad.q_sqrt))) < 1e-6
    mean_svgp, var_svgp = gpc.predict_latent(model, X)  # the marginals of q(f) at the training inputs
    np.testing.assert_allclose(mean_svgp, mean, atol=1e-9)
    np.testing.assert_allclose(var_svgp, np.diag(Sigma), atol=1e-9)


def test_natural_gradient_steps_reach_the_kl_methods_optimum():
    """At Z = X with the hyperparameters and Z frozen, natural-gradient steps on q(v) (full batch) converge to
    the dense KL method's maximised ELBO."""
    X, y = toy_data(n=25, seed=3)
    log_variance, log_lengthscale = np.log(2.0), np.log(1.2)
    kl_elbo = float(kl_posterior_moments(log_variance, log_lengthscale, X, y)[2])
    kernel = gpc.kernels.SquaredExponential(np.exp(log_variance), np.exp(log_lengthscale))
    start = gpc.SVGP.at_prior(kernel, LOGISTIC, X, jitter=0.0)
    fit = gpc.fit_svgp(start, X, y, key=jax.random.key(0), num_steps=30, natural_gradient_step=1.0,
                       fit_hyperparameters=False, fit_inducing=False)
    elbo = np.asarray(fit.elbo)
    assert np.all(np.diff(elbo) > -1e-9)  # on this problem every step raised the ELBO
    np.testing.assert_allclose(float(elbo_and_grad(fit.model, X, y)[0]), kl_elbo, rtol=1e-9)


def random_model(X, m, seed):
    rng = np.random.default_rng(seed)
    kernel = gpc.kernels.SquaredExponential(np.float64(1.5), np.float64(0.9))
    q_sqrt = np.tril(0.3 * rng.normal(size=(m, m))) + 0.8 * np.eye(m)
    return gpc.SVGP(kernel, LOGISTIC, X[:m] + 0.1 * rng.normal(size=(m, X.shape[1])), rng.normal(size=m), q_sqrt)


def test_minibatch_estimates_of_a_partition_average_to_the_elbo():
    X, y = toy_data(n=30, seed=4)
    model = random_model(X, 6, seed=0)
    full = float(elbo_and_grad(model, X, y)[0])
    batches = [float(elbo_and_grad(model, X[i:i + 10], y[i:i + 10], 30)[0]) for i in (0, 10, 20)]
    np.testing.assert_allclose(np.mean(batches), full, rtol=1e-12)


def test_gradient_matches_finite_differences():
    """In the log hyperparameters, an inducing input coordinate and the variational parameters."""
    X, y = toy_data(n=30, seed=4)
    base = random_model(X, 6, seed=1)

    def with_params(p):
        kernel = gpc.kernels.SquaredExponential(jnp.exp(p[0]), jnp.exp(p[1]))
        return gpc.SVGP(kernel, LOGISTIC, base.inducing.at[2, 0].set(p[2]), base.q_mu.at[1].set(p[3]),
                        base.q_sqrt.at[3, 1].set(p[4]), base.jitter)

    elbo = gpc.jit(jax.value_and_grad(lambda p: with_params(p).elbo(X, y)))
    p0 = np.array([np.log(1.5), np.log(0.9), float(base.inducing[2, 0]), float(base.q_mu[1]), float(base.q_sqrt[3, 1])])
    grad = elbo(p0)[1]
    fd = central_difference(lambda p: float(elbo(p)[0]), p0, h=1e-5)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


def test_training_raises_the_elbo_and_stays_below_the_dense_kl_bound():
    """On 200 Ionosphere cases with 20 inducing inputs: the ELBO rises, and at the fitted hyperparameters it is at
    most the dense KL method's (SVGP's q(f) family is a subset of all Gaussians), with a sensible test error."""
    X, y = standardised_subset("ionosphere", 1, n=300)
    X_train, y_train, X_test, y_test = X[:200], y[:200], X[200:], y[200:]
    kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(X.shape[1])))
    start = gpc.SVGP.at_prior(kernel, LOGISTIC, X_train[:20])
    fit = gpc.fit_svgp(start, X_train, y_train, key=jax.random.key(0), num_steps=150, batch_size=50)
    assert gpc.Status(int(fit.status)) == gpc.Status.MAX_STEPS and fit.elbo.shape == (150,)
    before, after = float(elbo_and_grad(start, X_train, y_train)[0]), float(elbo_and_grad(fit.model, X_train, y_train)[0])
    assert after > before + 10.0
    k = fit.model.kernel
    dense = float(kl_posterior_moments(jnp.log(k.variance), jnp.log(k.lengthscale), X_train, y_train)[2])
    assert after <= dense + 1e-3
    assert float(gpc.metrics.error_rate(y_test, gpc.predict(fit.model, X_test))) < 0.2


def test_frozen_parts_stay_fixed_and_the_rest_moves():
    X, y = toy_data(n=30, seed=6)
    start = random_model(X, 6, seed=2)
    fit = gpc.fit_svgp(start, X, y, key=jax.random.key(1), num_steps=5, batch_size=10, fit_hyperparameters=False,
                       fit_inducing=False, optimizer=optax.adamw(0.01, weight_decay=0.1))  # decay moves any free part
    assert float(fit.model.kernel.variance) == float(start.kernel.variance)
    assert float(fit.model.kernel.lengthscale) == float(start.kernel.lengthscale)
    np.testing.assert_array_equal(fit.model.inducing, start.inducing)
    assert not np.array_equal(fit.model.q_mu, start.q_mu) and fit.elbo.shape == (5,)


def test_a_non_finite_elbo_stops_training_and_is_reported():
    X, y = toy_data(n=30, seed=7)
    fit = gpc.fit_svgp(random_model(X, 6, seed=3), X, y, key=jax.random.key(2), num_steps=40, batch_size=10,
                       optimizer=optax.sgd(1e8))  # the parameters blow up
    elbo = np.asarray(fit.elbo)
    assert gpc.Status(int(fit.status)) == gpc.Status.FAILED
    assert len(elbo) < 40 and not np.isfinite(elbo[-1]) and np.all(np.isfinite(elbo[:-1]))


def test_bad_input_is_a_clear_error():
    X, y = toy_data(n=12, seed=5)
    model = gpc.SVGP.at_prior(gpc.kernels.SquaredExponential(1.0, 1.0), LOGISTIC, X[:4])
    with pytest.raises(ValueError, match="input dimensions"):
        gpc.fit_svgp(model, X[:, :1], y, key=jax.random.key(0), num_steps=1)
    with pytest.raises(ValueError, match="batch_size"):
        gpc.fit_svgp(model, X, y, key=jax.random.key(0), num_steps=1, batch_size=13)
    with pytest.raises(ValueError, match="binary labels"):
        gpc.fit_svgp(model, X, np.full(12, 2.0), key=jax.random.key(0), num_steps=1)
    with pytest.raises(ValueError, match="q_mu of shape"):
        gpc.SVGP(model.kernel, LOGISTIC, X[:4], np.zeros(3), np.eye(4))
    with pytest.raises(ValueError, match=r"q_mu of shape \(m, C\)"):  # the softmax's q has a class axis
        gpc.SVGP(model.kernel, gpc.likelihoods.Softmax(3), X[:4], np.zeros(4), np.eye(4))
    with pytest.raises(ValueError, match="X_test has 1 input dimensions"):
        gpc.predict(model, X[:, :1])
