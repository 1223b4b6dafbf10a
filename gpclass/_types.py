"""jaxtyping names shared across gpclass."""

from jaxtyping import Array, Bool, Float, Int

__all__ = ["Array", "Bool", "Float", "Int"]
