"""Launches longer than an array the kernel indexes at every thread's own index are refused before they run;
inferred launches shorter than one warn.

Unit: `jarp/warp/_plan/_analysis/_tid_access.py` (`tid_indexed`: which arrays, and struct array fields, a kernel indexes with
``wp.tid()`` on every thread) and `jarp/warp/_plan/_launch_checks.py` (`check_tid_indexed`,
`warn_short_inferred_launch`). Without the check such a launch reads and writes past the array: a wrong energy, or a
crash. The end-to-end cases run in a subprocess, so a regression fails the test instead of taking the run down.
A launch that follows the first array argument (no ``launch_dims``) and is shorter than another array the kernel
indexes with ``wp.tid()`` leaves that array's tail untouched: a `jarp.warp.LaunchDimsWarning`, once per plan.
"""

from __future__ import annotations

import contextlib
import sys
import textwrap
import warnings
from collections.abc import Iterator
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import LaunchDimsWarning, jax_kernel
from jarp.warp._ffi._registry import registry
from jarp.warp._plan import _launch_checks
from jarp.warp._plan._analysis import tid_indexed
from jarp.warp._plan._content import content_text, rebuild
from tests.support import forked
from tests.support import kernels as k
from tests.support import kernels_bounds as kb
from tests.support.lowered import plan_handles
from tests.support.paths import REPO, child_environment

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)


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
        # every thread stores out[i]; only the read of a[i] is in a branch a thread may skip
        ("i = wp.tid()\nout[i] = a[i] if i < 3 else 0.0\n", (("out", 0, 0),)),
        # a loop whose header reads the thread index: what comes before it every thread reaches, its body not
        ("i = wp.tid()\nx = a[i]\nfor k in range(i):\n    out[i] = x\n", (("a", 0, 0),)),
        ("i = wp.tid()\nfor k in range(3):\n    if i < k:\n        continue\n    out[i] = a[i]\n", ()),
        ("i = wp.tid()\ni = i + 1\nout[i] = a[i]\n", ()),  # reassigned
        ("i = wp.tid()\nout[i + 1] = a[0]\n", ()),  # not the thread index itself
        ("out[0] = a[0]\n", ()),  # no thread index
        ("i, i = wp.tid()\nout[i] = a[i, i]\n", ()),  # a repeated name: which thread index it holds is unclear
    ],
)
def test_tid_indexed_finds_unguarded_accesses_only(body: str, expected: tuple) -> None:
    assert tid_indexed(_source(body), ("a", "b", "s", "out")) == expected


def test_the_kernels_of_this_file_are_read() -> None:
    from jarp.warp._upstream import _warp_kernels

    source = _warp_kernels.kernel_source(kb.edge_energy)
    roots = ("points", "region", "materials", "energy")
    assert tid_indexed(source, roots) == (("region.cells", 0, 0), ("region.rest", 0, 0), ("materials.mu", 0, 0))
    assert tid_indexed(_warp_kernels.kernel_source(kb.guarded_copy), ("x", "y")) == ()


def _lower(m: Any, *args: Any) -> Any:
    """Trace and lower a call of ``m`` (where jarp builds its plan and checks the launch) without running it."""
    return jax.jit(lambda *a: m(*a)).lower(*args)


def test_a_kernel_over_cells_launched_over_the_points_is_refused() -> None:
    points, region, materials, _ = kb.edge_mesh(n_points=12, n_cells=5, n_mu=5)
    m = jax_kernel(kb.edge_energy, output_dims=1)  # no launch_dims: the launch follows `points`
    # Lowered, not run: were the check gone, running it here would read out of bounds in the test process.
    with pytest.raises(ValueError, match=r"indexes region\.cells with wp\.tid\(\).*has 5 elements.*runs 12 threads"):
        _lower(m, points, region, materials)
    with pytest.raises(ValueError, match=r"pass launch_dims="):
        _lower(m, points, region, materials)


def test_a_struct_array_field_shorter_than_the_launch_is_refused() -> None:
    points, region, materials, _ = kb.edge_mesh(n_points=12, n_cells=5, n_mu=3)
    m = jax_kernel(kb.edge_energy, launch_dims=5, output_dims=1)
    with pytest.raises(ValueError, match=r"indexes materials\.mu with wp\.tid\(\).*has 3 elements.*runs 5 threads"):
        _lower(m, points, region, materials)


def test_the_right_launch_runs_and_matches_numpy() -> None:
    points, region, materials, cells = kb.edge_mesh(n_points=12, n_cells=5, n_mu=5)
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
from tests.support import kernels_bounds as kb
from tests.support.kernels_bounds import edge_mesh
for n_points, n_cells, n_mu, launch in ((400, 5, 5, None), (6, 5, 2, 5)):
    points, region, materials, _ = edge_mesh(n_points, n_cells, n_mu)
    m = jax_kernel(kb.edge_energy, launch_dims=launch, output_dims=1)
    try:
        print("ran", np.asarray(m(points, region, materials)[0]))
    except ValueError as e:
        print("refused:", str(e).split(";")[0])
"""


def test_out_of_bounds_launches_end_as_errors_in_a_fresh_process() -> None:
    # Many more points than cells: unchecked, the threads past the cells read far out of bounds (it crashed).
    env = child_environment()
    run = forked.run([sys.executable, "-c", _SCRIPT], cwd=REPO, env=env, timeout=240)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = [line for line in run.stdout.splitlines() if line.startswith(("ran", "refused"))]
    assert len(lines) == 2, run.stdout
    assert lines[0].startswith("refused:"), lines
    assert "region.cells" in lines[0], lines
    assert lines[1].startswith("refused:"), lines
    assert "materials.mu" in lines[1], lines


# -- guards through locals ---------------------------------------------------------------------------------------------


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
    from tests.support import kernels_corner_cases as kr

    x = jnp.arange(4.0, dtype=jnp.float32)
    (y,) = jax_kernel(kr.alias_guarded_copy, launch_dims=8, output_dims=4)(x, 4)  # was refused
    np.testing.assert_allclose(y, x)


_BOUNDS_SCRIPT = """
import sys
import jax, jax.numpy as jnp, numpy as np
import warp as wp
from jarp.warp import jax_kernel
from tests.support import kernels_bounds as kb
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
    env = child_environment()
    run = forked.run([sys.executable, "-c", _BOUNDS_SCRIPT, how], cwd=REPO, env=env, timeout=300)
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


# -- an inferred launch shorter than an array the kernel indexes: a warning ----------------------------------------
#
# Each test uses array lengths of its own: an eager call with a module and shapes seen before reuses its executable,
# and builds (and warns of) no plan.


@pytest.fixture
def fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Forget the inferred-launch warnings this process gave (each is given once)."""
    monkeypatch.setattr(_launch_checks, "_warned_launches", set())


@contextlib.contextmanager
def _launch_warnings() -> Iterator[list[warnings.WarningMessage]]:
    """The `LaunchDimsWarning`s given inside (every one, whatever the filters), once the block ends."""
    found: list[warnings.WarningMessage] = []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield found
    found.extend(w for w in caught if issubclass(w.category, LaunchDimsWarning))


def _texts(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught]


@pytest.mark.usefixtures("fresh")
def test_an_inferred_launch_shorter_than_an_indexed_array_warns() -> None:
    a, b = jnp.ones(27, jnp.float32), jnp.arange(48, dtype=jnp.float32)
    m = jax_kernel(k.add_kernel, output_dims=48)  # no launch_dims: the launch follows `a`
    with _launch_warnings() as caught:
        (out,) = m(a, b)
    (message,) = _texts(caught)
    assert caught[0].filename == __file__  # the user's call, not jarp's or JAX's frames
    assert message.startswith(f"jax_kernel({k.add_kernel.key}): no launch_dims was given")
    assert "launch dims (27,)" in message
    assert "indexes output (48 elements) and b (48 elements) with wp.tid() on every thread" in message
    assert "launch_dims=(48,); a (27 elements) is then too short: give it at least 48" in message
    assert "launch_dims=(27,) to keep this launch and silence this warning" in message
    # what it warns of: the threads stop at a's end, and the rest of the output is never written
    np.testing.assert_array_equal(out[:27], 1.0 + np.arange(27, dtype=np.float32))
    np.testing.assert_array_equal(out[27:], np.zeros(21, np.float32))


@pytest.mark.usefixtures("fresh")
def test_struct_array_fields_longer_than_an_inferred_launch_are_named() -> None:
    # The FEM mistake: a kernel over cells, launched over the points (the first array argument).
    points, region, materials, _ = kb.edge_mesh(n_points=5, n_cells=12, n_mu=12)
    with _launch_warnings() as caught:
        _lower(jax_kernel(kb.edge_energy, output_dims=1), points, region, materials)
    (message,) = _texts(caught)
    assert caught[0].filename == __file__
    assert "launch dims (5,)" in message
    assert "region.cells (12 elements) and region.rest (12 elements) and materials.mu (12 elements)" in message
    assert "e.g. launch_dims=(12,); or pass launch_dims=(5,)" in message  # points is not indexed by wp.tid()


@pytest.mark.usefixtures("fresh")
def test_a_two_dim_launch_names_the_dims_and_thread_indices() -> None:
    a, row = jnp.ones((3, 4), jnp.float32), jnp.arange(6, dtype=jnp.float32)
    with _launch_warnings() as caught:
        (out,) = jax_kernel(kb.add_row)(a, row)
    (message,) = _texts(caught)
    assert "launch dims (3, 4)" in message
    assert "indexes row (dim 0: 6 elements, by thread index 1) with wp.tid()" in message
    assert (
        "e.g. launch_dims=(3, 6); out (dim 1: 4 elements, by thread index 1) is then too short: give it at least 6; "
        "a (dim 1: 4 elements, by thread index 1) is then too short: give it at least 6; or pass "
        "launch_dims=(3, 4)"
    ) in message
    np.testing.assert_array_equal(out, 1.0 + np.broadcast_to(np.arange(4, dtype=np.float32), (3, 4)))


@pytest.mark.usefixtures("fresh")
def test_no_warning_when_launch_dims_are_given_or_nothing_is_longer() -> None:
    a, b = jnp.ones(29, jnp.float32), jnp.ones(45, jnp.float32)
    with _launch_warnings() as caught:
        jax_kernel(k.add_kernel, launch_dims=29, output_dims=45)(a, b)  # given, equal to the inferred dims
        jax_kernel(k.add_kernel, output_dims=45)(a, b, launch_dims=29)  # given per call
        jax_kernel(k.add_kernel)(a, a)  # nothing longer than the launch
        jax.vmap(jax_kernel(k.add_kernel), in_axes=(0, None))(jnp.ones((45, 29), jnp.float32), a)  # a batch of 45
        (y,) = jax_kernel(kb.guarded_copy, output_dims=45)(a, 29)  # y is longer, but guarded: `if i < n`
        (s,) = jax_kernel(kb.grid_sum, output_dims=1)(jnp.ones((3, 29), jnp.float32))  # a 2-d launch, all equal
    assert _texts(caught) == []
    np.testing.assert_array_equal(y, np.concatenate([np.ones(29, np.float32), np.zeros(16, np.float32)]))
    np.testing.assert_array_equal(s, [87.0])
    with _launch_warnings() as caught:
        jax_kernel(k.add_kernel, output_dims=45)(a, b)  # the same call without launch_dims does warn
    assert len(caught) == 1


@pytest.mark.usefixtures("fresh")
def test_the_warning_is_given_once_per_plan() -> None:
    m = jax_kernel(k.add_kernel, output_dims=40)
    a, b = jnp.ones(31, jnp.float32), jnp.ones(40, jnp.float32)
    f = jax.jit(lambda a, b: m(a, b)[0])
    with _launch_warnings() as caught:
        for _ in range(2):
            m(a, b)  # eager: one executable per module and signature, the plan built once
            f(a, b)  # jit: traced once
            jax.jit(lambda a, b: m(a, b)[0])(a, b)  # a new function: traced again, the same plan built again
            jax.vmap(m, in_axes=(0, None))(a[None], b)  # eager vmap traces at every call: the same plan again
    assert len(caught) == 1
    with _launch_warnings() as caught:
        m(jnp.ones(30, jnp.float32), b)  # another plan
        m(jnp.ones(30, jnp.float32), b)
    (message,) = _texts(caught)
    assert "launch dims (30,)" in message


@pytest.mark.usefixtures("fresh")
def test_a_warning_raised_as_an_error_is_raised_at_every_build() -> None:
    m = jax_kernel(k.add_kernel, output_dims=41)
    a, b = jnp.ones(32, jnp.float32), jnp.ones(41, jnp.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LaunchDimsWarning)
        for _ in range(2):
            with pytest.raises(LaunchDimsWarning, match=r"launch dims \(32,\)"):
                _lower(m, a, b)
    assert issubclass(LaunchDimsWarning, UserWarning)


@pytest.mark.parametrize("vmap_method", ["sequential", "broadcast_all"])
@pytest.mark.parametrize("in_axes", [(0, None), (0, 0), (None, 0)])
def test_vmap_warns_as_the_unbatched_call(
    monkeypatch: pytest.MonkeyPatch, vmap_method: str, in_axes: tuple[int | None, ...]
) -> None:
    m = partial(jax_kernel(k.add_kernel, vmap_method=vmap_method), output_dims=44)
    a, b = jnp.ones(33, jnp.float32), jnp.ones(44, jnp.float32)
    monkeypatch.setattr(_launch_checks, "_warned_launches", set())
    with _launch_warnings() as unbatched:
        _lower(m, a, b)
    assert len(unbatched) == 1
    monkeypatch.setattr(_launch_checks, "_warned_launches", set())
    args = [x if axis is None else jnp.stack([x, 2 * x, 3 * x]) for x, axis in zip((a, b), in_axes, strict=True)]
    with _launch_warnings() as batched:
        _lower(jax.vmap(m, in_axes=in_axes), *args)  # the batch dim is not part of the launch
    assert _texts(batched) == _texts(unbatched)


@pytest.mark.usefixtures("fresh")
def test_a_plan_rebuilt_from_its_description_stays_silent() -> None:
    m = jax_kernel(k.add_kernel, output_dims=50, module_preload_mode=wp.JaxModulePreloadMode.NONE)
    a, b = jnp.ones(35, jnp.float32), jnp.ones(50, jnp.float32)
    with _launch_warnings() as caught:
        (handle,) = plan_handles(jax.jit(lambda a, b: m(a, b)[0]).trace(a, b).lower().as_text())
    assert len(caught) == 1
    plan = registry.plan(handle)
    assert type(plan.launch_dims) is tuple
    assert plan.launch_dims == (35,)
    assert all(type(r.shape) is tuple for r in plan.results)
    with _launch_warnings() as caught:
        again = rebuild(content_text(plan))  # the description does not say the dims were inferred
    assert again == plan
    assert caught == []
