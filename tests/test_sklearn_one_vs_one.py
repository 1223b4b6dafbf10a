"""GaussianProcessClassifier(multi_class="one_vs_one"): scikit-learn's own one-vs-one GPC with the same fixed
kernel, a hand-built loop of gpclass binary fits (one per pair of classes), and the pairwise coupling of
predict_proba against a direct minimisation of Wu, Lin & Weng's objective.

Every pair of the 4 x 15 Vehicle cases has 30 cases, which the estimator pads to 32: one compiled program serves
all six pairs (and the loop's unpadded fits another).
"""

import itertools
import pickle

import numpy as np
import pytest
from scipy.optimize import minimize
from sklearn.gaussian_process import GaussianProcessClassifier as SklearnGPC
from sklearn.gaussian_process.kernels import RBF, CompoundKernel, ConstantKernel

import gpclass as gpc
from gpclass.sklearn import GaussianProcessClassifier, _pairwise_coupling

PAIRS = list(itertools.combinations(range(4), 2))


@pytest.fixture(scope="module")
def four_classes():
    """15 standardised Vehicle cases of each of its 4 classes, labels as strings."""
    X, y = gpc.datasets.load("vehicle")
    keep = np.concatenate([np.flatnonzero(y == c)[:15] for c in range(4)])
    keep = keep[np.random.default_rng(0).permutation(len(keep))]
    X = np.asarray(gpc.datasets.standardize(X[keep]))
    return X, np.array(["bus", "opel", "saab", "van"])[y[keep].astype(int)]


def _test_points(X):
    return np.concatenate([X, X[::2] + 0.3, np.random.default_rng(1).normal(size=(20, X.shape[1]))])


def _coupled_by_minimisation(r):
    """Wu, Lin & Weng's method 2 by SLSQP: min sum_{i<j} (r_ji p_i - r_ij p_j)^2, sum p = 1, p >= 0."""
    C = r.shape[0]

    def objective(p):
        return sum((r[j, i] * p[i] - r[i, j] * p[j]) ** 2 for i, j in itertools.combinations(range(C), 2))

    result = minimize(objective, np.full(C, 1.0 / C), method="SLSQP", bounds=[(0, 1)] * C,
                      constraints=[{"type": "eq", "fun": lambda p: p.sum() - 1.0}], options=dict(ftol=1e-15))
    return result.x


def _pairwise_matrix(p_pairs, C):
    """r[i, j] = p(y = i | y in {i, j}) from the pairs' p(y = j) (pairs in itertools.combinations order)."""
    r = np.zeros((C, C))
    for k, (i, j) in enumerate(itertools.combinations(range(C), 2)):
        r[j, i], r[i, j] = p_pairs[k], 1 - p_pairs[k]
    return r


def test_matches_sklearn_one_vs_one(four_classes):
    """scikit-learn's one-vs-one GPC (Laplace, logistic) with the same fixed kernel: the same binary models, so
    the same predictions; its decision function (OneVsOneClassifier's votes plus transformed confidences, the
    confidences from its erf-mix probabilities) within that approximation's error (measured 2e-5); the mean log
    marginal likelihood over the pairs to rounding; kernel_ a CompoundKernel of the pairs' kernels, as its.
    scikit-learn refuses predict_proba here; ours couples the pairs' probabilities."""
    X, y = four_classes
    kernel = ConstantKernel(1.0, "fixed") * RBF(np.sqrt(X.shape[1]), "fixed")
    sk = SklearnGPC(kernel, optimizer=None, multi_class="one_vs_one").fit(X, y)
    ours = GaussianProcessClassifier(kernel, multi_class="one_vs_one").fit(X, y)
    np.testing.assert_array_equal(ours.classes_, sk.classes_)
    np.testing.assert_allclose(ours.log_marginal_likelihood_value_, sk.log_marginal_likelihood_value_, rtol=1e-12)
    assert isinstance(ours.kernel_, CompoundKernel) and len(ours.kernel_.kernels) == len(PAIRS) == len(ours.posterior_)
    np.testing.assert_allclose(ours.kernel_.theta, sk.kernel_.theta)
    Z = _test_points(X)
    np.testing.assert_array_equal(ours.predict(Z), sk.predict(Z))
    np.testing.assert_allclose(ours.decision_function(Z), sk.base_estimator_.decision_function(Z), rtol=0, atol=2e-4)
    assert ours.score(X, y) == sk.score(X, y) > 0.6  # chance 1/4
    with pytest.raises(ValueError, match="one_vs_one"):
        sk.predict_proba(Z)
    p = ours.predict_proba(Z)
    assert p.shape == (len(Z), 4) and np.all(p >= 0)
    np.testing.assert_allclose(p.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    mean, var = ours.predict_latent(Z)
    assert mean.shape == var.shape == (len(Z), len(PAIRS)) and np.all(var > 0)
    again = pickle.loads(pickle.dumps(ours))
    np.testing.assert_array_equal(again.predict_proba(Z), p)
    np.testing.assert_array_equal(again.decision_function(Z), ours.decision_function(Z))


@pytest.mark.slow
def test_equals_loop_of_binary_fits(four_classes):
    """ML-II: the estimator's six pair models against gpc.fit on each pair's cases (unpadded; classes_[j]
    positive), from the default kernel: fitted hyperparameters, the mean log q, latent moments; predictions are
    the votes of the loop's latent means (ties by their summed probabilities), predict_proba at a few points the
    SLSQP minimiser of Wu, Lin & Weng's objective on the loop's pairwise probabilities."""
    X, y = four_classes
    clf = GaussianProcessClassifier(multi_class="one_vs_one").fit(X, y)
    classes, y_index = np.unique(y, return_inverse=True)
    d = X.shape[1]
    Z = _test_points(X)
    means, probabilities, values = [], [], []
    for k, (i, j) in enumerate(PAIRS):
        rows = np.flatnonzero((y_index == i) | (y_index == j))
        start = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(d)))
        result = gpc.fit(gpc.Laplace(), start, gpc.likelihoods.Logistic(), X[rows],
                         np.where(y_index[rows] == j, 1.0, -1.0))
        fitted = clf.gpc_kernel_[k]
        np.testing.assert_allclose([fitted.variance, fitted.lengthscale],
                                   [result.kernel.variance, result.kernel.lengthscale], rtol=1e-6)
        mean, var = gpc.predict_latent(result.posterior, Z)
        ours_mean, ours_var = (a[:, k] for a in clf.predict_latent(Z))
        np.testing.assert_allclose(ours_mean, mean, rtol=0, atol=1e-6)
        np.testing.assert_allclose(ours_var, var, rtol=0, atol=1e-6)
        means.append(np.asarray(mean))
        probabilities.append(np.asarray(gpc.predict(result.posterior, Z)))
        values.append(float(result.objective))
    np.testing.assert_allclose(clf.log_marginal_likelihood_value_, np.mean(values), rtol=1e-9)
    means, probabilities = np.stack(means, axis=1), np.stack(probabilities, axis=1)
    votes = np.zeros((len(Z), 4))
    confidence = np.zeros((len(Z), 4))
    for k, (i, j) in enumerate(PAIRS):
        votes[np.arange(len(Z)), np.where(means[:, k] > 0, j, i)] += 1
        confidence[:, j] += probabilities[:, k]
        confidence[:, i] -= probabilities[:, k]
    np.testing.assert_array_equal(clf.predict(Z), classes[np.argmax(votes + confidence / (3 * (np.abs(confidence)
                                                                                              + 1)), axis=1)])
    np.testing.assert_array_equal(np.floor(clf.decision_function(Z) + 0.5), votes)
    p = clf.predict_proba(Z)
    for point in range(0, len(Z), 10):
        expected = _coupled_by_minimisation(_pairwise_matrix(probabilities[point], 4))
        np.testing.assert_allclose(p[point], expected, rtol=0, atol=1e-6)


def test_pairwise_coupling():
    """Consistent pairwise probabilities r_ij = p_i / (p_i + p_j) give p back exactly; arbitrary ones the
    minimiser of Wu, Lin & Weng's objective (SLSQP, an independent solver) on the simplex."""
    rng = np.random.default_rng(0)
    for C in (3, 4, 6):
        pairs = list(itertools.combinations(range(C), 2))
        p_true = rng.dirichlet(np.ones(C), size=5)
        consistent = np.stack([p_true[:, j] / (p_true[:, i] + p_true[:, j]) for i, j in pairs], axis=1)
        np.testing.assert_allclose(_pairwise_coupling(consistent, C), p_true, rtol=0, atol=1e-12)
        arbitrary = rng.uniform(0.02, 0.98, size=(5, len(pairs)))
        coupled = _pairwise_coupling(arbitrary, C)
        for point in range(5):
            expected = _coupled_by_minimisation(_pairwise_matrix(arbitrary[point], C))
            np.testing.assert_allclose(coupled[point], expected, rtol=0, atol=1e-6)
    # Certain pairs (r in {0, 1}, clipped as libsvm clips them) still give a distribution on the winner.
    certain = _pairwise_coupling(np.array([[1.0, 1.0, 1.0]]), 3)  # class 1 beats 0, 2 beats 0 and 1
    assert np.argmax(certain) == 2 and np.isclose(certain.sum(), 1.0) and np.all(certain >= 0)


def test_two_classes_and_settings(four_classes):
    """Two classes: one_vs_one is the binary model (as scikit-learn's); multi_class is checked; ordinal refuses it."""
    X, y = four_classes
    two = np.isin(y, ["bus", "van"])
    ovo = GaussianProcessClassifier(optimize=False, multi_class="one_vs_one").fit(X[two], y[two])
    binary = GaussianProcessClassifier(optimize=False).fit(X[two], y[two])
    np.testing.assert_array_equal(ovo.predict_proba(X), binary.predict_proba(X))
    np.testing.assert_array_equal(ovo.decision_function(X), binary.decision_function(X))
    with pytest.raises(gpc.GPClassError, match="'softmax', 'one_vs_rest' or 'one_vs_one'"):
        GaussianProcessClassifier(multi_class="one_vs_all").fit(X, y)
    with pytest.raises(gpc.GPClassError, match="does not apply"):
        GaussianProcessClassifier(likelihood="ordinal", multi_class="one_vs_one").fit(X, y)
