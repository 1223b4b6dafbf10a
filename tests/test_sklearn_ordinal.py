"""GaussianProcessClassifier(likelihood="ordinal"): one gpc.likelihoods.Ordinal(K) model of ordered classes.

* Against independent truth: K = 2 with the start cutpoint 0 (balanced classes) and the kernel held is the probit
  estimator under Laplace, EP and KL (with ML-II the two differ: the ordinal model fits the cutpoint); the start
  cutpoints give the classes' prior predictive probabilities equal to their frequencies (scipy's ndtr); labels
  whose sorted order reverses the ranks give the mirrored model.
* Consistency: the estimator's ML-II equals gpc.fit + gpc.predict called directly (no padding) with the documented
  settings (noise held at 1, cutpoints from the class frequencies).
* Labels (strings, unsorted numbers), clear errors, a scikit-learn kernel, float32, scikit-learn's classifier
  checks on an ordinal instance (the full check_estimator passes too, by hand: about 90 s of compiling).

Compile time dominates: the three-class tests share one data set (30 cases in 2-D, padded to 32), so each method's
programs compile once per file.
"""

import functools
import pickle
import warnings

import equinox as eqx
import jax
import numpy as np
import pytest
import sklearn.utils.estimator_checks as sklearn_checks
from conftest import fast_filter_jit, standardised_subset
from scipy import special
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process.kernels import RBF, ConstantKernel

import gpclass as gpc
from gpclass.sklearn import GaussianProcessClassifier

N = 30


@pytest.fixture(scope="module")
def ordered():
    """30 cases in 2-D, three ordered classes (6, 14, 10 cases) from a smooth latent function plus noise."""
    rng = np.random.default_rng(0)
    X = rng.uniform(-2.0, 2.0, size=(N, 2))
    f = 1.5 * np.sin(1.5 * X[:, 0]) + X[:, 1]
    y = np.digitize(f + 0.3 * rng.normal(size=N), [-0.7, 0.7])
    return X, y


@pytest.fixture(scope="module")
def ep_ml2(ordered):
    """EP, ML-II from the default start (the method of Chu & Ghahramani's ordinal GP)."""
    return GaussianProcessClassifier(method="ep", likelihood="ordinal").fit(*ordered)


_reference = functools.cache(fast_filter_jit)


def _default_kernel(d):
    return gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(d)))


def _noise_held(likelihood):
    return eqx.tree_at(lambda lik: lik.noise, jax.tree.map(lambda _: True, likelihood), False)


@pytest.mark.slow
def test_ml2_equals_gpc_fit_and_predict(ordered, ep_ml2):
    """The documented fit: Ordinal(3) from cutpoints sqrt(2) Phi^-1(cumulative class frequencies) (kernel variance
    1 + noise 1), noise held at 1, kernel and cutpoints fitted by gpc.fit, here on the 30 cases alone (the estimator
    pads to 32, masked): the same kernel, cutpoints, log q and probabilities (measured: 1e-13 relative, 1.5e-14);
    predict is the most probable class, predict_mean_rank the mean of the ranks."""
    X, y = ordered
    cumulative = np.cumsum(np.bincount(y))[:-1] / N
    start = gpc.likelihoods.Ordinal(3, np.sqrt(2.0) * special.ndtri(cumulative), noise=1.0)
    direct = _reference(gpc.fit)(gpc.EP(), _default_kernel(2), start, X, y.astype(float),
                                 trainable=(True, _noise_held(start)), max_steps=100)
    clf = ep_ml2
    assert clf.fit_status_ == int(direct.status) == gpc.Status.CONVERGED
    np.testing.assert_array_equal(clf.classes_, [0, 1, 2])
    assert isinstance(clf.likelihood_, gpc.likelihoods.Ordinal) and float(clf.likelihood_.noise) == 1.0
    np.testing.assert_allclose(clf.likelihood_.cutpoints, direct.likelihood.cutpoints, rtol=1e-8)
    np.testing.assert_allclose([clf.kernel_.variance, clf.kernel_.lengthscale],
                               [direct.kernel.variance, direct.kernel.lengthscale], rtol=1e-8)
    np.testing.assert_allclose(clf.log_marginal_likelihood_value_, direct.objective, rtol=1e-12)
    X_test = np.concatenate([X[::3] + 0.25, X[:4]])
    p = clf.predict_proba(X_test)
    np.testing.assert_allclose(p, _reference(gpc.predict)(direct.posterior, X_test), rtol=0, atol=1e-10)
    assert p.shape == (len(X_test), 3)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(clf.predict(X_test), np.argmax(p, axis=1))
    np.testing.assert_allclose(clf.predict_mean_rank(X_test), p @ [0.0, 1.0, 2.0], rtol=1e-14)
    mean, var = clf.predict_latent(X_test)
    assert mean.shape == var.shape == (len(X_test),) and np.all(var > 0)
    assert clf.score(X, y) == np.mean(clf.predict(X) == y) > 0.8  # chance (the largest class) 0.47


def test_start_cutpoints_match_the_class_frequencies(ordered):
    """Not fitted (optimize=False): the cutpoints are where the prior predictive N(0, k(x, x) + 1) puts the training
    cases' cumulative class frequencies, for the default kernel (k(x, x) = 1) and for a gpclass kernel of variance
    3: Phi(b_k / sqrt(k(x, x) + 1)) = #{rank < k} / n (scipy's ndtr)."""
    X, y = ordered
    for kernel, variance in [(None, 1.0), (gpc.kernels.SquaredExponential(3.0, 1.0), 3.0)]:
        clf = GaussianProcessClassifier(kernel, likelihood="ordinal", optimize=False).fit(X, y)
        cuts = np.asarray(clf.likelihood_.cutpoints)
        np.testing.assert_allclose(special.ndtr(cuts / np.sqrt(variance + 1.0)), [6 / N, 20 / N], rtol=1e-12)
        assert float(clf.likelihood_.noise) == 1.0 and clf.fit_status_ == gpc.Status.CONVERGED


@pytest.mark.slow
def test_ordinal_logit_start_and_two_classes_are_the_logistic(ordered):
    """likelihood="ordinal_logit" is Ordinal(K, link="logit"): its start cutpoints put the training cases'
    cumulative class frequencies at sigma(b_k / sqrt(1 + pi k(x, x) / 8)) (scipy's expit), and K = 2 with balanced
    classes (cutpoint 0, noise 1) is the logistic estimator with the kernel held: log q and the probabilities
    (Laplace; rounding)."""
    X, y = ordered
    clf = GaussianProcessClassifier(likelihood="ordinal_logit", optimize=False).fit(X, y)
    assert clf.likelihood_.link == "logit"
    np.testing.assert_allclose(special.expit(np.asarray(clf.likelihood_.cutpoints) / np.sqrt(1.0 + np.pi / 8.0)),
                               [6 / N, 20 / N], rtol=1e-12)
    keep = np.concatenate([np.flatnonzero(y == 0)[:6], np.flatnonzero(y == 2)[:6]])
    ordinal = GaussianProcessClassifier(likelihood="ordinal_logit", optimize=False).fit(X[keep], y[keep])
    logistic = GaussianProcessClassifier(likelihood="logistic", optimize=False).fit(X[keep], y[keep])
    np.testing.assert_array_equal(ordinal.likelihood_.cutpoints, [0.0])
    np.testing.assert_allclose(ordinal.log_marginal_likelihood_value_, logistic.log_marginal_likelihood_value_,
                               rtol=1e-12)
    np.testing.assert_allclose(ordinal.predict_proba(X + 0.3), logistic.predict_proba(X + 0.3), rtol=0, atol=1e-9)


@pytest.mark.parametrize("method", ["laplace", "ep", "kl"])
@pytest.mark.slow
def test_two_ordered_classes_are_the_probit(method):
    """K = 2 with balanced classes starts at cutpoint 0 (Phi^-1(1/2)) and noise 1: Ordinal(2) is then Probit(), so
    with the kernel held the two estimators agree under every method: log q, the latent moments, the probabilities
    and the predictions (rounding, measured <= 1e-14; under EP the two take different default schedules, the
    probit's parallel and the ordinal's sequential, which meet at the fixed point to EP's tolerance: 9e-12)."""
    X, y = standardised_subset("ionosphere", 4, n=200)
    keep = np.concatenate([np.flatnonzero(y > 0)[:15], np.flatnonzero(y < 0)[:15]])
    X, y = X[keep, :4], np.where(y[keep] > 0, "good", "bad")
    ordinal = GaussianProcessClassifier(method=method, likelihood="ordinal", optimize=False).fit(X, y)
    probit = GaussianProcessClassifier(method=method, likelihood="probit", optimize=False).fit(X, y)
    np.testing.assert_array_equal(ordinal.likelihood_.cutpoints, [0.0])
    np.testing.assert_allclose(ordinal.log_marginal_likelihood_value_, probit.log_marginal_likelihood_value_,
                               rtol=1e-12)
    X_test = X + 0.3
    for a, b in zip(ordinal.predict_latent(X_test), probit.predict_latent(X_test)):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ordinal.predict_proba(X_test), probit.predict_proba(X_test), rtol=0,
                               atol=1e-10 if method == "ep" else 1e-12)
    np.testing.assert_array_equal(ordinal.predict(X_test), probit.predict(X_test))


@pytest.mark.slow
def test_labels_any_sortable_values_and_reversed_order(ordered, ep_ml2):
    """The rank of a class is its index in the sorted classes_: unsorted numbers and strings in the same order give
    the same model; strings whose sorted order reverses the ranks give the mirrored model (f -> -f, cutpoints ->
    -reversed; the prior is symmetric): probabilities with their columns reversed, to ML-II's tolerance (measured
    8e-7, the cutpoints 7e-6, log q 7e-11; the optimiser's path differs, as the parametrisation (b_1, log
    increments) is not mirror-symmetric)."""
    X, y = ordered
    p = ep_ml2.predict_proba(X)
    numbers = np.array([-5, 10, 200])[y]
    clf = GaussianProcessClassifier(method="ep", likelihood="ordinal").fit(X, numbers)
    np.testing.assert_array_equal(clf.classes_, [-5, 10, 200])
    np.testing.assert_array_equal(clf.predict_proba(X), p)
    np.testing.assert_array_equal(clf.predict(X), np.array([-5, 10, 200])[np.argmax(p, axis=1)])
    strings = GaussianProcessClassifier(method="ep", likelihood="ordinal").fit(X, np.array(["a", "b", "c"])[y])
    np.testing.assert_array_equal(strings.predict_proba(X), p)
    reversed_labels = np.array(["high", "b-mid", "a-low"])[y]  # sorted: a-low < b-mid < high, ranks 2, 1, 0
    mirrored = GaussianProcessClassifier(method="ep", likelihood="ordinal").fit(X, reversed_labels)
    np.testing.assert_array_equal(mirrored.classes_, ["a-low", "b-mid", "high"])
    np.testing.assert_allclose(mirrored.predict_proba(X), p[:, ::-1], rtol=0, atol=1e-5)
    np.testing.assert_allclose(mirrored.likelihood_.cutpoints, -np.asarray(ep_ml2.likelihood_.cutpoints)[::-1],
                               rtol=1e-4)
    np.testing.assert_allclose(mirrored.log_marginal_likelihood_value_, ep_ml2.log_marginal_likelihood_value_,
                               rtol=1e-9)
    # pickled with its fitted likelihood
    copy = pickle.loads(pickle.dumps(mirrored))
    np.testing.assert_array_equal(copy.predict_proba(X), mirrored.predict_proba(X))
    np.testing.assert_array_equal(copy.likelihood_.cutpoints, mirrored.likelihood_.cutpoints)


def test_clear_errors_and_methods_only_where_they_apply(ordered):
    X, y = ordered
    for params, message in [
        ({"method": "jj"}, "method='jj' .*likelihood='ordinal' takes method='laplace', 'ep' or 'kl'"),
        ({"method": gpc.JaakkolaJordan()}, "likelihood='ordinal' takes method='laplace', 'ep' or 'kl'"),
        ({"multi_class": "one_vs_rest"}, "multi_class='one_vs_rest' does not apply to it"),
    ]:
        with pytest.raises(gpc.GPClassError, match=message):
            GaussianProcessClassifier(likelihood="ordinal", **params).fit(X, y)
    with pytest.raises(gpc.GPClassError, match="'logistic', 'probit', 'ordinal' or 'ordinal_logit'"):
        GaussianProcessClassifier(likelihood="cumulative").fit(X, y)
    with pytest.raises(ValueError, match="only one class"):
        GaussianProcessClassifier(likelihood="ordinal").fit(X, np.full(N, "mid"))
    with pytest.raises(ValueError, match="Unknown label type"):
        GaussianProcessClassifier(likelihood="ordinal").fit(X, y + 0.5)
    # decision_function is the binary and multi-class latent score; the ordinal model has predict_mean_rank
    assert not hasattr(GaussianProcessClassifier(likelihood="ordinal"), "decision_function")
    assert hasattr(GaussianProcessClassifier(likelihood="ordinal"), "predict_mean_rank")
    assert hasattr(GaussianProcessClassifier(), "decision_function")
    assert not hasattr(GaussianProcessClassifier(likelihood="probit"), "predict_mean_rank")


@pytest.mark.slow
def test_sklearn_kernel_and_float32(ordered):
    """A scikit-learn kernel with its amplitude fixed: the length scale and the cutpoints are fitted (the noise held
    too, so nothing is left to the scale), kernel_ is the fitted scikit-learn kernel.  float32 against float64."""
    X, y = ordered
    kernel = ConstantKernel(2.0, "fixed") * RBF(1.0)
    clf = GaussianProcessClassifier(kernel, likelihood="ordinal").fit(X, y)
    start = GaussianProcessClassifier(kernel, likelihood="ordinal", optimize=False).fit(X, y)
    assert clf.fit_status_ in (gpc.Status.CONVERGED, gpc.Status.AT_BOUND)
    assert isinstance(clf.kernel_, type(kernel)) and clf.kernel_.k1.constant_value == 2.0
    assert clf.kernel_.k2.length_scale != 1.0
    assert np.all(np.asarray(clf.likelihood_.cutpoints) != np.asarray(start.likelihood_.cutpoints))
    assert clf.log_marginal_likelihood_value_ > start.log_marginal_likelihood_value_
    np.testing.assert_allclose(clf.predict_proba(X).sum(axis=1), 1.0, rtol=0, atol=1e-12)

    single = GaussianProcessClassifier(likelihood="ordinal", optimize=False, dtype="float32").fit(X, y)
    double = GaussianProcessClassifier(likelihood="ordinal", optimize=False).fit(X, y)
    p32, p64 = single.predict_proba(X), double.predict_proba(X)
    assert p32.dtype == np.float32 and p64.dtype == np.float64
    assert np.asarray(single.likelihood_.cutpoints).dtype == np.float32
    np.testing.assert_allclose(p32, p64, rtol=0, atol=5e-4)
    np.testing.assert_allclose(single.log_marginal_likelihood_value_, double.log_marginal_likelihood_value_,
                               rtol=5e-4)


# scikit-learn's classifier checks on an ordinal instance (kernel held: one inference per fit).  The full
# check_estimator(GaussianProcessClassifier(optimize=False, likelihood="ordinal")) passes as well (by hand: 62
# checks, about 90 s of compiling on 2 cores); these are the ones about a classifier's outputs.
CHECKS = ["check_classifiers_train", "check_classifiers_classes", "check_classifiers_one_label",
          "check_classifiers_one_label_sample_weights", "check_classifiers_regression_target",
          "check_supervised_y_2d"]


@pytest.mark.parametrize("check", CHECKS)
@pytest.mark.slow
def test_sklearn_classifier_checks(check):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        getattr(sklearn_checks, check)("GaussianProcessClassifier",
                                       GaussianProcessClassifier(optimize=False, likelihood="ordinal"))
