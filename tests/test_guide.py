"""The user guide's Python blocks run: in order, as one script, in a new process, as a reader who pastes them would.

A block fenced as ```python no-run (launching several processes) is shown but not run; the test checks that such
blocks stay the exception.  The script runs in a temporary directory (the guide saves files) with the compilation
cache and matplotlib's backend pointed there too, so it touches nothing of the user's.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

GUIDE = Path(__file__).resolve().parents[1] / "docs" / "guide.md"
FENCE = re.compile(r"^```python([^\n]*)\n(.*?)^```", flags=re.M | re.S)


def python_blocks(text: str) -> list[tuple[str, str]]:
    """The fenced Python blocks of a Markdown text, in order, as (info string after "python", code)."""
    return [(info.strip(), code) for info, code in FENCE.findall(text)]


def test_the_guide_has_python_blocks_and_few_are_not_run():
    blocks = python_blocks(GUIDE.read_text())
    assert len(blocks) >= 20
    assert {info for info, _ in blocks} <= {"", "no-run"}
    assert sum(info == "no-run" for info, _ in blocks) <= 1


@pytest.mark.slow
@pytest.mark.timeout(1600)  # the whole guide in one process: minutes, past pyproject's 300 s per test
def test_guide_python_blocks_run(tmp_path):
    code = "\n".join(code for info, code in python_blocks(GUIDE.read_text()) if info != "no-run")
    script = tmp_path / "guide.py"
    script.write_text(code + '\nprint("guide: done")\n')
    env = dict(os.environ, XDG_CACHE_HOME=str(tmp_path / "cache"), MPLBACKEND="Agg")
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.rstrip().endswith("guide: done"), done.stdout[-2000:]
