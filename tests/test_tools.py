"""The tools run: tools/check_exit.py counts clean exits, failures and hangs of a script, in subprocesses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _check_exit(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(ROOT / "tools" / "check_exit.py"), *args, "--devices", "0", "--parallel", "2"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_check_exit_counts_clean_exits_failures_and_hangs(tmp_path: Path) -> None:
    ok, fails, hangs = tmp_path / "ok.py", tmp_path / "fails.py", tmp_path / "hangs.py"
    # check_exit puts this checkout first on PYTHONPATH (scripts import tests.support; an installed jarp may differ)
    ok.write_text(f"import os\nassert os.environ['PYTHONPATH'].split(os.pathsep)[0] == {str(ROOT)!r}\n")
    fails.write_text("raise SystemExit(3)\n")
    hangs.write_text("import time\ntime.sleep(600)\n")

    proc = _check_exit(str(ok), "--runs", "3")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 exited 0, 0 failed, 0 hung []" in proc.stdout

    proc = _check_exit(str(fails), "--runs", "2")
    assert proc.returncode == 1
    assert "0 exited 0, 2 failed, 0 hung []" in proc.stdout

    proc = _check_exit(str(hangs), "--runs", "1", "--timeout", "2")
    assert proc.returncode == 1
    assert "0 exited 0, 0 failed, 1 hung [0]" in proc.stdout


def test_check_exit_runs_a_module_of_this_checkout() -> None:
    proc = _check_exit("tests.support.examples", "--runs", "1")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 exited 0, 0 failed, 0 hung []" in proc.stdout
