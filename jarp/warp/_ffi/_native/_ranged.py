"""jarp's ranged CPU entry points: one CPU launch split into index ranges run on several threads.

Warp's CPU entry point ``{name}_cpu_forward(dim, args)`` (and ``{name}_cpu_backward(dim, args, adj_args)``) runs
every task index of a launch, one after another. jarp splits a launch of a kernel the race proofs allow to split
(`jarp.warp._plan._analysis._races`) into index ranges that run on several threads, so it needs an entry point that runs a
range. The per-task function it must call, ``{name}_cpu_kernel_forward<bool>`` (``_backward``), is ``static`` in
Warp's translation unit; jarp therefore compiles a companion object: the exact source Warp compiled for the module
build (`_warp_builds.loaded_build`), with one ranged entry point per kernel appended, built with the build's own
options (so each task's arithmetic is the same code, compiled the same way). The ranged entry copies the statements
of Warp's dispatch function (the runtime choice of the ``wp_linear_contiguous`` specialisation) verbatim.

This module generates that C++ (`ranged_cpu_entry`), caches the objects on disk and per loaded build, and checks
that Warp's generated code still has the shape it copies (`check_ranged_entries`). What it asks of Warp (the source
and options of a loaded build, compiling and loading an object) goes through `_upstream._warp_builds`.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import re
import threading
import weakref
from collections.abc import Callable
from typing import Any

import warp as wp

from ..._upstream import _warp_builds, _warp_kernels, _warp_launches

# Bump when the C++ `_ranged_appendix` emits changes: it is part of the companion objects' on-disk cache key.
RANGED_TEMPLATE_VERSION = 3
_RANGED_SUFFIX = "_jarp_cpu_forward_range"
_RANGED_BACKWARD_SUFFIX = "_jarp_cpu_backward_range"

# The tile-storage setup opening each of Warp's CPU dispatch functions (``codegen.cpu_module_template_forward``). The
# ranged entry leaves it out: on x86-64 ``wp::shared_tile_storage`` is a plain static (not thread-local), which
# concurrent ranges would race on, and only tile code reads it (kernels of a module that uses tiles get no ranged entry).
_TILE_SETUP = (
    "    wp::tile_shared_storage_t tile_mem;\n"
    "#if defined(WP_ENABLE_TILES_IN_STACK_MEMORY)\n"
    "    wp::shared_tile_storage = &tile_mem;\n"
    "#endif\n"
)
# Any use of Warp's tiles in generated code once the setup above is removed (tile builtins are ``wp::tile_*``).
_TILE_USE = re.compile(r"wp::(?:tile|shared_tile)|tile_shared_storage_t")
# Warp's forward entry point of one kernel (``codegen.cpu_module_entry_template_forward``).
_FORWARD_ENTRY = re.compile(
    r"WP_API void (?P<name>\w+)_cpu_forward\(\n"
    r"    wp::launch_bounds_t<(?P<ndim>\d+)> \*dim,\n"
    r"    wp_args_(?P=name) \*_wp_args\)\n"
    r"\{\n(?P<body>.*?)\n\}\n",
    re.DOTALL,
)
_RANGED_TEMPLATE = """
template <bool wp_linear_contiguous>
static WP_FORCEINLINE void {name}_jarp_cpu_forward_range_tasks(
    wp::launch_bounds_t<{ndim}> *dim,
    wp_args_{name} *_wp_args,
    size_t jarp_begin,
    size_t jarp_end)
{{
    for (size_t task_index = jarp_begin; task_index < jarp_end; ++task_index)
    {{
        {name}_cpu_kernel_forward<wp_linear_contiguous>(*dim, task_index, _wp_args);
    }}
}}

extern "C" WP_API void {name}{suffix}(
    wp::launch_bounds_t<{ndim}> *dim,
    wp_args_{name} *_wp_args,
    size_t jarp_begin,
    size_t jarp_end)
{{
    if (jarp_end > dim->size)
        jarp_end = dim->size;
{statements}}}
"""

# The same for Warp's backward entry point ``{name}_cpu_backward(dim, args, adj_args)`` (its per-task function
# ``{name}_cpu_kernel_backward<bool>``, its dispatch ``{name}_cpu_backward_dispatch``).
_RANGED_BACKWARD_TEMPLATE = """
template <bool wp_linear_contiguous>
static WP_FORCEINLINE void {name}_jarp_cpu_backward_range_tasks(
    wp::launch_bounds_t<{ndim}> *dim,
    wp_args_{name} *_wp_args,
    wp_args_{name} *_wp_adj_args,
    size_t jarp_begin,
    size_t jarp_end)
{{
    for (size_t task_index = jarp_begin; task_index < jarp_end; ++task_index)
    {{
        {name}_cpu_kernel_backward<wp_linear_contiguous>(
            *dim, task_index, _wp_args, _wp_adj_args);
    }}
}}

extern "C" WP_API void {name}{suffix}(
    wp::launch_bounds_t<{ndim}> *dim,
    wp_args_{name} *_wp_args,
    wp_args_{name} *_wp_adj_args,
    size_t jarp_begin,
    size_t jarp_end)
{{
    if (jarp_end > dim->size)
        jarp_end = dim->size;
{statements}}}
"""

# Loaded companion objects, by cache key (each loaded once per process, never unloaded), and per loaded Warp module
# build (``ModuleExec``) and direction (backward or not): the companion's symbol lookup (None if no kernel of it has a
# ranged entry) and, by mangled kernel name, why a kernel has none.
_ranged_objects: dict[str, Callable[[str], int]] = {}
_ranged_by_exec: weakref.WeakKeyDictionary[Any, dict[bool, tuple[Callable[[str], int] | None, dict[str, str]]]] = (
    weakref.WeakKeyDictionary()
)
_ranged_handles = itertools.count()


def ranged_entry_symbol(mangled_name: str, backward: bool = False) -> str:
    """The symbol of jarp's ranged entry point for a kernel's mangled name (``{name}_jarp_cpu_forward_range``)."""
    return mangled_name + (_RANGED_BACKWARD_SUFFIX if backward else _RANGED_SUFFIX)


def ranged_cpu_entry(kernel: wp.Kernel, entry: _warp_launches.EntryPoints, backward: bool = False) -> int:
    """The address of jarp's ranged CPU entry point of ``kernel`` in the module build ``entry`` came from; 0 if none.

    The forward entry point is ``extern "C" void {name}_jarp_cpu_forward_range(wp::launch_bounds_t<N>* dim,
    wp_args_{name}* args, size_t begin, size_t end)``: the arguments of Warp's ``{name}_cpu_forward`` (the launch
    bounds and the argument struct, as pointers) and a task range. It runs the task indices ``begin`` to
    ``min(end, dim->size)`` with the same per-task code, and the same runtime choice of Warp's contiguous-array
    specialisation, as Warp's entry point runs every index of the launch, so splitting a launch into ranges gives
    bit-identical results (for a kernel whose tasks do not interact; that is the caller's to establish). Ranges may
    run concurrently: the entry point touches no global state of its own. With ``backward``, the same for Warp's
    backward entry point: ``{name}_jarp_cpu_backward_range(dim, args, adj_args, begin, end)``.

    It lives in a companion object: the C++ Warp compiled for ``entry.module_exec`` (the ``.cpp`` Warp keeps next to
    the binary in its kernel cache, else Warp's code generation rerun with the build's options) with a ranged entry
    for each kernel appended, compiled with that build's options (``entry.build_options``); Warp's entry points of
    the other direction are made internal, so the compiler drops the code only they reach (a forward companion
    compiles no adjoint code; a backward one, built only for a split adjoint launch, no forward entry). The object
    is cached under ``wp.config.kernel_cache_dir``/``jarp-ranged`` by a hash of its source, its options, jarp's
    template version, Warp's version and the CPU target, so another process loads it without compiling, and is
    loaded once per process and never unloaded (the address stays valid for the life of the process).

    Returns 0 (and builds nothing) for kernels that are never split: a build with ``block_dim`` above 1 (cooperative
    CPU blocks), and the kernels of a module that uses tiles.

    Raises:
        ValueError: if ``entry`` is not a CPU entry.
        RuntimeError: if the build's source or options cannot be recovered (the module changed since an entry
            made outside `load_entry_points` was loaded), Warp's generated code no longer has the shape the ranged
            entry copies (see `check_ranged_entries`), or the companion failed to compile or load.
    """
    if not entry.device.is_cpu:
        raise ValueError(f"ranged entry points are CPU-only; kernel {kernel.key!r} was loaded on {entry.device}")
    if entry.block_dim != 1:
        return 0
    module_exec = entry.module_exec
    lock = _warp_kernels.warp_lock()
    with lock:
        name = _warp_builds.mangled_name(kernel, entry)
        companion = _ranged_by_exec.get(module_exec, {}).get(backward)
    job = None if companion is not None else _ranged_job(kernel, entry, backward)
    if job is not None:
        # The compile (seconds for a large module) runs without Warp's lock, so other Warp work goes on meanwhile;
        # two threads compiling the same object each replace it with the same file.
        key, source, build, refused = job
        path = _ranged_object(key, source, build, kernel.module.name) if source else ""
        with lock:
            companion = _ranged_by_exec.get(module_exec, {}).get(backward)
            if companion is None:
                lookup = None
                if source:
                    lookup = _ranged_objects.get(key)
                    if lookup is None:
                        lookup = _warp_builds.load_cpu_object(path, f"jarp_ranged_{key[:16]}_{next(_ranged_handles)}")
                        _ranged_objects[key] = lookup
                companion = (lookup, refused)
                _ranged_by_exec.setdefault(module_exec, {})[backward] = companion
    symbol = ranged_entry_symbol(name, backward)
    with lock:
        lookup, refused = companion  # pyright: ignore[reportGeneralTypeIssues]  # found or built above: not None
        if name in refused:
            return 0
        address = lookup(symbol) if lookup is not None else 0
    if not address:
        raise RuntimeError(
            f"jarp's ranged CPU entry point of kernel {kernel.key!r} ({symbol}) is missing from its companion object "
            f"of Warp module '{kernel.module.name}'"
        )
    return address


_BACKWARD_ENTRY = re.compile(r"^WP_API void (\w+)_cpu_backward\(", re.MULTILINE)
_FORWARD_ENTRY_HEAD = re.compile(r"^WP_API void (\w+)_cpu_forward\(", re.MULTILINE)


def _ranged_job(
    kernel: wp.Kernel, entry: _warp_launches.EntryPoints, backward: bool
) -> tuple[str, str, dict[str, Any], dict[str, str]]:
    """What to compile for the companion object of ``entry``'s module build, in one direction.

    Returns:
        ``(key, source, build options, refused)``: the object's cache key, the source with the ranged entries
        appended ("" when no kernel gets one), the ``build_cpu`` options and, by mangled name, why a kernel gets none.
    """
    source, build = _warp_builds.loaded_build(kernel, entry)
    appendix, refused = _ranged_appendix(source, backward)
    if not appendix:
        return "", "", {}, refused
    # The companion exports only the ranged entries: Warp's entry points of both directions, made internal and
    # unused, are dropped by the compiler with the code only they reach (a forward companion compiles no adjoint
    # code: about half the build).
    source = _BACKWARD_ENTRY.sub(r"static void \1_cpu_backward(", source)
    source = _FORWARD_ENTRY_HEAD.sub(r"static void \1_cpu_forward(", source)
    source += "\n// jarp: ranged CPU entry points (jarp/warp/_ffi/_native/_ranged.py, ranged_cpu_entry)\n" + appendix
    identity = (
        RANGED_TEMPLATE_VERSION,
        wp.__version__,
        _warp_builds.cpu_target_hash(build["extra_flags"]),
        sorted(build.items()),
        source,
    )
    key = hashlib.sha256(repr(identity).encode("utf-8")).hexdigest()
    return key, source, build, refused


def _ranged_object(key: str, source: str, build: dict[str, Any], module_name: str) -> str:
    """The path of the companion object ``key``, compiled now unless the cache has it (written atomically)."""
    directory = _warp_builds.kernel_cache_dir() / "jarp-ranged"
    directory.mkdir(parents=True, exist_ok=True)
    stem = key[:32]
    obj = directory / f"{stem}.o"
    if obj.exists():
        return str(obj)
    tag = f".p{os.getpid()}_t{threading.get_ident()}"
    cpp_tmp, obj_tmp = directory / f"{stem}{tag}.cpp", directory / f"{stem}{tag}.o"
    cpp_tmp.write_text(source, encoding="utf-8")
    try:
        _warp_builds.build_cpu_object(str(obj_tmp), str(cpp_tmp), build)
    except Exception as e:
        obj_tmp.unlink(missing_ok=True)
        raise RuntimeError(
            f"jarp failed to compile the ranged CPU entry points of Warp module '{module_name}' ({cpp_tmp}): {e}"
        ) from e
    os.replace(obj_tmp, obj)  # several processes may build it at once: each replaces it with the same object
    os.replace(cpp_tmp, directory / f"{stem}.cpp")
    return str(obj)


def _ranged_appendix(source: str, backward: bool = False) -> tuple[str, dict[str, str]]:
    """jarp's ranged entry points for the kernels of Warp's CPU module source, and why the others have none.

    Returns the C++ to append to ``source`` and, by mangled kernel name, the reason a kernel gets no ranged entry.
    With ``backward``, the ranged entries run Warp's backward code (`ranged_cpu_entry`).

    Raises:
        RuntimeError: if Warp's generated code no longer has the shape the ranged entry copies.
    """
    direction = "backward" if backward else "forward"
    args = "_wp_args, _wp_adj_args" if backward else "_wp_args"
    module_uses_tiles = bool(_TILE_USE.search(source.replace(_TILE_SETUP, "")))
    parts: list[str] = []
    refused: dict[str, str] = {}
    for match in _FORWARD_ENTRY.finditer(source):
        name, ndim, body = match["name"], match["ndim"], match["body"]
        if body != f"    {name}_cpu_forward_dispatch(dim, _wp_args);":
            if "wp_cpu_run_block" in body:
                refused[name] = "cooperative CPU blocks (block_dim > 1)"
                continue
            raise _codegen_changed(name, "its forward entry point no longer just calls its dispatch function")
        if module_uses_tiles:
            refused[name] = "its module uses tiles"
            continue
        if backward and f"WP_API void {name}_cpu_backward(" not in source:
            refused[name] = "its module is built without backward code"
            continue
        for piece, what in (
            (_kernel_head(name, ndim, backward), f"the per-task function ({direction})"),
            (_task_loop(name, ndim, backward), f"the task loop ({direction})"),
        ):
            if piece not in source:
                raise _codegen_changed(name, f"{what} changed")
        adj_param = f"    wp_args_{name} *_wp_adj_args)\n" if backward else ""
        head = (
            f"static WP_FORCEINLINE void {name}_cpu_{direction}_dispatch(\n"
            f"    wp::launch_bounds_t<{ndim}> *dim,\n"
            + (f"    wp_args_{name} *_wp_args,\n" + adj_param if backward else f"    wp_args_{name} *_wp_args)\n")
            + "{\n"
        )
        start = source.find(head)
        end = source.find("\n}\n", start)
        if start < 0 or end < 0:
            raise _codegen_changed(name, f"its {direction} dispatch function changed")
        dispatch = source[start + len(head) : end + 1]
        if not dispatch.startswith(_TILE_SETUP):
            raise _codegen_changed(name, f"its dispatch function ({direction}) lost the tile-storage setup")
        statements = dispatch[len(_TILE_SETUP) :]
        ranged = statements
        for flag in ("true", "false"):
            ranged = ranged.replace(
                f"{name}_cpu_{direction}_tasks<{flag}>(dim, {args});",
                f"{name}_jarp_cpu_{direction}_range_tasks<{flag}>(dim, {args}, jarp_begin, jarp_end);",
            )
        if ranged == statements or f"_cpu_{direction}_tasks" in ranged:
            raise _codegen_changed(name, f"its {direction} dispatch function no longer calls the task loop as expected")
        template = _RANGED_BACKWARD_TEMPLATE if backward else _RANGED_TEMPLATE
        suffix = _RANGED_BACKWARD_SUFFIX if backward else _RANGED_SUFFIX
        parts.append(template.format(name=name, ndim=ndim, suffix=suffix, statements=ranged))
    return "".join(parts), refused


def _kernel_head(name: str, ndim: str, backward: bool = False) -> str:
    """The head of Warp's per-task function (``codegen.cpu_kernel_template_forward`` / ``_backward``)."""
    args = (
        f"    wp_args_{name} *_wp_args,\n    wp_args_{name} *_wp_adj_args)\n"
        if backward
        else f"    wp_args_{name} *_wp_args)\n"
    )
    return (
        "template <bool wp_linear_contiguous>\n"
        f"static void {name}_cpu_kernel_{'backward' if backward else 'forward'}(\n"
        f"    wp::launch_bounds_t<{ndim}> dim,\n"
        "    size_t task_index,\n" + args + "{\n"
    )


def _task_loop(name: str, ndim: str, backward: bool = False) -> str:
    """Warp's task loop (``codegen.cpu_module_template_forward`` / ``_backward``): every task index, one per-task
    call, nothing else."""
    if backward:
        params = f"    wp_args_{name} *_wp_args,\n    wp_args_{name} *_wp_adj_args)\n"
        call = (
            f"        {name}_cpu_kernel_backward<wp_linear_contiguous>(\n"
            "            *dim, task_index, _wp_args, _wp_adj_args);\n"
        )
    else:
        params = f"    wp_args_{name} *_wp_args)\n"
        call = f"        {name}_cpu_kernel_forward<wp_linear_contiguous>(*dim, task_index, _wp_args);\n"
    return (
        "template <bool wp_linear_contiguous>\n"
        f"static WP_FORCEINLINE void {name}_cpu_{'backward' if backward else 'forward'}_tasks(\n"
        f"    wp::launch_bounds_t<{ndim}> *dim,\n" + params + "{\n"
        "    for (size_t task_index = 0; task_index < dim->size; ++task_index)\n"
        "    {\n" + call + "    }\n"
        "}\n"
    )


def _codegen_changed(name: str, what: str) -> RuntimeError:
    return RuntimeError(
        f"Warp's generated CPU code for kernel {name} does not have the shape jarp's ranged entry points copy "
        f"({what}; warp-lang {wp.__version__}): update jarp/warp/_ffi/_native/_ranged.py."
    )


def check_ranged_entries() -> None:
    """Raise `AssertionError` if Warp's CPU code generation changed where jarp's ranged entry points depend on it.

    It generates (without compiling) the CPU source of a probe module, with a kernel that takes Warp's contiguous
    1-D specialisation and a 2-D kernel, and checks that each gets a ranged entry point copying Warp's dispatch,
    (Warp's side of the build, the options and the source of a loaded build, is checked by
    `_warp_builds.check_internals`.)
    """
    templates = _warp_builds.cpu_codegen_templates()
    assert "static void {name}_cpu_kernel_forward(" in templates["kernel_forward"], (
        "Warp's per-task CPU function changed"
    )
    assert "template <bool wp_linear_contiguous>" in templates["kernel_forward"], (
        "Warp's per-task CPU function is no longer templated on wp_linear_contiguous"
    )
    tasks = templates["module_forward"]
    assert "for (size_t task_index = 0; task_index < dim->size; ++task_index)" in tasks, "Warp's CPU task loop changed"
    assert "{name}_cpu_kernel_forward<wp_linear_contiguous>(*dim, task_index, _wp_args);" in tasks, (
        "Warp's CPU task loop no longer calls the per-task function once per task index"
    )
    assert "static void {name}_cpu_kernel_backward(" in templates["kernel_backward"], (
        "Warp's per-task CPU backward function changed"
    )
    assert _TILE_SETUP in templates["module_backward"], "Warp's CPU backward dispatch changed"
    assert _TILE_SETUP in tasks, "Warp's CPU dispatch no longer sets up tile storage as jarp's ranged entry expects"
    with _warp_kernels.warp_lock():
        module = wp.get_module("jarp._ranged_probe")
        linear = wp.Kernel(_ranged_probe_linear, key="_jarp_ranged_probe_linear", module=module)
        grid = wp.Kernel(_ranged_probe_grid, key="_jarp_ranged_probe_grid", module=module)
    source = _warp_builds.module_codegen(module, "cpu", block_dim=1)
    appendix, refused = _ranged_appendix(source)
    assert refused == {}, f"the probe kernels got no ranged entry points: {refused}"
    if module.options.get("enable_backward", True):
        # the companion makes Warp's backward entry points internal (`_ranged_job`): they must still look so
        assert len(_BACKWARD_ENTRY.findall(source)) == 2, "Warp's CPU backward entry points changed (_BACKWARD_ENTRY)"
    backward, refused = _ranged_appendix(source, backward=True)
    assert refused == {}, f"the probe kernels got no ranged backward entry points: {refused}"
    assert len(_FORWARD_ENTRY_HEAD.findall(source)) == 2, "Warp's CPU forward entry points changed"
    for kernel, flags in ((linear, ("true", "false")), (grid, ("false",))):
        name = kernel.get_mangled_name()
        assert f"WP_API void {ranged_entry_symbol(name)}(" in appendix, f"no ranged entry point for {kernel.key}"
        assert f"WP_API void {ranged_entry_symbol(name, True)}(" in backward, f"no ranged backward for {kernel.key}"
        for flag in flags:
            assert f"{name}_jarp_cpu_forward_range_tasks<{flag}>(dim, _wp_args, jarp_begin, jarp_end);" in appendix, (
                f"the ranged entry point of {kernel.key} does not take Warp's <{flag}> specialisation"
            )
            call = f"{name}_jarp_cpu_backward_range_tasks<{flag}>(dim, _wp_args, _wp_adj_args, jarp_begin, jarp_end);"
            assert call in backward, f"the ranged backward entry of {kernel.key} does not take Warp's <{flag}> case"
    assert re.search(
        r"const bool wp_linear_contiguous = dim->coord_mult == 1 && \(.*strides\[0\] == \(int\)sizeof", appendix
    ), "Warp's runtime test for the contiguous specialisation changed"


def _ranged_probe_linear(a: wp.array(dtype=float), b: wp.array(dtype=float)) -> None:  # pyright: ignore[reportInvalidTypeForm]  # Warp kernel annotations
    i = wp.tid()
    b[i] = a[i] * 2.0


def _ranged_probe_grid(a: wp.array2d(dtype=float)) -> None:  # pyright: ignore[reportInvalidTypeForm]  # Warp kernel annotation
    i, j = wp.tid()  # pyright: ignore[reportAssignmentType, reportGeneralTypeIssues]  # a 2-D launch: two indices
    a[i, j] = float(i + j)
