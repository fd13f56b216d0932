"""The lock table: every lock jarp takes is made in one place (`_upstream._locks`), and threads take them in its order.

The order is checked where it matters, in a process running jarp's commonest paths (kernels jitted, eager, vmapped
and differentiated; callables whose function launches a kernel; geometry calls; clearing caches, switching checking
mode, CPU threads and Warp's bridge) on six threads at once, with every lock checking its place
(``JARP_LOCK_ORDER=check``; `nox -s tests` runs its float64 and bridge tests so, `nox -s tests_full` the whole float32 suite too). The checker must be able to fail:
a lock taken out of order raises, naming both.
"""

from __future__ import annotations

import ast
import sys
import threading
from pathlib import Path

import pytest

import jarp.warp
from jarp.warp._upstream import _locks
from tests.support import forked
from tests.support.paths import REPO, child_environment

PACKAGE = Path(jarp.warp.__file__).parent.parent


def _lock_constructions(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in ("Lock", "RLock", "Condition", "Semaphore", "BoundedSemaphore")
        ):
            found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}: {node.func.attr}()")
    return found


def test_every_lock_is_made_by_the_table() -> None:
    made = [f for p in sorted(PACKAGE.rglob("*.py")) if p.name != "_locks.py" for f in _lock_constructions(p)]
    assert made == [], "make locks with jarp.warp._upstream._locks.make(<entry>), adding the entry to ORDER"
    table = PACKAGE / "warp" / "_upstream" / "_locks.py"
    assert _lock_constructions(table), "the checker sees no lock construction"


def test_every_entry_is_made_somewhere() -> None:
    source = "\n".join(p.read_text() for p in PACKAGE.rglob("*.py"))
    unused = [e.name for e in _locks.ORDER if f'_locks.make("{e.name}")' not in source]
    assert unused == []
    assert len({e.name for e in _locks.ORDER}) == len(_locks.ORDER)


def test_a_lock_taken_out_of_order_raises() -> None:
    outer, inner = _locks._CheckedLock("executors", True), _locks._CheckedLock("warp", True)
    with outer, inner:  # in order
        assert _locks.held() == ["executors", "warp"]
        with outer:  # re-entry of a held lock is fine
            pass
    with inner, pytest.raises(_locks.LockOrderError, match="'executors' taken while holding 'warp'"), outer:
        pass
    assert _locks.held() == []
    with inner:  # trying an earlier lock without waiting cannot deadlock (`release_unloads` does)
        assert outer.acquire(blocking=False)
        outer.release()
    first, second = _locks._CheckedLock("registry", True), _locks._CheckedLock("registry", True)
    with first, pytest.raises(_locks.LockOrderError), second:  # two objects' locks of one entry
        pass


def test_in_order_acquisitions_under_contention_finish() -> None:
    locks = [_locks._CheckedLock(e.name, e.reentrant) for e in _locks.ORDER]
    errors: list[BaseException] = []

    def worker(seed: int) -> None:
        try:
            for k in range(300):
                chosen = [lk for n, lk in enumerate(locks) if (seed * 7 + k * 13 + n) % 3 == 0]
                for lk in chosen:
                    lk.acquire()
                for lk in reversed(chosen):
                    lk.release()
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []


def test_jarps_paths_keep_the_order_on_many_threads() -> None:
    # this checkout's jarp in the child (PYTHONPATH), whichever one the environment installed
    env = {**child_environment(), "JARP_LOCK_ORDER": "check", "JAX_ENABLE_X64": "0"}
    script = REPO / "tests" / "support" / "lock_stress_script.py"
    proc = forked.run([sys.executable, str(script), "3"], env=env, timeout=600)
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert "LOCKS OK" in proc.stdout
    # a callable's function runs under the callables', executors' and Warp's locks at its first run
    assert "'callables'" in proc.stdout
