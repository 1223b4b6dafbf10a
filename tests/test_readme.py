"""Every Python block of the README runs, in order, in a new process, as a user who pastes them into a script would.

Slow tier (the default one has no room); CI runs the same script against the installed wheel (``.ci/wheel_check``).
"""

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"


def python_blocks(text: str) -> list[str]:
    """The fenced ```python blocks of a Markdown text, in order."""
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.M | re.S)


def test_the_readme_has_python_blocks():
    assert len(python_blocks(README.read_text())) >= 2


@pytest.mark.slow  # compiles an EP fit, a vmapped fit and the estimator's programs in a new process
def test_readme_python_blocks_run(tmp_path):
    script = tmp_path / "readme.py"
    script.write_text("\n".join(python_blocks(README.read_text())))
    done = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "CONVERGED" in done.stdout, done.stdout
