"""Tests for gpclass.metrics against values computed by hand with plain math."""

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from gpclass.metrics import error_rate, information_bits, mean_negative_log_probability

REL = 1e-5  # loose enough for float32 when x64 is off


def entropy_bits(freqs):
    return -sum(f * math.log2(f) for f in freqs if f > 0)


# A 4-point binary example.
Y4 = [1.0, -1.0, 1.0, 1.0]
P4 = [0.9, 0.2, 0.6, 0.3]
YTR = [1.0, 1.0, 1.0, -1.0, -1.0, 1.0, 1.0, -1.0]  # 5 positive, 3 negative


def test_error_rate_binary():
    np.testing.assert_allclose(float(error_rate(np.array(Y4), np.array(P4))), 0.25, rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(float(error_rate(np.array([1.0, -1.0]), np.array([0.5, 0.5]))), 0.5, rtol=1e-6,
                               atol=1e-12)
    assert float(error_rate(np.array([1.0, -1.0]), np.array([1.0, 0.0]))) == 0.0


def test_information_binary_hand_example():
    H = entropy_bits([5 / 8, 3 / 8])
    true_probs = [0.9, 1 - 0.2, 0.6, 0.3]
    expected = sum(math.log2(q) for q in true_probs) / 4 + H
    got = information_bits(np.array(Y4), np.array(P4), np.array(YTR))
    np.testing.assert_allclose(float(got), expected, rtol=REL)


def test_information_perfect_prediction_equals_entropy():
    y = np.array([1.0, -1.0, -1.0, 1.0])
    p = np.array([1.0, 0.0, 0.0, 1.0])  # no 0 * log(0) NaN
    H = entropy_bits([5 / 8, 3 / 8])
    np.testing.assert_allclose(float(information_bits(y, p, np.array(YTR))), H, rtol=REL)


def test_information_base_rate_prediction_is_zero():
    y_train = np.array([1.0] * 3 + [-1.0] * 1)
    y_test = np.array([1.0] * 6 + [-1.0] * 2)  # same frequencies as training
    p = np.full(8, 0.75)
    np.testing.assert_allclose(float(information_bits(y_test, p, y_train)), 0.0, atol=1e-6)


def test_information_random_guess_balanced():
    # p = 1/2 everywhere with balanced training labels: -1 + H = 0 bits
    y = np.array([1.0, -1.0, 1.0])
    np.testing.assert_allclose(float(information_bits(y, np.full(3, 0.5), np.array([1.0, -1.0]))), 0.0, atol=1e-7)


def test_overconfident_wrong_prediction_is_infinite():
    y, p = np.array([1.0, -1.0]), np.array([0.0, 0.1])
    assert float(information_bits(y, p, np.array([1.0, -1.0]))) == -math.inf
    assert float(mean_negative_log_probability(y, p)) == math.inf


def test_mnlp_binary_hand_example():
    expected = -(math.log(0.9) + math.log(0.8) + math.log(0.6) + math.log(0.3)) / 4
    got = mean_negative_log_probability(np.array(Y4), np.array(P4))
    np.testing.assert_allclose(float(got), expected, rtol=REL)


# A 3-class example: 4 test points, argmax = [0, 1, 1, 2], labels [0, 1, 2, 2].
YM = [0, 1, 2, 2]
PM = [[0.7, 0.2, 0.1], [0.1, 0.8, 0.1], [0.3, 0.4, 0.3], [0.2, 0.2, 0.6]]
YM_TR = [0, 0, 1, 2, 2, 2]


def test_multiclass_hand_example():
    y, p, ytr = np.array(YM), np.array(PM), np.array(YM_TR)
    np.testing.assert_allclose(float(error_rate(y, p)), 0.25, rtol=1e-6, atol=1e-12)
    true_probs = [0.7, 0.8, 0.3, 0.6]
    H = entropy_bits([2 / 6, 1 / 6, 3 / 6])
    expected_info = sum(math.log2(q) for q in true_probs) / 4 + H
    np.testing.assert_allclose(float(information_bits(y, p, ytr)), expected_info, rtol=REL)
    expected_nlp = -sum(math.log(q) for q in true_probs) / 4
    np.testing.assert_allclose(float(mean_negative_log_probability(y, p)), expected_nlp, rtol=REL)


def test_multiclass_perfect_and_base_rate():
    ytr = np.array(YM_TR)
    H = entropy_bits([2 / 6, 1 / 6, 3 / 6])
    y = np.array([0, 2, 1])
    perfect = np.eye(3)[y]
    np.testing.assert_allclose(float(information_bits(y, perfect, ytr)), H, rtol=REL)
    y_test = np.array([0, 0, 1, 2, 2, 2])  # same frequencies as training
    base = np.tile([2 / 6, 1 / 6, 3 / 6], (6, 1))
    np.testing.assert_allclose(float(information_bits(y_test, base, ytr)), 0.0, atol=1e-6)
    # a class absent from the training labels contributes 0 to H
    np.testing.assert_allclose(float(information_bits(y, perfect, np.array([0, 0, 1, 1]))), 1.0, rtol=REL)


def test_under_jit_and_jax_inputs():
    y, p, ytr = jnp.array(Y4), jnp.array(P4), jnp.array(YTR)
    for f, args in [
        (error_rate, (y, p)),
        (information_bits, (y, p, ytr)),
        (mean_negative_log_probability, (y, p)),
        (error_rate, (jnp.array(YM), jnp.array(PM))),
        (information_bits, (jnp.array(YM), jnp.array(PM), jnp.array(YM_TR))),
        (mean_negative_log_probability, (jnp.array(YM), jnp.array(PM))),
    ]:
        eager = float(f(*[np.asarray(a) for a in args]))
        np.testing.assert_allclose(float(jax.jit(f)(*args)), eager, rtol=REL)


def test_bad_shape():
    with pytest.raises(ValueError):
        error_rate(np.zeros(4), np.zeros((2, 2, 1)))


# ---------------------------------------------------------------------------------------------------------------
# Calibration: against scikit-learn and a loop written out here.

def _calibration_data(seed=0, m=500, num_classes=None):
    rng = np.random.default_rng(seed)
    if num_classes is None:
        p = rng.uniform(size=m)
        p[:5] = [0.0, 0.1, 0.5, 0.9, 1.0]  # bin edges: a value on an inner edge belongs to the lower bin
        y = np.where(rng.uniform(size=m) < p**1.3, 1.0, -1.0)  # miscalibrated on purpose
        return y, p
    logits = rng.normal(size=(m, num_classes)) * 2.0
    p = np.exp(logits) / np.exp(logits).sum(axis=1, keepdims=True)
    y = np.array([rng.choice(num_classes, p=row**2 / np.sum(row**2)) for row in p])
    return y, p


def test_brier_score_matches_scikit_learn():
    from sklearn.metrics import brier_score_loss

    from gpclass.metrics import brier_score

    y, p = _calibration_data()
    np.testing.assert_allclose(float(brier_score(y, p)), brier_score_loss(y > 0, p), rtol=1e-12)
    y3, p3 = _calibration_data(1, num_classes=3)
    np.testing.assert_allclose(float(brier_score(y3, p3)), brier_score_loss(y3, p3, labels=[0, 1, 2]), rtol=1e-12)
    np.testing.assert_allclose(float(jax.jit(brier_score)(y3, p3)), brier_score_loss(y3, p3), rtol=1e-12)


@pytest.mark.parametrize("num_bins", [5, 10, 13])
def test_reliability_matches_calibration_curve(num_bins):
    """Binary and per class against scikit-learn's calibration_curve (which drops the empty bins, NaN here)."""
    from sklearn.calibration import calibration_curve

    from gpclass.metrics import reliability

    y, p = _calibration_data()
    predicted, observed, counts = map(np.asarray, reliability(y, p, num_bins))
    true_freq, mean_pred = calibration_curve(y > 0, p, n_bins=num_bins)
    full = counts > 0
    np.testing.assert_allclose(predicted[full], mean_pred, rtol=1e-12)
    np.testing.assert_allclose(observed[full], true_freq, rtol=1e-12)
    assert counts.sum() == len(y) and np.all(np.isnan(predicted[~full]))
    y3, p3 = _calibration_data(2, num_classes=3)
    predicted, observed, counts = map(np.asarray, jax.jit(reliability, static_argnums=2)(y3, p3, num_bins))
    assert predicted.shape == (3, num_bins)
    for c in range(3):
        true_freq, mean_pred = calibration_curve(y3 == c, p3[:, c], n_bins=num_bins)
        full = counts[c] > 0
        np.testing.assert_allclose(predicted[c][full], mean_pred, rtol=1e-12)
        np.testing.assert_allclose(observed[c][full], true_freq, rtol=1e-12)


def _ece_loop(confidence, correct, num_bins):
    """Guo et al. (2017) eq. 3, written out: bins (k/B, (k+1)/B], the first closed at 0."""
    total = 0.0
    for k in range(num_bins):
        lo, hi = k / num_bins, (k + 1) / num_bins
        in_bin = [i for i, c in enumerate(confidence) if (lo < c <= hi) or (k == 0 and c == 0.0)]
        if in_bin:
            accuracy = np.mean([correct[i] for i in in_bin])
            mean_confidence = np.mean([confidence[i] for i in in_bin])
            total += len(in_bin) / len(confidence) * abs(accuracy - mean_confidence)
    return total


@pytest.mark.parametrize("num_bins", [1, 10, 15])
def test_expected_calibration_error_matches_the_definition(num_bins):
    from gpclass.metrics import expected_calibration_error

    y, p = _calibration_data()
    confidence = np.maximum(p, 1 - p)
    correct = (p > 0.5) == (y > 0)
    np.testing.assert_allclose(float(expected_calibration_error(y, p, num_bins)),
                               _ece_loop(confidence, correct, num_bins), rtol=1e-12)
    y3, p3 = _calibration_data(3, num_classes=4)
    expected = _ece_loop(p3.max(axis=1), p3.argmax(axis=1) == y3, num_bins)
    np.testing.assert_allclose(float(expected_calibration_error(y3, p3, num_bins)), expected, rtol=1e-12)
    # A calibrated predictor: outcomes drawn with the predicted probabilities; ECE shrinks like 1/sqrt(m).
    rng = np.random.default_rng(4)
    q = rng.uniform(size=200_000)
    assert float(expected_calibration_error(np.where(rng.uniform(size=q.size) < q, 1.0, -1.0), q, num_bins)) < 0.01
    with pytest.raises(gpc_error(), match="num_bins"):
        expected_calibration_error(y, p, 0)


def gpc_error():
    import gpclass

    return gpclass.GPClassError


# --- checked arguments (before: silent wrong numbers) -----------------------------------------------------------

import gpclass as gpc  # noqa: E402

M = gpc.metrics


def test_two_column_probabilities_with_labels_minus_one_plus_one_are_read_in_sorted_order():
    # The estimator's predict_proba has columns classes_ = [-1, 1]; before, label -1 indexed the last column
    # (take_along_axis with -1), scoring every -1 case by the probability of +1.
    y = np.array([1.0, -1.0, -1.0, 1.0])
    p_plus = np.array([0.9, 0.2, 0.7, 0.4])
    P = np.stack([1 - p_plus, p_plus], axis=1)
    true = np.where(y > 0, p_plus, 1 - p_plus)  # the probability of each true label, by hand
    np.testing.assert_allclose(float(M.mean_negative_log_probability(y, P)), -np.mean(np.log(true)), rtol=REL)
    assert float(M.error_rate(y, P)) == 0.5  # cases 3 (0.7 for +1, truth -1) and 4 (0.4, truth +1)
    np.testing.assert_allclose(float(M.brier_score(y, P)), np.mean(2 * (1 - true) ** 2), rtol=REL)


_METRICS = [M.error_rate, M.mean_negative_log_probability, M.brier_score, M.expected_calibration_error,
            M.reliability]
_WRONG = [
    (np.ones((4, 1)), np.full(4, 0.7), r"y must have shape \(4,\).*np.ravel"),
    (np.ones(3), np.full(4, 0.7), r"y must have shape \(4,\)"),
    (np.array([1.0, -1.0, 1.0]), np.array([0.2, np.nan, 0.7]), r"probabilities in \[0, 1\].*p\[1\] = nan"),
    (np.array([1.0, 1.0]), np.array([1.8, 1.5]), r"probabilities in \[0, 1\].*p\[0\] = 1.8"),
    (np.array([0, 1, 3]), np.eye(3), r"0..2, the columns of p.*y\[2\] = 3"),
    (np.array([0, 1, 1.5]), np.eye(3), r"whole numbers 0..2.*y\[2\] = 1.5"),
    (np.array([0, 1]), np.array([[0.8, 0.3], [0.2, 0.8]]), r"row 0 sums to 1.1"),
    (np.array([1, -1, 0]), np.full((3, 2), 0.5), r"mix the codings.*y\[1\]"),
    (np.array([1.0, 2.0]), np.array([0.5, 0.5]), r"binary labels y must be in.*y\[1\] = 2"),
    (np.ones(2), np.ones((2, 2, 1)) / 2, r"p must have shape \(m,\)"),
]


@pytest.mark.parametrize("case", range(len(_WRONG)))
def test_wrong_arguments_are_refused_with_the_place(case):
    y, p, message = _WRONG[case]
    metric = _METRICS[case % len(_METRICS)]  # the cases spread over the metrics, which share one check
    with pytest.raises(gpc.GPClassError, match=message):
        metric(y, p)


def test_information_bits_checks_the_training_labels():
    with pytest.raises(gpc.GPClassError, match=r"y_train mix the codings"):
        M.information_bits(np.array([1.0, -1.0]), np.array([0.8, 0.2]), np.array([1.0, -1.0, 0.0]))
    with pytest.raises(gpc.GPClassError, match=r"y_train must be whole numbers 0..2.*y_train\[0\] = 5"):
        M.information_bits(np.array([0, 1]), np.full((2, 3), 1 / 3), np.array([5, 1]))


def test_a_check_fails_inside_jit_too():
    with pytest.raises(Exception, match=r"probabilities in \[0, 1\]"):
        jax.block_until_ready(jax.jit(M.error_rate)(np.array([1.0, -1.0]), np.array([0.5, np.nan])))
