"""The multi-class softmax likelihood (GPML eq. 3.34) and its Gaussian average."""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.special import logsumexp

from .. import _dense as dense
from .._errors import error_if
from .._exceptions import GPClassError
from .._types import Array, Float
from .._validation import Checks, check_class_labels
from ._base import AbstractLikelihood


class Softmax(AbstractLikelihood):
    """p(y_i = c | f_i) = exp(f_i^c) / sum_c' exp(f_i^c')  (GPML eq. 3.34), C latent functions.

    Labels are integers 0..C-1 (``gpc.infer`` checks them and turns them into
    the 0/1 indicator matrix Y of shape (n, C)); latents are arrays F of shape
    (n, C).  Laplace's method (GPML Algorithm 3.3: its Newton steps are the binary
    ones with W = diag(pi) - pi pi^T block-diagonal, eq. 3.38, which the prior
    factorises, ``op.class_factor``), Gaussian KL (per-class q, ``_inference/kl_classes``),
    MCMC and AIS support it.  For C = 2 the model is binary logistic classification
    of f^0 - f^1.

    Example::

        >>> lik = gpc.likelihoods.Softmax(3)
        >>> F = jnp.array([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]])  # latent values of two cases, one column per class
        >>> Y = jax.nn.one_hot(jnp.array([0, 0]), 3)           # both labelled class 0, as indicators
        >>> print(np.exp(lik.log_prob(Y, F)).round(3))           # 1/3 and e^2 / (e^2 + 2)
        [0.333 0.787]

    ``gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Softmax(C), X, labels)`` takes the labels as integers
    0..C-1.
    """

    num_classes: int = eqx.field(static=True)

    def __check_init__(self):
        if not isinstance(self.num_classes, int) or self.num_classes < 2:
            raise GPClassError(f"Softmax needs an integer num_classes >= 2; got {self.num_classes!r}.")

    log_concave = True
    weighted_rows = True  # gpc.infer's weights w (and mask, as w = 0 or 1) scale the rows of Y (``log_prob``)
    block_curvature = True  # W = diag(pi) - pi pi^T per case: multi-class Laplace (GPML Algorithm 3.3)
    multiclass_methods = "gpc.Laplace(), gpc.KL(), gpc.MCMC() or gpc.AIS()"

    @property
    def num_latent(self) -> int:
        """C latent functions per case."""
        return self.num_classes

    def parameter_checks(self, checks: Checks) -> None:
        """The softmax has no parameters to check."""

    def check_labels(self, y, n: int, dtype, checks: Checks | None = None) -> Float[Array, "n C"]:
        """Integer labels 0..C-1, checked, as the 0/1 indicator matrix Y of shape (n, C); or soft labels, an
        (n, C) array of class probabilities (rows >= 0 summing to one), taken as Y itself: then log p is the
        expected log-likelihood sum_c y_ic log p(c | f_i) (:meth:`log_prob`)."""
        return check_class_labels(y, n, self.num_classes, dtype, checks, soft=True)

    def log_prob(self, Y: Float[Array, "n C"], F: Float[Array, "n C"]) -> Float[Array, " n"]:
        """log p(y_i|f_i) = y_i^T f_i - s_i log sum_c exp f_i^c per case, s_i = sum_c y_ic (GPML eq. 3.35, where
        s_i = 1).

        For soft labels (rows y_i of class probabilities, s_i = 1) this is sum_c y_ic log softmax(f_i)_c, the
        expected log-likelihood under the labels' distribution.  ``gpc.infer``'s case weights w_i scale the rows
        (s_i = w_i): w_i log p(y_i|f_i), the power likelihood p^w of the binary case weights
        (``likelihoods._weighted``); a whole number w = k is k copies of the case, w = 0 leaves it out."""
        return jnp.sum(Y * F, axis=-1) - jnp.sum(Y, axis=-1) * logsumexp(F, axis=-1)

    def derivatives(self, Y: Float[Array, "n C"], F: Float[Array, "n C"]):
        """(log p(y_i|f_i) per case, d log p / dF = Y - s pi, and s pi (n, C), which gives the block-diagonal
        W = -d^2 log p / dF^2 = s_i (diag(pi_i) - pi_i pi_i^T) = diag(s_i pi_i) - (s_i pi_i)(s_i pi_i)^T / s_i
        case by case: GPML eqs. 3.36 and 3.38 for s_i = 1; the prior's class factorisation takes this form,
        ``_covariance.dense_classes``)."""
        s = jnp.sum(Y, axis=-1, keepdims=True)
        pi = s * jax.nn.softmax(F, axis=-1)
        return self.log_prob(Y, F), Y - pi, pi

    def curvature_diagonal(self, Y: Float[Array, "n C"], F: Float[Array, "n C"]) -> Float[Array, "n C"]:
        """The diagonal of each case's block W_i = s_i (diag(pi_i) - pi_i pi_i^T): s_i pi_ic (1 - pi_ic)."""
        pi = jax.nn.softmax(F, axis=-1)
        return jnp.sum(Y, axis=-1, keepdims=True) * pi * (1.0 - pi)

    def factor(self, op, pi: Float[Array, "n C"]):
        """The prior's factorisation of I + W K for the block-diagonal W at pi (``op.class_factor``)."""
        return op.class_factor(pi)

    def newton_factor(self, op, pi: Float[Array, "n C"]):
        return op.class_solver(pi)

    def factor_given(self, op, pi: Float[Array, "n C"], factor):
        return op.class_factor_given(pi, factor)

    def log_prob_scale(self, Y, F, log_prob):
        """|y_i^T f_i| + s_i |log sum_c exp f_i^c|: the two terms of log p cancel for a confident case."""
        return jnp.abs(jnp.sum(Y * F, axis=-1)) + jnp.sum(Y, axis=-1) * jnp.abs(logsumexp(F, axis=-1))

    @property
    def integrator(self):
        """Predictions average the softmax by Monte Carlo by default (``gpc.integrators.MonteCarlo()``)."""
        from ..integrators import MonteCarlo

        return MonteCarlo()

    def predictive_probability(self, mean, var):
        raise GPClassError("Softmax predictive probabilities need the latent covariance across classes: use "
                           "gpc.predict(posterior, X_test) with a gpc.integrators strategy.")

    def monte_carlo_probability(
        self, mean: Float[Array, "m C"], cov: Float[Array, "m C C"], key: Array, num_samples: int
    ) -> Float[Array, "m C"]:
        """E[softmax(f*)] for f* ~ N(mean, cov), by averaging over samples (GPML Algorithm 3.4, lines 17-22).

        One ``lax.scan`` step per sample keeps memory at O(m C).  The error is
        random, with standard deviation at most 0.5 / sqrt(num_samples) per
        probability.  A covariance that is not positive definite (which
        rounding can cause far from the data when a class is certain) raises.
        """
        chol = jax.vmap(dense.cholesky)(cov)
        chol = error_if(
            chol,
            ~jnp.all(jnp.isfinite(chol)),
            "Softmax: the latent predictive covariance is not positive definite at some test point (rounding, where "
            "a class is certain), so the Monte Carlo average cannot draw from it: use "
            "integrator=gpc.integrators.MeanField() (no factorisation), compute in float64, or add latent noise to "
            "the kernel (a gpc.kernels.White term).",
        )

        def accumulate(total, k):
            z = jax.random.normal(k, mean.shape, mean.dtype)
            f = mean + jnp.einsum("mcd,md->mc", chol, z)
            return total + jax.nn.softmax(f, axis=-1), None

        total, _ = lax.scan(accumulate, jnp.zeros_like(mean), jax.random.split(key, num_samples))
        return total / num_samples

    def monte_carlo_mixture_probability(
        self, weights: Float[Array, " S"], means: Float[Array, "S m C"], var: Float[Array, "m C"], key: Array,
        num_samples: int,
    ) -> Float[Array, "m C"]:
        """E[softmax(f*)] for f* ~ sum_s w_s N(means_s, diag var) (the prediction of MCMC or AIS samples), by
        ``num_samples`` draws: for each, a sample s by its weight (one for every test point), then f* from its
        Gaussian.  Standard deviation at most 0.5 / sqrt(num_samples) per probability."""
        std = jnp.sqrt(jnp.maximum(var, 0.0))
        log_weights = jnp.log(weights)

        def accumulate(total, k):
            k_sample, k_normal = jax.random.split(k)
            s = jax.random.categorical(k_sample, log_weights)
            f = means[s] + std * jax.random.normal(k_normal, std.shape, std.dtype)
            return total + jax.nn.softmax(f, axis=-1), None

        total, _ = lax.scan(accumulate, jnp.zeros_like(std), jax.random.split(key, num_samples))
        return total / num_samples

    def mean_field_probability(self, mean: Float[Array, "m C"], cov: Float[Array, "m C C"]) -> Float[Array, "m C"]:
        """A deterministic approximation of E[softmax(f*)] (Lu, Ie & Sha 2020, arXiv:2006.07584), rows normalised.

        Writing p_c = E[1 / sum_c' exp(f^c' - f^c)] and replacing each pairwise
        sigmoid by MacKay's moderated sigmoid (Gibbs & MacKay eq. 23) gives

            p_c ~ 1 / sum_c' exp(-(m_c - m_c') / sqrt(1 + pi/8 V[f^c - f^c'])),

        which uses the full covariance through V[f^c - f^c'] = S_cc + S_c'c' - 2 S_cc'.
        The values are then divided by their sum over classes.  For C = 2 it
        is exactly MacKay's sigma(kappa m), about 0.02 from the exact average at
        worst.  For C > 2 it is cruder: measured against a tensor Gauss-Hermite
        rule on 3-class Vehicle predictions with latent variances up to 8, the
        largest error was 0.051 (0.13 for softmax of the mean).  Use the Monte
        Carlo average when probabilities must be accurate.
        """
        var_diag = jnp.diagonal(cov, axis1=-2, axis2=-1)
        var_diff = var_diag[..., :, None] + var_diag[..., None, :] - 2.0 * cov
        scaled = (mean[..., :, None] - mean[..., None, :]) / jnp.sqrt(1.0 + jnp.pi / 8.0 * var_diff)
        log_p = -logsumexp(-scaled, axis=-1)
        return jax.nn.softmax(log_p, axis=-1)
