"""The logistic likelihood and its Gaussian average."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp, ndtr

from ._base import AbstractLikelihood
from ._mackay import mackay_probability
from ._probit import log_cdf_and_mills_ratio

# Gauss-Hermite rule (probabilists' weight exp(-z^2/2)) for small latent variance.
_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite_e.hermegauss(64)
_GH_WEIGHTS = _GH_WEIGHTS / np.sqrt(2.0 * np.pi)
# Trapezoid rule over the logistic density for large latent variance, 401 nodes on [-120, 40]: the mass of
# density(t) Phi((y mean - t) / s) lies in the density's bulk and, for y mean << 0, near t = y mean with e^t to its
# left, so the rule covers y mean >= -80 with a truncated mass below e^-40 of the integral.  Further out (a
# cavity that gives its label a probability below e^-80) the truncation shows: at latent std 1.5, log Z is off by
# 5e-10 at y mean = -100 and by 0.2 at -120.  Nodes that follow y mean would fix that at 20-25 % more time.
_T_STEP = 0.4
_T_NODES = np.arange(-120.0, 40.0 + _T_STEP / 2, _T_STEP)
_SWITCH_STD = 1.0


@jax.custom_jvp
def log_sigmoid(z):
    """(log sigma(z), sigma(z), sigma(-z)), each without cancellation.

    Derivatives are the closed forms d log sigma / dz = sigma(-z) and d sigma(z) / dz = sigma(z) sigma(-z), so
    automatic differentiation of any order (the Gaussian averages' fourth derivatives,
    ``likelihoods._gaussian_average``) gives polynomials in the two sigmoids instead of nesting
    ``jnp.logaddexp``'s own derivative rule.
    """
    return jax.nn.log_sigmoid(z), jax.nn.sigmoid(z), jax.nn.sigmoid(-z)


@log_sigmoid.defjvp
def _log_sigmoid_jvp(primals, tangents):
    (z,), (dz,) = primals, tangents
    log_p, p, q = log_sigmoid(z)
    slope = p * q * dz
    return (log_p, p, q), (q * dz, slope, -slope)


class Logistic(AbstractLikelihood):
    """p(y|f) = sigma(y f) = 1 / (1 + exp(-y f))  (GPML eq. 3.2).

    ``log_prob`` is ``log_sigmoid`` (= -softplus(-y f)), finite for any f, with closed-form derivatives of every
    order (:func:`log_sigmoid`).

    Example::

        >>> lik = gpc.likelihoods.Logistic()
        >>> print(np.exp(lik.log_prob(jnp.array([1.0, -1.0]), jnp.array([2.0, 2.0]))).round(3))  # sigma(+-2)
        [0.881 0.119]
        >>> average = jax.jit(lik.predictive_probability)  # compiled, as gpc.predict runs it
        >>> print(np.asarray(average(jnp.array([0.0, 2.0]), jnp.array([1.0, 1.0]))).round(3))  # over N(f | m, 1)
        [0.5   0.845]
    """

    hermite_std = 1.5  # log p analytic in a wide strip about the real axis (``_gaussian_average._by_rule``)

    def log_prob(self, y, f):
        return log_sigmoid(y * f)[0]

    def log_prob_derivatives(self, y, f):
        """With z = y f, p = sigma(z), q = sigma(-z) and y^2 = 1, since dp/df = y p q = -dq/df:

            l^(1) = y q,   l^(2) = -p q,   l^(3) = -y p q (q - p),   l^(4) = -p q (1 - 6 p q);

        products of the two sigmoids, so nothing cancels in the tails.  The numbers of automatic differentiation
        of ``log_prob`` (the default), the Gaussian averages' derivative pass in less than half its time
        (``benchmarks/README.md``, ``quadrature_cost.py``).  A subclass with a ``log_prob`` of its own gets the
        default."""
        if type(self).log_prob is not Logistic.log_prob:
            return super().log_prob_derivatives(y, f)
        z = y * f
        p, q = jax.nn.sigmoid(z), jax.nn.sigmoid(-z)
        pq = p * q
        return y * q, -pq, -y * pq * (q - p), -pq * (1.0 - 6.0 * pq)

    def derivatives(self, y, f):
        """GPML eqs. 3.15-3.16 written without cancellation: d log p = y sigma(-y f), W = sigma(f) sigma(-f)."""
        z = y * f
        return jax.nn.log_sigmoid(z), y * jax.nn.sigmoid(-z), jax.nn.sigmoid(z) * jax.nn.sigmoid(-z)

    def tilted_moments(self, y, mean, var):
        """Moments of sigma(y f) N(f|mean, var) / Z by the same two quadrature rules as the prediction.

        * std <= 1: 64-node Gauss-Hermite in z = (f - mean)/std, with log Z by
          log-sum-exp (finite far in the tail).
        * std > 1: sigma(y f) = P(T < y f) with T standard logistic, so the tilted
          distribution is a logistic mixture of Gaussians truncated at y f = t,
          each with closed-form normaliser Phi(z_t), z_t = (y mean - t)/std, mean
          mean + y std r(z_t) and variance var (1 - r (z_t + r)), r = N/Phi;
          the mixture over t uses the trapezoid rule of ``predictive_probability``.
        The variance is assembled by the law of total variance (no cancellation).
        """
        std = jnp.sqrt(var)
        small = _gauss_hermite_tilted(y, mean, std)
        large = _logistic_mixture_tilted(y, mean, jnp.maximum(std, _SWITCH_STD))
        return tuple(jnp.where(std <= _SWITCH_STD, a, b) for a, b in zip(small, large))

    def mackay_probability(self, mean, var):
        """sigma(kappa(var) mean), kappa = (1 + pi var / 8)^-1/2 (Gibbs & MacKay eq. 23)."""
        return mackay_probability(mean, var)

    def predictive_probability(self, mean, var):
        """int sigma(f) N(f|mean, var) df to ~1e-12 for every variance (GPML eq. 3.25).

        A fixed 20-40 node Gauss-Hermite rule in f is off by percents once the
        latent standard deviation s reaches tens (the sigmoid becomes a step
        on the scale of the nodes).  Two rules cover all s:

        * s <= 1: 64-node Gauss-Hermite in z = (f - mean)/s; the integrand is
          analytic in a strip of half-width pi/s >= pi, so the rule is exact to
          rounding.
        * s > 1: write sigma(f) = P(T < f) with T standard logistic, so the
          average is E_T[Phi((mean - T)/s)]; the trapezoid rule in T with step
          0.4 on [-120, 40] weighted by the logistic density converges
          geometrically (the integrand is analytic within |Im T| < 2.8: poles of
          the density at +-i pi, zeros of Phi at |Im| = 2.82 s), and the
          truncated mass is below e^-40 of the average for mean >= -80 (the
          average of a mean far below 0 sits near T = mean).
        """
        mean = jnp.asarray(mean)
        std = jnp.sqrt(var)
        small = _gauss_hermite_average(mean, std)
        large = _logistic_mixture_average(mean, jnp.maximum(std, _SWITCH_STD))
        return jnp.where(std <= _SWITCH_STD, small, large)


def _gauss_hermite_average(mean, std):
    nodes = jnp.asarray(_GH_NODES, dtype=mean.dtype)
    weights = jnp.asarray(_GH_WEIGHTS, dtype=mean.dtype)
    f = mean[..., None] + std[..., None] * nodes
    return jnp.sum(weights * jax.nn.sigmoid(f), axis=-1)


def _logistic_mixture_average(mean, std):
    t = jnp.asarray(_T_NODES, dtype=mean.dtype)
    density = jax.nn.sigmoid(t) * jax.nn.sigmoid(-t)
    cdf = ndtr((mean[..., None] - t) / std[..., None])
    return _T_STEP * jnp.sum(density * cdf, axis=-1)


def _combine(log_w, means, variances):
    """log sum_k w_k, and the mean and variance of the mixture with weights w_k (last axis)."""
    log_z = logsumexp(log_w, axis=-1)
    p = jnp.exp(log_w - log_z[..., None])
    mixture_mean = jnp.sum(p * means, axis=-1)
    mixture_var = jnp.sum(p * (variances + (means - mixture_mean[..., None]) ** 2), axis=-1)
    return log_z, mixture_mean, mixture_var


def _gauss_hermite_tilted(y, mean, std):
    nodes = jnp.asarray(_GH_NODES, dtype=mean.dtype)
    log_w = jnp.log(jnp.asarray(_GH_WEIGHTS, dtype=mean.dtype))
    f = mean[..., None] + std[..., None] * nodes
    log_w = log_w + jax.nn.log_sigmoid(y[..., None] * f)
    return _combine(log_w, f, jnp.zeros_like(f))


def _logistic_mixture_tilted(y, mean, std):
    t = jnp.asarray(_T_NODES, dtype=mean.dtype)
    log_density = jnp.log(_T_STEP) + jax.nn.log_sigmoid(t) + jax.nn.log_sigmoid(-t)
    z = (y * mean)[..., None] / std[..., None] - t / std[..., None]
    log_phi, r = log_cdf_and_mills_ratio(z)
    means = mean[..., None] + (y * std)[..., None] * r
    variances = (std**2)[..., None] * (1.0 - r * (z + r))
    return _combine(log_density + log_phi, means, variances)
