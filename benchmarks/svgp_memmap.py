"""SVGP on a training set larger than it needs to be in memory: X memory-mapped from disk, streamed by minibatches.

    python benchmarks/svgp_memmap.py                         # 10^7 twonorm rows (1.6 GB of float64 on disk)
    python benchmarks/svgp_memmap.py --n 1000000 --steps 500 --dir /some/disk

Writes Breiman's twonorm (20 inputs, Bayes error Phi(-2) = 2.28 %) in blocks of 10^6 rows to a ``.npy`` file
(``np.lib.format.open_memmap``; never whole in memory), opens it with ``np.load(path, mmap_mode="r")`` and trains
``gpc.fit_svgp`` on it (SE kernel from sigma_f^2 = 1, l = sqrt(20), logistic, m inducing inputs at the first m
rows, Adam 0.01, minibatches of b): each step reads its b rows from the file.  The labels (8 bytes a row) are in
memory.  Reported: time per step (a first call of 20 steps compiles), the time an epoch would take at that rate,
the process's memory after training (anonymous, i.e. the process's own, and file-backed, i.e. the page cache's
pages of the file it touched: reclaimable, as the kernel drops them under memory pressure) and its peak resident
size (both kinds), and the test error on 10^4 new cases.  The file is written by a child process.

Under a memory limit below the file's size (Linux, cgroup v1, as root; ``memory.max`` on cgroup v2)::

    mkdir /sys/fs/cgroup/memory/gpc1g && echo 1073741824 > /sys/fs/cgroup/memory/gpc1g/memory.limit_in_bytes
    sync && echo 3 > /proc/sys/vm/drop_caches
    sh -c 'echo $$ > /sys/fs/cgroup/memory/gpc1g/tasks; exec python benchmarks/svgp_memmap.py --steps 100'

(``results/svgp_memmap_1gb_limit.json`` was written so, with ``--out svgp_memmap_1gb_limit``).
"""

import argparse
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path

import jax

jax.config.update("jax_enable_x64", True)  # a benchmark is a user's program: float64 is its choice

import numpy as np  # noqa: E402

import gpclass as gpc  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import machine_header, write_results  # noqa: E402
from svgp_vs_gpflow import D, twonorm  # noqa: E402

BLOCK = 1_000_000


def memory_mb() -> dict:
    """RssAnon, RssFile and VmHWM (peak resident) of this process, in MB (Linux)."""
    fields = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("RssAnon", "RssFile", "VmHWM"):
            fields[key] = int(value.split()[0]) / 1024
    return fields


def write_twonorm(path: Path, n: int, seed: int) -> None:
    """X to ``path`` block by block and y to ``path`` with ``_y`` (run in a child process, so that the pages it
    writes do not count in this process's memory)."""
    X = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(n, D))
    rng, labels = np.random.default_rng(seed), []
    for start in range(0, n, BLOCK):
        X_block, y_block = twonorm(min(BLOCK, n - start), rng)
        X[start:start + len(y_block)] = X_block
        labels.append(y_block)
    X.flush()
    np.save(path.with_name(path.stem + "_y.npy"), np.concatenate(labels))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--m", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--dir", default=None, help="where to write the file (default: a temporary directory)")
    parser.add_argument("--out", default="svgp_memmap")
    args = parser.parse_args()
    info = machine_header("SVGP on a memory-mapped training set", args)
    with tempfile.TemporaryDirectory(dir=args.dir) as directory:
        path = Path(directory) / "twonorm_X.npy"
        t0 = time.perf_counter()
        writer = multiprocessing.get_context("spawn").Process(target=write_twonorm, args=(path, args.n, 0))
        writer.start()
        writer.join()
        written = time.perf_counter() - t0
        y = np.load(path.with_name(path.stem + "_y.npy"))
        print(f"wrote {args.n} rows ({path.stat().st_size / 1e9:.2f} GB) in {written:.1f} s; memory {memory_mb()}",
              flush=True)
        X = np.load(path, mmap_mode="r")
        kernel = gpc.kernels.SquaredExponential(np.float64(1.0), np.float64(np.sqrt(D)))
        start = gpc.SVGP.at_prior(kernel, gpc.likelihoods.Logistic(), np.asarray(X[:args.m]))
        t0 = time.perf_counter()
        fit = gpc.fit_svgp(start, X, y, key=jax.random.key(0), num_steps=20, batch_size=args.batch)
        first = time.perf_counter() - t0
        after_first = memory_mb()
        print(f"after the first call (20 steps): memory {after_first}", flush=True)
        t0 = time.perf_counter()
        fit = gpc.fit_svgp(fit.model, X, y, key=jax.random.key(1), num_steps=args.steps, batch_size=args.batch)
        per_step = (time.perf_counter() - t0) / args.steps
        memory = memory_mb()
        X_test, y_test = twonorm(10_000, np.random.default_rng(1))
        error = float(np.mean(np.where(np.asarray(gpc.predict(fit.model, X_test)) > 0.5, 1.0, -1.0) != y_test))
    row = dict(n=args.n, m=args.m, batch=args.batch, steps=args.steps, file_gb=args.n * D * 8 / 1e9,
               write_s=written, first_call_s=first, step_ms=1e3 * per_step,
               epoch_s=per_step * args.n / args.batch, memory_mb=memory, memory_after_first_call_mb=after_first,
               test_error=error, bayes_error=0.0228,
               final_elbo_estimate=float(fit.elbo[-1]))
    print(f"n = {args.n}: {row['step_ms']:.2f} ms per step of {args.batch} (first call of 20 steps "
          f"{first:.1f} s); an epoch would take {row['epoch_s']:.0f} s; memory after training: "
          f"anonymous {memory['RssAnon']:.0f} MB, file pages {memory['RssFile']:.0f} MB, peak resident "
          f"{memory['VmHWM']:.0f} MB (file {row['file_gb']:.2f} GB); test error {100 * error:.2f} % "
          f"(Bayes 2.28 %)", flush=True)
    write_results(args.out, info, [row])


if __name__ == "__main__":
    main()
