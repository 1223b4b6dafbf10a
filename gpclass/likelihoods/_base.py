"""The likelihood protocol: log p(y|f) and what inference needs from it."""

import abc

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from .._exceptions import GPClassError
from .._types import Array, Bool, Float
from .._validation import Checks, binary_one_class, check_binary_labels, host_binary_labels
from . import _gaussian_average

_F_TRANSITION = 10.0  # |f| below which a sigmoid-type log-likelihood bends


class AbstractLikelihood(eqx.Module):
    """A factorising likelihood p(y|f) = prod_i p(y_i|f_i) with labels y_i in {-1, +1}.

    Subclasses implement the elementwise :meth:`log_prob` (stable for large |f|)
    and :meth:`predictive_probability`.  Derivatives come from automatic
    differentiation of :meth:`log_prob`, so they inherit its stability.
    ``log_concave`` says whether log p(y|f) is concave in f (W >= 0), which
    Laplace's method needs.

    What inference asks of any likelihood (the protocol ``gpc.likelihoods.Softmax``
    follows too): ``num_latent``, the latent functions per case (1 here), and
    :meth:`check_labels`, the labels in the form ``log_prob`` takes them.  With them, for labels other than
    +-1 (``gpc.likelihoods.Ordinal``: 0..K-1): ``left_out_label`` (the label ``mask`` gives a left-out case),
    :meth:`one_class` (``gpc.fit``'s check), :meth:`host_labels` (``gpc.fit_svgp``'s), :meth:`transitions`
    (the panels of :meth:`expected_log_prob`) and ``binary`` (whether ``predictive_probability`` is
    p(y* = +1), shape (m,), which ``gpc.integrators.MacKay`` requires).  For labels that are not one per case
    (``gpc.likelihoods.Preference``'s comparisons, ``labels_per_input = False``): :meth:`prior_covariance`
    (the prior of the latent values the sites see), :meth:`site_labels` and :meth:`condition` (the
    posterior that predicts).

    Example: a likelihood of your own needs :meth:`log_prob` and :meth:`predictive_probability`; Laplace's
    derivatives come from automatic differentiation (here the probit with a scale, Phi(y f / scale))::

        >>> from jax.scipy.special import log_ndtr, ndtr
        >>> import equinox as eqx
        >>> class ScaledProbit(gpc.likelihoods.AbstractLikelihood):
        ...     scale: float = eqx.field(static=True, default=2.0)  # fixed: with the kernel's variance, not identified
        ...     def log_prob(self, y, f):
        ...         return log_ndtr(y * f / self.scale)
        ...     def predictive_probability(self, mean, var):  # int Phi(f / scale) N(f | mean, var) df
        ...         return ndtr(mean / jnp.sqrt(self.scale**2 + var))
        >>> lik = ScaledProbit()
        >>> print(np.exp(lik.log_prob(jnp.array([1.0, -1.0]), jnp.array([0.0, 0.0]))))
        [0.5 0.5]
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> post = gpc.infer(gpc.Laplace(), kernel, lik, X, y)
        >>> bool(post.info.converged), gpc.predict(post, X[:3]).shape
        (True, (3,))
    """

    log_concave = True
    finite_expected_log_prob = True  # E_q[log p(y|f)] > -inf for a Gaussian q of positive variance (SVGP's ELBO)
    num_latent = 1  # latent functions per case (the softmax has C)
    binary = True  # labels +-1, predictive_probability p(y* = +1) of shape (m,); Ordinal: False, (m, K)
    left_out_label = 0.0  # the label gpc.infer's mask gives a left-out case (``likelihoods._masked``)
    labels_per_input = True  # one label per row of X (``Preference``: comparisons of the rows)
    weighted_labels = True  # gpc.infer's weights may multiply the labels +-1 (``likelihoods._weighted``)
    weighted_rows = False  # Softmax: weights (and mask) scale the rows of its (n, C) labels, log p by w
    # The largest latent std at which 64-node Gauss-Hermite averages log p and its first two derivatives to the
    # panels' accuracy (``_gaussian_average._by_rule``); None: the panels at every std.  A subclass that changes
    # ``log_prob`` inherits its parent's value: it sets None unless its log p is as smooth.
    hermite_std = None
    # Tilted moments in closed form (a few special functions per site, GPML eq. 3.58): EP's default schedule is then
    # the parallel one, whose extra sweeps cost less than the sequential sweeps' n x n updates; with tilted moments
    # by quadrature (the logistic) those extra sweeps cost more up to n of several hundred (``EP.schedule``).
    closed_form_tilted = False

    def check_labels(self, y, n: int, dtype, checks: Checks | None = None) -> Float[Array, " n"]:
        """The labels as inference uses them: floats in {-1, +1} ({0, 1} and booleans accepted), checked."""
        return check_binary_labels(y, n, dtype, checks)

    def prior_covariance(self, kernel, X, y):
        """The prior covariance, as an operator, of the latent values this likelihood's sites see: the kernel's
        on X (``kernel.covariance(X)``), one latent value per case; ``Preference``: the comparisons'
        utility differences."""
        return kernel.covariance(X)

    def site_labels(self, y, dtype):
        """The checked labels as :meth:`log_prob` takes them, one per site: ``y`` itself here."""
        return y

    def condition(self, solution, kernel, X, y):
        """The posterior a user gets from a method's ``solution`` (its posterior with kernel, likelihood and X
        unset): ``solution.conditioned(kernel, self, X)`` here."""
        return solution.conditioned(kernel, self, X)

    def host_labels(self, y: np.ndarray, dtype) -> np.ndarray:
        """:meth:`check_labels` on the host, in NumPy (``gpc.fit_svgp`` checks its data before any reach a device):
        floats in {-1, +1}; {0, 1} and booleans accepted."""
        return host_binary_labels(y, dtype)

    def one_class(self, y) -> Bool[Array, ""]:
        """Whether the checked labels ``y`` show fewer than two classes (left-out cases count as none): ``gpc.fit``
        refuses such data (ML-II has no finite maximiser).  Binary labels: all +1 or all -1; the (n, C)
        indicators of the softmax: one column used."""
        return binary_one_class(y)

    def parameter_checks(self, checks: Checks) -> None:
        """Add the run-time checks of this likelihood's parameter values to ``checks`` (default: none).

        ``gpc.infer`` and ``gpc.fit`` run them, so an out-of-range parameter
        (a label-flip rate outside [0, 1/2)) raises, inside jit too, instead
        of reaching a solver as NaN.
        """

    @abc.abstractmethod
    def log_prob(self, y: Float[Array, " n"], f: Float[Array, " n"]) -> Float[Array, " n"]:
        """Elementwise log p(y_i | f_i)."""

    def log_prob_derivatives(self, y: Float[Array, "..."], f: Float[Array, "..."]) -> tuple[Float[Array, "..."], ...]:
        """The first four derivatives of :meth:`log_prob` in f, elementwise (y and f of one shape): what the
        Gaussian averages of Gaussian KL's Newton steps take at the quadrature nodes
        (``_gaussian_average.averaged_derivatives``).  By default automatic differentiation of ``log_prob``;
        a likelihood with closed forms overrides it (``Logistic``)."""
        derivative, out = self.log_prob, []
        for _ in range(4):
            derivative = jax.grad(derivative, argnums=1)
            out.append(jax.vmap(derivative)(y.ravel(), f.ravel()).reshape(f.shape))
        return tuple(out)

    @abc.abstractmethod
    def predictive_probability(self, mean: Float[Array, " m"], var: Float[Array, " m"]) -> Float[Array, " m"]:
        """p(y=+1) = int p(y=+1|f) N(f|mean, var) df  (GPML eq. 3.25)."""

    def mackay_probability(self, mean: Float[Array, " m"], var: Float[Array, " m"]) -> Float[Array, " m"]:
        """MacKay's approximation of :meth:`predictive_probability` (``gpc.integrators.MacKay``): it approximates
        the logistic's average (Gibbs & MacKay eq. 23), so only a logistic model (possibly weighted, masked,
        soft-labelled or with label noise) has one; every other likelihood refuses."""
        raise GPClassError(f"gpc.integrators.MacKay() (and MeanField() for a binary likelihood) approximates the "
                           f"average of the logistic likelihood; {type(self).__name__} is not one. Use "
                           "gpc.integrators.Exact() (the default), the likelihood's own average.")

    def tilted_moments(
        self, y: Float[Array, " n"], mean: Float[Array, " n"], var: Float[Array, " n"]
    ) -> tuple[Float[Array, " n"], Float[Array, " n"], Float[Array, " n"]]:
        """(log Z, mean, variance) of the tilted distribution p(y|f) N(f|mean, var) / Z (GPML eq. 3.57).

        What expectation propagation needs from a likelihood; subclasses
        without it cannot be used with EP.
        """
        raise NotImplementedError(f"{type(self).__name__} has no tilted moments: it cannot be used with EP.")

    def transitions(self, y: Float[Array, " n"]) -> Float[Array, "n P"]:
        """The values of f around which log p(y|f) bends, sorted per case (n, P): the panel boundaries of
        :meth:`expected_log_prob`.  A sigmoid bends within [-10, 10]: (-10, 10) for every case."""
        edges = jnp.asarray([-_F_TRANSITION, _F_TRANSITION], jnp.result_type(y, float))
        return jnp.broadcast_to(edges, (*jnp.shape(y), 2))

    def expected_log_prob(
        self, y: Float[Array, " n"], mean: Float[Array, " n"], var: Float[Array, " n"]
    ) -> Float[Array, " n"]:
        """E[log p(y_i|f_i)] under f_i ~ N(mean_i, var_i): the data term of a variational bound.

        By default 64-node Gauss-Legendre panels in z = (f - mean) / std
        over [-10, 10], split at the :meth:`transitions` (three panels for a
        sigmoid, split where f enters and leaves [-10, 10]): the log-likelihood
        bends only there, so each panel integrates a smooth function whatever
        the variance; relative error below 1e-9 for probit with and without
        label noise, means in [-40, 3] and variances in [1e-12, 1e4]
        (``likelihoods._gaussian_average``).  A likelihood analytic in a wide
        strip about the real axis declares ``hermite_std`` (logistic, probit:
        1.5): when no case's std exceeds it, 64-node Gauss-Hermite, as accurate
        with a third of the nodes.  Subclasses with a closed form override it.
        """
        return _gaussian_average.expected_log_prob(self, y, mean, var)

    def expected_log_prob_derivatives(self, y, mean, var):
        """(dE/dm, dE/dv, d2E/dm2, d2E/dm dv, d2E/dv2) per case of E = :meth:`expected_log_prob`, as Gaussian KL's
        Newton steps take them.

        Where E is the quadrature rule, the rule's averages of the derivatives
        of :meth:`log_prob` (Bonnet's and Price's theorems): one pass over its
        nodes, without the cancellation that differentiating through
        sqrt(var) brings at small variances.  Where a subclass computes E its
        own way, automatic differentiation of it.
        """
        if type(self).expected_log_prob is AbstractLikelihood.expected_log_prob:
            return _gaussian_average.averaged_derivatives(self, y, mean, var)
        return _gaussian_average.differentiated(self.expected_log_prob, y, mean, var)

    @property
    def integrator(self):
        """How predictions average this likelihood by default: ``gpc.integrators.Exact()``
        (:meth:`predictive_probability`)."""
        from ..integrators import Exact

        return Exact()

    def factor(self, op, w: Float[Array, " n"]):
        """The prior ``op``'s factorisation of I + W^1/2 K W^1/2 at this likelihood's curvature w (the third
        output of :meth:`derivatives`): for one latent function W = diag(w), ``op.factor(w)``."""
        return op.factor(w)

    def newton_factor(self, op, w: Float[Array, " n"]):
        """What a Newton step needs of :meth:`factor`: its solve with I + W K."""
        return self.factor(op, w)

    def factor_given(self, op, w: Float[Array, " n"], factor):
        """:meth:`factor` when its value ``factor`` was computed already (``op.factor_given``)."""
        return op.factor_given(w, factor)

    def log_prob_scale(self, y, f, log_prob: Float[Array, " n"]) -> Float[Array, " n"]:
        """A per-case bound on the magnitudes whose rounding enters ``log_prob(y, f)``: |log p| by default."""
        return jnp.abs(log_prob)

    def curvature_diagonal(self, y, f):
        """The diagonal of W = -d^2 log p(y|f) / df^2 at f, shaped as f: ``derivatives``' W for one latent value
        per case (the softmax overrides it: the diagonal of its blocks).  Gaussian KL's start (Laplace's sites,
        ``laplace.sites_at_mode``) takes its site precisions from it."""
        return self.derivatives(y, f)[2]

    def derivatives(
        self, y: Float[Array, " n"], f: Float[Array, " n"]
    ) -> tuple[Float[Array, " n"], Float[Array, " n"], Float[Array, " n"]]:
        """(log p(y|f), d log p / df, W = -d^2 log p / df^2), elementwise (GPML eqs. 3.15-3.16)."""

        def value_and_slope(fi, yi):
            return jax.value_and_grad(lambda t: self.log_prob(yi, t))(fi)

        def curvature(fi, yi):
            return jax.grad(lambda t: value_and_slope(t, yi)[1])(fi)

        lp, d1 = jax.vmap(value_and_slope)(f, y)
        d2 = jax.vmap(curvature)(f, y)
        return lp, d1, -d2


def require_binary_base(wrapper: str, base: AbstractLikelihood) -> None:
    """Refuse a ``base`` that is not a binary likelihood of one latent function (``wrapper`` its name): label
    noise and soft labels are defined by p(+1|f) and p(-1|f) = 1 - p(+1|f)."""
    if not isinstance(base, AbstractLikelihood):
        raise GPClassError(f"{wrapper}: base must be a likelihood (gpc.likelihoods.Logistic(), Probit(), ...); got "
                           f"{type(base).__name__}.")
    if not base.binary or getattr(base, "num_latent", 1) != 1:
        remedy = ("Soft labels of several classes are rows of class probabilities given to "
                  "gpc.likelihoods.Softmax(C) itself." if wrapper == "SoftLabels" else
                  "Label noise of several classes is not modelled.")
        raise GPClassError(f"{wrapper} wraps a binary likelihood (Logistic, Probit, Heaviside, Preference); "
                           f"{type(base).__name__} is not one. {remedy}")
