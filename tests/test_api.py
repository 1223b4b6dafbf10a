"""The public surface is exactly what ``gpclass/__init__.py`` re-exports."""

import importlib
import types

import pytest

import gpclass as gpc

PUBLIC_MODULES = {"datasets", "integrators", "kernels", "likelihoods", "metrics", "plot", "priors", "samplers"}


# Imported by the user only (they need an optional dependency): present in the namespace once imported.
OPTIONAL_MODULES = {"sklearn"}


def test_no_private_module_leaks_into_the_namespace():
    public = {name for name in dir(gpc) if not name.startswith("_")} - OPTIONAL_MODULES
    assert public == set(gpc.__all__)
    modules = {name for name in public if isinstance(getattr(gpc, name), types.ModuleType)}
    assert modules == PUBLIC_MODULES


@pytest.mark.parametrize("name", ["fit", "predict", "inference", "em_ep", "bound"])
def test_functions_are_not_shadowed_modules(name):
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module(f"gpclass.{name}")


def test_every_public_module_declares_what_it_exports():
    """Each public module has ``__all__``, and every public gpclass object in it is listed there."""
    for name in PUBLIC_MODULES:
        module = getattr(gpc, name)
        ours = {n for n in dir(module) if not n.startswith("_")
                and getattr(getattr(module, n), "__module__", "").startswith("gpclass")}
        assert ours == set(module.__all__), name


def test_throw_means_the_same_with_the_same_default_in_every_entry_point():
    """One failure contract (issue 33): infer, fit, fit_em_ep and fit_svgp raise by default unless they succeed."""
    import inspect

    for entry in (gpc.infer, gpc.fit, gpc.fit_em_ep, gpc.fit_svgp):
        parameter = inspect.signature(entry).parameters["throw"]
        assert parameter.default is True and parameter.kind == inspect.Parameter.KEYWORD_ONLY, entry.__name__
