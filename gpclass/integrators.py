"""How a prediction averages the likelihood over the latent predictive Gaussian: strategy objects.

``gpc.predict(posterior, X_test, integrator=...)``; ``None`` (the default) takes the likelihood's own
(``likelihood.integrator``): :class:`Exact` for a binary likelihood (and for ``Ordinal``, whose ``binary`` method
returns the (m, K) class probabilities: one latent function), :class:`MonteCarlo` for the softmax::

    p = gpc.predict(post, X_test, integrator=gpc.integrators.MacKay())
    p = gpc.predict(softmax_post, X_test, integrator=gpc.integrators.MeanField())
    p = gpc.predict(softmax_post, X_test, integrator=gpc.integrators.MonteCarlo(1000), key=key)

Each class's docstring has an example that runs.
"""

import equinox as eqx
import jax.numpy as _jnp
from jax import lax as _lax

from ._exceptions import GPClassError as _GPClassError
from ._types import Array, Float
from ._validation import require_setting as _require_setting

__all__ = ["AbstractIntegrator", "Exact", "MacKay", "MeanField", "MonteCarlo"]


class AbstractIntegrator(eqx.Module):
    """An average of the likelihood over N(mean, cov): ``binary`` for one latent function, ``classes`` for C.

    Example: an integrator of your own overrides ``binary`` (and ``classes`` for the softmax); this one
    evaluates the likelihood at the latent mean, ignoring the variance (a "plug-in" prediction)::

        >>> class PlugIn(gpc.integrators.AbstractIntegrator):
        ...     def binary(self, likelihood, mean, var):
        ...         return likelihood.predictive_probability(mean, jnp.zeros_like(var))
        >>> mean, var = jnp.array([0.0, 1.0]), jnp.array([3.0, 3.0])
        >>> print(np.asarray(PlugIn().binary(gpc.likelihoods.Probit(), mean, var)).round(3))  # Phi(1): overconfident
        [0.5   0.841]
        >>> print(np.asarray(gpc.integrators.Exact().binary(gpc.likelihoods.Probit(), mean, var)).round(3))  # Phi(1/2)
        [0.5   0.691]

    ``gpc.predict(posterior, X_test, integrator=PlugIn())`` then predicts with it.
    """

    def binary(self, likelihood, mean: Float[Array, " m"], var: Float[Array, " m"]) -> Float[Array, " m"]:
        """p(y* = +1) = int p(y = +1 | f) N(f | mean, var) df (GPML eq. 3.25)."""
        raise _GPClassError(f"{type(self).__name__} averages a multi-class likelihood; for a binary one use "
                           "gpc.integrators.Exact() or MacKay().")

    def classes(self, likelihood, mean: Float[Array, "m C"], cov: Float[Array, "m C C"],
                key: Array | None) -> Float[Array, "m C"]:
        """E[softmax(f*)], f* ~ N(mean, cov) per test point."""
        raise _GPClassError(f"{type(self).__name__} averages a binary likelihood; for the softmax use "
                           "gpc.integrators.MonteCarlo() or MeanField().")

    def mixture_classes(self, likelihood, weights: Float[Array, " S"], means: Float[Array, "S m C"],
                        var: Float[Array, "m C"], key: Array | None) -> Float[Array, "m C"]:
        """E[softmax(f*)] for f* ~ sum_s w_s N(means_s, diag var) per test point: the prediction of samples
        (MCMC, AIS) of a softmax model, whose classes are independent given a sample."""
        raise _GPClassError(f"{type(self).__name__} averages a binary likelihood; for the softmax use "
                           "gpc.integrators.MonteCarlo() or MeanField().")


class Exact(AbstractIntegrator):
    """The likelihood's own average (``likelihood.predictive_probability``): exact for the probit, quadrature
    accurate to about 1e-12 for the logistic at every latent variance.  The default of ``gpc.predict`` for a
    binary or ordinal likelihood.

    Example::

        >>> exact = gpc.integrators.Exact()
        >>> p = exact.binary(gpc.likelihoods.Probit(), jnp.array([0.0, 1.0]), jnp.array([3.0, 3.0]))  # f ~ N(m, 3)
        >>> print(np.asarray(p).round(3))  # Phi(m / sqrt(1 + 3))
        [0.5   0.691]
    """

    def binary(self, likelihood, mean, var):
        return likelihood.predictive_probability(mean, var)

    def classes(self, likelihood, mean, cov, key):
        """The likelihood's own average over N(mean, cov) (``MultinomialProbit``: exact orthant probabilities)."""
        return _exact_classes(likelihood)(mean, cov)

    def mixture_classes(self, likelihood, weights, means, var, key):
        """sum_s w_s of the exact average over N(means_s, diag var), one sample at a time (memory O(m C^2))."""
        exact = _exact_classes(likelihood)
        cov = var[..., None] * _jnp.eye(var.shape[-1], dtype=var.dtype)

        def accumulate(total, weight_and_mean):
            weight, mean = weight_and_mean
            return total + weight * exact(mean, cov), None

        total, _ = _lax.scan(accumulate, _jnp.zeros_like(means[0]), (weights, means))
        return total


def _exact_classes(likelihood):
    exact = getattr(likelihood, "predictive_class_probability", None)
    if exact is None:
        raise _GPClassError(f"Exact() has no closed form for {type(likelihood).__name__}; use "
                            "gpc.integrators.MonteCarlo() or MeanField().")
    return exact


class MacKay(AbstractIntegrator):
    """sigma(kappa(var) mean), kappa = (1 + pi var / 8)^-1/2 (Gibbs & MacKay eq. 23): an approximation of the
    logistic's average, so it refuses other likelihoods (a logistic with label noise eps gives
    eps + (1 - 2 eps) times it; weights, masks and soft labels do not change it).

    Example: MacKay's approximation against the exact average, within 0.02::

        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> p_mackay = gpc.predict(post, X[:3], integrator=gpc.integrators.MacKay())
        >>> bool(jnp.max(jnp.abs(p_mackay - gpc.predict(post, X[:3]))) < 0.02)
        True
    """

    def binary(self, likelihood, mean, var):
        if not likelihood.binary:
            raise _GPClassError(f"{type(self).__name__} averages a binary likelihood; for "
                               f"{type(likelihood).__name__} use gpc.integrators.Exact().")
        return likelihood.mackay_probability(mean, var)


class MonteCarlo(AbstractIntegrator):
    """The average over ``num_samples`` draws of f* (GPML Algorithm 3.4): needs an explicit PRNG ``key``;
    standard error at most 0.5 / sqrt(num_samples) per probability.  The default of ``gpc.predict`` for the
    softmax: ``gpc.predict(posterior, X_test, key=jax.random.key(0))``.

    Example::

        >>> mean = jnp.array([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]])  # two test points' latent means, three classes
        >>> cov = jnp.broadcast_to(jnp.eye(3), (2, 3, 3))           # and their latent covariances
        >>> mc = gpc.integrators.MonteCarlo(num_samples=2000)
        >>> p = mc.classes(gpc.likelihoods.Softmax(3), mean, cov, jax.random.key(0))
        >>> print(np.asarray(p.sum(axis=1)).round(6))  # class probabilities, one row per test point
        [1. 1.]
        >>> bool(abs(p[0, 0] - 1 / 3) < 0.05 and p[1, 0] > 0.6)
        True
    """

    num_samples: int = eqx.field(static=True, default=10_000)

    def __check_init__(self):
        _require_setting("MonteCarlo", "num_samples", self.num_samples, low=1, low_open=False, integer=True)

    def classes(self, likelihood, mean, cov, key):
        _require_key(key)
        return likelihood.monte_carlo_probability(mean, cov, key, self.num_samples)

    def mixture_classes(self, likelihood, weights, means, var, key):
        """``num_samples`` draws of the mixture: a sample s by its weight, then f* ~ N(means_s, diag var)."""
        _require_key(key)
        return likelihood.monte_carlo_mixture_probability(weights, means, var, key, self.num_samples)


def _require_key(key):
    if key is None:
        raise _GPClassError(
            "multi-class predictions average the softmax over the latent Gaussian by Monte Carlo "
            "(GPML Algorithm 3.4), which needs an explicit key=jax.random.key(...); "
            "or pass integrator=gpc.integrators.MeanField() for a deterministic approximation."
        )


class MeanField(MacKay):
    """A deterministic approximation of E[softmax(f*)] using the full latent covariance
    (``Softmax.mean_field_probability``); for C = 2, and for a binary likelihood, MacKay's (inherited).
    ``gpc.predict(softmax_posterior, X_test, integrator=gpc.integrators.MeanField())`` needs no key.

    Example::

        >>> mean = jnp.array([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]])  # two test points' latent means, three classes
        >>> cov = jnp.broadcast_to(jnp.eye(3), (2, 3, 3))           # and their latent covariances
        >>> average = jax.jit(gpc.integrators.MeanField().classes)  # compiled, as gpc.predict runs it
        >>> print(np.asarray(average(gpc.likelihoods.Softmax(3), mean, cov, None)).round(3))
        [[0.333 0.333 0.333]
         [0.691 0.155 0.155]]
    """

    def classes(self, likelihood, mean, cov, key):
        return likelihood.mean_field_probability(mean, cov)

    def mixture_classes(self, likelihood, weights, means, var, key):
        """sum_s w_s MeanField(means_s, diag var), one sample at a time (memory O(m C^2))."""
        cov = var[..., None] * _jnp.eye(var.shape[-1], dtype=var.dtype)

        def accumulate(total, weight_and_mean):
            weight, mean = weight_and_mean
            return total + weight * likelihood.mean_field_probability(mean, cov), None

        total, _ = _lax.scan(accumulate, _jnp.zeros_like(means[0]), (weights, means))
        return total
