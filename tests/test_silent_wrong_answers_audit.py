"""No silent wrong answers, session two: what the audits of session 32 found returning a number (or a raw error)
where a user needed a refusal or a truthful status. A test of a fix failed before it, and its first comment says
what happened then; the last test backs a promise the guide now makes (Ordinal masks), which held already.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import fast_infer

import gpclass as gpc
from gpclass.likelihoods._weighted import Weighted

RNG = np.random.default_rng(0)
X = np.round(RNG.normal(size=(40, 3)) * 256) / 256
Y = np.where(X[:, 0] > 0, 1.0, -1.0)
X_TEST = np.round(RNG.normal(size=(7, 3)) * 256) / 256
LIK = gpc.likelihoods.Logistic()
X_SMALL, Y_SMALL = X[:12], Y[:12]  # where a test compiles whole methods, a smaller problem compiles faster


# --- MacKay's approximation belongs to the logistic -----------------------------------------------------------

def _mackay_numpy(mean, var):
    """sigma(mean / sqrt(1 + pi var / 8)) in NumPy (Gibbs & MacKay eq. 23)."""
    return 1.0 / (1.0 + np.exp(-mean / np.sqrt(1.0 + np.pi * var / 8.0)))


@pytest.mark.parametrize("integrator", [gpc.integrators.MacKay(), gpc.integrators.MeanField()])
@pytest.mark.parametrize("likelihood", [
    gpc.likelihoods.Probit(), gpc.likelihoods.Heaviside(),
    gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), 0.3), gpc.likelihoods.SoftLabels(gpc.likelihoods.Probit()),
])
def test_mackay_refuses_a_likelihood_that_is_not_logistic(integrator, likelihood):
    # Before: sigma(kappa m) whatever the likelihood: Probit at m = 2, var = 0 gave 0.8808 against Phi(2) = 0.9772,
    # and LabelNoise(Probit, 0.3) gave 0.8808, above the model's ceiling of 0.7.
    mean, var = jnp.array([0.0, 2.0]), jnp.array([1.0, 0.0])
    with pytest.raises(gpc.GPClassError, match="approximates the average of the logistic"):
        jax.jit(lambda m, v: integrator.binary(likelihood, m, v))(mean, var)


def test_mackay_of_wrapped_logistic_likelihoods_is_the_logistic_formula():
    mean, var = np.array([0.0, 2.0, -3.0]), np.array([1.0, 0.0, 4.0])
    logistic = gpc.likelihoods.Logistic()
    plain = _mackay_numpy(mean, var)
    for likelihood, expected in [
        (logistic, plain),
        (gpc.likelihoods.SoftLabels(logistic), plain),
        (Weighted(logistic), plain),  # what sample_weight wraps the likelihood in
        (gpc.likelihoods.LabelNoise(logistic, 0.2), 0.2 + 0.6 * plain),
    ]:
        got = gpc.integrators.MacKay().binary(likelihood, jnp.asarray(mean), jnp.asarray(var))
        np.testing.assert_allclose(np.asarray(got), expected, rtol=1e-6)


def test_predict_with_mackay_on_a_probit_posterior_is_refused():
    post = gpc.infer(gpc.Laplace(), gpc.kernels.SquaredExponential(1.0, 1.0), gpc.likelihoods.Probit(), X, Y)
    with pytest.raises(gpc.GPClassError, match="Probit is not one"):
        gpc.predict(post, X_TEST, integrator=gpc.integrators.MacKay())


# --- SVGP: the ELBO reads the labels fit_svgp reads; no model without inducing inputs ------------------------------

def _svgp_model():
    return gpc.SVGP.at_prior(gpc.kernels.SquaredExponential(1.0, 1.0), LIK, X[:6])


def test_svgp_elbo_takes_the_label_codings_fit_svgp_takes():
    # Before: labels {0, 1} gave another number than {-1, +1} (-37.07 against -21.54 on the audit's data), and
    # labels 2y a higher "ELBO"; fit_svgp recodes them, so the two disagreed on the same data.
    model = _svgp_model()
    np.testing.assert_allclose(float(model.elbo(X, (Y > 0).astype(float))), float(model.elbo(X, Y)), rtol=1e-12)
    np.testing.assert_allclose(float(model.elbo(X, Y > 0)), float(model.elbo(X, Y)), rtol=1e-12)
    with pytest.raises(gpc.GPClassError, match=r"binary labels y must be in.*y\[0\] = 2"):
        model.elbo(X, np.full(len(Y), 2.0))
    with pytest.raises(gpc.GPClassError, match="X has 2 input dimensions but the model's inducing inputs have 3"):
        model.elbo(X[:, :2], Y)
    with pytest.raises(gpc.GPClassError, match=r"X contains NaN"):
        model.elbo(np.where(np.arange(len(X))[:, None] == 4, np.nan, X), Y)


def test_svgp_elbo_checks_also_under_a_users_jit_and_grad():
    model = _svgp_model()
    grad = jax.jit(jax.grad(lambda m, y: m.elbo(X, y)))
    gradient = grad(model, Y)
    assert np.isfinite(float(gradient.q_mu[0]))
    with pytest.raises(Exception, match="binary labels y must be in"):
        jax.block_until_ready(grad(model, np.full(len(Y), 2.0)))


def test_fit_svgp_refuses_one_class_when_fitting_hyperparameters():
    # Before: COMPLETED, the signal variance drifting from 1 to 15 (500 steps) and 174 (2000 steps).
    model, ones = _svgp_model(), np.ones(len(Y))
    with pytest.raises(gpc.GPClassError, match="fit_svgp: every training label in y is of one class"):
        gpc.fit_svgp(model, X, ones, key=jax.random.key(0), num_steps=5)
    fit = gpc.fit_svgp(model, X, ones, key=jax.random.key(0), num_steps=5, fit_hyperparameters=False)
    assert float(fit.model.kernel.variance) == 1.0


@pytest.mark.parametrize("build", [
    lambda Z: gpc.Sparse(gpc.kernels.SquaredExponential(1.0, 1.0), Z),
    lambda Z: gpc.SVGP.at_prior(gpc.kernels.SquaredExponential(1.0, 1.0), LIK, Z),
])
def test_no_inducing_inputs_is_refused(build):
    # Before: CONVERGED / COMPLETED with every prediction 0.5.
    with pytest.raises(gpc.GPClassError, match=r"no inducing inputs \(shape \(0, d\)\)"):
        build(np.zeros((0, 3)))


# --- Jaakkola-Jordan in float32 at extreme hyperparameters ------------------------------------------------------

@pytest.mark.parametrize("method, lengthscale, variance", [
    (gpc.JaakkolaJordan(), 1e-8, 1e12),       # before: CONVERGED, log Z' = +5.2e5 (a lower bound of log p(y) <= 0)
    (gpc.JaakkolaJordanUpper(), 1e-8, 1e12),  # before: CONVERGED, log Z'' = +3.75e12 (its minimum is at most 0)
    (gpc.JaakkolaJordan(), 1e8, 1e12),        # before: CONVERGED, negative posterior variances, NaN predictions
    (gpc.JaakkolaJordan(), 1e-8, 1e8),        # before: CONVERGED at -276 (float64 reaches -140): Sigma rounded to 0
])
def test_float32_jaakkola_jordan_does_not_converge_to_an_impossible_state(method, lengthscale, variance):
    rng = np.random.default_rng(0)
    X32 = rng.normal(size=(30, 2)).astype(np.float32)
    y32 = np.where(X32[:, 0] + 0.3 * rng.normal(size=30) > 0, 1.0, -1.0).astype(np.float32)
    with jax.enable_x64(False):
        kernel = gpc.kernels.SquaredExponential(np.float32(variance), np.float32(lengthscale))
        post = gpc.infer(method, kernel, LIK, X32, y32, throw=False)
        status = gpc.Status(int(post.info.status))
    assert status == gpc.Status.IMPRECISE, (status, float(post.log_marginal))


# --- label noise and soft labels wrap binary likelihoods only ---------------------------------------------------

@pytest.mark.parametrize("make, name", [
    (lambda: gpc.likelihoods.SoftLabels(gpc.likelihoods.Ordinal(3)), "Ordinal"),
    (lambda: gpc.likelihoods.SoftLabels(gpc.likelihoods.Softmax(3)), "Softmax"),
    (lambda: gpc.likelihoods.SoftLabels(gpc.likelihoods.MultinomialProbit(3)), "MultinomialProbit"),
    (lambda: gpc.likelihoods.LabelNoise(gpc.likelihoods.Softmax(3), 0.1), "Softmax"),
    (lambda: gpc.likelihoods.LabelNoise(gpc.likelihoods.Ordinal(3), 0.1), "Ordinal"),
])
def test_wrappers_of_binary_likelihoods_refuse_other_bases(make, name):
    # Before: SoftLabels(Ordinal(3)) ran under Laplace, EP and KL to CONVERGED, reading the soft label's "-1"
    # as an ordinal class; SoftLabels(Softmax(3)) and LabelNoise(Softmax(3)) failed deep inside with raw errors.
    with pytest.raises(gpc.GPClassError, match=f"wraps a binary likelihood.*{name} is not one"):
        make()


def test_mcmc_whose_chain_stood_still_is_stalled():
    # Before: HMC with step_size 100 rejected every proposal (acceptance rate 0.0) and reported CONVERGED, its
    # "samples" the chains' starting point f = 0 (every probability 1/2).
    def run(step_size):
        method = gpc.MCMC(sampler=gpc.samplers.HMC(step_size=step_size, num_leapfrog=5), num_samples=20,
                          num_warmup=5, num_chains=2)
        return fast_infer(method, gpc.kernels.SquaredExponential(1.0, 1.0), LIK, X_SMALL, Y_SMALL,
                          key=jax.random.key(0), throw=False)

    stuck, moving = run(100.0), run(0.1)
    assert float(stuck.info.acceptance_rate) == 0.0
    assert gpc.Status(int(stuck.info.status)) == gpc.Status.STALLED
    assert gpc.Status(int(moving.info.status)) == gpc.Status.CONVERGED


def test_a_warm_start_of_other_data_or_another_method_is_refused():
    # Before: raw JAX shape errors from deep inside (dot_general, broadcasting, "cannot be concatenated").
    kernel, probit = gpc.kernels.SquaredExponential(1.0, 1.0), gpc.likelihoods.Probit()
    X, Y = X_SMALL, Y_SMALL
    laplace = fast_infer(gpc.Laplace(), kernel, LIK, X, Y)
    ep = fast_infer(gpc.EP(), kernel, probit, X, Y)
    n = len(Y)
    for call, message in [
        (lambda: gpc.infer(gpc.Laplace(), kernel, LIK, X[:-1], Y[:-1], init=laplace.warm_start),
         rf"warm start of Laplace on these {n - 1} cases, shaped \({n - 1},\); got \({n},\)"),
        (lambda: gpc.infer(gpc.EP(), kernel, probit, X[:-1], Y[:-1], init=ep.warm_start), "warm start of EP"),
        (lambda: gpc.infer(gpc.Laplace(), kernel, LIK, X, Y, init=ep.warm_start), "warm start of Laplace"),
        (lambda: gpc.infer(gpc.EP(), kernel, probit, X, Y, init=laplace.warm_start), "warm start of EP"),
    ]:
        with pytest.raises(gpc.GPClassError, match=message):
            call()
    again = fast_infer(gpc.Laplace(), kernel, LIK, X, Y, init=laplace.warm_start)  # its own: accepted
    np.testing.assert_allclose(float(again.log_marginal), float(laplace.log_marginal), rtol=1e-10)


def test_predict_on_what_is_not_one_posterior_says_what_to_pass():
    # Before: AttributeError ('FitResult' object has no attribute '_probability', ...), and for a vmapped posterior
    # "X_test has 3 input dimensions but the training inputs have 40".
    kernel = gpc.kernels.SquaredExponential(1.0, 1.0)
    # The refusal looks at the type only: results made without running a fit (which would take seconds to compile).
    result, svgp = object.__new__(gpc.FitResult), object.__new__(gpc.SVGPFit)
    for what, message in [(result, "got FitResult: pass result.posterior"), (svgp, "got SVGPFit: pass fit.model"),
                          (kernel, "got SquaredExponential")]:
        for call in (gpc.predict, gpc.predict_latent):
            with pytest.raises(gpc.GPClassError, match=message):
                call(what, X_TEST)
    batch = jax.vmap(lambda y: gpc.infer(gpc.Laplace(), kernel, LIK, X[:12], y))(np.stack([Y[:12], -Y[:12]]))
    with pytest.raises(gpc.GPClassError, match="holds a batch of 2 problems"):
        gpc.predict(batch, X_TEST)
    p = jax.vmap(gpc.predict, in_axes=(0, None))(batch, X_TEST)  # the way the message gives
    single = gpc.infer(gpc.Laplace(), kernel, LIK, X[:12], Y[:12])
    np.testing.assert_allclose(np.asarray(p[0]), np.asarray(gpc.predict(single, X_TEST)), rtol=1e-9)


@pytest.mark.parametrize("call, message", [
    (lambda: gpc.fit(gpc.Laplace(), gpc.kernels.SquaredExponential(1.0, 1.0), LIK, X, Y, optimizer="adam"),
     "fit: optimizer must be an optax transformation.*got 'adam'"),
    (lambda: gpc.fit_svgp(_svgp_model(), X, Y, key=jax.random.key(0), num_steps=2, optimizer="adam"),
     "fit_svgp: optimizer must be an optax transformation"),
    (lambda: gpc.fit_svgp(_svgp_model(), X, Y, key=None, num_steps=2), "fit_svgp: key must be a JAX PRNG key.*None"),
    (lambda: gpc.fit_svgp(_svgp_model(), X, Y, key=0, num_steps=2), "fit_svgp: key must be a JAX PRNG key.*got 0"),
    (lambda: gpc.infer(gpc.MCMC(num_samples=2, num_warmup=1), gpc.kernels.SquaredExponential(1.0, 1.0), LIK, X, Y,
                       key=0), "infer: key must be a JAX PRNG key"),
    (lambda: gpc.predict(gpc.infer(gpc.Laplace(), gpc.kernels.SquaredExponential(1.0, 1.0), gpc.likelihoods.Softmax(2),
                                   X, (Y > 0).astype(int)), X_TEST, key=0), "predict: key must be a JAX PRNG key"),
])
def test_a_key_or_optimizer_of_the_wrong_kind_is_named(call, message):
    # Before: AttributeError ('str' object has no attribute 'init') and TypeErrors from JAX's PRNG.
    with pytest.raises(gpc.GPClassError, match=message):
        call()


def test_raw_and_typed_keys_are_both_accepted():
    post = gpc.infer(gpc.Laplace(), gpc.kernels.SquaredExponential(1.0, 1.0), gpc.likelihoods.Softmax(2), X,
                     (Y > 0).astype(int))
    typed = gpc.predict(post, X_TEST, key=jax.random.key(3))
    raw = gpc.predict(post, X_TEST, key=jax.random.PRNGKey(3))
    np.testing.assert_allclose(np.asarray(typed), np.asarray(raw), rtol=1e-12)


def test_svgp_names_a_heaviside_likelihood_and_nan_inducing_inputs():
    # Before: fit_svgp FAILED with "lower the optimiser's learning rate" for both.
    kernel = gpc.kernels.SquaredExponential(1.0, 1.0)
    with pytest.raises(gpc.GPClassError, match="SVGP: with Heaviside the ELBO is -inf"):
        gpc.SVGP.at_prior(kernel, gpc.likelihoods.Heaviside(), X[:6])
    gpc.SVGP.at_prior(kernel, gpc.likelihoods.LabelNoise(gpc.likelihoods.Heaviside(), 0.1), X[:6])  # accepted
    Z = X[:6].copy()
    Z[2, 1] = np.nan
    model = gpc.SVGP.at_prior(kernel, LIK, Z)
    for call in (lambda: gpc.fit_svgp(model, X, Y, key=jax.random.key(0), num_steps=2), lambda: model.elbo(X, Y)):
        with pytest.raises(gpc.GPClassError, match=r"inducing inputs Z contain NaN.*Z\[2, 1\] = nan"):
            call()


@pytest.mark.parametrize("log_prior, message", [
    (lambda kernel, likelihood: jnp.log(kernel.lengthscale - 2.0), "log_prior.*is not finite at the starting"),
    (lambda kernel, likelihood: jnp.zeros(2), r"log_prior.*must return a scalar; it returned shape \(2,\)"),
])
def test_fit_names_a_log_prior_that_is_not_a_finite_scalar(log_prior, message):
    # Before: "the inner solver did not converge at the starting hyperparameters, or ..." (NaN), a shape error.
    with pytest.raises(gpc.GPClassError, match=message):
        gpc.fit(gpc.Laplace(), gpc.kernels.SquaredExponential(1.0, 1.0), LIK, X, Y, log_prior=log_prior)


def test_a_fractional_power_of_a_kernel_with_negative_values_is_named():
    # Before: "the kernel matrix K contains NaN ... check the kernel's hyperparameters", which are fine.
    kernel = gpc.kernels.Exponentiation(gpc.kernels.Linear(1.0), 0.5)
    with pytest.raises(gpc.GPClassError, match=r"Exponentiation\(kernel, 0.5\): the kernel has negative values"):
        gpc.infer(gpc.Laplace(), kernel, LIK, X_SMALL, Y_SMALL)
    se = gpc.kernels.SquaredExponential(1.0, 2.0)  # SE ** 1/2 is the SE of length scale 2 sqrt(2)
    half = fast_infer(gpc.Laplace(), gpc.kernels.Exponentiation(se, 0.5), LIK, X_SMALL, Y_SMALL)
    wider = fast_infer(gpc.Laplace(), gpc.kernels.SquaredExponential(1.0, 2.0 * np.sqrt(2.0)), LIK, X_SMALL, Y_SMALL)
    np.testing.assert_allclose(float(half.log_marginal), float(wider.log_marginal), rtol=1e-10)


def test_the_ordinal_estimator_refuses_text_labels():
    # Before: 'low' < 'mid' < 'high' became ranks high = 0, low = 1, mid = 2 (sorted text), a different model
    # (log marginal likelihood -30.17 against -25.76 for the true order on Machine CPU; test accuracy 0.2 vs 0.7).
    from gpclass.sklearn import GaussianProcessClassifier

    text = np.array(["low", "mid", "high"])[np.arange(12) % 3]
    with pytest.raises(gpc.GPClassError, match=r"text labels sort alphabetically \('high', 'low', 'mid'\)"):
        GaussianProcessClassifier(likelihood="ordinal", optimize=False).fit(X_SMALL, text)


def test_a_fractional_power_of_an_underflowed_kernel_has_the_gradient_of_its_closed_form():
    # Before: where SE underflowed to 0, a K^(a - 1) dK = inf * 0 gave a NaN gradient, and gpc.fit FAILED at the
    # start (advising to standardise the inputs); SE(v, l)^a is SE(v^a, l / sqrt(a)), whose gradient is finite.
    def log_q(log_lengthscale, power):
        lengthscale = jnp.exp(log_lengthscale)
        kernel = (gpc.kernels.Exponentiation(gpc.kernels.SquaredExponential(2.0, lengthscale), 0.5) if power else
                  gpc.kernels.SquaredExponential(np.sqrt(2.0), lengthscale * np.sqrt(2.0)))
        return gpc.infer(gpc.Laplace(), kernel, LIK, X_SMALL, Y_SMALL).log_marginal

    at = jnp.log(0.01)  # the off-diagonal SE values underflow to 0 in float64
    value, gradient = jax.value_and_grad(log_q)(at, True)
    expected_value, expected_gradient = jax.value_and_grad(log_q)(at, False)
    np.testing.assert_allclose(float(value), float(expected_value), rtol=1e-12)
    assert np.isfinite(float(gradient))
    np.testing.assert_allclose(float(gradient), float(expected_gradient), atol=1e-12)


def test_an_anisotropic_scikit_learn_rational_quadratic_is_refused_as_scikit_learn_refuses_it():
    # Before: fitted as an ARD RationalQuadratic, whose kernel_ (scikit-learn's) then raised when evaluated.
    from sklearn.gaussian_process.kernels import RationalQuadratic

    from gpclass.sklearn import GaussianProcessClassifier

    with pytest.raises(gpc.GPClassError, match="RationalQuadratic takes one \\(isotropic\\) length scale"):
        GaussianProcessClassifier(RationalQuadratic(length_scale=[1.0, 2.0, 3.0]), optimize=False).fit(X_SMALL, Y_SMALL)


@pytest.mark.parametrize("method", [gpc.EP(), gpc.KL()])
def test_an_ordinal_case_left_out_by_mask_is_as_if_removed(method):
    # What the guide now promises (Laplace's is in test_ordinal): a padded case changes nothing, exactly.
    ordinal, labels = gpc.likelihoods.Ordinal(3), np.arange(12) % 3
    kernel = gpc.kernels.SquaredExponential(1.0, 1.0)
    padded_X, padded_y = np.r_[X_SMALL, [[5.0, 5.0, 5.0]]], np.r_[labels, 0]
    mask = np.r_[np.ones(12, bool), False]
    removed = fast_infer(method, kernel, ordinal, X_SMALL, labels)
    masked = fast_infer(method, kernel, ordinal, padded_X, padded_y, mask=mask)
    np.testing.assert_allclose(float(masked.log_marginal), float(removed.log_marginal), rtol=1e-12)
