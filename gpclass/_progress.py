"""Progress reports from long loops (``progress=`` of ``gpc.fit``, ``gpc.fit_em_ep``, ``gpc.fit_svgp``, MCMC, AIS).

Opt-in and silent by default: with ``progress=None`` a loop's program holds no
host callback, so JAX's persistent compilation cache can store it (see
``_errors.py``).  When asked, a loop reports through one
``jax.debug.callback`` per report site, which works under ``jit``, ``vmap``
and inside ``lax.while_loop`` / ``lax.scan``:

* ``progress=True``: a line per report on stderr, at most one every 0.5 s of
  wall time (the first report and each run's last always print).
* ``progress=fn``: ``fn(info)`` on the host at every report, ``info`` a dict
  of Python scalars: ``"task"`` (``"fit"``, ``"fit_em_ep"``, ``"fit_svgp"``,
  ``"MCMC"``, ``"AIS"``), ``"step"``, ``"done"`` (the run's last report) and
  the loop's own values (``gpc.fit``: ``objective``, ``grad_norm``,
  ``improved``, ``status``, the :class:`gpclass.Status` code once done).
* ``progress=gpc.Progress(fn_or_None, every=k, seconds=s)``: thinned.
  ``every`` is decided in the program (a ``lax.cond`` around the callback,
  so skipped steps cost no host round trip): steps 0 and 1, every k-th step
  and the last are reported.  ``seconds`` is decided on the host: a report
  arriving sooner than ``s`` after the last one passed is dropped, except
  steps 0 and 1 and a run's last report.

Under ``jax.vmap`` JAX calls the host function once per problem (in batch
order, each with that problem's scalars; ``info`` says nothing about which
problem), and a vectorised loop runs until its slowest problem stops: a
problem that has stopped does not report again (the report is guarded by the
problem's own "still running" flag, checked on the host).  The problems
share one ``seconds`` throttle.

The progress object is a static argument of the compiled program: pass the
same object (or ``True``) to reuse a compilation.
"""

import sys
import time
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ._exceptions import GPClassError
from ._status import Status

DEFAULT_SECONDS = 0.5


class Progress:
    """A progress report: where it goes (``callback``; ``None`` prints to ``file``, default stderr) and how often.

    Args:
        callback: ``callback(info: dict)`` on the host; ``None`` prints a line.
        every: report steps 0 and 1, every ``every``-th step and a run's last
            (decided in the compiled program); ``None``: the loop's default
            (every step for the fits, about 100 reports per sampler run).
        seconds: drop a report that comes sooner than this after the last one
            passed (decided on the host; steps 0 and 1 and a run's last
            report always pass); ``None``: 0.5 s for the printer, 0 for a
            callback.
        file: where the printer writes (``None``: ``sys.stderr`` at the time of the report).

    Example:
        >>> X, y = gpc.datasets.load("ionosphere"); X, y = X[:40, :4], y[:40]
        >>> kernel = gpc.kernels.SquaredExponential(variance=1.0, lengthscale=1.0)
        >>> model = gpc.SVGP.at_prior(kernel, gpc.likelihoods.Logistic(), X[:10])
        >>> reports = []
        >>> fit = gpc.fit_svgp(model, X, y, key=jax.random.key(0), num_steps=300, batch_size=20,
        ...                    progress=gpc.Progress(reports.append, every=100))
        >>> [info["step"] for info in reports], reports[-1]["done"]
        ([1, 100, 200, 300], True)

    ``progress=True`` prints such reports on stderr instead.  ``gpc.fit`` and ``gpc.fit_em_ep`` take the same
    ``progress=`` argument, ``gpc.MCMC`` and ``gpc.AIS`` a field of that name.
    """

    def __init__(self, callback: Callable[[dict], None] | None = None, *, every: int | None = None,
                 seconds: float | None = None, file=None):
        if every is not None and (int(every) != every or every < 1):
            raise GPClassError(f"Progress(every=...) must be a positive integer; got {every!r}.")
        self.callback = callback
        self.every = None if every is None else int(every)
        self.seconds = (DEFAULT_SECONDS if callback is None else 0.0) if seconds is None else float(seconds)
        self.file = file
        self._last = -float("inf")

    def __repr__(self):
        return f"Progress({self.callback!r}, every={self.every}, seconds={self.seconds})"

    def receive(self, info: dict) -> None:
        """On the host: throttle by wall time, then call ``callback`` (or print)."""
        now = time.monotonic()
        if not (info["step"] <= 1 or info.get("done") or now - self._last >= self.seconds):
            return
        self._last = now
        if self.callback is not None:
            self.callback(info)
        else:
            print(format_info(info), file=self.file or sys.stderr, flush=True)


def as_progress(progress) -> Progress | None:
    """``None`` / ``False`` -> ``None`` (silent); ``True`` -> ``Progress()``; a callable -> ``Progress(fn)``."""
    if progress is None or progress is False:
        return None
    if progress is True:
        return Progress()
    if isinstance(progress, Progress):
        return progress
    if callable(progress):
        return Progress(progress)
    raise TypeError(f"progress must be None, True, a callable or gpc.Progress(...); got {type(progress).__name__}.")


def format_info(info: dict) -> str:
    """The printer's line: task, step, then the loop's values."""
    parts = [f"{info['task']} step {info['step']:5d}"]
    total = info.get("num_steps")
    if total is not None:
        parts[0] += f"/{total}"
    for name, value in info.items():
        if name in ("task", "step", "num_steps", "done", "status"):
            continue
        parts.append(f"{name} {value: .8e}" if isinstance(value, float) else f"{name} {value}")
    line = "  ".join(parts)
    if info.get("done"):
        status = info.get("status")
        line += "  (done" + (f": {Status(status).name}" if status is not None and status >= 0 else "") + ")"
    return line


def every_for(progress: Progress, total: int, default_reports: int | None = None) -> int:
    """The step interval: ``progress.every``, or 1 (fits), or about ``total / default_reports`` (samplers)."""
    if progress.every is not None:
        return progress.every
    return 1 if default_reports is None else max(1, total // default_reports)


def due(step, every: int, done):
    """Whether ``step`` is reported: 0, 1, every ``every``-th, or the last (``done``); traced values.

    ``every=None`` (no progress wanted) gives False without tracing anything."""
    if every is None:
        return False
    return (step <= 1) | (step % every == 0) | done


def report(progress: Progress | None, task: str, when, step, done, /, *, total: int | None = None, **values) -> None:
    """Inside a traced loop: send ``values`` to ``progress`` on the host if ``when`` (a traced boolean).

    The callback sits in a ``lax.cond`` on ``when``; under ``vmap`` (a batched
    ``when``) the cond becomes a select, the callback runs for every problem,
    and the host skips those whose ``when`` is false.  Nothing is traced when
    ``progress`` is ``None``.  Given NumPy values (``gpc.fit``'s host loop),
    ``progress`` is called at once.
    """
    if progress is None:
        return
    names = tuple(values)

    def host(when, step, done, *vals):
        if not bool(np.asarray(when)):
            return
        info = {"task": task, "step": int(np.asarray(step))}
        if total is not None:
            info["num_steps"] = total
        for name, v, wide in zip(names, vals, wide_floats):
            v = np.asarray(v)
            if wide:  # the float64 value's bits, sent as pairs of uint32 (see below)
                v = np.ascontiguousarray(v).view(np.float64)[..., 0]
            info[name] = v.item() if v.ndim == 0 else v
        info["done"] = bool(np.asarray(done))
        progress.receive(info)

    if not isinstance(when, jax.Array):  # NumPy values: on the host already (gpc.fit's host loop), no callback
        wide_floats = [False] * len(names)
        host(when, step, done, *values.values())
        return
    # float64 values travel as their bits: the callback's arguments are canonicalised by the host thread's
    # configuration, where x64 enabled by the jax.enable_x64 context manager does not hold (rounded to float32).
    values = [jnp.asarray(v) for v in values.values()]
    wide_floats = [v.dtype == jnp.float64 for v in values]
    values = [lax.bitcast_convert_type(v, jnp.uint32) if wide else v for v, wide in zip(values, wide_floats)]
    args = (jnp.asarray(when), jnp.asarray(step), jnp.asarray(done), *values)
    lax.cond(args[0], lambda a: jax.debug.callback(host, *a), lambda a: None, args)
