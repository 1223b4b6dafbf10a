"""No hang in a plain process: batched dense linear algebra never reaches jaxlib's batched LAPACK kernels on CPU.

jaxlib 0.10.2 deadlocked (every XLA worker waiting in ``ParallelBatchMap``) in batched Cholesky
factorisations and triangular solves: a softmax fit with 60 cases and 6 classes, and a vmapped fit of 64
data sets of 40 cases, hung forever before gpclass routed every factorisation through ``gpclass._dense``.
This file checks the routing: the batched factorisations against the plain calls, and every method's
program, lowered as it runs (softmax, vmapped fit, vmapped gradients), free of batched LAPACK calls.  The
runs themselves are guarded by pytest-timeout, which turns a hang into a failure with every thread's stack:
tests/test_softmax.py::test_fit_reaches_a_stationary_point (a multi-class fit) and
tests/test_fit.py::test_vmap_over_64_data_sets_equals_fitting_one_by_one.  The test process sets no XLA
flag, as a user's does not.
"""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gpclass as gpc
from gpclass import _dense

LAPACK_CALL = re.compile(r"custom_call @(lapack_\w+)\(.*?:\s*\(([^)]*)\)")


def batched_lapack_calls(lowered):
    """(kernel, operand types) of every LAPACK custom call in a lowered program with an operand of rank > 2."""
    found = []
    for name, operands in LAPACK_CALL.findall(lowered.as_text()):
        ranks = [len(t.split("x")) - 1 for t in re.findall(r"tensor<([^>]*)>", operands)]
        if any(r > 2 for r in ranks):
            found.append((name, operands))
    return found


def satellite_six_classes(n):
    X, y = gpc.datasets.load("satellite")
    idx = np.random.default_rng(0).permutation(len(y))[:n]
    return gpc.datasets.standardize(X[idx][:, :9]), y[idx]


def sixty_four_data_sets(n):
    rng = np.random.default_rng(0)
    Xs = rng.normal(size=(64, n, 2))
    ys = np.where(Xs[..., 0] + 0.3 * rng.normal(size=(64, n)) > 0, 1.0, -1.0)
    return Xs, ys


KERNEL = gpc.kernels.SquaredExponential(1.0, 1.0)


def vmapped_fit(Xs, ys):
    return jax.vmap(lambda X, y: gpc.fit(gpc.Laplace(), KERNEL, gpc.likelihoods.Logistic(), X, y))(Xs, ys)


@pytest.mark.slow
def test_batched_factorisations_match_the_plain_calls_and_their_gradients():
    A = jax.random.normal(jax.random.key(0), (3, 5, 5))
    A = A @ jnp.swapaxes(A, -1, -2) + 5 * jnp.eye(5)
    b = jax.random.normal(jax.random.key(1), (3, 5))

    def ours(A, b):
        L = _dense.cholesky(A)
        right = _dense.solve_triangular_right(L, A[:2] + b[None, :], lower=True, trans=1)  # (A[:2] + b) L^-T
        return jnp.sum(jnp.sin(_dense.cho_solve(L, b))) + jnp.sum(_dense.solve(A + L, b) ** 2) + jnp.sum(jnp.cos(right))

    def plain(A, b):
        L = jnp.linalg.cholesky(A)
        right = jax.scipy.linalg.solve_triangular(L, (A[:2] + b[None, :]).T, lower=True).T
        return (jnp.sum(jnp.sin(jax.scipy.linalg.cho_solve((L, True), b))) + jnp.sum(jnp.linalg.solve(A + L, b) ** 2)
                + jnp.sum(jnp.cos(right)))

    got = gpc.jit(jax.vmap(jax.value_and_grad(ours, (0, 1))))(A, b)
    want = jax.vmap(jax.value_and_grad(plain, (0, 1)))(A, b)
    for g, w in zip(jax.tree.leaves(got), jax.tree.leaves(want)):
        np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12)


def test_no_method_lowers_to_a_batched_lapack_call():
    X, y = satellite_six_classes(n=12)
    softmax = gpc.jit(
        jax.value_and_grad(lambda k: gpc.infer(gpc.Laplace(), k, gpc.likelihoods.Softmax(6), X, y).log_marginal)
    )
    assert batched_lapack_calls(softmax.lower(KERNEL)) == []
    Xs, ys = sixty_four_data_sets(n=8)
    assert batched_lapack_calls(gpc.jit(vmapped_fit).lower(Xs, ys)) == []
    for method, lik in [
        (gpc.EP(), gpc.likelihoods.Probit()),
        (gpc.KL(), gpc.likelihoods.Logistic()),
        (gpc.JaakkolaJordan(), gpc.likelihoods.Logistic()),
    ]:
        log_q = lambda k, X, y: gpc.infer(method, k, lik, X, y).log_marginal  # noqa: E731
        batched = gpc.jit(jax.vmap(jax.grad(log_q), (None, 0, 0)))
        assert batched_lapack_calls(batched.lower(KERNEL, Xs[:4], ys[:4])) == [], method
