"""benchmarks/README.md is generated from benchmarks/results/*.json by benchmarks/make_readme.py (issue 38, item 4):
no number in it is typed by hand, and every results file appears in it."""

import difflib
import importlib.util
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


@pytest.fixture(scope="module")
def make_readme():
    spec = importlib.util.spec_from_file_location("make_readme", BENCHMARKS / "make_readme.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def committed() -> str:
    return (BENCHMARKS / "README.md").read_text()


def test_readme_is_what_the_results_give(make_readme, committed):
    generated = make_readme.readme_text()
    diff = list(difflib.unified_diff(committed.splitlines(), generated.splitlines(), "committed README.md",
                                     "generated from results/*.json", lineterm="", n=1))
    assert not diff, ("benchmarks/README.md is not what benchmarks/results/*.json give: run "
                      "python benchmarks/make_readme.py (do not edit the README by hand)\n" + "\n".join(diff[:40]))


def test_every_results_file_appears(committed):
    files = sorted(path.name for path in (BENCHMARKS / "results").glob("*.json"))
    assert files
    missing = [name for name in files if f"`{name}`" not in committed]
    assert not missing, f"results files missing from benchmarks/README.md: {missing}"


def test_every_renderer_reads_its_files(committed):
    """A renderer that cannot read a file falls back to a table of scalars with a note; none may need it."""
    assert "cannot read this file" not in committed


def test_newest_file_is_current_and_the_others_earlier_runs(make_readme):
    def run(name, finished, fit):
        results = {"gpclass": {"fit_median": fit, "process_median": 2.0, "runs": [{}]},
                   "sklearn": {"fit_median": 0.5, "process_median": 1.5, "runs": [{}]}}
        return make_readme.Run(name, results, finished, "abc1234", {"cores": 2, "cpu": "test CPU"})

    text = make_readme.readme_text([run("first_fit_n10_old", "2026-01-01 10:00:00", 1.5),
                                    run("first_fit_n10_new", "2026-01-02 10:00:00", 1.25)])
    section = text[text.index("## `first_fit.py`"):]
    section = section[:section.index("\n## ", 1)]
    current, earlier = section.split("Earlier runs")
    assert "`first_fit_n10_new.json` · finished 2026-01-02 10:00:00 · commit `abc1234`" in current
    assert "| gpclass | 1.25 s | 2.50x |" in current  # 1.25 s over scikit-learn's 0.5 s
    assert "first_fit_n10_old" not in current
    assert "- `first_fit_n10_old.json`, 2026-01-01 10:00:00, commit `abc1234`: gpclass / scikit-learn 3.00x" in earlier


def test_a_file_no_renderer_expects_still_appears(make_readme):
    odd = make_readme.Run("first_fit_n10_odd", {"note": "restructured", "seconds": 0.125}, "2026-01-03 00:00:00")
    text = make_readme.readme_text([odd])
    assert "cannot read this file" in text
    assert "| seconds | 0.125 |" in text
