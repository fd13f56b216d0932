"""The runnable examples work end to end: examples/ on a tiny problem, and the code blocks of the README and docs.

Each runs in a process of its own (forked: `tests.support.forked`), so its JAX settings stay its own (the suite's
conftest makes promotion strict), and Warp can read the kernels' source from a real file.
"""

import os
import re
import sys
from pathlib import Path

import pytest

from tests.support import forked

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
# Pages whose ```python blocks form one runnable script each (docs/tree.md is checked by tests/tree/test_docs.py).
PAGES = [
    "README.md",
    "docs/index.md",
    "docs/getting-started.md",
    "docs/contract.md",
    "docs/physics.md",
    "docs/geometry.md",
    "docs/hyperelastic.md",
]
FENCE = re.compile(r"```python\n(.*?)```", re.DOTALL)


def run_python(*args: str) -> str:
    proc = forked.run([sys.executable, *args], timeout=600, env={**os.environ, "JAX_ENABLE_X64": "0"})
    assert proc.returncode == 0, f"{args} exited with {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.mark.example
def test_spring_layer_trains_and_round_trips() -> None:
    out = run_python(str(EXAMPLES / "spring_layer.py"), "--n", "6", "--frames", "3", "--steps", "40")
    assert "vmapped Warp layer vs pure-JAX reference" in out
    match = re.search(r"loss: initial (\S+) -> final (\S+)", out)
    assert match is not None, out
    initial, final = float(match.group(1)), float(match.group(2))
    assert final < 0.1 * initial, out
    assert "round-tripped" in out


@pytest.mark.example
def test_multi_device_example() -> None:
    # its own process: the device count is fixed when JAX starts
    out = run_python(str(EXAMPLES / "multi_device.py"))
    assert "4 devices, shard_map" in out
    assert "sharded jit and pmap agree" in out


@pytest.mark.example
@pytest.mark.parametrize("page", PAGES)
def test_page_code_blocks_run(page: str, tmp_path: Path) -> None:
    blocks = FENCE.findall((ROOT / page).read_text())
    assert blocks, f"{page} has no python code block"
    script = tmp_path / "page.py"
    script.write_text("\n".join(blocks) + "\nprint('PAGE OK')\n")
    assert "PAGE OK" in run_python(str(script))


@pytest.mark.example
def test_mesh_fit_differentiates_through_a_ray_query(tmp_path: Path) -> None:
    out = run_python(
        str(EXAMPLES / "mesh_fit.py"), "--grid", "6", "--rays", "120", "--steps", "60", "--out", str(tmp_path)
    )
    match = re.search(r"loss: initial (\S+) -> final (\S+)", out)
    assert match is not None, out
    initial, final = float(match.group(1)), float(match.group(2))
    assert final < 1e-2 * initial, out
    assert (tmp_path / "mesh_fit.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.example
def test_cloth_contact_fits_the_obstacle_through_closest_point_queries(tmp_path: Path) -> None:
    out = run_python(str(EXAMPLES / "cloth_contact.py"), "--quick", "--out", str(tmp_path))
    # the kernel's written contact gradient against jax.grad of its energy (Warp's adjoint through q.u, q.v)
    match = re.search(r"contact gradient vs jax\.grad of the contact energy: max relative (\S+)", out)
    assert match is not None, out
    assert float(match.group(1)) < 1e-4, out
    # d loss / d bump through every settling step (the vertices' share through the query's barycentrics included)
    # against a central difference of the loss
    match = re.search(r"obstacle gradient vs central difference: max relative (\S+)", out)
    assert match is not None, out
    assert float(match.group(1)) < 1e-2, out
    match = re.search(r"loss: initial (\S+) -> final (\S+)", out)
    assert match is not None, out
    initial, final = float(match.group(1)), float(match.group(2))
    assert final < 2e-2 * initial, out
    assert (tmp_path / "cloth_contact.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
