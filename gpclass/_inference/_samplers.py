"""Markov chain kernels for targets L(g)^tau N(g | 0, I) on whitened latents g = L^-1 f.

With K = L L^T, the GP posterior p(f|y) ~ p(y|f) N(f|0, K) becomes
p(g|y) ~ p(y|L g) N(g|0, I) (Kuss & Rasmussen section 6.1: whitening removes
the prior correlations that slow samplers down).  Each kernel is a pair of
pure functions in the blackjax style, ``init(position) -> state`` and
``step(key, state) -> (state, info)``; the caller drives them with
``lax.scan`` and runs many chains with ``vmap``.  ``temperature`` tau in
[0, 1] tempers the likelihood, as annealed importance sampling needs.
"""

import abc
from collections.abc import Callable
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax

from .. import _dense as dense
from .._errors import error_if
from .._types import Array, Float
from .._validation import require_setting


class SliceState(NamedTuple):
    """The state of an elliptical slice chain (:func:`elliptical_slice`): the whitened latents and their
    log-likelihood.

    Example::

        >>> init, step = gpc.samplers.elliptical_slice(lambda g: -jnp.sum((g - 1.0) ** 2))
        >>> state = init(jnp.zeros(3))
        >>> state.position.shape, float(state.log_likelihood)
        ((3,), -3.0)
    """

    position: Float[Array, " n"]
    log_likelihood: Float[Array, ""]  # the untempered log L(position)


class SliceInfo(NamedTuple):
    """What one elliptical slice step did: the likelihood evaluations it took (1: the first proposal was
    accepted; the step always moves).

    Example::

        >>> init, step = gpc.samplers.elliptical_slice(lambda g: -jnp.sum((g - 1.0) ** 2))
        >>> state, info = step(jax.random.key(0), init(jnp.zeros(3)))
        >>> int(info.num_evaluations) >= 1
        True
    """

    num_evaluations: Array  # likelihood evaluations in the step (1: the first proposal was accepted)


class HMCState(NamedTuple):
    """The state of a hybrid Monte Carlo chain (:func:`hmc`): the whitened latents, their log-likelihood and
    its gradient.

    Example::

        >>> init, step = gpc.samplers.hmc(lambda g: -jnp.sum((g - 1.0) ** 2), step_size=0.1, num_leapfrog=10)
        >>> state = init(jnp.zeros(3))
        >>> print(state.grad_log_likelihood)  # 2 (1 - g) at g = 0
        [2. 2. 2.]
    """

    position: Float[Array, " n"]
    log_likelihood: Float[Array, ""]  # the untempered log L(position)
    grad_log_likelihood: Float[Array, " n"]


class HMCInfo(NamedTuple):
    """What one hybrid Monte Carlo step did: its Metropolis acceptance probability and whether it moved.

    Example::

        >>> init, step = gpc.samplers.hmc(lambda g: -jnp.sum((g - 1.0) ** 2), step_size=0.1, num_leapfrog=10)
        >>> state, info = step(jax.random.key(0), init(jnp.zeros(3)))
        >>> bool(0.0 <= info.acceptance_probability <= 1.0), info.accepted.dtype
        (True, dtype('bool'))
    """

    acceptance_probability: Float[Array, ""]
    accepted: Array


def _tempered(temperature, log_likelihood):
    """tau log L, with 0 * (-inf) = 0 at tau = 0 (the prior)."""
    return jnp.where(temperature == 0, 0.0, temperature * log_likelihood)


def elliptical_slice(
    log_likelihood: Callable[[Array], Array], *, temperature=1.0, max_shrinks: int = 200
) -> tuple[Callable, Callable]:
    """Elliptical slice sampling (Murray, Adams & MacKay 2010, Figure 2) for L(g)^tau N(g|0, I).

    One step draws nu ~ N(0, I), a slice level log y = tau log L(g) + log u,
    and proposes g' = g cos(theta) + nu sin(theta) on the ellipse through g and
    nu, shrinking the angle bracket towards theta = 0 (the current point) until
    tau log L(g') > log y.  No step size to tune; every step moves.  After
    ``max_shrinks`` rejected proposals (which needs a pathological likelihood:
    the bracket shrinks geometrically onto the current point, which is always
    inside the slice) the chain stays put and the info reports it.

    Example: with L(g) = N(1 | g, I) the target is N(1/2, I/2); a chain of 2000 steps, 500 discarded::

        >>> init, step = gpc.samplers.elliptical_slice(lambda g: -0.5 * jnp.sum((g - 1.0) ** 2))
        >>> def advance(state, key):
        ...     state, info = step(key, state)
        ...     return state, state.position
        >>> keys = jax.random.split(jax.random.key(0), 2000)
        >>> state, positions = jax.lax.scan(advance, init(jnp.zeros(2)), keys)
        >>> bool(jnp.all(jnp.abs(positions[500:].mean(axis=0) - 0.5) < 0.15))
        True
    """

    def init(position):
        return SliceState(position, log_likelihood(position))

    def step(key, state: SliceState):
        key_nu, key_level, key_angle, key_shrink = jax.random.split(key, 4)
        g = state.position
        nu = jax.random.normal(key_nu, g.shape, g.dtype)
        log_level = _tempered(temperature, state.log_likelihood) + jnp.log(jax.random.uniform(key_level, dtype=g.dtype))
        theta = 2.0 * jnp.pi * jax.random.uniform(key_angle, dtype=g.dtype)

        def propose(theta):
            proposal = g * jnp.cos(theta) + nu * jnp.sin(theta)
            return proposal, log_likelihood(proposal)

        def outside(carry):
            _, ll, _, _, _, k = carry
            # "not inside" so that a NaN likelihood counts as outside the slice
            return ~(_tempered(temperature, ll) > log_level) & (k < max_shrinks)

        def shrink(carry):
            _, _, theta, low, high, k = carry
            low = jnp.where(theta < 0, theta, low)
            high = jnp.where(theta < 0, high, theta)
            theta = jax.random.uniform(jax.random.fold_in(key_shrink, k), (), g.dtype, low, high)
            proposal, ll = propose(theta)
            return proposal, ll, theta, low, high, k + 1

        proposal, ll = propose(theta)
        proposal, ll, *_, k = lax.while_loop(
            outside, shrink, (proposal, ll, theta, theta - 2.0 * jnp.pi, theta, jnp.asarray(1))
        )
        inside = _tempered(temperature, ll) > log_level
        new = SliceState(jnp.where(inside, proposal, g), jnp.where(inside, ll, state.log_likelihood))
        return new, SliceInfo(num_evaluations=k)

    return init, step


def hmc(
    log_likelihood: Callable[[Array], Array], *, step_size, num_leapfrog: int, temperature=1.0
) -> tuple[Callable, Callable]:
    """Hybrid (Hamiltonian) Monte Carlo (Duane et al. 1987; Neal 1993 section 5.2) for L(g)^tau N(g|0, I).

    Potential U(g) = -tau log L(g) + |g|^2 / 2, unit masses (the whitened prior
    is isotropic), ``num_leapfrog`` leapfrog steps of size ``step_size``, then
    a Metropolis test on the change of the Hamiltonian (a NaN energy rejects).

    Example: with L(g) = N(1 | g, I) the target is N(1/2, I/2); a chain of 500 steps::

        >>> init, step = gpc.samplers.hmc(lambda g: -0.5 * jnp.sum((g - 1.0) ** 2), step_size=0.5, num_leapfrog=5)
        >>> keys = jax.random.split(jax.random.key(0), 500)
        >>> state, infos = jax.lax.scan(lambda state, key: step(key, state), init(jnp.zeros(2)), keys)
        >>> bool(infos.acceptance_probability.mean() > 0.8)
        True
    """
    value_and_grad = jax.value_and_grad(log_likelihood)

    def init(position):
        ll, grad = value_and_grad(position)
        return HMCState(position, ll, grad)

    def grad_potential(state):
        return state.position - temperature * state.grad_log_likelihood

    def energy(state, momentum):
        kinetic = 0.5 * jnp.sum(momentum**2)
        return -_tempered(temperature, state.log_likelihood) + 0.5 * jnp.sum(state.position**2) + kinetic

    def step(key, state: HMCState):
        key_momentum, key_accept = jax.random.split(key)
        p0 = jax.random.normal(key_momentum, state.position.shape, state.position.dtype)

        def leapfrog(_, carry):
            s, p = carry
            p = p - 0.5 * step_size * grad_potential(s)
            s = init(s.position + step_size * p)
            return s, p - 0.5 * step_size * grad_potential(s)

        proposal, p1 = lax.fori_loop(0, num_leapfrog, leapfrog, (state, p0))
        log_ratio = energy(state, p0) - energy(proposal, p1)
        log_ratio = jnp.where(jnp.isnan(log_ratio), -jnp.inf, log_ratio)
        probability = jnp.exp(jnp.minimum(log_ratio, 0.0))
        accepted = jax.random.uniform(key_accept, dtype=state.position.dtype) < probability
        new = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposal, state)
        return new, HMCInfo(acceptance_probability=probability, accepted=accepted)

    return init, step


class AbstractSampler(eqx.Module):
    """A Markov kernel's configuration, for ``gpc.MCMC(sampler=...)`` and ``gpc.AIS(sampler=...)``.

    Example: a sampler of your own builds the ``(init, step)`` pair; its state needs ``position`` and
    ``log_likelihood`` (the untempered log L), its info ``acceptance_probability`` (or ``num_evaluations``, as
    :class:`SliceInfo`).  Random-walk Metropolis on the whitened latents::

        >>> class RandomWalk(gpc.samplers.AbstractSampler):
        ...     scale: float = 0.1
        ...     def build(self, log_likelihood, temperature=1.0):
        ...         def log_target(g, log_l):  # L(g)^temperature N(g | 0, I), up to a constant
        ...             return temperature * log_l - 0.5 * jnp.sum(g**2)
        ...         def init(g):
        ...             return gpc.samplers.SliceState(g, log_likelihood(g))
        ...         def step(key, state):
        ...             key_move, key_accept = jax.random.split(key)
        ...             g = state.position + self.scale * jax.random.normal(key_move, state.position.shape)
        ...             proposal = gpc.samplers.SliceState(g, log_likelihood(g))
        ...             log_ratio = log_target(*proposal) - log_target(*state)
        ...             probability = jnp.exp(jnp.minimum(log_ratio, 0.0))
        ...             accepted = jax.random.uniform(key_accept) < probability
        ...             new = jax.tree.map(lambda a, b: jnp.where(accepted, a, b), proposal, state)
        ...             return new, gpc.samplers.HMCInfo(probability, accepted)
        ...         return init, step
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> method = gpc.MCMC(sampler=RandomWalk(), num_samples=100, num_warmup=100, jitter=1e-3)
        >>> post = gpc.infer(method, kernel, gpc.likelihoods.Logistic(), X, y, key=jax.random.key(0))
        >>> post.samples.shape, bool(0.0 < post.info.acceptance_rate < 1.0)
        ((400, 40), True)
    """

    @abc.abstractmethod
    def build(self, log_likelihood: Callable[[Array], Array], temperature=1.0) -> tuple[Callable, Callable]:
        """The ``(init, step)`` pair targeting L(g)^temperature N(g|0, I)."""


class EllipticalSlice(AbstractSampler):
    """Elliptical slice sampling (:func:`elliptical_slice`): no step size to tune, every step moves.  The default
    sampler of ``gpc.MCMC`` and ``gpc.AIS``.

    Example::

        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> method = gpc.MCMC(sampler=gpc.samplers.EllipticalSlice(), num_samples=100, num_warmup=100, jitter=1e-3)
        >>> post = gpc.infer(method, kernel, gpc.likelihoods.Logistic(), X, y, key=jax.random.key(0))
        >>> float(post.info.acceptance_rate), bool(post.info.evaluations_per_step >= 1)
        (1.0, True)
    """

    max_shrinks: int = eqx.field(static=True, default=200)

    def __check_init__(self):
        require_setting("EllipticalSlice", "max_shrinks", self.max_shrinks, low=1, low_open=False, integer=True)

    def build(self, log_likelihood, temperature=1.0):
        return elliptical_slice(log_likelihood, temperature=temperature, max_shrinks=self.max_shrinks)


class HMC(AbstractSampler):
    """Hybrid Monte Carlo (:func:`hmc`) with ``num_leapfrog`` leapfrog steps of size ``step_size`` (whitened
    coordinates, unit masses).

    Example::

        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> sampler = gpc.samplers.HMC(step_size=0.2, num_leapfrog=10)
        >>> method = gpc.MCMC(sampler=sampler, num_samples=100, num_warmup=100, jitter=1e-3)
        >>> post = gpc.infer(method, kernel, gpc.likelihoods.Logistic(), X, y, key=jax.random.key(0))
        >>> bool(post.info.acceptance_rate > 0.5)  # a step size to tune: aim for a high acceptance rate
        True
    """

    step_size: float = eqx.field(static=True, default=0.1)
    num_leapfrog: int = eqx.field(static=True, default=20)

    def __check_init__(self):
        require_setting("HMC", "step_size", self.step_size)
        require_setting("HMC", "num_leapfrog", self.num_leapfrog, low=1, low_open=False, integer=True)

    def build(self, log_likelihood, temperature=1.0):
        return hmc(log_likelihood, step_size=self.step_size, num_leapfrog=self.num_leapfrog, temperature=temperature)


def prior_factor(K: Float[Array, "*C n n"], jitter: float) -> Float[Array, "*C n n"]:
    """L with L L^T = K + jitter * mean(diag K) * I, for whitening; raises if K is not positive definite.
    Per class (a ``PerClass`` kernel's C x n x n blocks): one factor per block, each with its own jitter.

    The check is on the factor, not on the samples: a NaN factor would make
    every chain silently NaN (or, with ``throw=False``, return garbage), so it
    raises whatever the ``throw`` setting of the call.
    """
    if K.ndim == 3:
        return jnp.stack([prior_factor(block, jitter) for block in K])
    n = K.shape[0]
    scale = jitter * jnp.mean(jnp.diagonal(K))
    L = dense.cholesky(K + scale * jnp.eye(n, dtype=K.dtype))
    return error_if(
        L,
        ~jnp.all(jnp.isfinite(L)),
        "the prior covariance K is not positive definite in working precision (its Cholesky factorisation failed): "
        "the kernel is not a valid covariance function, or K is singular (e.g. a Linear kernel with more cases than "
        "input dimensions, or repeated inputs) and needs a larger jitter on the method.",
    )


def latent_shape(K, likelihood) -> tuple[int, ...]:
    """The shape of the latent values: (n,) for one latent function, (n, C) for the softmax's C."""
    n, num_latent = K.shape[-1], likelihood.num_latent
    return (n,) if num_latent == 1 else (n, num_latent)


def colour_one(L: Float[Array, "*C n n"], g: Float[Array, "n ..."]) -> Float[Array, "n ..."]:
    """f = L g for one whitened latent g, (n,) or (n, C) (per class for a (C, n, n) factor)."""
    return jnp.einsum("cij,jc->ic", L, g) if L.ndim == 3 else L @ g


def colour(L: Float[Array, "*C n n"], g: Float[Array, "S n ..."]) -> Float[Array, "S n ..."]:
    """f = L g for a batch of whitened latents g (S, n) or (S, n, C): one factor for every latent function, or
    per class (C, n, n) acting on its own column."""
    if L.ndim == 3:
        return jnp.einsum("cij,sjc->sic", L, g)
    if g.ndim == 3:
        return jnp.einsum("ij,sjc->sic", L, g)
    return g @ L.T


def acceptance_summary(info) -> tuple[Array, Array]:
    """(mean acceptance rate, mean likelihood evaluations per step) from stacked infos of either kernel."""
    if isinstance(info, SliceInfo):
        return jnp.asarray(1.0), jnp.mean(info.num_evaluations.astype(jnp.result_type(float)))
    return jnp.mean(info.acceptance_probability), jnp.asarray(float("nan"))
