"""The posterior of a preference model (``gpc.likelihoods.Preference``): utilities of items, p(a > b) for pairs.

A method solves for the m comparisons' utility differences g = D f (``Preference.prior_covariance``); its
posterior over g predicts any linear functional of the GP from the functional's covariances with g
(``_latent_given``).  The utility f(x*) of an item has Cov(f(x*), g_j) = k(x*, x_u) - k(x*, x_v) and prior
variance k(x*, x*); the difference f(a) - f(b) of a pair has the difference of two such rows and prior variance
k(a, a) + k(b, b) - 2 k(a, b).  So p(a > b) = Phi(mean / sqrt(2 sigma^2 + var)) (Chu & Ghahramani 2005, ICML,
eq. 12) for a Gaussian posterior, the sample average of it for MCMC and AIS.
"""

import jax
import jax.numpy as jnp

from .._errors import entry_point
from .._exceptions import GPClassError
from .._types import Array, Float, Int
from ..integrators import Exact
from ._posterior import AbstractPosterior


class PreferencePosterior(AbstractPosterior):
    """The posterior of a preference model: the method's posterior over the comparisons' utility differences
    (``differences``: a :class:`GaussianPosterior`, or a :class:`SamplePosterior` for MCMC and AIS) with the
    items X, the ``comparisons`` (m, 2) and the kernel.

    * ``posterior.latent(X_new)``: the mean and variance of the utility f at items (new or not), (p,) each;
    * ``posterior.preference(X_a, X_b)``: p(a_i > b_i) for pairs of items (:func:`predict_preference`);
    * ``posterior.pair_latent(X_a, X_b)``: the joint moments of (f(a_i), f(b_i)), means (p, 2) and
      covariances (p, 2, 2) (:func:`predict_pair_latent`).

    ``log_marginal``, ``info`` and ``warm_start`` are the method's (and for MCMC and AIS ``log_marginal_se`` and
    ``log_weights``); ``predict`` is refused (a preference
    model predicts comparisons, not labels of single items).

    Example:
        >>> items = np.linspace(-2.0, 2.0, 10)[:, None]  # ten items, one input each
        >>> pairs = np.stack([np.arange(1, 10), np.arange(9)], axis=1)  # (winner, loser): item i + 1 beat item i
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Preference(), items, pairs)
        >>> isinstance(post, gpc.PreferencePosterior)
        True
        >>> mean, var = post.latent(items)  # the items' utilities
        >>> bool(jnp.all(jnp.diff(mean) > 0))  # they rise along the input, as the comparisons say
        True
        >>> print(np.asarray(post.preference(items[[9, 0]], items[[0, 9]])).round(2))  # p(9 > 0), p(0 > 9)
        [0.7 0.3]
    """

    differences: AbstractPosterior
    comparisons: Int[Array, "m 2"]
    kernel: object
    likelihood: object
    X: Float[Array, "n d"]

    @property
    def log_marginal(self):
        return self.differences.log_marginal

    @property
    def info(self):
        return self.differences.info

    @property
    def log_marginal_se(self):
        """AIS's standard error of ``log_marginal`` (MCMC's: NaN; the Gaussian methods have none)."""
        return self.differences.log_marginal_se

    @property
    def log_weights(self):
        """AIS's log importance weights of its runs (MCMC's: zeros; the Gaussian methods have none)."""
        return self.differences.log_weights

    @property
    def warm_start(self):
        return self.differences.warm_start

    def preference(self, X_first, X_second):
        """p(first_i > second_i): :func:`predict_preference` (checked, compiled)."""
        return predict_preference(self, X_first, X_second)

    def pair_latent(self, X_first, X_second):
        """The joint moments of the pairs' utilities: :func:`predict_pair_latent` (checked, compiled)."""
        return predict_pair_latent(self, X_first, X_second)

    def _cross(self, X_test) -> Float[Array, "p m"]:
        """Cov(f(x*), g_j) = k(x*, x_u) - k(x*, x_v) for every test item and comparison j = (u, v)."""
        K = self.kernel.gram(X_test, self.X)
        return K[:, self.comparisons[:, 0]] - K[:, self.comparisons[:, 1]]

    def _latent(self, X_test):
        """The utilities' moments at ``X_test`` (``differences._latent_given``)."""
        return self.differences._latent_given(self._cross(X_test), self.kernel.diag(X_test))

    def _probability(self, X_test, integrator, key):
        raise GPClassError("a preference posterior predicts comparisons: posterior.preference(X_a, X_b) gives "
                           "p(a > b), posterior.latent(X) the utilities.")

    def _difference(self, X_first, X_second):
        """Cov(f(a) - f(b), g) (p, m) and the prior variance of f(a) - f(b), k(a, a) + k(b, b) - 2 k(a, b)."""
        cross = self._cross(X_first) - self._cross(X_second)
        paired = jax.vmap(lambda a, b: self.kernel.gram(a[None], b[None])[0, 0])(X_first, X_second)
        return cross, self.kernel.diag(X_first) + self.kernel.diag(X_second) - 2.0 * paired


def _check_pairs(posterior, X_first, X_second):
    from .._predict import _check_test_inputs

    if not isinstance(posterior, PreferencePosterior):
        raise GPClassError(f"a posterior of gpc.likelihoods.Preference is needed; got {type(posterior).__name__}.")
    X_first = _check_test_inputs(posterior, X_first)
    X_second = _check_test_inputs(posterior, X_second)
    if X_first.shape != X_second.shape:
        raise GPClassError(f"the pairs' first and second items must have the same shape; got {X_first.shape} and "
                           f"{X_second.shape}.")
    return X_first, X_second


@entry_point
def predict_preference(posterior: PreferencePosterior, X_first, X_second) -> Float[Array, " p"]:
    """p(a_i > b_i) for pairs of items a_i = ``X_first[i]``, b_i = ``X_second[i]`` (new items or training ones).

    Gaussian posteriors (Laplace, EP, KL): Phi(mean / sqrt(2 sigma^2 + var)) with the moments of f(a) - f(b)
    (Chu & Ghahramani 2005, ICML, eq. 12), exact for the Gaussian; MCMC and AIS: the weighted average over
    samples of the same given each sample.  Shape (p,).  Also ``posterior.preference(X_first, X_second)``.

    Example:
        >>> items = np.linspace(-2.0, 2.0, 10)[:, None]  # ten items, one input each
        >>> pairs = np.stack([np.arange(1, 10), np.arange(9)], axis=1)  # (winner, loser): item i + 1 beat item i
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Preference(), items, pairs)
        >>> new = np.array([[-1.5], [1.5]])  # two new items
        >>> p = gpc.predict_preference(post, new[[1, 0]], new[[0, 1]])  # p(1.5 > -1.5), p(-1.5 > 1.5)
        >>> print(np.asarray(p).round(2))
        [0.68 0.32]
    """
    X_first, X_second = _check_pairs(posterior, X_first, X_second)
    cross, prior_var = posterior._difference(X_first, X_second)
    return posterior.differences._probability_given(cross, prior_var, Exact(), None)


@entry_point
def predict_pair_latent(posterior: PreferencePosterior, X_first, X_second):
    """The joint posterior moments of the utilities (f(a_i), f(b_i)) of pairs of items: means (p, 2) and
    covariances (p, 2, 2).

    The covariance of a pair comes from the variances of f(a), f(b) and f(a) - f(b):
    Cov = (V[a] + V[b] - V[a - b]) / 2 (each from the method's posterior, as :func:`gpclass.predict_latent`),
    accurate to rounding of the larger variance.  For MCMC and AIS these are the moments of the sample
    mixture.  Also ``posterior.pair_latent(X_first, X_second)``.

    Example:
        >>> items = np.linspace(-2.0, 2.0, 10)[:, None]  # ten items, one input each
        >>> pairs = np.stack([np.arange(1, 10), np.arange(9)], axis=1)  # (winner, loser): item i + 1 beat item i
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Preference(), items, pairs)
        >>> mean, cov = gpc.predict_pair_latent(post, items[[9, 8]], items[[0, 3]])  # pairs (9, 0) and (8, 3)
        >>> mean.shape, cov.shape  # the moments of (f(a), f(b)) for each pair
        ((2, 2), (2, 2, 2))
        >>> bool(jnp.all(mean[:, 0] > mean[:, 1]))  # the first items' utilities are higher
        True
    """
    X_first, X_second = _check_pairs(posterior, X_first, X_second)
    mean_a, var_a = posterior._latent(X_first)
    mean_b, var_b = posterior._latent(X_second)
    _, var_d = posterior.differences._latent_given(*posterior._difference(X_first, X_second))
    cov_ab = 0.5 * (var_a + var_b - var_d)
    covariance = jnp.stack([jnp.stack([var_a, cov_ab], -1), jnp.stack([cov_ab, var_b], -1)], -2)
    return jnp.stack([mean_a, mean_b], -1), covariance
