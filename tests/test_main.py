"""The README's main job runs end to end in a new process, and a second run loads its programs from the cache.

Slow tier: CI runs the same two runs from the installed wheel (``.ci/wheel_check``), outside the checkout.
"""

import re
import subprocess
import sys

import pytest

ARGS = ["--dataset", "crabs", "--n-train", "60", "--likelihood", "probit"]


def run_main(*args):
    return subprocess.run([sys.executable, "-m", "gpclass", *ARGS, *args], capture_output=True, text=True,
                          check=True, timeout=240).stdout


@pytest.mark.slow
def test_main_job_prints_fit_and_held_out_metrics_and_reuses_compiled_programs(tmp_path):
    first = run_main("--cache-dir", str(tmp_path))
    for expected in ["compilation cache:", "fit step", "fitted: sigma_f", "log marginal likelihood",
                     "stopped: converged", "the gradient test was met", "test error", "information", "wall time",
                     "0 compiled programs loaded from the cache"]:
        assert expected in first
    assert any(tmp_path.iterdir()), "the first run stored no compiled program"
    second = run_main("--cache-dir", str(tmp_path))
    loaded = int(re.search(r"(\d+) compiled programs loaded from the cache", second).group(1))
    assert loaded >= 1  # at least the fit's program
    results = lambda out: [line for line in out.splitlines() if line.startswith(("fitted", "log marginal", "test"))]
    assert results(second) == results(first)

