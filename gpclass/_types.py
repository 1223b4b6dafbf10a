"""jaxtyping aliases shared across gpclass."""

from jaxtyping import Array, Bool, Float, Int

Inputs = Float[Array, "n d"]
TestInputs = Float[Array, "m d"]
Labels = Float[Array, " n"]
Latents = Float[Array, " n"]
Scalar = Float[Array, ""]

__all__ = ["Array", "Bool", "Float", "Int", "Inputs", "TestInputs", "Labels", "Latents", "Scalar"]
