"""Predictions from any posterior: the checked, compiled entry points of :meth:`AbstractPosterior.latent` and
:meth:`AbstractPosterior.predict` (the formulas live with each posterior kind, ``_inference/_posterior.py``)."""

from ._errors import entry_point
from ._exceptions import GPClassError
from ._inference._posterior import AbstractPosterior
from ._types import Array, Float
from ._validation import check_inputs, require_key
from .integrators import AbstractIntegrator


@entry_point
def predict_latent(posterior: AbstractPosterior, X_test):
    """Latent predictive moments at test inputs.

    Binary posteriors: mean and variance, each of shape (m,):
    E[f*] = k*^T alpha (GPML eq. 3.21) and
    V[f*] = k(x*, x*) - k*^T (K + W^-1)^-1 k* = k** - |L^-1 W^1/2 k*|^2 (eq. 3.24, Algorithm 3.2).

    Softmax posteriors: mean of shape (m, C) (eq. 3.41) and covariance of
    shape (m, C, C) (eq. 3.43, ``SoftmaxPosterior._latent``).  Memory is
    O(C n m): predict a large test set in batches.

    Sample posteriors (MCMC, AIS): the mean and variance of the mixture
    sum_s w_s p(f*|f_s) (``SamplePosterior._latent``).

    :class:`gpclass.SVGP`: the marginals of q(f*); with a
    softmax likelihood, means (m, C) and the diagonal covariances (m, C, C)
    (q's classes are independent), the shapes of softmax posteriors.

    :class:`gpclass.SparsePosterior` (a ``gpc.Sparse`` prior): GPML's
    ``apxSparse`` form (``SparsePosterior._latent``).

    Also ``posterior.latent(X_test)``.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> mean, var = gpc.predict_latent(post, X[:3])
        >>> print(np.asarray(mean).round(2), bool(jnp.all(var > 0)))
        [0.78 0.65 0.8 ] True
    """
    X_test = _check_test_inputs(posterior, X_test)
    return posterior._latent(X_test)


def _check_test_inputs(posterior, X_test):
    """Finite (m, d) test inputs with the training inputs' d.

    m = 0 is allowed: the prediction at no test points is well defined (an
    empty array of the usual trailing shape), and a loop over test batches
    may end with an empty batch.
    """
    _check_posterior(posterior)
    X_test = check_inputs(X_test, "X_test", allow_empty=True)
    d = posterior.input_dim
    if X_test.shape[1] != d:
        raise GPClassError(f"X_test has {X_test.shape[1]} input dimensions but the training inputs have {d}: pass test "
                           f"inputs with the same {d} columns (and preprocessing) as the training inputs.")
    return X_test


_RESULT_FIELDS = {"FitResult": "result.posterior", "EMEPResult": "result.posterior", "SVGPFit": "fit.model"}


def _check_posterior(posterior) -> None:
    """A posterior of one problem: not a fit's result (which holds one), and not a batch of them (a vmapped
    ``gpc.infer``), whose inputs have a leading batch axis."""
    name = type(posterior).__name__
    if not isinstance(posterior, AbstractPosterior):
        field = _RESULT_FIELDS.get(name)
        raise GPClassError(f"predictions need a posterior (gpc.infer's result) or an SVGP model; got {name}"
                           + (f": pass {field}." if field else "."))
    inputs = getattr(posterior, "X", getattr(posterior, "inducing", None))
    if inputs is not None and inputs.ndim > 2:
        raise GPClassError(f"this {name} holds a batch of {inputs.shape[0]} problems (from gpc.infer under jax.vmap: "
                           "its arrays have a leading batch axis); predict under jax.vmap too, e.g. "
                           "jax.vmap(gpc.predict, in_axes=(0, None))(posterior, X_test).")


@entry_point
def predict(
    posterior: AbstractPosterior,
    X_test,
    *,
    integrator: AbstractIntegrator | None = None,
    key: Array | None = None,
    approximation=None,
) -> Float[Array, " m"] | Float[Array, "m C"]:
    """Class probabilities: the likelihood averaged over the latent predictive distribution.

    ``integrator`` (a :mod:`gpclass.integrators` strategy) says how; ``None`` takes the likelihood's own
    (``likelihood.integrator``).

    Binary posteriors return p(y* = +1 | x*) of shape (m,) (GPML eq. 3.25): by default
    :class:`~gpclass.integrators.Exact` (exact for the probit; quadrature accurate to ~1e-12 for the
    logistic at every latent variance); :class:`~gpclass.integrators.MacKay` uses sigma(kappa(s^2) mean)
    (Gibbs & MacKay eq. 23), meant for the logistic likelihood.

    Ordinal posteriors (``gpc.likelihoods.Ordinal(K)``, one latent function, any method) return the K class
    probabilities p(y* = k | x*) of shape (m, K), exact for a Gaussian latent (``Exact``, the default); the
    predictive mean rank is ``posterior.likelihood.mean_rank(p)``, the latent moments :func:`predict_latent`.

    Sample posteriors (MCMC, AIS) average p(y* = +1 | f_s) over the samples, each integrated over
    p(f*|f_s) as for a Gaussian posterior (Kuss & Rasmussen section 6.1).

    Softmax posteriors (and a softmax :class:`gpclass.SVGP`) return E[softmax(f*)] of shape (m, C), rows
    summing to one: by default :class:`~gpclass.integrators.MonteCarlo` (GPML Algorithm 3.4; 10 000 draws,
    standard error at most 0.5 / sqrt(num_samples)), which needs an explicit PRNG ``key``;
    :class:`~gpclass.integrators.MeanField` is a deterministic approximation using the full latent
    covariance (for C = 2, MacKay's).

    ``approximation`` (strings) is gone: it raises, naming the integrator that replaces it.
    Also ``posterior.predict(X_test, ...)``.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> p = gpc.predict(post, X[:3])  # binary: the exact average, p(y = +1)
        >>> print(np.asarray(p).round(2))
        [0.68 0.65 0.68]
        >>> p_mackay = gpc.predict(post, X[:3], integrator=gpc.integrators.MacKay())
        >>> bool(jnp.allclose(p_mackay, p, atol=0.01))  # MacKay's approximation is close to it
        True

    A softmax posterior's default integrator draws samples and needs a key,
    ``gpc.predict(post, X_test, key=jax.random.key(0))``; ``integrator=gpc.integrators.MeanField()``
    is deterministic (:class:`gpclass.SoftmaxPosterior` shows both).
    """
    _check_posterior(posterior)
    require_key("predict", key, optional=True)
    if approximation is not None:
        replacement = _REPLACEMENTS.get(approximation, "an object of gpc.integrators")
        raise GPClassError(f"predict(approximation={approximation!r}) is now predict(integrator={replacement}).")
    if integrator is None:
        integrator = posterior.likelihood.integrator
    if not isinstance(integrator, AbstractIntegrator):
        raise GPClassError(f"integrator must be one of gpc.integrators (Exact(), MacKay(), MonteCarlo(), "
                           f"MeanField()); got {integrator!r}.")
    return posterior._probability(_check_test_inputs(posterior, X_test), integrator, key)


_REPLACEMENTS = {"mackay": "gpc.integrators.MacKay()", "mean_field": "gpc.integrators.MeanField()",
                 "monte_carlo": "gpc.integrators.MonteCarlo(num_samples)"}
