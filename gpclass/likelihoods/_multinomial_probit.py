"""The multinomial probit likelihood (Riihimaki, Jylanki & Vehtari 2013, JMLR 14) and its Gaussian
average."""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import logsumexp

from .. import _dense as dense
from .._errors import error_if
from .._exceptions import GPClassError
from .._types import Array, Float
from .._validation import Checks, check_class_labels
from ._base import AbstractLikelihood
from ._probit import gaussian_cdf_tilted_moments, log_cdf_and_mills_ratio

# log_prob: Gauss-Hermite (probabilists') nodes around the mode of the integrand in u.
_GH_NODES, _GH_WEIGHTS = np.polynomial.hermite_e.hermegauss(32)
_MODE_STEPS = 5  # Newton steps to the mode of log N(u) + sum_j log Phi(u + a_j), strictly concave
# Orthant probabilities: Gauss-Legendre on [-_Z, _Z] in the standardised quadrature variables.
_Z = 9.0  # the normal mass beyond 9 standard deviations is 2e-19
_GL_PANEL = np.polynomial.legendre.leggauss(48)  # per panel of the one-dimensional rule (C = 3)
_GL_INNER = np.polynomial.legendre.leggauss(32)  # per panel of the inner rule (C = 4)
_GL_OUTER = np.polynomial.legendre.leggauss(128)  # the outer rule (C = 4): 64 nodes left errors of 6e-4
_MAX_EXACT_CLASSES = 4  # C = 5 by a 64 x 64 outer rule was still 2e-4 off: MonteCarlo beyond


class MultinomialProbit(AbstractLikelihood):
    """p(y_i = c | f_i) = int N(u|0, 1) prod_{j != c} Phi(u + f_i^c - f_i^j) du  (Riihimaki et al. 2013).

    The model y_i = argmax_c (f_i^c + e_i^c) with independent e_i^c ~ N(0, 1); C latent functions per case.
    Labels are integers 0..C-1 (``gpc.infer`` checks them and turns them into the 0/1 indicator matrix Y of
    shape (n, C), as for ``Softmax``); latents are (n, C) arrays.  ``gpc.EP()`` runs nested EP on it
    (``gpclass._inference.ep_classes``): the C - 1 probit factors Phi(u + f^c - f^j) of a case, in the
    augmented variables (f_i, u_i), are what its inner EP approximates (:meth:`difference_rows`,
    :meth:`factor_tilted_moments`).  ``gpc.MCMC()`` and ``gpc.AIS()`` use :meth:`log_prob`.  Predictions are
    exact Gaussian orthant probabilities by quadrature (:meth:`predictive_class_probability`,
    ``gpc.integrators.Exact()``, the default).

    Example::

        >>> lik = gpc.likelihoods.MultinomialProbit(3)
        >>> F = jnp.array([[0.0, 0.0, 0.0], [2.0, 0.0, 0.0]])  # latent values of two cases, one column per class
        >>> print(np.asarray(jax.jit(lik.class_probabilities)(F)).round(3))  # compiled: quadrature in a loop
        [[0.333 0.333 0.333]
         [0.866 0.067 0.067]]
    """

    num_classes: int = eqx.field(static=True)

    def __check_init__(self):
        if not isinstance(self.num_classes, int) or self.num_classes < 2:
            raise GPClassError(f"MultinomialProbit needs an integer num_classes >= 2; got {self.num_classes!r}.")

    log_concave = True  # an integral of log-concave functions (Prekopa)
    binary = False
    probit_factors = True  # nested EP's augmented representation (gpc.EP())
    multiclass_methods = "gpc.EP() (nested EP), gpc.MCMC() or gpc.AIS()"

    @property
    def num_latent(self) -> int:
        """C latent functions per case."""
        return self.num_classes

    def parameter_checks(self, checks: Checks) -> None:
        """The multinomial probit has no parameters to check."""

    def check_labels(self, y, n: int, dtype, checks: Checks | None = None) -> Float[Array, "n C"]:
        """Integer labels 0..C-1, checked, as the 0/1 indicator matrix Y of shape (n, C)."""
        return check_class_labels(y, n, self.num_classes, dtype, checks, likelihood="MultinomialProbit")

    def difference_rows(self, Y: Float[Array, "n C"]) -> Float[Array, "n C-1 C"]:
        """Per case the rows e_y - e_j, j != y in increasing order: the factor Phi(u + f^y - f^j) is
        Phi(b_j^T f + u) (the paper's B~_i without its column for u, which is all ones)."""
        C = self.num_classes
        others = np.array([[j for j in range(C) if j != c] for c in range(C)])  # (C, C - 1)
        label = jnp.argmax(Y, axis=-1)
        return Y[:, None, :] - jax.nn.one_hot(jnp.asarray(others)[label], C, dtype=Y.dtype)

    def factor_tilted_moments(self, mean, var):
        """(log Z, mean, variance) of Phi(z) N(z|mean, var) / Z: one probit factor of nested EP's inner loop
        (GPML eq. 3.58 with y = +1)."""
        return gaussian_cdf_tilted_moments(jnp.ones_like(mean), mean, var, 1.0 + var)

    def log_prob(self, Y: Float[Array, "n C"], F: Float[Array, "n C"]) -> Float[Array, " n"]:
        """log p(y_i|f_i) per case: the integral over u by a 32-node Gauss-Hermite rule centred at the mode of
        the integrand (five Newton steps on the strictly concave log N(u) + sum_j log Phi(u + a_j), a_j =
        f^c - f^j) and scaled by its curvature there, summed in log space: relative error ~1e-15 against
        adaptive quadrature, also far in the tails (log p of -300).  The centre and scale are held fixed in
        derivatives (any centre and scale give a valid rule).  Works on leading batch dimensions."""
        a = jnp.sum(Y * F, axis=-1, keepdims=True) - F  # (..., C), 0 at the label
        others = 1.0 - Y

        def log_integrand(u):  # log N(u) + sum_j log Phi(u + a_j) at nodes u of shape (..., K)
            z = u[..., :, None] + a[..., None, :]
            return -0.5 * u**2 + jnp.sum(others[..., None, :] * log_cdf_and_mills_ratio(z)[0], axis=-1)

        def newton(u):
            z = u[..., None] + a
            _, r = log_cdf_and_mills_ratio(z)
            grad = -u + jnp.sum(others * r, axis=-1)
            curvature = 1.0 + jnp.sum(others * r * (z + r), axis=-1)
            return u + grad / curvature

        a_fixed, others_fixed = lax.stop_gradient((a, others))
        u0 = jnp.maximum(-jnp.min(a_fixed, axis=-1), 0.0) * 0.5
        for _ in range(_MODE_STEPS):  # unrolled: a loop's fixed cost per step exceeds a step's in a sampler
            u0 = newton(u0)
        z0 = u0[..., None] + a_fixed
        _, r0 = log_cdf_and_mills_ratio(z0)
        scale = lax.stop_gradient(1.0 / jnp.sqrt(1.0 + jnp.sum(others_fixed * r0 * (z0 + r0), axis=-1)))
        u0 = lax.stop_gradient(u0)
        nodes = jnp.asarray(_GH_NODES, F.dtype)
        u = u0[..., None] + scale[..., None] * nodes  # (..., K)
        log_terms = log_integrand(u) + 0.5 * nodes**2 + jnp.log(jnp.asarray(_GH_WEIGHTS, F.dtype))
        return logsumexp(log_terms, axis=-1) + jnp.log(scale) - 0.5 * jnp.log(2.0 * jnp.pi)

    def class_probabilities(self, F: Float[Array, "... C"]) -> Float[Array, "... C"]:
        """p(y = c | f) for every class c (rows sum to one to rounding)."""
        eye = jnp.eye(self.num_classes, dtype=F.dtype)
        return jnp.exp(jax.vmap(lambda Y: self.log_prob(jnp.broadcast_to(Y, F.shape), F), out_axes=-1)(eye))

    def predictive_probability(self, mean, var):
        raise GPClassError("MultinomialProbit predictive probabilities need the latent covariance across classes: "
                           "use gpc.predict(posterior, X_test).")

    def predictive_class_probability(self, mean: Float[Array, "m C"],
                                     cov: Float[Array, "m C C"]) -> Float[Array, "m C"]:
        """p(y* = c) = int N(f|mean, cov) p(c|f) df for every class: P(g^c > g^j for all j != c) with
        g = f + e ~ N(mean, cov + I), a Gaussian orthant probability of the C - 1 differences d = D_c g.

        Split Cov[d] = delta I + R with delta its smallest eigenvalue (>= 1, from e): given r ~ N(0, R),
        of rank C - 2, the d_j are independent and the probability is prod_j Phi((a_j + r_j) / sqrt(delta)),
        integrated over r by quadrature in C - 2 dimensions: exact (one Phi) for C = 2; for C = 3 one
        dimension, Gauss-Legendre panels split where each Phi turns (a 1-D quadrature with the Gaussian
        integrated analytically per j; GPstuff instead normalises nested EP's tilted normalisers); for C = 4
        those panels inside a 128-node rule over the other dimension.  More classes raise: use
        ``gpc.integrators.MonteCarlo()``.  Measured against scipy's multivariate normal CDF (Genz, at 1e-9)
        in tests/test_ep_multinomial_probit.py: C = 3 to 3e-15, C = 4 to 2e-7.
        """
        C = self.num_classes
        if C > _MAX_EXACT_CLASSES:
            raise GPClassError(f"MultinomialProbit({C}): exact predictive probabilities by quadrature up to "
                               f"{_MAX_EXACT_CLASSES} classes; use integrator=gpc.integrators.MonteCarlo() "
                               "with a key.")
        others = np.array([[j for j in range(C) if j != c] for c in range(C)])
        D = jnp.asarray(np.eye(C)[:, None, :] - np.eye(C)[others], mean.dtype)  # (C, C - 1, C)
        a = jnp.einsum("ckj,mj->mck", D, mean)  # (m, C, C - 1)
        Sd = jnp.einsum("ckj,mjl,cil->mcki", D, cov + jnp.eye(C, dtype=cov.dtype), D)
        return _orthant_probability(a.reshape(-1, C - 1), Sd.reshape(-1, C - 1, C - 1)).reshape(a.shape[:2])

    def monte_carlo_probability(self, mean: Float[Array, "m C"], cov: Float[Array, "m C C"], key: Array,
                                num_samples: int) -> Float[Array, "m C"]:
        """E[p(y* = c | f*)] for f* ~ N(mean, cov) by averaging the exact p(c | f*) (:meth:`class_probabilities`)
        over ``num_samples`` draws: the error is random, with standard deviation at most 0.5 / sqrt(num_samples)
        per probability.  One ``lax.scan`` step per draw keeps memory at O(m C)."""
        chol = jax.vmap(dense.cholesky)(cov)
        chol = error_if(chol, ~jnp.all(jnp.isfinite(chol)),
                        "MultinomialProbit: the latent predictive covariance is not positive definite at some test "
                        "point (rounding), so the Monte Carlo average cannot draw from it: for up to "
                        f"{_MAX_EXACT_CLASSES} classes use the exact average, integrator=gpc.integrators.Exact() (the "
                        "default); else compute in float64 or add latent noise to the kernel "
                        "(a gpc.kernels.White term).")

        def accumulate(total, k):
            f = mean + jnp.einsum("mcd,md->mc", chol, jax.random.normal(k, mean.shape, mean.dtype))
            return total + self.class_probabilities(f), None

        total, _ = lax.scan(accumulate, jnp.zeros_like(mean), jax.random.split(key, num_samples))
        return total / num_samples

    def monte_carlo_mixture_probability(self, weights, means, var, key, num_samples):
        """The same for f* ~ sum_s w_s N(means_s, diag var) (the prediction of MCMC or AIS samples): a sample s by
        its weight, then f* from its Gaussian, per draw."""
        std, log_weights = jnp.sqrt(jnp.maximum(var, 0.0)), jnp.log(weights)

        def accumulate(total, k):
            k_sample, k_normal = jax.random.split(k)
            f = means[jax.random.categorical(k_sample, log_weights)] + std * jax.random.normal(k_normal, std.shape,
                                                                                                std.dtype)
            return total + self.class_probabilities(f), None

        total, _ = lax.scan(accumulate, jnp.zeros_like(std), jax.random.split(key, num_samples))
        return total / num_samples

    def mean_field_probability(self, mean, cov):
        raise GPClassError("MeanField() approximates the softmax; MultinomialProbit predictions are exact by "
                           "quadrature (gpc.integrators.Exact(), the default) or gpc.integrators.MonteCarlo().")


def _orthant_probability(a: Float[Array, "N k"], S: Float[Array, "N k k"]) -> Float[Array, " N"]:
    """P(d > 0) for d ~ N(a, S) (:meth:`MultinomialProbit.predictive_class_probability`), batched.

    S = delta I + A A^T with delta the smallest eigenvalue and A (k, k - 1) the other eigenvectors scaled by
    sqrt(lambda - delta), in ascending order: the last column, the largest, by panels (:func:`_log_panels`),
    the other one (k = 3) by a Gauss-Legendre rule outside it.
    """
    k = a.shape[-1]
    if k == 1:
        return jax.scipy.stats.norm.cdf(a[:, 0] / jnp.sqrt(S[:, 0, 0]))
    lam, Q = jnp.linalg.eigh(S)
    delta = lam[:, :1]
    A = Q[:, :, 1:] * jnp.sqrt(jnp.maximum(lam[:, None, 1:] - delta[:, None], 0.0))  # (N, k, k - 1)
    scaled_a, scaled_A = a / jnp.sqrt(delta), A / jnp.sqrt(delta[:, :, None])
    if k == 2:
        return jnp.exp(_log_panels(scaled_a, scaled_A[:, :, -1], _GL_PANEL))
    nodes, weights = (jnp.asarray(v, a.dtype) for v in _GL_OUTER)  # k == 3: one outer dimension
    z = _Z * nodes
    log_w = jnp.log(_Z * weights) - 0.5 * z**2 - 0.5 * jnp.log(2.0 * jnp.pi)
    shifted = scaled_a[:, None, :] + z[None, :, None] * scaled_A[:, None, :, 0]
    inner = _log_panels(shifted, jnp.broadcast_to(scaled_A[:, None, :, -1], shifted.shape), _GL_INNER)
    return jnp.exp(logsumexp(jnp.asarray(log_w, a.dtype) + inner, axis=-1))


def _log_panels(a, slope, rule):
    """log int N(z) prod_j Phi(a_j + slope_j z) dz over [-_Z, _Z] (last axis j), by Gauss-Legendre ``rule`` on
    panels split at the points -a_j / slope_j where the factors turn: each panel integrates a smooth function."""
    nodes, weights = (jnp.asarray(x, a.dtype) for x in rule)
    steep = jnp.abs(slope) > 1e-12
    turns = jnp.where(steep, jnp.clip(-a / jnp.where(steep, slope, 1.0), -_Z, _Z), _Z)
    edge = jnp.full_like(turns[..., :1], _Z)
    edges = jnp.concatenate([-edge, jnp.sort(turns, axis=-1), edge], axis=-1)  # (..., k + 2)
    lo, hi = edges[..., :-1], edges[..., 1:]
    half = 0.5 * (hi - lo)
    z = half[..., None] * nodes + (0.5 * (hi + lo))[..., None]  # (..., k + 1, K)
    log_w = jnp.log(half[..., None] * weights) - 0.5 * z**2 - 0.5 * jnp.log(2.0 * jnp.pi)
    args = a[..., None, None, :] + z[..., None] * slope[..., None, None, :]
    log_f = jnp.sum(log_cdf_and_mills_ratio(args)[0], axis=-1)
    return logsumexp((log_w + log_f).reshape(*a.shape[:-1], -1), axis=-1)
