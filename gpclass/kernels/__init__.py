"""Covariance functions: evaluate one pair of points; ``+`` and ``*`` compose them."""

from ._base import AbstractKernel, OnDims, Product, Sum
from ._categorical import CategoricalOverlap
from ._per_class import PerClass
from ._precomputed import Precomputed
from ._simple import Constant, Linear, White
from ._stationary import SquaredExponential

__all__ = [
    "AbstractKernel",
    "CategoricalOverlap",
    "Constant",
    "Linear",
    "OnDims",
    "PerClass",
    "Precomputed",
    "Product",
    "SquaredExponential",
    "Sum",
    "White",
]
