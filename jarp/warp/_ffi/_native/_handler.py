"""`NativeHandler`: the loaded handler, its FFI target addresses, its descriptor table and its settings; and the
layout check that compares the compiled handler's structs and XLA's frame with jarp's Python view of them."""

from __future__ import annotations

import ctypes
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import warp as wp

from ..._upstream import _locks, _warp_launches, _warp_types, _xla_ffi
from ._abi import (
    I64,
    PTR,
    BufferSpec,
    CopySpec,
    Descriptor,
    KernelParam,
    Measure,
    PointerSlot,
    PrivateSpec,
    StructSpec,
    StructState,
    ZeroFill,
)
from ._descriptor import LaunchDescriptor

_HANDLERS = {
    ("cpu", True): "jarp_handler_cpu",
    ("cpu", False): "jarp_handler_cpu_no_graph",
    ("CUDA", True): "jarp_handler_cuda",
    ("CUDA", False): "jarp_handler_cuda_no_graph",
}
_INSTANTIATE = {key: name.replace("_handler_", "_instantiate_") for key, name in _HANDLERS.items()}
_ORDER = (("cpu", False), ("cpu", True), ("CUDA", False), ("CUDA", True))  # [platform * 2 + graph] in the handler


def expected_layout() -> dict[str, int]:
    """What ``jarp_layout`` in the compiled handler must hold, in its order (see the end of ``_handler.cpp``)."""
    x = _xla_ffi
    return {
        "chunk handles": NativeHandler.CHUNK_HANDLES,
        "max chunks": NativeHandler.MAX_CHUNKS,
        "device slots": NativeHandler.DEVICE_SLOTS,
        "sizeof(Descriptor)": ctypes.sizeof(Descriptor),
        "Descriptor.nslices": Descriptor.nslices.offset,
        "Descriptor.templates": Descriptor.templates.offset,
        "Descriptor.entry": Descriptor.entry.offset,
        "Descriptor.params": Descriptor.params.offset,
        "Descriptor.failure": Descriptor.failure.offset,
        "Descriptor.concurrent": Descriptor.concurrent.offset,
        "Descriptor.tasks": Descriptor.tasks.offset,
        "Descriptor.copies": Descriptor.copies.offset,
        "Descriptor.private_specs": Descriptor.private_specs.offset,
        "Descriptor.measure": Descriptor.measure.offset,
        "Descriptor.work": Descriptor.work.offset,
        "Descriptor.structs": Descriptor.structs.offset,
        "sizeof(StructSpec)": ctypes.sizeof(StructSpec),
        "sizeof(StructState)": ctypes.sizeof(StructState),
        "sizeof(PrivateSpec)": ctypes.sizeof(PrivateSpec),
        "sizeof(Measure)": ctypes.sizeof(Measure),
        "sizeof(CopySpec)": ctypes.sizeof(CopySpec),
        "sizeof(BufferSpec)": ctypes.sizeof(BufferSpec),
        "sizeof(PointerSlot)": ctypes.sizeof(PointerSlot),
        "sizeof(ZeroFill)": ctypes.sizeof(ZeroFill),
        "sizeof(KernelParam)": ctypes.sizeof(KernelParam),
        "XLA_FFI_CallFrame.extension_start": x.FRAME_EXTENSION,
        "XLA_FFI_CallFrame.api": x.FRAME_API,
        "XLA_FFI_CallFrame.ctx": x.FRAME_CTX,
        "XLA_FFI_CallFrame.stage": x.FRAME_STAGE,
        "XLA_FFI_CallFrame.args.size": x.FRAME_ARGS_SIZE,
        "XLA_FFI_CallFrame.args.args": x.FRAME_ARGS,
        "XLA_FFI_CallFrame.rets.size": x.FRAME_RETS_SIZE,
        "XLA_FFI_CallFrame.rets.rets": x.FRAME_RETS,
        "XLA_FFI_CallFrame.attrs": x.FRAME_ATTRS_STRUCT,
        "XLA_FFI_CallFrame.attrs.size": x.FRAME_ATTRS_SIZE,
        "XLA_FFI_CallFrame.attrs.attrs": x.FRAME_ATTRS,
        "XLA_FFI_Attrs.types": x.ATTRS_TYPES,
        "XLA_FFI_Attrs.names": x.ATTRS_NAMES,
        "XLA_FFI_Buffer.dtype": x.BUFFER_DTYPE,
        "XLA_FFI_Buffer.data": x.BUFFER_DATA,
        "XLA_FFI_Buffer.rank": x.BUFFER_RANK,
        "XLA_FFI_Buffer.dims": x.BUFFER_DIMS,
        "XLA_FFI_Scalar.value": x.SCALAR_VALUE,
        "XLA_FFI_Api.XLA_FFI_Error_Create": x._API_ERROR_CREATE,
        "XLA_FFI_Api.XLA_FFI_Stream_Get": x._API_STREAM_GET,
        "XLA_FFI_Api.XLA_FFI_DeviceOrdinal_Get": x._API_DEVICE_ORDINAL_GET,
        "XLA_FFI_Api.XLA_FFI_State_Set": x._API_STATE_SET,
        "XLA_FFI_Api.XLA_FFI_State_Get": x._API_STATE_GET,
        "XLA_FFI_Metadata.state_type_id": x.METADATA_STATE_TYPE,
    }


class NativeHandler:
    """The loaded handler: its FFI target addresses and its descriptor table."""

    CHUNK_HANDLES = 256
    MAX_CHUNKS = 1 << 14
    DEVICE_SLOTS = 17  # the CPU, then CUDA ordinals 0 to 15

    def __init__(self, lookup: Any, path: Path) -> None:
        self.path = path
        self._symbols = {
            name: lookup(name) for name in (*_HANDLERS.values(), *_INSTANTIATE.values(), "jarp_floor_handler")
        }
        for name in (
            "jarp_state_type",
            "jarp_state_info",
            "jarp_take_released",
            "jarp_configure",
            "jarp_add_chunk",
            "jarp_publish",
            "jarp_layout",
            "jarp_layout_size",
            "jarp_begin_exit",
            "jarp_python_calls",
            "jarp_set_threads",
            "jarp_pool_stats",
            "jarp_configure_structures",
            "jarp_destroy_structure",
            "jarp_structure_stats",
        ):
            self._symbols[name] = lookup(name)
        missing = [name for name, address in self._symbols.items() if not address]
        if missing:
            raise RuntimeError(f"symbols missing from the compiled handler: {', '.join(missing)}")
        self._check_layout()
        self._configure = ctypes.CFUNCTYPE(None, PTR, PTR, PTR, PTR, PTR, PTR)(self._symbols["jarp_configure"])
        self._take_released = ctypes.CFUNCTYPE(I64, ctypes.POINTER(I64), I64)(self._symbols["jarp_take_released"])
        self._released_lock = _locks.make("handler_released")
        self._add_chunk = ctypes.CFUNCTYPE(ctypes.c_int, I64, PTR)(self._symbols["jarp_add_chunk"])
        self._publish = ctypes.CFUNCTYPE(ctypes.c_int, I64, I64, PTR)(self._symbols["jarp_publish"])
        self._begin_exit = ctypes.CFUNCTYPE(None)(self._symbols["jarp_begin_exit"])
        self._python_calls = ctypes.CFUNCTYPE(I64)(self._symbols["jarp_python_calls"])
        self._set_threads = ctypes.CFUNCTYPE(None, I64, I64, I64, I64, I64, I64, I64)(self._symbols["jarp_set_threads"])
        self._pool_stats = ctypes.CFUNCTYPE(None, ctypes.POINTER(I64))(self._symbols["jarp_pool_stats"])
        self._configure_structures = ctypes.CFUNCTYPE(None, PTR)(self._symbols["jarp_configure_structures"])
        self._destroy_structure = ctypes.CFUNCTYPE(None, I64, ctypes.c_uint64)(self._symbols["jarp_destroy_structure"])
        self._structure_stats = ctypes.CFUNCTYPE(None, ctypes.POINTER(I64))(self._symbols["jarp_structure_stats"])
        # Warp's host mesh and BVH functions, for the structures a call builds natively (`LaunchDescriptor`)
        self._structure_functions = (PTR * len(_warp_types.HOST_STRUCTURE_FUNCTIONS))(
            *_warp_types.host_structure_functions()
        )
        self._configure_structures(self._structure_functions)
        self._lock = _locks.make("handler")
        self._chunks: dict[int, Any] = {}
        self._published: dict[tuple[int, int], LaunchDescriptor] = {}
        self._withdrawn: list[LaunchDescriptor] = []

    def _check_layout(self) -> None:
        n = ctypes.c_int64.from_address(self._symbols["jarp_layout_size"]).value
        compiled = list((ctypes.c_int64 * n).from_address(self._symbols["jarp_layout"]))
        expected = expected_layout()
        if len(compiled) != len(expected):
            raise RuntimeError(
                f"the compiled handler's layout table has {len(compiled)} entries, jarp expects {len(expected)}"
            )
        wrong = [
            f"{name}: compiled {c}, Python {e}"
            for (name, e), c in zip(expected.items(), compiled, strict=True)
            if c != e
        ]
        if wrong:
            raise RuntimeError(
                "jaxlib's XLA FFI header (or the handler's descriptor) disagrees with jarp's Python view of it: "
                + "; ".join(wrong)
            )

    def drain_at_exit(self, timeout: float = 10.0) -> int:
        """Stop passing frames to the Python callback and wait for the calls already inside it (an atexit hook).

        XLA may still be running computations nobody waited for (e.g. the other replicas of a replicated result,
        of which ``np.asarray`` reads one). Should one reach jarp's Python callback after CPython began
        finalizing, CPython ends that XLA worker thread inside ``PyGILState_Ensure`` (``pthread_exit``), and
        destroying XLA's CPU client then waits for it forever: its Eigen pool shuts down only once every worker
        has parked, so ``~PjRtCpuClient`` joins the others, parked in ``EventCount::CommitWait``, forever (the
        backtrace of the hang shows no jarp frame: the thread that had one no longer exists). From this call on,
        such frames fail with an error instead; the calls already inside the callback finish first (this sleeps,
        releasing the GIL). The handler increments its count of calls inside the callback before it reads the
        exit flag, both sequentially consistent, so a call is either counted here or sees the flag. Registered
        with ``atexit`` when jarp is imported (``_target._drain_at_exit``), after JAX's own hook, so it runs first
        (``atexit`` runs the last registered first), before CPython sets its finalizing flag. ``tools/check_exit.py`` counts
        exits and hangs of a script (``--spy`` reports every thread CPython ends).

        Args:
            timeout: seconds to wait for the calls already inside the callback.

        Returns:
            The number of calls still inside the callback when it returned (0 unless ``timeout`` ran out).
        """
        self._begin_exit()
        deadline = time.monotonic() + timeout
        while (left := self._python_calls()) and time.monotonic() < deadline:
            time.sleep(0.001)
        return left

    def address(self, platform_name: str, graph: bool) -> int:
        """The address of the handler registered as jarp's target on ``platform_name`` (``"cpu"``/``"CUDA"``)."""
        return self._symbols[_HANDLERS[(platform_name, graph)]]

    def instantiate_address(self, platform_name: str, graph: bool) -> int:
        """The address of the instantiate-stage handler of jarp's target on ``platform_name``."""
        return self._symbols[_INSTANTIATE[(platform_name, graph)]]

    @property
    def state_type(self) -> int:
        """The address of jarp's ``XLA_FFI_TypeId`` (XLA writes the id there when the type is registered)."""
        return self._symbols["jarp_state_type"]

    @property
    def state_info(self) -> int:
        """The address of the ``XLA_FFI_TypeInfo`` of jarp's state (its deleter queues the state's lease)."""
        return self._symbols["jarp_state_info"]

    def take_released(self) -> list[int]:
        """The lease ids of the states XLA deleted since the last call (their executables were destroyed)."""
        out = (I64 * 256)()
        ids: list[int] = []
        with self._released_lock:  # the handler's queue has one consumer at a time
            while n := self._take_released(out, 256):
                ids.extend(out[:n])
        return ids

    @property
    def floor_address(self) -> int:
        """A handler that only answers XLA's metadata query: the cost floor of any native FFI handler."""
        return self._symbols["jarp_floor_handler"]

    def configure(
        self,
        slow: dict[tuple[str, bool], int],
        resolve: dict[tuple[str, bool], int],
        cuda: tuple[int, int, int, int] | None = None,
    ) -> None:
        """Set the Python callbacks (keyed like the handlers); call before registering.

        Args:
            slow: the address of the Python callback of the execute stage for each ``(platform, graph)``, as
                the handlers are keyed: frames the handler does not serve itself.
            resolve: the address of the Python side of the instantiate stage for each ``(platform, graph)``:
                ``XLA_FFI_Error* resolve(XLA_FFI_CallFrame*, int64_t out[2])`` writes the plan handle and a
                lease id the call's description resolves to.
            cuda: the addresses of functions with the signatures of Warp's ``wp_cuda_launch_kernel``,
                ``wp_memset_device``, ``wp_get_error_string`` and ``wp_memcpy_d2d``, which the CUDA handlers call
                (the third for the message of a failed launch, memset or copy); None (the default) for Warp's own where CUDA
                is available (and none otherwise: no CUDA frame can reach the handler then).
        """
        cuda_launch = cuda_memset = error_string = cuda_memcpy = 0
        if cuda is not None:
            cuda_launch, cuda_memset, error_string, cuda_memcpy = cuda
        elif wp.is_cuda_available():
            cuda_launch, cuda_memset = _warp_launches.cuda_launch_address(), _warp_launches.cuda_memset_address()
            cuda_memcpy = _warp_launches.cuda_memcpy_address()
            error_string = _warp_launches.error_string_address()
        self._callbacks = ((PTR * 4)(*[slow[k] for k in _ORDER]), (PTR * 4)(*[resolve[k] for k in _ORDER]))
        self._configure(self._callbacks[0], self._callbacks[1], cuda_launch, cuda_memset, error_string, cuda_memcpy)

    def set_threads(
        self,
        max_threads: int,
        min_tasks: int,
        min_range: int,
        min_cost_ns: int,
        item_ns: int,
        private_cap: int,
        linger_ns: int,
    ) -> None:
        """Set the CPU thread cap (0: XLA's pool size), the thresholds of pool dispatch, the private copies' cap and
        how long an idle helper waits for the next call (see `_threads`)."""
        self._set_threads(max_threads, min_tasks, min_range, min_cost_ns, item_ns, private_cap, linger_ns)

    def structure_stats(self) -> tuple[int, int]:
        """``(structures built, structures refitted)`` by the handler since it was loaded (tests, inspection)."""
        out = (I64 * 2)()
        self._structure_stats(out)
        return out[0], out[1]

    def pool_stats(self) -> tuple[int, int, int]:
        """``(calls run on XLA's pool, work items they ran, calls a lingering helper joined)`` since the handler
        was loaded (tests, inspection)."""
        out = (I64 * 3)()
        self._pool_stats(out)
        return out[0], out[1], out[2]

    def publish(self, handle: int, slot: int, descriptor: LaunchDescriptor) -> bool:
        """Publish the descriptor of (``handle``, device ``slot``); False if the table cannot hold it."""
        if not 0 <= handle < self.CHUNK_HANDLES * self.MAX_CHUNKS or not 0 <= slot < self.DEVICE_SLOTS:
            return False
        with self._lock:
            index = handle // self.CHUNK_HANDLES
            if index not in self._chunks:
                chunk = (ctypes.c_void_p * (self.CHUNK_HANDLES * self.DEVICE_SLOTS))()
                self._chunks[index] = chunk
                self._add_chunk(index, ctypes.addressof(chunk))
            self._published[(handle, slot)] = descriptor
            return bool(self._publish(handle, slot, descriptor.address))

    def withdraw(self, handles: Sequence[int]) -> None:
        """Withdraw every descriptor of ``handles`` (released plans).

        The memory of a withdrawn descriptor is kept until the next withdrawal, so a handler that
        loaded it just before is done with it (no executable uses a released plan any more). Its code is
        not: the next withdrawal may come much later, or never, and would keep a collected kernel's module
        loaded (and its ``ModuleExec`` alive) until then. The released executor's code is kept instead by
        `_executors._retained` for exactly as long as something may still call it: while its kernel lives.
        """
        with self._lock:
            old, self._withdrawn = self._withdrawn, []
            for handle in handles:
                for slot in range(self.DEVICE_SLOTS):
                    descriptor = self._published.pop((handle, slot), None)
                    if descriptor is not None:
                        self._publish(handle, slot, None)
                        descriptor.drop_code()
                        self._withdrawn.append(descriptor)
            for descriptor in old:  # no handler reads them any more: the structures they kept go with them
                descriptor.destroy_structures(self._destroy_structure)
        del old

    def published(self) -> int:
        """How many descriptors are published (for inspection and tests)."""
        return len(self._published)
