"""The step-function (noise-free threshold) likelihood of Kim & Ghahramani."""

import jax.numpy as jnp
from jax.scipy.special import ndtr

from ._base import AbstractLikelihood
from ._probit import gaussian_cdf_tilted_moments


class Heaviside(AbstractLikelihood):
    """p(y|f) = H(y f): 1 if y f > 0, else 0  (Kim & Ghahramani eq. 9 with epsilon = 0).

    With a white-noise term ``v2 delta`` in the kernel (Kim & Ghahramani eq. 10)
    this is the probit model with latent noise v2: the step applied to f = g + n,
    n ~ N(0, v2), gives p(y|g) = Phi(y g / sqrt(v2)).  Wrap it in
    :class:`LabelNoise` for Kim & Ghahramani's label-flip rate epsilon.

    EP handles it in closed form (the tilted distribution is a truncated
    Gaussian, :meth:`tilted_moments`).  Laplace's method cannot: log p(y|f) is
    0 or -inf and has no curvature, so it is marked not log-concave and
    ``gpc.Laplace`` refuses it.

    Example (Kim & Ghahramani's model is ``gpc.infer(gpc.EP(), kernel + gpc.kernels.White(v2),
    gpc.likelihoods.LabelNoise(gpc.likelihoods.Heaviside(), epsilon), X, y)``)::

        >>> lik = gpc.likelihoods.Heaviside()
        >>> print(lik.log_prob(jnp.array([1.0, -1.0]), jnp.array([0.5, 0.5])))  # right side, wrong side
        [  0. -inf]
        >>> print(np.asarray(lik.predictive_probability(jnp.array([0.0, 2.0]), jnp.array([1.0, 1.0]))).round(3))
        [0.5   0.977]
    """

    log_concave = False
    finite_expected_log_prob = False  # -inf as soon as q puts mass on the wrong side
    closed_form_tilted = True

    def log_prob(self, y, f):
        return jnp.where(y * f > 0, 0.0, -jnp.inf).astype(jnp.result_type(f))

    def tilted_moments(self, y, mean, var):
        """Truncated-Gaussian moments: eq. 3.58 with z = y mean / sqrt(var) (no probit noise)."""
        return gaussian_cdf_tilted_moments(y, mean, var, var)

    def expected_log_prob(self, y, mean, var):
        """E[log H(y f)] is -inf as soon as q puts mass on the wrong side (var > 0)."""
        wrong = (var > 0) | (y * mean <= 0)
        return jnp.where(wrong, -jnp.inf, 0.0).astype(jnp.result_type(mean))

    def predictive_probability(self, mean, var):
        """P(f > 0) = Phi(mean / sqrt(var)) for f ~ N(mean, var); the sign of the mean when var = 0."""
        safe = jnp.where(var > 0, var, 1.0)
        return jnp.where(var > 0, ndtr(mean / jnp.sqrt(safe)), jnp.where(mean > 0, 1.0, 0.0))
