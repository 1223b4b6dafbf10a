"""Derivatives of the expected log-likelihood that Gaussian KL inference (dense and sparse) needs."""

import jax
import jax.numpy as jnp


def expected_log_lik_derivatives(likelihood, y, m, s):
    """First and (diagonal) second derivatives of E(m, s) = sum_i E_{N(m_i, s_i)}[log p(y_i|f_i)].

    E is a sum of terms in (m_i, s_i), so its Hessian blocks are diagonal and one
    forward-mode pass per variable (tangent of ones) gives each diagonal; the two
    passes are one ``jax.linearize`` applied to both tangents at once (``vmap``),
    so the quadrature's derivatives are traced and compiled once, not twice.
    """

    def grads(m, s):
        return jax.grad(lambda m, s: jnp.sum(likelihood.expected_log_prob(y, m, s)), argnums=(0, 1))(m, s)

    (g_m, g_s), tangent_map = jax.linearize(grads, m, s)
    ones, zeros = jnp.ones_like(m), jnp.zeros_like(m)
    (h_mm, h_ms), (h_sm, h_ss) = jax.vmap(tangent_map)(jnp.stack([ones, zeros]), jnp.stack([zeros, ones]))
    return g_m, g_s, h_mm, h_ms, h_sm, h_ss
