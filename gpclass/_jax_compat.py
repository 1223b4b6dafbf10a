"""The three things gpclass takes from JAX's private modules (``jax._src``), in one place.

Each is guarded: a JAX without it degrades to a documented, safe behaviour,
and ``tests/test_jax_compat.py`` tests every behaviour gpclass relies on, so
a JAX upgrade that changes one fails there first.
"""

import contextlib

try:  # the trace that is recording operations now (a jit's, a vmap's, a loop body's)
    from jax._src.core import trace_ctx as _trace_ctx

    def current_trace() -> object:
        """The trace recording operations now: the same object throughout one level of one transformation."""
        return _trace_ctx.trace
except ImportError:  # pragma: no cover - a JAX without it: every check raises from the program
    def current_trace() -> object:
        return object()

try:  # whether no transformation is tracing: where JAX accepts compiler options (pjit's own test)
    from jax._src.core import trace_state_clean as _trace_state_clean

    def top_level() -> bool:
        """Whether no JAX transformation is tracing (a call from plain Python)."""
        return _trace_state_clean()
except ImportError:  # pragma: no cover - a JAX without it: never pass options
    def top_level() -> bool:
        return False


def every_program_stored():
    """A context in which JAX's persistent compilation cache stores every program (its threshold of compile time
    at 0 s, scoped like x64); a JAX without the setting keeps its default threshold."""
    try:
        from jax._src.config import persistent_cache_min_compile_time_secs as threshold
    except ImportError:  # pragma: no cover - a JAX without it: JAX's default threshold
        return contextlib.nullcontext()
    return threshold(0.0)
