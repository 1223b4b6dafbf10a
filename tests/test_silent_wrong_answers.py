"""No silent wrong answers: settings and inputs that used to return a number with a success status now raise or
report their status, and results do not depend on what they must not depend on (a common offset of the inputs).

Each test here failed before the fix it covers (issue 40): EP(damping=0) returned the prior's log Z with status
CONVERGED; squared distances by |a|^2 + |b|^2 - 2 a.b lost every digit under an offset of 1e8; float32 Laplace on
raw Pima at its ML-II optimum said CONVERGED with test-point means off by 40; an infinite length scale gave NaN
gradients; strings, float16 and integer hyperparameters gave raw errors; a failed check raised three different
exception types; whole-number weights of 1e6 asked for 8.8e14 bytes.
"""

import functools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import FAST_COMPILE

import gpclass as gpc

RNG = np.random.default_rng(0)
# Inputs on a grid of 2^-8: X + 1e8 is exact in float64 (spacing 1.5e-8 there) and X + 1e4 exact in float32
# (spacing 2^-10), so any change under the offset comes from the computation, not from rounding the inputs.
X = np.round(RNG.normal(size=(40, 3)) * 256) / 256
Y = np.where(X[:, 0] > 0, 1.0, -1.0)
X_TEST = np.round(RNG.normal(size=(7, 3)) * 256) / 256
LIK = gpc.likelihoods.Logistic()


# --- 1. configuration values checked at construction ------------------------------------------------------------

@pytest.mark.parametrize("make, message", [
    (lambda: gpc.EP(damping=0.0), "EP: damping must be a number in \\(0, 1\\]"),
    (lambda: gpc.EP(damping=1.5), "EP: damping"),
    (lambda: gpc.EP(max_steps=0), "EP: max_steps"),
    (lambda: gpc.EP(tol=0.0), "EP: tol"),
    (lambda: gpc.EP(tol=float("nan")), "EP: tol"),
    (lambda: gpc.Laplace(max_steps=0), "Laplace: max_steps"),
    (lambda: gpc.Laplace(max_steps=2.5), "Laplace: max_steps must be an integer"),
    (lambda: gpc.Laplace(max_steps=True), "Laplace: max_steps must be an integer"),
    (lambda: gpc.Laplace(tol=-1e-8), "Laplace: tol"),
    (lambda: gpc.Laplace(residual_tol=0.0), "Laplace: residual_tol"),
    (lambda: gpc.Laplace(max_halvings=-1), "Laplace: max_halvings"),
    (lambda: gpc.KL(site_tol=0.0), "KL: site_tol"),
    (lambda: gpc.KL(krylov_steps=0), "KL: krylov_steps"),
    (lambda: gpc.JaakkolaJordan(max_steps=0), "JaakkolaJordan: max_steps"),
    (lambda: gpc.JaakkolaJordanUpper(tol=float("inf")), "JaakkolaJordanUpper: tol"),
    (lambda: gpc.MCMC(num_samples=0), "MCMC: num_samples"),
    (lambda: gpc.MCMC(num_chains=0), "MCMC: num_chains"),
    (lambda: gpc.MCMC(thin=0), "MCMC: thin"),
    (lambda: gpc.MCMC(num_warmup=-1), "MCMC: num_warmup"),
    (lambda: gpc.MCMC(jitter=-1e-6), "MCMC: jitter"),
    (lambda: gpc.AIS(exponent=0), "AIS: exponent"),
    (lambda: gpc.AIS(num_runs=0), "AIS: num_runs"),
    (lambda: gpc.AIS(num_temperatures=0), "AIS: num_temperatures"),
    (lambda: gpc.samplers.HMC(step_size=0.0), "HMC: step_size"),
    (lambda: gpc.samplers.EllipticalSlice(max_shrinks=0), "EllipticalSlice: max_shrinks"),
    (lambda: gpc.Sparse(gpc.kernels.SquaredExponential(), X[:4], jitter=-1.0), "Sparse: jitter"),
    (lambda: gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), 1.5), "epsilon, the label-flip rate"),
    (lambda: gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), 0.5), "epsilon, the label-flip rate"),
    (lambda: gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), -0.1), "epsilon, the label-flip rate"),
])
def test_invalid_settings_are_refused_at_construction(make, message):
    with pytest.raises(gpc.GPClassError, match=message):
        make()


def test_boundary_settings_are_accepted():
    gpc.EP(damping=1.0), gpc.MCMC(num_warmup=0), gpc.Laplace(max_halvings=0), gpc.Sparse(gpc.kernels.Linear(), X[:3],
                                                                                        jitter=0.0)
    gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), 0.0)


@pytest.mark.slow
def test_ep_with_zero_damping_no_longer_returns_the_prior():
    """Before: accepted, status CONVERGED after 2 sweeps and log Z = n log 1/2, every prediction 0.5."""
    with pytest.raises(gpc.GPClassError, match="damping"):
        gpc.infer(gpc.EP(damping=0.0), gpc.kernels.SquaredExponential(1.0, 1.5), LIK, X, Y)
    post = gpc.infer(gpc.EP(damping=1.0), gpc.kernels.SquaredExponential(1.0, 1.5), LIK, X, Y)
    assert float(post.log_marginal) > len(Y) * np.log(0.5) + 5  # the data are informative


@pytest.mark.parametrize("call, message", [
    (lambda k: gpc.fit(gpc.Laplace(), k, LIK, X, Y, max_steps=0), "fit: max_steps"),
    (lambda k: gpc.fit(gpc.Laplace(), k, LIK, X, Y, gtol=0.0), "fit: gtol"),
    (lambda k: gpc.fit_em_ep(gpc.EP(), k, gpc.likelihoods.LabelNoise(gpc.likelihoods.Heaviside(), 0.1), X, Y,
                             max_steps=0), "fit_em_ep: max_steps"),
    (lambda k: gpc.fit_svgp(gpc.SVGP.at_prior(k, LIK, X[:4]), X, Y, key=jax.random.key(0), num_steps=0),
     "fit_svgp: num_steps"),
    (lambda k: gpc.sharded_vmap(lambda X, y: gpc.infer(gpc.Laplace(), k, LIK, X, y).log_marginal)(
        np.zeros((0, 40, 3)), np.zeros((0, 40))), "no problems"),
])
def test_invalid_call_settings_are_clear_errors(call, message):
    """Before: fit(max_steps=0) was an IndexError, sharded_vmap over 0 problems a ZeroDivisionError."""
    with pytest.raises(gpc.GPClassError, match=message):
        call(gpc.kernels.SquaredExponential(1.0, 1.5))


def test_a_traced_label_flip_rate_out_of_range_raises_inside_jit():
    """epsilon is a hyperparameter and may be traced: the range check then runs in the program (before: EP
    'did not converge (FAILED)')."""
    def log_z(eps):
        lik = gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), eps)
        return gpc.infer(gpc.EP(), gpc.kernels.SquaredExponential(1.0, 1.5), lik, X, Y).log_marginal

    program = gpc.jit(log_z, compiler_options=FAST_COMPILE)
    assert np.isfinite(program(0.1))
    with pytest.raises(gpc.GPClassError, match="epsilon, the label-flip rate"):
        program(0.7)


@pytest.mark.slow
def test_an_infinite_length_scale_is_refused():
    """Before: accepted as 'a constant direction', with NaN gradients."""
    for lengthscale in (np.inf, np.array([1.0, np.inf, 2.0])):
        with pytest.raises(gpc.GPClassError, match="lengthscale must be finite and > 0"):
            gpc.infer(gpc.Laplace(), gpc.kernels.SquaredExponential(1.0, lengthscale), LIK, X, Y)


# --- 2. a common offset of the inputs changes nothing ----------------------------------------------------------

@functools.partial(gpc.jit, compiler_options=FAST_COMPILE)
def laplace_values(log_params, X, X_test):
    """log q, its gradient in (log variance, log length scales), and the test-point probabilities and means:
    one program per dtype and length-scale shape, shared by the inputs with and without the offset."""
    y = Y.astype(X.dtype)

    def log_q(log_params):
        kernel = gpc.kernels.SquaredExponential(jnp.exp(log_params[0]), jnp.exp(log_params[1]))
        return gpc.infer(gpc.Laplace(), kernel, LIK, X, y).log_marginal

    value, grads = jax.value_and_grad(log_q)(log_params)
    kernel = gpc.kernels.SquaredExponential(jnp.exp(log_params[0]), jnp.exp(log_params[1]))
    post = gpc.infer(gpc.Laplace(), kernel, LIK, X, y)
    mean, _ = gpc.predict_latent(post, X_test)
    grad = jnp.concatenate([jnp.atleast_1d(g) for g in grads])
    return value, grad, gpc.predict(post, X_test), mean


@pytest.mark.parametrize("dtype, offset, rtol", [(np.float64, 1e8, 1e-10), (np.float32, 1e4, 5e-4)],
                         ids=["float64 offset 1e8", "float32 offset 1e4"])
@pytest.mark.parametrize("lengthscale", [1.3, np.array([1.3, 0.7, 2.1])], ids=["isotropic", "ARD"])
@pytest.mark.slow
def test_log_q_gradients_and_predictions_do_not_depend_on_an_offset(dtype, offset, rtol, lengthscale):
    """Before: log q(X + 1e7) - log q(X) = -0.015 in float64; in float32 an offset of 1e3 moved log q by 0.019."""
    assert (X + offset).astype(dtype).astype(np.float64).tolist() == (X + offset).tolist()  # the inputs are exact
    with jax.enable_x64(dtype == np.float64):
        log_params = (np.log(dtype(1.5)), np.log(np.asarray(lengthscale, dtype)))
        values = laplace_values(log_params, X.astype(dtype), X_TEST.astype(dtype))
        shifted = laplace_values(log_params, (X + offset).astype(dtype), (X_TEST + offset).astype(dtype))
    for a, b in zip(values, shifted):
        a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
        np.testing.assert_allclose(b, a, rtol=rtol, atol=rtol * np.max(np.abs(a)))


def test_gram_matrix_stays_positive_semidefinite_under_an_offset():
    """Before: the smallest eigenvalue of k.gram(X + 1e8) was -5.07 (float64)."""
    kernel = gpc.kernels.SquaredExponential(1.0, 1.5)
    K = np.asarray(kernel.gram(jnp.asarray(X)))
    K_shift = np.asarray(kernel.gram(jnp.asarray(X + 1e8)))
    np.testing.assert_allclose(K_shift, K, atol=1e-13)
    assert np.linalg.eigvalsh(K_shift).min() > -1e-12
    cross = np.asarray(kernel.gram(jnp.asarray(X_TEST + 1e8), jnp.asarray(X + 1e8)))
    np.testing.assert_allclose(cross, np.asarray(kernel.gram(jnp.asarray(X_TEST), jnp.asarray(X))), atol=1e-13)


@pytest.mark.parametrize("kernel_type", [gpc.kernels.SquaredExponential, gpc.kernels.Matern12, gpc.kernels.Matern52])
@pytest.mark.parametrize("ard", [False, True], ids=["isotropic", "ARD"])
@pytest.mark.slow
def test_distances_of_nearby_inputs_keep_their_digits_at_a_tiny_length_scale(kernel_type, ard):
    """Inputs spread over ~1e8 length scales with two rows 1.35e-7 apart (a near-duplicate case at the length
    scale of Chu & Ghahramani's Pyrimidines fit, 27 inputs): the Gram matrix against the kernel evaluated pair by
    pair from the differences in numpy (1e-8 relative, measured 3e-10), positive semi-definite, and the gradient
    in the log length scale against central differences: 1e-6 for an isotropic length scale (which divides the
    distances afterwards), 1e-2 for ARD (measured 1.9e-3: the derivative is the expansion's, whose cancellation
    in the scaled inputs' directions remains; ``squared_distances``).  Before: the expansion |a|^2 + |b|^2 - 2 a.b
    gave a squared distance of 22.5 for 23.6 and, on Pyrimidines, an eigenvalue of -0.055 and EP's log q NaN."""
    rng = np.random.default_rng(0)
    X27 = rng.normal(size=(12, 27))
    X27[1] = X27[0] + 1e-7 * rng.normal(size=27)
    ell = 1.35e-7
    lengthscale = np.full(27, ell) if ard else ell
    r = np.sqrt(((X27[:, None, :] - X27[None, :, :]) ** 2).sum(-1)) / ell
    profile = {gpc.kernels.SquaredExponential: lambda r: np.exp(-0.5 * r**2),
               gpc.kernels.Matern12: lambda r: np.exp(-r),
               gpc.kernels.Matern52: lambda r: (1 + np.sqrt(5) * r + 5 * r**2 / 3) * np.exp(-np.sqrt(5) * r)}
    K = np.asarray(kernel_type(1.0, lengthscale).gram(jnp.asarray(X27)))
    np.testing.assert_allclose(K, profile[kernel_type](r), rtol=1e-8, atol=1e-300)
    assert K[0, 1] > 1e-6 and np.linalg.eigvalsh(K).min() > -1e-12

    def entry(log_ell):
        return kernel_type(1.0, jnp.exp(log_ell) * jnp.ones_like(jnp.asarray(lengthscale))).gram(jnp.asarray(X27))[0, 1]

    g = float(jax.grad(entry)(np.log(ell)))
    h = 1e-6
    np.testing.assert_allclose(g, (float(entry(np.log(ell) + h)) - float(entry(np.log(ell) - h))) / (2 * h),
                               rtol=1e-2 if ard else 1e-6)


def test_float32_estimator_with_a_year_like_feature():
    """A feature 2000 + U(0, 20) next to standard ones: the float32 estimator's probabilities equal those with the
    feature shifted to U(0, 20) (before: they moved by up to 0.27)."""
    from gpclass.sklearn import GaussianProcessClassifier

    rng = np.random.default_rng(3)
    year = np.round(rng.uniform(0, 20, size=60) * 64) / 64
    other = np.round(rng.normal(size=(60, 2)) * 64) / 64
    labels = (other[:, 0] + (year - 10) / 5 + 0.3 * rng.normal(size=60) > 0).astype(int)
    kernel = gpc.kernels.SquaredExponential(np.float32(2.0), np.array([5.0, 1.0, 1.0], np.float32))
    probabilities = []
    for offset in (0.0, 2000.0):
        features = np.column_stack([year + offset, other])
        clf = GaussianProcessClassifier(kernel=kernel, optimize=False, dtype="float32").fit(features[:40], labels[:40])
        probabilities.append(clf.predict_proba(features[40:])[:, 1])
    np.testing.assert_allclose(probabilities[1], probabilities[0], atol=2e-4)


# --- 3. float32 on an ill-conditioned kernel: IMPRECISE, not CONVERGED ---------------------------------------

def raw_pima():
    X, y = gpc.datasets.load("pima")
    return gpc.datasets.train_test_split(X, y, 200, seed=0)


@pytest.mark.slow
def test_float32_laplace_on_an_ill_conditioned_kernel_reports_imprecise():
    """Raw (unstandardised) Pima at its float64 ML-II optimum (sigma_f^2 ~ 500, l ~ 640): float32 used to report
    CONVERGED with test error 0.65 against 0.24 in float64 and latent means off by 40.  The mode's residual
    f - K grad log p(y|f) (the error of the predictive mean at the training inputs) is checked in the working
    precision: float32 now stops with IMPRECISE, float64 converges, and throw=True raises naming it."""
    X_train, X_test, y_train, _ = raw_pima()
    kernel = gpc.kernels.SquaredExponential(500.0, 640.0)
    post64 = gpc.infer(gpc.Laplace(), kernel, LIK, X_train, y_train)
    assert gpc.Status(int(post64.info.status)) == gpc.Status.CONVERGED
    # Independent check of what CONVERGED promises: K alpha reproduces the mode (NumPy, from kernel blocks).
    K = np.asarray(kernel.gram(jnp.asarray(X_train)))
    f = np.asarray(post64.mean)
    assert np.max(np.abs(K @ np.asarray(post64.alpha) - f)) <= 1e-3 * (1 + np.max(np.abs(f)))
    with jax.enable_x64(False):
        kernel32 = gpc.kernels.SquaredExponential(np.float32(500.0), np.float32(640.0))
        X32 = X_train.astype(np.float32)
        post32 = gpc.infer(gpc.Laplace(), kernel32, LIK, X32, y_train, throw=False)
        assert gpc.Status(int(post32.info.status)) == gpc.Status.IMPRECISE
        mean32, _ = gpc.predict_latent(post32, X_test.astype(np.float32))
        with pytest.raises(gpc.GPClassError, match="IMPRECISE.*too ill-conditioned for this precision"):
            gpc.infer(gpc.Laplace(), kernel32, LIK, X32, y_train)
    mean64, _ = gpc.predict_latent(post64, X_test)
    assert np.max(np.abs(np.asarray(mean32) - np.asarray(mean64))) > 0.1  # the status is not a false alarm


@pytest.mark.slow
def test_float32_laplace_on_a_moderate_kernel_still_converges_to_float64():
    """Standardised Pima with sigma_f^2 = 4, l = 3: CONVERGED in float32, with the float64 test-point means."""
    X_train, X_test, y_train, _ = raw_pima()
    X_train, X_test = gpc.datasets.standardize(X_train, X_test)
    post64 = gpc.infer(gpc.Laplace(), gpc.kernels.SquaredExponential(4.0, 3.0), LIK, X_train, y_train)
    with jax.enable_x64(False):
        kernel32 = gpc.kernels.SquaredExponential(np.float32(4.0), np.float32(3.0))
        post32 = gpc.infer(gpc.Laplace(), kernel32, LIK, X_train.astype(np.float32), y_train)
        assert gpc.Status(int(post32.info.status)) == gpc.Status.CONVERGED
        mean32, _ = gpc.predict_latent(post32, X_test.astype(np.float32))
    mean64, _ = gpc.predict_latent(post64, X_test)
    np.testing.assert_allclose(np.asarray(mean32), np.asarray(mean64), atol=1e-2 * (1 + np.max(np.abs(mean64))))


@pytest.mark.parametrize("case", ["sparse binary", "softmax"])
@pytest.mark.slow
def test_the_residual_check_covers_sparse_and_softmax_laplace(case):
    """The same check in the sparse (FITC) and multi-class Newton iterations: float32 IMPRECISE, float64 CONVERGED."""
    X_train, _, y_train, _ = raw_pima()
    if case == "sparse binary":
        likelihood = LIK
        make = lambda k, X: gpc.Sparse(k, X[:60])  # noqa: E731
        labels = y_train
    else:
        likelihood = gpc.likelihoods.Softmax(3)
        make = lambda k, X: k  # noqa: E731
        labels = np.digitize(X_train[:, 1], np.quantile(X_train[:, 1], [1 / 3, 2 / 3]))
    post64 = gpc.infer(gpc.Laplace(), make(gpc.kernels.SquaredExponential(500.0, 640.0), X_train), likelihood,
                       X_train, labels)
    assert gpc.Status(int(post64.info.status)) == gpc.Status.CONVERGED
    with jax.enable_x64(False):
        kernel32 = gpc.kernels.SquaredExponential(np.float32(500.0), np.float32(640.0))
        X32 = X_train.astype(np.float32)
        post32 = gpc.infer(gpc.Laplace(), make(kernel32, X32), likelihood, X32, labels, throw=False)
        assert gpc.Status(int(post32.info.status)) == gpc.Status.IMPRECISE


# --- 9. inputs of the wrong kind: cast or refused with the argument named ---------------------------------------

@pytest.mark.slow
def test_float16_inputs_are_computed_in_float32():
    """Before: NotImplementedError 'Unsupported dtype float16' from the factorisation."""
    kernel = gpc.kernels.SquaredExponential(np.float32(1.0), np.float32(1.5))
    with jax.enable_x64(False):
        half = gpc.infer(gpc.Laplace(), kernel, LIK, X.astype(np.float16), Y)
        single = gpc.infer(gpc.Laplace(), kernel, LIK, X.astype(np.float16).astype(np.float32), Y)
    assert half.log_marginal.dtype == jnp.float32
    assert float(half.log_marginal) == float(single.log_marginal)


@pytest.mark.parametrize("argument", ["X", "y"])
@pytest.mark.parametrize("kind", [str, object])
def test_strings_and_objects_are_refused_naming_the_argument(argument, kind):
    """Before: a TypeError about 'static_argnums' / 'abstract array'."""
    args = {"X": X, "y": Y}
    args[argument] = args[argument].astype(kind)
    with pytest.raises(gpc.GPClassError, match=f"infer: {argument} is an array of dtype .*must hold numbers"):
        gpc.infer(gpc.Laplace(), gpc.kernels.SquaredExponential(), LIK, args["X"], args["y"])


@pytest.mark.slow
def test_integer_hyperparameters_are_fitted_as_floats():
    """Before: 'fit: the kernel and likelihood have no floating-point parameters to fit'."""
    whole = gpc.fit(gpc.Laplace(), gpc.kernels.SquaredExponential(1, 2), LIK, X, Y)
    real = gpc.fit(gpc.Laplace(), gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(2.0)), LIK, X, Y)
    assert whole.kernel.variance.dtype == jnp.float64 and whole.converged
    np.testing.assert_allclose(float(whole.objective), float(real.objective), rtol=1e-12)


class _FloatField(gpc.kernels.AbstractKernel):
    """A kernel of one's own whose variance is a plain Python float: not a parameter to equinox."""

    variance: float = 1.0

    def evaluate(self, x1, x2):
        return self.variance * jnp.exp(-0.5 * jnp.sum((x1 - x2) ** 2))


@pytest.mark.parametrize("kernel, name", [
    (_FloatField(), "kernel.variance"),
    (_FloatField(2) + gpc.kernels.White(0.5), "kernel.k1.variance"),
])
def test_a_python_number_where_fit_would_fit_a_parameter_is_refused(kernel, name):
    """Before: combined with another kernel, the float was left at its start and the fit reported success (alone,
    'no floating-point parameters to fit')."""
    kind = "float 1.0" if name == "kernel.variance" else "int 2"
    with pytest.raises(gpc.GPClassError, match=f"fit: {name} is the Python {kind}, which fit would not fit.*"
                                               "converter=gpc.kernels.as_float.*trainable with False"):
        gpc.fit(gpc.Laplace(), kernel, LIK, X, Y)
    model = gpc.SVGP.at_prior(kernel, LIK, X[:4])
    with pytest.raises(gpc.GPClassError, match=f"fit_svgp: {name} is the Python"):
        gpc.fit_svgp(model, X, Y, num_steps=1, key=jax.random.key(0))
    with pytest.raises(gpc.GPClassError, match=f"fit_em_ep: {name} is the Python"):
        gpc.fit_em_ep(gpc.EP(), kernel, gpc.likelihoods.Probit(), X, Y, adapt_epsilon=False)


class _AsFloat(gpc.kernels.AbstractKernel):
    """_FloatField with its variance declared as gpc.kernels.as_float asks."""

    variance: jax.Array = eqx.field(converter=gpc.kernels.as_float, default=1.0)

    def evaluate(self, x1, x2):
        return self.variance * jnp.exp(-0.5 * jnp.sum((x1 - x2) ** 2))


@pytest.mark.slow
def test_a_python_number_held_fixed_by_trainable_or_declared_as_float():
    """trainable=False at the float keeps it and fits the rest; the field declared with gpc.kernels.as_float is fitted
    and gives the same optimum as the built-in kernel it equals."""
    kernel = _FloatField(2.0) + gpc.kernels.White(0.5)
    trainable = eqx.tree_at(lambda t: t[0].k1.variance, jax.tree.map(lambda _: True, (kernel, LIK)), False)
    held = gpc.fit(gpc.Laplace(), kernel, LIK, X, Y, trainable=trainable)
    assert held.converged and held.kernel.k1.variance == 2.0 and float(held.kernel.k2.variance) != 0.5

    own = gpc.fit(gpc.Laplace(), _AsFloat(2), LIK, X, Y)
    se = gpc.kernels.SquaredExponential(2.0, 1.0)
    fixed_lengthscale = eqx.tree_at(lambda t: t[0].lengthscale, jax.tree.map(lambda _: True, (se, LIK)), False)
    built_in = gpc.fit(gpc.Laplace(), se, LIK, X, Y, trainable=fixed_lengthscale)
    assert own.converged and built_in.converged
    np.testing.assert_allclose(float(own.kernel.variance), float(built_in.kernel.variance), rtol=1e-5)


@pytest.mark.slow
def test_estimator_takes_a_kernel_with_integer_hyperparameters():
    from gpclass.sklearn import GaussianProcessClassifier

    clf = GaussianProcessClassifier(kernel=gpc.kernels.SquaredExponential(1, 2)).fit(X, Y)
    assert clf.kernel_.variance.dtype == np.float64 and clf.kernel_.variance != 1.0


@pytest.mark.slow
def test_huge_whole_number_weights_are_refused_before_any_allocation():
    """Before: weight 1e6 on 10 cases was expanded into 10^7 repeated cases (8.8e14 bytes for the prior).  Where
    whole-number weights still mean repeated cases (EP, whose power EP with w = k is not k copies), that is
    refused; Laplace takes them as the power likelihood, with no copies."""
    from gpclass.sklearn import GaussianProcessClassifier

    with pytest.raises(gpc.GPClassError, match="sample_weight sums to 10000000"):
        GaussianProcessClassifier(method="ep").fit(X[:10], Y[:10], sample_weight=np.full(10, 1e6))


# --- 10. one exception type, the message first ---------------------------------------------------------------

def negative_variance_log_q(variance):
    return gpc.infer(gpc.Laplace(), gpc.kernels.SquaredExponential(variance, 1.0), LIK, X, Y).log_marginal


MESSAGE = "SquaredExponential: variance must be finite and >= 0"


@pytest.mark.parametrize("wrap", [lambda f: f, lambda f: gpc.jit(f, compiler_options=FAST_COMPILE),
                                  lambda f: gpc.filter_jit(f)], ids=["direct", "gpc.jit", "gpc.filter_jit"])
def test_a_failed_check_is_one_exception_type_with_the_message_first(wrap):
    """Before: EquinoxRuntimeError directly, JaxRuntimeError 'INTERNAL: CpuCallback error' through gpc.jit."""
    program = wrap(negative_variance_log_q)
    for _ in range(2):  # the first call (compiling) and a cached one
        with pytest.raises(gpc.GPClassError) as error:
            program(-1.0)
        assert str(error.value).startswith(MESSAGE)
        assert isinstance(error.value, ValueError)


@pytest.mark.slow
def test_under_a_plain_jax_jit_the_message_is_in_jaxs_error():
    """The documented limit: a user's own jax.jit reports the failed check as JAX's runtime error, with the same
    message in its text (wrap with gpc.jit to get a GPClassError)."""
    with pytest.raises(jax.errors.JaxRuntimeError, match=MESSAGE):
        jax.block_until_ready(jax.jit(negative_variance_log_q)(-1.0))


def test_non_convergence_with_throw_is_a_gpclass_error():
    with pytest.raises(gpc.GPClassError, match=r"Laplace did not converge \(MAX_STEPS\)"):
        gpc.infer(gpc.Laplace(max_steps=1), gpc.kernels.SquaredExponential(1.0, 1.0), LIK, X, Y)


def _periodic_gram(X, variance, lengthscale, period):
    """GPML eq. 4.31 with the Euclidean distance of all columns, in NumPy."""
    r = np.sqrt(np.sum((X[:, None, :] - X[None, :, :]) ** 2, axis=-1))
    return variance * np.exp(-2.0 * np.sin(np.pi * r / period) ** 2 / lengthscale**2)


PERIODIC_CALLS = {
    "infer JJ": lambda k: gpc.infer(gpc.JaakkolaJordan(), k, LIK, X, Y),
    "fit Laplace": lambda k: gpc.fit(gpc.Laplace(), k, LIK, X, Y),
    "sum and product": lambda k: gpc.infer(gpc.EP(), gpc.kernels.Scale(k, 2.0) * gpc.kernels.SquaredExponential()
                                           + gpc.kernels.White(0.1), gpc.likelihoods.Probit(), X, Y),
    "sparse": lambda k: gpc.infer(gpc.KL(), gpc.Sparse(k, X[:10]), LIK, X, Y),
    "svgp": lambda k: gpc.SVGP.at_prior(k, LIK, X[:10]),
    "em-ep": lambda k: gpc.fit_em_ep(gpc.EP(), k + gpc.kernels.White(0.1),
                                     gpc.likelihoods.LabelNoise(gpc.likelihoods.Heaviside(), 0.01), X, Y),
}


@pytest.mark.parametrize("call", PERIODIC_CALLS)
def test_periodic_kernel_on_several_columns_is_refused(call):
    """The periodic kernel with the distance of several columns is not a covariance: on these inputs its Gram
    matrix (built in NumPy) has an eigenvalue below -1 (-6.3, the largest 14.7).  Jaakkola-Jordan used to report
    CONVERGED and a "bound" of -85.81 for it (its B = I + 2 L^1/2 K L^1/2 stayed positive definite); every entry
    point now refuses it, naming the fix, also inside sums and products, sparse priors, SVGP and EM-EP."""
    k = gpc.kernels.Periodic(1.5, 0.5, 3.0)
    assert np.linalg.eigvalsh(_periodic_gram(X, 1.5, 0.5, 3.0)).min() < -1.0
    with pytest.raises(gpc.GPClassError, match=r"Periodic: positive definite for one input column only, and these "
                                               r"inputs have 3 .*OnDims"):
        PERIODIC_CALLS[call](k)


def test_periodic_kernel_on_one_column_is_the_numpy_gram():
    """Through ``OnDims`` on one column it is accepted, and its Gram matrix is the NumPy one of that column."""
    k = gpc.kernels.OnDims(gpc.kernels.Periodic(1.5, 0.5, 3.0), [1])
    np.testing.assert_allclose(k.gram(jnp.asarray(X)), _periodic_gram(X[:, 1:2], 1.5, 0.5, 3.0), rtol=1e-12, atol=0)
    assert np.isfinite(float(gpc.infer(gpc.JaakkolaJordan(), k, LIK, X, Y).log_marginal))


@pytest.mark.parametrize("exponent", (-1, -0.5, -2.0))
def test_a_negative_power_of_a_kernel_is_refused(exponent):
    """k^-a (a > 0) is no covariance: for two distinct inputs |k(x, x')| < k(x, x) = k(x', x') (SE), so its 2 x 2
    Gram matrix has a negative determinant (checked in NumPy).  gpc.infer used to run on it (SE^-2: EP FAILED,
    Jaakkola-Jordan MAX_STEPS with a finite "bound"); the kernel is now refused when it is built."""
    k01 = np.exp(-0.5 * np.sum((X[0] - X[1]) ** 2))
    gram = np.array([[1.0, k01], [k01, 1.0]]) ** exponent
    assert np.linalg.det(gram) < 0
    with pytest.raises(gpc.GPClassError, match=r"Exponentiation: a negative exponent .* gives no covariance"):
        gpc.kernels.Exponentiation(gpc.kernels.SquaredExponential(), exponent)
    assert gpc.kernels.Exponentiation(gpc.kernels.SquaredExponential(), 0).exponent == 0.0


def test_mcmc_chains_outside_the_likelihoods_support_fail():
    """Elliptical slice chains start at f = 0, where the Heaviside likelihood is zero: they never moved, and MCMC
    returned 400 samples f = 0 (every predictive probability 0.5) with status CONVERGED.  A kept sample of
    log p(y|f) = -inf is now FAILED (and raises).  Started inside the support (f0 = y, whitened in NumPy with the
    method's jitter), every sample is in it: y_i f_i > 0 for all i, the posterior's exact support."""
    x = np.linspace(-1.0, 1.0, 6)[:, None]
    y = np.array([1.0, -1.0, 1.0, 1.0, -1.0, -1.0])
    kernel = gpc.kernels.SquaredExponential(1.0, 0.7) + gpc.kernels.White(0.1)
    method = gpc.MCMC(num_samples=50, num_warmup=50, num_chains=2)
    step = gpc.likelihoods.Heaviside()
    with pytest.raises(gpc.GPClassError, match=r"MCMC did not converge \(FAILED\).*log p\(y\|f\).*init="):
        gpc.infer(method, kernel, step, x, y, key=jax.random.key(0))
    post = gpc.infer(method, kernel, step, x, y, key=jax.random.key(0), throw=False)
    assert gpc.Status(int(post.info.status)) == gpc.Status.FAILED
    sq = (x - x.T) ** 2
    K = np.exp(-0.5 * sq / 0.7**2) + 0.1 * np.eye(6)
    L = np.linalg.cholesky(K + method.jitter * np.mean(np.diag(K)) * np.eye(6))
    g0 = np.tile(np.linalg.solve(L, y), (2, 1))
    post = gpc.infer(method, kernel, step, x, y, key=jax.random.key(0), init=g0)
    assert gpc.Status(int(post.info.status)) == gpc.Status.CONVERGED
    assert np.all(np.asarray(post.samples) * y > 0)


def test_fit_holds_a_precomputed_gram_matrix_fixed():
    """``gpc.fit`` used to fit every entry of Precomputed's N x N matrix as a log hyperparameter (after 5 steps
    entries off by 0.29, the matrix no longer symmetric, smallest eigenvalue -0.44).  K is data: alone there is
    nothing to fit (an error says so); under Scale the amplitude is fitted and K comes back bit for bit."""
    K = np.exp(-0.5 * np.sum((X[:, None] - X[None]) ** 2, axis=-1)) + 1e-6 * np.eye(len(X))
    items = np.arange(len(X), dtype=float)[:, None]
    with pytest.raises(gpc.GPClassError, match="no floating-point parameters to fit"):
        gpc.fit(gpc.Laplace(), gpc.kernels.Precomputed(K), LIK, items, Y)
    result = gpc.fit(gpc.Laplace(), gpc.kernels.Scale(gpc.kernels.Precomputed(K), 1.0), LIK, items, Y)
    assert bool(result.converged) and float(result.kernel.variance) != 1.0
    np.testing.assert_array_equal(np.asarray(result.kernel.kernel.K), K)


def test_a_non_symmetric_precomputed_matrix_is_refused():
    """A non-symmetric K was accepted: EP reported CONVERGED with a log q that matched neither symmetrisation.  It
    is refused when built, naming an entry and its mirror; from_blocks' unknown (NaN) test block is symmetric."""
    K = np.exp(-0.5 * np.sum((X[:, None] - X[None]) ** 2, axis=-1)) + 1e-6 * np.eye(len(X))
    bad = K.copy()
    bad[2, 5] += 0.3
    with pytest.raises(gpc.GPClassError, match=r"Precomputed: K must be symmetric .*K\[2, 5\] = .* but K\[5, 2\]"):
        gpc.kernels.Precomputed(bad)
    gpc.kernels.Precomputed(K + 1e-13 * np.triu(np.ones_like(K)))  # rounding-level asymmetry passes
    gpc.kernels.Precomputed.from_blocks(K[:30, :30], K[:30, 30:], np.diagonal(K)[30:])


def test_estimator_refuses_a_class_whose_every_weight_is_zero():
    """Three classes, every case of class 2 weighted 0: the estimator dropped the class, classes_ = [0, 1] and
    predict_proba two columns, without a word (scikit-learn's classifiers keep every class of y).  Refused now,
    naming the class; one weighted case of it is enough to keep all three."""
    from gpclass.sklearn import GaussianProcessClassifier

    y3 = np.digitize(X[:, 0], [-0.5, 0.5])
    weight = (y3 != 2).astype(float)
    with pytest.raises(gpc.GPClassError, match=r"zero for every case of class\(es\) \[2\]"):
        GaussianProcessClassifier(optimize=False).fit(X, y3, sample_weight=weight)
    weight[np.flatnonzero(y3 == 2)[0]] = 1.0
    model = GaussianProcessClassifier(optimize=False).fit(X, y3, sample_weight=weight)
    assert list(model.classes_) == [0, 1, 2] and model.predict_proba(X_TEST).shape == (7, 3)


def test_float32_estimator_warns_about_inputs_far_from_zero():
    """The estimator casts X to float32 before gpclass sees it, so an offset of 1e7 on inputs of unit spread moved
    probabilities by 0.08 without a word (1.7e9, a timestamp, made every prediction equal).  It warns now, at fit
    and at predict, naming the column; inputs whose mean is within 1e4 spreads do not warn."""
    import warnings

    from gpclass.sklearn import GaussianProcessClassifier

    shifted = X + np.array([0.0, 1e7, 0.0])
    with pytest.warns(UserWarning, match=r"dtype='float32': column 1 of X has mean 1e\+07"):
        model = GaussianProcessClassifier(optimize=False, dtype="float32").fit(shifted, Y)
    with pytest.warns(UserWarning, match="column 1 of X"):
        model.predict_proba(X_TEST + np.array([0.0, 1e7, 0.0]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        GaussianProcessClassifier(optimize=False, dtype="float32").fit(X + 2000.0, Y)


def test_standardize_refuses_test_inputs_of_other_columns():
    """standardize(X_train (6, 2), X_test (2, 1)) broadcast the one test column across both training columns and
    returned a (2, 2) array of numbers; now an error naming both shapes."""
    with pytest.raises(gpc.GPClassError, match=r"standardize: .* got shapes \(6, 2\) and \(2, 1\)"):
        gpc.datasets.standardize(np.arange(12.0).reshape(6, 2), np.ones((2, 1)))
    _, test = gpc.datasets.standardize(np.arange(12.0).reshape(6, 2), np.ones((2, 2)))
    np.testing.assert_allclose(test, np.array([[-4.0, -5.0]] * 2) / np.sqrt(35.0 / 3.0))  # means 5, 6; var 35/3
