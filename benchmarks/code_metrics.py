"""The shape of the library, before and after a change: files, lines, repeated code, dispatch, derivative and loop
sites, the largest function.

    python benchmarks/code_metrics.py --before 9627896      # this tree against an earlier commit

Counted over ``gpclass/`` of each tree (``git archive`` for the earlier commit): implementation files in
``gpclass/_inference/`` (``__init__.py`` excluded), lines of library code, pairs of places sharing six or more
lines (the ``duplicates`` command, where installed), ``isinstance`` tests on gpclass's own classes (dispatch that
belongs in a protocol), ``custom_vjp``/``custom_jvp`` definitions, ``lax.while_loop`` call sites and the longest
function.  Writes ``results/<name>.json``.
"""

import argparse
import ast
import json
import re
import shutil
import subprocess
import tarfile
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = Path(__file__).resolve().parent / "results"
OWN_CLASS = re.compile(r"isinstance\([^,]+,\s*\(?\s*(Sparse|LowRankCovariance|\w*Posterior|SVGP|Softmax|PerClass|"
                       r"\w*Solution|DenseCovariance|\w*Covariance|Laplace|EP|KL|MCMC|AIS|JaakkolaJordan\w*)\b")


def metrics(package: Path) -> dict:
    files = sorted(package.rglob("*.py"))
    lines = sum(len(f.read_text().splitlines()) for f in files)
    texts = {f: f.read_text() for f in files}
    inference = [f for f in (package / "_inference").glob("*.py") if f.name != "__init__.py"]
    largest = max(((node.end_lineno - node.lineno + 1, f"{f.relative_to(package.parent)}:{node.name}")
                   for f, text in texts.items() for node in ast.walk(ast.parse(text))
                   if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))), default=(0, ""))
    return {
        "inference_files": len(inference),
        "library_lines": lines,
        "duplicate_pairs": _duplicate_pairs(package),
        "isinstance_on_own_classes": sum(len(OWN_CLASS.findall(t)) for t in texts.values()),
        "custom_derivative_sites": sum(len(re.findall(r"\bjax\.custom_[vj]jp\b", t)) for t in texts.values()),
        "while_loop_sites": sum(t.count("while_loop(") for t in texts.values()),
        "largest_function": {"lines": largest[0], "name": largest[1]},
    }


def _duplicate_pairs(package: Path):
    if shutil.which("duplicates") is None:
        return None
    out = subprocess.run(["duplicates", "--repo", str(package), "--most", "200", "--seconds", "120"],
                         capture_output=True, text=True).stdout
    return sum(1 for line in out.splitlines() if re.match(r"^D\d+ ", line))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--before", required=True)
    parser.add_argument("--name", default="code_metrics")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        archive = Path(directory) / "before.tar"
        subprocess.run(["git", "-C", str(ROOT), "archive", "-o", str(archive), args.before, "gpclass"], check=True)
        with tarfile.open(archive) as tar:
            tar.extractall(directory, filter="data")
        subprocess.run(["git", "init", "-q", directory], check=True)  # duplicates reads tracked files in a checkout
        subprocess.run(["git", "-C", directory, "add", "gpclass"], check=True)
        before = metrics(Path(directory) / "gpclass")
    after = metrics(ROOT / "gpclass")
    for key in before:
        print(f"{key:28s} {json.dumps(before[key]):>50s} -> {json.dumps(after[key])}")
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / f"{args.name}.json").write_text(json.dumps({"before": args.before, "before_metrics": before,
                                                          "after_metrics": after}, indent=1))


if __name__ == "__main__":
    main()
