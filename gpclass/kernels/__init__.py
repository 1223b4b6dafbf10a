"""Covariance functions: evaluate one pair of points; ``+`` and ``*`` compose them."""

from ._base import AbstractKernel, Product, Sum
from ._simple import Constant, Linear, White
from ._stationary import SquaredExponential

__all__ = ["AbstractKernel", "Constant", "Linear", "Product", "SquaredExponential", "Sum", "White"]
