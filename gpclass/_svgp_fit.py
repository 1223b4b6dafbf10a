"""Training an :class:`gpclass.SVGP` (binary or softmax) on minibatches, with optax: the loop compiled on the device,
or (``devices=``, a memory-mapped X) a Python loop that reads each minibatch from host memory or from the file and
splits it over devices, which may belong to several JAX processes; a fit is also a checkpoint to continue from."""

import os
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from . import _svgp
from ._compile import filter_jit
from ._exceptions import GPClassError
from ._fit_parameters import parameter_transforms, trainable_spec
from ._progress import Progress, as_progress, every_for
from ._status import Status
from ._svgp import SVGP
from ._types import Array, Float, Int
from ._validation import Checks, check_label_shape, host_class_indices, require_key, require_optimizer, require_setting


class SVGPFit(eqx.Module):
    """The fitted model, the minibatch ELBO estimate of every step, and how training ended.

    ``elbo[i]`` is the estimate at the parameters before step i's update.
    Training has no convergence test: ``status`` is ``Status.COMPLETED`` when
    all ``num_steps`` steps ran with finite ELBO estimates, ``Status.FAILED``
    when an estimate was not finite (training stops there and ``model`` holds
    the parameters at which it was computed).  Judge convergence from ``elbo``.

    A checkpoint too: ``optimizer_state`` (the optimiser's state after the
    last update) and ``next_step`` (the steps taken so far, this call's and
    those of the fits it continued) let ``gpc.fit_svgp(fit, X, y, ...)`` go on
    as if training had not stopped; ``gpc.save(path, fit)`` keeps all of it.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> model = gpc.SVGP.at_prior(kernel, gpc.likelihoods.Logistic(), X[:10])
        >>> fit = gpc.fit_svgp(model, X, y, key=jax.random.key(0), num_steps=300, batch_size=20)
        >>> gpc.Status(int(fit.status)).name, fit.elbo.shape, int(fit.next_step)
        ('COMPLETED', (300,), 300)
        >>> more = gpc.fit_svgp(fit, X, y, key=jax.random.key(0), num_steps=100, batch_size=20)  # continue
        >>> int(more.next_step)
        400
    """

    model: SVGP
    elbo: Float[Array, " num_steps"]
    status: Int[Array, ""]
    optimizer_state: Any = None
    next_step: Int[Array, ""] = eqx.field(default_factory=lambda: jnp.asarray(0, jnp.int32))


def fit_svgp(
    model: SVGP | SVGPFit,
    X,
    y,
    *,
    key,
    num_steps: int = 2000,
    batch_size: int | None = None,
    optimizer: optax.GradientTransformation | None = None,
    fit_hyperparameters: bool = True,
    fit_inducing: bool = True,
    natural_gradient_step: float | None = None,
    devices=None,
    print_every: int | None = None,
    progress: bool | Callable[[dict], None] | Progress | None = None,
    throw: bool = True,
) -> SVGPFit:
    """Maximise the (minibatch) ELBO of ``model`` over q(v), the inducing inputs and the log hyperparameters.

    Args:
        model: the starting point, e.g. ``gpc.SVGP.at_prior(kernel, likelihood, Z)``;
            or an earlier :class:`SVGPFit` (also one from ``gpc.load``) to
            continue it: from its model, optimiser state and step count, so
            that with the same data, key, batch size and optimiser, 300 steps
            and then 200 more give what one call of 500 steps gives.
        X, y: training inputs (n, d) and labels in {-1, +1} ({0, 1} and
            booleans accepted), for ``Softmax(C)`` integers 0..C-1, as NumPy
            arrays.  They are copied to the device once and the training loop
            runs there, compiled (chunks of up to 128 steps, each a
            ``lax.scan`` that gathers its minibatches on the device); with
            ``devices``, each step copies its minibatch from host memory
            instead.  Training data larger than memory: ``X`` a NumPy
            memory-mapped array (``np.load(path, mmap_mode="r")`` or
            ``np.memmap``) is never loaded whole: it is checked block by block
            and each step reads its minibatch's rows from the file (the loop
            of ``devices``, on the default device if none are given).
        key: PRNG key for the minibatch order (a new permutation each epoch,
            from ``fold_in(key, epoch)``) and, for the softmax's Monte Carlo
            estimator, step i's samples (from ``fold_in(fold_in(key, 2**32 - 1), i)``):
            the run is deterministic given the key.
        num_steps: optimiser steps.
        batch_size: cases per step; ``None`` means all n (the exact ELBO).
            Each epoch takes n // batch_size batches of a permutation.
        optimizer: any optax optimiser; ``None`` means ``optax.adam(0.01)``.
        fit_hyperparameters, fit_inducing: whether the kernel and likelihood
            parameters (in log space, as :func:`gpclass.fit`) and Z are trained.
        natural_gradient_step: ``None``: q(v) is trained by ``optimizer`` with
            the rest.  A step size in (0, 1]: q(v) takes natural-gradient steps
            of that size on each minibatch (``_svgp.natural_gradient_step``, a
            log-concave likelihood; the softmax's per class, its gradients
            estimated from the step's samples), and ``optimizer`` trains the rest.
        devices: ``None``: one device.  A sequence of devices: each minibatch
            is split over them along its cases (``batch_size`` must be a
            multiple of their number) and the parameters are replicated; the
            compiled step then sums the ELBO's data term across devices (data
            parallelism, one all-reduce per step).
        print_every: print the step and its ELBO estimate every so many steps (stdout).
        progress: ``None`` (silent, the default), ``True`` (a line on stderr,
            at most one every 0.5 s), a callable ``progress(info)`` called
            after every step with ``info`` a dict: ``task`` ("fit_svgp"),
            ``step`` (1, 2, ...), ``elbo`` (``elbo[step - 1]``, the estimate
            before that step's update), ``done``, ``num_steps``; or
            ``gpc.Progress(fn, every=k, seconds=s)`` (as :func:`gpclass.fit`).
            A plain call, no callback in the compiled loop: the steps of a
            chunk are reported when the chunk returns.
        throw: raise a ``gpc.GPClassError`` naming the status unless training
            completed (as :func:`gpclass.infer`, :func:`gpclass.fit` and
            :func:`gpclass.fit_em_ep`); ``False`` returns the result with its ``status``.

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> model = gpc.SVGP.at_prior(kernel, gpc.likelihoods.Logistic(), X[:10])
        >>> fit = gpc.fit_svgp(model, X, y, key=jax.random.key(0), num_steps=300, batch_size=20)
        >>> bool(fit.elbo[-50:].mean() > fit.elbo[:50].mean())  # minibatch ELBO estimates rose
        True
        >>> print(np.asarray(gpc.predict(fit.model, X[:3])).round(1))
        [0.8 0.8 0.8]
    """
    require_setting("fit_svgp", "num_steps", num_steps, low=1, low_open=False, integer=True)
    require_key("fit_svgp", key)
    require_optimizer("fit_svgp", optimizer, default="optax.adam(0.01)")
    checkpoint = model if isinstance(model, SVGPFit) else None
    model = model.model if checkpoint is not None else model
    require_setting("fit_svgp", "print_every", print_every, low=1, low_open=False, integer=True, optional=True)
    streamed = isinstance(X, np.memmap)
    X, y = _check_data(model, X, y)
    if fit_hyperparameters and _one_class(model, y):
        raise GPClassError(
            "fit_svgp: every training label in y is of one class; fitting the hyperparameters needs labels of at "
            "least two classes (with one class the ELBO keeps increasing with the length scale and signal "
            "variance: no finite maximiser). Add cases of another class, or pass fit_hyperparameters=False.")
    settings = (model.jitter, model.estimator, model.num_samples)
    # Step i's samples come from fold_in(sample_key, i): a stream apart from the epochs' fold_in(key, epoch).
    sample_key = None
    if model.num_latent > 1 and model.estimator == "monte_carlo":
        sample_key = jax.random.fold_in(key, 2**32 - 1)
    n = len(y)
    batch = n if batch_size is None else int(batch_size)
    if not 1 <= batch <= n:
        raise GPClassError(f"batch_size must lie in 1..{n} (the number of cases); got {batch_size}.")
    optimizer = _DEFAULT_OPTIMIZER if optimizer is None else optimizer
    params, static = eqx.partition((model.kernel, model.likelihood),
                                   trainable_spec((model.kernel, model.likelihood), None, "fit_svgp"))
    to_free, _ = parameter_transforms(params, (model.kernel, model.likelihood), "fit_svgp")
    checks = Checks()
    theta = to_free(params, checks)
    model._inducing_checks(checks)
    checks.raise_now()  # the parameters are concrete here: the error names the value
    trainable = dict(theta=theta, inducing=model.inducing, q_mu=model.q_mu, q_sqrt=model.q_sqrt)
    natural = natural_gradient_step is not None
    if natural and not 0.0 < natural_gradient_step <= 1.0:
        raise GPClassError(f"natural_gradient_step must lie in (0, 1]; got {natural_gradient_step}.")
    if natural and not model.likelihood.log_concave:
        raise GPClassError(
            f"natural-gradient steps need a log-concave likelihood (the new covariance could be indefinite); "
            f"{type(model.likelihood).__name__} is not: pass natural_gradient_step=None to train q(v) with the "
            "optimizer."
        )
    frozen = (
        ("theta", not fit_hyperparameters), ("inducing", not fit_inducing), ("q_mu", natural), ("q_sqrt", natural)
    )

    config = (n, static, optimizer, frozen, settings, natural_gradient_step)
    # getattr: an SVGPFit saved before fits carried their optimiser's state has neither field
    opt_state = optimizer.init(trainable) if checkpoint is None else getattr(checkpoint, "optimizer_state", None)
    if checkpoint is not None and opt_state is None:
        raise GPClassError("fit_svgp: this SVGPFit has no optimizer_state to continue from; pass its .model to "
                           "start a new run.")
    first = 0 if checkpoint is None else int(checkpoint.next_step)
    progress = as_progress(progress)
    every = None if progress is None else every_for(progress, num_steps)

    def report(i, value):
        """After step i (0-based) with its ELBO estimate: progress and printing; False to stop (not finite)."""
        finite, last = bool(np.isfinite(value)), i + 1 == num_steps
        if progress is not None and (i <= 0 or (i + 1) % every == 0 or last or not finite):
            progress.receive(dict(task="fit_svgp", step=i + 1, num_steps=num_steps, elbo=value,
                                  done=bool(last or not finite)))
        if finite and print_every and (i + 1) % print_every == 0:
            print(f"svgp step {i + 1:6d}: ELBO estimate {value: .6e}", flush=True)
        return finite

    if streamed and devices is None:
        devices = jax.devices()[:1]
    loop = _steps_on_host if devices is not None else _steps_on_device
    trainable, opt_state, values = loop(trainable, opt_state, X, y, key, sample_key, first, num_steps, batch, config,
                                        report, devices)
    status = Status.COMPLETED if len(values) == num_steps and np.isfinite(values[-1]) else Status.FAILED
    updates = len(values) - (status != Status.COMPLETED)  # a non-finite estimate's step made no update
    if throw and status != Status.COMPLETED:
        raise GPClassError(f"fit_svgp did not complete ({status.name}): {status.describe('fit_svgp')} Pass "
                           "throw=False to get the result with its status.")
    elbo = jnp.asarray(values, dtype=model.inducing.dtype)
    return SVGPFit(_build(trainable, static, settings), elbo, jnp.asarray(status, jnp.int32), opt_state,
                   jnp.asarray(first + updates, jnp.int32))


_DEFAULT_OPTIMIZER = optax.adam(0.01)

# The most steps one compiled call of ``_steps_on_device`` runs: progress is reported, and a non-finite ELBO
# noticed on the host, after each such chunk (the steps inside stop updating at a non-finite estimate anyway).
_CHUNK = 128


def _epoch_order(key, epoch, n) -> np.ndarray:
    """The permutation of the cases for an epoch, the minibatches its consecutive slices: drawn on the host by
    NumPy, seeded with the bits of ``fold_in(key, epoch)``.  NumPy's shuffle holds the n indices only, where
    ``jax.random.permutation`` sorts random keys, several times the memory at large n (``benchmarks/README.md``,
    ``svgp_memmap.py``)."""
    epoch_key = jax.random.fold_in(key, epoch)
    if jax.dtypes.issubdtype(epoch_key.dtype, jax.dtypes.prng_key):
        epoch_key = jax.random.key_data(epoch_key)
    seed = np.asarray(epoch_key).astype(np.uint64).ravel()
    return np.random.default_rng(seed).permutation(n)


def _steps_on_device(trainable, opt_state, X, y, key, sample_key, first, num_steps, batch, config, report, devices):
    """The training loop compiled: the data copied to the device once, chunks of up to ``_CHUNK`` steps of one
    epoch each run as one ``lax.scan`` (``_run_chunk``) that takes its minibatches from the epoch's permutation on
    the device.  The same minibatches, samples and updates as :func:`_steps_on_host`.  Steps ``first`` ..
    ``first + num_steps - 1`` of the run (its minibatches and samples follow the step's index)."""
    n = X.shape[0]
    batches_per_epoch = n // batch
    length = min(_CHUNK, batches_per_epoch)  # not num_steps: one compilation serves runs of any length
    X, y = jnp.asarray(X), jnp.asarray(y)
    values, i, order_of = [], 0, {}
    while i < num_steps:
        epoch, position = divmod(first + i, batches_per_epoch)
        if epoch not in order_of:  # copied to the device once per epoch
            order_of = {epoch: jnp.asarray(_epoch_order(key, epoch, n).astype(np.int32 if n < 2**31 else np.int64))}
        count = min(length, batches_per_epoch - position, num_steps - i)
        trainable, opt_state, chunk = _run_chunk(trainable, opt_state, X, y, order_of[epoch],
                                                 np.int32(position), np.int32(count), sample_key,
                                                 np.uint32(first + i), batch, length, config)
        for value in np.asarray(chunk)[:count]:
            values.append(float(value))
            if not report(i, values[-1]):
                return trainable, opt_state, values
            i += 1
    return trainable, opt_state, values


def _steps_on_host(trainable, opt_state, X, y, key, sample_key, first, num_steps, batch, config, report, devices):
    """The training loop in Python for ``devices`` or a memory-mapped X: each step reads its minibatch from host
    memory (or from the file) and splits it over the devices along its cases (the parameters replicated), one
    compiled step (``_step``) per call.  The devices may span several processes (``jax.distributed``): each
    process then reads only its own devices' rows of each minibatch, and gets the trained parameters as arrays of
    its own (the same in every process)."""
    n = X.shape[0]
    devices = list(devices)
    if batch % len(devices):
        raise GPClassError(f"batch_size ({batch}) must be a multiple of the number of devices ({len(devices)}).")
    mesh = Mesh(np.asarray(devices), ("cases",))
    # From host values: arrays committed to one process's device (a continued fit's) cannot be sent to the other
    # processes' devices, the same values given by every process can.
    replicated = NamedSharding(mesh, PartitionSpec())
    trainable, opt_state = jax.device_put(jax.device_get((trainable, opt_state)), replicated)
    sample_key = jax.device_put(sample_key, replicated)
    cases = NamedSharding(mesh, PartitionSpec("cases"))
    dtype = trainable["inducing"].dtype

    def place(source, rows, dtype):
        """source[rows] split over the devices; each process reads only its devices' rows (a callback per shard)."""
        return jax.make_array_from_callback((len(rows), *source.shape[1:]), cases,
                                            lambda index: read_rows(source, rows[index[0]], dtype))

    values, batches_per_epoch = [], n // batch
    order_of = {}  # the epoch's permutation, drawn once
    for i in range(num_steps):
        epoch, position = divmod(first + i, batches_per_epoch)
        if epoch not in order_of:
            order_of = {epoch: _epoch_order(key, epoch, n)}
        order = order_of[epoch]
        rows = order[position * batch:(position + 1) * batch]
        new, new_state, value = _step(trainable, opt_state, place(X, rows, dtype), place(y, rows, y.dtype), sample_key,
                                      None if sample_key is None else np.uint32(first + i), *config)
        values.append(float(value))  # the ELBO estimate at the current parameters, before this step's update
        if not report(i, values[-1]):
            break
        trainable, opt_state = new, new_state
    return jax.tree.map(_local_copy, trainable), jax.tree.map(_local_copy, opt_state), values


def _local_copy(a):
    """A replicated array over several processes' devices as this process's own copy (the array itself
    otherwise): the trained model is used by one process at a time."""
    return a.addressable_data(0) if isinstance(a, jax.Array) and not a.is_fully_addressable else a


def _build(trainable, static, settings) -> SVGP:
    """The SVGP from the trained coordinates: log/logit hyperparameters (as ``gpc.fit``), Z, mu and S.

    ``settings``: the model's (jitter, estimator, num_samples).
    """
    _, from_free = parameter_transforms(trainable["theta"], eqx.combine(trainable["theta"], static))
    kernel, likelihood = eqx.combine(from_free(trainable["theta"]), static)
    return SVGP(kernel, likelihood, trainable["inducing"], trainable["q_mu"], trainable["q_sqrt"], *settings)


@filter_jit
def _run_chunk(trainable, opt_state, X, y, order, position, count, sample_key, first_step, batch, length, config):
    """A ``lax.scan`` over ``length`` steps of which the first ``count`` run (``lax.cond``: the rest cost nothing):
    step j on the minibatch ``order[(position + j) b : (position + j + 1) b]`` (gathered on the device), with the
    samples of step ``first_step + j``.  At a non-finite ELBO estimate the parameters stay where they were and the
    remaining steps are skipped (the host stops there).  Returns the new state and the ``length`` estimates (those
    past ``count`` are NaN and not used).

    Compiled once per data shape, batch size, chunk length and configuration (a module-level function: repeated
    fits reuse it)."""

    def body(carry, j):
        def run(carry):
            trainable, opt_state, _ = carry
            rows = lax.dynamic_slice_in_dim(order, (position + j) * batch, batch)
            new, new_state, value = _step_body(trainable, opt_state, X[rows], y[rows], sample_key,
                                               None if sample_key is None else first_step + j.astype(jnp.uint32),
                                               *config)
            finite = jnp.isfinite(value)
            keep = lambda a, b: jax.tree.map(lambda u, v: jnp.where(finite, u, v), a, b)  # noqa: E731
            return (keep(new, trainable), keep(new_state, opt_state), finite), value

        def skip(carry):
            return carry, jnp.asarray(jnp.nan, X.dtype)

        return lax.cond((j < count) & carry[2], run, skip, carry)

    (trainable, opt_state, _), values = lax.scan(body, (trainable, opt_state, jnp.asarray(True)),
                                                 jnp.arange(length, dtype=jnp.int32))
    return trainable, opt_state, values


@filter_jit
def _step(trainable, opt_state, X_batch, y_batch, sample_key, i, num_data, static, optimizer, frozen, settings,
          natural_step):
    """One optimiser step (:func:`_step_body`) compiled on its own, for the loop over devices."""
    return _step_body(trainable, opt_state, X_batch, y_batch, sample_key, i, num_data, static, optimizer, frozen,
                      settings, natural_step)


def _step_body(trainable, opt_state, X_batch, y_batch, sample_key, i, num_data, static, optimizer, frozen, settings,
               natural_step):
    """One optimiser step on the negative minibatch ELBO; returns the new state and the ELBO before the step.

    ``fold_in(sample_key, i)`` draws the step's Monte Carlo samples (softmax; None otherwise), used by the ELBO
    and by the natural-gradient step alike.
    """
    key = None if sample_key is None else jax.random.fold_in(sample_key, i)

    def loss(t):
        model = _build(t, static, settings)
        if natural_step is None:
            return -model._unchecked_elbo(X_batch, y_batch, num_data, key), None
        A = model._training_projection(X_batch)  # the natural-gradient step below takes the same A
        return -model._elbo_from_projection(A, X_batch, y_batch, num_data, key), A

    (value, A), grads = jax.value_and_grad(loss, has_aux=True)(trainable)
    frozen = [name for name, is_frozen in frozen if is_frozen]
    grads = {name: jax.tree.map(jnp.zeros_like, g) if name in frozen else g for name, g in grads.items()}
    updates, opt_state = optimizer.update(grads, opt_state, trainable)
    # Zero updates too: an optimiser with weight decay would move a part whose gradient is zero.
    updates = {name: jax.tree.map(jnp.zeros_like, u) if name in frozen else u for name, u in updates.items()}
    new = optax.apply_updates(trainable, updates)
    if natural_step is not None:
        # The same A as the ELBO's: one factorisation of K_zz per step.
        q = _svgp.natural_gradient_step(_build(trainable, static, settings), A, X_batch, y_batch, num_data,
                                        natural_step, key)
        new = {**new, "q_mu": q.q_mu, "q_sqrt": q.q_sqrt}
    return new, opt_state, -value


def _check_data(model, X, y):
    """Finite (n, d) inputs matching Z's width and labels in {-1, +1} (softmax: int32 0..C-1; others: the
    likelihood's ``host_labels``), as NumPy arrays.

    Checked on the host, before any data reach a device.  A memory-mapped X stays one (read block by block).
    """
    dtype = np.asarray(model.inducing).dtype
    X = X if isinstance(X, np.memmap) else np.asarray(X, dtype=dtype)
    y = np.asarray(y)
    if not getattr(model.likelihood, "labels_per_input", True):
        model.likelihood.host_labels(y, dtype)  # raises: not for SVGP
    if X.ndim != 2 or X.shape[0] == 0:
        raise GPClassError(f"X must have shape (n, d) with n >= 1, one row per case; got shape {X.shape}"
                           + (": use X[:, None] for one input dimension." if X.ndim == 1 else "."))
    if X.shape[1] != model.inducing.shape[1]:
        raise GPClassError(f"X has {X.shape[1]} input dimensions but the model's inducing inputs have "
                           f"{model.inducing.shape[1]}: pass X with the columns (and preprocessing) the inducing "
                           "inputs were chosen from, or a model made for these inputs (gpc.SVGP.at_prior(kernel, "
                           "likelihood, Z) with Z of as many columns as X).")
    _check_finite_rows(X, dtype)
    check_label_shape(y, X.shape[0])
    if model.num_latent > 1:
        return X, _check_class_labels(y, model.num_latent)
    return X, model.likelihood.host_labels(y, dtype)


def _one_class(model, y) -> bool:
    """Whether the checked labels (``_check_data``) show fewer than two classes."""
    if model.num_latent > 1:
        return len(np.unique(y)) < 2
    return bool(model.likelihood.one_class(jnp.asarray(y)))


_CHECK_ROWS = 1 << 16  # rows per block of the finite check: a memory-mapped X is never read whole at once


def _check_finite_rows(X, dtype) -> None:
    """Every entry of X finite, read ``_CHECK_ROWS`` rows at a time; else an error naming the first bad entry."""
    for start in range(0, X.shape[0], _CHECK_ROWS):
        block = read_rows(X, slice(start, start + _CHECK_ROWS), dtype)
        bad = ~np.isfinite(block)
        if np.any(bad):
            row, col = np.unravel_index(np.argmax(bad), bad.shape)
            raise GPClassError(f"X contains NaN or infinite values (the first: X[{start + row}, {col}] = "
                               f"{block[row, col]}); drop or impute those cases (np.isfinite(X).all(axis=1) marks "
                               "the rows that are usable).")


def read_rows(source, rows, dtype) -> np.ndarray:
    """``source[rows]`` as a NumPy array of ``dtype``.  From a memory-mapped file in C order, with one ``os.pread``
    per row (consecutive rows: one read), not through a mapping: a page fault maps the page cache around each row,
    so with the file larger than the memory left for the page cache every row read through a mapping reads far
    more from disk than the row, and pages touched through a mapping stay resident until it closes (measured:
    ``benchmarks/README.md``, ``svgp_memmap.py``)."""
    if not isinstance(source, np.memmap) or source.filename is None or not source.flags.c_contiguous:
        return np.asarray(source[rows], dtype)
    row_bytes = source.dtype.itemsize * int(np.prod(source.shape[1:]))
    with open(source.filename, "rb") as f:
        if isinstance(rows, slice):  # consecutive rows (step 1): one read
            start, stop, _ = rows.indices(source.shape[0])
            count = max(stop - start, 0)
            data = os.pread(f.fileno(), row_bytes * count, source.offset + row_bytes * start)
        else:
            indices = np.asarray(rows).tolist()
            count = len(indices)
            data = b"".join([os.pread(f.fileno(), row_bytes, source.offset + row_bytes * i) for i in indices])
    return np.frombuffer(data, source.dtype).reshape(count, *source.shape[1:]).astype(dtype)


def _check_class_labels(y, num_classes: int):
    """Integer labels 0..C-1 (floats holding whole numbers accepted) as int32; anything else is an error (the
    messages of ``gpc.infer``'s check)."""
    return host_class_indices(y, num_classes, "multi-class", "Softmax").astype(np.int32)
