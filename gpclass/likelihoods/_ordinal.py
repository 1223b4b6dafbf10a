"""The ordinal (cumulative probit) likelihood for ordered labels 0..K-1 (Chu & Ghahramani 2005)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._exceptions import GPClassError
from .._types import Array, Bool, Float
from .._validation import Checks, as_float, check_ordinal_labels
from ._base import _F_TRANSITION, AbstractLikelihood
from ._probit import gaussian_cdf_tilted_moments, log_cdf_and_mills_ratio

_LOG_SQRT_2PI = float(0.5 * np.log(2.0 * np.pi))


def _log_phi(z):
    return log_cdf_and_mills_ratio(z)[0]


def _log_interval(a, b):
    """log(Phi(b) - Phi(a)) for a < b, finite, without cancellation.

    By the symmetry Phi(b) - Phi(a) = Phi(-a) - Phi(-b) the interval is moved to where a + b <= 0 (lo <= -|hi|),
    so that Phi(lo) <= Phi(hi) <= 1/2 + ... is the smaller tail: then
    log(Phi(hi) - Phi(lo)) = log Phi(hi) + log(-expm1(log Phi(lo) - log Phi(hi))), each log Phi from the scaled
    erfc (``log_cdf_and_mills_ratio``), accurate deep in the tails (a = 40, b = 41: the difference of two
    numbers near 1 that differ by 1e-349 in the direct form).
    """
    reflect = a + b > 0
    lo, hi = jnp.where(reflect, -b, a), jnp.where(reflect, -a, b)
    log_hi = _log_phi(hi)
    return log_hi + jnp.log(-jnp.expm1(_log_phi(lo) - log_hi))


class Ordinal(AbstractLikelihood):
    """p(y = k | f) = Phi((b_k - f) / sigma) - Phi((b_{k-1} - f) / sigma),  k = 0..K-1,  b_0 = -inf, b_K = +inf.

    The ordinal regression model of Chu & Ghahramani (2005, "Gaussian processes for ordinal regression",
    JMLR 6, section 2: the likelihood of an ordinal variable as the latent function plus Gaussian noise
    N(0, sigma^2) falling between two of K - 1 ordered cutpoints b_1 < ... < b_{K-1}); a cumulative probit model.
    One latent function per case; log p(y|f) is concave in f (W > 0), so every method applies.  With K = 2,
    cutpoint 0 and sigma = 1 it is ``Probit()`` with class 0 as label -1 and class 1 as +1.

    Labels are integers 0..K-1 (ints, or floats holding whole numbers), checked by :meth:`check_labels`.

    Parameters (fitted by ``gpc.fit`` with the kernel): ``first_cutpoint`` b_1 (a real number, fitted on its own
    scale: declared ``unconstrained``), ``increments`` b_{j+1} - b_j > 0 (K - 2 of them, fitted in log space),
    so the cutpoints are ordered by construction, and ``noise`` sigma > 0 (log space).  The constructor takes
    the cutpoints themselves (strictly increasing; default: spacing 1 centred at 0,
    b_j = j - K/2, so -0.5, 0.5 for K = 3); :attr:`cutpoints` returns them.

    The model is unchanged when f, the cutpoints and sigma are scaled together (f -> c f, b -> c b,
    sigma -> c sigma): with a kernel that has a signal variance, ML-II is flat along that direction.  Hold
    one of them fixed (Chu & Ghahramani's kernel has no signal variance), e.g. sigma::

        trainable = eqx.tree_at(lambda t: t[1].noise, jax.tree.map(lambda _: True, (kernel, lik)), False)
        result = gpc.fit(gpc.EP(), kernel, lik, X, y, trainable=trainable)

    Numerics: every class probability comes from ``log Phi`` of the probit helpers, the middle classes as
    log(Phi(b) - Phi(a)) without cancellation (:func:`_log_interval`), so log p keeps its relative accuracy
    far in the tails (|f| = 40: measured against mpmath in tests/test_ordinal.py).  EP's tilted moments are
    closed form (:meth:`tilted_moments`); predictions are exact (:meth:`predictive_probability`).

    Example::

        lik = gpc.likelihoods.Ordinal(3)                          # cutpoints -0.5, 0.5, sigma = 1
        result = gpc.fit(gpc.EP(), kernel, lik, X, y)             # y in {0, 1, 2}
        p = gpc.predict(result.posterior, X_test)                 # (m, 3) class probabilities
        rank = result.likelihood.mean_rank(p)                     # E[y*], (m,)
        mean, var = gpc.predict_latent(result.posterior, X_test)  # latent moments
    """

    num_classes: int = eqx.field(static=True)
    first_cutpoint: Float[Array, ""]
    increments: Float[Array, " K-2"]
    noise: Float[Array, ""]

    log_concave = True
    binary = False
    left_out_label = -1.0  # gpc.infer's mask: class 0 is a label here, so left-out cases are marked -1
    unconstrained = ("first_cutpoint",)  # gpc.fit fits b_1 on its own scale, the increments and sigma in log space

    def __init__(self, num_classes: int, cutpoints=None, noise=1.0):
        if not isinstance(num_classes, (int, np.integer)) or isinstance(num_classes, bool) or num_classes < 2:
            raise GPClassError(f"Ordinal needs an integer num_classes >= 2; got {num_classes!r}.")
        num_classes = int(num_classes)
        if cutpoints is None:
            cutpoints = np.arange(1, num_classes) - 0.5 * num_classes
        cutpoints = as_float(cutpoints)
        if cutpoints.shape != (num_classes - 1,):
            raise GPClassError(f"Ordinal({num_classes}) needs {num_classes - 1} cutpoints (shape "
                               f"({num_classes - 1},)); got shape {cutpoints.shape}.")
        _check_concrete(cutpoints, noise)
        self.num_classes = num_classes
        self.first_cutpoint = cutpoints[0]
        self.increments = jnp.diff(cutpoints)
        self.noise = as_float(noise)

    @classmethod
    def from_parameters(cls, num_classes: int, first_cutpoint, increments, noise=1.0) -> "Ordinal":
        """The likelihood from its own parameters (b_1, the positive increments, sigma), without a cumulative sum."""
        lik = cls(num_classes, noise=noise)
        return eqx.tree_at(lambda t: (t.first_cutpoint, t.increments), lik,
                           (as_float(first_cutpoint), as_float(increments)))

    @property
    def cutpoints(self) -> Float[Array, " K-1"]:
        """b_1 < ... < b_{K-1}: the first cutpoint plus the cumulative increments."""
        first = jnp.reshape(self.first_cutpoint, (1,))
        return jnp.concatenate([first, first + jnp.cumsum(self.increments)])

    def parameter_checks(self, checks: Checks) -> None:
        checks.fail_if(~jnp.isfinite(self.first_cutpoint), "Ordinal: the first cutpoint is not finite.")
        checks.fail_if(~(jnp.isfinite(self.increments) & (self.increments > 0)),
                       "Ordinal: the cutpoints must be strictly increasing and finite (an increment is not > 0).")
        checks.fail_if(~(jnp.isfinite(self.noise) & (self.noise > 0)), "Ordinal: noise (sigma) must be > 0 and finite.")

    def check_labels(self, y, n: int, dtype, checks: Checks | None = None) -> Float[Array, " n"]:
        """Integer labels 0..K-1 (floats holding whole numbers accepted), as floats of ``dtype``, checked."""
        return check_ordinal_labels(y, n, self.num_classes, dtype, checks)

    def one_class(self, y) -> Bool[Array, ""]:
        """Fewer than two of the K classes occur among the checked labels (left-out cases, -1, are none)."""
        present = jnp.any(y[:, None] == jnp.arange(self.num_classes, dtype=y.dtype), axis=0)
        return jnp.sum(present) < 2

    def _bounds(self, y, center, scale):
        """(z_a, z_b, first, last): z_a = (b_{k-1} - center) / scale, z_b = (b_k - center) / scale for k = y,
        with a finite stand-in cutpoint where b_0 = -inf (first) or b_K = +inf (last), broadcast."""
        k = jnp.asarray(y).astype(jnp.int32)
        cuts = self.cutpoints
        top = self.num_classes - 2
        lower = jnp.take(cuts, jnp.clip(k - 1, 0, top))
        upper = jnp.take(cuts, jnp.clip(k, 0, top))
        return (lower - center) / scale, (upper - center) / scale, k <= 0, k >= self.num_classes - 1

    def _log_z(self, y, center, scale):
        """log(Phi(z_b) - Phi(z_a)): one Phi for the extreme classes, :func:`_log_interval` for the others."""
        za, zb, first, last = self._bounds(y, center, scale)
        # For an extreme class z_a = z_b (the stand-in); the interval branch gets a finite, non-empty interval
        # there, so that its (discarded) value and derivatives stay finite under jnp.where.
        middle = _log_interval(jnp.where(first | last, za - 1.0, za), zb)
        return jnp.where(first, _log_phi(zb), jnp.where(last, _log_phi(-za), middle))

    def log_prob(self, y, f):
        """log p(y|f) = log(Phi((b_y - f)/sigma) - Phi((b_{y-1} - f)/sigma)), elementwise (y, f broadcast)."""
        return self._log_z(y, f, self.noise)

    def tilted_moments(self, y, mean, var):
        """Closed form (Chu & Ghahramani's EP): with s = sqrt(sigma^2 + var) and z_j = (b_j - mean)/s,

            Z = Phi(z_b) - Phi(z_a),   r_j = N(z_j) / Z,
            mean^ = mean + var / s (r_a - r_b),
            var^ = var - var^2 / s^2 ((r_a - r_b)^2 + z_b r_b - z_a r_a).

        The extreme classes are the probit's tilted moments (GPML eq. 3.58) shifted to their cutpoint
        (``gaussian_cdf_tilted_moments``, y = -1 for class 0, +1 for class K-1), so K = 2 is ``Probit`` exactly.
        """
        scale_sq = self.noise**2 + var
        scale = jnp.sqrt(scale_sq)
        za, zb, first, last = self._bounds(y, mean, scale)
        # Extreme classes: Phi(y (f - b) / sigma) with b the one finite cutpoint.
        k = jnp.asarray(y).astype(jnp.int32)
        cut = jnp.take(self.cutpoints, jnp.clip(k, 0, self.num_classes - 2))  # b_1 for class 0, b_{K-1} for K-1
        sign = jnp.where(first, -1.0, 1.0).astype(jnp.result_type(mean))
        log_z_t, mean_t, var_t = gaussian_cdf_tilted_moments(sign, mean - cut, var, scale_sq)
        mean_t = mean_t + cut
        # Middle classes.
        za_m = jnp.where(first | last, za - 1.0, za)
        log_z_m = _log_interval(za_m, zb)
        ra = jnp.exp(-0.5 * za_m**2 - _LOG_SQRT_2PI - log_z_m)
        rb = jnp.exp(-0.5 * zb**2 - _LOG_SQRT_2PI - log_z_m)
        mean_m = mean + var / scale * (ra - rb)
        var_m = var - var**2 / scale_sq * ((ra - rb) ** 2 + zb * rb - za_m * ra)
        extreme = first | last
        return (jnp.where(extreme, log_z_t, log_z_m), jnp.where(extreme, mean_t, mean_m),
                jnp.where(extreme, var_t, var_m))

    def transitions(self, y):
        """Where log p(y|f) bends: within 10 sigma of each of class y's finite cutpoints (4 points per case,
        sorted; the extreme classes repeat theirs), the panel boundaries of :meth:`expected_log_prob`."""
        k = jnp.asarray(y).astype(jnp.int32)
        cuts, top = self.cutpoints, self.num_classes - 2
        lower = jnp.take(cuts, jnp.clip(k - 1, 0, top))
        upper = jnp.take(cuts, jnp.clip(k, 0, top))
        width = _F_TRANSITION * self.noise
        points = jnp.stack([lower - width, lower + width, upper - width, upper + width], axis=-1)
        return jnp.sort(points, axis=-1)

    def predictive_probability(self, mean, var) -> Float[Array, "m K"]:
        """p(y* = k) = int p(y = k | f) N(f|mean, var) df = Phi(z_k) - Phi(z_{k-1}), z_j = (b_j - mean) /
        sqrt(sigma^2 + var), for every class: shape (*mean.shape, K), rows summing to one (exact)."""
        mean, var = jnp.asarray(mean), jnp.asarray(var)
        scale = jnp.sqrt(self.noise**2 + var)
        classes = jnp.arange(self.num_classes, dtype=mean.dtype)
        return jnp.exp(self._log_z(classes, mean[..., None], scale[..., None]))

    def mean_rank(self, probabilities: Float[Array, "m K"]) -> Float[Array, " m"]:
        """The predictive mean rank E[y*] = sum_k k p(y* = k) from class probabilities (``gpc.predict``'s)."""
        probabilities = jnp.asarray(probabilities)
        return probabilities @ jnp.arange(self.num_classes, dtype=probabilities.dtype)


def _check_concrete(cutpoints, noise):
    """Concrete cutpoints strictly increasing and finite, a concrete sigma > 0 (traced ones: ``parameter_checks``)."""
    try:
        cuts, sigma = np.asarray(cutpoints), np.asarray(noise)
    except jax.errors.TracerArrayConversionError:
        return
    if not (np.all(np.isfinite(cuts)) and np.all(np.diff(cuts) > 0)):
        raise GPClassError(f"Ordinal: the cutpoints must be finite and strictly increasing; got {cuts}.")
    if not (np.all(np.isfinite(sigma)) and np.all(sigma > 0)):
        raise GPClassError(f"Ordinal: noise (sigma) must be > 0 and finite; got {sigma}.")
