"""The docstrings are the API reference: every public name has one, with an example that runs.

A public name is one in ``__all__`` of a public module (``PUBLIC_MODULES``).  Its example is the ``>>>`` lines of its
docstring, run by :mod:`doctest` (ellipsis and whitespace-insensitive comparison on) with ``gpc``, ``jax``, ``jnp``
and ``np`` already imported, as a user who pastes the example into a session would have them.  Examples that compile
an inference program are in the slow tier (``SLOW``); the rest run by default.
"""

import doctest
import importlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import gpclass as gpc

PUBLIC_MODULES = (
    "gpclass",
    "gpclass.datasets",
    "gpclass.integrators",
    "gpclass.kernels",
    "gpclass.likelihoods",
    "gpclass.metrics",
    "gpclass.plot",
    "gpclass.priors",
    "gpclass.samplers",
    "gpclass.sklearn",
)

# Public names whose examples compile an inference program (seconds each): run with `-m slow`.  Two sets, one for
# the top-level names and one for the submodules' names.
SLOW_TOP_LEVEL = frozenset(f"gpclass.{name}" for name in (
    "AIS", "AbstractPosterior", "EMEPResult", "EP", "FitResult", "GaussianPosterior", "JaakkolaJordan",
    "JaakkolaJordanUpper", "KL",
    "MCMC", "PreferencePosterior", "Progress", "SVGP", "SVGPFit", "SamplePosterior", "SamplerInfo", "SoftmaxPosterior",
    "SoftmaxSamplePosterior", "Sparse", "SparsePosterior", "SparseSoftmaxPosterior", "filter_jit", "fit", "fit_em_ep",
    "fit_svgp", "jit", "predict_pair_latent", "predict_preference", "sharded_vmap", "variational_bound",
))
SLOW_SUBMODULES = frozenset(f"gpclass.{name}" for name in (
    "integrators.MacKay", "integrators.MeanField", "integrators.MonteCarlo", "kernels.Matern12",
    "likelihoods.AbstractLikelihood", "likelihoods.MultinomialProbit", "likelihoods.Ordinal",
    "metrics.expected_calibration_error",
    "likelihoods.Preference", "plot.decision_contours", "plot.decision_contours_by_kernel", "plot.log_marginal_surface",
    "samplers.AbstractSampler", "samplers.EllipticalSlice", "samplers.HMC", "samplers.HMCInfo", "samplers.SliceInfo",
    "samplers.elliptical_slice", "samplers.hmc", "sklearn.GaussianProcessClassifier",
))
SLOW = SLOW_TOP_LEVEL | SLOW_SUBMODULES


def _public_objects():
    """(qualified name, object) for every public name, each object once (re-exports share the first name)."""
    seen, found = set(), []
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        for name in module.__all__:
            obj = getattr(module, name)
            if id(obj) in seen or not callable(obj) and not isinstance(obj, type):
                continue
            seen.add(id(obj))
            found.append((f"{module_name}.{name}", obj))
    return found


PUBLIC = _public_objects()


def _example(obj):
    doc = obj.__doc__ or ""
    return doctest.DocTestParser().get_examples(doc)


def test_every_public_name_has_a_docstring_with_an_example():
    missing = [name for name, obj in PUBLIC if not (obj.__doc__ or "").strip()]
    assert not missing, f"public names without a docstring: {missing}"
    without = [name for name, obj in PUBLIC if not _example(obj)]
    assert not without, f"public names whose docstring has no runnable example (>>> lines): {without}"


@pytest.mark.parametrize(
    "qualified, obj",
    [pytest.param(q, o, id=q, marks=[pytest.mark.slow] if q in SLOW else []) for q, o in PUBLIC],
)
def test_docstring_example_runs(qualified, obj):
    if not _example(obj):
        pytest.skip(f"{qualified} has no example yet (the test above fails for it)")
    test = doctest.DocTestParser().get_doctest(
        obj.__doc__, dict(gpc=gpc, jax=jax, jnp=jnp, np=np), qualified, None, 0
    )
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = []
    try:
        runner.run(test, out=report.append)
    finally:
        if obj is gpc.enable_compilation_cache:  # its example turns JAX's persistent cache on: off for the next tests
            _compilation_cache_off()
    assert runner.failures == 0, "".join(report)


def _compilation_cache_off():
    """JAX's persistent compilation cache off again in this test process (the tests' own configuration)."""
    from jax.experimental.compilation_cache import compilation_cache

    jax.config.update("jax_compilation_cache_dir", None)
    compilation_cache.reset_cache()
