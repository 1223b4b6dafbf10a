"""Likelihoods p(y|f) for labels y in {-1, +1}."""

from ._base import AbstractLikelihood
from ._label_noise import LabelNoise
from ._logistic import Logistic
from ._mackay import mackay_probability
from ._probit import Probit

__all__ = ["AbstractLikelihood", "LabelNoise", "Logistic", "Probit", "mackay_probability"]
