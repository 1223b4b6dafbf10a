"""Markov chain Monte Carlo on the latent posterior p(f|y, X, theta) ~ p(y|f) N(f|0, K) (Kuss & Rasmussen section 6.1).

The gold standard the Gaussian approximations are judged against: exact in the
limit of long runs, for one latent function and for the softmax's C (the (n, C)
latents, whitened per class).  Chains run on whitened latents g = L^-1 f (K = L L^T),
with elliptical slice sampling (default: no tuning, always moves) or hybrid
Monte Carlo as Kuss & Rasmussen did; ``lax.scan`` drives each chain and
``vmap`` runs the chains together.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .._exceptions import GPClassError
from .._progress import as_progress, due, every_for, report
from .._status import Status, finite_status
from .._validation import require_setting
from ._base import AbstractInference
from ._posterior import SamplerInfo, sample_posterior
from ._samplers import (
    AbstractSampler,
    EllipticalSlice,
    acceptance_summary,
    colour,
    colour_one,
    latent_shape,
    prior_factor,
)


class MCMC(AbstractInference):
    """Samples of f from its exact posterior.

    Attributes:
        sampler: the Markov kernel: ``gpc.samplers.EllipticalSlice()`` (Murray, Adams & MacKay 2010;
            the default) or ``gpc.samplers.HMC(step_size=0.1, num_leapfrog=20)``.
        num_samples: samples kept per chain.
        num_warmup: steps discarded at the start of each chain.  Chains start
            at f = 0, the prior mean, or at ``gpc.infer(..., init=g0)`` with g0
            of shape (num_chains, n) ((num_chains, n, C) for ``Softmax(C)``) in whitened
            coordinates g = L^-1 f, e.g. an AIS result's ``warm_start`` (approximate posterior draws).
        num_chains: independent chains, run with ``vmap``.
        thin: keep every ``thin``-th step.
        jitter: ``jitter * mean(diag K)`` is added to the diagonal of K before
            whitening (the samples and the predictions use the same jittered prior).
        progress: ``None`` (silent), ``True`` (a line on stderr at most every
            0.5 s), a callable ``progress(info)`` or ``gpc.Progress(...)``:
            about 100 reports per chain by default, ``info`` with ``task``
            ("MCMC"), ``step`` (warm-up steps, then kept samples, counted
            together), ``num_steps`` (num_warmup + num_samples),
            ``log_likelihood`` (the chain's log p(y|f) now), ``done``.  The
            chains are vmapped: each report comes once per chain.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> method = gpc.MCMC(num_samples=100, num_warmup=100, jitter=1e-3)  # jitter: X has repeated rows
        >>> post = gpc.infer(method, kernel, gpc.likelihoods.Logistic(), X, y, key=jax.random.key(0))
        >>> post.samples.shape  # (num_chains * num_samples, n): four chains by default
        (400, 40)
        >>> laplace = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> bool(jnp.allclose(gpc.predict(post, X[:3]), gpc.predict(laplace, X[:3]), atol=0.05))
        True
    """

    sampler: AbstractSampler = EllipticalSlice()
    num_samples: int = eqx.field(static=True, default=1000)
    num_warmup: int = eqx.field(static=True, default=500)
    num_chains: int = eqx.field(static=True, default=4)
    thin: int = eqx.field(static=True, default=1)
    jitter: float = eqx.field(static=True, default=1e-10)
    progress: object = eqx.field(static=True, default=None)
    multiclass = True  # Softmax(C): chains on the (n, C) latents, whitened per class

    def __check_init__(self):
        for name, low in (("num_samples", 1), ("num_warmup", 0), ("num_chains", 1), ("thin", 1)):
            require_setting("MCMC", name, getattr(self, name), low=low, low_open=False, integer=True)
        require_setting("MCMC", "jitter", self.jitter, low_open=False)

    def check_ml2(self):
        raise GPClassError(
            "MCMC gives samples of f, not a differentiable log marginal likelihood; fit the hyperparameters with "
            "gpc.Laplace() or gpc.EP(), and use gpc.AIS() to estimate log p(y|X, theta) at fixed hyperparameters."
        )

    def solve_matrix(self, K, likelihood, y, init=None, key=None):
        if key is None:
            raise GPClassError("MCMC needs an explicit PRNG key: gpc.infer(gpc.MCMC(), ..., key=jax.random.key(0)).")
        L = prior_factor(K, self.jitter)
        latent = latent_shape(K, likelihood)

        def log_likelihood(g):
            return jnp.sum(likelihood.log_prob(y, colour_one(L, g)))

        kernel_init, kernel_step = self.sampler.build(log_likelihood)
        shape = (self.num_chains, *latent)
        start = jnp.zeros(shape, K.dtype) if init is None else jnp.asarray(init, K.dtype)
        if start.shape != shape:
            names = "(num_chains, n)" if len(latent) == 1 else "(num_chains, n, C)"
            raise GPClassError(f"MCMC init must have shape {names} = {shape} (whitened latents); got "
                               f"{start.shape}.")

        progress = as_progress(self.progress)
        total = self.num_warmup + self.num_samples
        every = None if progress is None else every_for(progress, total, default_reports=100)

        def reported(state, step):
            report(progress, "MCMC", due(step, every, step == total), step, step == total, total=total,
                   log_likelihood=state.log_likelihood)
            return state

        def chain(key, g0):
            key_warmup, key_samples = jax.random.split(key)

            def advance(state, key):
                return kernel_step(key, state)

            def warmup(state, key_and_step):
                state, info = advance(state, key_and_step[0])
                return reported(state, key_and_step[1]), info

            steps = jnp.arange(1, total + 1)
            state, _ = lax.scan(warmup, kernel_init(g0), (jax.random.split(key_warmup, self.num_warmup),
                                                          steps[:self.num_warmup]))

            def keep(state, key_and_step):
                state, info = lax.scan(advance, state, jax.random.split(key_and_step[0], self.thin))
                return reported(state, key_and_step[1]), (state.position, info, state.log_likelihood)

            state, (positions, info, log_likelihoods) = lax.scan(
                keep, state, (jax.random.split(key_samples, self.num_samples), steps[self.num_warmup:]))
            return positions, info, log_likelihoods, state.position

        positions, info, log_likelihoods, last = jax.vmap(chain)(jax.random.split(key, self.num_chains), start)
        samples = colour(L, positions.reshape(-1, *latent))
        # A kept sample where log p(y|f) is -inf has posterior density zero: a chain that never entered the
        # likelihood's support (a step likelihood from f = 0) stays put and would pass for a posterior.
        status = jnp.where(jnp.all(jnp.isfinite(log_likelihoods)), finite_status(samples), Status.FAILED)
        # A chain whose kept samples are all one point (HMC rejecting every proposal) gives its start, not draws.
        status = jnp.where((status == Status.CONVERGED) & _a_chain_stood_still(positions), Status.STALLED, status)
        acceptance, evaluations = acceptance_summary(info)
        nan = jnp.asarray(jnp.nan, K.dtype)
        return sample_posterior(
            samples=samples,
            log_weights=jnp.zeros(samples.shape[0], K.dtype),
            chol=L,
            log_marginal=nan,
            log_marginal_se=nan,
            info=SamplerInfo(
                acceptance_rate=acceptance, evaluations_per_step=evaluations, status=status.astype(jnp.int32)
            ),
            warm_start=lax.stop_gradient(last),
        )


def _a_chain_stood_still(positions) -> jax.Array:
    """Whether some chain's kept positions (num_chains, num_samples, ...) are all equal, with two or more kept."""
    if positions.shape[1] < 2:
        return jnp.asarray(False)
    still = jnp.all((positions == positions[:, :1]).reshape(positions.shape[0], -1), axis=1)
    return jnp.any(still)
