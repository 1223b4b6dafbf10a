"""Predictions from any Gaussian posterior (GPML Algorithms 3.2, 3.4 and 3.6)."""

import jax
import jax.numpy as jnp

from . import _dense as dense
from ._errors import entry_point
from ._exceptions import GPClassError
from ._inference import GaussianPosterior, SamplePosterior, SoftmaxPosterior, SparsePosterior, SparseSoftmaxPosterior
from ._linalg import latent_variance_reduction
from ._svgp import SVGP
from ._types import Array, Float
from ._validation import check_inputs
from .likelihoods import mackay_probability


@entry_point
def predict_latent(posterior: GaussianPosterior | SoftmaxPosterior | SamplePosterior, X_test):
    """Latent predictive moments at test inputs.

    Binary posteriors: mean and variance, each of shape (m,):
    E[f*] = k*^T alpha (GPML eq. 3.21) and
    V[f*] = k(x*, x*) - k*^T (K + W^-1)^-1 k* = k** - |L^-1 W^1/2 k*|^2 (eq. 3.24, Algorithm 3.2).

    Softmax posteriors: mean of shape (m, C) (eq. 3.41) and covariance of
    shape (m, C, C) (eq. 3.43, see :func:`_softmax_latent`).  Memory is
    O(C n m): predict a large test set in batches.

    Sample posteriors (MCMC, AIS): the mean and variance of the mixture
    sum_s w_s p(f*|f_s) (see :func:`_sample_latent`).

    :class:`gpclass.SVGP`: the marginals of q(f*) (``SVGP.latent``); with a
    softmax likelihood, means (m, C) and the diagonal covariances (m, C, C)
    (q's classes are independent), the shapes of softmax posteriors.

    :class:`gpclass.SparsePosterior` (a ``gpc.Sparse`` prior): GPML's
    ``apxSparse`` form, see :func:`_sparse_latent`.
    """
    X_test = _check_test_inputs(posterior, X_test)
    if isinstance(posterior, SVGP):
        mean, var = posterior.latent(X_test)
        if posterior.num_latent > 1:
            return mean, var[..., None] * jnp.eye(posterior.num_latent, dtype=var.dtype)
        return mean, var
    if isinstance(posterior, SparsePosterior):
        return _sparse_latent(posterior, X_test)
    if isinstance(posterior, SparseSoftmaxPosterior):
        return _sparse_softmax_latent(posterior, X_test)
    if isinstance(posterior, SoftmaxPosterior):
        return _softmax_latent(posterior, X_test)
    if isinstance(posterior, SamplePosterior):
        weights, means, var = _sample_latent(posterior, X_test)
        mean = weights @ means
        return mean, var + weights @ (means - mean) ** 2
    K_cross = posterior.kernel.gram(X_test, posterior.X)
    mean = K_cross @ posterior.alpha
    var = posterior.kernel.diag(X_test) - latent_variance_reduction(posterior.chol, posterior.sqrt_w, K_cross)
    return mean, var


def _sparse_latent(posterior: SparsePosterior, X_test) -> tuple[Float[Array, " m"], Float[Array, " m"]]:
    """E[f*] = k(x*, Z) alpha and V[f*] = k(x*, x*) - |a*|^2 + |L_u^-1 a*|^2, a* = L_uu^-1 k(Z, x*).

    This is k** - Q_*n (K~ + W^-1)^-1 Q_n* (GPML ``gp.m`` with ``apxSparse``:
    the test point's prior variance is k(x*, x*) itself, for every approximation).
    """
    sparse = posterior.kernel
    K_cross = sparse.kernel.gram(X_test, sparse.inducing)
    a = dense.solve_triangular(posterior.chol_uu, K_cross.T, lower=True)
    b = dense.solve_triangular(posterior.chol_u, a, lower=True)
    var = sparse.kernel.diag(X_test) - jnp.sum(a**2, axis=0) + jnp.sum(b**2, axis=0)
    return K_cross @ posterior.alpha, var


def _sparse_softmax_latent(posterior: SparseSoftmaxPosterior, X_test):
    """E[f*^c] = k(x*, Z) alpha^c and Cov[f*] = (k** - |w*|^2) I + W*^T H^-1 W*, W* = I_C (x) w*.

    w* = L_uu^-1 k(Z, x*) (``laplace_softmax_sparse``): with G = L_H^-1 W*
    (a triangular solve with C m right-hand sides per test point), the second
    term is G^T G.  Memory O(C^2 m) per test point: predict large sets in batches.
    """
    sparse = posterior.kernel
    K_cross = sparse.kernel.gram(X_test, sparse.inducing)  # (M, m)
    w = dense.solve_triangular(posterior.chol_uu, K_cross.T, lower=True)  # (m, M)
    num_classes = posterior.alpha.shape[1]
    m, num_test = w.shape
    eye = jnp.eye(num_classes, dtype=w.dtype)
    W_star = (eye[:, None, None, :] * w[None, :, :, None]).reshape(num_classes * m, num_test * num_classes)
    G = dense.solve_triangular(posterior.chol_h, W_star, lower=True).reshape(num_classes * m, num_test, num_classes)
    cov = jnp.einsum("kmc,kmd->mcd", G, G)
    diag = sparse.kernel.diag(X_test) - jnp.sum(w**2, axis=0)
    return K_cross @ posterior.alpha, cov + diag[:, None, None] * eye


def _softmax_latent(posterior: SoftmaxPosterior, X_test) -> tuple[Float[Array, "m C"], Float[Array, "m C C"]]:
    """GPML Algorithm 3.4, lines 8-16, for all test points at once.

    mean_c = k_c*^T (y^c - pi^c)                                   (eq. 3.41)
    cov_cc' = delta_cc' (k_c(x*, x*) - k_c*^T E_c k_c*) + b_c^T (sum_c E_c)^-1 b_c',  b_c = E_c k_c*
                                                                   (eq. 3.43 with eq. 3.47)
    """
    E, M, alpha = posterior.e_blocks, posterior.chol_sum_e, posterior.alpha
    K_cross = posterior.kernel.gram(X_test, posterior.X)  # (m, n) shared, (C, m, n) per class
    prior_var = posterior.kernel.diag(X_test)  # (m,) or (C, m)
    if K_cross.ndim == 2:
        mean = K_cross @ alpha
        b = jnp.einsum("cij,mj->cim", E, K_cross)
        quad = jnp.einsum("mi,cim->mc", K_cross, b)
        prior_var = prior_var[:, None]
    else:
        mean = jnp.einsum("cmi,ic->mc", K_cross, alpha)
        b = jnp.einsum("cij,cmj->cim", E, K_cross)
        quad = jnp.einsum("cmi,cim->mc", K_cross, b)
        prior_var = prior_var.T
    num_classes, n, m = b.shape
    v = dense.solve_triangular(M, jnp.moveaxis(b, 0, 1).reshape(n, num_classes * m), lower=True)
    v = v.reshape(n, num_classes, m)
    cov = jnp.einsum("icm,idm->mcd", v, v)
    diag = prior_var - quad
    cov = cov + diag[:, :, None] * jnp.eye(num_classes, dtype=cov.dtype)
    return mean, cov


def _check_test_inputs(posterior, X_test):
    """Finite (m, d) test inputs with the training inputs' d.

    m = 0 is allowed: the prediction at no test points is well defined (an
    empty array of the usual trailing shape), and a loop over test batches
    may end with an empty batch.
    """
    X_test = check_inputs(X_test, "X_test", allow_empty=True)
    d = (posterior.inducing if isinstance(posterior, SVGP) else posterior.X).shape[1]
    if X_test.shape[1] != d:
        raise GPClassError(f"X_test has {X_test.shape[1]} input dimensions but the training inputs have {d}.")
    return X_test


def _sample_latent(posterior: SamplePosterior, X_test):
    """p(f*|f_s) = N(k*^T K^-1 f_s, k** - k*^T K^-1 k*) for every sample (GPML eqs. 2.19 / 3.21 with f known).

    Returns the normalised sample weights (S,), the conditional means (S, m)
    and the common conditional variance (m,).
    """
    K_cross = posterior.kernel.gram(X_test, posterior.X)
    V = dense.solve_triangular(posterior.chol, K_cross.T, lower=True)  # L^-1 k*
    G = dense.solve_triangular(posterior.chol, posterior.samples.T, lower=True)  # L^-1 f_s = g_s
    var = posterior.kernel.diag(X_test) - jnp.sum(V**2, axis=0)
    return jax.nn.softmax(posterior.log_weights), G.T @ V, var


@entry_point
def predict(
    posterior: GaussianPosterior | SoftmaxPosterior | SamplePosterior,
    X_test,
    *,
    approximation: str | None = None,
    key: Array | None = None,
    num_samples: int = 10_000,
) -> Float[Array, " m"] | Float[Array, "m C"]:
    """Class probabilities: the likelihood averaged over the latent predictive distribution.

    Binary posteriors return p(y* = +1 | x*) of shape (m,) (GPML eq. 3.25):

    * ``approximation=None`` (default) averages accurately (exact for the
      probit; quadrature accurate to ~1e-12 for the logistic at every latent
      variance);
    * ``"mackay"`` uses sigma(kappa(s^2) mean) (Gibbs & MacKay eq. 23), meant
      for the logistic likelihood.

    Sample posteriors (MCMC, AIS) average p(y* = +1 | f_s) over the samples,
    each integrated over p(f*|f_s) as for a Gaussian posterior (Kuss &
    Rasmussen section 6.1; ``approximation`` as above).

    ``key`` and ``num_samples`` are not used by binary posteriors.

    Softmax posteriors (and a softmax :class:`gpclass.SVGP`) return E[softmax(f*)] of shape (m, C), rows
    summing to one:

    * ``approximation=None`` or ``"monte_carlo"``: the average over
      ``num_samples`` draws of f* from its Gaussian (GPML Algorithm 3.4); needs
      an explicit PRNG ``key``.  Standard error at most 0.5 / sqrt(num_samples).
    * ``"mean_field"``: a deterministic approximation using the full latent
      covariance (see ``Softmax.mean_field_probability``); for C = 2 it is
      MacKay's approximation.
    """
    if isinstance(posterior, SamplePosterior):
        X_test = _check_test_inputs(posterior, X_test)
        weights, means, var = _sample_latent(posterior, X_test)
        if approximation is None:
            p = posterior.likelihood.predictive_probability(means, jnp.broadcast_to(var, means.shape))
        elif approximation == "mackay":
            p = mackay_probability(means, var)
        else:
            raise GPClassError(f"approximation must be None or 'mackay'; got {approximation!r}.")
        return weights @ p
    mean, var = predict_latent(posterior, X_test)
    if isinstance(posterior, (SoftmaxPosterior, SparseSoftmaxPosterior)) or (
        isinstance(posterior, SVGP) and posterior.num_latent > 1
    ):
        likelihood = posterior.likelihood
        if approximation in (None, "monte_carlo"):
            if key is None:
                raise GPClassError(
                    "multi-class predictions average the softmax over the latent Gaussian by Monte Carlo "
                    "(GPML Algorithm 3.4), which needs an explicit key=jax.random.key(...); "
                    "or pass approximation='mean_field' for a deterministic approximation."
                )
            return likelihood.monte_carlo_probability(mean, var, key, num_samples)
        if approximation == "mean_field":
            return likelihood.mean_field_probability(mean, var)
        raise GPClassError(f"approximation must be None, 'monte_carlo' or 'mean_field'; got {approximation!r}.")
    if approximation is None:
        return posterior.likelihood.predictive_probability(mean, var)
    if approximation == "mackay":
        return mackay_probability(mean, var)
    raise GPClassError(f"approximation must be None or 'mackay'; got {approximation!r}.")
