"""Covariance functions: evaluate one pair of points; ``+`` and ``*`` compose them."""

from .._validation import as_float
from ._base import AbstractKernel, Exponentiation, OnDims, Product, Scale, Sum
from ._categorical import CategoricalOverlap
from ._dot_product import NeuralNetwork, Polynomial
from ._per_class import PerClass
from ._precomputed import Precomputed
from ._simple import Constant, Linear, White
from ._stationary import Matern12, Matern32, Matern52, Periodic, RationalQuadratic, SquaredExponential

__all__ = [
    "AbstractKernel",
    "CategoricalOverlap",
    "Constant",
    "Exponentiation",
    "Linear",
    "Matern12",
    "Matern32",
    "Matern52",
    "NeuralNetwork",
    "OnDims",
    "PerClass",
    "Periodic",
    "Polynomial",
    "Precomputed",
    "Product",
    "RationalQuadratic",
    "Scale",
    "SquaredExponential",
    "Sum",
    "White",
    "as_float",
]
