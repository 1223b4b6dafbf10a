"""Likelihoods p(y|f): binary ones for labels y in {-1, +1}, and the multi-class softmax."""

from ._base import AbstractLikelihood
from ._heaviside import Heaviside
from ._label_noise import LabelNoise
from ._logistic import Logistic
from ._mackay import mackay_probability
from ._probit import Probit
from ._softmax import Softmax

__all__ = ["AbstractLikelihood", "Heaviside", "LabelNoise", "Logistic", "Probit", "Softmax", "mackay_probability"]
