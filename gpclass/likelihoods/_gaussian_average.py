"""Gaussian averages of a log-likelihood and of its derivatives in f: E_{N(m, v)}[l^(k)(f)], l(f) = log p(y|f).

k = 0 is the data term of the variational bounds (``AbstractLikelihood.expected_log_prob``).  The derivatives of
E(m, v) = E[l] that Gaussian KL's Newton steps take are averages too (Bonnet's and Price's theorems, as in Opper &
Archambeau 2009, eqs. 10-11):

    dE/dm = E[l'],  dE/dv = E[l''] / 2,  d2E/dm2 = E[l''],  d2E/dm dv = E[l'''] / 2,  d2E/dv2 = E[l''''] / 4,

all five from one pass of the rule over its nodes (:func:`averaged_derivatives`).

The rule: 64-node Gauss-Legendre panels in z = (f - m) / sqrt(v) over [-10, 10], split where the likelihood's
``transitions`` fall (three panels for a sigmoid: f enters and leaves [-10, 10]), so that each panel integrates a
smooth function whatever the variance (Gauss-Hermite alone loses digits when sqrt(v) >> 1: 1e-3 relative at std
12 with label noise).  Measured against adaptive quadrature: relative error below 1e-9 for probit with and without
label noise, means in [-40, 3] and variances in [1e-12, 1e4].  Where the likelihood declares ``hermite_std``
(logistic and probit: 1.5) and no case's std exceeds it, 64-node Gauss-Hermite instead, as accurate there with a
third of the nodes (:func:`_by_rule`).

Differentiated automatically (a gradient in the hyperparameters, SVGP's training), the rule holds its panels'
boundaries fixed: their terms cancel, as the integrand is continuous across them, and differentiating them
tripled the cost of the derivatives.  The theorems replace automatic differentiation for the second derivatives:
the nodes f = m + sqrt(v) z move with v, and two derivatives through sqrt(v) leave
sum_j c_j l'(f_j) z_j / (4 v^(3/2)) in d2E/dv2, a sum that is zero up to rounding divided by v^(3/2) (8e-11 instead
of -2e-14 at m = -30, v = 1e-4 for the logistic; 1e2 at v = 1e-12).
"""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

_GL_NODES, _GL_WEIGHTS = np.polynomial.legendre.leggauss(64)
Z_RANGE = 10.0  # standard deviations covered; the Gaussian mass beyond is 1.5e-23
# Gauss-Hermite (probabilists' weight), for a likelihood that declares ``hermite_std`` (:func:`_by_rule`).
_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite_e.hermegauss(64)
_GH_WEIGHTS = _GH_WEIGHTS / np.sqrt(2.0 * np.pi)


def _standard_nodes(transitions, mean, var):
    """The panels' nodes z in standard units and weights c, both (n, P + 1, 64): sum c g(mean + std z) =
    E_{N(mean, var)}[g(f)] for g smooth between the ``transitions`` (n, P) (module docstring; the panels' boundaries
    are constants to automatic differentiation)."""
    nodes = jnp.asarray(_GL_NODES, mean.dtype)
    weights = jnp.asarray(_GL_WEIGHTS, mean.dtype)
    std = jnp.sqrt(var)
    safe_std = jnp.where(std > 0, std, 1.0)
    splits = jnp.clip((transitions.astype(mean.dtype) - mean[:, None]) / safe_std[:, None], -Z_RANGE, Z_RANGE)
    edge = jnp.full_like(mean, Z_RANGE)[:, None]
    lo, hi = lax.stop_gradient((jnp.concatenate([-edge, splits], axis=-1), jnp.concatenate([splits, edge], axis=-1)))
    half = 0.5 * (hi - lo)  # (n, P + 1)
    z = half[..., None] * nodes + (0.5 * (hi + lo))[..., None]
    density = jnp.exp(-0.5 * z**2) / jnp.sqrt(2.0 * jnp.pi)
    return z, half[..., None] * weights * density


def _hermite_nodes(mean):
    """The 64-node Gauss-Hermite rule's nodes z and weights c in the shape of :func:`_standard_nodes`'s, (n, 1, 64):
    one panel, the same for every case."""
    shape = (mean.shape[0], 1, _GH_NODES.size)
    return (jnp.broadcast_to(jnp.asarray(_GH_NODES, mean.dtype), shape),
            jnp.broadcast_to(jnp.asarray(_GH_WEIGHTS, mean.dtype), shape))


def _by_rule(likelihood, y, mean, var, average):
    """``average(z, c)`` over the nodes of the rule: the panels (:func:`_standard_nodes`), or 64-node Gauss-Hermite
    where the likelihood declares ``hermite_std`` and no case's std exceeds it (one ``lax.cond`` for all cases; under
    ``vmap`` the choice is batched and both rules are computed).

    Gauss-Hermite in z = (f - mean) / std converges geometrically at a rate set by the strip about the real axis in
    which l(mean + std z) is analytic: a log-likelihood analytic within |Im f| < a is so within |Im z| < a / std.  For
    the logistic (a = pi) and the probit, 64 nodes average l, l' and l'' to 4e-12 and 3e-10 relative (to the
    average of |l^(k)|) for std <= 1.5 and means in [-40, 8] (``tests/test_likelihoods.py``): a third of the
    panels' 192 nodes, for the stds that training and KL's sites mostly see.  A likelihood whose logarithm bends
    sharply (label noise: a = 1.2 at epsilon = 0.01) declares nothing and keeps the panels.
    """
    limit = likelihood.hermite_std

    def panels():
        return average(*_standard_nodes(likelihood.transitions(y), mean, var))

    if limit is None:
        return panels()
    return lax.cond(jnp.all(jnp.sqrt(var) <= limit), lambda: average(*_hermite_nodes(mean)), panels)


def expected_log_prob(likelihood, y, mean, var):
    """E[l(f_i)] under f_i ~ N(mean_i, var_i), per case: the rule (:func:`_by_rule`) applied to
    ``likelihood.log_prob``."""
    std = jnp.sqrt(var)

    def average(z, c):
        f = mean[:, None, None] + std[:, None, None] * z
        return _sum(c * likelihood.log_prob(y[:, None, None], f))

    return _by_rule(likelihood, y, mean, var, average)


def averaged_derivatives(likelihood, y, mean, var):
    """(dE/dm, dE/dv, d2E/dm2, d2E/dm dv, d2E/dv2) per case from one pass over the rule's nodes (module docstring).

    The derivatives in v two ways, each where it keeps its digits: for std < 1 the averages of the second to
    fourth derivatives of l (Bonnet and Price; no division by std); for std >= 1 the derivatives through
    f = m + std z of the rule's sum (they divide by std^3, harmless there, and average l' and l'' only: for a
    large std the higher derivatives of a log-likelihood with label noise alternate in sign over the Gaussian's
    width, and their averages cancel to 1e-3 relative where these keep 1e-6).  The derivatives of l at the nodes
    come from the likelihood's ``log_prob_derivatives`` (closed forms, or automatic differentiation of its scalar
    ``log_prob``).
    """
    std = jnp.sqrt(var)

    def average(z, c):
        f = mean[:, None, None] + std[:, None, None] * z
        at_nodes = likelihood.log_prob_derivatives(*jnp.broadcast_arrays(y[:, None, None], f))
        d1, d2, d3, d4 = (_sum(c * d) for d in at_nodes)
        s = jnp.maximum(std, 1.0)  # for the branch std >= 1 (the other is taken below 1)
        e2 = _sum(c * at_nodes[0] * z) / s  # E[l' z] / std = E[l'']
        e3 = _sum(c * at_nodes[1] * z) / s  # E[l'' z] / std = E[l''']
        e4 = (_sum(c * at_nodes[1] * z**2) - e2) / s**2  # (E[l'' z^2] - E[l'']) / std^2 = E[l'''']
        small = std < 1.0
        return d1, 0.5 * jnp.where(small, d2, e2), d2, 0.5 * jnp.where(small, d3, e3), 0.25 * jnp.where(small, d4, e4)

    return _by_rule(likelihood, y, mean, var, average)


def _sum(values):
    """The rule's sum over each case's nodes."""
    return jnp.sum(values, axis=(-2, -1))


def differentiated(expected, y, mean, var):
    """The same five derivatives of a per-case ``expected(y, mean, var)`` of any form, by automatic
    differentiation (a subclass's own closed form; the rule's averages where it is the rule): one
    ``jax.linearize`` of the gradient, applied to the two unit tangents at once."""
    def gradient(m, v):
        return jax.grad(lambda m, v: jnp.sum(expected(y, m, v)), argnums=(0, 1))(m, v)

    (g_m, g_v), tangent_map = jax.linearize(gradient, mean, var)
    ones, zeros = jnp.ones_like(mean), jnp.zeros_like(mean)
    (h_mm, h_mv), (_, h_vv) = jax.vmap(tangent_map)(jnp.stack([ones, zeros]), jnp.stack([zeros, ones]))
    return g_m, g_v, h_mm, h_mv, h_vv
