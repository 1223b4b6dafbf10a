"""Predictions from any Gaussian posterior (GPML Algorithms 3.2 and 3.6)."""

import equinox as eqx

from ._linalg import latent_variance_reduction
from ._types import Array, Float
from ._validation import check_inputs
from .inference import GaussianPosterior
from .likelihoods import mackay_probability


@eqx.filter_jit
def predict_latent(
    posterior: GaussianPosterior, X_test
) -> tuple[Float[Array, " m"], Float[Array, " m"]]:
    """Latent predictive mean and variance at test inputs.

    E[f*] = k*^T alpha (GPML eq. 3.21) and
    V[f*] = k(x*, x*) - k*^T (K + W^-1)^-1 k* = k** - |L^-1 W^1/2 k*|^2 (eq. 3.24, Algorithm 3.2).
    """
    X_test = check_inputs(X_test, "X_test")
    if X_test.shape[1] != posterior.X.shape[1]:
        raise ValueError(
            f"X_test has {X_test.shape[1]} input dimensions but the training inputs have {posterior.X.shape[1]}."
        )
    K_cross = posterior.kernel.gram(X_test, posterior.X)
    mean = K_cross @ posterior.alpha
    var = posterior.kernel.diag(X_test) - latent_variance_reduction(posterior.chol, posterior.sqrt_w, K_cross)
    return mean, var


@eqx.filter_jit
def predict(posterior: GaussianPosterior, X_test, *, approximation: str | None = None) -> Float[Array, " m"]:
    """p(y* = +1 | x*, X, y), the likelihood averaged over the latent predictive (GPML eq. 3.25).

    Args:
        posterior: from :func:`gpclass.infer`.
        X_test: test inputs of shape (m, d).
        approximation: ``None`` (default) averages accurately (exact for the
            probit; quadrature accurate to ~1e-12 for the logistic at every
            latent variance); ``"mackay"`` uses sigma(kappa(s^2) mean)
            (Gibbs & MacKay eq. 23), meant for the logistic likelihood.
    """
    mean, var = predict_latent(posterior, X_test)
    if approximation is None:
        return posterior.likelihood.predictive_probability(mean, var)
    if approximation == "mackay":
        return mackay_probability(mean, var)
    raise ValueError(f"approximation must be None or 'mackay'; got {approximation!r}.")


