"""ML-II with every differentiable method other than Laplace (tests/test_fit.py): EP, KL, the JJ lower bound, label
noise.

Each fit must stop with a reason and satisfy the box-constrained stationarity conditions, checked by finite
differences of gpc.infer's log marginal likelihood (a separate file, so that pytest-xdist can run it beside
tests/test_fit.py).
"""

import numpy as np
import pytest
from conftest import toy_data
from test_fit import LOGISTIC, START, check_stationary, fast_fit

import gpclass as gpc

FLIPPED = 0.1  # fraction of toy labels flipped, for the label-noise model to estimate


def label_noise_data(seed, flipped):
    X, y = toy_data(n=30, seed=seed)
    y[np.random.default_rng(seed).permutation(30)[: int(flipped * 30)]] *= -1
    return X, y


@pytest.mark.parametrize(
    "method, likelihood, seed, flipped, reason",
    [
        (gpc.EP(), gpc.likelihoods.Probit(), 6, 0.0, gpc.Status.CONVERGED),
        (gpc.KL(), LOGISTIC, 6, 0.0, gpc.Status.CONVERGED),
        (gpc.JaakkolaJordan(), LOGISTIC, 6, 0.0, gpc.Status.CONVERGED),
        # Flipped labels: epsilon is estimated inside (0, 1/2), near the flipped fraction.
        (gpc.EP(), gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), 0.05), 6, FLIPPED, gpc.Status.CONVERGED),
        # No flipped labels: epsilon runs to 0 and stops at the bound of its log-odds, a flat direction.
        (gpc.EP(), gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), 0.05), 7, 0.0, gpc.Status.AT_BOUND),
    ],
    ids=["ep", "kl", "jaakkola-jordan", "ep-label-noise", "ep-label-noise-at-bound"],
)
@pytest.mark.slow
def test_fit_reaches_a_stationary_point(method, likelihood, seed, flipped, reason):
    X, y = label_noise_data(seed, flipped)
    result = fast_fit(method, START, likelihood, X, y)  # gpc.fit compiled as test_fit's programs are
    assert int(result.status) == reason, gpc.Status(int(result.status)).message
    assert bool(result.converged)
    assert float(result.grad_norm) <= 1e-5 and bool(result.posterior.info.converged)
    history = np.asarray(result.history)[: int(result.num_steps)]
    assert np.all(np.diff(history) >= 0)
    at_bound = check_stationary(method, result, X, y, (1e-8, 1e8))
    if reason == gpc.Status.AT_BOUND:
        assert at_bound == [2] and float(result.likelihood.epsilon) < 1e-8  # the flip rate, at its lower bound
    elif flipped:
        assert 0.03 < float(result.likelihood.epsilon) < 0.2
