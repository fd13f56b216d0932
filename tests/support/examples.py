"""What the example tests share: importing an example script as a module, and running a fit end to end."""

from __future__ import annotations

import importlib.util
import os
import re
import sys
from pathlib import Path
from types import ModuleType

from . import forked
from .paths import REPO


def load_example(path: Path, name: str) -> ModuleType:
    """Import the example script ``path`` as module ``name`` (once per process)."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses (eqx.Module) look their module up while the class body runs
    spec.loader.exec_module(module)
    return module


def run_fit(
    script: Path, *args: str, out: Path, error: str, max_error: float, loss_drop: float, files: tuple[str, ...]
):
    """Run a fitting example in a fresh interpreter (forked: `tests.support.forked`) and check what it reports and writes.

    The example must reach ``final < loss_drop * initial`` ("loss: initial A -> final B"), a max relative
    ``error`` below ``max_error`` ("<error>: max relative E"), round-trip its saved model, and write ``files``
    (the last a PNG) into ``out``. It runs float32 by default (the example turns float64 on by itself) and
    imports this checkout's jarp (``PYTHONPATH``), not an installed one.
    """
    proc = forked.run(
        [sys.executable, str(script), *args, "--out", str(out)],
        timeout=600,
        env={
            **os.environ,
            "JAX_ENABLE_X64": "0",
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        },
    )
    text = proc.stdout
    assert proc.returncode == 0, f"exit {proc.returncode}\n{text}\n{proc.stderr}"
    match = re.search(r"loss: initial (\S+) -> final (\S+)", text)
    assert match is not None, text
    initial, final = float(match.group(1)), float(match.group(2))
    assert final < loss_drop * initial, text
    found = re.search(rf"{error}: max relative (\S+)", text)
    assert found is not None, text
    assert float(found.group(1)) < max_error, text
    assert "round-tripped" in text, text
    for name in files:
        assert (out / name).is_file(), name
        assert str(out / name) in text
    assert (out / files[-1]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
