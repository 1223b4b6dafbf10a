"""The release's metadata: one version (pyproject reads ``gpclass.__version__``) with its changelog entry, the Apache
License 2.0 that pyproject declares, and the ``gpclass`` console script.  The built wheel itself is checked by
``.ci/wheel_check`` (run by ``.ci/run``): built, installed into a fresh environment, and run from outside the checkout.
"""

import ast
import hashlib
import inspect
import re
from pathlib import Path

import pytest

import gpclass
from gpclass.__main__ import main

try:
    import tomllib
except ImportError:  # Python 3.10
    tomllib = pytest.importorskip("tomli")

ROOT = Path(__file__).resolve().parent.parent
VERSION = "0.2.0"
# The md5 of the Apache License 2.0 as apache.org publishes it (LICENSE-2.0.txt), the checksum packagers use.
APACHE_2_MD5 = "3b83ef96387f14655fc854ddc3c6bd57"


@pytest.fixture(scope="module")
def pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_one_version_read_by_pyproject_from_the_package(pyproject):
    assert "version" not in pyproject["project"] and "version" in pyproject["project"]["dynamic"]
    assert pyproject["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "gpclass.__version__"}
    # setuptools reads a literal without importing gpclass (and its dependencies) at build time.
    tree = ast.parse((ROOT / "gpclass" / "__init__.py").read_text(encoding="utf-8"))
    literals = [ast.literal_eval(node.value) for node in tree.body
                if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["__version__"]]
    assert literals == [VERSION] and gpclass.__version__ == VERSION


def test_the_version_has_a_changelog_heading():
    headings = [line for line in (ROOT / "CHANGELOG.md").read_text(encoding="utf-8").splitlines()
                if line.startswith("## ")]
    assert any(line.startswith(f"## {VERSION} (") for line in headings), headings


def test_license_is_the_apache_license_2_0_verbatim(pyproject):
    assert pyproject["project"]["license"] == "Apache-2.0" and pyproject["project"]["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    assert lines[:3] == ["Apache License", "Version 2.0, January 2004", "http://www.apache.org/licenses/"]
    assert any(line.startswith("9. Accepting Warranty or Additional Liability.") for line in lines)
    assert "END OF TERMS AND CONDITIONS" in lines
    assert hashlib.md5(text.encode("utf-8")).hexdigest() == APACHE_2_MD5, "LICENSE differs from the Apache 2.0 text"


def test_console_script_is_the_main_job(pyproject):
    assert pyproject["project"]["scripts"] == {"gpclass": "gpclass.__main__:main"}
    # A console script calls the function with no arguments: argv=None reads sys.argv.
    assert all(p.default is not inspect.Parameter.empty for p in inspect.signature(main).parameters.values())


@pytest.mark.parametrize("prog", [None, "python -m gpclass"])
def test_help_prints_the_usage_and_exits_0(prog, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--help"]) if prog is None else main(["--help"], prog=prog)
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert re.match(rf"usage: {re.escape(prog or 'gpclass')} \[-h\]\s", out) and "--dataset" in out and "--csv" in out
