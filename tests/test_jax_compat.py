"""What gpclass takes from JAX's private modules (``gpclass._jax_compat``), behaviour by behaviour: a JAX upgrade
that changes one fails here, not somewhere downstream."""

import jax
import jax.numpy as jnp

from gpclass._jax_compat import current_trace, every_program_stored, top_level


def test_top_level_is_true_only_outside_every_transformation():
    assert top_level()
    seen = []

    def record(x):
        seen.append(top_level())
        return x

    jax.jit(record)(1.0)
    jax.vmap(record)(jnp.ones(2))
    jax.grad(record)(1.0)
    assert seen == [False, False, False]
    assert top_level()


def test_current_trace_is_one_object_per_level_of_one_transformation():
    outside = current_trace()
    levels = {}

    def inner(x):
        levels["inner"] = current_trace()
        return x

    def outer(x):
        levels["outer"] = current_trace()
        levels["outer again"] = current_trace()
        return jax.vmap(inner)(x)

    jax.jit(outer)(jnp.ones(2))
    assert levels["outer"] is levels["outer again"]
    assert levels["outer"] is not outside and levels["inner"] is not levels["outer"]
    assert current_trace() is outside


def test_every_program_stored_sets_the_cache_threshold_to_zero_and_restores_it():
    before = jax.config.jax_persistent_cache_min_compile_time_secs
    with every_program_stored():
        assert jax.config.jax_persistent_cache_min_compile_time_secs == 0.0
    assert jax.config.jax_persistent_cache_min_compile_time_secs == before
