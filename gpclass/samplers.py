"""Markov chain kernels on whitened GP latents, as pure ``(init, step)`` pairs (blackjax style).

``elliptical_slice(log_likelihood, temperature=1.0)`` and
``hmc(log_likelihood, step_size=..., num_leapfrog=..., temperature=1.0)`` target
L(g)^temperature N(g | 0, I); with g = L^-1 f and log_likelihood(g) =
log p(y | L g) that is the GP classification posterior.  ``gpc.MCMC`` and
``gpc.AIS`` drive them, configured by ``EllipticalSlice()`` or ``HMC(step_size=..., num_leapfrog=...)``
(``gpc.MCMC(sampler=gpc.samplers.HMC(step_size=0.05))``); use the functions directly for custom schedules::

    init, step = gpc.samplers.elliptical_slice(lambda g: jnp.sum(lik.log_prob(y, L @ g)))
    state = init(jnp.zeros(n))
    state, infos = jax.lax.scan(lambda s, k: step(k, s), state, jax.random.split(key, 1000))
"""

from ._inference._samplers import (
    HMC,
    AbstractSampler,
    EllipticalSlice,
    HMCInfo,
    HMCState,
    SliceInfo,
    SliceState,
    elliptical_slice,
    hmc,
)

__all__ = ["AbstractSampler", "EllipticalSlice", "HMC", "HMCInfo", "HMCState", "SliceInfo", "SliceState",
           "elliptical_slice", "hmc"]
