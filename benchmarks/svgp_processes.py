"""SVGP data-parallel over 1, 2 and 4 JAX processes on this machine: time per step and scaling efficiency.

    python benchmarks/svgp_processes.py                      # n = 10^5, m = 100, b = 1000; 1, 2 and 4 processes
    python benchmarks/svgp_processes.py --processes 1 2 --steps 50

Each configuration starts P processes (``jax.distributed.initialize`` with a local coordinator, gloo CPU
collectives, one CPU device each) that all call ``gpc.fit_svgp(..., devices=jax.devices())`` on the same
twonorm data (``svgp_vs_gpflow.py``'s model: SE kernel, logistic, m inducing inputs, Adam 0.01): each process
reads its b / P rows of every minibatch and the ELBO's gradient is summed across the processes (one all-reduce
per step).  Reported per P: the time per step (after a first call of 10 steps), speedup t_1 / t_P and efficiency
speedup / P; and, as the reference, the one-process compiled loop (``fit_svgp`` without ``devices``), which has
no per-step host round trip.  On a cluster the processes are on different hosts, each with its own cores; here
they share two cores, so P = 4 oversubscribes them and the efficiency says what the coordination costs, not what
a cluster would gain.
"""

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import machine_header, write_results  # noqa: E402

WORKER = textwrap.dedent("""
    import json, sys, time
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    rank, count, port, n, m, batch, steps, out = sys.argv[1:9]
    rank, count, n, m, batch, steps = int(rank), int(count), int(n), int(m), int(batch), int(steps)
    if count > 1:
        jax.distributed.initialize(f"localhost:{port}", num_processes=count, process_id=rank)
    import numpy as np
    sys.path.insert(0, BENCHMARKS)
    from svgp_vs_gpflow import D, twonorm
    import gpclass as gpc
    X, y = twonorm(n, np.random.default_rng(0))
    kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(D)))
    start = gpc.SVGP.at_prior(kernel, gpc.likelihoods.Logistic(), X[:m])
    devices = None if sys.argv[9] == "compiled" else jax.devices()
    fit = gpc.fit_svgp(start, X, y, key=jax.random.key(0), num_steps=10, batch_size=batch, devices=devices)
    t0 = time.perf_counter()
    fit = gpc.fit_svgp(fit, X, y, key=jax.random.key(0), num_steps=steps, batch_size=batch, devices=devices)
    per_step = (time.perf_counter() - t0) / steps
    if rank == 0:
        json.dump(dict(step_ms=1e3 * per_step, elbo=float(fit.elbo[-1])), open(out, "w"))
""")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def run(count: int, args, mode: str, directory: Path) -> dict:
    script = directory / "worker.py"
    script.write_text(WORKER.replace("BENCHMARKS", repr(str(Path(__file__).resolve().parent))))
    out, port = directory / f"out_{mode}_{count}.json", free_port()
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    workers = [subprocess.Popen([sys.executable, str(script), str(rank), str(count), str(port), str(args.n),
                                 str(args.m), str(args.batch), str(args.steps), str(out), mode], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in range(count)]
    logs = [w.communicate(timeout=3600)[0] for w in workers]
    if any(w.returncode for w in workers):
        raise RuntimeError("a worker failed:\n" + "\n".join(log[-2000:] for log in logs))
    return json.loads(out.read_text())


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--m", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--out", default="svgp_processes")
    args = parser.parse_args()
    info = machine_header("SVGP data-parallel over JAX processes on one machine", args)
    rows = []
    with tempfile.TemporaryDirectory() as directory:
        reference = run(1, args, "compiled", Path(directory))
        print(f"one process, compiled loop (no devices=): {reference['step_ms']:.2f} ms per step", flush=True)
        rows.append(dict(processes=1, loop="compiled", **reference))
        base = None
        for count in args.processes:
            result = run(count, args, "devices", Path(directory))
            base = result["step_ms"] if count == 1 else base
            speedup = None if base is None else base / result["step_ms"]
            rows.append(dict(processes=count, loop="host, devices=jax.devices()", speedup=speedup,
                             efficiency=None if speedup is None else speedup / count, **result))
            print(f"{count} process(es), host loop over jax.devices(): {result['step_ms']:.2f} ms per step"
                  + ("" if speedup is None else f", speedup {speedup:.2f}, efficiency {speedup / count:.2f}")
                  + f"; last ELBO estimate {result['elbo']:.3f}", flush=True)
    write_results(args.out, info, rows)


if __name__ == "__main__":
    main()
