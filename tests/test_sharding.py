"""gpc.sharded_vmap: many problems across devices give vmap's results (one device here, four in a subprocess)."""

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import toy_data

import gpclass as gpc


def problems(count, n=20):
    sets = [toy_data(n=n, seed=s) for s in range(count)]
    return np.stack([X for X, _ in sets]), np.stack([y for _, y in sets])


def log_marginal_and_grad(log_lengthscale, X, y):
    def log_z(t):
        kernel = gpc.kernels.SquaredExponential(jnp.asarray(1.5), jnp.exp(t))
        return gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y).log_marginal

    return jax.value_and_grad(log_z)(log_lengthscale)


def test_one_device_equals_vmap_one_problem_at_a_time_and_in_chunks():
    Xs, ys = problems(3)
    thetas = np.log(np.array([0.5, 1.0, 2.0]))
    sharded = gpc.sharded_vmap(log_marginal_and_grad)(thetas, Xs, ys)
    reference = gpc.jit(jax.vmap(log_marginal_and_grad))(thetas, Xs, ys)
    for a, b in zip(sharded, reference):
        np.testing.assert_allclose(a, b, rtol=1e-12)
    Xs, ys = problems(5)
    thetas = np.log(np.linspace(0.5, 2.0, 5))
    chunked = gpc.sharded_vmap(log_marginal_and_grad, batch_size=2)(thetas, Xs, ys)  # 3 chunks of 2, one repeat
    reference = gpc.jit(jax.vmap(log_marginal_and_grad))(thetas, Xs, ys)
    for a, b in zip(chunked, reference):
        assert a.shape == (5,)
        np.testing.assert_allclose(a, b, rtol=1e-12)
    with pytest.raises(ValueError, match="same leading"):
        gpc.sharded_vmap(log_marginal_and_grad)(thetas, Xs[:2], ys)


CHILD = textwrap.dedent(
    """
    import sys
    import jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import gpclass as gpc
    from test_sharding import log_marginal_and_grad, problems
    Xs, ys = problems(6)                      # 6 problems on 4 devices: padded to 8, the padding dropped
    thetas = np.log(np.linspace(0.5, 2.0, 6))
    value, grad = gpc.sharded_vmap(log_marginal_and_grad)(thetas, Xs, ys)
    ref_value, ref_grad = jax.jit(jax.vmap(log_marginal_and_grad))(thetas, Xs, ys)
    print(len(jax.devices()), len(value.sharding.device_set), value.shape,
          float(np.max(np.abs(value - ref_value))), float(np.max(np.abs(grad - ref_grad))))
    """
)


def test_four_simulated_devices_equal_vmap():
    """A 4-device machine, simulated on the CPU in a new process (the device count is fixed when JAX starts)."""
    env = {**__import__("os").environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(__import__("pathlib").Path(__file__).parent)], env=env,
                         capture_output=True, text=True, check=True, timeout=240).stdout.split()
    devices, used, shape, value_diff, grad_diff = int(out[0]), int(out[1]), out[2], float(out[3]), float(out[4])
    assert devices == 4 and used == 4 and shape == "(6,)"
    assert value_diff < 1e-10 and grad_diff < 1e-10


SVGP_CHILD = textwrap.dedent(
    """
    import sys
    import jax
    jax.config.update("jax_enable_x64", True)
    import numpy as np
    sys.path.insert(0, sys.argv[1])
    import gpclass as gpc
    from conftest import toy_data
    X, y = toy_data(n=32, seed=8)
    model = gpc.SVGP.at_prior(gpc.kernels.SquaredExponential(1.0, 1.0), gpc.likelihoods.Logistic(), X[:6])
    run = lambda devices: gpc.fit_svgp(model, X, y, key=jax.random.key(0), num_steps=8, batch_size=8, devices=devices)
    one, four = run(None), run(jax.devices())
    print(len(jax.devices()), float(np.max(np.abs(one.elbo - four.elbo))),
          float(np.max(np.abs(one.model.q_sqrt - four.model.q_sqrt))), float(np.max(np.abs(one.model.inducing - four.model.inducing))))
    """
)


def test_svgp_minibatches_split_over_four_simulated_devices_train_as_on_one():
    env = {**__import__("os").environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    out = subprocess.run([sys.executable, "-c", SVGP_CHILD, str(__import__("pathlib").Path(__file__).parent)], env=env,
                         capture_output=True, text=True, check=True, timeout=240).stdout.split()
    assert int(out[0]) == 4
    assert max(float(v) for v in out[1:]) < 1e-10
