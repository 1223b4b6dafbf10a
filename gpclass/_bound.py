"""The variational (Jensen) lower bound on log p(y|X, theta) at a fixed Gaussian q(f).

For any q(f) = N(mu, A),

    log p(y|X, theta) >= F(q, theta) = E_q[log p(y|f)] + E_q[log N(f|0, C)] + H(q)

(Kim & Ghahramani eqs. 13 and 15; Kuss & Rasmussen eq. 35 evaluates it at
the EP posterior).  The prior term is Kim & Ghahramani eq. 16,

    E_q[log N(f|0, C)] = -1/2 log|2 pi C| - 1/2 mu^T C^-1 mu - 1/2 tr(C^-1 A),

and the entropy is H(q) = 1/2 log|2 pi e A|.  Here q is held fixed (it enters
through ``stop_gradient``) and theta is free: the gradient with respect to the
kernel is Kim & Ghahramani eq. 17 and is what the M-step of EM-EP follows.
"""

import jax.numpy as jnp
from jax import lax

from . import _dense as dense
from ._covariance.dense import covariance_root
from ._errors import entry_point
from ._exceptions import GPClassError
from ._inference import GaussianPosterior
from ._types import Array, Float
from ._validation import check_binary_labels
from .kernels import AbstractKernel
from .likelihoods import AbstractLikelihood


def posterior_covariance(posterior: GaussianPosterior) -> Float[Array, "n n"]:
    """A = (K^-1 + W)^-1 = K - K W^1/2 B^-1 W^1/2 K from the stored factor of B (GPML eq. 3.27)."""
    K = posterior.kernel.gram(posterior.X)
    Vt = covariance_root(K, posterior.sqrt_w, posterior.chol)
    return K - Vt @ Vt.T


def expected_log_prior(C: Float[Array, "n n"], mean: Float[Array, " n"], cov: Float[Array, "n n"]) -> Float[Array, ""]:
    """E_q[log N(f|0, C)] for q = N(mean, cov)  (Kim & Ghahramani eq. 16), from one Cholesky factor of C."""
    n = C.shape[0]
    L = dense.cholesky(C)
    c_inv_mean = dense.cho_solve(L, mean)
    trace = jnp.trace(dense.cho_solve(L, cov))
    log_det = 2.0 * jnp.sum(jnp.log(jnp.diagonal(L)))
    return -0.5 * (n * jnp.log(2.0 * jnp.pi) + log_det + jnp.dot(mean, c_inv_mean) + trace)


@entry_point
def variational_bound(
    posterior: GaussianPosterior,
    y,
    *,
    kernel: AbstractKernel | None = None,
    likelihood: AbstractLikelihood | None = None,
) -> Float[Array, ""]:
    """F(q, theta) = E_q[log p(y|f)] + E_q[log p(f|theta)] + H(q) <= log p(y|X, theta).

    Args:
        posterior: the fixed Gaussian q(f) = N(mean, A), from any method
            (``gpc.infer(gpc.EP(), ...)`` gives Kuss & Rasmussen's EP Jensen
            bound, eq. 35).  No derivative flows into q.
        y: the training labels q was computed for.
        kernel, likelihood: the hyperparameters theta at which the bound is
            evaluated (default: the posterior's own).  Derivatives with respect
            to them are exact for fixed q.

    The expected log-likelihood uses ``likelihood.expected_log_prob``
    (closed form for a step function with label noise, Gauss-Hermite
    quadrature otherwise).  The log-determinant of A is log|K_q| - log|B|, with
    K_q the posterior's own Gram matrix: the kernel must give non-singular
    Gram matrices (add a ``White`` term if it does not), or F is -inf/NaN.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> kernel = kernel + gpc.kernels.White(0.01)  # X has repeated rows: the Gram matrix needs a nugget
        >>> post = gpc.infer(gpc.EP(), kernel, gpc.likelihoods.Probit(), X, y)
        >>> bound = gpc.variational_bound(post, y)  # Kuss & Rasmussen's EP Jensen bound
        >>> bool(bound <= post.log_marginal), round(float(bound), 1)
        (True, -22.4)
    """
    if not isinstance(posterior, GaussianPosterior):
        raise GPClassError(f"variational_bound needs a dense GaussianPosterior; got {type(posterior).__name__}.")
    kernel = posterior.kernel if kernel is None else kernel
    likelihood = posterior.likelihood if likelihood is None else likelihood
    X = posterior.X
    n = X.shape[0]
    y = check_binary_labels(y, n, X.dtype)
    mean = lax.stop_gradient(posterior.mean)
    cov = lax.stop_gradient(posterior_covariance(posterior))
    K_q = lax.stop_gradient(posterior.kernel.gram(X))
    # log|A| = log|K_q| - log|B| since A = K_q^1/2 (I + K_q^1/2 W K_q^1/2)^-1 K_q^1/2 and |B| = |I + W^1/2 K_q W^1/2|.
    log_det_a = 2.0 * jnp.sum(jnp.log(jnp.diagonal(dense.cholesky(K_q)))) - 2.0 * jnp.sum(
        jnp.log(jnp.diagonal(lax.stop_gradient(posterior.chol)))
    )
    entropy = 0.5 * (n * (1.0 + jnp.log(2.0 * jnp.pi)) + log_det_a)
    data_term = jnp.sum(likelihood.expected_log_prob(y, mean, jnp.diagonal(cov)))
    return data_term + expected_log_prior(kernel.gram(X), mean, cov) + entropy
