"""Stochastic variational GP classification (SVGP; Hensman, Matthews & Ghahramani 2015), binary likelihoods.

m inducing inputs Z carry the inducing values u = f(Z) ~ N(0, K_zz).  In the
whitened parametrisation u = L v with L L^T = K_zz (+ jitter), the
variational posterior is q(v) = N(mu, S S^T), S lower triangular, and

    q(f_x) = N(A^T mu, k(x, x) - A^T A + A^T S S^T A),   A = L^-1 K_zx    (marginals),
    ELBO = sum_i E_q[log p(y_i|f_i)] - KL(q(v) || N(0, I))
         = sum_i E_q[log p(y_i|f_i)] - 1/2 (|S|_F^2 + |mu|^2 - m - log|S S^T|),

the data term by the likelihood's quadrature (``expected_log_prob``).  On a
minibatch of b of the n cases the data term is scaled by n / b: an unbiased
estimate of the ELBO, whose cost is O(b m^2 + m^3) per evaluation.  With
Z = X (m = n) the family of q(f) is every Gaussian and the maximised ELBO is
the one of ``gpc.KL()``.
"""

import equinox as eqx
import jax
import jax.numpy as jnp

from . import _dense as dense
from ._types import Array, Float
from .kernels import AbstractKernel
from .likelihoods import AbstractLikelihood


class SVGP(eqx.Module):
    """A sparse variational posterior: kernel, likelihood, inducing inputs Z and the whitened q(v) = N(mu, S S^T).

    Attributes:
        kernel, likelihood: the prior and a binary likelihood.
        inducing: Z, shape (m, d).
        q_mu: mu, shape (m,).
        q_sqrt: S, shape (m, m); only its lower triangle is read.
        jitter: ``jitter * mean(diag K_zz)`` is added to K_zz before it is
            factorised (the meaning ``jitter`` has everywhere in gpclass);
            0 makes the model exactly the GP restricted to Z.

    ``SVGP.at_prior(kernel, likelihood, Z)`` starts from q(v) = N(0, I), the
    prior.  Fit it with :func:`gpclass.fit_svgp`; predict with
    ``gpc.predict`` and ``gpc.predict_latent``; :meth:`elbo` is the
    objective, for training loops of your own.
    """

    kernel: AbstractKernel
    likelihood: AbstractLikelihood
    inducing: Float[Array, "m d"] = eqx.field(converter=jnp.asarray)
    q_mu: Float[Array, " m"] = eqx.field(converter=jnp.asarray)
    q_sqrt: Float[Array, "m m"] = eqx.field(converter=jnp.asarray)
    jitter: float = eqx.field(static=True, default=1e-6)

    def __check_init__(self):
        m = self.inducing.shape[0]
        if self.inducing.ndim != 2 or self.q_mu.shape != (m,) or self.q_sqrt.shape != (m, m):
            raise ValueError(
                f"SVGP needs inducing of shape (m, d), q_mu of shape (m,) and q_sqrt of shape (m, m); got "
                f"{self.inducing.shape}, {self.q_mu.shape} and {self.q_sqrt.shape}."
            )
        if getattr(self.likelihood, "num_latent", 1) != 1:
            raise ValueError("SVGP supports binary likelihoods (one latent function) so far.")

    @classmethod
    def at_prior(cls, kernel, likelihood, inducing, *, jitter: float = 1e-6) -> "SVGP":
        """q(v) = N(0, I): q(f) is the prior."""
        inducing = jnp.asarray(inducing)
        m = inducing.shape[0]
        return cls(kernel, likelihood, inducing, jnp.zeros(m, inducing.dtype), jnp.eye(m, dtype=inducing.dtype),
                   jitter)

    def _projection(self, X: Float[Array, "b d"]) -> Float[Array, "m b"]:
        """A = L^-1 K_zx with L L^T = K_zz + jitter mean(diag K_zz) I."""
        K_zz = self.kernel.gram(self.inducing)
        m = K_zz.shape[0]
        L = dense.cholesky(K_zz + self.jitter * jnp.mean(jnp.diagonal(K_zz)) * jnp.eye(m, dtype=K_zz.dtype))
        return dense.solve_triangular(L, self.kernel.gram(self.inducing, X), lower=True)

    def latent(self, X: Float[Array, "b d"]) -> tuple[Float[Array, " b"], Float[Array, " b"]]:
        """Mean and variance of q(f_x) (the module docstring's marginals)."""
        return self._marginals(self._projection(X), X)

    def _marginals(self, A, X):
        SA = jnp.tril(self.q_sqrt).T @ A
        var = self.kernel.diag(X) - jnp.sum(A**2, axis=0) + jnp.sum(SA**2, axis=0)
        return A.T @ self.q_mu, var

    def kl(self) -> Float[Array, ""]:
        """KL(q(v) || N(0, I)) = 1/2 (|S|_F^2 + |mu|^2 - m - log|S S^T|)."""
        S = jnp.tril(self.q_sqrt)
        m = S.shape[0]
        log_det = 2.0 * jnp.sum(jnp.log(jnp.abs(jnp.diagonal(S))))
        return 0.5 * (jnp.sum(S**2) + jnp.dot(self.q_mu, self.q_mu) - m - log_det)

    def elbo(self, X: Float[Array, "b d"], y: Float[Array, " b"], num_data: int | None = None) -> Float[Array, ""]:
        """The ELBO from a minibatch (X, y) of ``num_data`` cases (default: the batch is all of them).

        ``y`` in {-1, +1}; the data term is scaled by num_data / b, so the
        average over the batches of any partition of the data is the ELBO.
        """
        return self._elbo_from_projection(self._projection(X), X, y, num_data)

    def _elbo_from_projection(self, A, X, y, num_data=None) -> Float[Array, ""]:
        """:meth:`elbo` with A = L^-1 K_zx given (``fit_svgp`` passes it on to the natural-gradient step)."""
        mean, var = self._marginals(A, X)
        return _scale(num_data, y) * jnp.sum(self.likelihood.expected_log_prob(y, mean, var)) - self.kl()


def _scale(num_data, y) -> float:
    """num_data / b: the factor that makes a minibatch's data term an unbiased estimate of the whole data's."""
    return 1.0 if num_data is None else num_data / y.shape[0]


def natural_gradient_step(model: SVGP, A, X, y, num_data, step: float) -> SVGP:
    """q(v) after one natural-gradient step of the minibatch ELBO (Salimbeni, Eleftheriadis & Hensman 2018).

    With natural parameters theta = (Sigma^-1 mu, -1/2 Sigma^-1) and
    expectation parameters eta = (mu, Sigma + mu mu^T), the natural gradient
    in theta is the ordinary gradient in eta; for the whitened prior
    N(0, I) (theta_0 = (0, -1/2 I)) the step is

        theta <- (1 - step) theta + step (theta_0 + d E / d eta),

    E the (scaled) expected log-likelihood.  For a log-concave likelihood
    d E / d Sigma is negative semi-definite, so for step in (0, 1] the new
    -2 theta_2 stays positive definite.  step = 1 jumps to the fixed point of
    the current linearisation (the conjugate-computation update of Khan & Lin).
    A = L^-1 K_zx at the model's hyperparameters and Z (``SVGP._projection``).
    """
    prior_var = model.kernel.diag(X) - jnp.sum(A**2, axis=0)
    scale = _scale(num_data, y)
    S = jnp.tril(model.q_sqrt)
    mu, Sigma = model.q_mu, S @ S.T

    def expected(eta1, eta2):
        var = prior_var + jnp.sum(A * ((eta2 - jnp.outer(eta1, eta1)) @ A), axis=0)
        return scale * jnp.sum(model.likelihood.expected_log_prob(y, A.T @ eta1, var))

    g1, g2 = jax.grad(expected, argnums=(0, 1))(mu, Sigma + jnp.outer(mu, mu))
    g2 = 0.5 * (g2 + g2.T)
    m = mu.shape[0]
    identity = jnp.eye(m, dtype=mu.dtype)
    precision = dense.cho_solve(S, identity)  # Sigma^-1 = S^-T S^-1
    new_precision = (1.0 - step) * precision + step * (identity - 2.0 * g2)
    new_theta1 = (1.0 - step) * precision @ mu + step * g1
    L = dense.cholesky(0.5 * (new_precision + new_precision.T))
    new_Sigma = dense.cho_solve(L, identity)
    new_sqrt = dense.cholesky(0.5 * (new_Sigma + new_Sigma.T))
    return eqx.tree_at(lambda mdl: (mdl.q_mu, mdl.q_sqrt), model, (new_Sigma @ new_theta1, new_sqrt))
