"""Likelihoods p(y|f): binary ones for labels y in {-1, +1}, the multi-class softmax and multinomial probit, the ordinal
(cumulative probit) likelihood for ordered labels 0..K-1, and the preference likelihood for pairwise
comparisons of items."""

from ._base import AbstractLikelihood
from ._heaviside import Heaviside
from ._label_noise import LabelNoise
from ._logistic import Logistic
from ._mackay import mackay_probability
from ._multinomial_probit import MultinomialProbit
from ._ordinal import Ordinal
from ._preference import Preference
from ._probit import Probit
from ._soft_labels import SoftLabels
from ._softmax import Softmax

__all__ = [
    "AbstractLikelihood", "Heaviside", "LabelNoise", "Logistic", "MultinomialProbit", "Ordinal", "Preference",
    "Probit", "SoftLabels", "Softmax", "mackay_probability",
]
