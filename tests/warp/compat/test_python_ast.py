"""jarp's one entry to Python's parser survives CPython 3.11's shared AST-constructor counter under threads."""

from __future__ import annotations

import ast
import re
import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import warp as wp

import jarp.warp
from jarp.warp._plan._analysis import _syntax
from jarp.warp._upstream import _python_ast

# Long enough that building its syntax tree gives other threads many chances to run in between.
_SOURCE = "def f(x):\n" + "".join(f"    y{i} = (x + {i}) * [a for a in range({i})]\n" for i in range(200))


def _scale(a: wp.array(dtype=float), out: wp.array(dtype=float)):  # ty: ignore
    i = wp.tid()
    out[i] = 2.0 * a[i]


def _run_threads(jobs: list[Callable[[], None]]) -> None:
    threads = [threading.Thread(target=job) for job in jobs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def test_every_parse_in_jarp_goes_through_the_entry():
    package = Path(jarp.warp.__file__).parent
    offenders = [
        f"{path.relative_to(package)}:{n}"
        for path in package.rglob("*.py")
        if path.name != "_python_ast.py"
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bast\.parse\(", line)
    ]
    assert offenders == [], f"parse through jarp.warp._upstream._python_ast.parse instead: {offenders}"


def test_parses_from_many_threads_while_warp_defines_kernels():
    """jarp's analyses parse in four threads while two others define Warp kernels (Warp parses each source, outside
    jarp's lock) and two parse with ``ast.parse`` directly: jarp's parses never fail."""
    failures: list[BaseException] = []
    outside_errors = [0]

    def jarp_parses() -> None:
        for _ in range(30):
            try:
                assert _syntax.parse_function(_SOURCE) is not None
            except BaseException as e:
                failures.append(e)

    def outside_parses() -> None:
        for _ in range(30):
            try:
                ast.parse(_SOURCE)
            except SystemError:
                outside_errors[0] += 1

    def define_kernels() -> None:
        for n in range(15):
            wp.Kernel(_scale, key=f"_scale_{threading.get_ident()}_{n}", module=wp.get_module(f"{__name__}_threads"))

    _run_threads([jarp_parses] * 4 + [outside_parses] * 2 + [define_kernels] * 2)
    assert failures == []


# It shows CPython's race itself (about 7 s of parsing threads): `nox -s tests_full` runs it.
@pytest.mark.slow
@pytest.mark.skipif(not _python_ast.AFFECTED, reason="only CPython < 3.12 shares the AST constructor's counter")
def test_unprotected_parses_do_fail_here():
    """The defect the entry works around is real on this interpreter: without the entry, parses fail."""
    errors = [0]

    def parses() -> None:
        for _ in range(150):
            try:
                ast.parse(_SOURCE)
            except SystemError:
                errors[0] += 1

    for _ in range(5):  # timing-dependent; five rounds of six threads have always been enough
        _run_threads([parses] * 6)
        if errors[0]:
            break
    assert errors[0] > 0


def test_spurious_error_is_retried(monkeypatch: pytest.MonkeyPatch):
    real_parse = ast.parse
    calls = [0]

    def flaky(source: str) -> ast.Module:
        calls[0] += 1
        if calls[0] < 3:
            raise SystemError("AST constructor recursion depth mismatch (before=72, after=64)")
        return real_parse(source)

    monkeypatch.setattr(_python_ast.ast, "parse", flaky)
    assert isinstance(_python_ast.parse("x = 1").body[0], ast.Assign)
    assert calls[0] == 3


def test_other_errors_are_not_retried(monkeypatch: pytest.MonkeyPatch):
    calls = [0]

    def broken(source: str) -> ast.Module:
        calls[0] += 1
        raise SystemError("something else")

    monkeypatch.setattr(_python_ast.ast, "parse", broken)
    with pytest.raises(SystemError, match="something else"):
        _python_ast.parse("x = 1")
    assert calls[0] == 1


def test_syntax_errors_are_raised():
    with pytest.raises(SyntaxError):
        _python_ast.parse("x = (")
    assert _syntax.parse_module("x = (") is None


def test_a_persistent_mismatch_is_raised(monkeypatch: pytest.MonkeyPatch):
    def always(source: str) -> ast.Module:
        raise SystemError("AST constructor recursion depth mismatch (before=1, after=0)")

    monkeypatch.setattr(_python_ast.ast, "parse", always)
    monkeypatch.setattr(_python_ast, "_RETRIES", 3)
    with pytest.raises(SystemError, match="recursion depth mismatch"):
        _python_ast.parse("x = 1")
