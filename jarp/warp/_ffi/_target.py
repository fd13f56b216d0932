"""jarp's XLA FFI targets: their registration, and the callbacks XLA calls inside the custom call.

Each target is a handler bundle with two stages. The instantiate stage runs once per loaded executable: it
reads the call's attributes (jarp's call-ABI version and the plan's description, see `_frame`), resolves
the description to a plan handle through the registry (rebuilding the plan in a process that never traced
it) and keeps the handle and a lease as the call's XLA FFI state. The execute stage reads the handle from
that state, finds the per-(plan, device) executor prepared once (`_executors`) and runs it. On the native
path the C++ handler does both and calls `_resolve` and `_callback` only for what it does not serve itself;
errors become XLA FFI errors, which JAX raises as Python exceptions at the call site.
"""

from __future__ import annotations

import atexit
import ctypes
from collections.abc import Callable
from typing import Any

import jax

from .._plan import _content
from .._upstream import _locks, _xla_ffi
from . import _errors, _native, _trampoline
from ._executors import cpu_executors, executors, get_executor
from ._frame import CallError, read_content_text
from ._registry import registry

TARGET = "jarp_warp_call"
TARGET_NO_GRAPH = "jarp_warp_call_no_graph"
ABI_VERSION = _content.ABI_VERSION
STATE_TYPE = "jarp_plan_state"

_register_lock = _locks.make("ffi_register")
_registered = False
_FRAME_EXTENSION = _xla_ffi.FRAME_EXTENSION
_RESOLVE_TYPE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_int64))
_SLOW_TYPE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)  # the native handler's slow path
_keep: list[Any] = []  # what XLA holds raw pointers to, for the life of the process
_state_type = 0  # the address of jarp's XLA_FFI_TypeId


def _drain_at_exit() -> None:
    """At interpreter exit, keep XLA's worker threads out of the Python callbacks (see `NativeHandler.drain_at_exit`).

    Registered when jarp is imported, so that it runs after the exit hooks of the code that imports jarp (which
    may still call kernels) and before JAX's own (atexit runs the last registered first), all before CPython
    starts finalizing. Without the native handler there is nothing to guard with: see docs/multi-device.md.
    """
    native = _native.handler() if _registered else None
    if native is not None:
        native.drain_at_exit()


atexit.register(_drain_at_exit)


def ensure_registered() -> None:
    """Register jarp's state type and FFI targets with XLA for CPU and CUDA (once per process)."""
    global _registered, _state_type
    if _registered:
        return
    with _register_lock:
        if _registered:
            return
        _xla_ffi.check_layout()
        native = _native.handler()
        keys = [(platform, graph) for graph in (True, False) for platform in _trampoline.PLATFORMS]
        if native is not None:
            # The native handler passes the frames it does not serve, with the plan handle when it read one.
            slow = {
                key: _keep_address(_SLOW_TYPE(_never_raises(lambda frame, handle, k=key: _callback(frame, *k, handle))))  # pyright: ignore[reportCallIssue]  # k: (platform, graph)
                for key in keys
            }
            # one resolver per target, so that an error names the target the call used
            resolvers = {
                key: _keep_address(_RESOLVE_TYPE(_never_raises(lambda frame, out, g=key[1]: _resolve(frame, out, g))))
                for key in keys
            }
            native.configure(slow, resolvers)
            if _native.status() == "native":
                # The native handler launches published plans itself and passes every other frame to `_callback`.
                _native.activate(native)
            registry.add_source(native.take_released)
            type_id, type_info = native.state_type, native.state_info
            bundles = {
                key: {"instantiate": native.instantiate_address(*key), "execute": native.address(*key)} for key in keys
            }
        else:
            type_id, type_info = _python_state_type()
            bundles = {
                key: {
                    "instantiate": _trampoline.trampoline(
                        _never_raises(lambda frame, g=key[1]: _instantiate(frame, g))
                    ),
                    "execute": _trampoline.trampoline(_never_raises(lambda frame, k=key: _callback(frame, *k, -1))),  # pyright: ignore[reportCallIssue]  # k: (platform, graph)
                }
                for key in keys
            }
        _state_type = type_id
        for platform in _trampoline.PLATFORMS:
            registration = {
                "type_id": jax.ffi.pycapsule(ctypes.c_void_p(type_id)),
                "type_info": jax.ffi.pycapsule(ctypes.c_void_p(type_info)),
            }
            jax.ffi.register_ffi_type(STATE_TYPE, registration, platform=platform)  # type: ignore[arg-type]
        for name, graph in ((TARGET, True), (TARGET_NO_GRAPH, False)):
            _trampoline.register_bundle(name, {p: bundles[(p, graph)] for p in _trampoline.PLATFORMS})
            # XLA partitions a call along its leading batch dims where the call says how many it has (the
            # ``num_batch_dims`` attribute of a batched call lowered for several devices, `_jax._lowering`);
            # a call without the attribute is partitioned as before (its operands gathered).
            jax.ffi.register_ffi_target_as_batch_partitionable(name)
        _registered = True


def _never_raises(entry: Callable[..., int | None]) -> Callable[..., int | None]:
    """``entry`` as a ctypes callback may run it: an exception becomes an XLA FFI error, never a garbage result.

    ctypes swallows an exception raised in a callback and returns an undefined value, which XLA would take for
    an ``XLA_FFI_Error*``; the entries catch their own errors, and this is the last line for the rest.
    """

    def guarded(frame: int, *args: object) -> int | None:
        try:
            return entry(frame, *args)
        except BaseException:
            try:
                return _xla_ffi.create_error(frame, _xla_ffi.ErrorCode.INTERNAL, f"jarp: {TARGET} failed")
            except BaseException:
                return None

    return guarded


def _keep_address(callback: Any) -> int:
    """The address of a ctypes callback, kept alive for the process (XLA and the native handler hold it)."""
    _keep.append(callback)
    return ctypes.cast(callback, ctypes.c_void_p).value or 0


class _TypeInfo(ctypes.Structure):
    _fields_ = (("struct_size", ctypes.c_size_t), ("ext", ctypes.c_void_p), ("deleter", ctypes.c_void_p))


_libc = ctypes.CDLL(None)
_libc.malloc.restype = ctypes.c_void_p
_libc.malloc.argtypes = (ctypes.c_size_t,)


def _python_state_type() -> tuple[int, int]:
    """Without the native handler: a state type whose deleter is C's ``free`` (no Python runs in XLA's deleter).

    Its states are never reported as deleted, so the plans of loaded executables are kept until the process
    ends on this path (the native handler queues each deleted state's lease instead).
    """
    type_id = ctypes.c_int64(0)
    info = _TypeInfo(ctypes.sizeof(_TypeInfo), None, ctypes.cast(_libc.free, ctypes.c_void_p).value)
    _keep.extend((type_id, info))
    return ctypes.addressof(type_id), ctypes.addressof(info)


def _instantiate(frame: int, graph: bool) -> int | None:
    """The instantiate stage on the Python path: `_resolve`, then keep the handle as the call's state."""
    try:
        if _xla_ffi.read_ptr(frame + _FRAME_EXTENSION) and _xla_ffi.answer_metadata_query(frame, graph, _state_value()):
            return None
        out = (ctypes.c_int64 * 2)()
        error = _resolve(frame, out, graph)
        if error:
            return error
        state = _libc.malloc(24)  # the native handler's State: handle, lease id, next
        if not state:
            return _xla_ffi.create_error(frame, _xla_ffi.ErrorCode.RESOURCE_EXHAUSTED, "jarp: out of memory")
        ctypes.memmove(state, bytes(out) + bytes(8), 24)
        return _xla_ffi.set_state(frame, _state_type, state) or None
    except BaseException:
        return _xla_ffi.create_error(frame, _xla_ffi.ErrorCode.INTERNAL, f"jarp: {TARGET} failed to instantiate")


def _state_value() -> int:
    return ctypes.c_int64.from_address(_state_type).value if _state_type else 0


def _resolve(frame: int, out: Any, graph: bool = True) -> int | None:
    """The Python side of the instantiate stage: the call's plan handle and a lease id, written to ``out``."""
    target = TARGET if graph else TARGET_NO_GRAPH
    try:
        text = read_content_text(frame, ABI_VERSION)
        try:
            out[0], out[1] = registry.resolve(text)
        except _content.ContentError as e:
            code = {
                "not_found": _xla_ffi.ErrorCode.NOT_FOUND,
                "changed": _xla_ffi.ErrorCode.FAILED_PRECONDITION,
                "abi": _xla_ffi.ErrorCode.FAILED_PRECONDITION,
            }.get(e.reason, _xla_ffi.ErrorCode.INVALID_ARGUMENT)
            raise CallError(code, str(e)) from None
        return None
    except CallError as e:
        return _xla_ffi.create_error(frame, e.code, f"{target}: {e}")
    except BaseException as e:
        try:
            return _errors.ffi_error(frame, e, target)
        except BaseException:  # never let an exception escape to ctypes: XLA would read garbage as success
            return _xla_ffi.create_error(frame, _xla_ffi.ErrorCode.INTERNAL, f"jarp: {target} failed")


def launch_path() -> str:
    """How this process launches kernel plans: ``"native"`` or ``"python (<why>)"`` (after registration)."""
    return _native.status()


def is_registered() -> bool:
    """Whether jarp's FFI targets are registered in this process."""
    return _registered


def state_handle(frame: int) -> int:
    """The plan handle the instantiate stage kept as this call's state; `CallError` if it has none."""
    state = _xla_ffi.get_state(frame, _state_type)
    if not state:
        raise CallError(
            _xla_ffi.ErrorCode.FAILED_PRECONDITION,
            "this call has no jarp state: its instantiate stage did not run through jarp's target. The target is "
            "jarp's own: call kernels through jarp.warp.jax_kernel or jax_callable, not jax.ffi.ffi_call.",
        )
    return ctypes.c_int64.from_address(state).value


def _callback(frame: int, platform: str, graph: bool, handle: int) -> int | None:
    """The execute stage in Python: run the frame's plan (``handle``, or -1 to read it from the call's state)."""
    try:
        if handle < 0:
            if _xla_ffi.read_ptr(frame + _FRAME_EXTENSION) and _xla_ffi.answer_metadata_query(
                frame, graph, _state_value()
            ):
                return None
            handle = state_handle(frame)
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
            return _errors.ffi_error(frame, e, _name(handle))
        except BaseException:  # never let an exception escape to ctypes: XLA would read garbage as success
            return _xla_ffi.create_error(frame, _xla_ffi.ErrorCode.INTERNAL, f"jarp: {TARGET} failed")


def _name(handle: int) -> str:
    """How a message names the module behind a call: its plan's name, else the target's."""
    try:
        return registry.plan(handle).name or f"{TARGET} (plan {handle})"
    except Exception:
        return TARGET


_errors.own_frames(__file__)
