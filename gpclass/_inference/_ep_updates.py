"""The site update and log Z_EP shared by dense and sparse expectation propagation (GPML section 3.6)."""

import jax.numpy as jnp

from .. import _anderson as anderson


def cavity(sigma_diag, mu, tau, nu):
    """Cavity natural parameters tau_-i = 1/Sigma_ii - tau~_i, nu_-i = mu_i/Sigma_ii - nu~_i (GPML eq. 3.56), and
    which sites are ``known``: a marginal variance Sigma_ii <= 0 (a latent value with no prior variance, such as
    a preference between two items with the same inputs).

    A known latent value f_i = mu_i has a point-mass cavity: its site can say nothing (it stays tau~ = nu~ = 0)
    and its tilted normaliser is p(y_i | mu_i).  For those sites the cavity parameters returned are those of
    Sigma_ii = 1, finite stand-ins that :func:`site_update` and :func:`site_log_normalisers` never use, so that no
    NaN reaches a derivative.
    """
    known = sigma_diag <= 0.0
    variance = jnp.where(known, 1.0, sigma_diag)
    return 1.0 / variance - tau, mu / variance - nu, known


def site_update(likelihood, y, sigma_diag, mu, tau, nu):
    """New site parameters matching the tilted moments (GPML eqs. 3.58-3.59), from the marginals of q at the sites
    (Sigma_ii, mu_i) and the sites.

    For a log-concave likelihood the tilted variance is below the cavity
    variance, so tau~ > 0.  Otherwise (label noise) tau~ could turn negative,
    which the stable factorisation of B cannot take: such a site precision is
    set to 0 (the site is switched off), as GPML's infEP does.  A site whose latent value is known
    (:func:`cavity`) stays at 0.
    """
    tau_cav, nu_cav, known = cavity(sigma_diag, mu, tau, nu)
    _, m_hat, v_hat = likelihood.tilted_moments(y, nu_cav / tau_cav, 1.0 / tau_cav)
    return (jnp.where(known, 0.0, jnp.maximum(1.0 / v_hat - tau_cav, 0.0)),
            jnp.where(known, 0.0, m_hat / v_hat - nu_cav))


def site_log_normalisers(likelihood, y, sigma_diag, mu, tau, nu):
    """log Z_i, the tilted distributions' normalisers (GPML eq. 3.58) at the cavities of the marginals (Sigma_ii,
    mu_i); p(y_i | mu_i) for a known latent value (:func:`cavity`)."""
    tau_cav, nu_cav, known = cavity(sigma_diag, mu, tau, nu)
    log_z, _, _ = likelihood.tilted_moments(y, nu_cav / tau_cav, 1.0 / tau_cav)
    return jnp.where(known, likelihood.log_prob(y, mu), log_z)


def ep_log_marginal(likelihood, y, tau, nu, sigma_diag, mu, half_log_det_b, nu_sigma_nu):
    """log Z_EP (GPML eqs. 3.65, 3.73, 3.74) from the marginals of q, 1/2 log|B| and nu~^T Sigma nu~.

    A known latent value's site (tau~ = nu~ = 0, :func:`cavity`) adds its log Z_i only: the cavity terms of
    eq. 3.65 vanish in the limit of a point-mass cavity (tau_-i -> infinity).
    """
    tau_cav, nu_cav, known = cavity(sigma_diag, mu, tau, nu)
    cavity_terms = (0.5 * jnp.log1p(tau / tau_cav) - 0.5 * nu**2 / (tau_cav + tau)
                    + 0.5 * nu_cav * (tau / tau_cav * nu_cav - 2.0 * nu) / (tau + tau_cav))
    return (
        jnp.sum(site_log_normalisers(likelihood, y, sigma_diag, mu, tau, nu))
        - half_log_det_b
        + 0.5 * nu_sigma_nu
        + jnp.sum(jnp.where(known, 0.0, cavity_terms))
    )


def extrapolate_sites(memory: anderson.Memory, tau_old, nu_old, tau, nu):
    """The sites after a sweep from (tau_old, nu_old) to (tau, nu), extrapolated by Anderson acceleration
    (:mod:`gpclass._anderson`) with the site precisions projected onto tau~ >= 0, and the updated memory."""
    n = tau.shape[0]
    sites, memory = anderson.step(memory, jnp.concatenate([tau_old, nu_old]), jnp.concatenate([tau, nu]),
                                  project=lambda sites: sites.at[:n].max(0.0))
    return sites[:n], sites[n:], memory
