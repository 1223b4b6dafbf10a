"""GaussianProcessClassifier(n_restarts_optimizer=k, random_state=s): the k + 1 starts fitted in one call
(jax.vmap; on a CPU one after another) against a Python loop of gpc.fit from the same starts (drawn as
scikit-learn draws them: theta uniform in the kernel's log bounds), the best converged kept; reproducibility;
k = 0 is the single fit.

40 cases of a 1-D problem with two optima of ML-II (padded to 40 by the estimator: 36 < 40 <= 40); one compiled
program (3 starts) serves every test.
"""

import numpy as np
import pytest
from sklearn.gaussian_process.kernels import RBF, ConstantKernel
from sklearn.utils import check_random_state

import gpclass as gpc
from gpclass._sklearn_restarts import DEFAULT_START_BOUNDS
from gpclass.sklearn import GaussianProcessClassifier, _best_start

Status = gpc.Status


@pytest.fixture(scope="module")
def data():
    """40 points on [0, 10], labels the sign of sin(2.5 x), 10 % flipped: ML-II from a long length scale (30)
    stops at a local optimum (log q -27.40, l ~ 30) below the one a short start reaches (-23.46, l = 0.50)."""
    rng = np.random.default_rng(0)
    X = np.sort(rng.uniform(0, 10, 40))[:, None]
    y = np.where(np.sin(2.5 * X[:, 0]) > 0, 1.0, -1.0) * np.where(rng.uniform(size=40) < 0.1, -1, 1)
    return X, y


RESTARTS = 2  # every test: one compiled program (3 starts, 40 cases, this kernel) serves the file


def _kernel():
    return ConstantKernel(1.0, (1e-2, 1e3)) * RBF(30.0, (1e-2, 1e2))


@pytest.mark.slow
def test_restarts_against_loop_of_fits(data):
    """The start objectives and statuses are those of gpc.fit run from each start alone (the first the kernel
    given, the others exp of scikit-learn's draw rng.uniform(log lower, log upper) per restart, in theta's
    order, from check_random_state(random_state)); the kept start is the argmax over the converged loop fits;
    its hyperparameters are that loop fit's; log q >= the single start's."""
    X, y = data
    restarts = RESTARTS
    clf = GaussianProcessClassifier(_kernel(), n_restarts_optimizer=restarts, random_state=3).fit(X, y)
    single = GaussianProcessClassifier(_kernel()).fit(X, y)
    bounds = _kernel().bounds
    rng = check_random_state(3)
    thetas = [_kernel().theta] + [rng.uniform(bounds[:, 0], bounds[:, 1]) for _ in range(restarts)]
    lower = (gpc.kernels.SquaredExponential(1e-2, 1e-2), 1e-8)
    upper = (gpc.kernels.SquaredExponential(1e3, 1e2), 1e8)
    loop = [gpc.fit(gpc.Laplace(), gpc.kernels.SquaredExponential(*np.exp(theta)), gpc.likelihoods.Logistic(), X, y,
                    bounds=(lower, upper), throw=False) for theta in thetas]
    values = np.array([float(fit.objective) for fit in loop])
    statuses = np.array([int(fit.status) for fit in loop])
    np.testing.assert_allclose(clf.start_log_marginal_likelihoods_, values, rtol=1e-8)
    np.testing.assert_array_equal(np.array(clf.start_statuses_, int), statuses)
    converged = statuses <= Status.AT_BOUND
    assert converged[clf.best_start_]
    # The argmax, up to ties within rounding (starts that reach the same optimum).
    assert values[clf.best_start_] >= np.max(values[converged]) - 1e-8 * abs(np.max(values))
    best = loop[clf.best_start_].kernel
    np.testing.assert_allclose(np.exp(clf.kernel_.theta), [best.variance, best.lengthscale], rtol=1e-5)
    np.testing.assert_allclose(clf.log_marginal_likelihood_value_, values[clf.best_start_], rtol=1e-8)
    assert clf.log_marginal_likelihood_value_ >= single.log_marginal_likelihood_value_ - 1e-9
    # Here the given start stops at the worse optimum (log q -27.40 for -23.46, measured), and a restart finds it.
    assert clf.log_marginal_likelihood_value_ > single.log_marginal_likelihood_value_ + 1 and clf.best_start_ > 0
    # The single start alone is today's fit: start 0 of the loop.
    np.testing.assert_allclose(single.log_marginal_likelihood_value_, values[0], rtol=1e-10)
    # The starts vectorised by one jax.vmap-ed gpc.fit (the default off a CPU; on a CPU they run one after
    # another) give the same fits.
    vmapped = GaussianProcessClassifier(_kernel(), n_restarts_optimizer=restarts, random_state=3,
                                        vmap_restarts=True).fit(X, y)
    np.testing.assert_allclose(vmapped.start_log_marginal_likelihoods_, values, rtol=1e-8)
    np.testing.assert_array_equal(np.array(vmapped.start_statuses_, int), statuses)
    assert vmapped.best_start_ == clf.best_start_


@pytest.mark.slow
def test_reproducible_and_zero_restarts(data):
    """The same random_state gives the same fit; n_restarts_optimizer=0 is the plain single-start fit, bit for
    bit (its attributes too: one start); the starts of a gpclass kernel (here the default) are drawn
    log-uniformly in [1e-5, 1e5], one value per entry (ARD: per length scale), differently for another seed,
    and fitted as those of a scikit-learn kernel."""
    X, y = data
    one = GaussianProcessClassifier(_kernel(), n_restarts_optimizer=RESTARTS, random_state=7).fit(X, y)
    two = GaussianProcessClassifier(_kernel(), n_restarts_optimizer=RESTARTS, random_state=7).fit(X, y)
    np.testing.assert_array_equal(one.start_log_marginal_likelihoods_, two.start_log_marginal_likelihoods_)
    np.testing.assert_array_equal(one.predict_proba(X), two.predict_proba(X))
    assert one.best_start_ == two.best_start_ and len(one.start_statuses_) == 3
    default = GaussianProcessClassifier(_kernel()).fit(X, y)
    zero = GaussianProcessClassifier(_kernel(), n_restarts_optimizer=0, random_state=7).fit(X, y)
    assert zero.log_marginal_likelihood_value_ == default.log_marginal_likelihood_value_
    np.testing.assert_array_equal(zero.predict_proba(X), default.predict_proba(X))
    np.testing.assert_array_equal([zero.gpc_kernel_.variance, zero.gpc_kernel_.lengthscale],
                                  [default.gpc_kernel_.variance, default.gpc_kernel_.lengthscale])
    assert zero.best_start_ == 0 and zero.start_statuses_ == (default.fit_status_,)
    np.testing.assert_array_equal(zero.start_log_marginal_likelihoods_, [default.log_marginal_likelihood_value_])

    d = 5  # ARD: one length scale per feature, each drawn
    ard = GaussianProcessClassifier(ard=True, n_restarts_optimizer=200, random_state=0)
    start = ard._initial_kernel(d, np.float64)
    starts = ard._random_starts(start, d, np.float64)
    values = np.log(np.stack([np.concatenate([[k.variance], k.lengthscale]) for k in starts]))
    low, high = np.log(DEFAULT_START_BOUNDS)
    assert values.shape == (200, 1 + d) and np.all((low <= values) & (values <= high))
    assert abs(values.mean() - 0.5 * (low + high)) < 0.3 and abs(values.std() - (high - low) / 12**0.5) < 0.3
    other = ard.set_params(random_state=1)._random_starts(start, d, np.float64)
    assert not np.allclose(other[0].lengthscale, starts[0].lengthscale)
    restarted = GaussianProcessClassifier(n_restarts_optimizer=RESTARTS, random_state=0).fit(X, y)
    plain = GaussianProcessClassifier().fit(X, y)
    assert restarted.log_marginal_likelihood_value_ >= plain.log_marginal_likelihood_value_ - 1e-9
    assert restarted.start_log_marginal_likelihoods_.shape == (RESTARTS + 1,)
    assert GaussianProcessClassifier(optimize=False, n_restarts_optimizer=3)._random_starts(
        start, d, np.float64) == []


def test_one_vs_rest_restarts(data):
    """Each class's model gets the same starts and keeps its own best: attributes (classes, starts)."""
    X, y = data
    labels = np.where(y > 0, np.where(X[:, 0] < 5, "a", "b"), "c")
    clf = GaussianProcessClassifier(_kernel(), multi_class="one_vs_rest", n_restarts_optimizer=RESTARTS,
                                    random_state=0).fit(X, labels)
    assert clf.start_log_marginal_likelihoods_.shape == (3, RESTARTS + 1) and len(clf.best_start_) == 3
    for c, model in enumerate(clf.start_log_marginal_likelihoods_):
        assert clf.start_log_marginal_likelihoods_[c, clf.best_start_[c]] == np.max(
            model[np.array(clf.start_statuses_[c]) <= Status.AT_BOUND])
    np.testing.assert_allclose(clf.log_marginal_likelihood_value_,
                               np.mean([v[b] for v, b in zip(clf.start_log_marginal_likelihoods_, clf.best_start_)]))


def test_best_start_and_settings(data):
    """The choice among starts: the best converged; if none converged the best finite one that did not fail;
    else the first.  Bad n_restarts_optimizer values are refused."""
    S = Status
    assert _best_start(np.array([-5.0, -1.0, -3.0]), np.array([S.CONVERGED, S.MAX_STEPS, S.AT_BOUND])) == 2
    assert _best_start(np.array([-5.0, -1.0, -3.0]), np.array([S.STALLED, S.MAX_STEPS, S.FAILED])) == 1
    assert _best_start(np.array([-5.0, np.nan, -3.0]), np.array([S.STALLED, S.CONVERGED, S.MAX_STEPS])) == 2
    assert _best_start(np.array([-np.inf, np.nan]), np.array([S.FAILED, S.FAILED])) == 0
    assert _best_start(np.array([-2.0, -2.0]), np.array([S.CONVERGED, S.CONVERGED])) == 0  # ties: the earliest
    X, y = data
    for bad in (-1, 1.5, True, "3"):
        with pytest.raises(gpc.GPClassError, match="n_restarts_optimizer"):
            GaussianProcessClassifier(n_restarts_optimizer=bad).fit(X, y)
