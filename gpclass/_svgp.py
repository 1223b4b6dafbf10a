"""Stochastic variational GP classification (SVGP; Hensman, Matthews & Ghahramani 2015): binary and softmax.

m inducing inputs Z carry the inducing values u = f(Z) ~ N(0, K_zz).  In the
whitened parametrisation u = L v with L L^T = K_zz (+ jitter), the
variational posterior is q(v) = N(mu, S S^T), S lower triangular, and

    q(f_x) = N(A^T mu, k(x, x) - A^T A + A^T S S^T A),   A = L^-1 K_zx    (marginals),
    ELBO = sum_i E_q[log p(y_i|f_i)] - KL(q(v) || N(0, I))
         = sum_i E_q[log p(y_i|f_i)] - 1/2 (|S|_F^2 + |mu|^2 - m - log|S S^T|),

the data term by the likelihood's quadrature (``expected_log_prob``).  On a
minibatch of b of the n cases the data term is scaled by n / b: an unbiased
estimate of the ELBO, whose cost is O(b m^2 + m^3) per evaluation.  With
Z = X (m = n) the family of q(f) is every Gaussian and the maximised ELBO is
the one of ``gpc.KL()``.

Softmax (C classes): the ELBO above with one latent GP per class, as in the
multi-class models of Hensman, Matthews, Filippone & Ghahramani ("MCMC for
variationally sparse Gaussian processes", NeurIPS 2015): C independent
latent GPs f^c with the one kernel and the shared Z,
q(v) = prod_c N(mu_c, S_c S_c^T) (``q_mu`` (m, C), ``q_sqrt`` (C, m, m)).
q(f_i) = N(m_i, diag v_i), each class's moments the marginals above with
mu_c and S_c; the KL is the sum of the C classes' KLs; and

    E_q[log p(y_i|f_i)] = m_i^{y_i} - E_q[log sum_c exp f_i^c],

the first term exact, the second estimated (``SVGP.estimator``):

* ``"monte_carlo"`` (default): (1/S) sum_s logsumexp(m_i + sqrt(v_i) * eps_is),
  eps_is ~ N(0, I_C), S = ``num_samples`` (the reparametrisation trick).
  Unbiased for the ELBO, and, with the noise fixed by the key, a smooth
  deterministic function of every parameter.  Case i's noise is drawn from
  its own key (``jax.random.split(key, b)[i]``, or a key per case given),
  so estimates of the parts of a partition, each with its cases' keys,
  average exactly to the full-batch estimate with all the keys.
* ``"jensen"``: E[log sum_c exp f^c] <= log sum_c exp(m^c + v^c / 2) (Jensen,
  log concave, E exp f^c = exp(m^c + v^c / 2)): deterministic, and the
  objective is then a lower bound of the ELBO, not the ELBO.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
from jax.scipy.special import logsumexp

from . import _dense as dense
from ._errors import AT, entry_point
from ._exceptions import GPClassError
from ._inference._posterior import AbstractPosterior
from ._inverse_factor import cholesky as recursive_cholesky
from ._inverse_factor import inverse_factor, inverse_factor_solve, triangular_inverse
from ._svgp_moments import projected_marginals, quadratic_form, whitened_form
from ._types import Array, Float
from ._validation import Checks, as_float, check_inputs, class_indices, require_setting
from .kernels import AbstractKernel
from .likelihoods import AbstractLikelihood, Softmax

_ESTIMATORS = ("monte_carlo", "jensen")


class SVGP(AbstractPosterior):
    """A sparse variational posterior: kernel, likelihood, inducing inputs Z and the whitened q(v) = N(mu, S S^T).

    Attributes:
        kernel, likelihood: the prior and a binary likelihood or
            ``gpc.likelihoods.Softmax(C)`` (C latent GPs, one kernel).
        inducing: Z, shape (m, d).
        q_mu: mu, shape (m,); softmax: (m, C), column c the mean of q(v_c).
        q_sqrt: S, shape (m, m); softmax: (C, m, m).  Only lower triangles are read.
        jitter: ``jitter * mean(diag K_zz)`` is added to K_zz before it is
            factorised (the meaning ``jitter`` has everywhere in gpclass);
            0 makes the model exactly the GP restricted to Z.
        estimator, num_samples: how the softmax's E[log sum_c exp f^c] is
            estimated (the module docstring): ``"monte_carlo"`` with
            ``num_samples`` draws per case (needs a key), or ``"jensen"``.
            Binary likelihoods use their quadrature and ignore both.

    ``SVGP.at_prior(kernel, likelihood, Z)`` starts from q(v) = N(0, I), the
    prior.  Fit it with :func:`gpclass.fit_svgp`; predict with
    ``gpc.predict`` and ``gpc.predict_latent``; :meth:`elbo` is the
    objective, for training loops of your own.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> model = gpc.SVGP.at_prior(kernel, gpc.likelihoods.Logistic(), X[:10])  # 10 inducing inputs
        >>> print(np.asarray(model.predict(X[:3])).round(2))  # q(f) is the prior: p = 1/2
        [0.5 0.5 0.5]
        >>> fit = gpc.fit_svgp(model, X, y, key=jax.random.key(0), num_steps=300, batch_size=20)
        >>> print(np.asarray(fit.model.predict(X[:3])).round(1))
        [0.8 0.8 0.8]
    """

    kernel: AbstractKernel
    likelihood: AbstractLikelihood | Softmax
    inducing: Float[Array, "m d"] = eqx.field(converter=as_float)
    q_mu: Float[Array, " m"] | Float[Array, "m C"] = eqx.field(converter=as_float)
    q_sqrt: Float[Array, "m m"] | Float[Array, "C m m"] = eqx.field(converter=as_float)
    jitter: float = eqx.field(static=True, default=1e-6)
    estimator: str = eqx.field(static=True, default="monte_carlo")
    num_samples: int = eqx.field(static=True, default=16)

    def __check_init__(self):
        m, C = self.inducing.shape[0], self.num_latent
        if C > 1 and not isinstance(self.likelihood, Softmax):
            raise GPClassError(f"SVGP supports binary likelihoods and gpc.likelihoods.Softmax(C); got "
                               f"{type(self.likelihood).__name__}, with {C} latent functions per case: use "
                               f"gpc.likelihoods.Softmax({C}) with SVGP, or gpc.infer / gpc.fit with a method that "
                               "supports the likelihood (MultinomialProbit: gpc.EP(), gpc.MCMC() or gpc.AIS()).")
        if C == 1 and (self.inducing.ndim != 2 or self.q_mu.shape != (m,) or self.q_sqrt.shape != (m, m)):
            raise GPClassError(
                f"SVGP needs inducing of shape (m, d), q_mu of shape (m,) and q_sqrt of shape (m, m); got "
                f"{self.inducing.shape}, {self.q_mu.shape} and {self.q_sqrt.shape}."
            )
        if C > 1 and (self.inducing.ndim != 2 or self.q_mu.shape != (m, C) or self.q_sqrt.shape != (C, m, m)):
            raise GPClassError(
                f"SVGP with Softmax({C}) needs inducing of shape (m, d), q_mu of shape (m, C) = ({m}, {C}) and "
                f"q_sqrt of shape (C, m, m) = ({C}, {m}, {m}); got {self.inducing.shape}, {self.q_mu.shape} and "
                f"{self.q_sqrt.shape}."
            )
        if not self.likelihood.finite_expected_log_prob:
            raise GPClassError(f"SVGP: with {type(self.likelihood).__name__} the ELBO is -inf for every q(f) of "
                               "positive variance (E_q[log H(y f)] = -inf once q puts mass on the wrong side): use "
                               "gpc.likelihoods.LabelNoise(Heaviside(), epsilon) or Probit(), or EP with gpc.infer.")
        if m == 0:
            raise GPClassError("SVGP: no inducing inputs (shape (0, d)): q(f) would be zero, every prediction 1/2. "
                               "Pass at least one row, e.g. a subset of the training inputs.")
        self.kernel.check_inputs(self.inducing)  # the inducing inputs have the columns of the data
        if self.estimator not in _ESTIMATORS:
            raise GPClassError(f"estimator must be one of {_ESTIMATORS}; got {self.estimator!r}.")
        require_setting("SVGP", "num_samples", self.num_samples, low=1, low_open=False, integer=True)
        require_setting("SVGP", "jitter", self.jitter, low_open=False)


    @classmethod
    def at_prior(cls, kernel, likelihood, inducing, *, jitter: float = 1e-6, estimator: str = "monte_carlo",
                 num_samples: int = 16) -> "SVGP":
        """q(v) = N(0, I) (every class's for the softmax): q(f) is the prior."""
        inducing = jnp.asarray(inducing)
        m, C = inducing.shape[0], getattr(likelihood, "num_latent", 1)
        eye = jnp.eye(m, dtype=inducing.dtype)
        q_mu, q_sqrt = (jnp.zeros(m, inducing.dtype), eye) if C == 1 else (
            jnp.zeros((m, C), inducing.dtype), jnp.tile(eye, (C, 1, 1)))
        return cls(kernel, likelihood, inducing, q_mu, q_sqrt, jitter, estimator, num_samples)

    def _jittered_gram(self) -> Float[Array, "m m"]:
        """K_zz + jitter mean(diag K_zz) I."""
        K_zz = self.kernel.gram(self.inducing)
        m = K_zz.shape[0]
        return K_zz + self.jitter * jnp.mean(jnp.diagonal(K_zz)) * jnp.eye(m, dtype=K_zz.dtype)

    def _projection(self, X: Float[Array, "b d"]) -> Float[Array, "m b"]:
        """A = L^-1 K_zx with L L^T = K_zz + jitter mean(diag K_zz) I."""
        L = dense.cholesky(self._jittered_gram())
        return dense.solve_triangular(L, self.kernel.gram(self.inducing, X), lower=True)

    def _training_moments(self, X: Float[Array, "b d"]):
        """The marginals of q(f_x) as the ELBO takes them.  In float64 by ``_svgp_moments``' hand-written reverse
        modes: for batches of b >= 2 m cases from P and c (4 m^2 b + about 17 m^3 flops per value and gradient, no
        solve on the batch), otherwise from A (at most 12 m^2 b + about 3.5 m^3, comparable below b = 2 m); in
        float32 from A by a triangular solve (backward stable) and reverse mode."""
        if self.inducing.dtype != jnp.float64:
            return self._marginals(self._projection(X), X)
        classes = self.q_mu.ndim == 2
        S = jnp.tril(self.q_sqrt) if classes else jnp.tril(self.q_sqrt)[None]
        mu = self.q_mu.T if classes else self.q_mu[None]
        K_zx = self.kernel.gram(self.inducing, X)
        if X.shape[0] < 2 * self.inducing.shape[0]:
            mean, var = projected_marginals(self._jittered_gram(), K_zx, S, mu)
            mean, var = mean.T, self.kernel.diag(X)[:, None] + var.T
        else:
            P, c = whitened_form(self._jittered_gram(), S, mu)
            mean = K_zx.T @ c.T
            var = self.kernel.diag(X)[:, None] + jax.vmap(quadratic_form, in_axes=(0, None), out_axes=1)(P, K_zx)
        return (mean, var) if classes else (mean[:, 0], var[:, 0])

    def _training_projection(self, X: Float[Array, "b d"]) -> Float[Array, "m b"]:
        """A as training takes it: in float64 by the explicit L^-1 (``_inverse_factor``: no multi-threaded LAPACK
        call beside XLA's products), in float32 by LAPACK's backward-stable triangular solve."""
        if self.inducing.dtype != jnp.float64:
            return self._projection(X)
        return inverse_factor_solve(self._jittered_gram(), self.kernel.gram(self.inducing, X))

    @property
    def input_dim(self) -> int:
        return self.inducing.shape[1]

    def marginals(self, X: Float[Array, "b d"]) -> tuple[Float[Array, " b"] | Float[Array, "b C"], ...]:
        """Mean and variance of q(f_x) (the module docstring's marginals); softmax: both of shape (b, C)."""
        return self._marginals(self._projection(X), X)

    def _latent(self, X_test):
        """The marginals of q(f*); softmax: means (m, C) and diagonal covariances (m, C, C), the softmax
        posteriors' shapes (q's classes are independent)."""
        mean, var = self.marginals(X_test)
        if self.num_latent > 1:
            return mean, var[..., None] * jnp.eye(self.num_latent, dtype=var.dtype)
        return mean, var

    def _marginals(self, A, X):
        SA = jnp.swapaxes(jnp.tril(self.q_sqrt), -1, -2) @ A  # (m, b), softmax (C, m, b): S_c^T A
        prior_var = self.kernel.diag(X) - jnp.sum(A**2, axis=0)
        var = (prior_var if self.q_mu.ndim == 1 else prior_var[:, None]) + jnp.sum(SA**2, axis=-2).T
        return A.T @ self.q_mu, var

    def kl(self) -> Float[Array, ""]:
        """KL(q(v) || N(0, I)) = 1/2 (|S|_F^2 + |mu|^2 - m - log|S S^T|), softmax: summed over the C classes."""
        S = jnp.tril(self.q_sqrt)
        diagonal = jnp.diagonal(S, axis1=-2, axis2=-1)
        log_det = 2.0 * jnp.sum(jnp.log(jnp.abs(diagonal)))
        return 0.5 * (jnp.sum(S**2) + jnp.sum(self.q_mu**2) - diagonal.size - log_det)

    def elbo(self, X: Float[Array, "b d"], y, num_data: int | None = None, *, key: Array | None = None
             ) -> Float[Array, ""]:
        """The ELBO from a minibatch (X, y) of ``num_data`` cases (default: the batch is all of them).

        ``y`` as :func:`gpclass.fit_svgp` takes them ({-1, +1}, {0, 1} or booleans; for the softmax integers
        0..C-1), checked with X (also under ``jit`` and ``grad``).  The data term is scaled
        by num_data / b, so the average over the batches of any partition of
        the data is the ELBO (for Monte Carlo: its expectation; exactly the
        full-batch estimate when each batch gets its cases' keys).

        ``key``: the softmax's Monte Carlo estimator needs it (a key, split
        into one per case, or an array of b keys, one per case); ignored by
        binary likelihoods and by ``estimator="jensen"``.
        """
        return _checked_elbo(self, X, y, num_data, key=key)

    def _unchecked_elbo(self, X, y, num_data=None, key=None) -> Float[Array, ""]:
        """:meth:`elbo` of data checked already (``fit_svgp`` checks them on the host, once)."""
        return self._elbo_from_moments(*self._training_moments(X), y, num_data, key)

    def _inducing_checks(self, checks) -> None:
        """Add the check that the inducing inputs Z are finite to ``checks``."""
        checks.fail_if(~jnp.isfinite(self.inducing), f"SVGP: the inducing inputs Z contain NaN or infinite values{AT}; "
                       "check Z (e.g. choose it among the rows of X).",
                       at=("the first: Z[{index}] = {value}", self.inducing))

    def _checked_batch(self, X, y, checks):
        """(X, y) of a batch as :meth:`elbo` takes them, their values' checks added to ``checks``: X finite with
        Z's columns, y coded as the data term reads it (fit_svgp's ``_check_data`` on the device)."""
        X = check_inputs(X, checks=checks)
        self._inducing_checks(checks)
        if X.shape[1] != self.inducing.shape[1]:
            raise GPClassError(f"X has {X.shape[1]} input dimensions but the model's inducing inputs have "
                               f"{self.inducing.shape[1]}.")
        if self.num_latent == 1:
            return X, self.likelihood.check_labels(y, X.shape[0], X.dtype, checks)
        return X, class_indices(y, X.shape[0], self.num_latent, checks, "class", "Softmax")

    def _elbo_from_projection(self, A, X, y, num_data=None, key=None) -> Float[Array, ""]:
        """:meth:`elbo` with A = L^-1 K_zx given (``fit_svgp`` passes it on to the natural-gradient step)."""
        return self._elbo_from_moments(*self._marginals(A, X), y, num_data, key)

    def _elbo_from_moments(self, mean, var, y, num_data=None, key=None) -> Float[Array, ""]:
        """:meth:`elbo` from the marginal means and variances of q(f) at the batch's inputs."""
        if self.num_latent == 1:
            data = self.likelihood.expected_log_prob(y, mean, var)
        else:
            data = expected_log_softmax(y, mean, var, self._noise(key, mean), self.estimator)
        return _scale(num_data, y) * jnp.sum(data) - self.kl()

    def _noise(self, key, mean):
        """eps of shape (b, num_samples, C) for the Monte Carlo estimator (None for Jensen's bound)."""
        if self.estimator == "jensen":
            return None
        if key is None:
            raise GPClassError(
                "the softmax SVGP's ELBO is estimated by Monte Carlo (estimator='monte_carlo'), which needs an "
                "explicit key=jax.random.key(...); or build the model with estimator='jensen' for a deterministic "
                "lower bound."
            )
        return standard_normal_per_case(key, mean.shape[0], (self.num_samples, mean.shape[1]), mean.dtype)


@entry_point
def _checked_elbo(model: SVGP, X, y, num_data=None, *, key=None):
    """:meth:`SVGP.elbo`, its checks raised as GPClassError after a top-level call (``_errors.entry_point``)."""
    checks = Checks()
    # Attached to the data, not to the value: a gradient's program keeps what the value depends on.
    X, y = checks.attach(model._checked_batch(X, y, checks))
    return model._unchecked_elbo(X, y, num_data, key)


def standard_normal_per_case(key, b: int, shape, dtype) -> Float[Array, "b ..."]:
    """N(0, I) noise of shape (b, *shape), case i's from its own key: ``key`` split in b, or b keys given."""
    key = jnp.asarray(key) if not isinstance(key, jax.Array) else key
    typed = jax.dtypes.issubdtype(key.dtype, jax.dtypes.prng_key)
    if key.ndim == (0 if typed else 1):
        key = jax.random.split(key, b)
    elif key.shape[0] != b:
        raise GPClassError(f"key: one key, or one per case ({b}); got {key.shape[0]} keys.")
    return jax.vmap(lambda k: jax.random.normal(k, shape, dtype))(key)


def expected_log_softmax(y, mean: Float[Array, "b C"], var: Float[Array, "b C"], eps, estimator: str
                         ) -> Float[Array, " b"]:
    """E[log p(y_i|f_i)] = m_i^{y_i} - E[logsumexp f_i] under f_i ~ N(m_i, diag v_i), per case.

    ``eps`` (b, S, C): the Monte Carlo average over f_is = m_i + sqrt(v_i) eps_is;
    ``estimator="jensen"`` (eps unused): log sum_c exp(m^c + v^c / 2), a lower bound.
    """
    picked = jnp.take_along_axis(mean, jnp.asarray(y).astype(jnp.int32)[:, None], axis=1)[:, 0]
    if estimator == "jensen":
        return picked - logsumexp(mean + 0.5 * var, axis=-1)
    samples = mean[:, None, :] + jnp.sqrt(var)[:, None, :] * eps
    return picked - jnp.mean(logsumexp(samples, axis=-1), axis=-1)


def _scale(num_data, y) -> float:
    """num_data / b: the factor that makes a minibatch's data term an unbiased estimate of the whole data's."""
    return 1.0 if num_data is None else num_data / y.shape[0]


def natural_gradient_step(model: SVGP, A, X, y, num_data, step: float, key=None) -> SVGP:
    """q(v) after one natural-gradient step of the minibatch ELBO (Salimbeni, Eleftheriadis & Hensman 2018).

    With natural parameters theta = (Sigma^-1 mu, -1/2 Sigma^-1) and
    expectation parameters eta = (mu, Sigma + mu mu^T), the natural gradient
    in theta is the ordinary gradient in eta; for the whitened prior
    N(0, I) (theta_0 = (0, -1/2 I)) the step is

        theta <- (1 - step) theta + step (theta_0 + d E / d eta),

    E the (scaled) expected log-likelihood.  For a log-concave likelihood
    d E / d Sigma is negative semi-definite, so for step in (0, 1] the new
    -2 theta_2 stays positive definite.  step = 1 jumps to the fixed point of
    the current linearisation (the conjugate-computation update of Khan & Lin).
    A = L^-1 K_zx at the model's hyperparameters and Z (``SVGP._training_projection``).

    Softmax: q(v) factorises over the classes, so the step is taken for each
    class in its own (mu_c, Sigma_c), with E's gradient in the marginal
    moments of q(f_i^c) from Bonnet's and Price's theorems,

        dE/dm_i^c = y_i^c - E[p_c(f_i)],   dE/dv_i^c = -1/2 E[p_c(f_i) (1 - p_c(f_i))],

    p = softmax, averaged over the samples drawn from ``key`` (as the ELBO's;
    ``estimator="jensen"``: the gradients of Jensen's bound, the objective
    then).  Both keep dE/dv <= 0 sample by sample, so the new covariances stay
    positive definite (the reparametrisation gradient of dE/dv would not).
    """
    prior_var = model.kernel.diag(X) - jnp.sum(A**2, axis=0)
    scale = _scale(num_data, y)

    def update(mu, S, expected):
        return _natural_update(mu, jnp.tril(S), A, prior_var, lambda mean, var: scale * expected(mean, var), step)

    if model.num_latent == 1:
        new_mu, new_sqrt = update(model.q_mu, model.q_sqrt,
                                  lambda mean, var: jnp.sum(model.likelihood.expected_log_prob(y, mean, var)))
    else:
        mean, var = model._marginals(A, X)
        g_mean, g_var = _softmax_moment_gradients(y, mean, var, model._noise(key, mean), model.estimator)
        per_class = lambda mu, S, gm, gv: update(mu, S, lambda m_, v_: jnp.sum(gm * m_ + gv * v_))
        new_mu, new_sqrt = jax.vmap(per_class, out_axes=(1, 0))(model.q_mu.T, model.q_sqrt, g_mean.T, g_var.T)
    return eqx.tree_at(lambda mdl: (mdl.q_mu, mdl.q_sqrt), model, (new_mu, new_sqrt))


def _natural_update(mu, S, A, prior_var, expected, step):
    """(mu, S) of one latent GP after the step, ``expected(mean, var)`` its data term in q(f)'s marginals."""
    def in_eta(eta1, eta2):
        var = prior_var + jnp.sum(A * ((eta2 - jnp.outer(eta1, eta1)) @ A), axis=0)
        return expected(A.T @ eta1, var)

    g1, g2 = jax.grad(in_eta, argnums=(0, 1))(mu, S @ S.T + jnp.outer(mu, mu))
    g2 = 0.5 * (g2 + g2.T)
    # Inverses and factors by _inverse_factor's recursion: no multi-threaded LAPACK call beside XLA's products.
    identity = jnp.eye(mu.shape[0], dtype=mu.dtype)
    S_inverse = triangular_inverse(S)
    precision = S_inverse.T @ S_inverse  # Sigma^-1 = S^-T S^-1
    new_precision = (1.0 - step) * precision + step * (identity - 2.0 * g2)
    new_theta1 = (1.0 - step) * precision @ mu + step * g1
    V = inverse_factor(0.5 * (new_precision + new_precision.T))
    new_Sigma = V.T @ V
    return new_Sigma @ new_theta1, recursive_cholesky(0.5 * (new_Sigma + new_Sigma.T))


def _softmax_moment_gradients(y, mean, var, eps, estimator):
    """(dE/dm, dE/dv) per case and class: Bonnet and Price with the samples, or Jensen's bound's gradient."""
    Y = jax.nn.one_hot(jnp.asarray(y).astype(jnp.int32), mean.shape[1], dtype=mean.dtype)
    if estimator == "jensen":
        p = jax.nn.softmax(mean + 0.5 * var, axis=-1)
        return Y - p, -0.5 * p
    p = jax.nn.softmax(mean[:, None, :] + jnp.sqrt(var)[:, None, :] * eps, axis=-1)
    return Y - jnp.mean(p, axis=1), -0.5 * jnp.mean(p * (1.0 - p), axis=1)
