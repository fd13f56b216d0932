"""The runs of one marker (``nox -s tests``: ``-m x64``, ``-m launch_paths``) import only the files naming it.

``tests/conftest.py`` leaves out of such a run every test file that does not spell the marker; these tests check
that no marked test lives in a file left out, and that the filter leaves out the others.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import MARKER_RUNS, UNNAMED_MARKERS, names_marker, pytest_ignore_collect

HERE = Path(__file__)
TESTS = HERE.parent


def test_every_marked_test_is_in_a_file_naming_its_marker(request: pytest.FixtureRequest) -> None:
    # what this process collected, before the tests of the other precision were left out
    assert request.config.stash[UNNAMED_MARKERS] == []


@pytest.mark.parametrize("marker", MARKER_RUNS)
def test_a_run_of_one_marker_imports_only_the_files_naming_it(
    marker: str, pytestconfig: pytest.Config, monkeypatch: pytest.MonkeyPatch
) -> None:
    files = sorted(TESTS.rglob("test_*.py"))
    named = [f for f in files if names_marker(f, marker)]
    assert 0 < len(named) < len(files)
    # other runs (this one included: the marker runs leave this file out), and directories, are left to pytest
    assert pytest_ignore_collect(HERE, pytestconfig) is None
    monkeypatch.setattr(pytestconfig.option, "markexpr", marker)  # as `-m <marker>` sets it
    ignored = {f for f in files if pytest_ignore_collect(f, pytestconfig)}
    assert ignored == set(files) - set(named)
    assert HERE in ignored
    assert pytest_ignore_collect(TESTS / "warp", pytestconfig) is None
