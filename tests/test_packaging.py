"""The built wheel: what an installed jarp needs besides its Python modules.

The native handler and its guard are compiled on the user's machine at first use (by the Clang in the warp-lang
wheel), so their C++ sources must ship; ``py.typed`` marks the package as typed (PEP 561), as its classifier says.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_the_wheel_ships_py_typed_and_the_native_sources(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (wheel,) = tmp_path.glob("jarp-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "jarp/py.typed" in names
    assert {"jarp/warp/_ffi/_native/_handler.cpp", "jarp/warp/_ffi/_native/_guard.cpp"} <= names
    assert (
        "Classifier: Typing :: Typed"
        in zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    )


def test_ci_runs_the_type_check_and_the_readmes_commands() -> None:
    # The typing promise of py.typed holds only while the checker runs where a change lands: CI's entry point runs
    # the lint session (ruff and basedpyright over jarp/) before the tests, through the commands the README gives.
    ci = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    noxfile = (ROOT / "noxfile.py").read_text()
    assert "python3 -m nox -s lint tests" in ci
    assert "python3 -m nox -s tests" in readme
    assert "python3 -m nox -s lint" in readme
    lint = noxfile[noxfile.index("def lint(") :].split("\n@nox.session")[0]
    assert 'session.run("basedpyright"' in lint
    assert 'session.run("ruff", "check"' in lint
    assert '"jarp"' in (ROOT / "pyproject.toml").read_text().split("[tool.basedpyright]")[1].split("\n[")[0]


def test_the_version_is_the_same_everywhere() -> None:
    # pyproject's version (the wheel's), jarp.__version__ and the latest release in the changelog
    import re

    import jarp

    pyproject = re.search(r'^version = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    released = re.findall(r"^## \[(\d[^\]]*)\]", (ROOT / "CHANGELOG.md").read_text(), re.MULTILINE)
    assert pyproject is not None
    assert released, "the changelog names no release"
    assert pyproject[1] == jarp.__version__ == released[0]
