"""Gradients of the sparse methods' log q against central finite differences (see test_sparse.py for the data).

Directional derivatives along random directions through (log sigma_f^2, log l) and every inducing coordinate,
at a mild and a stiff (sigma_f^2 = 400) kernel, on inputs with repeated rows.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import assert_directional_derivatives
from test_sparse import LOGISTIC, PROBIT, X, Y, Z, compile_fast

import gpclass as gpc


@functools.cache
def _value_and_grad(method, likelihood, approximation):
    def log_marginal(params):
        log_v, log_l, Z = params
        kernel = gpc.kernels.SquaredExponential(jnp.exp(log_v), jnp.exp(log_l))
        return gpc.infer(method, gpc.Sparse(kernel, Z, approximation=approximation), likelihood, X, Y).log_marginal
    return compile_fast(jax.value_and_grad(log_marginal))  # test_sparse.compile_fast: 2-4 times faster to compile


@pytest.mark.parametrize("method, likelihood, approximation", [
    # s enters Laplace through t = log(1 + s g W) / s (0.5) or g W (VFE), KL and JJ through s g and (1 - s) g:
    # one power per method besides EP's FITC keeps the compilations few.
    (gpc.Laplace(), LOGISTIC, "vfe"), (gpc.Laplace(), LOGISTIC, 0.5), (gpc.EP(), PROBIT, "fitc"),
    (gpc.KL(), LOGISTIC, "vfe"), (gpc.JaakkolaJordan(), LOGISTIC, "vfe"),
])
@pytest.mark.parametrize("log_v, log_l", [(np.log(2.0), np.log(3.0)), (np.log(400.0), np.log(3.0))])  # mild, stiff
@pytest.mark.slow
def test_gradients_match_finite_differences(method, likelihood, approximation, log_v, log_l):
    """d log q / d (log sigma_f^2, log l, Z) along random directions, including every inducing coordinate."""
    fn = _value_and_grad(method, likelihood, approximation)
    params = (np.float64(log_v), np.float64(log_l), np.asarray(Z))
    assert_directional_derivatives(fn, params, seed=0)
