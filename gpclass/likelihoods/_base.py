"""The likelihood protocol: log p(y|f) and what inference needs from it."""

import abc

import equinox as eqx
import jax

from .._types import Array, Float


class AbstractLikelihood(eqx.Module):
    """A factorising likelihood p(y|f) = prod_i p(y_i|f_i) with labels y_i in {-1, +1}.

    Subclasses implement the elementwise :meth:`log_prob` (stable for large |f|)
    and :meth:`predictive_probability`.  Derivatives come from automatic
    differentiation of :meth:`log_prob`, so they inherit its stability.
    ``log_concave`` says whether log p(y|f) is concave in f (W >= 0), which
    Laplace's method needs.
    """

    log_concave = True

    @abc.abstractmethod
    def log_prob(self, y: Float[Array, " n"], f: Float[Array, " n"]) -> Float[Array, " n"]:
        """Elementwise log p(y_i | f_i)."""

    @abc.abstractmethod
    def predictive_probability(self, mean: Float[Array, " m"], var: Float[Array, " m"]) -> Float[Array, " m"]:
        """p(y=+1) = int p(y=+1|f) N(f|mean, var) df  (GPML eq. 3.25)."""

    def tilted_moments(
        self, y: Float[Array, " n"], mean: Float[Array, " n"], var: Float[Array, " n"]
    ) -> tuple[Float[Array, " n"], Float[Array, " n"], Float[Array, " n"]]:
        """(log Z, mean, variance) of the tilted distribution p(y|f) N(f|mean, var) / Z (GPML eq. 3.57).

        What expectation propagation needs from a likelihood; subclasses
        without it cannot be used with EP.
        """
        raise NotImplementedError(f"{type(self).__name__} has no tilted moments: it cannot be used with EP.")

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
