"""scikit-learn kernels in gpclass.sklearn.GaussianProcessClassifier: the translation to gpclass kernels (equal Gram
matrices), the fitted kernel back as a scikit-learn kernel, and ML-II against scikit-learn's own estimator.

Compile time dominates: every binary data set is cut to the same shape (40 training and 40 test cases, the 6
features of largest variance, standardised), so each kernel expression compiles one fit program, which serves
all five data sets (a bound is traced: new bounds compile nothing; a fixed hyperparameter changes the program).
"""

import pickle
import warnings

import numpy as np
import pytest
from conftest import fast_filter_jit
from sklearn.base import clone
from sklearn.exceptions import ConvergenceWarning
from sklearn.gaussian_process import GaussianProcessClassifier as SklearnGPC
from sklearn.gaussian_process.kernels import (
    RBF,
    CompoundKernel,
    ConstantKernel,
    DotProduct,
    ExpSineSquared,
    Matern,
    PairwiseKernel,
    RationalQuadratic,
    WhiteKernel,
)

import gpclass as gpc
from gpclass._sklearn_kernels import translate
from gpclass.sklearn import GaussianProcessClassifier

BINARY = ("crabs", "ionosphere", "pima", "usps35", "wisconsin")
N, D = 40, 6


def same_shape_subset(name, n=N, d=D, seed=0):
    """(X, y, X_test, y_test): 2 n random cases of a bundled data set, its d features of largest variance
    (standardised together), the first n for training."""
    X, y = gpc.datasets.load(name)
    columns = np.sort(np.argsort(-X.var(axis=0), kind="stable")[:d])
    rows = np.random.default_rng(seed).permutation(len(y))[: 2 * n]
    X = gpc.datasets.standardize(X[rows][:, columns])
    return X[:n], y[rows][:n], X[n:], y[rows][n:]


@pytest.fixture(scope="module")
def data():
    return {name: same_shape_subset(name) for name in BINARY}


# ------------------------------------------------------------------------------------------- 1. translation

EXPRESSIONS = [
    ConstantKernel(2.0) * Matern(1.5, nu=2.5) + WhiteKernel(0.1),
    ConstantKernel(0.7) * RBF([0.5, 1.0, 2.0]),
    RBF(1.3) * ConstantKernel(3.0, "fixed"),
    Matern([0.5, 1.0, 2.0], nu=0.5) + Matern(0.8, nu=1.5) * RationalQuadratic(1.2, 0.7),
    ExpSineSquared(1.1, 2.3) * ConstantKernel(0.5) + DotProduct(0.4) ** 2,
    (ConstantKernel(1.0) + RBF(2.0)) ** 1.5 + Matern(1.0, nu=np.inf),
    ConstantKernel(0.3) * (DotProduct(1.5) + WhiteKernel(0.2)) * Matern([1.0, 2.0, 0.5], nu=2.5),
    ConstantKernel(0.5) * DotProduct(0.4, "fixed") * ConstantKernel(2.0),
]


@pytest.mark.parametrize("kernel", EXPRESSIONS, ids=str)
def test_translation_gram_matrices(kernel):
    """The translated kernel's gram(X), gram(X_test, X) and diag equal scikit-learn's kernel(X), kernel(X_test, X)
    and kernel.diag (measured: at most 1.1e-14 absolute, DotProduct ** 2's diagonal of entries ~30, and 1.1e-14
    relative, small entries of the anisotropic RBF); the kernel written back with the starting values is the
    scikit-learn kernel itself (same theta, same parameters)."""
    rng = np.random.default_rng(0)
    X, X_test = rng.normal(size=(20, 3)), rng.normal(size=(7, 3))
    translation = translate(kernel, 3, np.float64)
    ours = translation.kernel
    for mine, theirs in zip(matrices(ours, X, X_test), [kernel(X), kernel(X_test, X), kernel.diag(X_test)]):
        np.testing.assert_allclose(np.asarray(mine), theirs, rtol=1e-13, atol=1e-13)
    back = translation.to_sklearn(ours)
    assert type(back) is type(kernel) and back is not kernel
    np.testing.assert_array_equal(back.theta, kernel.theta)
    assert_same_params(back, kernel)


@fast_filter_jit
def matrices(kernel, X, X_test):
    """gram(X), gram(X_test, X), diag(X_test): one small program per kernel structure (eagerly, every operation
    of every kernel would compile one)."""
    return kernel.gram(X), kernel.gram(X_test, X), kernel.diag(X_test)


def assert_same_params(kernel, other):
    """The same get_params(), numbers compared as arrays (a fitted length-scale list comes back as an array, as
    scikit-learn's own theta setter leaves it)."""
    params, other_params = kernel.get_params(deep=False), other.get_params(deep=False)
    assert params.keys() == other_params.keys()
    for key, value in params.items():
        if hasattr(value, "get_params"):
            assert_same_params(value, other_params[key])
        elif isinstance(value, str) or isinstance(other_params[key], str):
            assert value == other_params[key]
        else:
            np.testing.assert_array_equal(value, other_params[key])


def test_translated_structure():
    """A ConstantKernel factor becomes the variance of a piece without one; such pieces otherwise have a fixed
    variance of 1; DotProduct's sigma_0 is fitted as the offset sigma_0^2 (bounds squared); "fixed" is not
    trainable."""
    t = translate(ConstantKernel(2.0, (1e-3, 1e3)) * Matern(1.5, nu=2.5) + WhiteKernel(0.1, "fixed"), 4, np.float64)
    assert isinstance(t.kernel.k1, gpc.kernels.Matern52) and isinstance(t.kernel.k2, gpc.kernels.White)
    assert float(t.kernel.k1.variance) == 2.0 and float(t.kernel.k1.lengthscale) == 1.5
    assert (t.trainable.k1.variance, t.trainable.k1.lengthscale, t.trainable.k2.variance) == (True, True, False)
    assert (float(t.lower.k1.variance), float(t.upper.k1.variance)) == (1e-3, 1e3)
    t = translate(RationalQuadratic(1.0, 2.0) + DotProduct(0.5, (0.1, 10.0)), 4, np.float64)
    assert not t.trainable.k1.variance and t.trainable.k1.alpha and float(t.kernel.k1.variance) == 1.0
    polynomial = t.kernel.k2
    assert isinstance(polynomial, gpc.kernels.Polynomial) and polynomial.degree == 1
    assert float(polynomial.offset) == 0.25 and not t.trainable.k2.variance and t.trainable.k2.offset
    np.testing.assert_allclose([float(t.lower.k2.offset), float(t.upper.k2.offset)], [0.01, 100.0], rtol=1e-15)


@pytest.mark.parametrize(
    "kernel, match",
    [
        (ConstantKernel() * Matern(1.0, nu=1.2), r"Matern\(length_scale=1, nu=1.2\).*nu must be 0.5, 1.5, 2.5 or inf"),
        (RBF(1.0) + PairwiseKernel(metric="laplacian"), r"PairwiseKernel.*has no gpclass counterpart"),
        (CompoundKernel([RBF(1.0), RBF(2.0)]), r"CompoundKernel.*has no gpclass counterpart"),
        (RBF([1.0, 2.0]), r"length_scale has shape \(2,\); the inputs have 6 features"),
        (ExpSineSquared(np.ones(6)), r"ExpSineSquared takes one \(isotropic\) length scale"),
        (ConstantKernel(1e6) * RBF(), r"constant_value = 1000000.0 lies outside constant_value_bounds"),
    ],
)
def test_untranslatable_kernels_name_the_piece(data, kernel, match):
    X, y, _, _ = data["crabs"]
    with pytest.raises(gpc.GPClassError, match=match):
        GaussianProcessClassifier(kernel).fit(X, y)


# ------------------------------------------------------------------------------- 2. ML-II against scikit-learn

# Each expression is one fit program, shared by the five data sets.
FITTED = [
    ConstantKernel() * Matern(nu=2.5),
    ConstantKernel() * RBF(np.ones(D)),  # anisotropic; irrelevant features' length scales reach the bound 1e5
    # alpha reaches its bound 1e5 (the RQ becomes the SE); a fixed hyperparameter in a sum
    ConstantKernel() * RationalQuadratic() + WhiteKernel(0.01, "fixed"),
]


def fit_both(kernel, X, y):
    """Our estimator and scikit-learn's (its default fmin_l_bfgs_b, no restarts) from the same start; whether
    scikit-learn's optimiser converged (it warns "lbfgs failed to converge" otherwise; its other ConvergenceWarning,
    a hyperparameter close to a bound, is no failure)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", ConvergenceWarning)
        sk = SklearnGPC(kernel, optimizer="fmin_l_bfgs_b", n_restarts_optimizer=0).fit(X, y)
    sk_converged = not any(issubclass(w.category, ConvergenceWarning) and "close to the specified" not in
                           str(w.message) for w in caught)
    ours = GaussianProcessClassifier(kernel, max_steps=200).fit(X, y)
    return ours, sk, sk_converged


def check_against_sklearn(kernel, ours, sk, sk_converged, X, X_test, deviations):
    """Our fitted estimator against scikit-learn's fit of ``kernel`` on the same data (see the test)."""
    assert ours.fit_status_ in (gpc.Status.CONVERGED, gpc.Status.AT_BOUND)
    value, sk_value = ours.log_marginal_likelihood_value_, sk.log_marginal_likelihood_value_
    # kernel_ is the scikit-learn kernel with the fitted hyperparameters: same class and parameters, theta inside
    # the bounds, fixed hyperparameters untouched, and its Gram matrices those of the fitted gpclass kernel.
    fitted = ours.kernel_
    assert type(fitted) is type(kernel) and fitted.get_params().keys() == kernel.get_params().keys()
    assert np.all(fitted.bounds[:, 0] <= fitted.theta) and np.all(fitted.theta <= fitted.bounds[:, 1])
    for hyperparameter in kernel.hyperparameters:
        if hyperparameter.fixed:
            assert fitted.get_params()[hyperparameter.name] == kernel.get_params()[hyperparameter.name]
    # (To 1e-9: at alpha = 1e5 scikit-learn's RationalQuadratic, (1 + r^2 / (2 alpha))^-alpha, loses alpha eps
    # of relative accuracy; ours, exp(-alpha log1p(r^2 / (2 alpha))), does not.)
    K, K_test, _ = matrices(ours.gpc_kernel_, X, X_test)
    for mine, theirs in [(K, fitted(X)), (K_test, fitted(X_test, X))]:
        deviations["gram"] = max(deviations.get("gram", 0.0), np.max(np.abs(mine / theirs - 1)))
        np.testing.assert_allclose(np.asarray(mine), theirs, rtol=1e-9)
    # Our reported value is scikit-learn's log marginal likelihood at our theta (the same Laplace approximation;
    # to 1e-7 for the RationalQuadratic at alpha = 1e5, whose Gram matrix scikit-learn rounds as said above).
    at_ours = sk.log_marginal_likelihood(fitted.theta)
    deviations["value at our theta"] = max(deviations.get("value at our theta", 0.0), abs(value / at_ours - 1))
    assert value == pytest.approx(at_ours, rel=1e-7)
    # Never lower than scikit-learn's optimum; equal to it where scikit-learn's L-BFGS-B converged.
    rel = (value - sk_value) / abs(sk_value)
    assert rel >= -1e-6
    if sk_converged:
        deviations["converged"] = max(deviations.get("converged", 0.0), abs(rel))
        assert abs(rel) <= 1e-6
    else:
        deviations["sklearn stopped short"] = max(deviations.get("sklearn stopped short", 0.0), rel)
    # Predictions: the same classes; probabilities up to scikit-learn's erf-mix approximation of the logistic
    # (1e-4, test_sklearn.py) and hyperparameters that differ along flat directions.
    np.testing.assert_array_equal(ours.predict(X_test), sk.predict(X_test))
    gap = np.max(np.abs(ours.predict_proba(X_test) - sk.predict_proba(X_test)))
    deviations["probabilities"] = max(deviations.get("probabilities", 0.0), gap)
    assert gap <= 2e-3


@pytest.mark.parametrize("kernel", FITTED, ids=str)
@pytest.mark.slow
def test_ml2_matches_sklearn_on_every_binary_data_set(data, kernel):
    """Laplace, logistic, ML-II from the same start with scikit-learn's kernel on each bundled binary data set.

    Measured (max over the data sets; scikit-learn's L-BFGS-B converged on all of them): our log marginal
    likelihood is scikit-learn's at our theta to 5e-13 (Matern), 1.3e-12 (RBF) and 6.2e-9 (RQ at alpha = 1e5)
    relative, and equals scikit-learn's optimum to 1.2e-11, 6.7e-8 and 9.5e-9; test-set probabilities differ by
    at most 1.3e-4 (scikit-learn's erf mix), the classes not at all; kernel_'s Gram matrices are the gpclass
    kernel's to 7e-15, 4e-14 and 1.1e-11 relative.
    """
    deviations = {}
    for name in BINARY:
        X, y, X_test, _ = data[name]
        ours, sk, sk_converged = fit_both(kernel, X, y)
        check_against_sklearn(kernel, ours, sk, sk_converged, X, X_test, deviations)
    print(f"{kernel}: {deviations}")
    if kernel is FITTED[0]:
        copy = pickle.loads(pickle.dumps(ours))
        assert repr(copy.kernel_) == repr(ours.kernel_)
        np.testing.assert_array_equal(copy.predict_proba(X_test), ours.predict_proba(X_test))


@pytest.mark.slow
def test_bounds_that_bind(data):
    """Tight bounds (the program of FITTED[1]: bounds are traced) bind at the optimum: those hyperparameters sit
    exactly on their bound in our fit, the status says AT_BOUND, and the optimum is scikit-learn's (measured:
    to 7e-13 relative)."""
    kernel = ConstantKernel(1.0, (0.2, 1.5)) * RBF(np.ones(D), (0.3, 2.0))
    deviations = {}
    for name in ("pima", "wisconsin"):
        X, y, X_test, _ = data[name]
        ours, sk, sk_converged = fit_both(kernel, X, y)
        check_against_sklearn(kernel, ours, sk, sk_converged, X, X_test, deviations)
        assert ours.fit_status_ == gpc.Status.AT_BOUND
        fitted = ours.kernel_
        on_bound = np.isclose(fitted.theta[:, None], fitted.bounds, rtol=0, atol=1e-12).any(axis=1)
        assert on_bound.sum() >= 2, fitted
        # Exactly on the bound in the gpclass kernel: exp(log bound), the box's own value.
        lower, upper = np.log([0.3, 2.0])
        log_ls = np.log(ours.gpc_kernel_.lengthscale)
        assert np.all((log_ls >= lower - 1e-15) & (log_ls <= upper + 1e-15))
    print(deviations)


def test_all_fixed_and_optimize_false(data):
    """Every hyperparameter fixed: no ML-II, as scikit-learn (the same value, to rounding); optimize=False keeps
    the kernel given; kernel_ is then a copy of it."""
    X, y, X_test, _ = data["ionosphere"]
    fixed = ConstantKernel(2.0, "fixed") * Matern(1.5, "fixed", nu=2.5)
    sk = SklearnGPC(fixed).fit(X, y)
    for kernel, optimize in [(fixed, True), (ConstantKernel(2.0) * Matern(1.5, nu=2.5), False)]:
        ours = GaussianProcessClassifier(kernel, optimize=optimize).fit(X, y)
        assert ours.log_marginal_likelihood_value_ == pytest.approx(sk.log_marginal_likelihood_value_, rel=1e-12)
        assert_same_params(ours.kernel_, kernel)
        assert ours.kernel_ is not kernel
        np.testing.assert_array_equal(ours.predict(X_test), sk.predict(X_test))


def test_one_vs_rest_compound_kernel(data):
    """One-vs-rest with a scikit-learn kernel: kernel_ is scikit-learn's CompoundKernel of the classes' fitted
    kernels, as scikit-learn gives it, and the reported value the mean of the classes' (the program of
    FITTED[0]: the classes' binary fits have the shapes of the binary data sets)."""
    X, y = gpc.datasets.load("vehicle")
    keep = np.flatnonzero(y < 3)[:N]
    columns = np.sort(np.argsort(-X.var(axis=0), kind="stable")[:D])
    X, y = gpc.datasets.standardize(X[keep][:, columns]), y[keep]
    kernel = clone(FITTED[0])
    ours = GaussianProcessClassifier(kernel, multi_class="one_vs_rest", max_steps=200).fit(X, y)
    sk = SklearnGPC(kernel, multi_class="one_vs_rest").fit(X, y)
    assert isinstance(ours.kernel_, CompoundKernel) and len(ours.kernel_.kernels) == 3
    assert len(ours.gpc_kernel_) == 3
    # Per class: our value at our theta is at least scikit-learn's at its own.
    for mine, theirs in zip(ours.kernel_.kernels, sk.base_estimator_.estimators_):
        assert theirs.log_marginal_likelihood(mine.theta) >= theirs.log_marginal_likelihood_value_ * (1 + 1e-6)
    assert ours.log_marginal_likelihood_value_ >= sk.log_marginal_likelihood_value_ * (1 + 1e-6)
