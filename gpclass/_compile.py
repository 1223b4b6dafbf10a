"""How gpclass's programs are compiled: ``jit`` and ``filter_jit``, ``jax.jit`` and ``eqx.filter_jit`` with XLA options.

gpclass's programs are many small fusions around a few LAPACK calls and
matrix products (XLA's library kernels), so on the CPU backend most of their
compile time is XLA generating and optimising machine code for the fusions,
while their run time is mostly the library kernels.  Two options cut the
first without slowing the second (value and gradient of log q for Laplace,
EP, KL, JJ and softmax Laplace; ``benchmarks/compile_options.py``, figures
in benchmarks/README.md):

* XLA's fusion emitters off (the MLIR code generator for fused elementwise
  kernels): less compile time, run times within the noise.
* LLVM optimisation level 1 instead of 3 (``xla_backend_optimization_level``):
  less compile time again, run times unchanged where the library kernels
  dominate.  The fused kernels lose LLVM's loop vectorisation, which matters
  only where they dominate (many tiny fits already compiled run a little
  slower); the first call of every program, which is what users wait for,
  is faster (``benchmarks/first_fit.py``).

A third removes work from the programs:

* copy insertion by region analysis (``xla_cpu_copy_insertion_use_region_analysis``):
  XLA's proof that a loop-carried buffer may be updated in place looks
  inside the loop's regions, so a scan that writes columns of a matrix it
  carries (EP's site loop: ``dynamic_update_slice`` into the block's columns)
  no longer copies that matrix at every step: fewer operations per site and
  a faster sequential sweep; the other methods' times do not change.

One kind of program goes further: the objective that ``gpc.fit``'s host loop
calls (at most 512 cases, called from Python) is compiled at LLVM level 0
(:func:`with_fast_codegen`), since a fit there is mostly compilation: half
its compile time again for evaluations 2-3x slower (``_fit._fit_evaluation``).

The options are passed per program (``compiler_options`` of ``jax.jit``),
never through global configuration or ``XLA_FLAGS``; a jaxlib that does not
know one compiles without it.  JAX accepts compiler options only on a program
compiled on its own, so a call made while another transformation traces (an
outer ``jit``, ``grad``, ``vmap``) uses the same function jitted without them.

The library's entry points (:func:`gpclass.infer`, :func:`gpclass.fit`, ...)
are compiled this way and dispatched asynchronously, as JAX's own.  Inside
a user's own ``jax.jit`` they are inlined and the outer program's options
apply: wrap such code in :func:`gpclass.jit` (the same arguments as
``jax.jit``) to compile it with these options too.
"""

import functools
import os
import pathlib

import equinox as eqx
import jax
import jax.numpy as jnp

from ._exceptions import as_gpclass_error
from ._jax_compat import every_program_stored, top_level

_LEVEL = "xla_backend_optimization_level"  # LLVM's: 1 for every program, 0 where with_fast_codegen asks
_CPU_OPTIONS = {
    "xla_cpu_use_fusion_emitters": False,
    _LEVEL: 1,
    "xla_cpu_copy_insertion_use_region_analysis": True,
}


@functools.cache
def compiler_options() -> dict:
    """The XLA options gpclass compiles with: on CPU ``{"xla_cpu_use_fusion_emitters": False,
    "xla_backend_optimization_level": 1, "xla_cpu_copy_insertion_use_region_analysis": True}``, else ``{}``.

    Decided at the first compilation (not at import: importing gpclass does not
    start a backend) by compiling a one-line program with all options, and if
    the jaxlib rejects that, with each option: one that it rejects is left out.

    Example:
        >>> options = gpc.compiler_options()
        >>> isinstance(options, dict)
        True
        >>> cumsum = jax.jit(jnp.cumsum, compiler_options=options)  # a program of your own, compiled the same way
        >>> cumsum(jnp.arange(4)).tolist()
        [0, 1, 3, 6]
    """
    if jax.default_backend() != "cpu":
        return {}
    if _accepts(_CPU_OPTIONS):
        return dict(_CPU_OPTIONS)
    return {name: value for name, value in _CPU_OPTIONS.items() if _accepts({name: value})}


def _accepts(options: dict) -> bool:
    try:
        # Lowered from a shape: no array is made, so no other program is compiled for the probe.
        jax.jit(jnp.negative, compiler_options=options).lower(jax.ShapeDtypeStruct((), jnp.float32)).compile()
    except jax.errors.JaxRuntimeError:
        return False
    return True


# Set by enable_compilation_cache: gpclass's own programs are then stored whatever their compile time.
_STORE_EVERY_PROGRAM = False


class _Deferred:
    """``make(options)``, a jitted function, created at its first use (so that :func:`compiler_options` runs
    after import); called under another transformation, ``make(None)``: no options at all (JAX refuses
    them on a nested jit, a caller's own included)."""

    def __init__(self, make, fun):
        self._make, self._with_options, self._plain = make, None, None
        functools.update_wrapper(self, fun)

    def _get(self):
        if not top_level():
            if self._plain is None:
                self._plain = self._make(None)
            return self._plain
        if self._with_options is None:
            self._with_options = self._make(compiler_options())
        return self._with_options

    def __call__(self, *args, **kwargs):
        fn = self._get()
        if fn is self._plain:
            return fn(*args, **kwargs)
        try:
            if _STORE_EVERY_PROGRAM:
                with every_program_stored():
                    out = fn(*args, **kwargs)
            else:
                out = fn(*args, **kwargs)
        except Exception as e:  # a failed gpclass check, reported by JAX with its message buried: raise it plainly
            error = as_gpclass_error(e)
            if error is None or error is e:
                raise
            raise error from None
        return out

    def __getattr__(self, name):  # lower, trace, eval_shape, ...
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self._get(), name)


def jit(fun=None, /, **jit_kwargs):
    """``jax.jit(fun, **jit_kwargs)`` compiled with gpclass's XLA options (:func:`compiler_options`).

    Use it in place of ``jax.jit`` around code that calls gpclass, e.g.
    ``gpc.jit(jax.vmap(lambda X, y: gpc.fit(method, kernel, lik, X, y, throw=False)))``:
    the same program and results, compiled faster on CPU, and a failed
    gpclass check raises a :class:`gpclass.GPClassError` with its message
    (``jax.jit`` reports it as JAX's ``JaxRuntimeError``).  Options given in
    ``compiler_options`` are added to (and override) gpclass's.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> def log_marginal(lengthscale):
        ...     kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=lengthscale)
        ...     return gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y).log_marginal
        >>> value_and_grad = gpc.jit(jax.value_and_grad(log_marginal))  # one program, gpclass's options
        >>> value, grad = value_and_grad(1.0)
        >>> round(float(value), 1), bool(jnp.isfinite(grad))
        (-24.4, True)
    """
    if fun is None:
        return functools.partial(jit, **jit_kwargs)
    own = jit_kwargs.pop("compiler_options", None) or {}
    def make(options):
        return jax.jit(fun, compiler_options=None if options is None else {**options, **own} or None, **jit_kwargs)

    return _Deferred(make, fun)


def with_fast_codegen(options: dict) -> dict:
    """``options`` (:func:`compiler_options`) with LLVM optimisation level 0 where they set a level (the CPU):
    for a program whose compile time dominates its calls (``gpc.fit``'s host loop, module docstring)."""
    return {**options, _LEVEL: 0} if _LEVEL in options else options


def filter_jit(fun=None, /, *, compiler_options: dict | None = None):
    """``eqx.filter_jit(fun)`` (arrays traced, everything else static) with gpclass's XLA options;
    ``compiler_options`` are added to (and override) gpclass's.  A failed gpclass check raises a
    :class:`gpclass.GPClassError`.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> @gpc.filter_jit
        ... def log_marginal(kernel, X, y):  # the kernel's arrays are traced: new values reuse the program
        ...     return gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y).log_marginal
        >>> round(float(log_marginal(kernel, X, y)), 1)
        -24.4
        >>> longer = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=2.0)
        >>> bool(log_marginal(longer, X, y) != log_marginal(kernel, X, y))
        True
    """
    if fun is None:
        return functools.partial(filter_jit, compiler_options=compiler_options)
    own = compiler_options or {}
    return _filter_jit_with(lambda options: {**options, **own}, fun)


def _filter_jit_with(adjust, fun):
    """``eqx.filter_jit(fun)`` compiled with ``adjust(compiler_options())`` at the top level (none inside
    another transformation)."""

    def make(options):
        return eqx.filter_jit(fun, compiler_options=None if options is None else adjust(options) or None)

    return _Deferred(make, fun)


def filter_jit_fast_codegen(fun):
    """:func:`filter_jit` at LLVM optimisation level 0 on the CPU (:func:`with_fast_codegen`)."""
    return _filter_jit_with(with_fast_codegen, fun)


def enable_compilation_cache(directory=None) -> pathlib.Path:
    """Keep compiled programs on disk and reuse them in later processes (JAX's persistent compilation cache).

    A new process then loads a program it compiled before instead of compiling
    it again: the compile-dominated first call of ``gpc.fit`` or ``gpc.infer``
    becomes mostly tracing (``benchmarks/first_fit.py``).  This is JAX's own
    cache, turned on for the process on request through JAX's documented
    ``set_cache_dir`` (gpclass sets no configuration by itself); it also
    resets JAX's record of whether a cache is in use, so it takes effect even
    after earlier compilations.  JAX stores only programs whose compilation
    took at least ``jax_persistent_cache_min_compile_time_secs`` (1 s by
    default); after this call gpclass's own programs (its entry points called
    directly, and functions compiled with :func:`gpclass.jit`) are stored
    whatever their compile time, since a small fit's program compiles in less
    (inside a scoped setting around each call, as ``jax.enable_x64`` scopes
    x64: the threshold of other programs is unchanged).  Setting the environment
    variable ``JAX_COMPILATION_CACHE_DIR`` before starting Python enables the
    cache without this (then JAX's threshold applies to every program).

    Only programs without host callbacks can be stored.  gpclass's entry
    points called directly (not inside your own ``jax.jit``) compile without
    any; a call with ``progress=`` reports through one and is not stored,
    except a ``gpc.fit`` that takes its steps on the host, which reports
    from Python.

    Args:
        directory: where to keep the programs; ``None`` means
            ``$XDG_CACHE_HOME/gpclass/xla`` (``~/.cache/gpclass/xla``).
            Treat it as trusted: JAX runs what it loads from there.

    Returns:
        The cache directory (created if missing).

    Example:
        >>> import tempfile
        >>> directory = gpc.enable_compilation_cache(tempfile.mkdtemp())  # no argument: ~/.cache/gpclass/xla
        >>> directory.is_dir()
        True

    From here on, gpclass's programs compiled in this process are stored in ``directory`` and a later
    process that enables the same directory loads them.  The cache stays on for the rest of the process
    (JAX's persistent cache is a setting of the process, which gpclass changes only in this call).
    """
    from jax.experimental.compilation_cache import compilation_cache

    if directory is None:
        directory = pathlib.Path(os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache") / "gpclass" / "xla"
    directory = pathlib.Path(directory).expanduser().resolve()
    directory.mkdir(parents=True, exist_ok=True)
    compilation_cache.set_cache_dir(str(directory))
    compilation_cache.reset_cache()
    global _STORE_EVERY_PROGRAM
    _STORE_EVERY_PROGRAM = True
    return directory
