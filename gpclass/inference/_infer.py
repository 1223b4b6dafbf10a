"""The single entry point shared by every inference method."""

import equinox as eqx

from .._validation import check_binary_labels, check_inputs
from ..kernels import AbstractKernel
from ..likelihoods import AbstractLikelihood
from ._base import AbstractInference
from ._posterior import GaussianPosterior


@eqx.filter_jit
def infer(
    method: AbstractInference,
    kernel: AbstractKernel,
    likelihood: AbstractLikelihood,
    X,
    y,
    *,
    init=None,
    key=None,
) -> GaussianPosterior:
    """Approximate the posterior over latent values for training data (X, y).

    Args:
        method: an inference configuration such as ``gpc.Laplace()``.
        kernel: the prior covariance function.
        likelihood: ``gpc.likelihoods.Logistic()`` or ``Probit()``.
        X: inputs of shape (n, d), finite.
        y: labels of shape (n,) in {-1, +1}; {0, 1} and booleans are accepted
            (0 / False mean -1).
        init: an optional warm start for the method: ``posterior.warm_start``
            of an earlier solution by the same method (Laplace: a = K^-1 f;
            EP: the site parameters); an explicit argument, never hidden state.
        key: a PRNG key, for methods with randomness (``gpc.EP(order="random")``).

    Returns:
        A :class:`GaussianPosterior`; ``.log_marginal`` is differentiable with
        respect to the kernel and likelihood parameters.

    Wrapped in ``eqx.filter_jit`` (arrays are traced, everything else is
    static), so an eager call compiles once per shape and configuration;
    inside a user's ``jax.jit`` it is simply inlined.
    """
    X = check_inputs(X)
    y = check_binary_labels(y, X.shape[0], X.dtype)
    return solve_posterior(method, kernel, likelihood, X, y, init, key)


def solve_posterior(method, kernel, likelihood, X, y, init, key=None) -> GaussianPosterior:
    """:func:`infer` for inputs already checked: X (n, d) finite, y in {-1, +1}."""
    fields = method.solve(kernel.gram(X), likelihood, y, init, key)
    return GaussianPosterior(kernel=kernel, likelihood=likelihood, X=X, **fields)
