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
