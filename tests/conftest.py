"""Strict JAX settings and the float32/float64 split for the whole suite.

The suite runs in two processes: the default one (float32, ``jax_enable_x64``
off) and one with ``JAX_ENABLE_X64=1`` that runs only the tests marked
``x64``. Precision is a process-wide JAX flag, so mixing both in one process
would let one test's precision leak into another's traces.

Tests marked ``slow`` (the whole verdict sweep over Warp's kernels) run only when ``-m`` names them
(``pytest -m slow``); ``nox -s tests_full`` runs them in a run of their own, after the others.

Hypothesis searches at random locally (its ``default`` profile) and replays the failures it found from its
database (``.hypothesis/``). CI runs the ``ci`` profile: derandomised (the examples follow from each test's
code, so a run is repeatable and a failure in CI fails again on any machine), with no deadline (a first call
compiles). The profile is picked by ``JARP_HYPOTHESIS_PROFILE`` (``nox -s tests`` sets ``ci`` unless it is set
already), else ``ci`` when ``CI`` is set (to anything but empty, ``0`` or ``false``), else ``default``.
"""

from __future__ import annotations

import functools
import gc
import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import jax
import pytest
from hypothesis import settings

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_debug_key_reuse", True)

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)


def hypothesis_profile(env: Mapping[str, str] = os.environ) -> str:
    """The hypothesis profile for this run: ``JARP_HYPOTHESIS_PROFILE``, else ``ci`` under CI, else ``default``."""
    chosen = env.get("JARP_HYPOTHESIS_PROFILE")
    if chosen:
        return chosen
    return "ci" if env.get("CI", "").strip().lower() not in ("", "0", "false") else "default"


settings.load_profile(hypothesis_profile())

# The hostile-input tests' checks live in a support module: rewrite its asserts as pytest rewrites the tests' own.
pytest.register_assert_rewrite("tests.support.hostile")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "x64: runs only in the JAX_ENABLE_X64=1 process (float64 tests)")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU visible to Warp and JAX; skipped elsewhere")
    config.addinivalue_line(
        "markers", "launch_paths: runs again with JARP_LAUNCH=python (the Python launch path) in `nox -s tests_full`"
    )
    config.addinivalue_line(
        "markers",
        "native_launches: tests of the native handler and split CPU launches; run with checking mode off (checking "
        "mode launches every call on the Python path, on one thread, so there is nothing of theirs to test)",
    )
    config.addinivalue_line(
        "markers", "slow: runs only when -m names it (`-m slow`); `nox -s tests_full` runs them in a run of their own"
    )


#: The markers nox runs on their own (``-m x64``, ``-m launch_paths``). Such a run imports only the test
#: files that spell the marker (``mark.x64``): importing the whole suite on each worker took about 10 s a run, and
#: every marked test of the suite is in such a file (`unnamed_markers`, checked by tests/test_marker_runs.py).
MARKER_RUNS = ("x64", "launch_paths")
UNNAMED_MARKERS = pytest.StashKey[list[str]]()


@functools.cache  # asked once per marked test of a file
def names_marker(path: Path, marker: str) -> bool:
    """Whether the test file at ``path`` spells ``marker`` as a mark (``mark.<marker>``)."""
    return f"mark.{marker}" in path.read_text(encoding="utf-8")


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    marker = (config.getoption("markexpr") or "").strip()
    is_test_file = collection_path.suffix == ".py" and collection_path.name.startswith("test_")
    if marker in MARKER_RUNS and is_test_file and not names_marker(collection_path, marker):
        return True
    return None  # pytest's own rules decide


def unnamed_markers(items: list[pytest.Item]) -> list[str]:
    """The tests carrying a marker of `MARKER_RUNS` whose file does not spell it (a run of that marker would miss them)."""
    return [
        f"{item.nodeid} ({marker})"
        for item in items
        for marker in MARKER_RUNS
        if item.get_closest_marker(marker) is not None and not names_marker(item.path, marker)
    ]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    config.stash[UNNAMED_MARKERS] = unnamed_markers(items)  # before the other precision's tests are left out
    x64 = bool(jax.config.jax_enable_x64)
    slow = "slow" in (config.getoption("markexpr") or "")  # else the slow tests are left out
    selected, deselected = [], []
    for item in items:
        keep = (item.get_closest_marker("x64") is not None) == x64
        keep = keep and (slow or item.get_closest_marker("slow") is None)
        (selected if keep else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected


def pytest_collection_finish(session: pytest.Session) -> None:
    # What collection imported (JAX, Warp, the test modules and their kernels) lives until the run ends: out of the
    # collector's sight, a full collection (Python's own, and the lifetime tests' gc.collect()) walks only what the
    # tests made since. About a fifth of the time of a file run after others here; nothing made by a test is frozen.
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _native_launches_unchecked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Checking mode off for a `native_launches` test (and the processes it starts); the mode as it was after."""
    if request.node.get_closest_marker("native_launches") is None:
        yield
        return
    import jarp.warp

    previous = jarp.warp.checking_mode()
    monkeypatch.delenv("JARP_CHECKING", raising=False)
    jarp.warp.set_checking_mode(False)
    try:
        yield
    finally:
        jarp.warp.set_checking_mode(previous)
