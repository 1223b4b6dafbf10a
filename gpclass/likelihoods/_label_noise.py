"""Label noise: a fraction of labels flipped at random (Kim & Ghahramani 2006, eq. 9)."""

import equinox as eqx
import jax.numpy as jnp
import numpy as np

from .._errors import AT
from .._exceptions import GPClassError
from .._types import Array, Float
from .._validation import as_float, concrete_or_none, parameter_at
from ._base import AbstractLikelihood, require_binary_base
from ._heaviside import Heaviside

_EPSILON_RANGE = (
    f"LabelNoise: epsilon, the label-flip rate, must lie in [0, 1/2){AT}: at 1/2 the labels carry no information, "
    "above it log p(y|f) is not defined; pass e.g. gpc.likelihoods.LabelNoise(base, epsilon=0.05)."
)


class LabelNoise(AbstractLikelihood):
    """p(y|f) = epsilon + (1 - 2 epsilon) p_base(y|f)  (Kim & Ghahramani eq. 9 with p_base = Phi).

    ``epsilon`` in [0, 1/2) is the label-flip rate and a differentiable
    hyperparameter (``gpc.fit`` keeps it in (0, 1/2) by a logit transform).  The likelihood is not log-concave
    (W = -d^2 log p / df^2 can be negative), so Laplace's method refuses it; EP handles it exactly
    through the closed-form mixture moments of :meth:`tilted_moments`.

    Example::

        >>> lik = gpc.likelihoods.LabelNoise(gpc.likelihoods.Heaviside(), epsilon=0.1)
        >>> print(np.exp(lik.log_prob(jnp.array([1.0, -1.0]), jnp.array([0.5, 0.5]))).round(3))  # 1 - eps, eps
        [0.9 0.1]
        >>> lik = gpc.likelihoods.LabelNoise(gpc.likelihoods.Probit(), epsilon=0.05)  # use with gpc.EP()
    """

    base: AbstractLikelihood
    epsilon: Float[Array, ""] = eqx.field(converter=as_float, default=0.05)
    log_concave = False
    upper_bounds = {"epsilon": 0.5}  # gpc.fit optimises logit(2 epsilon)

    @property
    def closed_form_tilted(self):
        """The mixture's tilted moments are the base's, in closed form where those are (EP's default schedule)."""
        return self.base.closed_form_tilted

    def __check_init__(self):
        require_binary_base("LabelNoise", self.base)
        value = concrete_or_none(self.epsilon)  # a traced value is checked by parameter_checks
        if value is not None and not np.all((value >= 0) & (value < 0.5)):
            raise GPClassError(_EPSILON_RANGE.replace(AT, f" (got epsilon = {value!s})"))

    def parameter_checks(self, checks):
        checks.fail_if(~((self.epsilon >= 0) & (self.epsilon < 0.5)), _EPSILON_RANGE,
                       at=parameter_at("epsilon", self.epsilon))
        self.base.parameter_checks(checks)

    def log_prob(self, y, f):
        return jnp.logaddexp(jnp.log(self.epsilon), jnp.log1p(-2.0 * self.epsilon) + self.base.log_prob(y, f))

    def tilted_moments(self, y, mean, var):
        """The tilted distribution is the mixture eps N(mean, var) + (1 - 2 eps) p_base(y|f) N(mean, var)."""
        log_zb, mean_b, var_b = self.base.tilted_moments(y, mean, var)
        log_a = jnp.log(self.epsilon) + jnp.zeros_like(log_zb)
        log_b = jnp.log1p(-2.0 * self.epsilon) + log_zb
        log_z = jnp.logaddexp(log_a, log_b)
        pa, pb = jnp.exp(log_a - log_z), jnp.exp(log_b - log_z)
        tilted_mean = pa * mean + pb * mean_b
        tilted_var = pa * (var + (mean - tilted_mean) ** 2) + pb * (var_b + (mean_b - tilted_mean) ** 2)
        return log_z, tilted_mean, tilted_var

    def expected_log_prob(self, y, mean, var):
        """Closed form for a step-function base (Kim & Ghahramani's model):
        P(y f > 0) log(1 - eps) + P(y f <= 0) log eps; quadrature otherwise."""
        if not isinstance(self.base, Heaviside):
            return super().expected_log_prob(y, mean, var)
        p_right = self.base.predictive_probability(y * mean, var)
        # 0 * log 0 = 0: an empty side contributes nothing.
        right = jnp.where(p_right > 0, p_right * jnp.log1p(-self.epsilon), 0.0)
        wrong = jnp.where(p_right < 1, (1.0 - p_right) * jnp.log(self.epsilon), 0.0)
        return right + wrong

    def predictive_probability(self, mean, var):
        return self.epsilon + (1.0 - 2.0 * self.epsilon) * self.base.predictive_probability(mean, var)

    def mackay_probability(self, mean, var):
        return self.epsilon + (1.0 - 2.0 * self.epsilon) * self.base.mackay_probability(mean, var)
