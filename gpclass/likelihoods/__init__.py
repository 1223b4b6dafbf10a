"""Likelihoods p(y|f) for labels y in {-1, +1}."""

from ._base import AbstractLikelihood
from ._heaviside import Heaviside
from ._label_noise import LabelNoise
from ._logistic import Logistic
from ._mackay import mackay_probability
from ._probit import Probit

__all__ = ["AbstractLikelihood", "Heaviside", "LabelNoise", "Logistic", "Probit", "mackay_probability"]
