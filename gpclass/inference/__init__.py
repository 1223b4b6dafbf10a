"""Approximate inference methods: one file each, one Gaussian posterior form."""

from ._base import AbstractInference
from ._infer import infer
from ._posterior import GaussianPosterior, SolverInfo
from .laplace import Laplace

__all__ = ["AbstractInference", "GaussianPosterior", "Laplace", "SolverInfo", "infer"]
