"""One-vs-one predictions: scikit-learn's vote and Wu, Lin & Weng's (2004) coupling of the pairs' probabilities."""

import itertools

import numpy as np


def _one_vs_one_votes(positive, p, num_classes):
    """scikit-learn's one-vs-one decision function (``sklearn.utils.multiclass._ovr_decision_function``): votes
    plus the summed confidences x mapped by x / (3 (|x| + 1)) into (-1/3, 1/3).  ``positive`` and ``p`` are
    (m, P): pair (i, j)'s vote for j and its p(y = j), pairs in the order of ``itertools.combinations``."""
    votes = np.zeros((len(p), num_classes))
    confidence = np.zeros((len(p), num_classes))
    for k, (i, j) in enumerate(itertools.combinations(range(num_classes), 2)):
        confidence[:, i] -= p[:, k]
        confidence[:, j] += p[:, k]
        votes[:, i] += ~positive[:, k]
        votes[:, j] += positive[:, k]
    return votes + confidence / (3 * (np.abs(confidence) + 1))


_COUPLING_CLIP = 1e-7  # libsvm's min_prob: pairwise probabilities are kept in [1e-7, 1 - 1e-7]


def _pairwise_coupling(p, num_classes):
    """Class probabilities (m, C) from the pairs' p(y = j | y in {i, j}) (m, P) by Wu, Lin & Weng (2004),
    method 2: p minimises sum_{i<j} (r_ji p_i - r_ij p_j)^2 with sum(p) = 1, r_ij = p(y = i | y in {i, j}).
    Q_ii = sum_{s != i} r_si^2, Q_ij = -r_ji r_ij; the KKT system [[Q, 1], [1^T, 0]] [p; b] = [0; 1] is
    nonsingular for r in (0, 1) and its solution is non-negative (their Theorem 2); rounding below 0 is cut."""
    m = len(p)
    r = np.zeros((m, num_classes, num_classes))
    for k, (i, j) in enumerate(itertools.combinations(range(num_classes), 2)):
        r_ji = np.clip(p[:, k], _COUPLING_CLIP, 1 - _COUPLING_CLIP)
        r[:, j, i], r[:, i, j] = r_ji, 1 - r_ji
    Q = -r.transpose(0, 2, 1) * r  # Q_ij = -r_ji r_ij
    index = np.arange(num_classes)
    Q[:, index, index] = np.sum(r**2, axis=1)  # sum_s r_si^2 (r_ii = 0)
    system = np.zeros((m, num_classes + 1, num_classes + 1))
    system[:, :num_classes, :num_classes] = Q
    system[:, :num_classes, num_classes] = system[:, num_classes, :num_classes] = 1.0
    rhs = np.zeros((m, num_classes + 1, 1))
    rhs[:, num_classes] = 1.0
    probabilities = np.maximum(np.linalg.solve(system, rhs)[:, :num_classes, 0], 0.0)
    return probabilities / np.sum(probabilities, axis=1, keepdims=True)
