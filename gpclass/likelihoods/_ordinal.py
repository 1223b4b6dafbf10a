"""The ordinal likelihood for ordered labels 0..K-1: cumulative probit (Chu & Ghahramani 2005) or logit."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._errors import AT
from .._exceptions import GPClassError
from .._types import Array, Bool, Float
from .._validation import Checks, as_float, check_ordinal_labels, concrete_or_none, host_class_indices, parameter_at
from ._base import _F_TRANSITION, AbstractLikelihood
from ._logistic import Logistic
from ._probit import log_cdf_and_mills_ratio
from ._tilted_quadrature import tilted_by_quadrature


class Ordinal(AbstractLikelihood):
    """p(y = k | f) = Phi((b_k - f) / sigma) - Phi((b_{k-1} - f) / sigma),  k = 0..K-1,  b_0 = -inf, b_K = +inf.

    The ordinal regression model of Chu & Ghahramani (2005, "Gaussian processes for ordinal regression",
    JMLR 6: an ordinal label is the bin, between two of K - 1 ordered cutpoints b_1 < ... < b_{K-1}, into which
    the latent function plus Gaussian noise N(0, sigma^2) falls); a cumulative probit model.
    One latent function per case; log p(y|f) is concave in f (W > 0), so every method applies.  With K = 2,
    cutpoint 0 and sigma = 1 it is ``Probit()`` with class 0 as label -1 and class 1 as +1.

    Labels are integers 0..K-1 (ints, or floats holding whole numbers), checked by :meth:`check_labels`.

    ``link="logit"`` gives the cumulative logit model (McCullagh's proportional odds): Phi replaced by the
    logistic sigma, p(y = k | f) = sigma((b_k - f) / sigma) - sigma((b_{k-1} - f) / sigma), noise with the
    standard logistic distribution scaled by sigma (standard deviation pi sigma / sqrt 3).  log p is concave in f
    too; EP's tilted moments and the predictive probabilities are then by quadrature (:meth:`tilted_moments`,
    :meth:`predictive_probability`).  With K = 2, cutpoint 0 and sigma = 1 it is ``Logistic()``.

    Parameters (fitted by ``gpc.fit`` with the kernel): ``first_cutpoint`` b_1 (a real number, fitted on its own
    scale: declared ``unconstrained``), ``increments`` b_{j+1} - b_j > 0 (K - 2 of them, fitted in log space),
    so the cutpoints are ordered by construction, and ``noise`` sigma > 0 (log space).  The constructor takes
    the cutpoints themselves (strictly increasing; default: spacing 1 centred at 0,
    b_j = j - K/2, so -0.5, 0.5 for K = 3); :attr:`cutpoints` returns them.

    The model is unchanged when f, the cutpoints and sigma are scaled together (f -> c f, b -> c b,
    sigma -> c sigma): with a kernel that has a signal variance, ML-II is flat along that direction.  Hold
    one of them fixed (Chu & Ghahramani's kernel has no signal variance), e.g. sigma, with
    ``trainable = eqx.tree_at(lambda t: t[1].noise, jax.tree.map(lambda _: True, (kernel, lik)), False)``
    and ``gpc.fit(gpc.EP(), kernel, lik, X, y, trainable=trainable)``.

    Numerics: every class probability comes from ``log Phi`` of the probit helpers, the middle classes as
    log(Phi(b) - Phi(a)) without cancellation (:meth:`_interval`), so log p keeps its relative accuracy
    far in the tails (|f| = 40: measured against mpmath in tests/test_ordinal.py).  EP's tilted moments are
    closed form (:meth:`tilted_moments`); predictions are exact (:meth:`predictive_probability`).

    Example::

        >>> lik = gpc.likelihoods.Ordinal(3)  # cutpoints -0.5, 0.5 and sigma = 1
        >>> print(lik.cutpoints)
        [-0.5  0.5]
        >>> p = lik.predictive_probability(jnp.array([0.0, 2.0]), jnp.array([0.0, 0.0]))  # at f = 0 and f = 2
        >>> print(np.asarray(p).round(3))
        [[0.309 0.383 0.309]
         [0.006 0.061 0.933]]
        >>> X, t = gpc.datasets.load("pyrimidines"); X, y = X[:40, :4], gpc.datasets.equal_length_bins(t[:40], 3)
        >>> post = gpc.infer(gpc.EP(), gpc.kernels.SquaredExponential(), lik, X, y)  # labels 0, 1, 2
        >>> p = gpc.predict(post, X[:5])   # (5, 3) class probabilities
        >>> lik.mean_rank(p).shape         # E[y*]
        (5,)
    """

    num_classes: int = eqx.field(static=True)
    link: str = eqx.field(static=True)
    first_cutpoint: Float[Array, ""]
    increments: Float[Array, " K-2"]
    noise: Float[Array, ""]

    log_concave = True
    binary = False
    left_out_label = -1.0  # gpc.infer's mask: class 0 is a label here, so left-out cases are marked -1
    unconstrained = ("first_cutpoint",)  # gpc.fit fits b_1 on its own scale, the increments and sigma in log space

    def __init__(self, num_classes: int, cutpoints=None, noise=1.0, link: str = "probit"):
        if not isinstance(num_classes, (int, np.integer)) or isinstance(num_classes, bool) or num_classes < 2:
            raise GPClassError(f"Ordinal needs an integer num_classes >= 2; got {num_classes!r}.")
        if link not in ("probit", "logit"):
            raise GPClassError(f"Ordinal: link must be 'probit' or 'logit'; got {link!r}.")
        self.link = link
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
        noise = as_float(noise)
        self.noise = jnp.asarray(noise, noise.dtype)  # not weakly typed: one jit cache entry, however given

    @classmethod
    def from_parameters(cls, num_classes: int, first_cutpoint, increments, noise=1.0, link="probit") -> "Ordinal":
        """The likelihood from its own parameters (b_1, the positive increments, sigma), without a cumulative sum."""
        lik = cls(num_classes, noise=noise, link=link)
        return eqx.tree_at(lambda t: (t.first_cutpoint, t.increments), lik,
                           (as_float(first_cutpoint), as_float(increments)))

    @property
    def cutpoints(self) -> Float[Array, " K-1"]:
        """b_1 < ... < b_{K-1}: the first cutpoint plus the cumulative increments."""
        first = jnp.reshape(self.first_cutpoint, (1,))
        return jnp.concatenate([first, first + jnp.cumsum(self.increments)])

    def parameter_checks(self, checks: Checks) -> None:
        remedy = f"pass finite, strictly increasing cutpoints, e.g. {_example(self.num_classes)} (the default)"
        checks.fail_if(~jnp.isfinite(self.first_cutpoint), f"Ordinal: the first cutpoint must be finite{AT}; {remedy}.",
                       at=parameter_at("first_cutpoint", self.first_cutpoint))
        checks.fail_if(~(jnp.isfinite(self.increments) & (self.increments > 0)),
                       f"Ordinal: the cutpoints must be strictly increasing and finite{AT}; {remedy}.",
                       at=("the first bad gap: cutpoints[j + 1] - cutpoints[j] = {value} at j = {index}",
                           self.increments))
        checks.fail_if(~(jnp.isfinite(self.noise) & (self.noise > 0)),
                       f"Ordinal: noise (sigma) must be > 0 and finite{AT}; pass a positive number, e.g. "
                       f"gpc.likelihoods.Ordinal({self.num_classes}, noise=1.0).", at=parameter_at("noise", self.noise))

    def check_labels(self, y, n: int, dtype, checks: Checks | None = None) -> Float[Array, " n"]:
        """Integer labels 0..K-1 (floats holding whole numbers accepted), as floats of ``dtype``, checked."""
        return check_ordinal_labels(y, n, self.num_classes, dtype, checks)

    def host_labels(self, y: np.ndarray, dtype) -> np.ndarray:
        """:meth:`check_labels` in NumPy, on the host (``gpc.fit_svgp``)."""
        return host_class_indices(y, self.num_classes, "ordinal", "Ordinal").astype(dtype)

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

    def _interval(self, y, center, scale):
        """log Z = log(Phi(z_b) - Phi(z_a)) for class y, and what its derivatives in ``center`` need.

        The interval is written as [lo, hi] with Phi(hi) - Phi(lo) = Z and hi in the smaller tail: by
        Phi(b) - Phi(a) = Phi(-a) - Phi(-b), (lo, hi) = (z_a, z_b) if z_a + z_b <= 0, else (-z_b, -z_a); class 0
        is Phi(z_b) (hi = z_b), class K-1 is Phi(-z_a) (hi = -z_a).  Then

            log Z = log Phi(hi) + log(1 - q),   q = Phi(lo) / Phi(hi) = exp(log Phi(lo) - log Phi(hi)) < 1,

        (q = 0 for the extreme classes, whose lo is a finite stand-in), with both log Phi and the ratios
        r = N/Phi from one call of the probit helper, accurate deep in either tail: no difference of two
        probabilities near 1 is ever formed.  Returns (log Z, hi, lo, c, A, B) with c = d hi / d center * scale
        (+-1; the same for lo) and A = N(hi) / Z = r_hi / (1 - q), B = N(lo) / Z = r_lo q / (1 - q).
        """
        za, zb, first, last = self._bounds(y, center, scale)
        extreme = first | last
        flip = last | (~first & (za + zb > 0))
        hi = jnp.where(flip, -za, zb)
        lo = jnp.where(extreme, hi - 1.0, jnp.where(flip, -zb, za))
        log_cdf, ratio = log_cdf_and_mills_ratio(jnp.stack([lo, hi]))
        log_q = log_cdf[0] - log_cdf[1]
        one_minus_q = jnp.where(extreme, 1.0, -jnp.expm1(log_q))
        q = jnp.where(extreme, 0.0, jnp.exp(log_q))
        log_z = log_cdf[1] + jnp.where(extreme, 0.0, jnp.log(one_minus_q))
        c = jnp.where(flip, 1.0, -1.0).astype(log_z.dtype)
        return log_z, hi, lo, c, ratio[1] / one_minus_q, ratio[0] * q / one_minus_q

    def _logit_interval(self, y, f):
        """The cumulative logit's log p(y|f) = log(sigma(z_b) - sigma(z_a)), its slope and W in f, elementwise.

        sigma(b) - sigma(a) = sigma(b) sigma(-a) (1 - e^(a - b)) (both sides are (e^b - e^a) / ((1 + e^a)(1 + e^b))),
        so log p = log sigma(z_b) + log sigma(-z_a) + log(-expm1(z_a - z_b)): no difference of probabilities,
        and the last term does not depend on f (z_a - z_b = (b_{k-1} - b_k) / sigma).  With dz/df = -1/sigma,

            d log p / df = (sigma(z_a) - sigma(-z_b)) / sigma,
            W = (sigma(z_a) sigma(-z_a) + sigma(z_b) sigma(-z_b)) / sigma^2 > 0,

        the terms of b_0 = -inf (class 0) and b_K = +inf (class K-1) dropped.
        """
        za, zb, first, last = self._bounds(y, f, self.noise)
        log_p = (jnp.where(last, 0.0, jax.nn.log_sigmoid(zb)) + jnp.where(first, 0.0, jax.nn.log_sigmoid(-za))
                 + jnp.where(first | last, 0.0, jnp.log(-jnp.expm1(jnp.where(first | last, -1.0, za - zb)))))
        lower, upper = jnp.where(first, 0.0, jax.nn.sigmoid(za)), jnp.where(last, 0.0, jax.nn.sigmoid(-zb))
        curvature = (jnp.where(first, 0.0, jax.nn.sigmoid(za) * jax.nn.sigmoid(-za))
                     + jnp.where(last, 0.0, jax.nn.sigmoid(zb) * jax.nn.sigmoid(-zb)))
        return log_p, (lower - upper) / self.noise, curvature / self.noise**2

    def log_prob(self, y, f):
        """log p(y|f) = log(Phi((b_y - f)/sigma) - Phi((b_{y-1} - f)/sigma)) (logit: sigma for Phi), elementwise
        (y, f broadcast)."""
        if self.link == "logit":
            return self._logit_interval(y, f)[0]
        return self._interval(y, f, self.noise)[0]

    def derivatives(self, y, f):
        """In closed form: with hi, lo, c, A, B of :meth:`_interval` (at center f, scale sigma),

            d log p / df = c (A - B) / sigma,   W = (hi A - lo B + (A - B)^2) / sigma^2
                                                  = (A (hi + A) - B (lo + 2 A - B)) / sigma^2,

        from g = Phi(hi) - Phi(lo) with g' = N(hi) - N(lo), g'' = lo N(lo) - hi N(hi).  For class 0 and class
        K-1 (B = 0) these are the probit's y r and r (z + r) (GPML Table 3.1), operation for operation.
        """
        if self.link == "logit":
            return self._logit_interval(y, f)
        log_p, hi, lo, c, A, B = self._interval(y, f, self.noise)
        return log_p, c * (A - B) / self.noise, (A * (hi + A) - B * (lo + 2.0 * A - B)) / self.noise**2

    def tilted_moments(self, y, mean, var):
        """Closed form (as in Chu & Ghahramani's EP): Z = p(y | mean) with scale s = sqrt(sigma^2 + var)
        (int Phi((b - f)/sigma) N(f|mean, var) df = Phi((b - mean)/s), GPML eq. 3.82), and with hi, lo, c, A, B
        of :meth:`_interval` at that scale,

            mean^ = mean + var d log Z / d mean = mean + c var (A - B) / s,
            var^ = var + var^2 d^2 log Z / d mean^2 = var - var^2 (A (hi + A) - B (lo + 2 A - B)) / s^2.

        For the extreme classes these are GPML eq. 3.58 (the probit's), operation for operation.

        The logit link has no closed form: Gauss-Legendre panels that follow the tilted mode
        (:func:`gpclass.likelihoods._tilted_quadrature.tilted_by_quadrature`).
        """
        if self.link == "logit":
            return tilted_by_quadrature(lambda f: self.log_prob(y[:, None], f), lambda f: self.derivatives(y, f),
                                        self.transitions(y), mean, var)
        scale_sq = self.noise**2 + var
        scale = jnp.sqrt(scale_sq)
        log_z, hi, lo, c, A, B = self._interval(y, mean, scale)
        tilted_mean = mean + c * var * (A - B) / scale
        tilted_var = var - (var**2 * A * (hi + A) - var**2 * B * (lo + 2.0 * A - B)) / scale_sq
        return log_z, tilted_mean, tilted_var

    def transitions(self, y):
        """Where log p(y|f) bends, sorted per case (6 points): within 10 sigma of each of class y's finite
        cutpoints, and 100 sigma out on the outer sides, where log p grows like -((f - b)/sigma)^2 / 2 (the extreme
        classes repeat their one cutpoint).  The panel boundaries of :meth:`expected_log_prob`: with a latent
        standard deviation much larger than sigma, one panel beyond b + 10 sigma would hold the bend of log p
        near its end (3e-8 relative error at sigma = 0.3, variance 1e4; 1e-13 with the second split)."""
        k = jnp.asarray(y).astype(jnp.int32)
        cuts, top = self.cutpoints, self.num_classes - 2
        lower = jnp.take(cuts, jnp.clip(k - 1, 0, top))
        upper = jnp.take(cuts, jnp.clip(k, 0, top))
        near, far = _F_TRANSITION * self.noise, 10.0 * _F_TRANSITION * self.noise
        points = jnp.stack([lower - far, lower - near, lower + near, upper - near, upper + near, upper + far], -1)
        return jnp.sort(points, axis=-1)

    def predictive_probability(self, mean, var) -> Float[Array, "m K"]:
        """p(y* = k) = int p(y = k | f) N(f|mean, var) df = Phi(z_k) - Phi(z_{k-1}), z_j = (b_j - mean) /
        sqrt(sigma^2 + var), for every class: shape (*mean.shape, K), rows summing to one (exact).

        Logit: p(y* <= k) = E[sigma((b_k - f) / sigma)], the logistic average of ``Logistic()`` at mean
        (b_k - mean) / sigma and variance var / sigma^2 (to ~1e-12), and p(y* = k) their differences."""
        mean, var = jnp.asarray(mean), jnp.asarray(var)
        if self.link == "logit":
            z = (self.cutpoints - mean[..., None]) / self.noise
            below = Logistic().predictive_probability(z, jnp.broadcast_to(var[..., None] / self.noise**2, z.shape))
            ends = jnp.zeros_like(below[..., :1]), jnp.ones_like(below[..., :1])
            return jnp.diff(jnp.concatenate([ends[0], below, ends[1]], axis=-1), axis=-1)
        scale = jnp.sqrt(self.noise**2 + var)
        classes = jnp.arange(self.num_classes, dtype=mean.dtype)
        return jnp.exp(self._interval(classes, mean[..., None], scale[..., None])[0])

    def mean_rank(self, probabilities: Float[Array, "m K"]) -> Float[Array, " m"]:
        """The predictive mean rank E[y*] = sum_k k p(y* = k) from class probabilities (``gpc.predict``'s)."""
        probabilities = jnp.asarray(probabilities)
        return probabilities @ jnp.arange(self.num_classes, dtype=probabilities.dtype)


def _check_concrete(cutpoints, noise):
    """Concrete cutpoints strictly increasing and finite, a concrete sigma > 0 (traced ones: ``parameter_checks``)."""
    cuts, sigma = concrete_or_none(cutpoints), concrete_or_none(noise)
    if cuts is None or sigma is None:
        return
    if not (np.all(np.isfinite(cuts)) and np.all(np.diff(cuts) > 0)):
        raise GPClassError(f"Ordinal: the cutpoints must be finite and strictly increasing; got {cuts!s}: pass them in "
                           f"increasing order, e.g. {_example(len(cuts) + 1)} (the default).")
    if not (np.all(np.isfinite(sigma)) and np.all(sigma > 0)):
        raise GPClassError(f"Ordinal: noise (sigma) must be > 0 and finite; got {sigma!s}: pass a positive number, "
                           f"e.g. gpc.likelihoods.Ordinal({len(cuts) + 1}, noise=1.0).")


def _example(num_classes: int) -> str:
    """The constructor call with the default cutpoints, spacing 1 centred at 0 (the class docstring)."""
    cutpoints = [float(b) for b in np.arange(1, num_classes) - 0.5 * num_classes]
    return f"gpc.likelihoods.Ordinal({num_classes}, cutpoints={cutpoints})"
