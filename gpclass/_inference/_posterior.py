"""The posteriors gpc.infer returns; each predicts.

A method's ``solve`` sees only the prior covariance; it returns the posterior
of its kind with ``kernel``, ``likelihood`` and ``X`` unset (``None``), and
:func:`gpclass.infer` completes it with :meth:`AbstractPosterior.conditioned`
(a new object, never a mutation).  ``gpc.fit`` carries the incomplete one
through its loop.

Every posterior predicts in the same two ways: :meth:`latent` (the latent
predictive moments) and :meth:`predict` (class probabilities), which are
:func:`gpclass.predict_latent` and :func:`gpclass.predict` (the checked,
compiled entry points).  Those call the kind's own ``_latent`` and
``_probability``: the formulas of GPML Algorithms 3.2, 3.4 and 3.6, the
``apxSparse`` predictive form and the sample average of Kuss & Rasmussen.
"""

import dataclasses
import functools

import equinox as eqx
import jax
import jax.numpy as jnp
from jaxtyping import PyTree

from .. import _dense as dense
from .._covariance import DenseFactor, LowRankFactor
from .._covariance.dense_classes import ClassFactor
from .._covariance.low_rank_classes import LowRankClassFactor, block_diagonal
from .._exceptions import GPClassError
from .._linalg import latent_variance_reduction
from .._status import Status
from .._types import Array, Bool, Float, Int
from ..kernels import AbstractKernel
from ..likelihoods import AbstractLikelihood


class SolverInfo(eqx.Module):
    """Diagnostics of the inner solver.

    ``num_steps``: Newton steps (Laplace) or sweeps (EP) taken.  ``status``: a
    :class:`gpclass.Status` code (``CONVERGED``, ``STALLED``, ``MAX_STEPS``,
    ``FAILED`` or ``IMPRECISE``); ``converged`` is ``status == CONVERGED``.
    ``max_change``: the size of the last update, relative as in the
    convergence test: for Laplace the largest component of the last full
    Newton step in f, over 1 + max |f|; for EP the largest change of a site
    parameter (tau~ or nu~) in the last sweep, over 1 + max |tau~| (resp. |nu~|).

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> info = post.info
        >>> bool(info.converged), gpc.Status(int(info.status)).name, int(info.num_steps) > 0
        (True, 'CONVERGED', True)
    """

    num_steps: Int[Array, ""]
    status: Int[Array, ""]
    max_change: Float[Array, ""]

    @property
    def converged(self) -> Bool[Array, ""]:
        return self.status == Status.CONVERGED


class SamplerInfo(eqx.Module):
    """Diagnostics of a sampling method.

    ``acceptance_rate``: the mean Metropolis acceptance probability (HMC; 1 for
    elliptical slice sampling, which always moves).  ``evaluations_per_step``:
    the mean number of likelihood evaluations per elliptical-slice step (NaN
    for HMC, which makes ``num_leapfrog`` gradient evaluations per step).
    ``status``: ``Status.CONVERGED`` when every sample and its log-likelihood (MCMC) or the
    estimate (AIS) is finite, else ``Status.FAILED``.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> method = gpc.MCMC(num_samples=100, num_warmup=100, jitter=1e-3)  # jitter: X has repeated rows
        >>> post = gpc.infer(method, kernel, gpc.likelihoods.Logistic(), X, y, key=jax.random.key(0))
        >>> float(post.info.acceptance_rate)  # elliptical slice sampling always moves
        1.0
        >>> gpc.Status(int(post.info.status)).name
        'CONVERGED'
    """

    acceptance_rate: Float[Array, ""]
    evaluations_per_step: Float[Array, ""]
    status: Int[Array, ""]


class AbstractPosterior(eqx.Module):
    """What every posterior (and :class:`gpclass.SVGP`) offers: latent moments and class probabilities.

    A subclass implements ``_latent(X_test)`` (unchecked test inputs) and, if
    the default does not fit it, ``_probability``; ``num_latent`` is 1 for a
    binary likelihood and C for the softmax.

    Example:
        Every posterior predicts the same two ways.

        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> isinstance(post, gpc.AbstractPosterior), post.num_latent, post.input_dim
        (True, 1, 4)
        >>> mean, var = post.latent(X[:3])  # gpc.predict_latent(post, X[:3])
        >>> p = post.predict(X[:3])         # gpc.predict(post, X[:3])
        >>> mean.shape, var.shape, p.shape
        ((3,), (3,), (3,))
    """

    @property
    def num_latent(self) -> int:
        return getattr(self.likelihood, "num_latent", 1)

    @property
    def input_dim(self) -> int:
        """d, the number of input dimensions the posterior predicts at."""
        return self.X.shape[1]

    def latent(self, X_test):
        """The latent predictive moments at ``X_test``: :func:`gpclass.predict_latent` (checked, compiled)."""
        from .._predict import predict_latent

        return predict_latent(self, X_test)

    def predict(self, X_test, *, integrator=None, key: Array | None = None, approximation=None):
        """Class probabilities at ``X_test``: :func:`gpclass.predict` (checked, compiled)."""
        from .._predict import predict

        return predict(self, X_test, integrator=integrator, key=key, approximation=approximation)

    def conditioned(self, kernel, likelihood, X):
        """This posterior with the prior, the likelihood and the training inputs set (a new object)."""
        return dataclasses.replace(self, kernel=kernel, likelihood=likelihood, X=X)

    def _latent(self, X_test):
        raise NotImplementedError

    def _probability(self, X_test, integrator, key):
        """p(y* = +1) (m,) for one latent (the ordinal likelihood: (m, K)), E[softmax(f*)] (m, C) for C, by
        ``integrator`` (an ``AbstractIntegrator``: see :func:`gpclass.predict`)."""
        mean, var = self._latent(X_test)
        if self.num_latent > 1:
            return integrator.classes(self.likelihood, mean, var, key)
        return integrator.binary(self.likelihood, mean, var)

    def _probability_given(self, K_cross, prior_var, integrator, key):
        """p(y* = +1) for test latents given by their covariances with the training latents (``_latent_given``)."""
        return integrator.binary(self.likelihood, *self._latent_given(K_cross, prior_var))


class GaussianPosterior(AbstractPosterior):
    """q(f|X, y) = N(mean, (K^-1 + W)^-1) in GPML's {alpha, sW, L} form.

    Predictions at test inputs (GPML Algorithm 3.2 / 3.6) need only
    ``alpha`` (E[f*] = k*^T alpha), ``sqrt_w`` and ``chol`` (the Cholesky factor
    of B = I + W^1/2 K W^1/2: V[f*] = k** - |L^-1 W^1/2 k*|^2).  Laplace gives
    alpha = grad log p(y|f^) and W = -grad grad log p(y|f^); EP gives the site
    parameters.  ``log_marginal`` is the method's approximation to
    log p(y|X, theta), differentiable with respect to the kernel and likelihood.
    ``warm_start`` is the method's own state to start a later solve from
    (Laplace: a = K^-1 f^; EP: the site parameters), passed explicitly as
    ``gpc.infer(..., init=posterior.warm_start)``.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> isinstance(post, gpc.GaussianPosterior), post.mean.shape, post.chol.shape
        (True, (40,), (40, 40))
        >>> print(np.asarray(post.predict(X[:3])).round(2))
        [0.68 0.65 0.68]
        >>> again = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y, init=post.warm_start)
        >>> int(again.info.num_steps) <= 2  # started at the solution
        True
    """

    alpha: Float[Array, " n"]
    sqrt_w: Float[Array, " n"]
    chol: Float[Array, "n n"]
    mean: Float[Array, " n"]
    log_marginal: Float[Array, ""]
    info: SolverInfo
    warm_start: PyTree[Array]
    kernel: AbstractKernel | None = None
    likelihood: AbstractLikelihood | None = None
    X: Float[Array, "n d"] | None = None

    def _latent(self, X_test) -> tuple[Float[Array, " m"], Float[Array, " m"]]:
        """E[f*] = k*^T alpha (GPML eq. 3.21), V[f*] = k** - |L^-1 W^1/2 k*|^2 (eq. 3.24, Algorithm 3.2)."""
        return self._latent_given(self.kernel.gram(X_test, self.X), self.kernel.diag(X_test))

    def _latent_given(self, K_cross, prior_var):
        """The moments of test latents with covariances ``K_cross`` (m, n) with the training latents and prior
        variances ``prior_var`` (m,): :meth:`_latent`'s formulas, for any linear functionals of the GP
        (``PreferencePosterior``'s utilities and their differences)."""
        return K_cross @ self.alpha, prior_var - latent_variance_reduction(self.chol, self.sqrt_w, K_cross)


class SoftmaxPosterior(AbstractPosterior):
    """q(f|X, y) = N(F^, (K^-1 + W)^-1) for the C latent functions of a softmax model (GPML section 3.5).

    Latents are laid out as (n, C) arrays.  Predictions (GPML Algorithm 3.4)
    need ``alpha`` = y - pi^ (E[f*^c] = k_c*^T alpha^c, eq. 3.41), the blocks
    ``e_blocks`` E_c = D_c^1/2 (I + D_c^1/2 K_c D_c^1/2)^-1 D_c^1/2 of shape (C, n, n)
    and ``chol_sum_e``, the Cholesky factor M of sum_c E_c (eqs. 3.43, 3.47).
    ``log_marginal`` is eq. 3.44; ``warm_start`` is a = K^-1 F^ (n, C).

    ``gpc.KL()``'s q(F) = prod_c N(m_c, (K_c^-1 + diag(tau~_c))^-1) has the same form with D_c = diag(tau~_c),
    ``alpha`` = K^-1 m and no coupling between the classes (``chol_sum_e`` is None): Cov[f*] is diagonal,
    k_c(x*, x*) - k_c*^T E_c k_c* (GPML eq. 3.24 per class).

    Nested EP for ``gpc.likelihoods.MultinomialProbit`` returns the same form (its site precisions are the
    softmax's W with unnormalised pi, ``_inference/ep_classes.py``): there ``alpha`` = K^-1 mu, ``mean`` mu,
    ``log_marginal`` log Z_EP and ``warm_start`` the inner sites.

    Example:
        >>> X, y = gpc.datasets.load("vehicle"); X, y = gpc.datasets.standardize(X[:40, :4]), y[:40]  # 4 classes
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Softmax(4), X, y)
        >>> isinstance(post, gpc.SoftmaxPosterior), post.mean.shape
        (True, (40, 4))
        >>> mean, cov = post.latent(X[:3])
        >>> mean.shape, cov.shape
        ((3, 4), (3, 4, 4))
        >>> p = post.predict(X[:3], key=jax.random.key(0))  # Monte Carlo average of the softmax
        >>> p_mf = post.predict(X[:3], integrator=gpc.integrators.MeanField())  # deterministic
        >>> p.shape, bool(jnp.allclose(p.sum(axis=1), 1.0)), bool(jnp.allclose(p, p_mf, atol=0.05))
        ((3, 4), True, True)
    """

    alpha: Float[Array, "n C"]
    e_blocks: Float[Array, "C n n"]
    chol_sum_e: Float[Array, "n n"] | None
    mean: Float[Array, "n C"]
    log_marginal: Float[Array, ""]
    info: SolverInfo
    warm_start: PyTree[Array]
    kernel: AbstractKernel | None = None
    likelihood: eqx.Module | None = None
    X: Float[Array, "n d"] | None = None

    def _latent(self, X_test) -> tuple[Float[Array, "m C"], Float[Array, "m C C"]]:
        """GPML Algorithm 3.4, lines 8-16, for all test points at once.

        mean_c = k_c*^T (y^c - pi^c)                                   (eq. 3.41)
        cov_cc' = delta_cc' (k_c(x*, x*) - k_c*^T E_c k_c*) + b_c^T (sum_c E_c)^-1 b_c',  b_c = E_c k_c*
                                                                       (eq. 3.43 with eq. 3.47)
        """
        E, M, alpha = self.e_blocks, self.chol_sum_e, self.alpha
        K_cross = self.kernel.gram(X_test, self.X)  # (m, n) shared, (C, m, n) per class
        prior_var = self.kernel.diag(X_test)  # (m,) or (C, m)
        if K_cross.ndim == 2:
            mean = K_cross @ alpha
            b = jnp.einsum("cij,mj->cim", E, K_cross)
            quad = jnp.einsum("mi,cim->mc", K_cross, b)
            prior_var = prior_var[:, None]
        else:
            mean = jnp.einsum("cmi,ic->mc", K_cross, alpha)
            b = jnp.einsum("cij,cmj->cim", E, K_cross)
            quad = jnp.einsum("cmi,cim->mc", K_cross, b)
            prior_var = prior_var.T
        num_classes, n, m = b.shape
        diag = prior_var - quad
        if M is None:  # independent classes (KL's per-class q): no coupling term
            return mean, diag[:, :, None] * jnp.eye(num_classes, dtype=diag.dtype)
        v = dense.solve_triangular(M, jnp.moveaxis(b, 0, 1).reshape(n, num_classes * m), lower=True)
        v = v.reshape(n, num_classes, m)
        cov = jnp.einsum("icm,idm->mcd", v, v)
        return mean, cov + diag[:, :, None] * jnp.eye(num_classes, dtype=cov.dtype)


class SparsePosterior(AbstractPosterior):
    """q(f) for a sparse prior ``gpc.Sparse`` (FITC, VFE, power EP), in GPML's ``apxSparse`` predictive form.

    With a* = L_uu^-1 k(Z, x*) (L_uu L_uu^T = K_uu + jitter):
    E[f*] = k(x*, Z) ``alpha`` and V[f*] = k(x*, x*) - |a*|^2 + |``chol_u``^-1 a*|^2,
    where ``alpha`` = K_uu^-1 K_un a (a = K~^-1 mean) and ``chol_u`` is the factor of
    I + V D V^T at the solution (see ``gpclass._sparse``).  ``mean`` is the latent
    mean at the training inputs; ``log_marginal`` the method's approximation
    to log p(y|X, theta) under the sparse prior, differentiable with respect to
    the kernel, the inducing inputs and the likelihood.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> prior = gpc.Sparse(kernel, X[:10])  # FITC with 10 inducing inputs
        >>> post = gpc.infer(gpc.Laplace(), prior, gpc.likelihoods.Logistic(), X, y)
        >>> isinstance(post, gpc.SparsePosterior), post.alpha.shape  # weights on the inducing inputs
        (True, (10,))
        >>> print(np.asarray(post.predict(X[:3])).round(2))
        [0.68 0.65 0.68]
    """

    alpha: Float[Array, " m"]
    chol_uu: Float[Array, "m m"]
    chol_u: Float[Array, "m m"]
    mean: Float[Array, " n"]
    log_marginal: Float[Array, ""]
    info: SolverInfo
    warm_start: PyTree[Array]
    kernel: eqx.Module | None = None
    likelihood: AbstractLikelihood | None = None
    X: Float[Array, "n d"] | None = None

    def _latent(self, X_test) -> tuple[Float[Array, " m"], Float[Array, " m"]]:
        """E[f*] = k(x*, Z) alpha and V[f*] = k(x*, x*) - |a*|^2 + |L_u^-1 a*|^2, a* = L_uu^-1 k(Z, x*).

        This is k** - Q_*n (K~ + W^-1)^-1 Q_n* (GPML ``gp.m`` with ``apxSparse``:
        the test point's prior variance is k(x*, x*) itself, for every approximation).
        """
        sparse = self.kernel
        K_cross = sparse.kernel.gram(X_test, sparse.inducing)
        a = dense.solve_triangular(self.chol_uu, K_cross.T, lower=True)
        b = dense.solve_triangular(self.chol_u, a, lower=True)
        var = sparse.kernel.diag(X_test) - jnp.sum(a**2, axis=0) + jnp.sum(b**2, axis=0)
        return K_cross @ self.alpha, var


class SparseSoftmaxPosterior(AbstractPosterior):
    """q(F) for a softmax likelihood under a sparse prior ``gpc.Sparse`` shared by the classes.

    With w* = L_uu^-1 k(Z, x*): E[f*^c] = k(x*, Z) ``alpha[:, c]`` and
    Cov[f*] = (k(x*, x*) - |w*|^2) I + W*^T H^-1 W*, W* = I_C (x) w*, where
    ``alpha`` = K_uu^-1 K_un (y - pi^) (m, C) and ``chol_h`` is the Cholesky
    factor of the Cm x Cm matrix H at the mode (``_covariance.low_rank_classes``).
    ``mean`` is the mode F^ (n, C); ``warm_start`` a = K~^-1 F^.

    Example:
        >>> X, y = gpc.datasets.load("vehicle"); X, y = gpc.datasets.standardize(X[:40, :4]), y[:40]  # 4 classes
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> prior = gpc.Sparse(kernel, X[:10])  # the classes share the inducing inputs
        >>> post = gpc.infer(gpc.Laplace(), prior, gpc.likelihoods.Softmax(4), X, y)
        >>> isinstance(post, gpc.SparseSoftmaxPosterior), post.alpha.shape
        (True, (10, 4))
        >>> p = post.predict(X[:3], integrator=gpc.integrators.MeanField())
        >>> p.shape, bool(jnp.allclose(p.sum(axis=1), 1.0))
        ((3, 4), True)
    """

    alpha: Float[Array, "m C"]
    chol_uu: Float[Array, "m m"]
    chol_h: Float[Array, "Cm Cm"]
    mean: Float[Array, "n C"]
    log_marginal: Float[Array, ""]
    info: SolverInfo
    warm_start: PyTree[Array]
    kernel: eqx.Module | None = None
    likelihood: eqx.Module | None = None
    X: Float[Array, "n d"] | None = None

    def _latent(self, X_test):
        """E[f*^c] = k(x*, Z) alpha^c and Cov[f*] = (k** - |w*|^2) I + W*^T H^-1 W*, W* = I_C (x) w*.

        w* = L_uu^-1 k(Z, x*) (``_covariance.low_rank_classes``): with G = L_H^-1 W*
        (a triangular solve with C m right-hand sides per test point), the second
        term is G^T G.  Memory O(C^2 m) per test point: predict large sets in batches.
        """
        sparse = self.kernel
        K_cross = sparse.kernel.gram(X_test, sparse.inducing)  # (M, m)
        w = dense.solve_triangular(self.chol_uu, K_cross.T, lower=True)  # (m, M)
        num_classes = self.alpha.shape[1]
        m, num_test = w.shape
        eye = jnp.eye(num_classes, dtype=w.dtype)
        W_star = (eye[:, None, None, :] * w[None, :, :, None]).reshape(num_classes * m, num_test * num_classes)
        G = dense.solve_triangular(self.chol_h, W_star, lower=True).reshape(num_classes * m, num_test, num_classes)
        cov = jnp.einsum("kmc,kmd->mcd", G, G)
        diag = sparse.kernel.diag(X_test) - jnp.sum(w**2, axis=0)
        return K_cross @ self.alpha, cov + diag[:, None, None] * eye


class SamplePosterior(AbstractPosterior):
    """The latent posterior represented by (weighted) samples f_s, s = 1..S (MCMC or AIS).

    Predictions average over the samples (Kuss & Rasmussen section 6.1):
    p(f*|f_s) = N(k*^T K^-1 f_s, k** - k*^T K^-1 k*), and
    p(y*|x*) = sum_s w_s int p(y*|f*) p(f*|f_s) df* with w = softmax(log_weights)
    (equal weights for MCMC, the importance weights for AIS).  ``chol`` is the
    Cholesky factor of the (jittered) prior covariance the samples were drawn under.
    ``log_marginal`` is the AIS estimate of log p(y|X, theta) with its Monte
    Carlo standard error ``log_marginal_se`` (NaN for MCMC, which does not
    estimate it).

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> method = gpc.MCMC(num_samples=100, num_warmup=100, jitter=1e-3)  # jitter: X has repeated rows
        >>> post = gpc.infer(method, kernel, gpc.likelihoods.Logistic(), X, y, key=jax.random.key(0))
        >>> isinstance(post, gpc.SamplePosterior), post.samples.shape, post.log_weights.shape
        (True, (400, 40), (400,))
        >>> p = post.predict(X[:3])  # the average over the samples
        >>> p.shape, bool(jnp.all((p > 0) & (p < 1)))
        ((3,), True)
    """

    samples: Float[Array, "S n"]
    log_weights: Float[Array, " S"]
    chol: Float[Array, "n n"]
    log_marginal: Float[Array, ""]
    log_marginal_se: Float[Array, ""]
    info: SamplerInfo
    warm_start: PyTree[Array]
    kernel: AbstractKernel | None = None
    likelihood: AbstractLikelihood | None = None
    X: Float[Array, "n d"] | None = None

    def _latent(self, X_test):
        return self._latent_given(self.kernel.gram(X_test, self.X), self.kernel.diag(X_test))

    def _latent_given(self, K_cross, prior_var):
        """The mean and variance of the mixture sum_s w_s p(f*|f_s) (:meth:`_conditionals`), for test latents
        with covariances ``K_cross`` (m, n) with the training latents and prior variances ``prior_var``."""
        weights, means, var = self._conditionals(K_cross, prior_var)
        mean = weights @ means
        return mean, var + weights @ (means - mean) ** 2

    def _probability(self, X_test, integrator, key):
        return self._probability_given(self.kernel.gram(X_test, self.X), self.kernel.diag(X_test), integrator, key)

    def _probability_given(self, K_cross, prior_var, integrator, key):
        """sum_s w_s int p(y* = +1|f*) p(f*|f_s) df*, each as for a Gaussian posterior (by ``integrator``)."""
        weights, means, var = self._conditionals(K_cross, prior_var)
        # (S, m), or (S, m, K) for the ordinal likelihood's K class probabilities
        return jnp.tensordot(weights, integrator.binary(self.likelihood, means, jnp.broadcast_to(var, means.shape)),
                             axes=1)

    def _conditionals(self, K_cross, prior_var):
        """p(f*|f_s) = N(k*^T K^-1 f_s, k** - k*^T K^-1 k*) for every sample (GPML eqs. 2.19 / 3.21 with f known),
        with k* the rows of ``K_cross`` and k** = ``prior_var``.

        Returns the normalised sample weights (S,), the conditional means (S, m)
        and the common conditional variance (m,).
        """
        V = dense.solve_triangular(self.chol, K_cross.T, lower=True)  # L^-1 k*
        G = dense.solve_triangular(self.chol, self.samples.T, lower=True)  # L^-1 f_s = g_s
        var = prior_var - jnp.sum(V**2, axis=0)
        return jax.nn.softmax(self.log_weights), G.T @ V, var


class SoftmaxSamplePosterior(SamplePosterior):
    """The latent posterior of a softmax model represented by (weighted) samples F_s (S, n, C) (MCMC or AIS).

    Each sample's latents are whitened per class: ``chol`` is the Cholesky factor of the (jittered) prior
    covariance shared by the classes (n, n), or one per class (C, n, n) for a ``PerClass`` kernel.
    Predictions (Kuss & Rasmussen section 6.1, class by class): p(f*^c | F_s) = N(k_c*^T K_c^-1 f_s^c,
    k_c** - k_c*^T K_c^-1 k_c*), independent across classes given F_s, and
    p(y* | x*) = sum_s w_s E[softmax(f*) | F_s], averaged by the integrator over the mixture
    (``integrator.mixture_classes``).

    Example:
        >>> X, y = gpc.datasets.load("vehicle"); X, y = gpc.datasets.standardize(X[:40, :4]), y[:40]  # 4 classes
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> method = gpc.MCMC(num_samples=100, num_warmup=100)
        >>> post = gpc.infer(method, kernel, gpc.likelihoods.Softmax(4), X, y, key=jax.random.key(0))
        >>> isinstance(post, gpc.SoftmaxSamplePosterior), post.samples.shape
        (True, (400, 40, 4))
        >>> p = post.predict(X[:3], integrator=gpc.integrators.MeanField())
        >>> p.shape, bool(jnp.allclose(p.sum(axis=1), 1.0))
        ((3, 4), True)
    """

    samples: Float[Array, "S n C"]
    chol: Float[Array, "*C n n"]

    def _latent(self, X_test):
        """The mean (m, C) and covariance (m, C, C) of the mixture sum_s w_s p(f*|F_s): the conditional variances
        on the diagonal plus the samples' spread of the conditional means."""
        weights, means, var = self._conditionals(self.kernel.gram(X_test, self.X), self.kernel.diag(X_test))
        mean = jnp.tensordot(weights, means, axes=1)
        centred = means - mean
        spread = jnp.einsum("s,smc,smd->mcd", weights, centred, centred)
        return mean, spread + var[:, :, None] * jnp.eye(mean.shape[1], dtype=mean.dtype)

    def _probability(self, X_test, integrator, key):
        weights, means, var = self._conditionals(self.kernel.gram(X_test, self.X), self.kernel.diag(X_test))
        return integrator.mixture_classes(self.likelihood, weights, means, var, key)

    def _conditionals(self, K_cross, prior_var):
        """p(f*^c|F_s) for every sample and class: the weights (S,), conditional means (S, m, C) and variances
        (m, C), from ``K_cross`` (m, n) shared or (C, m, n) per class and ``prior_var`` (m,) or (C, m)."""
        num_classes = self.samples.shape[-1]
        n = self.samples.shape[1]
        chol = self.chol if self.chol.ndim == 3 else jnp.broadcast_to(self.chol, (num_classes, n, n))
        if K_cross.ndim == 2:
            K_cross = jnp.broadcast_to(K_cross, (num_classes, *K_cross.shape))
            prior_var = jnp.broadcast_to(prior_var, (num_classes, prior_var.shape[0]))

        def per_class(L, k_cross, k_star, F):
            V = dense.solve_triangular(L, k_cross.T, lower=True)  # L_c^-1 k_c*
            G = dense.solve_triangular(L, F.T, lower=True)  # L_c^-1 f_s^c
            return G.T @ V, k_star - jnp.sum(V**2, axis=0)

        means, var = jax.vmap(per_class, in_axes=(0, 0, 0, 2), out_axes=(2, 1))(chol, K_cross, prior_var,
                                                                             self.samples)
        return jax.nn.softmax(self.log_weights), means, var


def sample_posterior(*, samples, **fields) -> SamplePosterior:
    """The posterior of samples of the latents: (S, n) for one latent function, (S, n, C) for the softmax."""
    return (SamplePosterior if samples.ndim == 2 else SoftmaxSamplePosterior)(samples=samples, **fields)


def gaussian_posterior(op, factor, *, alpha, mean, log_marginal, info, warm_start) -> AbstractPosterior:
    """The predictive form of a Gaussian posterior q(f) = N(mean, (K^-1 + W)^-1) under the prior ``op``.

    ``factor`` is the prior's factorisation at W (``op.factor(w)``, or ``op.class_factor(pi)`` for the
    softmax) and ``alpha`` = K^-1 mean, the predictive weights.  The form is the factor's: GPML's
    {alpha, W^1/2, L} for a kernel's K (:class:`GaussianPosterior`), section 3.5's blocks for the
    softmax (:class:`SoftmaxPosterior`), ``apxSparse``'s weights on the inducing inputs for a sparse
    prior (:class:`SparsePosterior`, :class:`SparseSoftmaxPosterior`).
    """
    return _form(factor, op, alpha=alpha, mean=mean, log_marginal=log_marginal, info=info, warm_start=warm_start)


@functools.singledispatch
def _form(factor, op, **fields) -> AbstractPosterior:
    raise GPClassError(f"no Gaussian posterior form for a factorisation of type {type(factor).__name__}.")


@_form.register
def _(factor: DenseFactor, op, *, alpha, **fields):
    return GaussianPosterior(alpha=alpha, sqrt_w=factor.sqrt_w, chol=factor.chol, **fields)


@_form.register
def _(factor: ClassFactor, op, *, alpha, **fields):
    return SoftmaxPosterior(alpha=alpha, e_blocks=factor.E, chol_sum_e=factor.M, **fields)


@_form.register
def _(factor: LowRankFactor, op, *, alpha, **fields):
    return SparsePosterior(alpha=op.inducing_weights(alpha), chol_uu=op.chol_uu, chol_u=factor.chol, **fields)


@_form.register
def _(factor: LowRankClassFactor, op, *, alpha, **fields):
    return SparseSoftmaxPosterior(alpha=op.inducing_weights(alpha), chol_uu=op.chol_uu, chol_h=factor.chol_h,
                                  **fields)


def per_class_gaussian_posterior(op, factors, *, alpha, mean, log_marginal, info, warm_start) -> AbstractPosterior:
    """The predictive form of q(F) = prod_c N(mean_c, (K_c^-1 + W_c)^-1), independent classes with diagonal W_c.

    ``factors`` are the C classes' factorisations ``op_c.factor(w_c)`` stacked along axis 0 (``jax.vmap``),
    ``alpha`` = K^-1 mean and ``mean`` of shape (n, C).  The form is the softmax's: a
    :class:`SoftmaxPosterior` without coupling for a kernel's K, a :class:`SparseSoftmaxPosterior` whose H is
    block diagonal (blocks I + Phi^T D_c Phi) for a sparse prior.
    """
    return _class_form(factors, op, alpha=alpha, mean=mean, log_marginal=log_marginal, info=info,
                       warm_start=warm_start)


@functools.singledispatch
def _class_form(factors, op, **fields) -> AbstractPosterior:
    raise GPClassError(f"no per-class Gaussian posterior form for a factorisation of type {type(factors).__name__}.")


@_class_form.register
def _(factors: DenseFactor, op, *, alpha, **fields):
    def e_block(sqrt_w, chol):  # E_c = W_c^1/2 B_c^-1 W_c^1/2 = (K_c + W_c^-1)^-1
        V = dense.solve_triangular(chol, jnp.diag(sqrt_w), lower=True)
        return V.T @ V

    return SoftmaxPosterior(alpha=alpha, e_blocks=jax.vmap(e_block)(factors.sqrt_w, factors.chol), chol_sum_e=None,
                            **fields)


@_class_form.register
def _(factors: LowRankFactor, op, *, alpha, **fields):
    return SparseSoftmaxPosterior(alpha=op.inducing_weights(alpha), chol_uu=op.chol_uu,
                                  chol_h=block_diagonal(factors.chol), **fields)
