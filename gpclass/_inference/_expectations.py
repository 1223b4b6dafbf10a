"""The expected log-likelihood and its derivatives, as Gaussian KL inference (dense and sparse) needs them.

E(m, s) = sum_i E_{N(m_i, s_i)}[log p(y_i|f_i)] is a sum of per-case terms, each
a quadrature over about 200 nodes, so it and its derivatives are computed in chunks of
``CHUNK`` cases (``lax.map``): memory O(CHUNK x nodes) instead of O(n x nodes),
which bounded the sparse KL method's peak memory at large n (``benchmarks/sparse.py``;
figures in benchmarks/README.md).
"""

import jax
import jax.numpy as jnp
from jax import lax

CHUNK = 4096


def expected_log_lik(likelihood, y, m, s, chunk: int = CHUNK):
    """E_{N(m_i, s_i)}[log p(y_i|f_i)], per case, in chunks: besides the memory, a chunk's nodes stay in cache
    (faster than one pass at large n; measured in ``benchmarks/README.md``, ``quadrature_cost.py``)."""
    return _in_chunks(likelihood.expected_log_prob, (y, m, s), chunk)


def expected_log_lik_derivatives(likelihood, y, m, s, chunk: int = CHUNK):
    """First and (diagonal) second derivatives of E(m, s), per case: g_m, g_s, h_mm, h_ms, h_sm, h_ss.

    E is a sum of terms in (m_i, s_i), so its Hessian blocks are diagonal: the likelihood's
    ``expected_log_prob_derivatives`` gives them per case (the rule's averages of the derivatives of log p, or
    automatic differentiation of a closed form).
    """
    def derivatives(y, m, s):
        g_m, g_s, h_mm, h_ms, h_ss = likelihood.expected_log_prob_derivatives(y, m, s)
        return g_m, g_s, h_mm, h_ms, h_ms, h_ss

    return _in_chunks(derivatives, (y, m, s), chunk)


def _in_chunks(fn, arrays, chunk: int):
    """fn on consecutive blocks of ``chunk`` cases, concatenated; the last block padded with copies of case 0."""
    n = arrays[0].shape[0]
    if n <= chunk:
        return fn(*arrays)
    pad = -n % chunk
    blocks = [jnp.concatenate([a, jnp.broadcast_to(a[:1], (pad, *a.shape[1:]))]).reshape(-1, chunk, *a.shape[1:])
              for a in arrays]
    out = lax.map(lambda block: fn(*block), blocks)
    return jax.tree.map(lambda o: o.reshape(-1, *o.shape[2:])[:n], out)
