"""The probit (cumulative Gaussian) likelihood."""

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import erfcx, ndtr

from ._base import AbstractLikelihood

_SQRT2 = float(np.sqrt(2.0))
_SQRT_2_OVER_PI = float(np.sqrt(2.0 / np.pi))
_SQRT_2PI = float(np.sqrt(2.0 * np.pi))
_SQRT_PI = float(np.sqrt(np.pi))


_ERFCX_SWITCH = 25.0
# (-1)^k (2k - 1)!! for the asymptotic series of erfcx, k = 0..7.
_ERFCX_SERIES = (1.0, -1.0, 3.0, -15.0, 105.0, -945.0, 10395.0, -135135.0)


def scaled_erfc(x):
    """erfcx(x) = exp(x^2) erfc(x) for x >= 0.

    jax 0.10.2's ``jax.scipy.special.erfcx`` returns exactly 0 for x in
    [26.543, 26.642] in float64 and [9.19, 9.42] in float32 (scanned against
    scipy on a 1e-4 grid; correct elsewhere), which made log Phi(z) = -inf for
    z in [-37.68, -37.54] and the inverse Mills ratio infinite there.  Above
    x = 25 (float64) or 8 (float32) this uses the asymptotic series
    erfcx(x) = 1/(x sqrt(pi)) sum_k (-1)^k (2k-1)!! / (2 x^2)^k with eight
    terms (truncation error below 1e-18, resp. 3e-11, relative).
    """
    switch = _ERFCX_SWITCH if x.dtype == jnp.float64 else 8.0
    large = x > switch
    x_large = jnp.where(large, x, switch)
    t = 0.5 / x_large**2
    series = _ERFCX_SERIES[-1]
    for c in _ERFCX_SERIES[-2::-1]:
        series = c + t * series
    return jnp.where(large, series / (x_large * _SQRT_PI), erfcx(jnp.where(large, 0.0, x)))


def log_cdf(z):
    """log Phi(z), accurate in both tails.

    Below 0, Phi(z) = erfcx(-z/sqrt 2) exp(-z^2/2) / 2 (scaled complementary
    error function: no underflow, full relative accuracy); above 0,
    log1p(-Phi(-z)) keeps the tiny value log Phi(z) accurate.
    """
    positive = z > 0
    # Each branch sees only arguments where it is finite, so gradients stay finite too.
    upper = jnp.log1p(-ndtr(-jnp.where(positive, z, 1.0)))
    z_lower = jnp.where(positive, -1.0, z)
    lower = jnp.log(0.5 * scaled_erfc(-z_lower / _SQRT2)) - 0.5 * z_lower**2
    return jnp.where(positive, upper, lower)


def inverse_mills_ratio(z):
    """r(z) = N(z) / Phi(z), accurate with finite derivatives for every z.

    Below 0, r = sqrt(2/pi) / erfcx(-z/sqrt 2) (r ~ -z as z -> -inf); above 0,
    Phi(z) >= 1/2 and r = N(z) / Phi(z) directly, which underflows smoothly
    to 0 (with derivative 0) past z ~ 38.6.  The erfcx form alone would
    overflow there (erfcx(-z/sqrt 2) ~ 2 exp(z^2/2)) and give a NaN derivative.
    """
    positive = z > 0
    z_upper = jnp.where(positive, z, 1.0)
    upper = jnp.exp(-0.5 * z_upper**2) / _SQRT_2PI / ndtr(z_upper)
    lower = _SQRT_2_OVER_PI / scaled_erfc(-jnp.where(positive, -1.0, z) / _SQRT2)
    return jnp.where(positive, upper, lower)


def gaussian_cdf_tilted_moments(y, mean, var, scale_sq):
    """Moments of Phi(y f / s) N(f|mean, var) / Z with s^2 = scale_sq - var (GPML eqs. 3.58).

    Z = Phi(z), z = y mean / sqrt(scale_sq); the probit has s = 1
    (scale_sq = 1 + var), the step function s -> 0 (scale_sq = var).  The
    ratio r = N(z) / Phi(z) is formed in log space, so far in the tail
    (z << 0, where r ~ -z) the moments keep their accuracy.
    """
    scale = jnp.sqrt(scale_sq)
    z = y * mean / scale
    log_z = log_cdf(z)
    r = inverse_mills_ratio(z)
    tilted_mean = mean + y * var * r / scale
    tilted_var = var - var**2 * r * (z + r) / scale_sq
    return log_z, tilted_mean, tilted_var


class Probit(AbstractLikelihood):
    """p(y|f) = Phi(y f)  (GPML eq. 3.4 with the cumulative Gaussian).

    log Phi(z) and the ratio phi(z)/Phi(z) come from the scaled complementary
    error function erfcx for z < 0 and from log1p(-Phi(-z)) for z > 0, so the
    value and the derivatives keep full relative accuracy deep in both tails.
    """

    def log_prob(self, y, f):
        return log_cdf(y * f)

    def derivatives(self, y, f):
        """GPML Table 3.1: d log p = y r, W = r (z + r) with z = y f and r = phi(z) / Phi(z)."""
        z = y * f
        r = inverse_mills_ratio(z)
        return log_cdf(z), y * r, r * (z + r)

    def tilted_moments(self, y, mean, var):
        """GPML eq. 3.58 with z = y mean / sqrt(1 + var) and r = N(z) / Phi(z) formed in log space."""
        return gaussian_cdf_tilted_moments(y, mean, var, 1.0 + var)

    def predictive_probability(self, mean, var):
        """Exact: int Phi(f) N(f|mean, var) df = Phi(mean / sqrt(1 + var))  (GPML eq. 3.82)."""
        return ndtr(mean / jnp.sqrt(1.0 + var))
