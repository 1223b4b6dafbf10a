"""gpc.sharded_vmap: many problems across devices give vmap's results (one device here, four in a subprocess)."""

import os
import pathlib
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


@pytest.mark.slow
def test_one_device_in_chunks_equals_vmap():
    """5 problems in chunks of 2 (one repeat pads the last chunk); one at a time and the padding over devices
    are tested on four simulated devices below."""
    Xs, ys = problems(5)
    thetas = np.log(np.linspace(0.5, 2.0, 5))
    chunked = gpc.sharded_vmap(log_marginal_and_grad, batch_size=2)(thetas, Xs, ys)
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
    from conftest import toy_data
    from test_sharding import log_marginal_and_grad, problems
    Xs, ys = problems(6)                      # 6 problems on 4 devices: padded to 8, the padding dropped
    thetas = np.log(np.linspace(0.5, 2.0, 6))
    value, grad = gpc.sharded_vmap(log_marginal_and_grad)(thetas, Xs, ys)
    ref_value, ref_grad = jax.jit(jax.vmap(log_marginal_and_grad))(thetas, Xs, ys)
    print(len(jax.devices()), len(value.sharding.device_set), value.shape,
          float(np.max(np.abs(value - ref_value))), float(np.max(np.abs(grad - ref_grad))))
    X, y = toy_data(n=32, seed=8)             # SVGP minibatches of 8 split over the 4 devices
    model = gpc.SVGP.at_prior(gpc.kernels.SquaredExponential(1.0, 1.0), gpc.likelihoods.Logistic(), X[:6])
    run = lambda devices: gpc.fit_svgp(model, X, y, key=jax.random.key(0), num_steps=8, batch_size=8, devices=devices)
    one, four = run(None), run(jax.devices())
    print(len(four.model.q_sqrt.sharding.device_set), float(np.max(np.abs(one.elbo - four.elbo))),
          float(np.max(np.abs(one.model.q_sqrt - four.model.q_sqrt))),
          float(np.max(np.abs(one.model.inducing - four.model.inducing))))
    """
)


@pytest.mark.slow
def test_four_simulated_devices():
    """A 4-device machine, simulated on the CPU in a new process (the device count is fixed when JAX starts):
    sharded_vmap equals vmap, and SVGP trained on minibatches split over the devices equals SVGP on one."""
    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=4"}
    lines = subprocess.run([sys.executable, "-c", CHILD, str(pathlib.Path(__file__).parent)], env=env,
                           capture_output=True, text=True, check=True, timeout=240).stdout.splitlines()
    devices, used, shape, value_diff, grad_diff = lines[-2].split()
    assert int(devices) == 4 and int(used) == 4 and shape == "(6,)"
    assert float(value_diff) < 1e-10 and float(grad_diff) < 1e-10
    svgp_devices, *differences = lines[-1].split()
    assert int(svgp_devices) == 4 and max(float(d) for d in differences) < 1e-10
