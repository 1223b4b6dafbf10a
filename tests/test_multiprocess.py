"""Two JAX processes on one machine (``jax.distributed``, gloo CPU collectives): gpc.sharded_vmap over both equals
one process's jax.vmap, every process receives all results, and each holds its own share without the gather;
gpc.fit_svgp split over both processes' devices, reading a memory-mapped file, trains as one process does, and
continues from a saved checkpoint as if it had not stopped.

Slow tier: three JAX processes compiling their programs take about a tenth of the default tier's five minutes.
"""

import json
import os
import socket
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import toy_data

import gpclass as gpc

NUM_PROBLEMS = 7  # not a multiple of the two devices: the last problem pads the mesh


def ragged_problems():
    """Seven data sets of 12..18 cases stored in arrays of 20 rows, the rest masked out, and one length scale each."""
    sets = [toy_data(n=20, seed=s) for s in range(NUM_PROBLEMS)]
    masks = np.stack([np.arange(20) < 12 + s for s in range(NUM_PROBLEMS)])
    thetas = np.log(np.linspace(0.5, 2.0, NUM_PROBLEMS))
    return thetas, np.stack([X for X, _ in sets]), np.stack([y for _, y in sets]), masks


def log_marginal_and_grad(log_lengthscale, X, y, mask):
    def log_z(t):
        kernel = gpc.kernels.SquaredExponential(jnp.asarray(1.5), jnp.exp(t))
        return gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y, mask=mask).log_marginal

    return jax.value_and_grad(log_z)(log_lengthscale)


def svgp_problem():
    """30 cases, 6 inducing inputs, q at the prior."""
    X, y = toy_data(n=30, seed=9)
    kernel = gpc.kernels.SquaredExponential(jnp.asarray(1.0), jnp.asarray(1.0))
    return X, y, gpc.SVGP.at_prior(kernel, gpc.likelihoods.Logistic(), X[:6])


WORKER = textwrap.dedent("""
    import json, sys
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    process_id, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
    jax.distributed.initialize(f"localhost:{port}", num_processes=2, process_id=process_id)
    import numpy as np
    sys.path.insert(0, TESTS_DIRECTORY)
    import gpclass as gpc
    from test_multiprocess import log_marginal_and_grad, ragged_problems, svgp_problem

    problems = ragged_problems()
    gathered = gpc.sharded_vmap(log_marginal_and_grad)(*problems)
    shares = gpc.sharded_vmap(log_marginal_and_grad, gather=False)(*problems)
    own = [(shard.index[0].start or 0, np.asarray(shard.data).tolist()) for shard in shares[0].addressable_shards]
    X, y, start = svgp_problem()
    X_file = np.load(sys.argv[4], mmap_mode="r")
    fit = gpc.fit_svgp(start, X_file, y, key=jax.random.key(3), num_steps=7, batch_size=8, devices=jax.devices())
    part = gpc.fit_svgp(start, X_file, y, key=jax.random.key(3), num_steps=3, batch_size=8, devices=jax.devices())
    gpc.save(out + ".checkpoint", part)  # each process its own file
    rest = gpc.fit_svgp(gpc.load(out + ".checkpoint"), X_file, y, key=jax.random.key(3), num_steps=4, batch_size=8,
                        devices=jax.devices())
    json.dump(dict(processes=jax.process_count(), devices=len(jax.devices()), gathered_type=type(gathered[0]).__name__,
                   values=np.asarray(gathered[0]).tolist(), grads=np.asarray(gathered[1]).tolist(), own=own,
                   elbo=np.asarray(fit.elbo).tolist(), q_sqrt=np.asarray(fit.model.q_sqrt).tolist(),
                   inducing=np.asarray(fit.model.inducing).tolist(),
                   resumed_elbo=np.concatenate([part.elbo, rest.elbo]).tolist(),
                   resumed_q_sqrt=np.asarray(rest.model.q_sqrt).tolist()),
              open(out, "w"))
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_two_processes_give_what_one_process_gives(tmp_path):
    script = tmp_path / "worker.py"
    script.write_text(WORKER.replace("TESTS_DIRECTORY", repr(os.path.dirname(os.path.abspath(__file__)))))
    port, outputs = free_port(), [tmp_path / f"out{i}.json" for i in range(2)]
    X, y, start = svgp_problem()
    np.save(tmp_path / "X.npy", X)
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device per process
    workers = [subprocess.Popen([sys.executable, str(script), str(i), str(port), str(outputs[i]),
                                 str(tmp_path / "X.npy")], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for i in range(2)]
    logs = [w.communicate(timeout=240)[0] for w in workers]
    for worker, log in zip(workers, logs):
        assert worker.returncode == 0, log[-3000:]
    values, grads = jax.device_get(gpc.jit(jax.vmap(log_marginal_and_grad))(*ragged_problems()))
    alone = gpc.fit_svgp(start, X, y, key=jax.random.key(3), num_steps=7, batch_size=8, devices=jax.devices()[:1])
    for i, path in enumerate(outputs):
        result = json.loads(path.read_text())
        assert result["processes"] == 2 and result["devices"] == 2
        assert result["gathered_type"] == "ndarray"  # every process gets all results, on the host
        np.testing.assert_allclose(result["values"], values, rtol=1e-12)
        np.testing.assert_allclose(result["grads"], grads, rtol=1e-10, atol=1e-12)
        # Without the gather: this process's own block of 4 rows (the padded mesh's second block ends with a
        # repeat of the last problem).
        (start, own), = result["own"]
        assert start == 4 * i
        rows = np.minimum(np.arange(start, start + 4), NUM_PROBLEMS - 1)
        np.testing.assert_allclose(own, values[rows], rtol=1e-12)
        # SVGP data-parallel over the two processes (each reading its 4 rows of a minibatch of 8 from the file,
        # the ELBO's data term summed across them) against one process with the whole minibatch.
        np.testing.assert_allclose(result["elbo"], alone.elbo, rtol=1e-12)
        np.testing.assert_allclose(result["q_sqrt"], alone.model.q_sqrt, rtol=1e-10, atol=1e-13)
        np.testing.assert_allclose(result["inducing"], alone.model.inducing, rtol=1e-10, atol=1e-13)
        # 3 steps, gpc.save, gpc.load, 4 more steps over the two processes = the 7 steps in one call.
        np.testing.assert_allclose(result["resumed_elbo"], result["elbo"], rtol=1e-13)
        np.testing.assert_allclose(result["resumed_q_sqrt"], result["q_sqrt"], rtol=1e-12, atol=1e-15)
