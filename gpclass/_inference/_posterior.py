"""The posteriors gpc.infer returns, and the typed solutions the methods compute them from.

A method's ``solve`` sees only the covariance matrix; it returns a
``GaussianSolution``, ``SoftmaxSolution`` or ``SampleSolution``, and
``solution.posterior(kernel, likelihood, X)`` adds what the method never sees.
"""

import dataclasses

import equinox as eqx
from jaxtyping import PyTree

from .._status import Status
from .._types import Array, Bool, Float, Int
from ..kernels import AbstractKernel
from ..likelihoods import AbstractLikelihood


class SolverInfo(eqx.Module):
    """Diagnostics of the inner solver.

    ``num_steps``: Newton steps (Laplace) or sweeps (EP) taken.  ``status``: a
    :class:`gpclass.Status` code (``CONVERGED``, ``STALLED``, ``MAX_STEPS`` or
    ``FAILED``); ``converged`` is ``status == CONVERGED``.  ``max_change``: the size of the last
    update, relative as in the convergence test: for Laplace the largest
    component of the last full Newton step in f, over 1 + max |f|; for EP the
    largest change of a site parameter (tau~ or nu~) in the last sweep, over
    1 + max |tau~| (resp. |nu~|).
    """

    num_steps: Int[Array, ""]
    status: Int[Array, ""]
    max_change: Float[Array, ""]

    @property
    def converged(self) -> Bool[Array, ""]:
        return self.status == Status.CONVERGED


class GaussianPosterior(eqx.Module):
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
    """

    kernel: AbstractKernel
    likelihood: AbstractLikelihood
    X: Float[Array, "n d"]
    alpha: Float[Array, " n"]
    sqrt_w: Float[Array, " n"]
    chol: Float[Array, "n n"]
    mean: Float[Array, " n"]
    log_marginal: Float[Array, ""]
    info: SolverInfo
    warm_start: PyTree[Array]


class SoftmaxPosterior(eqx.Module):
    """q(f|X, y) = N(F^, (K^-1 + W)^-1) for the C latent functions of a softmax model (GPML section 3.5).

    Latents are laid out as (n, C) arrays.  Predictions (GPML Algorithm 3.4)
    need ``alpha`` = y - pi^ (E[f*^c] = k_c*^T alpha^c, eq. 3.41), the blocks
    ``e_blocks`` E_c = D_c^1/2 (I + D_c^1/2 K_c D_c^1/2)^-1 D_c^1/2 of shape (C, n, n)
    and ``chol_sum_e``, the Cholesky factor M of sum_c E_c (eqs. 3.43, 3.47).
    ``log_marginal`` is eq. 3.44; ``warm_start`` is a = K^-1 F^ (n, C).
    """

    kernel: AbstractKernel
    likelihood: eqx.Module
    X: Float[Array, "n d"]
    alpha: Float[Array, "n C"]
    e_blocks: Float[Array, "C n n"]
    chol_sum_e: Float[Array, "n n"]
    mean: Float[Array, "n C"]
    log_marginal: Float[Array, ""]
    info: SolverInfo
    warm_start: PyTree[Array]


class SparsePosterior(eqx.Module):
    """q(f) for a sparse prior ``gpc.Sparse`` (FITC, VFE, power EP), in GPML's ``apxSparse`` predictive form.

    With a* = L_uu^-1 k(Z, x*) (L_uu L_uu^T = K_uu + jitter):
    E[f*] = k(x*, Z) ``alpha`` and V[f*] = k(x*, x*) - |a*|^2 + |``chol_u``^-1 a*|^2,
    where ``alpha`` = K_uu^-1 K_un a (a = K~^-1 mean) and ``chol_u`` is the factor of
    I + V D V^T at the solution (see ``gpclass._sparse``).  ``mean`` is the latent
    mean at the training inputs; ``log_marginal`` the method's approximation
    to log p(y|X, theta) under the sparse prior, differentiable with respect to
    the kernel, the inducing inputs and the likelihood.
    """

    kernel: eqx.Module
    likelihood: AbstractLikelihood
    X: Float[Array, "n d"]
    alpha: Float[Array, " m"]
    chol_uu: Float[Array, "m m"]
    chol_u: Float[Array, "m m"]
    mean: Float[Array, " n"]
    log_marginal: Float[Array, ""]
    info: SolverInfo
    warm_start: PyTree[Array]


class SparseSoftmaxPosterior(eqx.Module):
    """q(F) for a softmax likelihood under a sparse prior ``gpc.Sparse`` shared by the classes.

    With w* = L_uu^-1 k(Z, x*): E[f*^c] = k(x*, Z) ``alpha[:, c]`` and
    Cov[f*] = (k(x*, x*) - |w*|^2) I + W*^T H^-1 W*, W* = I_C (x) w*, where
    ``alpha`` = K_uu^-1 K_un (y - pi^) (m, C) and ``chol_h`` is the Cholesky
    factor of the Cm x Cm matrix H at the mode (``laplace_softmax_sparse``).
    ``mean`` is the mode F^ (n, C); ``warm_start`` a = K~^-1 F^.
    """

    kernel: eqx.Module
    likelihood: eqx.Module
    X: Float[Array, "n d"]
    alpha: Float[Array, "m C"]
    chol_uu: Float[Array, "m m"]
    chol_h: Float[Array, "Cm Cm"]
    mean: Float[Array, "n C"]
    log_marginal: Float[Array, ""]
    info: SolverInfo
    warm_start: PyTree[Array]


class SamplerInfo(eqx.Module):
    """Diagnostics of a sampling method.

    ``acceptance_rate``: the mean Metropolis acceptance probability (HMC; 1 for
    elliptical slice sampling, which always moves).  ``evaluations_per_step``:
    the mean number of likelihood evaluations per elliptical-slice step (NaN
    for HMC, which makes ``num_leapfrog`` gradient evaluations per step).
    ``status``: ``Status.CONVERGED`` when every sample (MCMC) or the estimate
    (AIS) is finite, else ``Status.FAILED``.
    """

    acceptance_rate: Float[Array, ""]
    evaluations_per_step: Float[Array, ""]
    status: Int[Array, ""]


class SamplePosterior(eqx.Module):
    """The latent posterior represented by (weighted) samples f_s, s = 1..S (MCMC or AIS).

    Predictions average over the samples (Kuss & Rasmussen section 6.1):
    p(f*|f_s) = N(k*^T K^-1 f_s, k** - k*^T K^-1 k*), and
    p(y*|x*) = sum_s w_s int p(y*|f*) p(f*|f_s) df* with w = softmax(log_weights)
    (equal weights for MCMC, the importance weights for AIS).  ``chol`` is the
    Cholesky factor of the (jittered) prior covariance the samples were drawn under.
    ``log_marginal`` is the AIS estimate of log p(y|X, theta) with its Monte
    Carlo standard error ``log_marginal_se`` (NaN for MCMC, which does not
    estimate it).
    """

    kernel: AbstractKernel
    likelihood: AbstractLikelihood
    X: Float[Array, "n d"]
    samples: Float[Array, "S n"]
    log_weights: Float[Array, " S"]
    chol: Float[Array, "n n"]
    log_marginal: Float[Array, ""]
    log_marginal_se: Float[Array, ""]
    info: SamplerInfo
    warm_start: PyTree[Array]


class _Solution(eqx.Module):
    """The fields of a posterior that a method computes from K (all but the kernel, likelihood and inputs)."""

    def _fields(self) -> dict:
        return {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}


class GaussianSolution(_Solution):
    """What a Gaussian method's ``solve`` returns: the fields of :class:`GaussianPosterior` computed from K."""

    alpha: Float[Array, " n"]
    sqrt_w: Float[Array, " n"]
    chol: Float[Array, "n n"]
    mean: Float[Array, " n"]
    log_marginal: Float[Array, ""]
    info: SolverInfo
    warm_start: PyTree[Array]

    def posterior(self, kernel, likelihood, X) -> GaussianPosterior:
        return GaussianPosterior(kernel=kernel, likelihood=likelihood, X=X, **self._fields())


class SoftmaxSolution(_Solution):
    """What multi-class Laplace's ``solve`` returns: the fields of :class:`SoftmaxPosterior` computed from K."""

    alpha: Float[Array, "n C"]
    e_blocks: Float[Array, "C n n"]
    chol_sum_e: Float[Array, "n n"]
    mean: Float[Array, "n C"]
    log_marginal: Float[Array, ""]
    info: SolverInfo
    warm_start: PyTree[Array]

    def posterior(self, kernel, likelihood, X) -> SoftmaxPosterior:
        return SoftmaxPosterior(kernel=kernel, likelihood=likelihood, X=X, **self._fields())


class SparseSolution(_Solution):
    """What a method's sparse ``solve`` returns: the fields of :class:`SparsePosterior` computed from K~."""

    alpha: Float[Array, " m"]
    chol_uu: Float[Array, "m m"]
    chol_u: Float[Array, "m m"]
    mean: Float[Array, " n"]
    log_marginal: Float[Array, ""]
    info: SolverInfo
    warm_start: PyTree[Array]

    def posterior(self, kernel, likelihood, X) -> SparsePosterior:
        return SparsePosterior(kernel=kernel, likelihood=likelihood, X=X, **self._fields())


class SparseSoftmaxSolution(_Solution):
    """What sparse multi-class Laplace returns: the fields of :class:`SparseSoftmaxPosterior` computed from K~."""

    alpha: Float[Array, "m C"]
    chol_uu: Float[Array, "m m"]
    chol_h: Float[Array, "Cm Cm"]
    mean: Float[Array, "n C"]
    log_marginal: Float[Array, ""]
    info: SolverInfo
    warm_start: PyTree[Array]

    def posterior(self, kernel, likelihood, X) -> SparseSoftmaxPosterior:
        return SparseSoftmaxPosterior(kernel=kernel, likelihood=likelihood, X=X, **self._fields())


class SampleSolution(_Solution):
    """What a sampling method's ``solve`` returns: the fields of :class:`SamplePosterior` computed from K."""

    samples: Float[Array, "S n"]
    log_weights: Float[Array, " S"]
    chol: Float[Array, "n n"]
    log_marginal: Float[Array, ""]
    log_marginal_se: Float[Array, ""]
    info: SamplerInfo
    warm_start: PyTree[Array]

    def posterior(self, kernel, likelihood, X) -> SamplePosterior:
        return SamplePosterior(kernel=kernel, likelihood=likelihood, X=X, **self._fields())
