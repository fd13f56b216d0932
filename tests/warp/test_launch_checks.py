"""Launches longer than an array the kernel indexes at every thread's own index are refused before they run.

Unit: `jarp/warp/_plan/_analysis.py` (`tid_indexed`: which arrays, and struct array fields, a kernel indexes with
``wp.tid()`` on every thread) and `jarp/warp/_plan/_launch_checks.py` (`check_tid_indexed`). Without the check such
a launch reads and writes past the array: a wrong energy, or a crash. The end-to-end cases run in a subprocess, so
a regression fails the test instead of taking the run down.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jarp.warp import jax_kernel
from jarp.warp._plan._analysis import tid_indexed

from .support import kernels_bounds as kb

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)

ROOT = Path(__file__).resolve().parents[2]


def _source(body: str) -> str:
    return "def k(a, b, s, out):\n" + textwrap.indent(textwrap.dedent(body), "    ")


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ("i = wp.tid()\nout[i] = a[i] + b[0]\n", (("out", 0, 0), ("a", 0, 0))),
        ("tid = wp.tid()\nc = s.cells[tid]\nout[c[0]] += s.mu[tid]\n", (("s.cells", 0, 0), ("s.mu", 0, 0))),
        ("i, j = wp.tid()\nout[j] = a[i, j]\n", (("out", 0, 1), ("a", 0, 0), ("a", 1, 1))),
        ("i = wp.tid()\nif i < 3:\n    out[i] = a[i]\n", ()),  # guarded: a thread may skip the access
        ("i = wp.tid()\nif i >= 3:\n    return\nout[i] = a[i]\n", ()),  # an early return
        ("i = wp.tid()\nout[i] = a[i] if i < 3 else 0.0\n", ()),
        ("i = wp.tid()\ni = i + 1\nout[i] = a[i]\n", ()),  # reassigned
        ("i = wp.tid()\nout[i + 1] = a[0]\n", ()),  # not the thread index itself
        ("out[0] = a[0]\n", ()),  # no thread index
    ],
)
def test_tid_indexed_finds_unguarded_accesses_only(body: str, expected: tuple) -> None:
    assert tid_indexed(_source(body), ("a", "b", "s", "out")) == expected


def test_the_kernels_of_this_file_are_read() -> None:
    from jarp.warp._upstream import _warp_internals

    source = _warp_internals.kernel_source(kb.edge_energy)
    roots = ("points", "region", "materials", "energy")
    assert tid_indexed(source, roots) == (("region.cells", 0, 0), ("region.rest", 0, 0), ("materials.mu", 0, 0))
    assert tid_indexed(_warp_internals.kernel_source(kb.guarded_copy), ("x", "y")) == ()


def _lower(m: Any, *args: Any) -> Any:
    """Trace and lower a call of ``m`` (where jarp builds its plan and checks the launch) without running it."""
    return jax.jit(lambda *a: m(*a)).lower(*args)


def _mesh(n_points: int, n_cells: int, n_mu: int) -> tuple:
    cells = np.stack([np.arange(n_cells), np.arange(1, n_cells + 1) % n_points], axis=1).astype(np.int32)
    region = {"cells": jnp.asarray(cells), "rest": jnp.full(n_cells, 0.5, jnp.float32)}
    materials = {"mu": jnp.full(n_mu, 2.0, jnp.float32)}
    points = jnp.linspace(0.0, 1.0, n_points, dtype=jnp.float32) ** 2
    return points, region, materials, cells


def test_a_kernel_over_cells_launched_over_the_points_is_refused() -> None:
    points, region, materials, _ = _mesh(n_points=12, n_cells=5, n_mu=5)
    m = jax_kernel(kb.edge_energy, output_dims=1)  # no launch_dims: the launch follows `points`
    # Lowered, not run: were the check gone, running it here would read out of bounds in the test process.
    with pytest.raises(ValueError, match=r"indexes region\.cells with wp\.tid\(\).*has 5 elements.*runs 12 threads"):
        _lower(m, points, region, materials)
    with pytest.raises(ValueError, match=r"pass launch_dims="):
        _lower(m, points, region, materials)


def test_a_struct_array_field_shorter_than_the_launch_is_refused() -> None:
    points, region, materials, _ = _mesh(n_points=12, n_cells=5, n_mu=3)
    m = jax_kernel(kb.edge_energy, launch_dims=5, output_dims=1)
    with pytest.raises(ValueError, match=r"indexes materials\.mu with wp\.tid\(\).*has 3 elements.*runs 5 threads"):
        _lower(m, points, region, materials)


def test_the_right_launch_runs_and_matches_numpy() -> None:
    points, region, materials, cells = _mesh(n_points=12, n_cells=5, n_mu=5)
    (energy,) = jax_kernel(kb.edge_energy, launch_dims=5, output_dims=1)(points, region, materials)
    p = np.asarray(points, np.float64)
    d = p[cells[:, 1]] - p[cells[:, 0]] - 0.5
    np.testing.assert_allclose(energy, [np.sum(0.5 * 2.0 * d * d)], rtol=1e-5)


def test_guarded_and_two_dim_launches_are_left_alone() -> None:
    x = jnp.arange(4.0, dtype=jnp.float32)
    (y,) = jax_kernel(kb.guarded_copy, launch_dims=8, output_dims=4)(x, 4)  # `if i < n` guards the access
    np.testing.assert_allclose(y, x)
    a = jnp.ones((3, 2), jnp.float32)
    (s,) = jax_kernel(kb.grid_sum, output_dims=1)(a)
    np.testing.assert_allclose(s, [6.0])
    with pytest.raises(ValueError, match=r"indexes a with wp\.tid\(\).*dim 1 of a by thread index 1"):
        _lower(jax_kernel(kb.grid_sum, launch_dims=(3, 4), output_dims=1), a)


_SCRIPT = """
import jax.numpy as jnp, numpy as np
from jarp.warp import jax_kernel
from tests.warp.support import kernels_bounds as kb
from tests.warp.test_launch_checks import _mesh
for n_points, n_cells, n_mu, launch in ((400, 5, 5, None), (6, 5, 2, 5)):
    points, region, materials, _ = _mesh(n_points, n_cells, n_mu)
    m = jax_kernel(kb.edge_energy, launch_dims=launch, output_dims=1)
    try:
        print("ran", np.asarray(m(points, region, materials)[0]))
    except ValueError as e:
        print("refused:", str(e).split(";")[0])
"""


def test_out_of_bounds_launches_end_as_errors_in_a_fresh_process() -> None:
    # Many more points than cells: unchecked, the threads past the cells read far out of bounds (it crashed).
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run(
        [sys.executable, "-c", _SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line for line in run.stdout.splitlines() if line.startswith(("ran", "refused"))]
    assert len(lines) == 2, run.stdout
    assert lines[0].startswith("refused:"), lines
    assert "region.cells" in lines[0], lines
    assert lines[1].startswith("refused:"), lines
    assert "materials.mu" in lines[1], lines


# -- review: guards through locals ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        "i = wp.tid()\ninside = i < 3\nif inside:\n    out[i] = a[i]\n",
        "i = wp.tid()\nj = i * 2\nif j < 6:\n    out[i] = a[i]\n",
        "i = wp.tid()\nj: int = i\nwhile j < 3:\n    out[i] = a[i]\n    j += 1\n",
        "i = wp.tid()\nfor k in range(3 - i):\n    out[i] = a[i]\n",
    ],
)
def test_guards_through_locals_or_loop_extents_are_guards(body: str) -> None:
    assert tid_indexed(_source(body), ("a", "b", "s", "out")) == ()


def test_a_store_into_an_array_taints_nothing() -> None:
    body = "i = wp.tid()\nout[i] += a[i]\nif out[0] > 0.0:\n    b[0] = 1.0\n"
    assert tid_indexed(_source(body), ("a", "b", "s", "out")) == (("out", 0, 0), ("a", 0, 0))


def test_a_kernel_guarded_through_a_local_runs() -> None:
    from .support import kernels_review as kr

    x = jnp.arange(4.0, dtype=jnp.float32)
    (y,) = jax_kernel(kr.alias_guarded_copy, launch_dims=8, output_dims=4)(x, 4)  # was refused
    np.testing.assert_allclose(y, x)


_BOUNDS_SCRIPT = """
import sys
import jax, jax.numpy as jnp, numpy as np
import warp as wp
from jarp.warp import jax_kernel
from tests.warp.support import kernels_bounds as kb
if sys.argv[1] == "config":
    wp.config.mode = "debug"  # Warp's own switch: every kernel built with its bounds checks
    m = jax_kernel(kb.gather, enable_backward=True)
else:
    m = jax_kernel(kb.gather, bounds_check=True, enable_backward=True)
x = jnp.arange(4.0, dtype=jnp.float32)
good, bad = jnp.asarray([3, 0, 1, 2], jnp.int32), jnp.asarray([3, 0, 9, 2], jnp.int32)
print("good", np.asarray(m(x, good)[0]).tolist())
for name, call in (("eager", lambda: m(x, bad)[0]), ("jit", lambda: jax.jit(lambda i: m(x, i)[0])(bad)),
                   ("grad", lambda: jax.grad(lambda x: jnp.sum(m(x, bad)[0]))(x))):
    try:
        np.asarray(call())
        print(name, "ran")
    except Exception as e:
        print(name, "error:", type(e).__name__, "gather" in str(e), "out of bounds" in str(e))
print("after", np.asarray(jax.grad(lambda x: jnp.sum(m(x, good)[0]))(x)).tolist())
"""


@pytest.mark.parametrize("how", ["option", "config"])
def test_bounds_checked_launches_turn_an_out_of_bounds_index_into_an_error(how: str) -> None:
    # A data-dependent index past the array: Warp's debug build checks it; on the CPU a failed check would abort
    # the process, and jarp's guard makes it an error naming the kernel. In a fresh process: were the guard gone,
    # the run would end there.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    run = subprocess.run(
        [sys.executable, "-c", _BOUNDS_SCRIPT, how],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = dict(line.split(" ", 1) for line in run.stdout.splitlines() if line.split(" ", 1)[0] in _EXPECTED)
    assert lines == _EXPECTED, run.stdout + run.stderr[-2000:]
    assert "Assertion failed" in run.stderr  # Warp's own report of the check, with its line


_EXPECTED = {
    "good": "[6.0, 0.0, 2.0, 4.0]",
    "eager": "error: RuntimeError True True",
    "jit": "error: JaxRuntimeError True True",
    "grad": "error: RuntimeError True True",  # eager: the original exception, re-raised as it was
    "after": "[2.0, 2.0, 2.0, 2.0]",
}


def test_bounds_check_is_an_option_of_the_module() -> None:
    assert jax_kernel(kb.gather, bounds_check=True) != jax_kernel(kb.gather)
    (y,) = jax_kernel(kb.gather, bounds_check=True)(jnp.arange(4.0, dtype=jnp.float32), jnp.asarray([1, 1, 0, 3]))
    np.testing.assert_allclose(y, [2.0, 2.0, 0.0, 6.0])
