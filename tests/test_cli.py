"""``python -m jarp``: the environment report for bug reports, run in a fresh process (forked: `tests.support.forked`)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import forked
from tests.support.paths import child_environment

ROOT = Path(__file__).resolve().parents[1]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = child_environment()
    env.pop("JAX_ENABLE_X64", None)
    proc = forked.run([sys.executable, "-m", "jarp", *args], cwd=ROOT, env=env, timeout=300)
    assert proc.returncode == 0, f"exit code {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr[-4000:]}"
    return proc


def test_text_report_in_a_fresh_process() -> None:
    import jax
    import warp as wp

    import jarp

    out = _run().stdout
    assert out.startswith("jarp environment report")
    lines = out.splitlines()
    for name, version in (
        ("python", sys.version.split()[0]),
        ("jarp", jarp.__version__),
        ("jax", jax.__version__),
        ("warp", wp.config.version),
    ):
        line = next((ln for ln in lines if ln.startswith(f"  {name} ")), "")
        assert version in line, f"no {name} {version} line in:\n{out}"
    for heading in ("  jaxlib ", "  equinox ", "  numpy ", "JAX:", "  devices ", "Warp:", "  cuda_available "):
        assert heading in out, f"{heading!r} missing from:\n{out}"
    wp.init()
    assert f"  kernel_cache_dir                   {wp.config.kernel_cache_dir}" in lines
    # a fresh process: importing jarp.warp registered the FFI targets (before the report asked), nothing was lowered
    targets = "jarp_warp_call, jarp_warp_call_no_graph on cpu, CUDA"
    assert f"  FFI targets                        {targets}: registered" in lines
    assert "  launch plans in this process       0" in lines
    assert f"Warp {wp.config.version} initialized" not in out, "Warp's start-up banner should not be printed"


def test_json_report(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import warp as wp

    from jarp.__main__ import main

    monkeypatch.setattr(wp.config, "log_level", wp.config.log_level)  # main() quietens Warp; undo it afterwards
    assert main(["--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert set(report) == {"versions", "platform", "jax", "warp", "jarp"}
    versions = report["versions"]
    for name in ("python", "jarp", "jax", "jaxlib", "equinox", "warp", "numpy"):
        assert versions[name], versions
        assert "error" not in versions[name], versions
        assert versions[name] != "not installed", versions
    assert report["jax"]["devices"], report["jax"]
    assert "cpu" in " ".join(report["warp"]["devices"])
    assert report["warp"]["cuda_available"] is wp.is_cuda_available()
    assert report["warp"]["kernel_cache_dir"] == str(wp.config.kernel_cache_dir)
    jarp_info = report["jarp"]
    assert jarp_info["ffi_registered"] is True
    assert jarp_info["ffi_targets"] == ["jarp_warp_call", "jarp_warp_call_no_graph"]
    assert isinstance(jarp_info["plans"], int)


def test_report_survives_failing_probes(monkeypatch: pytest.MonkeyPatch) -> None:
    from jarp import _env
    from jarp.warp._ffi import _target

    def broken() -> None:
        raise OSError("no XLA for you")

    monkeypatch.setattr(_target, "ensure_registered", broken)
    monkeypatch.setattr(_target, "is_registered", lambda: False)
    monkeypatch.setattr(_env, "_jax", broken)
    env = _env.environment()
    assert env["jax"] == "error: OSError: no XLA for you"
    assert env["jarp"]["ffi_registered"] == "error: OSError: no XLA for you"
    text = _env.format_environment(env)
    assert "JAX: error: OSError: no XLA for you" in text
    assert "NOT registered (error: OSError: no XLA for you)" in text


def test_help_exits_cleanly(capsys: pytest.CaptureFixture[str]) -> None:
    from jarp.__main__ import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "bug report" in capsys.readouterr().out
