"""Race freedom of a kernel: whether its CPU launch may be split into index ranges run concurrently.

A Warp CPU launch runs its threads one after another. Split into index ranges on several cores, it computes the
same result only when no two threads touch the same memory with one of them writing. `_analysis.race_free_blocker`
proves that of one function's source (every write at the thread's own index, no atomics, tiles or printing); this
module follows the functions the kernel calls, resolving each name as Warp does (`_names`: closure, globals, the
``warp`` module, Python's builtins), into every ``@wp.func`` body, which must write no array at all. A builtin is checked by
its name (`_analysis.racy_call`); anything that cannot be resolved or read refuses.
"""

from __future__ import annotations

import types
from collections.abc import Sequence
from typing import Any

import warp as wp

from .._upstream import _warp_internals
from . import _analysis, _names, _writes
from ._arg_spec import ArgSpec
from ._struct_layout import _is_value_type
from ._values import Runs

_MAX_DEPTH = 8  # deep enough for real code, bounded for recursive functions


def plan_race_free(
    runs: Runs,
    adjoint: bool,
    target: Any,
    params: Sequence[ArgSpec],
    block_dim: int | None,
    bounds_checked: bool,
    launch_dims: tuple[int, ...],
) -> bool:
    """`Plan.race_free` of a plan with these fields (`_builder.build_plan`; `_describe` for a rebuilt plan).

    Only a forward kernel launch qualifies: an adjoint accumulates with atomics, a block dim above 1 may run
    cooperative tiles, and a bounds-checked build runs under jarp's guard, which reports the first failed check
    of the launch (one thread at a time).
    """
    if runs is not Runs.KERNEL or adjoint or block_dim not in (None, 1) or bounds_checked:
        return False
    return race_blocker(target, params, len(launch_dims)) is None


def race_blocker(kernel: wp.Kernel, params: Sequence[ArgSpec], launch_ndim: int) -> str | None:
    """Why ``kernel``'s threads may touch each other's memory, or None when its launch may be split.

    Args:
        kernel: the kernel overload (or runtime-scalar variant) a plan launches.
        params: its parameters' specs (a signature's, or a plan's params' ``spec``): the arrays, struct array
            fields and their dims.
        launch_ndim: the number of launch dims: the kernel must name one thread index per dim.

    Returns:
        A short reason naming the construct and its line (``"line 5: wp.atomic_add"``; a called function's
        reason follows the call's), or None.
    """
    arrays: list[tuple[str, int]] = []
    structs: list[str] = []
    for spec in params:
        if spec.is_struct:
            structs.append(spec.name)
            arrays.extend((leaf.name, leaf.spec.warp_ndim) for leaf in spec.struct.arrays)
        elif spec.is_array:
            arrays.append((spec.name, spec.warp_ndim))
    if not warps_thread_index(kernel):
        return "a function named tid that is not Warp's wp.tid"
    # What Warp compiles decides what is written (`_writes`); where it sees a write that the proof below does
    # not, the proof checks that array's uses too, and refuses any not at the thread index
    names = tuple(name for name, _ in arrays if "." not in name)
    written = (*_writes.written_inputs(kernel, names), *_writes.written_struct_fields(kernel, tuple(structs)))
    reason, calls = _analysis.race_free_blocker(
        _warp_internals.kernel_source(kernel),
        tuple(arrays),
        tuple(structs),
        launch_ndim=launch_ndim,
        written=tuple(sorted(written)),
    )
    return reason or _calls_blocker(kernel.func, calls, 0)


def warps_thread_index(kernel: Any) -> bool:
    """Whether every call named like the thread index in ``kernel`` (``wp.tid()``, ``tid()``) is Warp's ``wp.tid``.

    The source analyses (`_analysis.race_free_blocker`, ``overwritten_outputs``, ``tid_indexed``) recognise the
    thread index by its name; a user function called ``tid`` would pass for it. False also for a source jarp cannot
    read.
    """
    calls = _analysis.called_names(_warp_internals.kernel_source(kernel))
    if calls is None:
        return False
    for name, _ in calls:
        if name is None or name.rsplit(".", 1)[-1] != "tid":
            continue
        obj = _names.resolve_path(kernel.func, name)
        if obj is _names.MISSING:
            # Not a Python name: Warp looks it up among its builtins (``wp.tid`` is not a module attribute; a bare
            # ``tid`` with no such global), unless the path's root is some other object
            if "." in name and _names.resolve_path(kernel.func, name.rsplit(".", 1)[0]) is not wp:
                return False
        elif not (isinstance(obj, wp.Function) and obj.is_builtin() and obj.key == "tid"):
            return False
    return True


def plan_shares_cpu_state(
    runs: Runs, target: Any, block_dim: int | None, bounds_checked: bool, race_free: bool
) -> bool:
    """`Plan.shares_cpu_state` of a plan with these fields (`_builder.build_plan`; `_describe` for a rebuilt plan).

    Only a kernel with one thread per block, unchecked, may run several launches at once (cooperative blocks and
    bounds-checked builds run on jarp's Python path, one launch at a time); a race-free one uses no tiles and
    prints nothing, so it qualifies without another look.
    """
    if runs is not Runs.KERNEL or block_dim not in (None, 1) or bounds_checked:
        return True
    return not race_free and sharing_blocker(target) is not None


def sharing_blocker(kernel: Any, depth: int = 0) -> str | None:
    """Why two launches of ``kernel`` (or ``@wp.func``) at once would share state, or None.

    They would when it, or a function it calls, uses tiles or prints (`_analysis.sharing_call`), calls a native
    snippet, or cannot be read (no source, a computed callee, functions nested too deep). Atomics and stores
    anywhere are fine: each launch of a batch slice writes its own slice's buffers.

    Returns:
        A short reason naming the construct and its line, or None.
    """
    if getattr(kernel, "native_snippet", None) is not None:
        return "a native snippet (wp.func_native), which jarp cannot read"
    if depth >= _MAX_DEPTH:
        return "functions nested too deep to follow"
    calls = _analysis.called_names(_warp_internals.kernel_source(kernel))
    if calls is None:
        return "source jarp cannot read"
    for name, line in calls:
        if name is None:
            return f"line {line}: a computed callee"
        if _analysis.sharing_call(name):
            return f"line {line}: {name}"
        obj = _names.resolve_path(kernel.func, name)
        if obj is _names.UNREADABLE:
            return f"line {line}: {name}: not readable"
        if isinstance(obj, wp.Function):
            if obj.is_builtin():
                if _analysis.sharing_call(obj.key):
                    return f"line {line}: {name}: the builtin {obj.key}"
                continue
            for overload in dict.fromkeys([obj, *getattr(obj, "user_overloads", {}).values()]):
                # its custom adjoint and replay functions (``@wp.func_grad``, ``@wp.func_replay``) run in the adjoint
                for fn in (
                    overload,
                    getattr(overload, "custom_grad_func", None),
                    getattr(overload, "custom_replay_func", None),
                ):
                    if fn is None:
                        continue
                    reason = sharing_blocker(fn, depth + 1) if getattr(fn, "adj", None) else "no source"
                    if reason is not None:
                        return f"line {line}: {name}: {reason}"
        elif _analysis.sharing_call(getattr(obj, "__name__", None) or ""):
            return f"line {line}: {name}: a builtin that shares state under another name"
    return None


def _calls_blocker(func: Any, calls: tuple[tuple[str, int], ...], depth: int) -> str | None:
    for name, line in calls:
        obj = _names.resolve_path(func, name)
        reason = _callee_blocker(_names.MISSING if obj is _names.UNREADABLE else obj, name, func, depth)
        if reason is not None:
            return f"line {line}: {name}: {reason}"
    return None


def _callee_blocker(obj: Any, name: str, caller: Any, depth: int) -> str | None:
    """Why calling ``obj`` (resolved from the dotted ``name``) may race, or None."""
    if isinstance(obj, wp.Function):
        if obj.is_builtin():
            return f"the builtin {obj.key}" if _analysis.racy_call(obj.key) else None
        return _function_blocker(obj, depth)
    if obj is _names.MISSING:
        # ``wp.tid``, ``wp.dot`` spelled through the module: Warp looks the last name up among its builtins
        # (and fails to build if it is none), so the name alone decides; any other missing name cannot be read.
        head = _names.resolve(caller, name.split(".", 1)[0]) if "." in name else _names.MISSING
        return None if head is wp else "not found"
    if _analysis.racy_call(getattr(obj, "__name__", None) or ""):
        return "a racy builtin under another name"
    if obj is wp.static:
        return None
    if isinstance(obj, type) or _warp_internals.is_struct_type(obj):
        return None  # a constructor: scalar, vector, matrix, struct (value types), range
    if isinstance(obj, types.BuiltinFunctionType) and getattr(obj, "__module__", None) == "builtins":
        return None  # min, max, abs, len...: Warp calls its builtin of the same name
    if callable(obj) and (getattr(obj, "__module__", None) or "").split(".")[0] == "warp":
        return None  # ``wp.types.vector(...)``: Warp calls its builtin named ``last`` (checked above) or fails to build
    return f"not a Warp function ({type(obj).__name__})"


def _function_blocker(fn: Any, depth: int) -> str | None:
    """Why a user ``@wp.func`` (each of its overloads) may write memory or race, or None."""
    if getattr(fn, "native_snippet", None) is not None:
        return "a native snippet (wp.func_native), which jarp cannot read"
    if depth >= _MAX_DEPTH:
        return "functions nested too deep to follow"
    overloads = [fn, *getattr(fn, "user_overloads", {}).values()]
    for overload in dict.fromkeys(overloads):
        if getattr(overload, "adj", None) is None:
            return "a function without Python source"
        arrays: list[tuple[str, int]] = []
        others: list[str] = []
        for label, warp_type in _warp_internals.kernel_params(overload):
            if wp.types.is_array(warp_type):
                arrays.append((label, warp_type.ndim))
            elif not _is_value(warp_type):
                others.append(label)  # a struct, Any or another type that may hold arrays: stores into it refused
        reason, calls = _analysis.race_free_blocker(
            _warp_internals.kernel_source(overload), tuple(arrays), tuple(others), in_function=True
        )
        reason = reason or _calls_blocker(overload.func, calls, depth + 1)
        if reason is not None:
            return reason
    return None


def _is_value(warp_type: Any) -> bool:
    """A scalar, vector, matrix, quaternion or transform: passed by value, holding no array."""
    return warp_type in (int, float, bool) or _is_value_type(warp_type)
