"""Tilted moments by quadrature, for log-concave likelihoods without a closed form (power EP's p(y|f)^w, soft
labels, the ordinal logit): Gauss-Legendre panels that follow the tilted distribution's mode."""

import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import logsumexp

from ._gaussian_average import Z_RANGE as _Z_RANGE

# Gauss-Legendre nodes per panel for tilted moments by quadrature (:func:`tilted_by_quadrature`).
_TILTED_NODES, _TILTED_WEIGHTS = np.polynomial.legendre.leggauss(64)
_MODE_STEPS = 40  # safeguarded Newton steps for the tilted mode (bisection alone would halve the bracket 40 times)


def tilted_mode(derivatives, mean, var):
    """The mode of log_lik(f) - (f - mean)^2 / (2 var) and the curvature there, for a log-concave log_lik whose
    ``derivatives(f)`` are (log_lik, slope, W = -curvature) elementwise: Newton steps safeguarded by
    bisection in the bracket [mean, mean + var slope(mean)] (ordered), where the gradient changes sign."""
    _, slope0, _ = derivatives(mean)
    end = mean + var * slope0
    lo, hi = jnp.minimum(mean, end), jnp.maximum(mean, end)

    def step(_, state):
        x, lo, hi = state
        _, slope, w = derivatives(x)
        g = slope - (x - mean) / var
        h = jnp.maximum(w, 0.0) + 1.0 / var
        lo, hi = jnp.where(g > 0, x, lo), jnp.where(g > 0, hi, x)
        newton = x + g / h
        x = jnp.where((newton > lo) & (newton < hi), newton, 0.5 * (lo + hi))
        return x, lo, hi

    x, _, _ = lax.fori_loop(0, _MODE_STEPS, step, (mean, lo, hi))
    _, _, w = derivatives(x)
    return x, jnp.maximum(w, 0.0) + 1.0 / var


def tilted_by_quadrature(log_lik, derivatives, transitions, mean, var):
    """(log Z, mean, variance) of exp(log_lik(f)) N(f|mean, var) / Z by Gauss-Legendre panels in f.

    ``log_lik`` maps latent values f of shape (n, nodes) to log-likelihoods of that shape (per case: the rows of
    ``mean``), ``derivatives`` maps f of shape (n,) to (log_lik, slope, W) (as ``AbstractLikelihood.derivatives``)
    and ``transitions`` (n, P) are the values of f where log_lik bends (``AbstractLikelihood.transitions``).

    The tilted distribution need not lie where the cavity does (a cavity mean of -20 with variance 1 and
    Phi(f)^2: the tilted mean is near -7.6, 12 cavity standard deviations away), so the panels follow it:
    from its mode c and the curvature h there (:func:`tilted_mode`), the range
    [min(c, mean) - 10 std, max(c, mean) + 10 std] (std the cavity's: a log-concave tilted distribution is
    no wider than the cavity) split at c +- 10 / sqrt(h), at c and at the transitions, 64 nodes a panel.
    The nodes are placed without derivatives (``stop_gradient``: the integral does not depend on them); sums
    in log space (finite far in the tail), the variance from the spread about the mode (no cancellation).
    """
    dtype = mean.dtype
    nodes = jnp.asarray(_TILTED_NODES, dtype)
    weights = jnp.asarray(_TILTED_WEIGHTS, dtype)
    std = jnp.sqrt(var)
    c, h = lax.stop_gradient(tilted_mode(derivatives, mean, var))
    width = 1.0 / jnp.sqrt(h)
    lo = lax.stop_gradient(jnp.minimum(c, mean) - _Z_RANGE * std)
    hi = lax.stop_gradient(jnp.maximum(c, mean) + _Z_RANGE * std)
    points = jnp.concatenate([jnp.stack([lo, c - _Z_RANGE * width, c, c + _Z_RANGE * width, hi], axis=-1),
                              transitions.astype(dtype)], axis=-1)
    points = jnp.sort(jnp.clip(points, lo[:, None], hi[:, None]), axis=-1)
    a, b = points[:, :-1], points[:, 1:]
    half = 0.5 * (b - a)  # (n, panels)
    f = half[..., None] * nodes + (0.5 * (a + b))[..., None]  # (n, panels, nodes)
    n = mean.shape[0]
    f, log_node = f.reshape(n, -1), (jnp.log(jnp.where(half > 0, half, 1.0))[..., None] + jnp.log(weights))
    log_node = jnp.where((half > 0)[..., None], log_node, -jnp.inf).reshape(n, -1)  # empty panels
    u = f - c[:, None]  # about the mode
    log_w = log_node - 0.5 * (f - mean[:, None]) ** 2 / var[:, None] - 0.5 * jnp.log(2.0 * jnp.pi * var)[:, None]
    log_w = log_w + log_lik(f)
    log_z = logsumexp(log_w, axis=-1)
    p = jnp.exp(log_w - log_z[:, None])
    u_mean = jnp.sum(p * u, axis=-1)
    return log_z, c + u_mean, jnp.sum(p * (u - u_mean[:, None]) ** 2, axis=-1)


def select_moments(cases, otherwise):
    """Tilted moments (log Z, mean, variance) chosen case by case: from the first ``(mask, moments)`` of ``cases``
    whose mask holds, else from ``otherwise`` (a closed form where one applies, quadrature for the rest)."""
    chosen = otherwise
    for mask, moments in reversed(cases):
        chosen = tuple(jnp.where(mask, a, b) for a, b in zip(moments, chosen))
    return chosen
