"""gpc.jit / gpc.filter_jit: jax.jit / eqx.filter_jit with gpclass's XLA options, and where JAX refuses options."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import toy_data

import gpclass as gpc


def test_cpu_options_and_that_they_reach_xla():
    expected = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 1,
                "xla_cpu_copy_insertion_use_region_analysis": True}
    assert gpc.compiler_options() == (expected if jax.default_backend() == "cpu" else {})
    # An option XLA does not know fails at compilation: gpc.jit passes its options through to XLA.
    with pytest.raises(Exception, match="xla_no_such_option"):
        gpc.jit(jnp.sin, compiler_options={"xla_no_such_option": True})(1.0)


@pytest.mark.skipif(jax.default_backend() != "cpu", reason="the options are probed on the CPU only")
def test_an_option_the_jaxlib_rejects_is_left_out(monkeypatch):
    """All options are probed in one compilation; if the jaxlib rejects that, each alone, and the rejected ones
    are dropped (a jaxlib that does not know an option must still compile gpclass's programs)."""
    from gpclass import _compile

    expected = gpc.compiler_options()
    monkeypatch.setattr(_compile, "_CPU_OPTIONS", {**_compile._CPU_OPTIONS, "xla_no_such_option": True})
    _compile.compiler_options.cache_clear()
    try:
        assert _compile.compiler_options() == expected
    finally:
        _compile.compiler_options.cache_clear()


def test_fast_codegen_lowers_only_the_llvm_level_and_only_where_one_is_set():
    """``gpc.fit``'s host loop compiles its objective at LLVM level 0: the CPU options with that one change, and
    no level added where gpclass sets none (another backend); the program a top-level fit lowers carries it."""
    import equinox as eqx

    from gpclass import _compile, _fit

    cpu = {"xla_cpu_use_fusion_emitters": False, "xla_backend_optimization_level": 1}
    assert _compile.with_fast_codegen(cpu) == {"xla_cpu_use_fusion_emitters": False,
                                               "xla_backend_optimization_level": 0}
    assert _compile.with_fast_codegen({}) == {}
    X, y = toy_data(n=20, seed=0)
    method, kernel, likelihood = gpc.Laplace(), gpc.kernels.SquaredExponential(1.0, 1.0), gpc.likelihoods.Logistic()
    data = dict(X=X, y=y, key=None, mask=None, weights=None)
    settings = dict(bounds=(1e-8, 1e8), trainable=None, log_prior=None, warm_start_inner=True)
    z, warm, _ = eqx.filter_eval_shape(_fit._start_shapes, method, kernel, likelihood, data, settings)
    lowered = _fit._fit_evaluation.lower(method, kernel, likelihood, z=np.zeros(z.shape, z.dtype),
                                         init=np.zeros(warm.shape, warm.dtype), first=np.asarray(True),
                                         **data, **settings)
    options = getattr(getattr(lowered, "lowered", lowered)._lowering, "_compiler_options_kvs", None)
    if options is None:
        pytest.skip("this JAX keeps a lowering's compiler options elsewhere")
    assert dict(options) == _compile.with_fast_codegen(gpc.compiler_options())


def f(x):
    return jnp.sum(jnp.sin(x) * x)


def test_under_every_transformation_the_same_values():
    """JAX accepts compiler options only on a top-level program: nested calls use the plain jit, same values."""
    x = jnp.linspace(0.0, 1.0, 3)
    fast, plain = gpc.jit(f), jax.jit(f)
    assert float(fast(x)) == float(plain(x))
    np.testing.assert_array_equal(jax.grad(fast)(x), jax.grad(plain)(x))
    np.testing.assert_array_equal(jax.vmap(fast)(x[:, None]), jax.vmap(plain)(x[:, None]))
    assert float(jax.jit(fast)(x)) == float(plain(x))
    assert jax.eval_shape(fast, x).shape == ()
    np.testing.assert_array_equal(jax.lax.map(fast, x[:, None]), jax.vmap(plain)(x[:, None]))
    assert fast.__doc__ == f.__doc__ and fast.__name__ == "f"
    assert float(fast.lower(x).compile()(x)) == float(plain(x))
    own = gpc.jit(f, compiler_options={"xla_backend_optimization_level": 2})  # a caller's options: dropped nested
    assert float(own(x)) == float(plain(x))
    np.testing.assert_array_equal(jax.vmap(own)(x[:, None]), jax.vmap(plain)(x[:, None]))
    assert float(jax.jit(own)(x)) == float(plain(x))


@pytest.mark.slow
def test_library_entry_points_nest_in_user_transformations():
    """gpc.infer is compiled with the options when called eagerly, and inlined under jit, grad and vmap."""
    X, y = toy_data(n=8, seed=0)
    lik = gpc.likelihoods.Logistic()

    def log_z(log_l, X, y):
        return gpc.infer(gpc.Laplace(), gpc.kernels.SquaredExponential(1.0, jnp.exp(log_l)), lik, X, y).log_marginal

    eager = float(log_z(jnp.asarray(0.1), X, y))
    np.testing.assert_allclose(float(jax.jit(log_z)(0.1, X, y)), eager, rtol=1e-12)
    np.testing.assert_allclose(float(gpc.jit(log_z)(0.1, X, y)), eager, rtol=1e-12)
    batched = gpc.jit(jax.vmap(jax.value_and_grad(log_z), (None, 0, 0)))(0.1, np.stack([X, X]), np.stack([y, y]))
    np.testing.assert_allclose(np.asarray(batched[0]), eager, rtol=1e-12)
    np.testing.assert_allclose(np.asarray(batched[1]), float(jax.grad(log_z)(0.1, X, y)), rtol=1e-12)


def test_filter_jit_keeps_non_arrays_static():
    traces = []

    @gpc.filter_jit
    def scaled(x, factor, name):
        traces.append(name)
        return x * factor

    assert float(scaled(jnp.asarray(2.0), 3, "a")) == 6.0
    assert float(scaled(jnp.asarray(5.0), 3, "a")) == 15.0
    assert traces == ["a"]  # one trace: the array is traced, the int and str are static

