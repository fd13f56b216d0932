"""Race freedom of a kernel: whether its CPU launch may be split into index ranges run concurrently.

A Warp CPU launch runs its threads one after another. Split into index ranges on several cores, it computes the
same result only when no two threads touch the same memory with one of them writing. `_ownership.race_free_blocker`
proves that of one function's source (every write at the thread's own index, no atomics, tiles or printing); this
module follows the functions the kernel calls, resolving each name as Warp does (`_names`: closure, globals, the
``warp`` module, Python's builtins), into every ``@wp.func`` body, which must write no array at all. A builtin is checked by
its name (`_builtins.racy_call`); anything that cannot be resolved or read refuses. The C++ Warp generates has the last
word (`_generated.race_veto`, `_generated.private_veto`): code the source never shows (a user function Warp calls for
an operator, a reference parameter, a native snippet) keeps the launch whole.
"""

from __future__ import annotations

import re
import types
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import warp as wp

from ..._upstream import _warp_codegen, _warp_kernels, _warp_types
from .._arg_spec import ArgSpec
from .._struct_layout import passed_by_value
from .._values import Buffer, Param, Runs
from . import _builtins, _generated, _names, _ownership, _writes

_MAX_DEPTH = 8  # deep enough for real code, bounded for recursive functions


class SplitProofs(NamedTuple):
    """What the proofs say of a forward launch (`split_proofs`)."""

    race_free: bool  # `Plan.race_free`: every thread writes only at its own index
    private: tuple[tuple[str, str], ...]  # the accumulated arrays and their combinations (`Plan.private`), if not


def split_proofs(
    runs: Runs,
    target: Any,  # a kernel where runs is Runs.KERNEL (the only case looked into), else the function
    params: Sequence[ArgSpec],
    block_dim: int | None,
    bounds_checked: bool,
    launch_dims: tuple[int, ...],
) -> SplitProofs:
    """Whether the forward launch of a plan with these fields may be split into index ranges, and how.

    For `_builder.build_plan`, and `_content` for a rebuilt plan (an adjoint plan's launch: `adjoint_split_proofs`).
    Only a kernel launch with one thread per block, unchecked,
    qualifies: a block dim above 1 may run cooperative tiles, and a bounds-checked build runs under jarp's guard,
    which reports the first failed check of the launch (one thread at a time). It is race-free (`race_blocker`), or
    else its only obstacle may be accumulation into output or in-out arrays of 32- or 64-bit elements
    (`private_blocker`): each range then accumulates into its own copy of those.
    """
    if runs is not Runs.KERNEL or block_dim not in (None, 1) or bounds_checked:
        return SplitProofs(False, ())
    ndim = len(launch_dims)
    if race_blocker(target, params, ndim) is None:
        return SplitProofs(True, ())
    reason, accumulated = private_blocker(target, params, ndim)
    return SplitProofs(False, () if reason is not None else accumulated)


# Builtins whose adjoints write memory of their own (a volume's gradient grid; the mesh adjoints that Warp marks as
# missing would write the mesh's points' gradients): a backward launch that calls one stays whole.
_GEOMETRY_ADJOINTS = re.compile(r"\bwp::(?:mesh|volume)_\w+\(")


def adjoint_split_proofs(
    runs: Runs,
    target: Any,  # a kernel where runs is Runs.KERNEL (the only case looked into), else the function
    params: Sequence[Param],
    results: Sequence[Buffer],
    block_dim: int | None,
    bounds_checked: bool,
    launch_dims: tuple[int, ...],
    forward: SplitProofs | None = None,
) -> tuple[bool, tuple[tuple[int, str], ...]]:
    """Whether the backward launch of an adjoint plan with these fields may be split into index ranges, and how.

    Warp's backward entry point runs each thread's forward code again without its stores and atomics, then its
    adjoint. Besides the thread's own variables, the adjoint touches the adjoints of the arrays the forward code
    uses, at the indices it used: it reads the cotangent of an element the forward code stored or accumulated into
    (and clears a stored element's cotangent after reading it), and accumulates, with plain read-modify-writes on
    the CPU, into the adjoint of an element it read. So when the forward launch may be split (`split_proofs`: each
    thread stores only at its own index and reads a written array only there, or else only accumulates into it),
    the adjoints of written arrays are touched as their arrays were, at one thread's own index or read-only, and
    the backward launch may be split with each index range accumulating into its own copy of the adjoints of the
    arrays the kernel does not write (combined by sum). An adjoint of source none (an operand JAX does not
    differentiate) and an integer array's adjoint (Warp accumulates nothing into those) need no copy.

    It refuses a kernel Warp's record cannot describe, a called ``@wp.func`` whose adjoint is the user's or native
    code (``@wp.func_grad``, ``@wp.func_replay``, ``@wp.func_native``: what it writes is unknown), mesh and volume
    queries (their adjoints write the structure's gradients), and a differentiated struct parameter (the adjoints
    of its array fields are not copied).

    ``forward`` is `split_proofs` of the same fields where the caller has it already (computed here otherwise).

    Returns:
        ``(race_free, private)`` for the adjoint plan: ``(False, ())`` where the launch stays whole, else whether it
        needs no copy at all, and ``Plan.private``: the adjoint results accumulated into, each with ``"add"``.
    """
    specs = tuple(p.spec for p in params)
    if forward is None:
        forward = split_proofs(runs, target, specs, block_dim, bounds_checked, launch_dims)
    if not (forward.race_free or forward.private):
        return False, ()
    # (a split launch runs one thread per block: the record of the CPU build, the one `_writes` keeps)
    record = _writes.codegen_record(target)
    if record.access is None or record.custom_adjoints:
        return False, ()
    if any(_GEOMETRY_ADJOINTS.search(line) for _, lines, _ in record.forward_code for line in lines):
        return False, ()
    # The arrays written, by Warp's record and jarp's resolver (`_writes`). Warp's record marks the arrays it stores
    # into reliably, but not every read (a vector element read through its address is not marked): an array not
    # written is taken as read.
    written = set(_kernel_arrays(target, specs).written)
    private: list[tuple[int, str]] = []
    for p in params:
        spec = p.spec
        if spec.is_struct and p.adjoint.source != "none":
            return False, ()
        if not spec.is_array or p.adjoint.source == "none" or spec.name in written:
            continue
        if p.adjoint.source != "result" or p.primal.source != "operand":
            return False, ()
        dtype = np.dtype(results[p.adjoint.index].dtype)
        if dtype.name in ("float32", "float64"):
            private.append((p.adjoint.index, "add"))
        elif dtype.kind not in "biu":  # Warp accumulates nothing into an integer or boolean adjoint
            return False, ()
    return not private, tuple(private)


class _Arrays(NamedTuple):
    """A kernel's arrays as the proofs see them (`_kernel_arrays`)."""

    arrays: tuple[tuple[str, int], ...]  # (path, ndim) of each array parameter and struct array field
    structs: tuple[str, ...]  # the struct parameters
    written: tuple[str, ...]  # those Warp's record sees written (`_writes`), sorted


def _kernel_arrays(kernel: wp.Kernel, params: Sequence[ArgSpec]) -> _Arrays:
    arrays: list[tuple[str, int]] = []
    structs: list[str] = []
    for spec in params:
        if spec.is_struct:
            structs.append(spec.name)
            arrays.extend((leaf.name, leaf.spec.warp_ndim) for leaf in spec.struct.arrays)
        elif spec.is_array:
            arrays.append((spec.name, spec.warp_ndim))
    # What Warp compiles decides what is written (`_writes`); where it sees a write that a proof does not, the
    # proof checks that array's uses too
    names = tuple(name for name, _ in arrays if "." not in name)
    written = (*_writes.written_inputs(kernel, names), *_writes.written_struct_fields(kernel, tuple(structs)))
    return _Arrays(tuple(arrays), tuple(structs), tuple(sorted(written)))


def race_blocker(kernel: wp.Kernel, params: Sequence[ArgSpec], launch_ndim: int) -> str | None:
    """Why ``kernel``'s threads may touch each other's memory, or None when its launch may be split.

    Args:
        kernel: the kernel overload (or runtime-scalar variant) a plan launches.
        params: its parameters' specs (a signature's, or a plan's params' ``spec``): the arrays, struct array
            fields and their dims.
        launch_ndim: the number of launch dims: the kernel must name one thread index per dim.

    Returns:
        A short reason naming the construct and its line (``"line 5: wp.atomic_add"``; a called function's
        reason follows the call's), or the generated code's (`_generated.race_veto`: a write outside the kernel's own
        plain stores), or None.
    """
    if not warps_thread_index(kernel):
        return "a function named tid that is not Warp's wp.tid"
    # an array Warp sees written but the proof does not is checked for uses off the thread index
    k = _kernel_arrays(kernel, params)
    reason, calls = _ownership.race_free_blocker(
        _warp_kernels.kernel_source(kernel), k.arrays, k.structs, launch_ndim=launch_ndim, written=k.written
    )
    # and the generated code must agree: every write a plain store in the kernel's own code
    reason = reason or _calls_blocker(kernel.func, calls, 0)
    return reason or _generated.race_veto(_generated_code(kernel), [name for name, _ in k.arrays])


# The element scalars a combination of per-range copies supports, in the order of the native handler's scalar codes
# (`PrivateSpec.scalar` in `_ffi/_native/_handler.cpp`).
PRIVATE_SCALARS = ("float32", "float64", "int32", "int64", "uint32", "uint64")


def private_results(params: Sequence[Param], private: tuple[tuple[str, str], ...]) -> tuple[tuple[int, str], ...]:
    """`Plan.private` from the accumulated array parameters (`split_proofs`): their result buffers, in order."""
    by_name = dict(private)
    return tuple(
        (p.primal.index, by_name[p.spec.name]) for p in params if p.spec.name in by_name and p.primal.source == "result"
    )


def private_blocker(
    kernel: wp.Kernel, params: Sequence[ArgSpec], launch_ndim: int
) -> tuple[str | None, tuple[tuple[str, str], ...]]:
    """Why ``kernel``'s launch cannot be split with private copies of its accumulated arrays, or what it accumulates.

    The kernel (and each ``@wp.func`` it passes an accumulated array to, followed as Warp resolves it) must
    qualify under `_ownership.accumulation_blocker`; every other function it calls must write no array; and the
    generated code must agree (`_generated.private_veto`: accumulated arrays written only by their atomics).

    Returns:
        ``(reason, ())`` where it cannot, else ``(None, ((array, combination), ...))`` in parameter order, the
        combination ``"add"``, ``"min"`` or ``"max"``.
    """
    candidates = tuple(
        spec.name
        for spec in params
        if spec.is_array and not spec.generic and getattr(spec.scalar_type, "__name__", "") in PRIVATE_SCALARS
    )
    if not candidates:
        return "no array it may accumulate into", ()
    if not warps_thread_index(kernel):
        return "a function named tid that is not Warp's wp.tid", ()
    k = _kernel_arrays(kernel, params)
    reason, found = _ownership.accumulation_blocker(
        _warp_kernels.kernel_source(kernel),
        k.arrays,
        k.structs,
        candidates,
        launch_ndim=launch_ndim,
        written=k.written,
    )
    if reason is not None or found is None:
        return reason or "unknown", ()
    combined, reason = _follow(kernel.func, found, 0)
    if reason is None and not combined:
        reason = "nothing accumulated (race-free or not at all)"
    if reason is None:  # the generated code must agree: accumulations by their atomics, other writes plain stores
        reason = _generated.private_veto(_generated_code(kernel), [name for name, _ in k.arrays], combined)
    if reason is not None:
        return reason, ()
    return None, tuple((spec.name, combined[spec.name]) for spec in params if spec.name in combined)


def _generated_code(kernel: wp.Kernel) -> tuple[_warp_codegen.GeneratedFunction, ...]:
    """The kernel's generated functions (`_writes.codegen_record`); none where Warp could not generate them."""
    record = _writes.codegen_record(kernel)
    return record.functions if record.error is None else ()


def _follow(func: object, found: _ownership.Accumulation, depth: int) -> tuple[dict[str, str], str | None]:
    """The combinations of one function's accumulations, its passes followed; or the reason it does not qualify.

    Every call that receives no candidate must write no array (`_calls_blocker`); each pass of a candidate is
    followed into the callee's parameter. A candidate accumulated anywhere may be used for nothing else.
    """
    combined = dict(found.accumulated)
    read: dict[str, str] = dict(found.other_uses)
    passing = {name for name, _, _, _ in found.passes}
    reason = _calls_blocker(func, tuple(c for c in found.calls if c[0] not in passing), depth)
    if reason is not None:
        return {}, reason
    for name, position, path, line in found.passes:
        verdict, reason = _param_accumulation(func, name, position, depth + 1)
        if reason is not None:
            return {}, f"line {line}: {name}: {reason}"
        if verdict == "read":
            read.setdefault(path, f"line {line}: passed to {name}, which reads it")
        elif verdict is not None and combined.setdefault(path, verdict) != verdict:
            return {}, f"array {path!r} is accumulated both as a {combined[path]} and as a {verdict}"
    for path in combined:
        if path in read:
            return {}, f"the accumulated array {path!r} is used other than to accumulate ({read[path]})"
    return combined, None


def _param_accumulation(caller: object, name: str, position: int, depth: int) -> tuple[str | None, str | None]:
    """What the function ``name`` (resolved from ``caller``) does with its positional parameter ``position``.

    Returns:
        ``(combination, None)`` where every overload only accumulates into it; ``("read", None)`` where one uses it
        otherwise (reads it); ``(None, None)`` where none touches it; ``(None, reason)`` where the function cannot be
        followed or writes other memory.
    """
    if depth >= _MAX_DEPTH:
        return None, "functions nested too deep to follow"
    fn = _names.resolve_path(caller, name)
    if not isinstance(fn, wp.Function) or fn.is_builtin():
        return None, "not a @wp.func jarp can follow with an accumulated array"
    if getattr(fn, "native_snippet", None) is not None:
        return None, "a native snippet (wp.func_native), which jarp cannot read"
    verdicts: set[str | None] = set()
    for overload in dict.fromkeys([fn, *getattr(fn, "user_overloads", {}).values()]):
        if getattr(overload, "adj", None) is None:
            return None, "a function without Python source"
        labels = _warp_kernels.kernel_params(overload)
        if position >= len(labels) or not wp.types.is_array(labels[position][1]):
            return None, "the array goes to a parameter that is not a plain array"
        param = labels[position][0]
        arrays = tuple((label, t.ndim) for label, t in labels if wp.types.is_array(t))
        others = tuple(label for label, t in labels if not wp.types.is_array(t) and not passed_by_value(t))
        reason, found = _ownership.accumulation_blocker(
            _warp_kernels.kernel_source(overload), arrays, others, (param,), in_function=True
        )
        if reason is not None or found is None:
            return None, reason or "unknown"
        combined, reason = _follow(overload.func, found, depth)
        if reason is not None:
            return None, reason
        verdicts.add(combined.get(param, "read" if param in found.other_uses else None))
    if len(verdicts) != 1:
        return None, f"its overloads treat the array differently ({sorted(map(str, verdicts))})"
    return verdicts.pop(), None


_LOOP_LABEL = re.compile(r"^\s*start_\w+_\d+:")


def work_estimate(kernel: wp.Kernel) -> int:
    """A rough cost of one thread of ``kernel``: the statements Warp generates for it, counted 64 times with a loop.

    The kernel's statements and those of each ``@wp.func`` it calls, once each; with a loop Warp does not unroll
    (over a query, a ``while``, a range not known when it builds), the total counts 64 times. It decides only whether
    a launch with few threads is worth the build of its ranged entry point (the handler then times it).
    """
    total, loops = 0, False
    for _, lines, _ in _writes.forward_code(kernel):
        code = [line for line in lines if not line.lstrip().startswith("//")]
        total += len(code)
        loops = loops or any(_LOOP_LABEL.match(line) for line in code)
    return total * (64 if loops else 1)


def warps_thread_index(kernel: wp.Kernel | wp.Function) -> bool:
    """Whether every call named like the thread index in ``kernel`` (``wp.tid()``, ``tid()``) is Warp's ``wp.tid``.

    The source analyses (`_ownership.race_free_blocker`, ``overwritten_outputs``, ``tid_indexed``) recognise the
    thread index by its name; a user function called ``tid`` would pass for it. False also for a source jarp cannot
    read.
    """
    calls = _builtins.called_names(_warp_kernels.kernel_source(kernel))
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
    runs: Runs, target: wp.Kernel | Callable[..., object], block_dim: int | None, bounds_checked: bool, race_free: bool
) -> bool:
    """`Plan.shares_cpu_state` of a plan with these fields (`_builder.build_plan`; `_content` for a rebuilt plan).

    Only a kernel with one thread per block, unchecked, may run several launches at once (cooperative blocks and
    bounds-checked builds run on jarp's Python path, one launch at a time); a race-free one uses no tiles and
    prints nothing, so it qualifies without another look.
    """
    if runs is not Runs.KERNEL or block_dim not in (None, 1) or bounds_checked:
        return True
    # a kernel plan's target is a kernel
    return not race_free and sharing_blocker(target) is not None  # pyright: ignore[reportArgumentType]


def sharing_blocker(kernel: wp.Kernel | wp.Function, depth: int = 0) -> str | None:
    """Why two launches of ``kernel`` (or ``@wp.func``) at once would share state, or None.

    They would when it, or a function it calls, uses tiles or prints (`_builtins.sharing_call`), calls a native
    snippet, or cannot be read (no source, a computed callee, functions nested too deep). Atomics and stores
    anywhere are fine: each launch of a batch slice writes its own slice's buffers.

    Returns:
        A short reason naming the construct and its line, or None.
    """
    if getattr(kernel, "native_snippet", None) is not None:
        return "a native snippet (wp.func_native), which jarp cannot read"
    if depth >= _MAX_DEPTH:
        return "functions nested too deep to follow"
    calls = _builtins.called_names(_warp_kernels.kernel_source(kernel))
    if calls is None:
        return "source jarp cannot read"
    for name, line in calls:
        if name is None:
            return f"line {line}: a computed callee"
        if _builtins.sharing_call(name):
            return f"line {line}: {name}"
        obj = _names.resolve_path(kernel.func, name)
        if obj is _names.UNREADABLE:
            return f"line {line}: {name}: not readable"
        if isinstance(obj, wp.Function):
            if obj.is_builtin():
                if _builtins.sharing_call(obj.key):
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
        elif _builtins.sharing_call(getattr(obj, "__name__", None) or ""):
            return f"line {line}: {name}: a builtin that shares state under another name"
    return None


def _calls_blocker(func: object, calls: tuple[tuple[str, int], ...], depth: int) -> str | None:
    for name, line in calls:
        obj = _names.resolve_path(func, name)
        reason = _callee_blocker(_names.MISSING if obj is _names.UNREADABLE else obj, name, func, depth)
        if reason is not None:
            return f"line {line}: {name}: {reason}"
    return None


def _callee_blocker(obj: object, name: str, caller: object, depth: int) -> str | None:
    """Why calling ``obj`` (resolved from the dotted ``name``) may race, or None."""
    if isinstance(obj, wp.Function):
        if obj.is_builtin():
            return f"the builtin {obj.key}" if _builtins.racy_call(obj.key) else None
        return _function_blocker(obj, depth)
    if obj is _names.MISSING:
        # ``wp.tid``, ``wp.dot`` spelled through the module: Warp looks the last name up among its builtins
        # (and fails to build if it is none), so the name alone decides; any other missing name cannot be read.
        head = _names.resolve(caller, name.split(".", 1)[0]) if "." in name else _names.MISSING
        return None if head is wp else "not found"
    if _builtins.racy_call(getattr(obj, "__name__", None) or ""):
        return "a racy builtin under another name"
    if obj is wp.static:
        return None
    if isinstance(obj, type) or _warp_types.is_struct_type(obj):
        return None  # a constructor: scalar, vector, matrix, struct (value types), range
    if isinstance(obj, types.BuiltinFunctionType) and getattr(obj, "__module__", None) == "builtins":
        return None  # min, max, abs, len...: Warp calls its builtin of the same name
    if callable(obj) and (getattr(obj, "__module__", None) or "").split(".")[0] == "warp":
        return None  # ``wp.types.vector(...)``: Warp calls its builtin named ``last`` (checked above) or fails to build
    return f"not a Warp function ({type(obj).__name__})"


def _function_blocker(fn: object, depth: int) -> str | None:
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
        for label, warp_type in _warp_kernels.kernel_params(overload):
            if wp.types.is_array(warp_type):
                arrays.append((label, warp_type.ndim))
            elif not passed_by_value(warp_type):
                others.append(label)  # a struct, Any or another type that may hold arrays: stores into it refused
        reason, calls = _ownership.race_free_blocker(
            _warp_kernels.kernel_source(overload), tuple(arrays), tuple(others), in_function=True
        )
        reason = reason or _calls_blocker(overload.func, calls, depth + 1)
        if reason is not None:
            return reason
    return None
