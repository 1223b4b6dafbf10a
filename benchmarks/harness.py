"""What every benchmark shares: the machine header, timing with compile and run separated, ratios, JSON results.

A script does only its experiment::

    from harness import compile_and_time, machine_header, write_results
    info = machine_header("EP timing", args)
    times = compile_and_time({"cholesky": lambda: chol(K), "ep": lambda: ep(theta)}, repeats=5)
    print_ratios(times, reference="cholesky")
    write_results("ep_timing", info, rows)

``compile_and_time`` calls each function once (compile plus one run), then
calls them all in turn ``repeats`` times (interleaved, so every function sees
the same machine load) and reports the median and minimum run times and the
compile time (first call minus the median run).
"""

import json
import os
import platform
import resource
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    """(fn(), wall seconds), waiting for every array of the result."""
    start = time.perf_counter()
    out = jax.block_until_ready(fn())
    return out, time.perf_counter() - start


def peak_mb() -> float:
    """The process's peak resident memory so far, in MB (Linux reports ru_maxrss in kB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def interleaved(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, tuple[float, float]]:
    """(median, minimum) wall seconds of each (already compiled) function over ``repeats`` rounds in which every
    function is called once in turn, so that all of them see the same machine load."""
    runs = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            runs[name].append(timed(fn)[1])
    return {name: (float(np.median(t)), float(np.min(t))) for name, t in runs.items()}


def median_time(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """(median, minimum) wall seconds of ``repeats`` calls of one (already compiled) function."""
    return interleaved({"fn": fn}, repeats)["fn"]


def compile_and_time(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, dict]:
    """For each named zero-argument function: its output, compile time, median and minimum run time (seconds).

    The first call of each compiles and runs; then all are called in turn ``repeats`` times (``interleaved``).
    """
    out, first = {}, {}
    for name, fn in fns.items():
        out[name], first[name] = timed(fn)
    runs = interleaved(fns, repeats) if repeats else {name: (first[name], first[name]) for name in fns}
    return {name: dict(out=out[name], compile=first[name] - runs[name][0], run=runs[name][0], run_min=runs[name][1])
            for name in fns}


def load_average() -> str:
    return "load avg %.2f %.2f %.2f" % os.getloadavg()


def ratios(times: dict[str, dict], reference: str) -> dict[str, float]:
    """Each function's median run time over the reference's."""
    return {name: t["run"] / times[reference]["run"] for name, t in times.items()}


def print_times(times: dict[str, dict], reference: str | None = None) -> None:
    """One line per function: compile, median and minimum run time, and the ratio to ``reference``."""
    rel = ratios(times, reference) if reference else {}
    header = f"  {'':24s} {'compile':>10s} {'run':>10s} {'min':>10s}"
    print(header + (f" {'x ' + reference:>14s}" if reference else ""))
    for name, t in times.items():
        line = f"  {name:24s} {fmt_t(t['compile']):>10s} {fmt_t(t['run']):>10s} {fmt_t(t['run_min']):>10s}"
        print(line + (f" {rel[name]:14.2f}" if reference else ""))


def fmt_t(seconds: float | None) -> str:
    """A duration in us, ms or s; a negative compile time (later calls slower than the first) is marked as noise."""
    if seconds is None or not np.isfinite(seconds):
        return "n/a"
    if seconds < 0:
        return f"-{fmt_t(-seconds)}?"
    if seconds < 1e-3:
        return f"{seconds * 1e6:.0f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds:.2f} s"


def machine() -> dict:
    """Versions, cores, CPU model, load, the BLAS/XLA environment and the gpclass commit."""
    import equinox
    import jaxlib
    import optax

    import gpclass

    info = dict(
        python=platform.python_version(), jax=jax.__version__, jaxlib=jaxlib.__version__, numpy=np.__version__,
        optax=optax.__version__, equinox=equinox.__version__, gpclass=gpclass.__version__,
        cores=os.cpu_count(), devices=[str(d) for d in jax.devices()], x64=bool(jax.config.jax_enable_x64),
        load_average=os.getloadavg()[0], cpu=_cpu_model(), commit=_commit(Path(gpclass.__file__).parent),
        environment={k: v for k, v in sorted(os.environ.items())
                     if any(s in k for s in ("OPENBLAS", "BLAS", "OMP_", "MKL", "XLA", "JAX_"))},
    )
    try:
        import sklearn

        info["sklearn"] = sklearn.__version__
    except ImportError:
        pass
    return info


def machine_header(title: str, args=None) -> dict:
    """Print the title, the machine and the arguments; return the machine's description (for the JSON)."""
    info = machine()
    print("=" * 100)
    print(title)
    print(f"python {info['python']}  jax {info['jax']}  jaxlib {info['jaxlib']}  numpy {info['numpy']}  "
          f"optax {info['optax']}  equinox {info['equinox']}  gpclass {info['gpclass']} ({info['commit']})"
          + (f"  sklearn {info['sklearn']}" if "sklearn" in info else ""))
    print(f"{info['cores']} cores ({info['cpu']}), devices {info['devices']}, x64 {info['x64']}, "
          f"load average {info['load_average']:.2f}, environment {info['environment'] or '(none set)'}")
    if args is not None:
        print(f"arguments: {vars(args)}")
    print("=" * 100, flush=True)
    return info


def write_results(name: str, info: dict, results) -> Path:
    """benchmarks/results/<name>.json with the machine's description, the time and the results."""
    RESULTS.mkdir(exist_ok=True)
    path = RESULTS / f"{name}.json"
    record = dict(machine=info, finished=time.strftime("%Y-%m-%d %H:%M:%S"), results=results)
    path.write_text(json.dumps(record, indent=1, default=_plain))
    print(f"results: {path}", flush=True)
    return path


def _plain(x):
    """JSON for NumPy and JAX values."""
    arr = np.asarray(x)
    return arr.item() if arr.ndim == 0 else arr.tolist()


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            return next(line.split(":", 1)[1].strip() for line in f if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.processor() or "n/a"


def _commit(package: Path) -> str:
    try:
        head = subprocess.run(["git", "-C", str(package), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(package), "status", "--porcelain", "--", "."], capture_output=True,
                               text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "n/a"
    return (head or "n/a") + (" + uncommitted changes" if dirty else "")


def pyplot():
    """matplotlib.pyplot with the Agg backend, or None (with a note) when matplotlib is not installed: the figures
    are optional, the numbers are not."""
    try:
        import matplotlib
    except ImportError:
        print("matplotlib is not installed: figure skipped (pip install matplotlib to draw it)", flush=True)
        return None
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
