"""The benchmark scripts run: benchmarks/bench_fem.py on tiny meshes (``--quick``), and bench_threads.py's timing
child and machine probe on its smallest case, in subprocesses.

bench_fem.py checks every variant against the ``jax.numpy`` result before timing it, so a run that exits cleanly also
says the jarp, ``jax.numpy`` and ``wp.launch`` paths agree at both precisions.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


# A benchmark's smoke run (about 11 s): `nox -s tests_full` runs it.
@pytest.mark.slow
def test_bench_fem_quick_runs_and_reports(tmp_path: Path) -> None:
    out_json, out_png = tmp_path / "fem.json", tmp_path / "fem.png"
    script = str(ROOT / "benchmarks" / "bench_fem.py")
    proc = subprocess.run(
        [sys.executable, script, "--quick", "--json", str(out_json), "--plot", str(out_png)],
        capture_output=True,
        text=True,
        timeout=300,
        # this checkout's jarp, whatever is installed; the script turns float64 on itself
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])},
        check=False,
    )
    assert proc.returncode == 0, f"bench_fem.py --quick exited with {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    results = json.loads(out_json.read_text())["results"]
    assert [(r["dtype"], r["tets"]) for r in results] == [
        ("float32", 24),
        ("float32", 144),
        ("float64", 24),
        ("float64", 144),
    ]
    for r in results:
        assert set(r["times"]) == {f"{op} {v}" for op in ("eg", "hvp") for v in ("jarp", "jnp", "floor")}
        assert all(t > 0 for t in r["times"].values())
    assert "| float64 | 144 | Hessian-vector product |" in proc.stdout
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# Two child processes timing thread settings (about 8 s): `nox -s tests_full` runs it.
@pytest.mark.slow
def test_bench_threads_child_and_probe_run() -> None:
    """bench_threads.py's timing child (the small case, and a float64 one: the child turns float64 on before JAX is
    imported) and its machine probe."""
    code = (
        "import os, runpy, sys; m = runpy.run_path(sys.argv[1], run_name='bench_threads_test'); "
        "cores = sorted(os.sched_getaffinity(0)); "
        "r = m['run_child'](1, ('small', 'adjoint')); assert 'adjoint/all' in r and min(r.values()) > 0, r; "
        "p = m['run_probe']('small', cores[:1], 0.2); assert len(p) == 1 and p[0] > 0, p; print('ok')"
    )
    env = {k: v for k, v in os.environ.items() if k != "JAX_ENABLE_X64"}  # the script's own default (float64)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "benchmarks" / "bench_threads.py")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, f"{proc.stdout}\n{proc.stderr}"
    assert proc.stdout.strip().endswith("ok"), proc.stdout
