"""EM-EP: hyperparameters by expectation-maximisation with an EP E-step (Kim & Ghahramani 2006).

E-step: EP at the current hyperparameters gives q(f) = N(mu, A) (their eq. 11).
M-step: with q fixed, the covariance hyperparameters maximise the variational
bound F (eqs. 13-16), whose kernel-dependent part is

    E_q[log N(f|0, C)] = -1/2 log|2 pi C| - 1/2 mu^T C^-1 mu - 1/2 tr(C^-1 A)   (eq. 16)

with gradient eq. 17 (here by autodiff, q held fixed), and the label-flip rate
is set to eps = r / n, r the number of training cases whose posterior mean has
the wrong sign (eq. 18 and the appendix).  The two steps alternate until the
EP approximation of log p(y|X, theta) stops changing.

EM-EP maximises neither the EP evidence nor F exactly: its fixed points are
where theta maximises F at the EP posterior for theta itself.  Compare it with
direct maximisation of the EP evidence, ``gpc.fit(gpc.EP(), ...)``.
"""

from collections.abc import Callable

import equinox as eqx
import jax
import jax.numpy as jnp
import optax
import optax.tree_utils as otu
from jax import lax

from ._bound import expected_log_prior, posterior_covariance, variational_bound
from ._errors import entry_point
from ._exceptions import GPClassError
from ._fit_parameters import parameter_transforms, trainable_spec
from ._inference import EP, GaussianPosterior
from ._inference._infer import solve_posterior
from ._iterate import AbstractIterativeSolver, all_finite, run, tolerance
from ._progress import Progress, as_progress, due, every_for, report
from ._status import Status, raise_unless_successful
from ._types import Array, Bool, Float, Int
from ._validation import Checks, check_binary_labels, check_inputs, require_setting
from .kernels import AbstractKernel
from .likelihoods import AbstractLikelihood, LabelNoise


class EMEPResult(eqx.Module):
    """The hyperparameters EM-EP converged to, and the record of its iterations.

    ``log_marginal`` is the EP approximation of log p(y|X, theta) (GPML eq.
    3.65) at the final hyperparameters and ``bound`` the variational bound F
    there; ``history[i]`` is log_marginal after EM step i + 1 (NaN past
    ``num_steps``).  ``status`` is a :class:`gpclass.Status`: ``CONVERGED``
    when log_marginal changed by at most ``tol (1 + |log_marginal|)`` in the
    last EM step, with a converged EP solution (``converged`` says that),
    else ``MAX_STEPS`` or ``FAILED`` (not finite); ``m_step_converged``
    whether every M-step reached its gradient tolerance.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> kernel = kernel + gpc.kernels.White(0.01)  # latent noise: EM-EP needs a non-singular Gram matrix
        >>> likelihood = gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), 0.05)
        >>> result = gpc.fit_em_ep(gpc.EP(), kernel, likelihood, X, y, tol=1e-2)  # a loose tol: a quick example
        >>> bool(result.converged), bool(result.bound <= result.log_marginal)  # F <= the EP evidence
        (True, True)
        >>> print(np.asarray(result.posterior.predict(X[:3])).round(1))
        [0.8 0.7 0.8]
    """

    kernel: AbstractKernel
    likelihood: AbstractLikelihood
    posterior: GaussianPosterior
    log_marginal: Float[Array, ""]
    bound: Float[Array, ""]
    history: Float[Array, " max_steps"]
    num_steps: Int[Array, ""]
    status: Int[Array, ""]
    m_step_converged: Bool[Array, ""]

    @property
    def converged(self) -> Bool[Array, ""]:
        return self.status == Status.CONVERGED


@entry_point
def fit_em_ep(
    method: EP,
    kernel: AbstractKernel,
    likelihood: AbstractLikelihood,
    X,
    y,
    *,
    adapt_epsilon: bool = True,
    max_steps: int = 200,
    tol: float | None = None,
    m_step_max_steps: int = 50,
    m_step_gtol: float | None = None,
    verbose: bool = False,
    throw: bool = True,
    progress: bool | Callable[[dict], None] | Progress | None = None,
) -> EMEPResult:
    """Fit kernel hyperparameters (and the label-flip rate) by EM-EP.

    Args:
        method: the E-step, an EP configuration such as ``gpc.EP()`` (its sites
            are warm-started from the previous E-step).  The arguments come in
            the order of :func:`gpclass.infer` and :func:`gpclass.fit`.
        kernel: the starting covariance; every float array in it is fitted in
            log space (Kim & Ghahramani fit v0, v1, v2 and the l_m in log space).
            It must give a non-singular Gram matrix: include a ``White`` term
            (their latent noise v2).
        likelihood: e.g. ``LabelNoise(Heaviside(), epsilon)`` (their eq. 9) or
            ``LabelNoise(Probit(), epsilon)``; its epsilon is set to r/n after
            every E-step when ``adapt_epsilon``; other likelihood parameters
            stay fixed.
        X, y: training data as for :func:`gpclass.infer`.
        adapt_epsilon: update epsilon = r/n (needs a ``LabelNoise`` likelihood).
        max_steps: largest number of EM iterations.
        tol: stop when log q_EP(y|X) changes by at most tol (1 + |log q|) in one
            EM step.  ``None``: 1e-7 in float64, 1e-4 in float32.
        m_step_max_steps, m_step_gtol: L-BFGS steps and gradient tolerance
            (max |dF / d log theta|) of each M-step; ``None``: 1e-6 / 1e-2.
        verbose: ``True`` is ``progress=True`` (kept for compatibility).
        progress: ``None`` (silent, the default), ``True`` (a line on stderr,
            at most one every 0.5 s), a callable ``progress(info)`` called on
            the host after the first E-step (``step`` 0) and every EM step
            with ``info`` a dict: ``task`` ("fit_em_ep"), ``step``,
            ``log_marginal`` (``history[step - 1]``), ``epsilon`` (NaN without
            label noise), ``ep_sweeps``, ``done``, ``num_steps``
            (``max_steps``); or ``gpc.Progress(...)`` (as :func:`gpclass.fit`).
        throw: raise (as :func:`gpclass.fit`) unless the status is ``CONVERGED``;
            ``False`` reports it in ``EMEPResult.status`` only.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> kernel = kernel + gpc.kernels.White(0.01)  # their latent noise v2
        >>> likelihood = gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), 0.05)  # their eq. 9
        >>> result = gpc.fit_em_ep(gpc.EP(), kernel, likelihood, X, y, tol=1e-2)  # a loose tol: a quick example
        >>> bool(result.converged), round(float(result.log_marginal), 1)
        (True, -21.3)
        >>> round(float(result.likelihood.epsilon), 3)  # r / n: the share of training cases on the wrong side
        0.125
    """
    for name, value in (("max_steps", max_steps), ("m_step_max_steps", m_step_max_steps)):
        require_setting("fit_em_ep", name, value, low=1, low_open=False, integer=True)
    require_setting("fit_em_ep", "tol", tol, optional=True)
    require_setting("fit_em_ep", "m_step_gtol", m_step_gtol, optional=True)
    progress = as_progress(True if verbose and progress is None else progress)
    if not isinstance(method, EP):
        raise GPClassError("fit_em_ep: the E-step is expectation propagation (gpc.EP(...)); got "
                           f"{type(method).__name__}.")
    if not isinstance(kernel, AbstractKernel):
        raise GPClassError("fit_em_ep needs a kernel (its M-step uses the dense Gram matrix); got "
                           f"{type(kernel).__name__} (a sparse prior is not supported by EM-EP yet).")
    if not getattr(likelihood, "binary", True) or not getattr(likelihood, "labels_per_input", True):
        raise GPClassError(f"fit_em_ep: for binary likelihoods (labels +-1); got {type(likelihood).__name__}. "
                           "Use gpc.fit(gpc.EP(), ...) for it.")
    checks = Checks()
    X = check_inputs(X, checks=checks)
    kernel.check_inputs(X)
    X, y = checks.attach((X, check_binary_labels(y, X.shape[0], X.dtype, checks)))
    tol = tolerance(tol, X.dtype, 1e-7, 1e-4)
    m_step_gtol = tolerance(m_step_gtol, X.dtype, 1e-6, 1e-2)
    if adapt_epsilon and not isinstance(likelihood, LabelNoise):
        raise GPClassError(
            "fit_em_ep(adapt_epsilon=True) needs a LabelNoise likelihood, e.g. "
            "gpc.likelihoods.LabelNoise(gpc.likelihoods.Heaviside(), epsilon=0.01); pass adapt_epsilon=False otherwise."
        )
    params, static = eqx.partition(kernel, trainable_spec(kernel, None, "fit_em_ep"))
    if not jax.tree.leaves(params):
        raise GPClassError("fit_em_ep: the kernel has no floating-point parameters to fit; to run EP at fixed "
                           "hyperparameters call gpc.infer(gpc.EP(), kernel, likelihood, X, y).")
    to_free, from_free = parameter_transforms(params, kernel, "fit_em_ep")

    def build(log_params):
        return eqx.combine(from_free(log_params), static)

    every = None if progress is None else every_for(progress, max_steps)
    end = run(EMSolver(method, build, X, y, likelihood, to_free(params), adapt_epsilon, tol, max_steps,
                       m_step_max_steps, m_step_gtol, progress, every))
    s = end.state
    result = EMEPResult(
        kernel=build(s.log_params),
        likelihood=s.likelihood,
        posterior=s.posterior,
        log_marginal=s.posterior.log_marginal,
        bound=variational_bound(s.posterior, y),
        history=s.history,
        num_steps=end.num_steps,
        status=end.status,
        m_step_converged=s.m_ok,
    )
    return raise_unless_successful(result, result.status, "fit_em_ep") if throw else result


class EMState(eqx.Module):
    """EM-EP after an EM step: the log hyperparameters, the likelihood (its epsilon), the E-step's posterior,
    the record, and whether log q_EP stopped changing with a converged EP."""

    log_params: object
    likelihood: AbstractLikelihood
    posterior: GaussianPosterior
    steps: Int[Array, ""]  # EM steps taken: the index into history
    history: Float[Array, " max_steps"]
    converged: Bool[Array, ""]
    m_ok: Bool[Array, ""]


class EMSolver(AbstractIterativeSolver):
    """EM-EP's iterations (:func:`gpclass._iterate.run`): an M-step (:class:`MStep`, and epsilon = r / n), then
    an EP E-step warm-started from the last, until log q_EP stops changing (:func:`fit_em_ep`)."""

    method: EP
    build: Callable
    X: Array
    y: Array
    likelihood0: AbstractLikelihood
    log_params0: object
    adapt_epsilon: bool
    tol: float
    max_steps: int
    m_step_max_steps: int
    m_step_gtol: float
    progress: Progress | None
    every: object

    def _e_step(self, log_params, likelihood, init):
        return solve_posterior(self.method, self.build(log_params), likelihood, self.X, self.y, init)

    def _m_step(self, log_params, posterior, likelihood):
        mean, cov = lax.stop_gradient((posterior.mean, posterior_covariance(posterior)))
        log_params, converged = run(MStep(self.build, self.X, mean, cov, log_params, self.m_step_max_steps,
                                          self.m_step_gtol))
        if self.adapt_epsilon:
            errors = jnp.sum(jnp.sign(posterior.mean) != self.y)
            likelihood = eqx.tree_at(lambda lik: lik.epsilon, likelihood,
                                     (errors / self.y.shape[0]).astype(self.X.dtype))
        return log_params, likelihood, converged

    def _report(self, when, step, done, posterior, likelihood):
        report(self.progress, "fit_em_ep", when, step, done, total=self.max_steps,
               log_marginal=posterior.log_marginal,
               epsilon=getattr(likelihood, "epsilon", jnp.asarray(jnp.nan, self.X.dtype)),
               ep_sweeps=posterior.info.num_steps)

    def init(self) -> EMState:
        start = EMState(
            log_params=self.log_params0,
            likelihood=self.likelihood0,
            posterior=self._e_step(self.log_params0, self.likelihood0, None),
            steps=jnp.asarray(0),
            history=jnp.full((self.max_steps,), jnp.nan, dtype=self.X.dtype),
            converged=jnp.asarray(False),
            m_ok=jnp.asarray(True),
        )
        if self.progress is not None:
            self._report(True, 0, self.max_steps == 0, start.posterior, self.likelihood0)
        return start

    def step(self, s: EMState) -> EMState:
        log_params, likelihood, m_converged = self._m_step(s.log_params, s.posterior, s.likelihood)
        new = self._e_step(log_params, likelihood, s.posterior.warm_start)
        change = jnp.abs(new.log_marginal - s.posterior.log_marginal)
        converged = (change <= self.tol * (1.0 + jnp.abs(new.log_marginal))) & new.info.converged
        if self.progress is not None:
            # Reported by problems still running (under vmap a stopped problem's steps are discarded).
            running = ~s.converged & jnp.isfinite(s.posterior.log_marginal) & (s.steps < self.max_steps)
            done = converged | ~jnp.isfinite(new.log_marginal) | (s.steps + 1 >= self.max_steps)
            self._report(running & due(s.steps + 1, self.every, done), s.steps + 1, done, new, likelihood)
        return EMState(
            log_params=log_params,
            likelihood=likelihood,
            posterior=new,
            steps=s.steps + 1,
            history=s.history.at[s.steps].set(new.log_marginal),
            converged=converged,
            m_ok=s.m_ok & m_converged,
        )

    def terminate(self, s: EMState):
        return s.converged, ~jnp.isfinite(s.posterior.log_marginal)  # not finite: stop (FAILED)

    def finite(self, s: EMState):
        return jnp.isfinite(s.posterior.log_marginal)


_M_STEP_OPTIMIZER = optax.lbfgs()


class MStepState(eqx.Module):
    """The M-step's L-BFGS: the log parameters and optax's state (which caches the gradient there)."""

    params: object
    opt_state: object


class MStep(AbstractIterativeSolver):
    """M-step: maximise E_q[log N(f|0, C(theta))] (Kim & Ghahramani eq. 16) over log theta with L-BFGS
    (optax's, one update per step of :func:`gpclass._iterate.run`).

    q = N(mean, cov) is the E-step's posterior, held fixed; the result is the new log parameters and whether
    max |gradient| <= gtol was reached.
    """

    build: Callable
    X: Array
    mean: Array
    cov: Array
    log_params0: object
    max_steps: int
    gtol: float

    def _negative_f(self, log_params):
        return -expected_log_prior(self.build(log_params).gram(self.X), self.mean, self.cov)

    def init(self) -> MStepState:
        return MStepState(self.log_params0, _M_STEP_OPTIMIZER.init(self.log_params0))

    def step(self, s: MStepState) -> MStepState:
        value, grad = optax.value_and_grad_from_state(self._negative_f)(s.params, state=s.opt_state)
        updates, opt_state = _M_STEP_OPTIMIZER.update(grad, s.opt_state, s.params, value=value, grad=grad,
                                                      value_fn=self._negative_f)
        return MStepState(optax.apply_updates(s.params, updates), opt_state)

    def terminate(self, s: MStepState):
        # The state caches the gradient at the new point (computed by the line search).
        grad = jax.tree.leaves(otu.tree_get(s.opt_state, "grad"))
        return jnp.max(jnp.stack([jnp.max(jnp.abs(g)) for g in grad])) <= self.gtol, jnp.asarray(False)

    def finite(self, s: MStepState):
        return all_finite(*jax.tree.leaves(s.params))

    def postprocess(self, solution):
        return solution.state.params, solution.status == Status.CONVERGED
