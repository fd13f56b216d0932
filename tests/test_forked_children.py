"""`tests.support.forked`: a child forked from the warm server sees what a fresh interpreter sees.

The suite runs its other-process tests through it, so these checks compare each observable of a forked child
with the same code run in a fresh interpreter (``JARP_TESTS_FORK=0``), and check the `subprocess`-like results:
exit codes, signals, exceptions, ``atexit`` hooks, standard streams, timeouts, children running side by side.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.support import forked
from tests.support.paths import REPO

PROBE = textwrap.dedent(
    """
    import json, os, sys
    # before anything is imported here: what the interpreter gave this code
    state = {
        "argv": sys.argv,
        "path": sys.path[:3],
        "cwd": os.getcwd(),
        "env": os.environ.get("JARP_FORK_PROBE"),
        "bytecode": sys.dont_write_bytecode,
        "jarp": any(m == "jarp" or m.startswith("jarp.") for m in sys.modules),
        "main": __name__,
        "stdin": sys.stdin.read(),
    }
    import jax
    from jax._src import xla_bridge
    state["backends"] = sorted(xla_bridge._backends)  # none initialised yet
    state["x64"] = bool(jax.config.jax_enable_x64)
    import warp as wp
    state["warp_initialised"] = wp._src.context.runtime is not None
    import jarp.warp
    from jarp.warp._ffi import _target
    state["launch"] = _target.launch_path()
    import jax.numpy as jnp
    state["sum"] = float(jnp.arange(4.0).sum())
    print(json.dumps(state))
    print("to stderr", file=sys.stderr)
    """
)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}
    return {**env, "PYTHONPATH": str(REPO), "JARP_FORK_PROBE": "seen", **extra}


def _both(args: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, **kwargs: object):
    """The same command forked and fresh: (forked result, fresh result)."""
    first = forked.run(args, timeout=120, **kwargs)  # type: ignore[arg-type]
    monkeypatch.setenv(forked.ENV, "0")
    second = forked.run(args, timeout=120, **kwargs)  # type: ignore[arg-type]
    return first, second


def test_a_forked_child_sees_what_a_fresh_interpreter_sees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    args = [sys.executable, "-c", PROBE, "one", "two"]
    env = _env(JAX_ENABLE_X64="1", PYTHONDONTWRITEBYTECODE="1")
    one, two = _both(args, tmp_path, monkeypatch, env=env, cwd=tmp_path, input="from stdin")
    assert (one.returncode, two.returncode) == (0, 0), one.stderr[-2000:] + two.stderr[-2000:]
    seen, fresh = json.loads(one.stdout), json.loads(two.stdout)
    assert seen == fresh
    assert seen["argv"] == ["-c", "one", "two"]
    assert seen["path"][:2] == ["", str(REPO)]
    assert (seen["cwd"], seen["env"], seen["stdin"]) == (str(tmp_path), "seen", "from stdin")
    assert seen["bytecode"] is True
    assert seen["x64"] is True  # JAX's settings follow the child's environment: a server per environment
    assert not seen["jarp"]
    assert seen["backends"] == []
    assert not seen["warp_initialised"]
    assert seen["sum"] == 6.0
    assert "to stderr" in one.stderr
    assert "to stderr" in two.stderr


def test_scripts_and_modules_run_as_main(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = tmp_path / "script.py"
    script.write_text("import sys\nprint(__name__, sys.argv[1:], sys.path[0])\n")
    one, two = _both([sys.executable, str(script), "a"], tmp_path, monkeypatch, env=_env())
    assert one.stdout == two.stdout == f"__main__ ['a'] {tmp_path}\n"
    module = [sys.executable, "-m", "json.tool"]
    one, two = _both(module, tmp_path, monkeypatch, env=_env(), input='{"a": 1}')
    assert one.stdout == two.stdout == '{\n    "a": 1\n}\n'


@pytest.mark.parametrize(
    ("code", "returncode", "stdout", "stderr"),
    [
        ("import sys; sys.exit(3)", 3, "", ""),
        ("import atexit; atexit.register(lambda: print('at exit')); raise ValueError('boom')", 1, "at exit\n", "boom"),
        ("import os, signal; print('before', flush=True); os.kill(os.getpid(), signal.SIGSEGV)", -11, "before\n", ""),
        (
            "import threading, time; threading.Thread(target=lambda: (time.sleep(0.3), print('joined'))).start()",
            0,
            "joined\n",
            "",
        ),
    ],
    ids=["exit code", "exception and atexit", "signal", "threads joined"],
)
def test_endings_are_those_of_a_fresh_interpreter(
    code: str, returncode: int, stdout: str, stderr: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for result in _both([sys.executable, "-c", code], tmp_path, monkeypatch, env=_env()):
        assert result.returncode == returncode, result.stderr
        assert result.stdout == stdout
        assert stderr in result.stderr


def test_a_timeout_kills_the_child() -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        forked.run([sys.executable, "-c", "import time; time.sleep(60)"], env=_env(), timeout=1)


def test_children_run_side_by_side() -> None:
    code = "import sys, time; time.sleep(1); print(sys.argv[1])"
    children = [forked.start([sys.executable, "-c", code, str(i)], env=_env()) for i in range(4)]
    assert all(isinstance(c, forked.Forked) for c in children)
    assert [c.communicate(30)[0] for c in children] == [f"{i}\n" for i in range(4)]
    assert [c.returncode for c in children] == [0] * 4


def test_a_random_hash_seed_gets_a_fresh_interpreter() -> None:
    # children of one server share its string hash seed: a test about hash-seed independence must not be forked
    child = forked.start([sys.executable, "-c", "pass"], env=_env(PYTHONHASHSEED="random"))
    assert isinstance(child, subprocess.Popen)
    child.communicate(timeout=60)
    code = "print(hash('jarp'))"
    seeds = {forked.run([sys.executable, "-c", code], env=_env(PYTHONHASHSEED="random")).stdout for _ in range(2)}
    assert len(seeds) == 2


def test_children_differing_only_in_jarps_variables_share_a_server() -> None:
    # jarp is not preloaded: it reads its variables in the child, so those need no server of their own
    code = "import os; print(os.environ.get('JARP_FORK_PROBE'))"
    before = set(forked._servers)
    outs = [forked.run([sys.executable, "-c", code], env=_env(JARP_FORK_PROBE=v), timeout=60).stdout for v in "ab"]
    assert outs == ["a\n", "b\n"]
    assert len(set(forked._servers) - before) <= 1
    fresh = forked.run(
        [sys.executable, "-c", "import jarp.warp as jw; print(jw.cpu_threads())"],
        env=_env(JARP_CPU_THREADS="3"),
        timeout=120,
    )
    assert fresh.stdout.split()[-1] == "3", fresh.stderr[-2000:]
