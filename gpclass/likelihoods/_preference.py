"""The preference likelihood for pairwise comparisons of items (Chu & Ghahramani 2005, ICML)."""

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import ndtr

from .._errors import AT
from .._exceptions import GPClassError
from .._types import Array, Float, Int
from .._validation import Checks, as_float, concrete_or_none, parameter_at
from ._base import _F_TRANSITION, AbstractLikelihood
from ._probit import gaussian_cdf_tilted_moments, log_cdf_and_mills_ratio

_SQRT2 = float(np.sqrt(2.0))


class Preference(AbstractLikelihood):
    """p(u > v | f) = Phi((f_u - f_v) / (sqrt 2 sigma)): item u preferred to item v.

    The preference model of Chu & Ghahramani (2005, "Preference learning with Gaussian processes", ICML,
    eq. 2): a latent utility f over the items, observed through noisy comparisons (each item's utility
    blurred by N(0, sigma^2)).  The data are the items' inputs X (n, d) and the comparisons, an (m, 2) integer
    array of item indices (winner, loser) into X.  Items never compared, repeated and contradictory comparisons
    are all valid; an index outside 0..n-1 or an item compared with itself is an error.  Two items with
    identical inputs compared with each other are valid too: such a comparison says nothing (its difference has
    prior variance 0 and p = 1/2), and it adds log 1/2 to log q under every method.

    How inference sees it.  The likelihood depends on f only through the m differences g = D f,
    g_j = f_{u_j} - f_{v_j}, whose prior is N(0, D K D^T); on g it factorises, each comparison a probit site
    Phi(g_j / (sqrt 2 sigma)) with label +1.  So every method that handles the probit runs on it unchanged
    (Laplace, EP, KL, MCMC, AIS), and each computes the same approximation as it would over f: the Laplace
    mode, EP's fixed point and the variational optimum over f are those over g mapped back (the sites touch
    f only through D f, and |I + K D^T W D| = |I + D K D^T W| by Sylvester's identity).  The prior of the
    comparisons (:meth:`prior_covariance`) costs O(m^3) in the number of comparisons.  Sparse priors and
    SVGP are not supported (the comparisons' prior D K~ D^T is not of FITC's form).

    Predictions come from the :class:`gpclass.PreferencePosterior` that ``gpc.infer`` returns: the utility
    of any items (``posterior.latent(X_new)``), p(a > b) for any pairs (``posterior.preference(X_a, X_b)``)
    and the joint moments of a pair's utilities (``posterior.pair_latent(X_a, X_b)``).

    Only the ratio of the kernel's amplitude to sigma is identified (f -> c f, sigma -> c sigma leaves the
    model unchanged): with a kernel that has a signal variance, ``gpc.fit`` should hold one of them fixed
    (``trainable=``); a flat direction does no harm to L-BFGS, but the fitted pair is arbitrary.

    Example::

        >>> lik = gpc.likelihoods.Preference()  # sigma = 1
        >>> print(np.asarray(lik.predictive_probability(jnp.array([0.0, 2.0]), jnp.array([0.0, 0.0]))).round(3))
        [0.5   0.921]
        >>> items = jnp.arange(4.0)[:, None]                     # four items, one input each
        >>> pairs = jnp.array([[1, 0], [2, 1], [3, 2], [3, 0]])  # (winner, loser): item 1 beat item 0, ...
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, lik, items, pairs)
        >>> mean, var = post.latent(items)  # the items' utilities
        >>> bool(jnp.all(jnp.diff(mean) > 0))  # they rise from item 0 to item 3, as the comparisons say
        True
        >>> round(float(post.preference(items[3:], items[:1])[0]), 2)  # p(item 3 > item 0)
        0.76
    """

    noise: Float[Array, ""]

    log_concave = True
    closed_form_tilted = True
    labels_per_input = False  # the labels are comparisons of the rows of X, not one per row

    def __init__(self, noise=1.0):
        noise = as_float(noise)
        concrete = concrete_or_none(noise)
        if concrete is not None and not (concrete.shape == () and np.isfinite(concrete) and concrete > 0):
            raise GPClassError(f"Preference: noise (sigma) must be a number > 0 and finite; got {concrete!s}: pass a "
                               "positive number, e.g. gpc.likelihoods.Preference(noise=1.0).")
        self.noise = jnp.asarray(noise, noise.dtype)  # not weakly typed: one jit cache entry, however given

    @property
    def scale(self) -> Float[Array, ""]:
        """sqrt 2 sigma: the probit's scale on a difference of two utilities."""
        return _SQRT2 * self.noise

    def parameter_checks(self, checks: Checks) -> None:
        checks.fail_if(~(jnp.isfinite(self.noise) & (self.noise > 0)),
                       f"Preference: noise (sigma) must be > 0 and finite{AT}; pass a positive number, e.g. "
                       "gpc.likelihoods.Preference(noise=1.0).", at=parameter_at("noise", self.noise))

    def check_labels(self, y, n: int, dtype, checks: Checks | None = None) -> Int[Array, "m 2"]:
        """The comparisons: an (m, 2) integer array of item indices (winner, loser), each in 0..n-1, the two
        different, m >= 1; returned as int32 (the values checked by ``checks``: at run time, inside jit too)."""
        return check_comparisons(y, n, checks)

    def host_labels(self, y, dtype):
        raise GPClassError("Preference: comparisons are not supported by gpc.fit_svgp (SVGP); use gpc.infer or "
                           "gpc.fit with gpc.Laplace(), gpc.EP(), gpc.KL(), gpc.MCMC() or gpc.AIS().")

    def one_class(self, y):
        """Never: every comparison is an observation (all wins are of the winner by construction)."""
        return jnp.asarray(False)

    def prior_covariance(self, kernel, X, y):
        """The prior covariance of the comparisons' latent differences g = D f: D K D^T (m, m), from the
        kernel's Gram matrix K of the items (``differences_covariance``)."""
        from .._covariance.dense import DifferencesCovariance
        from .._sparse import Sparse

        if isinstance(kernel, Sparse):
            raise GPClassError("Preference with a sparse prior (gpc.Sparse): not supported; the prior of the "
                               "comparisons D K~ D^T is not of FITC's form. Use the kernel itself.")
        K = kernel.gram(X)
        if K.ndim != 2:
            raise GPClassError(f"Preference needs one latent function (a kernel with an (n, n) Gram matrix); "
                               f"{type(kernel).__name__} gives one per class.")
        return DifferencesCovariance(differences_covariance(K, y))

    def site_labels(self, y, dtype) -> Float[Array, " m"]:
        """+1 for every comparison: its site is Phi(g_j / (sqrt 2 sigma)), the winner's utility minus the loser's."""
        return jnp.ones((y.shape[0],), dtype)

    def condition(self, solution, kernel, X, y):
        """The :class:`gpclass.PreferencePosterior` of ``solution``, the method's posterior over the differences."""
        from .._inference._preference import PreferencePosterior

        return PreferencePosterior(differences=solution.conditioned(None, self, None), comparisons=y,
                                   kernel=kernel, likelihood=self, X=X)

    def log_prob(self, y, f):
        """log Phi(y g / (sqrt 2 sigma)) for a difference g (y = +1 at every comparison)."""
        return log_cdf_and_mills_ratio(y * f / self.scale)[0]

    def derivatives(self, y, f):
        """The probit's (GPML Table 3.1) at z = y g / s, s = sqrt 2 sigma: d log p = y r / s, W = r (z + r) / s^2."""
        s = self.scale
        z = y * f / s
        log_cdf, r = log_cdf_and_mills_ratio(z)
        return log_cdf, y * r / s, r * (z + r) / s**2

    def tilted_moments(self, y, mean, var):
        """GPML eq. 3.58 for Phi(y g / s): z = y mean / sqrt(s^2 + var) (``gaussian_cdf_tilted_moments``)."""
        return gaussian_cdf_tilted_moments(y, mean, var, self.scale**2 + var)

    def transitions(self, y):
        """Where log Phi(g / s) bends: within 10 s of 0."""
        edges = _F_TRANSITION * self.scale * jnp.asarray([-1.0, 1.0], self.noise.dtype)
        return jnp.broadcast_to(edges, (*jnp.shape(y), 2))

    def predictive_probability(self, mean, var):
        """p(a > b) = int Phi(g / s) N(g|mean, var) dg = Phi(mean / sqrt(s^2 + var)) for the difference
        g = f_a - f_b with moments (mean, var) (GPML eq. 3.82; Chu & Ghahramani eq. 12)."""
        return ndtr(mean / jnp.sqrt(self.scale**2 + var))


def check_comparisons(y, n: int, checks: Checks | None) -> Int[Array, "m 2"]:
    """(m, 2) integer item indices, m >= 1: shape and dtype now, values (in 0..n-1, winner != loser) by ``checks``
    (and now, where they are concrete)."""
    y = jnp.asarray(y)
    if y.ndim != 2 or y.shape[1] != 2 or y.shape[0] < 1:
        raise GPClassError(f"Preference: the comparisons must be an (m, 2) array of item indices (winner, loser), "
                           f"m >= 1; got shape {y.shape}.")
    if y.dtype == jnp.bool_ or not jnp.issubdtype(y.dtype, jnp.integer):
        raise GPClassError(f"Preference: the comparisons must be integer item indices; got dtype {y.dtype}.")
    out_of_range, itself = (y < 0) | (y >= n), y[:, 0] == y[:, 1]
    range_message = f"Preference: a comparison names an item index outside 0..{n - 1} (X has {n} rows)."
    self_message = "Preference: a comparison compares an item with itself (winner == loser)."
    concrete = concrete_or_none(y)
    if concrete is not None:
        bad = np.flatnonzero(np.any((concrete < 0) | (concrete >= n), axis=1))
        if bad.size:
            raise GPClassError(f"{range_message[:-1]}: comparison {bad[0]} is {concrete[bad[0]].tolist()}.")
        same = np.flatnonzero(concrete[:, 0] == concrete[:, 1])
        if same.size:
            raise GPClassError(f"{self_message[:-1]}: comparison {same[0]} is {concrete[same[0]].tolist()}.")
    if checks is not None:
        checks.fail_if(out_of_range, range_message)
        checks.fail_if(itself, self_message)
    return y.astype(jnp.int32)


def differences_covariance(K: Float[Array, "n n"], comparisons: Int[Array, "m 2"]) -> Float[Array, "m m"]:
    """D K D^T, the prior covariance of g_j = f_{u_j} - f_{v_j}: (K_uu' - K_vu') - (K_uv' - K_vv') per pair of
    comparisons, made exactly symmetric.

    The diagonal, (K_uu - K_vu) - (K_uv - K_vv), is >= 0 in floating point for a stationary kernel (both
    brackets round to numbers of opposite signs) and exactly 0 for two identical items.
    """
    u, v = comparisons[:, 0], comparisons[:, 1]
    rows = K[u] - K[v]  # (m, n): D K
    G = rows[:, u] - rows[:, v]
    return 0.5 * (G + G.T)
