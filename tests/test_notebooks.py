"""The tutorials (notebooks/*.ipynb) run top to bottom, as a user runs them, and are stored without outputs.

Each notebook's code cells are executed in order, in one namespace, in a new Python process (no Jupyter: the
.ipynb file is JSON, read with the json module), with ``GPCLASS_TUTORIAL_SMALL=1`` set for that process only
(every notebook reads it in its parameter cell and picks small sizes), ``MPLBACKEND=Agg`` and a temporary working
directory.  A cell that raises fails the test with the cell's index and its traceback.  The notebooks use no
IPython magics (``%``, ``!``), which plain Python cannot run; the storage test checks that too.

Tiering: every tutorial compiles programs of its own in a new process (the quickstart alone takes seconds), so
running them is the slow tier; the default tier checks how they are stored and that a failing cell is reported.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parents[1] / "notebooks"
SMALL_VARIABLE = "GPCLASS_TUTORIAL_SMALL"
FAST = ["quickstart.ipynb"]
SLOW = ["choosing_a_method.ipynb", "kernels_and_ard.ipynb", "multiclass.ipynb", "large_data.ipynb",
        "from_scikit_learn.ipynb", "gold_standard.ipynb"]

# The child process: runs the code cells of the notebook named by argv[1] in one namespace; on an exception prints
# the cell's index, its source and the traceback to stderr and exits with status 1.
RUNNER = r'''
import json, sys, traceback

cells = [c for c in json.load(open(sys.argv[1], encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
namespace = {"__name__": "__main__"}
for index, cell in enumerate(cells):
    source = "".join(cell["source"])
    try:
        exec(compile(source, f"<code cell {index}>", "exec"), namespace)
    except BaseException:
        sys.stderr.write(f"\ncode cell {index} of {len(cells)} raised:\n{source}\n\n{traceback.format_exc()}")
        sys.exit(1)
'''


def code_cells(path):
    return ["".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"]
            if c["cell_type"] == "code"]


def execute(path, cwd):
    """Run the notebook at ``path`` in a new Python process (small sizes, no display, in ``cwd``)."""
    env = dict(os.environ, **{SMALL_VARIABLE: "1", "MPLBACKEND": "Agg"})
    return subprocess.run([sys.executable, "-c", RUNNER, str(path)], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=840)


def run_notebook(name, tmp_path):
    done = execute(NOTEBOOKS / name, tmp_path)
    if done.returncode != 0:
        pytest.fail(f"{name}: {done.stderr[-6000:]}", pytrace=False)


def test_a_failing_cell_is_reported_with_its_index_and_traceback(tmp_path):
    cells = [{"cell_type": "markdown", "source": ["# title"]},
             {"cell_type": "code", "source": ["import os\n", "value = os.environ['GPCLASS_TUTORIAL_SMALL']"]},
             {"cell_type": "code", "source": ["assert value == '0', 'small mode'"]}]
    path = tmp_path / "failing.ipynb"
    path.write_text(json.dumps({"cells": cells}), encoding="utf-8")
    done = execute(path, tmp_path)
    assert done.returncode == 1
    assert "code cell 1 of 2 raised" in done.stderr and "AssertionError: small mode" in done.stderr


def test_every_tutorial_is_tested():
    assert sorted(p.name for p in NOTEBOOKS.glob("*.ipynb")) == sorted(FAST + SLOW)


@pytest.mark.slow
@pytest.mark.parametrize("name", FAST)
def test_tutorial_runs(name, tmp_path):
    run_notebook(name, tmp_path)


@pytest.mark.slow
@pytest.mark.timeout(900)  # a tutorial compiles dozens of programs: more than pyproject's 300 s on a loaded machine
@pytest.mark.parametrize("name", SLOW)
def test_slow_tutorial_runs(name, tmp_path):
    run_notebook(name, tmp_path)


@pytest.mark.parametrize("path", sorted(NOTEBOOKS.glob("*.ipynb")), ids=lambda p: p.name)
def test_tutorial_is_stored_without_outputs_or_magics(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    for index, cell in enumerate(notebook["cells"]):
        if cell["cell_type"] != "code":
            continue
        assert cell.get("outputs") == [] and cell.get("execution_count") is None, f"code cell {index} has outputs"
        magics = [line for line in "".join(cell["source"]).splitlines() if line.lstrip().startswith(("%", "!"))]
        assert not magics, f"code cell {index} uses IPython magics: {magics}"
    assert any(f'os.environ.get("{SMALL_VARIABLE}")' in source for source in code_cells(path)), \
        f"no parameter cell reads {SMALL_VARIABLE}"
