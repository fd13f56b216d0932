"""Kernel source analysis: the zero-fill elision proves overwrites conservatively; writes to struct fields are found;
race freedom (may a CPU launch be split across threads) is proved for the kernel and the functions it calls, and
recorded in the plan (`Plan.race_free`, `PlanInfo.race_free`)."""

import textwrap
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_kernel
from jarp.warp._ffi._registry import registry
from jarp.warp._inspect import PlanInfo, list_plans
from jarp.warp._plan import _analysis
from jarp.warp._plan._analysis import overwritten_outputs
from jarp.warp._plan._analysis._races import race_blocker, sharing_blocker, warps_thread_index
from jarp.warp._plan._content import content_text, rebuild
from jarp.warp._plan._signature import make_signature
from jarp.warp._upstream import _warp_kernels
from tests.support import kernels as k
from tests.support import kernels_fem as kf
from tests.support import kernels_races as kr
from tests.support import kernels_tiles as kt
from tests.support.lowered import plan_handles


def _src(body: str) -> str:
    return textwrap.dedent(body)


@pytest.mark.parametrize(
    ("source", "outputs", "expected"),
    [
        ("def k(x, y):\n    i = wp.tid()\n    y[i] = 2.0 * x[i]\n", ("y",), {"y": 1}),
        ("def k(x, y):\n    i, j = wp.tid()\n    y[i, j] = x[i, j]\n", ("y",), {"y": 2}),
        ("def k(x, y):\n    i = wp.tid()\n    n = y.shape[0]\n    y[i] = float(n)\n", ("y",), {"y": 1}),
        # accumulation reads the old value
        ("def k(x, y):\n    i = wp.tid()\n    y[i] += x[i]\n", ("y",), {}),
        ("def k(x, y):\n    i = wp.tid()\n    wp.atomic_add(y, 0, x[i])\n", ("y",), {}),
        # early exit may skip the write
        ("def k(x, y):\n    i = wp.tid()\n    if i > 2:\n        return\n    y[i] = x[i]\n", ("y",), {}),
        # conditional write only
        ("def k(x, y):\n    i = wp.tid()\n    if x[i] > 0.0:\n        y[i] = x[i]\n", ("y",), {}),
        # write through another index
        ("def k(x, y):\n    i = wp.tid()\n    y[i] = x[i]\n    y[0] = 1.0\n", ("y",), {}),
        ("def k(x, idx, y):\n    i = wp.tid()\n    y[idx[i]] = x[i]\n", ("y",), {}),
        # the thread index is reassigned
        ("def k(x, y):\n    i = wp.tid()\n    i = 0\n    y[i] = x[i]\n", ("y",), {}),
        # output read before written
        ("def k(x, y):\n    i = wp.tid()\n    y[i] = y[i] + x[i]\n", ("y",), {}),
        ("def k(x, y):\n    i = wp.tid()\n    v = y[i]\n    y[i] = v + x[i]\n", ("y",), {}),
        ("def k(x, y):\n    y[0] = x[0]\n", ("y",), {}),
        ("not python (", ("y",), {}),
        # a repeated thread index name: ``y[i, i]`` is the diagonal alone
        ("def k(x, y):\n    i, i = wp.tid()\n    y[i, i] = 1.0\n", ("y",), {}),
        ("def k(x, y):\n    i, j, i = wp.tid()\n    y[i, j, i] = x[j]\n", ("y",), {}),
    ],
)
def test_overwritten_outputs(source, outputs, expected):
    assert overwritten_outputs(_src(source), outputs) == expected


@pytest.mark.parametrize(
    ("body", "stored"),
    [("out[index[i]] = a[i]", ("out",)), ("out[index[i]] += a[i]", ()), ("out[i], a[i] = 1.0, 2.0", ("a", "out"))],
)
def test_plainly_stored(body: str, stored: tuple[str, ...]) -> None:
    source = f"def k(index: wp.array(dtype=int), a: wp.array(dtype=float), out: wp.array(dtype=float)):\n    i = wp.tid()\n    {body}\n"
    assert _analysis.plainly_stored(source, ("index", "a", "out")) == stored


# ======================================================================================================================
# Race freedom: may a kernel's CPU launch be split into index ranges run concurrently?
# ======================================================================================================================

_ARRAYS_1D = (("x", 1), ("idx", 1), ("out", 1))


def _check_reason(reason: str | None, blocker: str | None) -> None:
    if blocker is None:
        assert reason is None
    else:
        assert reason is not None
        assert reason.startswith(blocker), reason


def _kernel(body: str, params: str = "x, idx, n, out") -> str:
    lines = textwrap.dedent(body).strip().splitlines()
    return f"@wp.kernel\ndef k({params}):\n" + "".join(f"    {line}\n" for line in lines)


@pytest.mark.parametrize(
    ("body", "arrays", "blocker"),
    [
        # elementwise, through an alias, in place at the thread's own element, reading unwritten arrays anywhere
        ("i = wp.tid()\nout[i] = x[i] * 2.0", _ARRAYS_1D, None),
        ("i = wp.tid()\nb = out\nb[i] = x[i]", _ARRAYS_1D, None),
        ("i = wp.tid()\nout[i] = out[i] * 2.0", _ARRAYS_1D, None),
        ("i = wp.tid()\nout[i] = x[idx[i]] + x[0]", _ARRAYS_1D, None),
        ("i = wp.tid()\nout[i] = float(out.shape[0])", _ARRAYS_1D, None),
        ("i, j = wp.tid()\nout[i, j] = x[j, i]", (("x", 2), ("out", 2)), None),
        # a component of the thread's own element; a local vector's component
        ("i = wp.tid()\nout[i][0] = x[i]\nout[i].y = out[i][0]", _ARRAYS_1D, None),
        ("i = wp.tid()\nv = wp.vec3()\nv[0] = x[i]\nout[i] = v[0]", _ARRAYS_1D, None),
        # conditions, early returns and loops over unwritten data do not matter
        ("i = wp.tid()\nif i >= n:\n    return\nout[i] = x[i]", _ARRAYS_1D, None),
        ("i = wp.tid()\nacc = float(0.0)\nfor k in range(n):\n    acc += x[k]\nout[i] = acc", _ARRAYS_1D, None),
        # another thread's element
        ("i, j = wp.tid()\nout[j, i] = x[i, j]", (("x", 2), ("out", 2)), "line 4: a store into out[j, i], not at"),
        ("i = wp.tid()\nout[idx[i]] = x[i]", _ARRAYS_1D, "line 4: a store into out[idx[i]], not at"),
        ("i = wp.tid()\nout[i] = 1.0\nout[0] = 2.0", _ARRAYS_1D, "line 5: a store into out[0], not at"),
        ("i = wp.tid()\nb = out\nb[i + 1] = x[i]", _ARRAYS_1D, "line 5: a store into b[i + 1], not at"),
        ("i = wp.tid()\nout[i] = out[i + 1]", _ARRAYS_1D, "line 4: the written array 'out' is used other than"),
        ("i = wp.tid()\nout[i] = x[i]\ny = out[idx[i]]", _ARRAYS_1D, "line 5: the written array 'out' is used other"),
        # a store or read at the thread index that is a view (a row of a 2-d array) touches other threads' elements
        ("i = wp.tid()\nout[i] = x[i]", (("x", 1), ("out", 2)), "line 4: a store into out[i]: 'out' has 2 dims, not 1"),
        ("i = wp.tid()\nout[i][0] = x[i]", (("x", 1), ("out", 2)), "line 4: a store into out[i][0]: 'out' has 2"),
        ("i = wp.tid()\nrow = x[i]\nrow[0] = 1.0", (("x", 2), ("out", 1)), "line 5: a store into row[0], which may"),
        ("i, j = wp.tid()\nout[i, j] = out[i][j]", (("x", 2), ("out", 2)), "line 4: the written array 'out' is used"),
        # the written array handed on
        ("i = wp.tid()\nout[i] = helper(out, i)", _ARRAYS_1D, "line 4: the written array 'out' is used other"),
        ("i = wp.tid()\nout[i] = float(len(out))", _ARRAYS_1D, "line 4: the written array 'out' is used other"),
        # atomics, accumulation into an element, tiles, printing
        ("i = wp.tid()\nwp.atomic_add(out, 0, x[i])", _ARRAYS_1D, "line 4: wp.atomic_add"),
        ("i = wp.tid()\nwp.atomic_max(x, 0, 1.0)\nout[i] = 1.0", _ARRAYS_1D, "line 4: wp.atomic_max"),
        ("i = wp.tid()\nout[i] += x[i]", _ARRAYS_1D, "line 4: out[i] += ... (Warp compiles it to an atomic)"),
        ("i = wp.tid()\nout[i][0] -= x[i]", _ARRAYS_1D, "line 4: out[i][0] -= ..."),
        ("i = wp.tid()\nt = wp.tile_load(x, shape=8)\nout[i] = t[0]", _ARRAYS_1D, "line 4: wp.tile_load"),
        ("i = wp.tid()\nout[i] = float(wp.block_dim())", _ARRAYS_1D, "line 4: wp.block_dim"),
        ("i = wp.tid()\nprint(x[i])\nout[i] = x[i]", _ARRAYS_1D, "line 4: print"),
        ("i = wp.tid()\nwp.printf('%d', i)\nout[i] = x[i]", _ARRAYS_1D, "line 4: wp.printf"),
        ("i = wp.tid()\nwp.expect_eq(i, 0)\nout[i] = x[i]", _ARRAYS_1D, "line 4: wp.expect_eq"),
        ("i = wp.tid()\nwp.array_store(out, i, 1.0)", _ARRAYS_1D, "line 4: wp.array_store"),
        ("i = wp.tid()\nout[i] = wp.adjoint[x][i]", _ARRAYS_1D, "line 4: wp.adjoint"),
        # the thread index: once, never reassigned
        ("i = wp.tid()\ni = 0\nout[i] = x[i]", _ARRAYS_1D, "line 4: the thread index 'i' is reassigned"),
        ("i = wp.tid()\nfor i in range(n):\n    out[0] = x[i]", _ARRAYS_1D, "line 4: the thread index 'i' is"),
        ("out[0] = x[0]", _ARRAYS_1D, "line 2: the thread index is not assigned exactly once"),
        ("i = wp.tid()\nj = wp.tid()\nout[i] = x[j]", _ARRAYS_1D, "line 2: the thread index is not assigned exactly"),
        # what the analysis cannot follow
        ("i = wp.tid()\nout = x\nout[i] = 1.0", _ARRAYS_1D, "line 4: the array or struct parameter 'out' is"),
        ("i = wp.tid()\nb = out\nb = x\nb[i] = 1.0", _ARRAYS_1D, "line 6: a store into b[i], which may not"),
        ("i = wp.tid()\nout[i] = wp.static(helper)(x[i])", _ARRAYS_1D, "line 4: a call of a computed function"),
        ("i = wp.tid()\nout[i] = x.grad_of(i)", _ARRAYS_1D, "line 4: a call through the local or parameter 'x'"),
        ("not python (", _ARRAYS_1D, "the source does not parse"),
    ],
)
def test_race_free_blocker(body: str, arrays: tuple, blocker: str | None) -> None:
    reason, calls = _analysis.race_free_blocker(_kernel(body), arrays, ())
    if blocker is None:
        assert reason is None
        assert calls[0] == ("wp.tid", 3)
    else:
        assert reason is not None
        assert reason.startswith(blocker), reason
        assert calls == ()


def test_race_free_blocker_hands_back_the_calls_to_follow() -> None:
    body = "i = wp.tid()\nv = helper(x, i)\nout[i] = wp.sin(v) + helper(x, 0) + F.dtype(1.0)"
    reason, calls = _analysis.race_free_blocker(_kernel(body, "x, F, out"), (("x", 1), ("out", 1)), ())
    assert reason is None
    assert calls == (("wp.tid", 3), ("helper", 4), ("wp.sin", 5))  # no repeats; ``F.dtype(...)`` is a constructor


@pytest.mark.parametrize(
    ("body", "blocker"),
    [
        ("s.a[i] = s.b[i] * s.k", None),
        ("s.inner.c[i] = s.a[i]", None),
        ("s.a[i] = s.b[i]\nout[i] = s.a[i] + s.b[0]", None),
        ("s.a[i] = 1.0\nout[i] = s.a[0]", "line 5: the written array 's.a' is used other than"),
        ("s.a[i] = 1.0\nout[i] = helper(s)", "line 5: the struct 's', whose array fields are written, is used whole"),
        ("s.inner.c[i] = 1.0\nt = s.inner", "line 5: the struct 's.inner', whose array fields are written"),
        ("wp.atomic_add(s.a, i, 1.0)", "line 4: wp.atomic_add"),
        ("s.a[i] -= 1.0", "line 4: s.a[i] -= ..."),
        ("s.k = 1.0", "line 4: a store into s.k, which may not be a local value"),
        ("t = s.a\nt[i] = 1.0", None),
    ],
)
def test_race_free_blocker_struct_fields(body: str, blocker: str | None) -> None:
    source = _kernel(f"i = wp.tid()\n{body}\nout[i] = 0.0", "s, out")
    arrays = (("s.a", 1), ("s.b", 1), ("s.inner.c", 1), ("out", 1))
    reason, _ = _analysis.race_free_blocker(source, arrays, ("s",))
    _check_reason(reason, blocker)


@pytest.mark.parametrize(
    ("body", "blocker"),
    [
        ("return a[i] * a[0] + squared(v[0])", None),
        ("w = v\nw[0] = 1.0\nreturn w", None),
        ("a[i] = 1.0\nreturn 0.0", "line 3: a store into array 'a' (a[i])"),
        ("b = a\nb[0] = 1.0\nreturn 0.0", "line 4: a store into array 'a' (b[0])"),
        ("s.f[0] = 1.0\nreturn 0.0", "line 3: a store into s.f[0], which may not be a local value"),
        ("wp.atomic_add(a, 0, 1.0)\nreturn 0.0", "line 3: wp.atomic_add"),
    ],
)
def test_race_free_blocker_in_a_called_function(body: str, blocker: str | None) -> None:
    # a called function cannot know its caller's thread index: it may write no array at all (and needs no tid)
    lines = "".join(f"    {line}\n" for line in body.splitlines())
    source = f"@wp.func\ndef f(a: wp.array(dtype=float), s: Any, v: wp.vec3, i: int):\n{lines}"
    reason, _ = _analysis.race_free_blocker(source, (("a", 1),), ("s",), in_function=True)
    _check_reason(reason, blocker)


@pytest.mark.parametrize(
    "name",
    [
        *("atomic_add", "atomic_cas", "tile_load", "tile", "untile", "mesh_query_aabb_tiled", "print", "printf"),
        *("expect_near", "block_dim", "array_store", "address", "add_inplace", "volume_store_f", "dense_solve"),
    ],
)
def test_racy_calls(name: str) -> None:
    assert _analysis.racy_call(name)


@pytest.mark.parametrize("name", ["sin", "dot", "length", "vec3", "rand_init", "randf", "lower_bound", "min", "tid"])
def test_harmless_calls(name: str) -> None:
    assert not _analysis.racy_call(name)


# -- whole kernels: the called functions followed -----------------------------------------------------------------------


def _blocker(kernel: wp.Kernel, launch_ndim: int = 1) -> str | None:
    sig = make_signature(_warp_kernels.kernel_params(kernel), 1, (), what="test")
    return race_blocker(kernel, sig.params, launch_ndim)


@pytest.mark.parametrize(
    ("kernel", "blocker"),
    [
        (kr.elementwise, None),
        (kr.guarded, None),
        # a function that reads arrays anywhere and stores into a local vector writes nothing another thread reads
        (kr.with_pure_helper, None),
        (kr.struct_store, None),
        (
            kr.with_writing_helper,
            "line 4: the written array 'scratch' is used other than at the thread index (store_into(scratch, i, x[i]))",
        ),
        (
            kr.with_nested_writer,
            "line 4: the written array 'scratch' is used other than at the thread index (calls_a_writer",
        ),
        # a written array handed to a function: Warp's record (the helper's atomic) makes it written, and a
        # written array may be used only at the thread index
        (
            kr.with_counting_helper,
            "line 5: the written array 'counter' is used other than at the thread index (count_into(counter))",
        ),
        (kr.with_printing_helper, "line 4: shout: line 3: wp.printf"),
        (
            kr.with_renamed_atomic,
            "line 4: the written array 'out' is used other than at the thread index (accumulate(out, 0, x[i]))",
        ),
        (kr.struct_atomic, "line 4: wp.atomic_add"),
        # generic FEM kernels in liblaf/apple's style: per-element energies scattered with atomics, or stored
        (kr.FEM_OVERLOADS["fun_kernel"], "line 12: wp.atomic_add"),
        (kr.FEM_OVERLOADS["grad_kernel"], "line 15: wp.atomic_add"),
        (kr.FEM_OVERLOADS["cell_energy_kernel"], None),
    ],
    ids=lambda v: getattr(v, "key", None) if isinstance(v, wp.Kernel) else None,
)
def test_race_blocker_follows_called_functions(kernel: wp.Kernel, blocker: str | None) -> None:
    ndim = 2 if kernel is kr.FEM_OVERLOADS["cell_energy_kernel"] else 1
    _check_reason(_blocker(kernel, ndim), blocker)


@pytest.mark.parametrize(
    ("kernel", "ndim", "blocker"),
    [
        # each of these races when split (through a local struct, an alias, a function, a shared row, a fake tid)
        (
            kr.shift_through_local_struct,
            1,
            "line 7: a store into h.arr[(i + 1) % out.shape[0]], which may not be a local",
        ),
        (kr.alias_of_local_struct_field, 1, "line 7: a store into b[(i + 1) % out.shape[0]], which may not be a local"),
        (kr.shift_through_a_function, 1, "line 4: the written array 'out' is used other than at the thread index"),
        (kr.row_count, 2, "line 4: 1 thread index name(s) for a launch of 2 dims: threads share one"),
        (kr.fake_tid_count, 1, "a function named tid that is not Warp's wp.tid"),
        (kr.elementwise, 2, "line 3: 1 thread index name(s) for a launch of 2 dims"),
        (kr.elementwise, 1, None),
        (kr.row_count, 1, None),  # one dim: ``i`` is the thread's own index
    ],
    ids=lambda v: getattr(v, "key", None) if isinstance(v, wp.Kernel) else None,
)
def test_race_blocker_refuses_what_races_when_split(kernel: wp.Kernel, ndim: int, blocker: str | None) -> None:
    _check_reason(_blocker(kernel, ndim), blocker)


def test_only_warps_tid_is_the_thread_index() -> None:
    assert warps_thread_index(kr.elementwise)
    assert not warps_thread_index(kr.fake_tid_count)
    # a function named tid must not let the zero-fill be skipped: ``out[i] = 1.0`` writes out[0] alone
    (info,) = _infos(lambda x: jax_kernel(kr.fake_tid_store, output_dims={"out": 5}, **_NO_PRELOAD)(x)[0], X)
    assert info.zero_results == (0,)
    assert info.race_free is False
    (honest,) = _infos(lambda x: jax_kernel(kr.elementwise, **_NO_PRELOAD)(x)[0], X)
    assert honest.zero_results == ()


@pytest.mark.parametrize(
    ("kernel", "launch_dims", "output_dims", "zero_results"),
    [
        (k.repeated_tid_diagonal, (6, 6), (6, 6), (0,)),  # ``i, i = wp.tid()``: only the diagonal is written
        (k.grid_fill, (6, 6), (6, 6), ()),  # every element overwritten: no fill
        (k.grid_fill, (6, 6, 2), (6, 6), (0,)),  # two thread index names for a 3-d launch: threads share elements
        (k.grid_fill, (6, 5), (6, 6), (0,)),  # a launch smaller than the output
        (k.triple_kernel, (5, 2), 5, (0,)),  # one thread index name for a 2-d launch (``output[i]``)
    ],
    ids=lambda v: getattr(v, "key", None) if isinstance(v, wp.Kernel) else None,
)
def test_zero_fill_is_kept_unless_the_thread_index_covers_the_output(
    kernel: wp.Kernel, launch_dims: tuple[int, ...], output_dims: Any, zero_results: tuple[int, ...]
) -> None:
    m = jax_kernel(kernel, launch_dims=launch_dims, output_dims=output_dims, **_NO_PRELOAD)
    (info,) = _infos(lambda *a: m(*a)[0], *((X,) if kernel is k.triple_kernel else ()))
    assert info.zero_results == zero_results
    assert ("zero-filled results (0,)" in str(info)) == bool(zero_results)


def test_race_blocker_refuses_what_it_cannot_resolve(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _blocker(kr.with_pure_helper) is None
    monkeypatch.delitem(kr.with_pure_helper.func.__globals__, "local_vector")
    # the kernel's code changed (its Warp hash with it): judged again, the helper that calls what cannot be resolved
    # counts as writing the array it is handed
    assert _blocker(kr.with_pure_helper) == (
        "line 4: the written array 'x' is used other than at the thread index (weighted(x, i, 0.5))"
    )


# -- the plan: Plan.race_free -------------------------------------------------------------------------------------------


def _infos(f: Callable[..., Any], *args: Any) -> list[PlanInfo]:
    """The plans of the jarp calls in ``jit(f)``'s lowering, in program order (as `modules/test_inspect.py`)."""
    handles = plan_handles(jax.jit(f).trace(*args).lower().as_text())
    infos = {i.handle: i for i in list_plans()}
    return [infos[h] for h in handles]


_NO_PRELOAD = {"module_preload_mode": wp.JaxModulePreloadMode.NONE}  # plans only: nothing is built or launched
X = jnp.arange(5.0, dtype=jnp.float32)


def test_elementwise_plan_is_race_free_and_rebuilds_so() -> None:
    (info,) = _infos(lambda x: jax_kernel(k.triple_kernel, **_NO_PRELOAD)(x)[0], X)
    assert info.race_free is True
    assert "race-free True" in str(info)
    plan = registry.plan(info.handle)
    assert plan.race_free is True
    again = rebuild(content_text(plan))
    assert again.race_free is True
    assert again == plan
    assert "race_free" not in content_text(plan)  # derived, never described


def test_adjoint_plans_are_not_race_free() -> None:
    m = jax_kernel(k.scale_sum_square, enable_backward=True, **_NO_PRELOAD)
    forward, adjoint = _infos(jax.value_and_grad(lambda a, b: jnp.sum(m(a, b, 2.0)[0]), argnums=(0, 1)), X, X)
    assert (forward.kind, forward.race_free) == ("kernel", True)
    assert (adjoint.kind, adjoint.race_free) == ("adjoint", False)  # Warp's adjoints accumulate with atomics
    assert rebuild(content_text(registry.plan(adjoint.handle))).race_free is False


def test_atomic_kernel_plan_is_not_race_free() -> None:
    hist = jax_kernel(k.scatter_add_kernel, output_dims=k.N_BINS, **_NO_PRELOAD)
    (info,) = _infos(lambda i, w: hist(i, w)[0], jnp.asarray(k.BINS), jnp.asarray(k.BIN_WEIGHTS))
    assert info.race_free is False
    assert "race-free False" in str(info)


@pytest.mark.parametrize(
    ("options", "race_free"),
    [
        ({}, True),
        ({"block_dim": 1}, True),
        ({"block_dim": 4}, False),  # may run cooperative tiles
        ({"bounds_check": True}, False),  # runs under jarp's guard, which reports the launch's first failed check
    ],
)
def test_launch_options_that_keep_a_launch_whole(options: dict[str, Any], race_free: bool) -> None:
    (info,) = _infos(lambda x: jax_kernel(k.triple_kernel, **options, **_NO_PRELOAD)(x)[0], X)
    assert info.race_free is race_free


def test_runtime_scalar_variants_and_batches_stay_race_free() -> None:
    scale = jax_kernel(k.scale_kernel, **_NO_PRELOAD)
    (info,) = _infos(lambda a, s: scale(a, s)[0], X, jnp.float32(2.5))  # reads s from a one-element array
    assert info.scalar_operands == (1,)
    assert info.race_free is True
    (batched,) = _infos(jax.vmap(lambda a: scale(a, 2.5)[0]), jnp.ones((3, 5), jnp.float32))
    assert batched.batch_shape == (3,)
    assert batched.race_free is True


def _fem_args() -> tuple[jax.Array, dict[str, jax.Array], dict[str, jax.Array]]:
    rng = np.random.default_rng(0)
    region = {
        "cells": jnp.asarray([[0, 1, 2, 3], [1, 2, 3, 4]], jnp.int32),
        "dhdX": jnp.asarray(rng.standard_normal((2, 1, 4, 3)), jnp.float32),
        "dV": jnp.ones((2, 1), jnp.float32),
    }
    materials = {"mu": jnp.ones(2, jnp.float32), "lmbda": jnp.ones(2, jnp.float32)}
    return jnp.zeros((5, 3), jnp.float32), region, materials


def test_fem_energy_plans() -> None:
    u, region, materials = _fem_args()
    scattered = jax_kernel(kf.fun_kernel, arg_types_factory=kf.fun_arg_types, **_NO_PRELOAD)
    (info,) = _infos(lambda u, r, m: scattered(u, r, m, launch_dims=(2, 1), output_dims=1)[0], u, region, materials)
    assert info.race_free is False  # wp.atomic_add(output, 0, e) on every thread
    stored = jax_kernel(kr.cell_energy_kernel, arg_types_factory=kr.cell_energy_arg_types, **_NO_PRELOAD)
    (info,) = _infos(lambda u, r, m: stored(u, r, m, launch_dims=(2, 1), output_dims=(2, 1))[0], u, region, materials)
    assert info.race_free is True


# -- state shared by concurrent launches (`_races.sharing_blocker`, `Plan.shares_cpu_state`) --


@pytest.mark.parametrize(
    ("kernel", "blocker"),
    [
        (kr.elementwise, None),
        (kr.with_counting_helper, None),  # atomics are fine across batch slices: each slice writes its own buffers
        (kr.struct_atomic, None),
        (kr.with_writing_helper, None),
        (kr.with_printing_helper, "shout"),
        (kt.tile_copy, "tile_load"),
        (kt.tile_through_function, "doubled_tile"),
        (kr.printing_gradient, "sq: line 4: wp.printf"),  # printing in a custom adjoint (``@wp.func_grad``)
    ],
)
def test_sharing_blocker(kernel: wp.Kernel, blocker: str | None) -> None:
    reason = sharing_blocker(kernel)
    if blocker is None:
        assert reason is None
    else:
        assert reason is not None
        assert blocker in reason


def test_sharing_blocker_refuses_a_computed_callee() -> None:
    source = "def k(x: wp.array(dtype=float)):\n    i = wp.tid()\n    wp.static(pick)(x, i)\n"
    calls = _analysis.called_names(source)
    assert calls is not None
    assert (None, 3) in calls


@pytest.mark.parametrize(
    ("name", "shares"),
    [
        ("wp.tile_load", True),
        ("tile_store", True),
        ("wp.printf", True),
        ("print", True),
        ("expect_eq", True),
        ("untile", True),
        ("wp.atomic_add", False),
        ("wp.sin", False),
        ("array_store", False),
    ],
)
def test_sharing_calls(name: str, shares: bool) -> None:
    assert _analysis.sharing_call(name) is shares


def test_plans_say_whether_their_slices_may_run_at_once() -> None:
    indices = jnp.asarray([0, 2, 2, 1], jnp.int32)
    weights = jnp.ones((2, 4), jnp.float32)
    atomic = jax_kernel(k.scatter_add_kernel, num_outputs=1, output_dims={"out": 3}, **_NO_PRELOAD)
    (info,) = _infos(jax.vmap(lambda w: atomic(indices, w)[0]), weights)
    plan = registry.plan(info.handle)  # before the next trace, which releases it (its lowering is gone)
    tiled = jax_kernel(kt.tile_copy, launch_dims=(8,), output_dims={"out": 64}, **_NO_PRELOAD)
    (tile_info,) = _infos(jax.vmap(lambda x: tiled(x)[0]), jnp.ones((2, 64), jnp.float32))
    tile_plan = registry.plan(tile_info.handle)
    assert (info.concurrent_slices, tile_info.concurrent_slices) == (True, False)
    assert "concurrent slices False" in str(tile_info)
    assert (plan.race_free, plan.shares_cpu_state) == (False, False)  # atomics: slices at once, never ranges
    assert (tile_plan.race_free, tile_plan.shares_cpu_state) == (False, True)
    for p in (plan, tile_plan):
        again = rebuild(content_text(p))
        assert again == p
        assert "shares_cpu_state" not in content_text(p)  # derived, never described
