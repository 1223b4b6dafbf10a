"""Many independent problems across devices: ``jax.vmap``'s semantics, the mapped axis split over a device mesh.

Each device runs its own block of problems (``shard_map``), with no
communication between devices, so independent fits, CV folds, restarts or
grid points use every device of the machine; within a block, chunks of
``batch_size`` problems are vectorised together (``vmap``) and the chunks run
one after another (``lax.map``).  The mesh may span several JAX processes
(``jax.distributed``, one per host): then each process runs its devices'
blocks and the results are gathered for every process (one all-gather).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import Mesh, PartitionSpec

from ._compile import jit
from ._exceptions import GPClassError

try:  # JAX >= 0.7
    from jax import shard_map as _shard_map

    def _map_blocks(fun, mesh, spec):
        return _shard_map(fun, mesh=mesh, in_specs=spec, out_specs=spec, check_vma=False)
except ImportError:  # pragma: no cover - older JAX
    from jax.experimental.shard_map import shard_map as _shard_map

    def _map_blocks(fun, mesh, spec):
        return _shard_map(fun, mesh=mesh, in_specs=spec, out_specs=spec, check_rep=False)


def sharded_vmap(fun, *, devices=None, batch_size: int | None = None, gather: bool = True):
    """``jax.vmap(fun)`` over the leading axis of every argument, the problems split evenly across ``devices``.

    Args:
        fun: a function of arrays (pytrees of arrays), e.g.
            ``lambda X, y: gpc.fit(method, kernel, likelihood, X, y, throw=False)``;
            everything else it needs is closed over.
        devices: the devices to use; ``None`` means ``jax.devices()``: every
            device of every process (this process's own when it is alone).
        batch_size: how many problems one device vectorises together; its
            block runs as a loop over such chunks.  ``None`` means 1 on CPU
            and the whole block elsewhere.  A vectorised while loop (Newton,
            EP sweeps, L-BFGS) runs every problem of a chunk until the slowest
            one stops, so on a CPU one problem at a time is fastest
            (``benchmarks/many_fits.py``; figures in benchmarks/README.md).
        gather: when the devices span several processes, ``True`` gives every
            process all B results as NumPy arrays (one all-gather); ``False``
            gives the global ``jax.Array`` as computed, each process holding
            its own devices' share (``out.addressable_shards``), with the
            padding rows described below still at its end.

    Returns:
        A function of the stacked problems (every array argument with the
        same leading size B) returning ``vmap(fun)``'s outputs (leading size
        B) sharded over the devices.  When B is not a multiple of the number
        of devices times ``batch_size`` the last problem is repeated to fill
        the chunks, and the repeats are dropped from the outputs.  Compiled at
        its first call (with gpclass's options) and reused for arguments of
        the same shapes.

    Several processes (hosts): start each with ``jax.distributed.initialize(
    coordinator_address, num_processes, process_id)`` (on CPUs also
    ``jax.config.update("jax_cpu_collectives_implementation", "gloo")`` for
    the gather), and call the mapped function in every process with the same
    arguments, all B problems (each process then computes only its devices'
    blocks).  ``tests/test_multiprocess.py`` runs two processes on one machine.

    Each device's block runs as its own program (``shard_map``; its
    varying-axis check is off: nothing is communicated between blocks, and
    gpclass's error checks are conditionals that the check cannot type).
    Results equal ``jax.vmap(fun)``'s up to rounding (``tests/test_sharding.py``).
    On a CPU, ``XLA_FLAGS=--xla_force_host_platform_device_count=N`` set before
    JAX starts makes N devices of the host's cores.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> def log_marginal(X, y):
        ...     return gpc.infer(gpc.Laplace(), kernel, gpc.likelihoods.Logistic(), X, y).log_marginal
        >>> many = gpc.sharded_vmap(log_marginal)  # over every device (one on a plain CPU)
        >>> values = many(jnp.stack([X[:20], X[20:]]), jnp.stack([y[:20], y[20:]]))  # two problems
        >>> values.shape
        (2,)
    """
    setup = {}

    def block_size(num_problems):
        return num_problems if setup["batch"] is None else min(setup["batch"], num_problems)

    def run_block(*block):
        num = jax.tree.leaves(block)[0].shape[0]
        chunk = block_size(num)
        if chunk == num:
            return jax.vmap(fun)(*block)
        chunks = jax.tree.map(lambda a: a.reshape(num // chunk, chunk, *a.shape[1:]), block)
        out = jax.lax.map(lambda c: jax.vmap(fun)(*c), chunks)
        return jax.tree.map(lambda o: o.reshape(num, *o.shape[2:]), out)

    @functools.wraps(fun)
    def call(*args):
        if not setup:
            chosen = jax.devices() if devices is None else list(devices)
            on_cpu = all(device.platform == "cpu" for device in chosen)
            setup["batch"] = (1 if on_cpu else None) if batch_size is None else int(batch_size)
            spec = PartitionSpec("problems")
            setup["program"] = jit(_map_blocks(run_block, Mesh(np.asarray(chosen), ("problems",)), spec))
            setup["count"] = len(chosen)
        sizes = {jnp.shape(leaf)[0] if jnp.ndim(leaf) else None for leaf in jax.tree.leaves(args)}
        if len(sizes) != 1 or None in sizes:
            raise GPClassError("sharded_vmap: every array argument needs the same leading (problem) axis; got "
                               f"{sizes}.")
        size = sizes.pop()
        if size == 0:
            raise GPClassError("sharded_vmap: the problem axis has length 0; there are no problems to solve.")
        per_device = -(-size // setup["count"])
        chunk = block_size(per_device)
        padded = setup["count"] * chunk * -(-per_device // chunk)
        if padded > size:
            args = jax.tree.map(lambda a: jnp.concatenate([a, jnp.repeat(a[-1:], padded - size, axis=0)]), args)
        out = setup["program"](*args)
        if not all(leaf.is_fully_addressable for leaf in jax.tree.leaves(out)):  # other processes hold shares
            if not gather:
                return out
            out = multihost_utils.process_allgather(out, tiled=True)
        return jax.tree.map(lambda o: o[:size], out) if padded > size else out

    return call
