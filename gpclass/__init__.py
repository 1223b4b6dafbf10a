"""gpclass: Gaussian-process classification in JAX.

The public API is what this module re-exports; every name's docstring has an example.

>>> import gpclass as gpc
>>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
>>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
>>> posterior = gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y)
>>> p = gpc.predict(posterior, X[:3])  # p(y = +1) at three inputs
>>> p.shape
(3,)
"""

from . import datasets, integrators, kernels, likelihoods, metrics, plot, priors, samplers
from ._bound import variational_bound
from ._compile import compiler_options, enable_compilation_cache, filter_jit, jit
from ._em_ep import EMEPResult, fit_em_ep
from ._exceptions import GPClassError
from ._fit import FitResult, fit
from ._inference import (
    AIS,
    EP,
    KL,
    MCMC,
    AbstractInference,
    AbstractPosterior,
    GaussianPosterior,
    JaakkolaJordan,
    JaakkolaJordanUpper,
    Laplace,
    PreferencePosterior,
    SamplePosterior,
    SamplerInfo,
    SoftmaxPosterior,
    SoftmaxSamplePosterior,
    SolverInfo,
    SparsePosterior,
    SparseSoftmaxPosterior,
    infer,
    predict_pair_latent,
    predict_preference,
)
from ._io import load, save
from ._predict import predict, predict_latent
from ._progress import Progress
from ._sharding import sharded_vmap
from ._sparse import Sparse
from ._status import Status
from ._svgp import SVGP
from ._svgp_fit import SVGPFit, fit_svgp
from ._threads import limit_lapack_threads
from .likelihoods import mackay_probability

__version__ = "0.2.0"

__all__ = [
    "AIS",
    "MCMC",
    "PreferencePosterior",
    "SamplePosterior",
    "SamplerInfo",
    "AbstractInference",
    "AbstractPosterior",
    "EMEPResult",
    "EP",
    "FitResult",
    "GPClassError",
    "GaussianPosterior",
    "JaakkolaJordan",
    "JaakkolaJordanUpper",
    "KL",
    "Laplace",
    "Progress",
    "SVGP",
    "SVGPFit",
    "SoftmaxPosterior",
    "SoftmaxSamplePosterior",
    "Sparse",
    "SparsePosterior",
    "SparseSoftmaxPosterior",
    "SolverInfo",
    "Status",
    "compiler_options",
    "datasets",
    "integrators",
    "enable_compilation_cache",
    "filter_jit",
    "fit",
    "fit_em_ep",
    "fit_svgp",
    "infer",
    "jit",
    "kernels",
    "likelihoods",
    "limit_lapack_threads",
    "load",
    "mackay_probability",
    "metrics",
    "plot",
    "predict",
    "predict_latent",
    "predict_pair_latent",
    "predict_preference",
    "priors",
    "samplers",
    "save",
    "sharded_vmap",
    "variational_bound",
]
