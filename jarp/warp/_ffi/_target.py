"""jarp's XLA FFI targets: their registration, and the callback XLA calls inside the custom call.

XLA calls `_callback` with a raw call frame (on the native path, only for frames the C++ handler does
not serve itself). The callback checks the frame (`_frame`) before it touches any buffer, finds the
per-(plan, device) executor that was prepared once (`_executors`) and runs it. Errors become XLA FFI
errors, which JAX raises as Python exceptions at the call site.
"""

from __future__ import annotations

import atexit
import ctypes
import threading

from .._upstream import _xla_ffi
from . import _errors, _native, _trampoline
from ._executors import cpu_executors, executor_count, executors, get_executor
from ._frame import MEM, SESSION, U64, CallError, read_handle
from ._registry import registry

__all__ = [
    "SESSION",
    "TARGET",
    "TARGET_NO_GRAPH",
    "ensure_registered",
    "executor_count",
    "is_registered",
    "launch_path",
]

TARGET = "jarp_warp_call"
TARGET_NO_GRAPH = "jarp_warp_call_no_graph"

_register_lock = threading.Lock()
_registered = False
_FRAME_EXTENSION = _xla_ffi.FRAME_EXTENSION


def _drain_at_exit() -> None:
    """At interpreter exit, keep XLA's worker threads out of the Python callback (see `NativeHandler.drain_at_exit`).

    Registered when jarp is imported, so that it runs after the exit hooks of the code that imports jarp (which
    may still call kernels) and before JAX's own (atexit runs the last registered first), all before CPython
    starts finalizing. On the Python path there is nothing to guard with: see docs/multi-device.md.
    """
    native = _native.active()
    if native is not None:
        native.drain_at_exit()


atexit.register(_drain_at_exit)


def ensure_registered() -> None:
    """Register jarp's FFI targets with XLA for CPU and CUDA (once per process)."""
    global _registered
    if _registered:
        return
    with _register_lock:
        if _registered:
            return
        _xla_ffi.check_layout()
        native = _native.handler()
        callbacks: dict[tuple[str, bool], int] = {}
        for graph in (True, False):
            for platform in _trampoline.PLATFORMS:
                callbacks[(platform, graph)] = _trampoline.trampoline(
                    lambda frame, p=platform, g=graph: _callback(frame, p, g)
                )
        if native is not None:
            # The native handler serves prepared kernel plans and passes every other frame to these callbacks.
            native.configure(int(SESSION), callbacks)
            _native.activate(native)
        for name, graph in ((TARGET, True), (TARGET_NO_GRAPH, False)):
            _trampoline.register_target(
                name,
                {
                    p: callbacks[(p, graph)] if native is None else native.address(p, graph)
                    for p in _trampoline.PLATFORMS
                },
            )
        _registered = True


def launch_path() -> str:
    """How this process launches kernel plans: ``"native"`` or ``"python (<why>)"`` (after registration)."""
    return _native.status()


def is_registered() -> bool:
    """Whether jarp's FFI targets are registered in this process."""
    return _registered


def _callback(frame: int, platform: str, graph: bool) -> int | None:
    try:
        if U64(MEM, frame + _FRAME_EXTENSION)[0] and _xla_ffi.answer_metadata_query(frame, graph):
            return None
        handle = read_handle(frame)
        if platform == "cpu":
            executor = cpu_executors.get(handle)  # a hit means a handle the registry holds
            if executor is None:
                executor = get_executor((handle, -1), platform)
        else:
            key = (handle, _xla_ffi.get_device_ordinal(frame))
            executor = executors.get(key)
            if executor is None:
                executor = get_executor(key, platform, frame)
        executor.run(frame)
        return None
    except CallError as e:
        return _xla_ffi.create_error(frame, e.code, f"{TARGET if graph else TARGET_NO_GRAPH}: {e}")
    except BaseException as e:
        try:
            return _errors.ffi_error(frame, e, _name(frame))
        except BaseException:  # never let an exception escape to ctypes: XLA would read garbage as success
            return _xla_ffi.create_error(frame, _xla_ffi.ErrorCode.INTERNAL, f"jarp: {TARGET} failed")


def _name(frame: int) -> str:
    """How a message names the module behind a call frame: its plan's name, else the target's."""
    try:
        for name, kind, value in _xla_ffi.read_attrs(frame + _xla_ffi.FRAME_ATTRS_STRUCT):
            if name == "plan" and kind == _xla_ffi.AttrType.SCALAR:
                code, ptr = _xla_ffi.read_scalar(value)
                handle = ctypes.c_int64.from_address(ptr).value
                if code == _xla_ffi.DataType.S64:
                    return registry.plan(handle).name or f"{TARGET} (plan {handle})"  # ReleasedPlanError: below
    except Exception:
        pass
    return TARGET


_errors.own_frames(__file__)
