"""The single entry point shared by every inference method."""

import jax
import jax.numpy as jnp

from .._errors import AT, entry_point
from .._exceptions import GPClassError
from .._sparse import Sparse
from .._status import raise_unless_successful
from .._validation import Checks, check_inputs, require_key
from ..kernels import AbstractKernel
from ..likelihoods import AbstractLikelihood
from ..likelihoods._masked import Masked
from ..likelihoods._weighted import Weighted
from ._base import AbstractInference
from ._posterior import AbstractPosterior


@entry_point
def infer(
    method: AbstractInference,
    kernel: AbstractKernel | Sparse,
    likelihood: AbstractLikelihood,
    X,
    y,
    *,
    init=None,
    key=None,
    mask=None,
    weights=None,
    throw: bool = True,
) -> AbstractPosterior:
    """Approximate the posterior over latent values for training data (X, y).

    Args:
        method: an inference configuration such as ``gpc.Laplace()``.
        kernel: the prior covariance function.  Its hyperparameters are
            checked (finite, variances >= 0, length scales > 0), and so is its
            Gram matrix (finite, non-negative diagonal).  A sparse prior
            ``gpc.Sparse(kernel, Z)`` (FITC, VFE) gives a :class:`SparsePosterior`
            in O(n m^2) time (Laplace, EP, KL, JJ), or with ``Softmax(C)`` and
            Laplace or KL a :class:`SparseSoftmaxPosterior`.
        likelihood: a binary likelihood such as ``gpc.likelihoods.Logistic()``
            or ``Probit()``, or ``gpc.likelihoods.Softmax(C)`` (Laplace, KL, MCMC, AIS), or
            ``MultinomialProbit(C)`` (EP, MCMC, AIS).
        X: inputs of shape (n, d), finite.
        y: labels of shape (n,): binary in {-1, +1} ({0, 1} and booleans are
            accepted, 0 / False meaning -1); for ``Softmax(C)`` and ``MultinomialProbit(C)``
            integers 0..C-1, for ``Softmax(C)`` also soft labels, an (n, C) array of class probabilities.
        init: an optional warm start for the method: ``posterior.warm_start``
            of an earlier solution by the same method (Laplace: a = K^-1 f;
            EP: the site parameters); an explicit argument, never hidden state.
            All zeros means the same as ``None`` (the method's own start).
        key: a PRNG key, for methods with randomness (``gpc.EP(order="random")``,
            ``gpc.MCMC()``, ``gpc.AIS()``, which require it).
        mask: optional booleans of shape (n,): ``False`` marks a case left out
            (the padding of ragged data sets stacked for ``vmap``): it changes
            neither the posterior of the other cases nor ``log_marginal``, as
            if it were not there.  Binary and ``Ordinal`` likelihoods with
            Laplace, EP and KL; ``Softmax`` with each of its methods (as the weights 0 and 1).
            Exception: KL with ``Softmax`` averages each case by its own rule
            of points, drawn per position, so a case moved to another position
            (by leaving one out, or reordering) gets another rule: the results
            differ within the rule's error (about 1e-3 in ``log_marginal``).
        weights: optional case weights of shape (n,), finite and >= 0 (not all
            0): case i enters as the power likelihood p(y_i|f_i)^{w_i}
            (``gpclass.likelihoods._weighted``).  A weight 0 leaves the case
            out (as ``mask``); with Laplace and KL and a dense prior a whole
            number k is exactly k copies of the case (the same posterior,
            ``log_marginal`` and predictions; for KL with ``Softmax`` within
            its rule's error, as for ``mask``); EP is power EP, whose site
            matches the tilted distribution of p^w as a whole (for w = 2 not the same as two
            sites; for fractional w its moments by quadrature).  Binary
            likelihoods with Laplace, EP and KL; ``Softmax`` with Laplace,
            KL, MCMC and AIS (w log p, the rows of its labels, hard or soft,
            times w); combines with ``mask``.
            E.g. ``gpc.infer(gpc.Laplace(), kernel, Probit(), X, y,
            weights=jnp.array([1.0, 0.5, 2.0]))``.
        throw: raise (``eqx.branched_error_if``: also inside jit and vmap) unless
            ``posterior.info.status`` is ``gpc.Status.CONVERGED`` (for MCMC and
            AIS: every value finite).  The check is attached to every array of
            the posterior, so no use of it (``log_marginal`` alone, its
            gradient) escapes it.  With ``throw=False`` the status is only
            reported.

    Returns:
        A :class:`GaussianPosterior` (a :class:`SoftmaxPosterior` for the
        softmax likelihood, a :class:`SamplePosterior` for MCMC and AIS); ``.log_marginal`` is differentiable with
        respect to the kernel and likelihood parameters.

    Wrapped in ``eqx.filter_jit`` with gpclass's XLA options (arrays are
    traced, everything else is static), so an eager call compiles once per
    shape and configuration; inside a user's ``jax.jit`` it is inlined (use
    :func:`gpclass.jit` there to keep the options).

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> bool(post.info.converged), round(float(post.log_marginal), 1)
        (True, -24.4)
        >>> print(np.asarray(gpc.predict(post, X[:3])).round(2))  # p(y = +1) at three inputs
        [0.68 0.65 0.68]
    """
    require_key("infer", key, optional=True)
    checks = Checks()
    X = check_inputs(X, checks=checks)
    y = likelihood.check_labels(y, X.shape[0], X.dtype, checks)
    kernel.parameter_checks(checks)
    likelihood.parameter_checks(checks)
    kernel.check_inputs(X)
    labels, solve_likelihood = apply_mask(method, likelihood, y, mask, checks, weights)
    op = prior_covariance(kernel, likelihood, X, labels)
    solution = solve(method, op, solve_likelihood, likelihood.site_labels(labels, X.dtype), init, key, checks)
    posterior = likelihood.condition(solution, kernel, X, labels)
    return raise_unless_successful(posterior, posterior.info.status, type(method).__name__) if throw else posterior


def solve_posterior(
    method, kernel, likelihood, X, y, init, key=None, checks=None
) -> AbstractPosterior:
    """:func:`infer` for inputs checked by :func:`check_inputs` and ``likelihood.check_labels``."""
    op = prior_covariance(kernel, likelihood, X, y)
    solution = solve(method, op, likelihood, likelihood.site_labels(y, X.dtype), init, key, checks)
    return likelihood.condition(solution, kernel, X, y)


def apply_mask(method, likelihood, y, mask, checks, weights=None):
    """Labels with the left-out cases set to ``likelihood.left_out_label``, and the likelihood that ignores them
    (``likelihoods._masked``); with ``weights``, the labels times the weights (0 where masked) and the
    power likelihood (``likelihoods._weighted``).  For the softmax (``likelihood.weighted_rows``) the rows of
    its (n, C) labels times the weights (a mask's 0 or 1), the likelihood unchanged (``Softmax.log_prob``)."""
    if mask is None and weights is None:
        return y, likelihood
    what = "mask" if weights is None else "weights"
    if not likelihood.labels_per_input:
        raise GPClassError(f"{what}: not for {type(likelihood).__name__}, whose labels are not one per row of X; "
                           "leave the unwanted labels out instead.")
    if likelihood.weighted_rows:
        weights = _checked_weights(weights, mask, y.shape[:1], y.dtype, checks)
        return y * weights[:, None], likelihood
    if likelihood.num_latent != 1 or not method.supports_mask:
        raise GPClassError(f"{what}: supported for binary likelihoods with gpc.Laplace(), gpc.EP() and gpc.KL(), "
                           f"and for Softmax; got {type(method).__name__} with {type(likelihood).__name__}.")
    if weights is None:
        mask = _checked_mask(mask, y.shape)
        checks.fail_if(~jnp.any(mask), "mask: every case is left out (mask is False everywhere); keep at least one "
                       "case (mask True).")
        return jnp.where(mask, y, likelihood.left_out_label).astype(y.dtype), Masked(likelihood)
    if not likelihood.binary or likelihood.left_out_label != 0.0 or not likelihood.weighted_labels:
        raise GPClassError(f"weights: supported for the binary likelihoods with labels +-1 (Logistic, Probit, "
                           f"Heaviside, LabelNoise) and for Softmax; got {type(likelihood).__name__}.")
    return y * _checked_weights(weights, mask, y.shape, y.dtype, checks), Weighted(likelihood)


def _checked_mask(mask, shape):
    mask = jnp.asarray(mask)
    if mask.shape != shape or not (mask.dtype == bool or jnp.issubdtype(mask.dtype, jnp.integer)):
        raise GPClassError(f"mask must be booleans of shape {shape}, one per case (True keeps it); got {mask.dtype} of "
                           f"shape {mask.shape}.")
    return mask.astype(bool)


def _checked_weights(weights, mask, shape, dtype, checks):
    """The case weights (ones if None) as ``dtype``, 0 where ``mask`` is False; shape now, values in ``checks``."""
    if weights is None:
        weights = jnp.ones(shape, dtype)
    weights = jnp.asarray(weights)
    if weights.shape != shape or not (jnp.issubdtype(weights.dtype, jnp.number) and weights.dtype != bool):
        raise GPClassError(f"weights must be numbers of shape {shape}, one per case; got {weights.dtype} of shape "
                           f"{weights.shape}.")
    weights = weights.astype(dtype)
    checks.fail_if(~jnp.isfinite(weights) | (weights < 0),
                   f"weights must be finite and >= 0{AT} (each multiplies its case's log-likelihood); to leave a case "
                   "out give it weight 0.", at=("the first that is not: weights[{index}] = {value}", weights))
    if mask is not None:
        weights = jnp.where(_checked_mask(mask, shape), weights, 0.0)
    checks.fail_if(~jnp.any(weights > 0), "weights: every case has weight 0 (or is left out by mask); give at least "
                   "one case a positive weight.")
    return weights


def prior_covariance(kernel, likelihood, X, y):
    """The prior covariance, as an operator (``gpclass._covariance``), of the latent values the likelihood's
    sites see: a kernel's Gram matrix, a ``PerClass`` kernel's blocks, a sparse prior's K~ (``gpc.Sparse``),
    or for ``Preference`` the comparisons' D K D^T (``likelihood.prior_covariance``)."""
    return likelihood.prior_covariance(kernel, X, y)


def solve(method, op, likelihood, y, init, key=None, checks=None):
    """``method.solve`` on the prior covariance ``op`` (the method's posterior), refusing what the method cannot do.

    With ``checks``, adds the checks of the operator's values (finite, non-negative prior variances) and
    attaches them all to it, which every method's result is computed from.  ``gpc.fit`` passes none: it
    probes extreme hyperparameters and counts a failure there as an infeasible point, not an error.
    """
    if checks is not None:
        op = checks.attach(op.value_checks(checks))
    if likelihood.num_latent > 1 and not method.multiclass_for(likelihood):
        raise GPClassError(
            f"{type(method).__name__} does not support the multi-class {type(likelihood).__name__} likelihood, "
            f"which needs {getattr(likelihood, 'multiclass_methods', 'gpc.Laplace()')}."
        )
    op.check_latent(likelihood.num_latent)
    if init is not None and checks is not None:  # a user's warm start (gpc.fit's own are the method's by construction)
        _check_warm_start(method, op, likelihood, y, init, key)
    return method.solve(op, likelihood, y, init, key)


def _check_warm_start(method, op, likelihood, y, init, key) -> None:
    """Refuse an ``init`` whose shapes are not those of the method's own ``warm_start`` on these data (another
    method's, or one of another number of cases: raw shape errors from deep inside before).  The expected shapes
    come from tracing the method without a warm start (``jax.eval_shape``: no computation)."""
    expected = jax.eval_shape(lambda: method.solve(op, likelihood, y, None, key).warm_start)

    def shapes(tree):
        return jax.tree.map(lambda leaf: tuple(jnp.shape(leaf)), tree)

    try:
        same = shapes(init) == shapes(expected)
    except (TypeError, ValueError):
        same = False
    if not same:
        try:  # a method that checks its own warm starts says more (MCMC's whitened latents, KL's sites)
            jax.eval_shape(lambda: method.solve(op, likelihood, y, init, key))
        except GPClassError:
            raise
        except Exception:  # noqa: BLE001 - the shape error from deep inside that this check replaces
            pass
        raise GPClassError(
            f"init must be a warm start of {type(method).__name__} on these {y.shape[0]} cases, shaped "
            f"{shapes(expected)}; got {shapes(init)}. Pass posterior.warm_start from the same method and data "
            "(after dropping or adding cases, start without init=).")
