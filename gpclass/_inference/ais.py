"""Annealed importance sampling of the marginal likelihood (Neal 2001; Kuss & Rasmussen section 6.2, Algorithm 3).

log Z = log int p(y|f) N(f|0, K) df is reached through the tempered targets
p(y|f)^tau(t) N(f|0, K) (eq. 28), tau(0) = 0 < ... < tau(T) = 1.  A run starts
from a prior sample f_0 and, for t = 1..T, adds (tau(t) - tau(t-1)) log p(y|f_{t-1})
to its log weight, then moves f by a Markov kernel leaving the target at tau(t)
invariant (eqs. 29-32, in Neal's order, which makes exp(log weight) an unbiased
estimate of Z for any schedule).  R independent runs are combined by the
arithmetic mean of their weights (Algorithm 3, last line), in log space.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.special import logsumexp

from .._exceptions import GPClassError
from .._progress import as_progress, due, every_for, report
from .._status import finite_status
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


class AIS(AbstractInference):
    """Annealed importance sampling estimate of log p(y|X, theta), with weighted posterior samples.

    Attributes:
        num_temperatures: T, the number of annealing steps (Kuss & Rasmussen: 8000).
        num_runs: R independent runs (Kuss & Rasmussen: 3), run with ``vmap``.
        exponent: the schedule tau(t) = (t / T)^exponent (Kuss & Rasmussen: 4).
        steps_per_temperature: Markov steps at each temperature.
        sampler, jitter: as for :class:`MCMC`.
        progress: ``None`` (silent), ``True`` (a line on stderr at most every
            0.5 s), a callable ``progress(info)`` or ``gpc.Progress(...)``:
            about 100 reports per run by default, ``info`` with ``task``
            ("AIS"), ``step`` (the temperature index t), ``num_steps`` (T),
            ``log_weight`` (the run's log weight so far), ``done``.  The runs
            are vmapped: each report comes once per run.

    The result's ``log_marginal`` is log((1/R) sum_r w_r) and ``log_marginal_se``
    its Monte Carlo standard error by the delta method,
    sd(w) / (sqrt(R) mean(w)); with few runs this is itself a rough estimate,
    and it saturates at about 1 when one run carries almost all the weight
    (for R = 3, weights (1, 0, 0) give exactly 1): a value near 1 means the
    runs disagree by many nats and the annealing is too short.
    ``samples`` are the R final states, weighted by ``log_weights``; for ``Softmax(C)`` the (n, C) latents,
    whitened per class (a ``gpc.SoftmaxSamplePosterior``).

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> method = gpc.AIS(num_temperatures=500, num_runs=3, jitter=1e-3)  # jitter: X has repeated rows
        >>> post = gpc.infer(method, kernel, gpc.likelihoods.Logistic(), X, y, key=jax.random.key(0))
        >>> post.samples.shape  # one weighted sample per run
        (3, 40)
        >>> bool(post.log_marginal_se < 0.5)  # the estimate's Monte Carlo standard error
        True
        >>> laplace = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
        >>> bool(abs(post.log_marginal - laplace.log_marginal) < 1)  # Laplace's log q is within a nat here
        True
    """

    num_temperatures: int = eqx.field(static=True, default=8000)
    num_runs: int = eqx.field(static=True, default=3)
    exponent: float = eqx.field(static=True, default=4.0)
    steps_per_temperature: int = eqx.field(static=True, default=1)
    sampler: AbstractSampler = EllipticalSlice()
    jitter: float = eqx.field(static=True, default=1e-10)
    multiclass = True  # Softmax(C): the (n, C) latents, whitened per class
    progress: object = eqx.field(static=True, default=None)

    def __check_init__(self):
        for name in ("num_temperatures", "num_runs", "steps_per_temperature"):
            require_setting("AIS", name, getattr(self, name), low=1, low_open=False, integer=True)
        require_setting("AIS", "exponent", self.exponent)
        require_setting("AIS", "jitter", self.jitter, low_open=False)

    def check_ml2(self):
        raise GPClassError(
            "the AIS estimate of log Z is random and not differentiated; fit hyperparameters with gpc.Laplace() "
            "or gpc.EP() and evaluate log Z with gpc.AIS() at fixed hyperparameters."
        )

    def schedule(self, dtype):
        """tau(t) = (t / T)^exponent, t = 0..T."""
        return (jnp.arange(self.num_temperatures + 1, dtype=dtype) / self.num_temperatures) ** self.exponent

    def solve_matrix(self, K, likelihood, y, init=None, key=None):
        if key is None:
            raise GPClassError("AIS needs an explicit PRNG key: gpc.infer(gpc.AIS(), ..., key=jax.random.key(0)).")
        L = prior_factor(K, self.jitter)
        latent = latent_shape(K, likelihood)
        taus = self.schedule(K.dtype)
        progress = as_progress(self.progress)
        T = self.num_temperatures
        every = None if progress is None else every_for(progress, T, default_reports=100)

        def log_likelihood(g):
            return jnp.sum(likelihood.log_prob(y, colour_one(L, g)))

        def run(key):
            key_start, key_anneal = jax.random.split(key)
            g0 = jax.random.normal(key_start, latent, K.dtype)

            def anneal(carry, t):
                g, log_lik, log_w = carry
                log_w = log_w + (taus[t] - taus[t - 1]) * log_lik
                kernel_init, kernel_step = self.sampler.build(log_likelihood, temperature=taus[t])

                def move(state, key):
                    return kernel_step(key, state)

                keys = jax.random.split(jax.random.fold_in(key_anneal, t), self.steps_per_temperature)
                state, info = lax.scan(move, kernel_init(g), keys)
                report(progress, "AIS", due(t, every, t == T), t, t == T, total=T, log_weight=log_w)
                return (state.position, state.log_likelihood, log_w), info

            start = (g0, log_likelihood(g0), jnp.zeros((), K.dtype))
            (g, _, log_w), info = lax.scan(anneal, start, jnp.arange(1, self.num_temperatures + 1))
            return g, log_w, info

        g, log_w, info = jax.vmap(run)(jax.random.split(key, self.num_runs))
        log_marginal = logsumexp(log_w) - jnp.log(self.num_runs)
        w = jnp.exp(log_w - jnp.max(log_w))
        se = jnp.std(w, ddof=1) / (jnp.sqrt(self.num_runs) * jnp.mean(w)) if self.num_runs > 1 else jnp.nan
        acceptance, evaluations = acceptance_summary(info)
        return sample_posterior(
            samples=colour(L, g),
            log_weights=log_w,
            chol=L,
            log_marginal=log_marginal,
            log_marginal_se=jnp.asarray(se, K.dtype),
            info=SamplerInfo(
                acceptance_rate=acceptance, evaluations_per_step=evaluations, status=finite_status(log_marginal)
            ),
            warm_start=lax.stop_gradient(g),
        )
