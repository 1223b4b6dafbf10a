"""Approximate inference methods: one file each, one Gaussian posterior form."""

from ._base import AbstractInference
from ._infer import infer
from ._posterior import GaussianPosterior, SoftmaxPosterior, SolverInfo
from .ep import EP
from .jaakkola_jordan import JaakkolaJordan
from .kl import KL
from .laplace import Laplace

__all__ = ["AbstractInference", "EP", "GaussianPosterior", "JaakkolaJordan", "KL", "Laplace", "SoftmaxPosterior", "SolverInfo", "infer"]
