"""jarp's ranged CPU entry points (`jarp.warp._ffi._native._ranged`).

A ranged entry point runs the task indices ``[begin, end)`` of a CPU launch with the code Warp's own entry point runs
for each of them, so a launch split into ranges, run in any order, writes bit-identical results. The entry points
live in a companion object built from the source Warp compiled, cached on disk and loaded once per process.
"""

from __future__ import annotations

import ctypes
import sys
import textwrap
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import warp as wp

from jarp.warp._ffi._native import _ranged as rg
from jarp.warp._upstream import _warp_builds, _warp_kernels, _warp_launches
from tests.support import forked
from tests.support import kernels_ranged as kr
from tests.support.paths import REPO, child_environment

_CPU = wp.get_device("cpu")
_RANGED = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)
_FORWARD = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


def _launch_args(
    kernel: wp.Kernel, dim: Any, inputs: list[Any]
) -> tuple[wp.Kernel, ctypes.Structure, ctypes.Structure]:
    """The overload ``wp.launch`` resolves, its launch bounds and its argument struct (as jarp passes them)."""
    cmd = wp.launch(kernel, dim=dim, inputs=inputs, device=_CPU, record_cmd=True)
    params = cmd.params
    fields = [(arg.label, type(p)) for arg, p in zip(cmd.kernel.adj.args, params[1:], strict=True)]
    args_type = type("Args", (ctypes.Structure,), {"_fields_": fields})
    return cmd.kernel, params[0], args_type(*params[1:])


def _chunks(n: int, rng: np.random.Generator) -> list[list[tuple[int, int]]]:
    """Ways to cover ``[0, n)``: two halves, uneven chunks in shuffled order, and chunks with empty and overlong ends."""
    k = int(rng.integers(0, n + 1))
    cuts = np.sort(rng.choice(np.arange(1, n), size=min(6, n - 1), replace=False)).tolist()
    edges = [0, *cuts, n]
    uneven = [(edges[i], edges[i + 1]) for i in range(len(edges) - 1)]
    rng.shuffle(uneven)
    return [[(0, k), (k, n)], uneven, [(n, n), (0, 1), (1, n + 1000)]]


def _outputs(inputs: Sequence[Any]) -> bytes:
    return b"".join(x.numpy().tobytes() for x in inputs if isinstance(x, wp.array))


def _check_split(kernel: wp.Kernel, dim: Any, make_inputs: Callable[[], list[Any]], seed: int) -> None:
    """A launch split into ranges (run in several orders) writes the bytes ``wp.launch`` writes, and so does Warp's
    own entry point called through the same argument struct (which checks the harness)."""
    reference = make_inputs()
    wp.launch(kernel, dim=dim, inputs=reference, device=_CPU)
    expected = _outputs(reference)

    inputs = make_inputs()
    overload, bounds, args = _launch_args(kernel, dim, inputs)
    entry = _warp_launches.load_entry_points(overload, _CPU)
    _FORWARD(entry.forward)(ctypes.addressof(bounds), ctypes.addressof(args))
    assert _outputs(inputs) == expected

    ranged = _RANGED(rg.ranged_cpu_entry(overload, entry))
    for chunks in _chunks(bounds.size, np.random.default_rng(seed)):
        inputs = make_inputs()
        _, bounds, args = _launch_args(kernel, dim, inputs)
        for begin, end in chunks:
            ranged(ctypes.addressof(bounds), ctypes.addressof(args), begin, end)
        assert _outputs(inputs) == expected, f"chunks {chunks}"


def _random(rng_seed: int, shape: Any, dtype: Any) -> np.ndarray:
    rng = np.random.default_rng(rng_seed)
    return (rng.standard_normal(shape) * 37.0).astype(dtype)


def test_float32_contiguous_takes_warps_contiguous_specialisation() -> None:
    n = 1037

    def make() -> list[Any]:
        return [wp.array(_random(1, n, np.float32), device=_CPU), wp.zeros(n, dtype=wp.float32, device=_CPU), 1.7]

    _check_split(kr.scale_sin, n, make, seed=11)


def test_strided_arrays_take_the_general_specialisation() -> None:
    n = 517
    keep: list[np.ndarray] = []

    def strided(values: np.ndarray) -> wp.array:
        raw = np.zeros(3 * n, np.float32)
        raw[::3] = values
        keep.append(raw)
        return wp.array(ptr=raw.ctypes.data, dtype=wp.float32, shape=(n,), strides=(12,), device=_CPU)

    def make() -> list[Any]:
        return [strided(_random(2, n, np.float32)), strided(np.zeros(n, np.float32)), -0.3]

    assert not make()[0].is_contiguous
    _check_split(kr.scale_sin, n, make, seed=12)


def test_float64() -> None:
    n = 999

    def make() -> list[Any]:
        return [wp.array(_random(3, n, np.float64), device=_CPU), wp.zeros(n, dtype=wp.float64, device=_CPU)]

    _check_split(kr.poly64, n, make, seed=13)


def test_two_dimensional_launch() -> None:
    shape = (23, 41)

    def make() -> list[Any]:
        return [wp.array(_random(4, shape, np.float32), device=_CPU), wp.zeros(shape, dtype=wp.float32, device=_CPU)]

    _check_split(kr.grid2d, shape, make, seed=14)


def test_struct_parameter() -> None:
    n = 301
    data = wp.array(_random(5, n, np.float32), device=_CPU)

    def make() -> list[Any]:
        p = kr.Params()
        p.scale = 0.71
        p.offset = wp.vec3(1.5, -2.25, 3.125)
        p.data = data
        return [p, wp.zeros(n, dtype=wp.vec3, device=_CPU)]

    _check_split(kr.with_struct, n, make, seed=15)


@pytest.mark.parametrize(("dtype", "alpha"), [(np.float32, 1.3), (np.float64, wp.float64(-0.7))])
def test_generic_overloads(dtype: Any, alpha: Any) -> None:
    n = 613

    def make() -> list[Any]:
        return [wp.array(_random(6, n, dtype), device=_CPU), wp.array(_random(7, n, dtype), device=_CPU), alpha]

    _check_split(kr.generic_axpy, n, make, seed=16)


def test_ranges_run_concurrently_on_threads() -> None:
    """The use the entry points exist for: ranges of one launch on several threads at once (ctypes drops the GIL)."""
    n = 1 << 20

    def make() -> list[Any]:
        return [wp.array(_random(8, n, np.float32), device=_CPU), wp.zeros(n, dtype=wp.float32, device=_CPU), 0.9]

    reference = make()
    wp.launch(kr.scale_sin, dim=n, inputs=reference, device=_CPU)
    inputs = make()
    overload, bounds, args = _launch_args(kr.scale_sin, n, inputs)
    ranged = _RANGED(rg.ranged_cpu_entry(overload, _warp_launches.load_entry_points(overload, _CPU)))
    edges = np.linspace(0, n, 9, dtype=np.int64).tolist()
    threads = [
        threading.Thread(target=ranged, args=(ctypes.addressof(bounds), ctypes.addressof(args), edges[i], edges[i + 1]))
        for i in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert _outputs(inputs) == _outputs(reference)


def _generic_scale(x: wp.array(dtype=Any), y: wp.array(dtype=Any)):  # defined into a module of its own below
    i = wp.tid()
    y[i] = x[i] * x[i] - x[i]


def test_a_build_its_module_has_moved_on_from() -> None:
    """A new overload rebuilds the Warp module; an entry of the earlier build still gets that build's ranged entry."""
    with _warp_kernels.warp_lock():
        module = wp.get_module("jarp_tests.ranged_moved_on")
        generic = wp.Kernel(_generic_scale, key="generic_scale", module=module)
        k32 = wp.overload(generic, {"x": wp.array(dtype=wp.float32), "y": wp.array(dtype=wp.float32)})
    entry = _warp_launches.load_entry_points(k32, _CPU)
    with _warp_kernels.warp_lock():
        wp.overload(generic, {"x": wp.array(dtype=wp.float64), "y": wp.array(dtype=wp.float64)})
    assert entry.module_exec.module_hash != module.get_module_hash(1)
    n = 77
    x = wp.array(_random(9, n, np.float32), device=_CPU)
    expected, y = wp.zeros(n, dtype=wp.float32, device=_CPU), wp.zeros(n, dtype=wp.float32, device=_CPU)
    _, bounds, args = _launch_args(k32, n, [x, expected])
    _FORWARD(entry.forward)(ctypes.addressof(bounds), ctypes.addressof(args))
    _, bounds, args = _launch_args(k32, n, [x, y])
    ranged = _RANGED(rg.ranged_cpu_entry(k32, entry))
    ranged(ctypes.addressof(bounds), ctypes.addressof(args), 40, n)
    ranged(ctypes.addressof(bounds), ctypes.addressof(args), 0, 40)
    assert y.numpy().tobytes() == expected.numpy().tobytes()
    # an entry of unknown options (made outside load_entry_points) cannot be built once the module moved on
    unknown = _warp_launches.EntryPoints(_CPU, entry.module_exec, entry.hooks, 1)
    with pytest.raises(RuntimeError, match="changed since kernel 'generic_scale' was loaded"):
        rg._ranged_job(k32, unknown, False)


def test_the_source_is_the_one_warp_compiled() -> None:
    entry = _warp_launches.load_entry_points(kr.scale_sin, _CPU)
    source = _warp_builds._build_source(kr.scale_sin.module, entry.module_exec, entry.build_options, True)
    assert source == _warp_builds.module_codegen(kr.scale_sin.module, "cpu")
    # without Warp's file (strip_hash, or a cache emptied since) the source is generated again: the same text
    no_file = type("NoFile", (), {"binary_path": None})()
    assert _warp_builds._build_source(kr.scale_sin.module, no_file, entry.build_options, True) == source
    with pytest.raises(RuntimeError, match="not in Warp's kernel cache, and the module changed since"):
        _warp_builds._build_source(kr.scale_sin.module, no_file, entry.build_options, False)


def test_build_options_are_the_modules_resolved_ones() -> None:
    entry = _warp_launches.load_entry_points(kr.scale_sin, _CPU)
    module = kr.scale_sin.module
    assert entry.build_options == module.resolved_options[1]
    build = _warp_builds._cpu_build_options(entry.build_options)
    assert build["block_dim"] == 1
    assert build["mode"] == (module.options["mode"] or wp.config.mode)


@pytest.fixture
def fresh_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty companion cache: nothing on disk, nothing loaded in this process."""
    monkeypatch.setattr(_warp_builds, "kernel_cache_dir", lambda: tmp_path)
    monkeypatch.setattr(rg, "_ranged_objects", {})
    monkeypatch.setattr(rg, "_ranged_by_exec", weakref.WeakKeyDictionary())
    return tmp_path / "jarp-ranged"


@pytest.fixture
def compiles(fresh_cache: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The companion objects ``build_cpu`` compiles into the fresh cache while the test runs.

    Warp's own builds of the kernels' modules are left out: a cold Warp kernel cache (a fresh machine) builds them
    in ``load_entry_points``, into Warp's cache directory.
    """
    calls: list[str] = []
    original = _warp_builds._build.build_cpu

    def counting(obj_path: str, cpp_path: str, **kwargs: Any) -> None:
        if Path(obj_path).parent == fresh_cache:
            calls.append(obj_path)
        original(obj_path, cpp_path, **kwargs)

    monkeypatch.setattr(_warp_builds._build, "build_cpu", counting)
    return calls


def test_the_companion_is_compiled_once_then_reused_in_process_and_from_disk(
    fresh_cache: Path, compiles: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    entry = _warp_launches.load_entry_points(kr.poly64, _CPU)
    start = time.perf_counter()
    address = rg.ranged_cpu_entry(kr.poly64, entry)
    elapsed = time.perf_counter() - start
    print(f"companion object compiled and loaded in {elapsed:.2f} s")
    assert address
    assert len(compiles) == 1
    assert [p.name for p in fresh_cache.iterdir() if p.suffix == ".o"] == [Path(compiles[0]).name.split(".p")[0] + ".o"]
    assert not [p for p in fresh_cache.iterdir() if ".p" in p.stem]  # the temporary files were renamed
    # again, through another EntryPoints of the same build, and for another kernel of the module: nothing compiles
    assert rg.ranged_cpu_entry(kr.poly64, _warp_launches.load_entry_points(kr.poly64, _CPU)) == address
    assert rg.ranged_cpu_entry(kr.grid2d, _warp_launches.load_entry_points(kr.grid2d, _CPU))
    assert len(compiles) == 1
    # forgetting the loaded object (as a new process starts): the object on disk is loaded, not compiled
    monkeypatch.setattr(rg, "_ranged_objects", {})
    monkeypatch.setattr(rg, "_ranged_by_exec", weakref.WeakKeyDictionary())
    assert rg.ranged_cpu_entry(kr.poly64, entry)
    assert len(compiles) == 1


def test_a_fresh_process_loads_the_companion_from_disk() -> None:
    rg.ranged_cpu_entry(kr.scale_sin, _warp_launches.load_entry_points(kr.scale_sin, _CPU))  # on disk now
    script = textwrap.dedent(
        """
        import ctypes
        import numpy as np
        import warp as wp
        from jarp.warp._ffi._native import _ranged as rg
        from jarp.warp._upstream import _warp_builds, _warp_kernels, _warp_launches
        from tests.support import kernels_ranged as kr

        cpu = wp.get_device("cpu")
        entry = _warp_launches.load_entry_points(kr.scale_sin, cpu)

        def no_compile(*args, **kwargs):
            raise AssertionError("compiled")

        _warp_builds._build.build_cpu = no_compile
        address = rg.ranged_cpu_entry(kr.scale_sin, entry)
        assert address
        a = wp.array(np.arange(10, dtype=np.float32), device=cpu)
        b = wp.zeros(10, dtype=wp.float32, device=cpu)
        cmd = wp.launch(kr.scale_sin, 10, inputs=[a, b, 2.0], device=cpu, record_cmd=True)
        fields = [(arg.label, type(p)) for arg, p in zip(kr.scale_sin.adj.args, cmd.params[1:])]
        args = type("Args", (ctypes.Structure,), {"_fields_": fields})(*cmd.params[1:])
        ranged = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t)(address)
        ranged(ctypes.addressof(cmd.params[0]), ctypes.addressof(args), 4, 10)
        ranged(ctypes.addressof(cmd.params[0]), ctypes.addressof(args), 0, 4)
        x = np.arange(10, dtype=np.float32)
        expected = wp.zeros(10, dtype=wp.float32, device=cpu)
        wp.launch(kr.scale_sin, 10, inputs=[a, expected, 2.0], device=cpu)
        assert b.numpy().tobytes() == expected.numpy().tobytes()
        print("LOADED-FROM-DISK")
        """
    )
    env = child_environment()
    proc = forked.run([sys.executable, "-c", script], cwd=REPO, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "LOADED-FROM-DISK" in proc.stdout, proc.stderr[-4000:]


def test_a_failed_compile_raises(fresh_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def failing(*args: Any, **kwargs: Any) -> None:
        raise Exception("CPU kernel build failed with error code 1")

    monkeypatch.setattr(_warp_builds._build, "build_cpu", failing)
    with pytest.raises(RuntimeError, match=r"failed to compile the ranged CPU entry points of Warp module .*code 1"):
        rg.ranged_cpu_entry(kr.scale_sin, _warp_launches.load_entry_points(kr.scale_sin, _CPU))
    assert not [p for p in fresh_cache.iterdir() if p.suffix == ".o"]


def test_tile_kernels_get_no_ranged_entry(fresh_cache: Path, compiles: list[str]) -> None:
    entry = _warp_launches.load_entry_points(kr.tiled, _CPU)
    assert entry.block_dim == 1
    assert rg.ranged_cpu_entry(kr.tiled, entry) == 0
    assert compiles == []  # a module whose kernels all have none builds nothing


def test_cooperative_cpu_blocks_get_no_ranged_entry(
    fresh_cache: Path, compiles: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wp.config, "enable_cpu_blocks", True)
    module = kr.scale_sin.module
    source = _warp_builds.module_codegen(module, "cpu", block_dim=4)
    appendix, refused = rg._ranged_appendix(source)
    assert appendix == ""
    assert refused[kr.scale_sin.get_mangled_name()] == "cooperative CPU blocks (block_dim > 1)"
    block_entry = type("Entry", (), {"device": _CPU, "block_dim": 4})()
    assert rg.ranged_cpu_entry(kr.scale_sin, block_entry) == 0  # refused before anything is built or read
    assert compiles == []


def test_cuda_entries_are_refused() -> None:
    entry = type("Entry", (), {"device": type("Device", (), {"is_cpu": False})(), "block_dim": 256})()
    with pytest.raises(ValueError, match="CPU-only"):
        rg.ranged_cpu_entry(kr.scale_sin, entry)


def test_check_ranged_entries() -> None:
    rg.check_ranged_entries()


def test_check_ranged_entries_fails_when_warps_task_loop_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    codegen = wp._src.codegen
    changed = codegen.cpu_module_template_forward.replace(
        "task_index < dim->size; ++task_index", "task_index < dim->size; task_index += 2"
    )
    monkeypatch.setattr(codegen, "cpu_module_template_forward", changed)
    with pytest.raises(AssertionError, match="task loop changed"):
        rg.check_ranged_entries()


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        ("_cpu_forward_dispatch(dim, _wp_args);\n}", "_cpu_forward_dispatch(dim, _wp_args);\n    extra();\n}", "entry"),
        ("task_index < dim->size; ++task_index", "task_index < dim->size; task_index += 2", "task loop"),
        ("static void ", "static inline void ", "per-task function"),
        ("_cpu_forward_tasks<true>(dim, _wp_args)", "_cpu_forward_tasks<true>(dim, _wp_args, 0)", "task loop"),
        (
            "{\n    wp::tile_shared_storage_t",
            "{\n    prepare(dim);\n    wp::tile_shared_storage_t",
            "tile-storage setup",
        ),
    ],
)
def test_changed_codegen_shapes_are_refused_loudly(old: str, new: str, what: str) -> None:
    source = _warp_builds.module_codegen(kr.scale_sin.module, "cpu")
    assert old in source
    with pytest.raises(RuntimeError, match=rf"does not have the shape jarp's ranged entry points copy \(.*{what}"):
        rg._ranged_appendix(source.replace(old, new))


@pytest.mark.parametrize(
    ("old", "new", "what"),
    [
        (
            "++task_index)\n    {{\n        {name}_cpu_kernel_backward",
            "task_index += 2)\n    {{\n        {name}_cpu_kernel_backward",
            "task loop",
        ),
        (
            "{name}_cpu_backward_tasks<false>(dim, _wp_args, _wp_adj_args)",
            "{name}_cpu_backward_tasks<false>(dim)",
            "task loop",
        ),
        (
            "static void {name}_cpu_kernel_backward(",
            "static inline void {name}_cpu_kernel_backward(",
            "per-task function",
        ),
    ],
)
def test_changed_backward_codegen_shapes_are_refused_loudly(old: str, new: str, what: str) -> None:
    source = _warp_builds.module_codegen(kr.scale_sin.module, "cpu")
    assert "_jarp_cpu_backward_range(" in rg._ranged_appendix(source, backward=True)[0]
    name = kr.scale_sin.get_mangled_name()
    old, new = old.format(name=name), new.format(name=name)
    assert source.count(old) == 1
    with pytest.raises(RuntimeError, match=rf"does not have the shape jarp's ranged entry points copy \(.*{what}"):
        rg._ranged_appendix(source.replace(old, new), backward=True)
    rg._ranged_appendix(source.replace(old, new))  # the forward entry does not depend on it
