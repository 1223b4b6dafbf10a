"""Approximate inference methods: one file each, one Gaussian posterior form."""

from ._base import AbstractInference
from ._infer import infer
from ._posterior import (
    AbstractPosterior,
    GaussianPosterior,
    SamplePosterior,
    SamplerInfo,
    SoftmaxPosterior,
    SoftmaxSamplePosterior,
    SolverInfo,
    SparsePosterior,
    SparseSoftmaxPosterior,
)
from ._preference import PreferencePosterior, predict_pair_latent, predict_preference
from .ais import AIS
from .ep import EP
from .jaakkola_jordan import JaakkolaJordan
from .jaakkola_jordan_upper import JaakkolaJordanUpper
from .kl import KL
from .laplace import Laplace
from .mcmc import MCMC

__all__ = [
    "AIS",
    "AbstractPosterior",
    "AbstractInference",
    "EP",
    "MCMC",
    "SamplePosterior",
    "SamplerInfo", "GaussianPosterior", "JaakkolaJordan", "JaakkolaJordanUpper", "KL", "Laplace", "SoftmaxPosterior",
    "SolverInfo", "SparsePosterior",
    "SparseSoftmaxPosterior", "infer", "PreferencePosterior", "SoftmaxSamplePosterior", "predict_pair_latent",
    "predict_preference"]
