"""The probit (cumulative Gaussian) likelihood."""

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import ndtr

from ._base import AbstractLikelihood

_SQRT2 = float(np.sqrt(2.0))
_SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))
_SQRT_2PI = float(np.sqrt(2.0 * np.pi))
_SQRT_PI = float(np.sqrt(np.pi))


# Above this x, erfcx(x) comes from its asymptotic series (float64; 8.0 in float32).
_ERFCX_SWITCH = 25.0
# (-1)^k (2k - 1)!! for the asymptotic series of erfcx, k = 0..7.
_ERFCX_SERIES = (1.0, -1.0, 3.0, -15.0, 105.0, -945.0, 10395.0, -135135.0)


def _erfcx_series(x):
    """erfcx(x) = 1/(x sqrt(pi)) sum_k (-1)^k (2k-1)!! / (2 x^2)^k, eight terms (x >= the switch).

    Truncation error below 1e-18 (float64, x >= 25), resp. 3e-11 (float32, x >= 8), relative.
    """
    t = 0.5 / x**2
    series = _ERFCX_SERIES[-1]
    for c in _ERFCX_SERIES[-2::-1]:
        series = c + t * series
    return series / (x * _SQRT_PI)


@jax.custom_jvp
def log_cdf_and_mills_ratio(z):
    """(log Phi(z), r(z) = N(z) / Phi(z)), accurate in both tails, from one erfc evaluation.

    With x = |z| / sqrt 2 and c = erfc(x) = 2 Phi(-|z|):

    * z <= 0: Phi(z) = erfcx(x) exp(-z^2/2) / 2 with erfcx(x) = exp(x^2) c, so log Phi = log(erfcx(x)/2) - z^2/2
      and r = sqrt(2/pi) / erfcx(x), without underflow (r ~ -z as z -> -inf).  Above x = 25 (8 in float32)
      erfcx comes from its asymptotic series: ``jax.scipy.special.erfcx`` has been found exactly 0 on intervals
      just above those switches (``tests/test_likelihoods.py::test_probit_tail_has_no_holes`` scans for them).
    * z > 0: Phi(z) = 1 - c/2, log Phi = log1p(-c/2) (the tiny value kept) and r = N(z) / (1 - c/2), which
      underflows smoothly to 0 past z ~ 38.6.

    Derivatives are the closed forms d log Phi / dz = r and dr / dz = -r (z + r), so automatic differentiation of
    any order works on (z, r) and never enters the special function.
    """
    switch = _ERFCX_SWITCH if z.dtype == jnp.float64 else 8.0
    x = jnp.abs(z) / _SQRT2
    large = x > switch
    c = lax.erfc(x)
    erfcx = jnp.where(large, _erfcx_series(jnp.where(large, x, switch)), jnp.exp(jnp.where(large, 0.0, x) ** 2) * c)
    gauss = jnp.exp(-0.5 * z**2)
    positive = z > 0
    log_cdf = jnp.where(positive, jnp.log1p(-0.5 * c), jnp.log(0.5 * erfcx) - 0.5 * z**2)
    ratio = jnp.where(positive, gauss / (_SQRT_2PI * (1.0 - 0.5 * c)), _SQRT_2_OVER_PI / erfcx)
    return log_cdf, ratio


@log_cdf_and_mills_ratio.defjvp
def _log_cdf_and_mills_ratio_jvp(primals, tangents):
    (z,), (dz,) = primals, tangents
    log_cdf, ratio = log_cdf_and_mills_ratio(z)
    return (log_cdf, ratio), (ratio * dz, -ratio * (z + ratio) * dz)


def gaussian_cdf_tilted_moments(y, mean, var, scale_sq):
    """Moments of Phi(y f / s) N(f|mean, var) / Z with s^2 = scale_sq - var (GPML eqs. 3.58).

    Z = Phi(z), z = y mean / sqrt(scale_sq); the probit has s = 1
    (scale_sq = 1 + var), the step function s -> 0 (scale_sq = var).  The
    ratio r = N(z) / Phi(z) comes from the scaled erfc, so far in the tail
    (z << 0, where r ~ -z) the moments keep their accuracy.
    """
    scale = jnp.sqrt(scale_sq)
    z = y * mean / scale
    log_z, r = log_cdf_and_mills_ratio(z)
    tilted_mean = mean + y * var * r / scale
    tilted_var = var - var**2 * r * (z + r) / scale_sq
    return log_z, tilted_mean, tilted_var


class Probit(AbstractLikelihood):
    """p(y|f) = Phi(y f)  (GPML eq. 3.4 with the cumulative Gaussian).

    log Phi(z) and the ratio phi(z)/Phi(z) come from the scaled complementary
    error function erfcx for z <= 0 and from log1p(-Phi(-z)) for z > 0, so the
    value and the derivatives keep full relative accuracy deep in both tails.

    Example::

        >>> lik = gpc.likelihoods.Probit()
        >>> print(np.exp(lik.log_prob(jnp.array([1.0, -1.0]), jnp.array([2.0, 2.0]))).round(3))  # Phi(+-2)
        [0.977 0.023]
        >>> print(lik.log_prob(jnp.array([1.0, -1.0]), jnp.array([-40.0, 40.0])) < -800)  # finite far in the tail
        [ True  True]
        >>> p = lik.predictive_probability(jnp.array([0.0, 2.0]), jnp.array([1.0, 1.0]))  # Phi(mean / sqrt(1 + 1))
        >>> print(np.asarray(p).round(3))
        [0.5   0.921]
    """

    closed_form_tilted = True
    hermite_std = 1.5  # log p analytic in a wide strip about the real axis (``_gaussian_average._by_rule``)

    def log_prob(self, y, f):
        return log_cdf_and_mills_ratio(y * f)[0]

    def derivatives(self, y, f):
        """GPML Table 3.1: d log p = y r, W = r (z + r) with z = y f and r = phi(z) / Phi(z)."""
        z = y * f
        log_cdf, r = log_cdf_and_mills_ratio(z)
        return log_cdf, y * r, r * (z + r)

    def tilted_moments(self, y, mean, var):
        """GPML eq. 3.58 with z = y mean / sqrt(1 + var) and r = N(z) / Phi(z)."""
        return gaussian_cdf_tilted_moments(y, mean, var, 1.0 + var)

    def predictive_probability(self, mean, var):
        """Exact: int Phi(f) N(f|mean, var) df = Phi(mean / sqrt(1 + var))  (GPML eq. 3.82)."""
        return ndtr(mean / jnp.sqrt(1.0 + var))
