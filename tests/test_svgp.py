"""SVGP (gpclass/_svgp.py, _svgp_fit.py): against the dense KL method, minibatch identities, finite differences.

Compile time dominates: the tests on the 30 x 2 toy problem share one model shape (m = 6) and so the compiled
``elbo_and_grad`` (full batch); ``elbo_value`` is the cheaper program wherever no gradient is needed.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from conftest import central_difference, gram, jit_call, standardised_subset, toy_data

import gpclass as gpc
from gpclass._triangular_products import PRODUCT_BLOCK

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


@gpc.filter_jit
def elbo_value(model, X, y, num_data=None):
    return model.elbo(X, y, num_data)


@pytest.mark.slow
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


@pytest.mark.slow
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
    full = float(elbo_and_grad(model, X, y)[0])  # the finite-difference test's program
    batches = [float(elbo_value(model, X[i:i + 10], y[i:i + 10], 30)) for i in (0, 10, 20)]
    np.testing.assert_allclose(np.mean(batches), full, rtol=1e-12)


def test_gradient_matches_finite_differences():
    """In the log hyperparameters, an inducing input coordinate and the variational parameters: autodiff's
    gradient in the model's own parameters (the log hyperparameters' by the chain rule, d/d log v = v d/dv)
    against central differences of the ELBO (both from the full-batch program of the minibatch test)."""
    X, y = toy_data(n=30, seed=4)
    base = random_model(X, 6, seed=1)

    def with_params(p):
        inducing, q_mu, q_sqrt = (np.array(a) for a in (base.inducing, base.q_mu, base.q_sqrt))
        inducing[2, 0], q_mu[1], q_sqrt[3, 1] = p[2:]
        kernel = gpc.kernels.SquaredExponential(np.exp(p[0]), np.exp(p[1]))
        return gpc.SVGP(kernel, LOGISTIC, inducing, q_mu, q_sqrt, base.jitter)

    inducing, q_mu, q_sqrt = (np.asarray(a) for a in (base.inducing, base.q_mu, base.q_sqrt))
    p0 = np.array([np.log(1.5), np.log(0.9), inducing[2, 0], q_mu[1], q_sqrt[3, 1]])
    g = jax.device_get(elbo_and_grad(with_params(p0), X, y)[1])
    grad = np.array([np.exp(p0[0]) * g.kernel.variance, np.exp(p0[1]) * g.kernel.lengthscale, g.inducing[2, 0],
                     g.q_mu[1], g.q_sqrt[3, 1]])
    fd = central_difference(lambda p: float(elbo_and_grad(with_params(p), X, y)[0]), p0, h=1e-5)
    np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-8)


@pytest.mark.slow
def test_training_raises_the_elbo_and_stays_below_the_dense_kl_bound():
    """On 200 Ionosphere cases with 20 inducing inputs: the ELBO rises, and at the fitted hyperparameters it is at
    most the dense KL method's (SVGP's q(f) family is a subset of all Gaussians), with a sensible test error."""
    X, y = standardised_subset("ionosphere", 1, n=300)
    X_train, y_train, X_test, y_test = X[:200], y[:200], X[200:], y[200:]
    kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(X.shape[1])))
    start = gpc.SVGP.at_prior(kernel, LOGISTIC, X_train[:20])
    fit = gpc.fit_svgp(start, X_train, y_train, key=jax.random.key(0), num_steps=150, batch_size=50)
    assert gpc.Status(int(fit.status)) == gpc.Status.COMPLETED and fit.elbo.shape == (150,)
    before, after = float(elbo_value(start, X_train, y_train)), float(elbo_value(fit.model, X_train, y_train))
    assert after > before + 10.0
    k = fit.model.kernel
    dense = float(kl_posterior_moments(np.log(k.variance), np.log(k.lengthscale), X_train, y_train)[2])
    assert after <= dense + 1e-3
    assert float(jit_call(gpc.metrics.error_rate, y_test, gpc.predict(fit.model, X_test))) < 0.2


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
                       optimizer=optax.sgd(1e8), throw=False)  # the parameters blow up
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
    # Checked on the host before any step: each error names the argument, its first bad entry and the remedy.
    X_bad = X.copy()
    X_bad[5, 1] = np.inf
    for args, message in [
        ((X_bad, y), r"X contains NaN or infinite values \(the first: X\[5, 1\] = inf\); drop or impute those cases"),
        ((X, np.where(np.arange(12) == 3, 0.5, y)), r"binary labels y must be in .* \(the first that is not: y\[3\] "
         r"= 0.5\)\. For more than two classes use gpc.likelihoods.Softmax\(C\)"),
        ((X, y[:, None]), r"y must have shape \(12,\) to match X.*flatten them"),
        ((X[:, :1], y), r"but the model's inducing inputs have 2: pass X with the columns"),
    ]:
        with pytest.raises(gpc.GPClassError, match=message):
            gpc.fit_svgp(model, *args, key=jax.random.key(0), num_steps=1)
    softmax = gpc.SVGP.at_prior(model.kernel, gpc.likelihoods.Softmax(3), X[:4])
    with pytest.raises(gpc.GPClassError, match=r"multi-class labels y must be whole numbers 0..2; got a fraction "
                       r"\(the first: y\[1\] = 1.5\): encode the classes as integers"):
        gpc.fit_svgp(softmax, X, np.r_[0.0, 1.5, np.zeros(10)], key=jax.random.key(0), num_steps=1)
    ordinal = gpc.SVGP.at_prior(model.kernel, gpc.likelihoods.Ordinal(3), X[:4])
    with pytest.raises(gpc.GPClassError, match=r"ordinal labels y must lie in 0..2 for Ordinal\(3\) \(the first "
                       r"outside: y\[2\] = 7\)"):
        gpc.fit_svgp(ordinal, X, np.r_[0, 1, 7, np.zeros(9, int)], key=jax.random.key(0), num_steps=1)
    noisy = gpc.SVGP.at_prior(model.kernel, gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit()), X[:4])
    with pytest.raises(gpc.GPClassError, match="LabelNoise is not: pass natural_gradient_step=None"):
        gpc.fit_svgp(noisy, X, y, key=jax.random.key(0), num_steps=1, natural_gradient_step=0.5)
    flat = gpc.SVGP.at_prior(gpc.kernels.SquaredExponential(0.0, 1.0), LOGISTIC, X[:4])
    with pytest.raises(gpc.GPClassError, match=r"fit_svgp: kernel.variance must be > 0 to be fitted in log space "
                       r"\(got kernel.variance = 0\); start from a value > 0"):
        gpc.fit_svgp(flat, X, y, key=jax.random.key(0), num_steps=1)
    with pytest.raises(gpc.GPClassError, match=r"got MultinomialProbit, with 3 latent functions per case: use "
                       r"gpc.likelihoods.Softmax\(3\) with SVGP"):
        gpc.SVGP.at_prior(model.kernel, gpc.likelihoods.MultinomialProbit(3), X[:4])


def test_fit_svgp_throw_names_the_status_and_a_normal_end_is_completed():
    """fit_svgp has no convergence test: a run of all its steps is COMPLETED (it was reported as MAX_STEPS), and
    by default (throw=True, as gpc.infer and gpc.fit) it raises, naming the status, when an ELBO estimate is not
    finite (a NaN step size); throw=False reports it."""
    X, y = standardised_subset("ionosphere", 1, n=60)
    start = gpc.SVGP.at_prior(gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(3.0)), LOGISTIC, X[:8])
    fit = gpc.fit_svgp(start, X, y, key=jax.random.key(0), num_steps=3, throw=True)
    assert gpc.Status(int(fit.status)) == gpc.Status.COMPLETED
    broken = optax.sgd(float("nan"))
    fit = gpc.fit_svgp(start, X, y, key=jax.random.key(0), num_steps=3, optimizer=broken, throw=False)
    assert gpc.Status(int(fit.status)) == gpc.Status.FAILED
    with pytest.raises(gpc.GPClassError, match=r"fit_svgp did not complete \(FAILED\): failed: an ELBO estimate is "
                       r"not finite.* Lower the optimiser's learning rate"):
        gpc.fit_svgp(start, X, y, key=jax.random.key(0), num_steps=3, optimizer=broken)


def reference_marginals(model, X):
    """The whitened marginals from A = L^-1 K_zx by jaxlib's Cholesky factorisation and triangular solve (reverse
    mode through both), built here from the kernel's blocks: mean A^T mu, variance k(x, x) - |a|^2 + |S^T a|^2."""
    K_zz = model.kernel.gram(model.inducing)
    K_zz = K_zz + model.jitter * jnp.mean(jnp.diagonal(K_zz)) * jnp.eye(K_zz.shape[0])
    A = jax.scipy.linalg.solve_triangular(jnp.linalg.cholesky(K_zz), model.kernel.gram(model.inducing, X), lower=True)
    SA = jnp.swapaxes(jnp.tril(model.q_sqrt), -1, -2) @ A
    prior = model.kernel.diag(X) - jnp.sum(A**2, axis=0)
    var = (prior if model.q_mu.ndim == 1 else prior[:, None]) + jnp.sum(SA**2, axis=-2).T
    return A.T @ model.q_mu, var


def test_training_moments_and_their_gradients_are_the_whitened_formulas():
    """The ELBO's float64 marginals, from P = L^-T (S S^T - I) L^-1 and c = L^-T mu (``_svgp_moments``, hand-written
    reverse modes; batches of b >= 2 m) and from A = L^-1 K_zx with the explicit L^-1 (``_inverse_factor``; smaller
    batches), against the whitened formulas through jaxlib's triangular solve (:func:`reference_marginals`), on hard
    inputs: m = 30 inducing inputs (L^-1 from blocks of 24 and 6 rows), two of them 1e-3 apart (K_zz near
    singular, held by the jitter), and a length scale 20 times the inputs' spread.  Values to the P form's
    rounding, eps m / jitter of the prior variance (``_svgp_moments``; measured 6.2e-9, and 5.1e-9 with LAPACK's
    triangular solves, against 1e-8), gradients in every parameter to 1e-7 relative; the gradients of a softmax
    model's (three classes) too."""
    X, _ = toy_data(n=60, seed=8)
    num_inducing = 30
    model = random_model(X, num_inducing, seed=4)
    model = eqx.tree_at(lambda m: m.inducing, model, model.inducing.at[1].set(model.inducing[0] + 1e-3))
    for lengthscale in (1.0, 20.0 * float(np.std(X))):
        model = eqx.tree_at(lambda m: m.kernel.lengthscale, model, jnp.asarray(lengthscale))
        for batch in (X, X[:12]):  # the P form (b >= 2 m) and the A form

            def scalar(m, which):
                mean, var = m._training_moments(batch) if which else reference_marginals(m, batch)
                return jnp.sum(jnp.sin(mean)) + jnp.sum(jnp.cos(var)), (mean, var)

            (_, fast), g_fast = gpc.filter_jit(jax.value_and_grad(lambda m: scalar(m, True), has_aux=True))(model)
            (_, slow), g_slow = gpc.filter_jit(jax.value_and_grad(lambda m: scalar(m, False), has_aux=True))(model)
            for a, b in zip(fast, slow):  # the P form's rounding: eps m / jitter of the prior variance
                np.testing.assert_allclose(a, b, rtol=0, atol=np.finfo(float).eps * num_inducing / model.jitter
                                           * float(model.kernel.variance))
            for a, b in zip(jax.tree.leaves(g_fast), jax.tree.leaves(g_slow)):
                np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-7 * float(np.max(np.abs(b))))
    # The softmax's C classes share one factorisation (P and c per class): the same comparison.
    rng = np.random.default_rng(0)
    q_sqrt = np.tril(0.3 * rng.normal(size=(3, num_inducing, num_inducing))) + 0.8 * np.eye(num_inducing)
    classes = gpc.SVGP(model.kernel, gpc.likelihoods.Softmax(3), model.inducing, rng.normal(size=(num_inducing, 3)),
                       q_sqrt, estimator="jensen")

    def scalar_classes(m, which):
        mean, var = m._training_moments(X) if which else reference_marginals(m, X)
        return jnp.sum(jnp.sin(mean)) + jnp.sum(jnp.cos(var))

    g_fast = gpc.filter_jit(jax.grad(lambda m: scalar_classes(m, True)))(classes)
    g_slow = gpc.filter_jit(jax.grad(lambda m: scalar_classes(m, False)))(classes)
    for a, b in zip(jax.tree.leaves(eqx.filter(g_fast, eqx.is_inexact_array)),
                    jax.tree.leaves(eqx.filter(g_slow, eqx.is_inexact_array))):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-7 * float(np.max(np.abs(b))))


@pytest.mark.parametrize("classes", (1, 3))
def test_the_a_form_by_blocks_is_the_whitened_formulas(classes):
    """The A form of the ELBO's float64 marginals (``_svgp_moments.projected_marginals``: its own reverse mode,
    whose products skip triangular zero blocks from m = 2 PRODUCT_BLOCK) at m = 2 PRODUCT_BLOCK + 1 = 257 inducing
    inputs (halves of 128 and 129 rows; L^-1 by the recursion's block substitution) and a batch of 40 cases (b < 2 m),
    against the whitened formulas through jaxlib's Cholesky factorisation and triangular solve
    (:func:`reference_marginals`), with two inducing inputs 1e-3 apart; for one latent function and for a softmax's
    three.  Values to 1e-9 of the prior variance, gradients in every parameter to 1e-7 relative."""
    X, _ = toy_data(n=300, d=4, seed=9)
    num_inducing = 2 * PRODUCT_BLOCK + 1
    rng = np.random.default_rng(classes)
    shape = (num_inducing, num_inducing) if classes == 1 else (classes, num_inducing, num_inducing)
    q_sqrt = np.tril(0.3 * rng.normal(size=shape)) + 0.8 * np.eye(num_inducing)
    q_mu = rng.normal(size=(num_inducing,) if classes == 1 else (num_inducing, classes))
    likelihood = LOGISTIC if classes == 1 else gpc.likelihoods.Softmax(classes)
    Z = X[:num_inducing] + 0.1 * rng.normal(size=(num_inducing, 4))
    Z[1] = Z[0] + 1e-3
    kernel = gpc.kernels.SquaredExponential(np.float64(1.5), np.float64(0.9))
    model = gpc.SVGP(kernel, likelihood, Z, q_mu, q_sqrt, **({} if classes == 1 else {"estimator": "jensen"}))
    batch = X[num_inducing:num_inducing + 40]

    def scalar(m, which):
        mean, var = m._training_moments(batch) if which else reference_marginals(m, batch)
        return jnp.sum(jnp.sin(mean)) + jnp.sum(jnp.cos(var)), (mean, var)

    (_, fast), g_fast = gpc.filter_jit(jax.value_and_grad(lambda m: scalar(m, True), has_aux=True))(model)
    (_, slow), g_slow = gpc.filter_jit(jax.value_and_grad(lambda m: scalar(m, False), has_aux=True))(model)
    for a, b in zip(fast, slow):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-9 * float(model.kernel.variance))
    for a, b in zip(jax.tree.leaves(eqx.filter(g_fast, eqx.is_inexact_array)),
                    jax.tree.leaves(eqx.filter(g_slow, eqx.is_inexact_array))):
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-7 * float(np.max(np.abs(b))))


@pytest.mark.slow
def test_the_compiled_loop_is_the_loop_over_devices():
    """``fit_svgp``'s training loop compiled on the device (chunks of steps in ``lax.scan``, minibatches gathered on
    the device) and the Python loop of ``devices=`` (one device here) take the same minibatches and steps: the
    same ELBO history and model (rounding), over more than one epoch and a partial last chunk."""
    X, y = toy_data(n=30, seed=9)
    start = random_model(X, 6, seed=5)
    one = gpc.fit_svgp(start, X, y, key=jax.random.key(3), num_steps=7, batch_size=7)
    other = gpc.fit_svgp(start, X, y, key=jax.random.key(3), num_steps=7, batch_size=7, devices=jax.devices()[:1])
    np.testing.assert_allclose(one.elbo, other.elbo, rtol=1e-12)
    np.testing.assert_allclose(one.model.q_sqrt, other.model.q_sqrt, rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(one.model.inducing, other.model.inducing, rtol=1e-10, atol=1e-13)


def test_a_memory_mapped_training_set_is_streamed_and_trains_as_the_array(tmp_path):
    """X as a memory-mapped file (float32 on disk, a float64 model): the same steps, minibatches and model as the
    in-memory array through the same host loop; a NaN in the file is found by the block-wise check."""
    X, y = toy_data(n=30, seed=9)
    path = tmp_path / "X.npy"
    np.save(path, X.astype(np.float32))
    mapped = np.load(path, mmap_mode="r")
    start = random_model(X, 6, seed=5)
    streamed = gpc.fit_svgp(start, mapped, y, key=jax.random.key(3), num_steps=7, batch_size=7)
    in_memory = gpc.fit_svgp(start, X.astype(np.float32).astype(np.float64), y, key=jax.random.key(3), num_steps=7,
                             batch_size=7, devices=jax.devices()[:1])
    np.testing.assert_array_equal(streamed.elbo, in_memory.elbo)
    np.testing.assert_array_equal(streamed.model.q_sqrt, in_memory.model.q_sqrt)
    assert isinstance(mapped, np.memmap) and streamed.model.inducing.dtype == jnp.float64
    broken = np.lib.format.open_memmap(tmp_path / "bad.npy", mode="w+", dtype=np.float64, shape=X.shape)
    broken[:] = X
    broken[17, 1] = np.nan
    broken.flush()
    with pytest.raises(gpc.GPClassError, match="NaN"):
        gpc.fit_svgp(start, np.load(tmp_path / "bad.npy", mmap_mode="r"), y, key=jax.random.key(3), num_steps=2)


def test_training_continues_from_a_saved_fit_as_if_it_had_not_stopped(tmp_path):
    """3 steps, gpc.save, gpc.load, 4 more steps = 7 steps in one call (the ELBO history, the model and Adam's
    state; across an epoch boundary: 4 minibatches of 7 per epoch), and the step count carries over."""
    X, y = toy_data(n=30, seed=9)
    start = random_model(X, 6, seed=5)
    whole = gpc.fit_svgp(start, X, y, key=jax.random.key(3), num_steps=7, batch_size=7)
    first = gpc.fit_svgp(start, X, y, key=jax.random.key(3), num_steps=3, batch_size=7)
    gpc.save(tmp_path / "checkpoint.gpc", first)
    loaded = gpc.load(tmp_path / "checkpoint.gpc")
    rest = gpc.fit_svgp(loaded, X, y, key=jax.random.key(3), num_steps=4, batch_size=7)
    assert int(first.next_step) == 3 and int(rest.next_step) == 7 == int(whole.next_step)
    np.testing.assert_allclose(np.concatenate([first.elbo, rest.elbo]), whole.elbo, rtol=1e-13)
    for a, b in zip(jax.tree.leaves((rest.model, rest.optimizer_state)), jax.tree.leaves((whole.model,
                                                                                           whole.optimizer_state))):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-15)
    with pytest.raises(gpc.GPClassError, match="optimizer_state"):
        gpc.fit_svgp(eqx.tree_at(lambda f: f.optimizer_state, first, None, is_leaf=lambda x: x is None), X, y,
                     key=jax.random.key(3), num_steps=1, batch_size=7)
