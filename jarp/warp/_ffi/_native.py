"""The native launch path: build, load and feed jarp's C++ XLA FFI handler (``_native_handler.cpp``).

The handler is compiled at first use with the Clang/LLVM in the warp-lang wheel (the compiler Warp builds
every CPU kernel with), against the XLA FFI C header that jaxlib ships, so installing jarp needs no
compiler and the handler reads XLA's call frame through XLA's own declarations. The object file is
cached next to Warp's kernels (keyed on the source, the header, and the Warp, jaxlib and machine
versions) and loaded into Warp's LLVM JIT once per process.

Python then prepares, once per (plan, device), an immutable `LaunchDescriptor` (the argument-block
templates, the pointer slots and their per-slice offsets, the zero-fill list, the entry point, the launch
bounds and the expected buffers) and publishes it in a table the handler reads with atomic loads, without
a lock and without the GIL. A frame the handler does not recognise exactly goes to the Python callback,
which checks it in full and answers, so the native path adds no error messages of its own.

Set ``JARP_LAUNCH=python`` to force the Python callback path (read once, when jarp registers its FFI
targets). When the handler cannot be built or loaded, jarp warns once and uses the Python path.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.resources
import os
import platform
import tempfile
import threading
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jaxlib
import warp as wp

from .._upstream import _warp_internals, _xla_ffi
from . import _threads

ENV = "JARP_LAUNCH"
_SOURCE = importlib.resources.files(__package__).joinpath("_native_handler.cpp")
_MAX_BLOCK_BYTES = 1 << 16  # larger argument blocks (huge fixed-size struct values) stay on the Python path

# The handler includes jaxlib's c_api.h, which includes these two; the wheel's Clang has no C library
# headers (and a user's machine may have none), so jarp provides the freestanding definitions it needs.
_SHIM_HEADERS = {
    "stddef.h": """#pragma once
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;
#ifndef NULL
#define NULL nullptr
#endif
#define offsetof(type, member) __builtin_offsetof(type, member)
""",
    "stdint.h": """#pragma once
typedef __INT8_TYPE__ int8_t;
typedef __INT16_TYPE__ int16_t;
typedef __INT32_TYPE__ int32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __INTPTR_TYPE__ intptr_t;
typedef __UINTPTR_TYPE__ uintptr_t;
""",
}
_HANDLERS = {
    ("cpu", True): "jarp_handler_cpu",
    ("cpu", False): "jarp_handler_cpu_no_graph",
    ("CUDA", True): "jarp_handler_cuda",
    ("CUDA", False): "jarp_handler_cuda_no_graph",
}
_INSTANTIATE = {key: name.replace("_handler_", "_instantiate_") for key, name in _HANDLERS.items()}
_ORDER = (("cpu", False), ("cpu", True), ("CUDA", False), ("CUDA", True))  # [platform * 2 + graph] in the handler

_I64 = ctypes.c_int64
_P = ctypes.c_void_p


class BufferSpec(ctypes.Structure):
    _fields_ = (("dtype", _I64), ("rank", _I64), ("dims", _P))


class PointerSlot(ctypes.Structure):
    _fields_ = (("block", _I64), ("word", _I64), ("source", _I64), ("index", _I64), ("offsets", _P))


class CopySpec(ctypes.Structure):
    _fields_ = (("arg", _I64), ("ret", _I64), ("nbytes", _I64))


class ZeroFill(ctypes.Structure):
    _fields_ = (("index", _I64), ("nbytes", _I64))


class KernelParam(ctypes.Structure):
    _fields_ = (("block", _I64), ("offset", _I64))


class PrivateSpec(ctypes.Structure):
    _fields_ = (("slot", _I64), ("op", _I64), ("scalar", _I64), ("nbytes", _I64))


class Measure(ctypes.Structure):
    _fields_ = (("cost_ns", _I64), ("samples", _I64))


class Descriptor(ctypes.Structure):
    """The C ``Descriptor`` of ``_native_handler.cpp`` (its layout is checked against the compiled one at load)."""

    _fields_ = (
        ("nargs", _I64),
        ("nrets", _I64),
        ("args", _P),
        ("rets", _P),
        ("nzero", _I64),
        ("zero", _P),
        ("launch", _I64),
        ("nslices", _I64),
        ("nblocks", _I64),
        ("block_bytes", _I64 * 2),
        ("templates", _P * 2),
        ("nslots", _I64),
        ("slots", _P),
        ("bounds", _P),
        ("entry", _P),
        ("context", _P),
        ("dim", _I64),
        ("block_dim", _I64),
        ("grid_stride", _I64),
        ("cluster_dim", _I64),
        ("smem_bytes", _I64),
        ("nparams", _I64),
        ("params", _P),
        ("failure", _P),
        ("concurrent", _I64),
        ("range_entry", _P),
        ("tasks", _I64),
        ("ncopies", _I64),
        ("copies", _P),
        ("nprivate", _I64),
        ("private_specs", _P),
        ("measure", _P),
        ("work", _I64),
    )


def _expected_layout() -> dict[str, int]:
    """What ``jarp_layout`` in the compiled handler must hold, in its order (see the end of ``_native_handler.cpp``)."""
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


class LaunchDescriptor:
    """An immutable launch descriptor and the memory it points into (owned here, read by the handler).

    Args:
        args: ``(XLA dtype code, dims)`` of each argument buffer the call must pass.
        rets: the same for each result buffer.
        zero: ``(result index, bytes)`` of each result to zero before the launch (all slices).
        launch: whether there is anything to launch (False for an empty launch grid).
        nslices: batch slices, launched one after another.
        templates: the argument blocks' bytes (one forward, two for an adjoint launch), whole 8-byte words.
        slots: ``(block, word, source, index, per-slice byte offsets)`` of each pointer patched per call;
            ``source`` is 0 for the frame's arguments, 1 for its results.
        bounds: the address of the kernel's launch bounds (kept alive by ``keep``).
        entry: the CPU entry point, or the CUfunction on CUDA.
        cuda: for CUDA, ``(context, dim, block_dim, grid_stride, cluster_dim, smem_bytes, params)`` where
            ``params`` lists ``(block, byte offset)`` of each kernel parameter (block 2: the bounds).
        failure: how the message of a failed CUDA launch or memset begins; the handler adds what failed and
            Warp's diagnosis of the CUDA error (``wp_get_error_string``).
        keep: memory the raw addresses point into (the launch bounds), held as long as the descriptor.
        code: the loaded code ``entry`` points into (an ``EntryPoints``), held only while the descriptor is
            published (`NativeHandler.withdraw` lets go of it).
        concurrent: (CPU) the batch slices write disjoint memory and share no state, so the handler may run
            them concurrently on XLA's thread pool.
        range_entry: (CPU) jarp's ranged entry point (forward, or backward for an adjoint launch) of a kernel the
            race proofs allow to split (0: none), with which the handler may also split each launch into index
            ranges run concurrently.
        tasks: the launch's thread count (the size of its launch bounds).
        copies: ``(argument index, result index, bytes)`` of each in-out operand a partitioned call passes apart
            from its result (XLA's partitioned call keeps no aliases): copied to the result first, unless XLA
            gave both the same buffer.
        private: ``(slot, combination, scalar, bytes)`` of each accumulated result a split launch gives every work
            item a copy of (`Plan.private`): the index in ``slots`` of its pointer, 0/1/2 for sum/min/max, the
            element scalar's code (its index in `_races.PRIVATE_SCALARS`) and the bytes of one batch slice. Needs
            ``range_entry``.
        measured: (CPU, with ``range_entry``) let the handler time the launch's first whole runs, so that a launch
            with few tasks but a long run splits (the work threshold of `_threads`).
        work: (CPU) a static estimate of one slice's work (threads times statements per thread,
            `_races.work_estimate`), from which a privatised launch chooses its split (never from timing: its sums
            depend on the split, which must be the same on every call).
    """

    def __init__(
        self,
        *,
        args: Sequence[tuple[int, Sequence[int]]],
        rets: Sequence[tuple[int, Sequence[int]]],
        zero: Sequence[tuple[int, int]],
        launch: bool,
        nslices: int,
        templates: Sequence[bytes],
        slots: Sequence[tuple[int, int, int, int, Sequence[int]]],
        bounds: int,
        entry: int,
        cuda: tuple[int, int, int, int, int, int, Sequence[tuple[int, int]]] | None = None,
        failure: str = "jarp: the native launch failed",
        keep: Any = None,
        code: Any = None,
        concurrent: bool = False,
        range_entry: int = 0,
        tasks: int = 0,
        copies: Sequence[tuple[int, int, int]] = (),
        private: Sequence[tuple[int, int, int, int]] = (),
        measured: bool = False,
        work: int = 0,
    ) -> None:
        self._keep: list[Any] = [keep]
        self._code = code
        d = Descriptor()
        d.nargs, d.nrets = len(args), len(rets)
        d.args = self._buffers(args)
        d.rets = self._buffers(rets)
        zeros = (ZeroFill * max(len(zero), 1))(*[ZeroFill(j, n) for j, n in zero])
        d.nzero, d.zero = len(zero), self._own(zeros)
        d.launch = int(launch)
        d.nslices = nslices
        d.nblocks = len(templates)
        for b, raw in enumerate(templates):
            assert len(raw) % 8 == 0, "argument blocks are whole 8-byte words"
            words = (ctypes.c_uint64 * (len(raw) // 8)).from_buffer_copy(raw)
            d.block_bytes[b] = len(raw)
            d.templates[b] = self._own(words)
        items = []
        for block, word, source, index, offsets in slots:
            assert len(offsets) == nslices, "one offset per batch slice"
            offs = (ctypes.c_int64 * nslices)(*offsets)
            items.append(PointerSlot(block, word, source, index, self._own(offs)))
        table = (PointerSlot * max(len(items), 1))(*items)
        d.nslots, d.slots = len(items), self._own(table)
        d.bounds, d.entry = bounds, entry
        if cuda is not None:
            d.context, d.dim, d.block_dim, d.grid_stride, d.cluster_dim, d.smem_bytes, params = cuda
            table = (KernelParam * max(len(params), 1))(*[KernelParam(b, o) for b, o in params])
            d.nparams, d.params = len(params), self._own(table)
        d.failure = self._own(ctypes.create_string_buffer(failure.encode("utf-8", "replace")))
        d.concurrent, d.range_entry, d.tasks = int(concurrent), range_entry or None, tasks
        table = (CopySpec * max(len(copies), 1))(*[CopySpec(i, j, n) for i, j, n in copies])
        d.ncopies, d.copies = len(copies), self._own(table)
        for slot, _, _, _ in private:
            assert items[slot].source == 1, "a private copy stands in for a result"
        table = (PrivateSpec * max(len(private), 1))(*[PrivateSpec(*p) for p in private])
        d.nprivate, d.private_specs = len(private), self._own(table)
        self.measure = Measure(0, 0) if measured else None
        d.measure = self._own(self.measure) if measured else None
        d.work = work
        self.descriptor = d
        self.address = ctypes.addressof(d)

    def drop_code(self) -> None:
        """Let go of the loaded code (on withdrawal; `_executors._retained` keeps it while its kernel lives)."""
        self._code = None

    def _own(self, obj: Any) -> int:
        self._keep.append(obj)
        return ctypes.addressof(obj)

    def _buffers(self, specs: Sequence[tuple[int, Sequence[int]]]) -> int:
        items = []
        for code, dims in specs:
            arr = (ctypes.c_int64 * max(len(dims), 1))(*dims)
            items.append(BufferSpec(code, len(dims), self._own(arr)))
        return self._own((BufferSpec * max(len(items), 1))(*items))

    @staticmethod
    def fits(templates: Sequence[bytes]) -> bool:
        """Whether argument blocks this large go native (the handler copies them to its stack per call)."""
        return sum(len(t) for t in templates) <= _MAX_BLOCK_BYTES


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
        ):
            self._symbols[name] = lookup(name)
        missing = [name for name, address in self._symbols.items() if not address]
        if missing:
            raise RuntimeError(f"symbols missing from the compiled handler: {', '.join(missing)}")
        self._check_layout()
        self._configure = ctypes.CFUNCTYPE(None, _P, _P, _P, _P, _P, _P)(self._symbols["jarp_configure"])
        self._take_released = ctypes.CFUNCTYPE(_I64, ctypes.POINTER(_I64), _I64)(self._symbols["jarp_take_released"])
        self._released_lock = threading.Lock()
        self._add_chunk = ctypes.CFUNCTYPE(ctypes.c_int, _I64, _P)(self._symbols["jarp_add_chunk"])
        self._publish = ctypes.CFUNCTYPE(ctypes.c_int, _I64, _I64, _P)(self._symbols["jarp_publish"])
        self._begin_exit = ctypes.CFUNCTYPE(None)(self._symbols["jarp_begin_exit"])
        self._python_calls = ctypes.CFUNCTYPE(_I64)(self._symbols["jarp_python_calls"])
        self._set_threads = ctypes.CFUNCTYPE(None, _I64, _I64, _I64, _I64, _I64, _I64, _I64)(
            self._symbols["jarp_set_threads"]
        )
        self._pool_stats = ctypes.CFUNCTYPE(None, ctypes.POINTER(_I64))(self._symbols["jarp_pool_stats"])
        self._lock = threading.Lock()
        self._chunks: dict[int, Any] = {}
        self._published: dict[tuple[int, int], LaunchDescriptor] = {}
        self._withdrawn: list[LaunchDescriptor] = []

    def _check_layout(self) -> None:
        n = ctypes.c_int64.from_address(self._symbols["jarp_layout_size"]).value
        compiled = list((ctypes.c_int64 * n).from_address(self._symbols["jarp_layout"]))
        expected = _expected_layout()
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
        out = (_I64 * 256)()
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
            cuda_launch, cuda_memset = _warp_internals.cuda_launch_address(), _warp_internals.cuda_memset_address()
            cuda_memcpy = _warp_internals.cuda_memcpy_address()
            error_string = _warp_internals.error_string_address()
        self._callbacks = ((_P * 4)(*[slow[k] for k in _ORDER]), (_P * 4)(*[resolve[k] for k in _ORDER]))
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

    def pool_stats(self) -> tuple[int, int, int]:
        """``(calls run on XLA's pool, work items they ran, calls a lingering helper joined)`` since the handler
        was loaded (tests, inspection)."""
        out = (_I64 * 3)()
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
        del old

    def published(self) -> int:
        """How many descriptors are published (for inspection and tests)."""
        return len(self._published)


_lock = threading.Lock()
_state: dict[str, Any] = {}


def _cache_key(source: str) -> str:
    header = Path(jax.ffi.include_dir(), "xla", "ffi", "api", "c_api.h").read_bytes()
    h = hashlib.sha256()
    for part in (
        source.encode(),
        repr(sorted(_SHIM_HEADERS.items())).encode(),
        header,
        wp.config.version.encode(),
        jaxlib.__version__.encode(),
        platform.machine().encode(),
        platform.system().encode(),
    ):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def _build(name: str | None = None) -> NativeHandler:
    """Compile the handler (unless its object file is cached) and load it into Warp's LLVM JIT.

    Args:
        name: the JIT module to load it as (default: one per cache key). Each name is a separate copy
            with its own table and configuration (tests drive such a copy with fake XLA and CUDA functions).
    """
    _warp_internals.runtime_core()  # initialises Warp, which sets its kernel cache directory
    source = _SOURCE.read_text()
    key = _cache_key(source)
    obj = cached_object("jarp_native", key, source, str(_SOURCE), _SHIM_HEADERS, [jax.ffi.include_dir()])
    lookup = _warp_internals.load_cpu_object(str(obj), name or f"jarp_native_{key}")
    native = NativeHandler(lookup, obj)
    if name is None:  # the process's handler (not a test's private copy) follows jarp's thread setting
        _threads.attach(native.set_threads)
    return native


def cached_object(
    stem: str, key: str, source: str, source_path: str, headers: dict[str, str], include_dirs: list[str]
) -> Path:
    """The object file of C++ ``source`` in Warp's kernel cache (``<stem>_<key>/<stem>.o``), compiled if missing.

    It is compiled with the Clang in the warp-lang wheel, with ``headers`` (name -> text) written to a scratch
    include directory first, then ``include_dirs``. ``key`` must change with everything the object depends on.
    """
    _warp_internals.runtime_core()  # initialises Warp, which sets its kernel cache directory
    cache = Path(wp.config.kernel_cache_dir) / f"{stem}_{key}"
    obj = cache / f"{stem}.o"
    if not obj.exists():
        cache.mkdir(parents=True, exist_ok=True)
        # Compiled beside its final name and renamed into place: another process may build the same key.
        partial = obj.with_name(f"{obj.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with tempfile.TemporaryDirectory(prefix=f"{stem}_") as shims:
            for name, text in headers.items():
                Path(shims, name).write_text(text)
            try:
                _warp_internals.compile_cpu_object(source, source_path, str(partial), [shims, *include_dirs])
                os.replace(partial, obj)
            finally:
                partial.unlink(missing_ok=True)
    return obj


def handler() -> NativeHandler | None:
    """The native handler, built and loaded at the first call; None if it cannot be built here.

    With ``JARP_LAUNCH=python`` the handler still serves XLA's instantiate stage (the per-executable state
    that keeps a call's plan), but `activate` is not called, so no launch is published and every execution
    goes to the Python callback. When the handler cannot be built or loaded, jarp warns once (unless
    ``JARP_LAUNCH=python`` chose the Python path) and runs both stages in Python.
    """
    with _lock:
        if "handler" in _state:
            return _state["handler"]
        choice = os.environ.get(ENV, "native").strip().lower()
        if choice not in ("native", "", "python"):
            raise ValueError(f"{ENV}={os.environ[ENV]!r} is not a launch path; use 'native' (the default) or 'python'.")
        result: NativeHandler | None = None
        try:
            result = _build()
            _state["status"] = "native" if choice != "python" else f"python ({ENV}=python)"
        except Exception as e:
            if choice == "python":
                _state["status"] = f"python ({ENV}=python)"
            else:
                _state["status"] = f"python (the native handler failed to build: {e})"
                warnings.warn(
                    f"jarp could not build its native launch handler ({type(e).__name__}: {e}); kernels launch "
                    f"through the Python callback instead (correct, but ~3 us more per launch and serialised by "
                    f"the GIL, and the plans of destroyed executables are kept until the process ends). Set "
                    f"{ENV}=python to choose that path explicitly and silence this warning.",
                    RuntimeWarning,
                    stacklevel=3,
                )
        _state["handler"] = result
        return result


def activate(native: NativeHandler) -> None:
    """Let ``native`` launch published plans itself (`_target.ensure_registered`, on the native path only)."""
    _state["active"] = native


def active() -> NativeHandler | None:
    """The native handler that launches published plans; None on the Python path or before registration."""
    return _state.get("active")


def status() -> str:
    """Which launch path this process uses: ``"native"``, or ``"python (<why>)"``; ``"not decided"`` before the first call."""
    return _state.get("status", "not decided")
