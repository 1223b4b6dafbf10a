"""The Gaussian posterior form every approximate inference method returns."""

import equinox as eqx
from jaxtyping import PyTree

from .._types import Array, Bool, Float, Int
from ..kernels import AbstractKernel
from ..likelihoods import AbstractLikelihood


class SolverInfo(eqx.Module):
    """Diagnostics of the inner solver.

    ``num_steps``: Newton steps (Laplace) or sweeps (EP) taken.  ``converged``:
    whether the tolerance was met.  ``max_change``: the size of the last
    update, relative as in the convergence test: for Laplace the largest
    component of the last full Newton step in f, over 1 + max |f|; for EP the
    largest change of a site parameter (tau~ or nu~) in the last sweep, over
    1 + max |tau~| (resp. |nu~|).
    """

    num_steps: Int[Array, ""]
    converged: Bool[Array, ""]
    max_change: Float[Array, ""]


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
