"""gpclass.sklearn.GaussianProcessClassifier: scikit-learn's estimator checks, scikit-learn's own GPC, labels,
model selection, pickling, precision, bad input and the padding of training sets.

Compile time dominates: the binary tests share one data shape (81 Ionosphere cases, which the estimator pads to 88;
3-fold CV trains on 54, padded to 56), the multi-class tests another (60 Vehicle cases), so each program compiles
once per file.
"""

import functools
import pickle
import warnings

import jax
import numpy as np
import pytest
from conftest import fast_filter_jit, standardised_subset
from sklearn.exceptions import ConvergenceWarning, NotFittedError
from sklearn.gaussian_process import GaussianProcessClassifier as SklearnGPC
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

import gpclass as gpc
from gpclass._sklearn_batches import _training_size
from gpclass.sklearn import EXPECTED_FAILED_CHECKS, GaussianProcessClassifier

N = 81  # 3-fold CV: 54 training cases in every fold, the refit 81


@pytest.fixture(scope="module")
def binary():
    """81 standardised Ionosphere cases, labels {-1, +1}."""
    return standardised_subset("ionosphere", 3, n=N)


@pytest.fixture(scope="module")
def three_classes():
    """60 standardised Vehicle cases of classes 0, 1, 2 as strings."""
    X, y = gpc.datasets.load("vehicle")
    keep = np.flatnonzero(y < 3)[:60]
    X = gpc.datasets.standardize(X[keep])
    return X, np.array(["bus", "opel", "saab"])[y[keep].astype(int)]


@pytest.fixture(scope="module")
def fixed_binary(binary):
    """Laplace, logistic, the default kernel (sigma_f^2 = 1, l = sqrt(d)) held fixed."""
    return GaussianProcessClassifier(optimize=False).fit(*binary)


@pytest.fixture(scope="module")
def ml2_binary(binary):
    """Laplace, logistic, ML-II (the estimator's default) from the default kernel."""
    return GaussianProcessClassifier().fit(*binary)


@pytest.fixture(scope="module")
def fixed_softmax(three_classes):
    """Softmax Laplace, the default kernel held fixed, Monte Carlo probabilities seeded with 0."""
    return GaussianProcessClassifier(optimize=False, random_state=0).fit(*three_classes)


# ------------------------------------------------------------------------------------------------- 1. checks

# The instance checked: optimize=False, so a fit is one inference and the checks' dozens of fits on ~20 data shapes
# compile one program each: 30 programs (19 fits, 11 predictions; 16 s of compiling on 2 idle cores).  Padding merges
# only the binary fits' sizes (11 shapes, 7 programs): the shapes differ in d too, and softmax fits are not padded.
# With ML-II (the default) the same checks pass, and check_decision_proba_consistency too (by hand:
# check_estimator(GaussianProcessClassifier(), expected_failed_checks=EXPECTED_FAILED_CHECKS), about 3 minutes).
# multi_class="one_vs_rest" would compile less (~27 s) but its binary Laplace fits at n = 200-300 slowed 25-fold when
# the CPU was oversubscribed.
# Slow tier: the checks take about a sixth of the default tier's five minutes.  The default tier keeps ten of this
# file's tests: one-vs-rest against scikit-learn, every method, string labels, bad input, the convergence warning,
# the padding of training sets.
@pytest.mark.slow
@parametrize_with_checks(
    [GaussianProcessClassifier(optimize=False)], expected_failed_checks=lambda estimator: EXPECTED_FAILED_CHECKS
)
def test_sklearn_estimator_checks(estimator, check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        check(estimator)


# -------------------------------------------------------------------------------- 2. scikit-learn's own GPC


@pytest.mark.slow
def test_matches_sklearn_laplace(binary, fixed_binary):
    """scikit-learn's GPC is Laplace with the logistic (GPML Algorithms 3.1-3.2): with the same fixed kernel the
    log marginal likelihood and the latent moments agree to rounding (measured: log q to 1e-16 relative, means
    4e-15, variances 8e-16).  Its predict_proba replaces the logistic by a mix of five erf functions (Williams &
    Barber) and so differs from our quadrature (accurate to ~1e-12) by that approximation's error (measured
    1.4e-4); the same mix applied to our latent moments gives its numbers to 5e-13."""
    X, y = binary
    d = X.shape[1]
    sk = SklearnGPC(ConstantKernel(1.0, "fixed") * RBF(np.sqrt(d), "fixed"), optimizer=None).fit(X, y)
    ours = fixed_binary
    np.testing.assert_allclose(ours.log_marginal_likelihood_value_, sk.log_marginal_likelihood_value_, rtol=1e-12)
    X_test = X[::2] + 0.3  # off the training inputs too
    for Z in (X, X_test):
        mean, var = ours.predict_latent(Z)
        sk_mean, sk_var = sk.latent_mean_and_variance(Z)
        np.testing.assert_allclose(mean, sk_mean, rtol=0, atol=1e-10)
        np.testing.assert_allclose(var, sk_var, rtol=0, atol=1e-10)
        np.testing.assert_allclose(ours.predict_proba(Z), sk.predict_proba(Z), rtol=0, atol=5e-4)
        np.testing.assert_array_equal(ours.predict(Z), sk.predict(Z))
    # The erf mix is the only difference: applied to our latent moments it reproduces scikit-learn's numbers.
    sk_binary = sk.base_estimator_
    p_erf = _erf_mix_average(*ours.predict_latent(X_test))
    np.testing.assert_allclose(p_erf, sk_binary.predict_proba(X_test)[:, 1], rtol=0, atol=1e-10)


def _erf_mix_average(mean, var):
    from scipy.special import erf
    from sklearn.gaussian_process._gpc import COEFS, LAMBDAS

    alpha = 1 / (2 * var)
    integrals = np.sqrt(np.pi / alpha) * erf(LAMBDAS * mean * np.sqrt(alpha / (alpha + LAMBDAS**2))) / (
        2 * np.sqrt(var * 2 * np.pi)
    )
    return (COEFS * integrals).sum(axis=0) + 0.5 * COEFS.sum()


def test_matches_sklearn_one_vs_rest(three_classes):
    """One-vs-rest Laplace, fixed kernel: scikit-learn reports the mean of the classes' log marginal
    likelihoods, as we do (measured: equal to 1e-16 relative); probabilities agree to its erf-mix approximation
    (measured 1.2e-4)."""
    X, y = three_classes
    d = X.shape[1]
    sk = SklearnGPC(ConstantKernel(1.0, "fixed") * RBF(np.sqrt(d), "fixed"), optimizer=None,
                    multi_class="one_vs_rest").fit(X, y)
    ours = GaussianProcessClassifier(optimize=False, multi_class="one_vs_rest").fit(X, y)
    np.testing.assert_array_equal(ours.classes_, sk.classes_)
    np.testing.assert_allclose(ours.log_marginal_likelihood_value_, sk.log_marginal_likelihood_value_, rtol=1e-12)
    np.testing.assert_allclose(ours.predict_proba(X), sk.predict_proba(X), rtol=0, atol=5e-4)


# ---------------------------------------------------------------------------------------------- 3. labels


@pytest.mark.parametrize("method", ["ep", "kl", "jj"])
def test_every_method_fits_and_predicts_without_weights(method):
    """Each method through the estimator on 20 cases, no weights (an unweighted EP fit once reached the weights'
    code and failed): probabilities in (0, 1) summing to one."""
    X, y = standardised_subset("ionosphere", 5, n=20)
    clf = GaussianProcessClassifier(method=method, optimize=False).fit(X, y)
    p = clf.predict_proba(X)
    assert p.shape == (20, 2) and np.all((p > 0) & (p < 1))
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=1e-12)


def test_string_labels_binary(binary, fixed_binary):
    X, y = binary
    labels = np.where(y > 0, "good", "bad")
    clf = GaussianProcessClassifier(optimize=False).fit(X, labels)
    np.testing.assert_array_equal(clf.classes_, ["bad", "good"])
    np.testing.assert_array_equal(clf.predict(X), np.where(fixed_binary.predict(X) > 0, "good", "bad"))
    np.testing.assert_array_equal(clf.predict_proba(X), fixed_binary.predict_proba(X))  # the same model
    assert clf.score(X, labels) == fixed_binary.score(X, y) > 0.85


@pytest.mark.parametrize("multi_class", ["softmax", "one_vs_rest"])
@pytest.mark.slow
def test_string_labels_three_classes(three_classes, fixed_softmax, multi_class):
    X, y = three_classes
    clf = fixed_softmax if multi_class == "softmax" else GaussianProcessClassifier(
        optimize=False, multi_class=multi_class, random_state=0).fit(X, y)
    np.testing.assert_array_equal(clf.classes_, ["bus", "opel", "saab"])
    predicted = clf.predict(X)
    assert set(predicted) <= set(clf.classes_) and clf.score(X, y) > 0.65  # chance 1/3; opel and saab overlap
    p = clf.predict_proba(X)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(predicted, clf.classes_[np.argmax(p, axis=1)])
    mean, cov = clf.predict_latent(X)
    assert clf.decision_function(X).shape == mean.shape == (len(y), 3)
    assert cov.shape == ((len(y), 3, 3) if multi_class == "softmax" else (len(y), 3))
    # A point's probabilities do not depend on the batch it is predicted in.
    np.testing.assert_allclose(clf.predict_proba(X[7:9]), p[7:9], rtol=1e-12, atol=0)


@pytest.mark.slow  # two Monte Carlo programs; test_softmax checks MonteCarlo against quadrature by default
def test_softmax_monte_carlo(three_classes, fixed_softmax):
    """The estimator's common-random-number average against gpclass's own Monte Carlo with 20000 fresh draws."""
    X, y = three_classes
    clf = fixed_softmax
    X_test = X + 0.5
    reference = np.asarray(gpc.predict(clf.posterior_, X_test, key=jax.random.key(0),
                                       integrator=gpc.integrators.MonteCarlo(20_000)))
    # standard errors at most 0.5 / sqrt(2000) and 0.5 / sqrt(20000), 0.012 together (measured: 0.005)
    np.testing.assert_allclose(clf.predict_proba(X_test), reference, rtol=0, atol=0.025)
    again = GaussianProcessClassifier(optimize=False, random_state=0).fit(X, y)
    np.testing.assert_array_equal(again.predict_proba(X_test), clf.predict_proba(X_test))


# ------------------------------------------------------------------------------------- 4. model selection


@pytest.mark.slow
def test_pipeline_grid_search_cross_val(binary):
    """Pipeline(StandardScaler, estimator) in GridSearchCV and cross_val_score.  The grid is over gpclass kernels
    of one structure: their values are traced, so every candidate runs the same compiled programs."""
    X, y = binary[0] * 3.0 + 1.0, binary[1]  # unscaled: the scaler's job
    d = X.shape[1]
    kernels = [gpc.kernels.SquaredExponential(1.0, np.sqrt(d)), gpc.kernels.SquaredExponential(4.0, 0.5 * np.sqrt(d))]
    pipe = make_pipeline(StandardScaler(), GaussianProcessClassifier(optimize=False))
    cv = KFold(3, shuffle=True, random_state=0)  # 54 training cases in every fold
    search = GridSearchCV(pipe, {"gaussianprocessclassifier__kernel": kernels}, cv=cv).fit(X, y)
    assert search.best_params_["gaussianprocessclassifier__kernel"] in kernels
    assert search.best_score_ == search.cv_results_["mean_test_score"].max() > 0.75
    assert search.score(X, y) > 0.85
    pipe.set_params(gaussianprocessclassifier__kernel=kernels[0])
    scores = cross_val_score(pipe, X, y, cv=cv)  # the grid's first candidate again, fold by fold
    np.testing.assert_array_equal(scores, [search.cv_results_[f"split{i}_test_score"][0] for i in range(3)])


# ------------------------------------------------------------------------------------------------ 5. pickle


@pytest.mark.slow
def test_pickle_round_trip(binary, fixed_binary, ml2_binary, three_classes, fixed_softmax):
    X, y = binary
    fitted = ml2_binary
    assert fitted.fit_status_ in (gpc.Status.CONVERGED, gpc.Status.AT_BOUND)
    assert fitted.log_marginal_likelihood_value_ > fixed_binary.log_marginal_likelihood_value_  # ML-II's start
    for clf, Z in ((fitted, X), (fixed_softmax, three_classes[0])):
        copy = pickle.loads(pickle.dumps(clf))
        np.testing.assert_array_equal(copy.predict_proba(Z), clf.predict_proba(Z))
        np.testing.assert_array_equal(copy.predict(Z), clf.predict(Z))
        assert copy.log_marginal_likelihood_value_ == clf.log_marginal_likelihood_value_


# -------------------------------------------------------------------------------------------- 6. precision


@pytest.mark.slow
def test_float32_float64(binary, fixed_binary):
    X, y = binary
    single = GaussianProcessClassifier(optimize=False, dtype="float32").fit(X, y)
    p32, p64 = single.predict_proba(X), fixed_binary.predict_proba(X)
    assert p32.dtype == np.float32 and p64.dtype == np.float64
    assert single.posterior_.alpha.dtype == np.float32 and fixed_binary.posterior_.alpha.dtype == np.float64
    np.testing.assert_allclose(p32, p64, rtol=0, atol=5e-4)  # tolerances keyed to float32 (measured 5e-7, 9e-8)
    np.testing.assert_allclose(single.log_marginal_likelihood_value_, fixed_binary.log_marginal_likelihood_value_,
                               rtol=5e-4)
    # float64 without global configuration: the estimator's own scoped x64.
    with jax.enable_x64(False):
        scoped = GaussianProcessClassifier(optimize=False).fit(X, y)
        assert scoped.posterior_.alpha.dtype == np.float64
        np.testing.assert_array_equal(scoped.predict_proba(X), p64)


# -------------------------------------------------------------------------------------------- 7. bad input


def test_bad_input(binary, fixed_binary, three_classes):
    X, y = binary
    clf = GaussianProcessClassifier(optimize=False)
    with pytest.raises(NotFittedError):
        clf.predict(X)
    X_nan = X.copy()
    X_nan[3, 2] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        clf.fit(X_nan, y)
    with pytest.raises(ValueError, match="NaN"):
        fixed_binary.predict_proba(X_nan)
    with pytest.raises(ValueError, match="only one class"):
        clf.fit(X, np.ones_like(y))
    with pytest.raises(ValueError, match="2D array"):
        clf.fit(X[:, 0], y)
    with pytest.raises(ValueError, match=f"X has 3 features, but GaussianProcessClassifier is expecting {X.shape[1]}"):
        fixed_binary.predict(X[:, :3])
    with pytest.raises(ValueError, match="Unknown label type"):
        clf.fit(X, y + 0.5)
    with pytest.raises(ValueError, match="inconsistent numbers of samples"):
        clf.fit(X, y[:-1])
    for params, message in [
        ({"method": "newton"}, "method must be one of"),
        ({"likelihood": "cauchit"}, "likelihood must be"),
        ({"multi_class": "ovo"}, "multi_class must be"),
        ({"dtype": "float16"}, "dtype must be"),
        ({"max_steps": 0}, "max_steps must be a positive integer"),
        ({"method": "jj", "likelihood": "probit"}, "for likelihood=.logistic. only"),
        ({"ard": True, "kernel": gpc.kernels.SquaredExponential()}, "ard=True shapes the default kernel"),
        ({"kernel": "rbf"}, "kernel must be a gpclass kernel"),
    ]:
        with pytest.raises(ValueError, match=message):
            GaussianProcessClassifier(optimize=False, **params).fit(X, y)
    with pytest.raises(ValueError, match="sample_weight .times class_weight. must hold whole numbers for the "
                                         "ordinal model"):
        X3, y3 = three_classes  # text labels; an ordinal model takes their ranks as integers
        GaussianProcessClassifier(optimize=False, likelihood="ordinal").fit(
            X3, np.unique(y3, return_inverse=True)[1], sample_weight=np.full(60, 0.5))
    with pytest.raises(ValueError, match="needs method='laplace'"):
        GaussianProcessClassifier(method="ep").fit(*three_classes)
    with pytest.raises(ValueError, match="use multi_class='one_vs_rest'"):
        GaussianProcessClassifier(likelihood="probit").fit(*three_classes)


# --------------------------------------------------------------------------------------------- 8. padding


def _default_kernel(d):
    """The estimator's default start, sigma_f^2 = 1 and l = sqrt(d), as float64 arrays."""
    return gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(d)))


# gpc.infer, gpc.fit and gpc.predict as the tests' own programs (FAST_COMPILE), one per function and shape.
_reference = functools.cache(fast_filter_jit)


def _test_points(X):
    """Points off the training inputs and five on them (the first is the case the padding copies)."""
    return np.concatenate([X[::2] + 0.3, X[:5]])


def test_a_convergence_warning_says_what_its_status_means_and_which_setting_to_change():
    """ML-II's status is explained as the fit's (its gradient test), the inner method's as that method's, each with
    the estimator's setting that raises the limit (issue 38, item 7); no program runs."""
    estimator = GaussianProcessClassifier(max_steps=7)
    with pytest.warns(ConvergenceWarning) as caught:
        estimator._warn_unless_converged([gpc.Status.MAX_STEPS], [None], [False], "fit")
        estimator._warn_unless_converged([gpc.Status.MAX_STEPS], ["class 'b'"], [False], gpc.EP())
    fit, ep = (str(w.message) for w in caught)
    assert fit.startswith("ML-II stopped with MAX_STEPS: the step limit was reached: max_steps optimiser steps")
    assert fit.endswith("In the estimator: GaussianProcessClassifier(max_steps=...).") and "sweep" not in fit
    assert ep.startswith("the inner solver (EP) (the model of class 'b') stopped with MAX_STEPS")
    assert "between two sweeps" in ep and ep.endswith("GaussianProcessClassifier(method=gpc.EP(max_steps=...)).")
    assert "gradient" not in ep


def test_training_sizes():
    """Training sets are padded to sizes n <= size <= max(32, 1.125 n), at most 8 per octave, so that nearby
    sizes (3-fold CV of 163 cases: folds of 108 and 109) share one compiled program."""
    sizes = np.array([_training_size(n) for n in range(1, 5000)])
    n = np.arange(1, 5000)
    assert np.all(sizes >= n) and np.all(sizes <= np.maximum(32, 1.125 * n)) and np.all(np.diff(sizes) >= 0)
    for k in range(5, 12):
        assert len(np.unique(sizes[(n > 2**k) & (n <= 2 ** (k + 1))])) == 8
    assert _training_size(108) == _training_size(109) == 112 and _training_size(54) == _training_size(55) == 56
    assert _training_size(N) == 88 and _training_size(1) == _training_size(32) == 32


def test_padded_fit_equals_unpadded(binary, fixed_binary):
    """The estimator fits the 81 cases padded to 88 (copies of the first case, masked out); gpclass's own inference
    on the 81 cases alone (no padding, no mask) gives the same log marginal likelihood and probabilities to rounding
    (measured: 0 and 2e-16; the means 1e-15)."""
    X, y = binary
    assert fixed_binary.posterior_.X.shape == (88, X.shape[1])  # padded
    direct = _reference(gpc.infer)(gpc.Laplace(), _default_kernel(X.shape[1]), gpc.likelihoods.Logistic(), X, y)
    np.testing.assert_allclose(fixed_binary.log_marginal_likelihood_value_, direct.log_marginal, rtol=1e-12)
    np.testing.assert_allclose(fixed_binary.posterior_.mean[:N], direct.mean, rtol=0, atol=1e-10)
    X_test = _test_points(X)
    np.testing.assert_allclose(fixed_binary.predict_proba(X_test)[:, 1], _reference(gpc.predict)(direct, X_test),
                               rtol=0, atol=1e-10)


@pytest.mark.slow
def test_padded_ml2_equals_unpadded(binary, ml2_binary):
    """ML-II on the padded cases against gpc.fit on the 81 cases alone, from the same start: the same
    hyperparameters (measured: 6e-12 relative), log marginal likelihood (3e-15) and probabilities (2e-12)."""
    X, y = binary
    direct = _reference(gpc.fit)(gpc.Laplace(), _default_kernel(X.shape[1]), gpc.likelihoods.Logistic(), X, y,
                                 max_steps=100)
    assert ml2_binary.fit_status_ == int(direct.status)
    fitted = ml2_binary.kernel_
    np.testing.assert_allclose([fitted.variance, fitted.lengthscale], [direct.kernel.variance,
                               direct.kernel.lengthscale], rtol=1e-8)
    np.testing.assert_allclose(ml2_binary.log_marginal_likelihood_value_, direct.objective, rtol=1e-12)
    X_test = _test_points(X)
    np.testing.assert_allclose(ml2_binary.predict_proba(X_test)[:, 1], _reference(gpc.predict)(direct.posterior,
                               X_test), rtol=0, atol=1e-10)


def test_nearby_sizes_share_programs(binary, fixed_binary):
    """84 training cases (81, three of them repeated) pad to the 88 of the 81: that fit and its predictions
    compile no new program."""
    X, y = binary
    fixed_binary.predict_proba(X)  # the 81-case model's programs, compiled here if no test did before
    compiled = []

    def listener(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            compiled.append(kwargs.get("fun_name"))

    jax.monitoring.register_event_duration_secs_listener(listener)
    try:
        clf = GaussianProcessClassifier(optimize=False).fit(np.concatenate([X, X[:3]]), np.concatenate([y, y[:3]]))
        p = clf.predict_proba(X)
    finally:
        jax.monitoring.unregister_event_duration_listener(listener)
    assert clf.posterior_.X.shape[0] == 88 and compiled == []
    assert np.max(np.abs(p - fixed_binary.predict_proba(X))) > 1e-6  # a different model, from the same programs
