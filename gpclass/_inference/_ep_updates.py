"""The site update and log Z_EP shared by dense and sparse expectation propagation (GPML section 3.6)."""

import jax.numpy as jnp

from .. import _anderson as anderson


def cavity(sigma_diag, mu, tau, nu):
    """Cavity natural parameters tau_-i = 1/Sigma_ii - tau~_i, nu_-i = mu_i/Sigma_ii - nu~_i (GPML eq. 3.56)."""
    return 1.0 / sigma_diag - tau, mu / sigma_diag - nu


def site_update(likelihood, y, tau_cav, nu_cav):
    """New site parameters matching the tilted moments (GPML eqs. 3.58-3.59).

    For a log-concave likelihood the tilted variance is below the cavity
    variance, so tau~ > 0.  Otherwise (label noise) tau~ could turn negative,
    which the stable factorisation of B cannot take: such a site precision is
    set to 0 (the site is switched off), as GPML's infEP does.
    """
    _, m_hat, v_hat = likelihood.tilted_moments(y, nu_cav / tau_cav, 1.0 / tau_cav)
    return jnp.maximum(1.0 / v_hat - tau_cav, 0.0), m_hat / v_hat - nu_cav


def ep_log_marginal(likelihood, y, tau, nu, sigma_diag, mu, half_log_det_b, nu_sigma_nu):
    """log Z_EP (GPML eqs. 3.65, 3.73, 3.74) from the marginals of q, 1/2 log|B| and nu~^T Sigma nu~."""
    tau_cav, nu_cav = cavity(sigma_diag, mu, tau, nu)
    log_z_i, _, _ = likelihood.tilted_moments(y, nu_cav / tau_cav, 1.0 / tau_cav)
    return (
        jnp.sum(log_z_i)
        - half_log_det_b
        + 0.5 * nu_sigma_nu
        + 0.5 * jnp.sum(jnp.log1p(tau / tau_cav))
        - 0.5 * jnp.sum(nu**2 / (tau_cav + tau))
        + 0.5 * jnp.dot(nu_cav, (tau / tau_cav * nu_cav - 2.0 * nu) / (tau + tau_cav))
    )


def extrapolate_sites(memory: anderson.Memory, tau_old, nu_old, tau, nu):
    """The sites after a sweep from (tau_old, nu_old) to (tau, nu), extrapolated by Anderson acceleration
    (:mod:`gpclass._anderson`) with the site precisions projected onto tau~ >= 0, and the updated memory."""
    n = tau.shape[0]
    sites, memory = anderson.step(memory, jnp.concatenate([tau_old, nu_old]), jnp.concatenate([tau, nu]),
                                  project=lambda sites: sites.at[:n].max(0.0))
    return sites[:n], sites[n:], memory
