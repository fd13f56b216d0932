"""The CUDA branch of the native handler (``jarp_handler_cuda`` in ``jarp/warp/_ffi/_native/_handler.cpp``), without a GPU.

XLA never calls the CUDA handler on a machine without a GPU, so these tests call the compiled symbols
directly: with a call frame built by hand from `_xla_ffi`'s ctypes declarations, a fake ``XLA_FFI_Api``
(its ``DeviceOrdinal_Get``, ``Stream_Get``, ``State_Get``, ``State_Set``, ``Error_Create`` and ``Error_Destroy``
are Python callbacks) and fake CUDA functions with the exact signatures Warp declares for
``wp_cuda_launch_kernel`` and ``wp_memset_device``. The execute stage (``jarp_handler_cuda``) reads its plan
handle from the call's state, which the fake ``State_Get`` hands over (the 24-byte ``State`` the instantiate
stage, ``jarp_instantiate_cuda``, makes; also tested here, with a fake resolve callback).
The descriptors are the real ones: `_executors.CudaKernelExecutor` prepares real plans, with only Warp's module
loading faked (a made-up context, CUfunctions, block, cluster and shared-memory sizes).

The handler under test is a private copy of the compiled object, loaded into Warp's JIT under another
name: its table and configuration are its own, so the process's registered handler is never touched
(checked below). The copy is built whatever ``JARP_LAUNCH`` says, so the file runs the same on both
launch paths; it is not marked ``launch_paths`` because a second run would test nothing new.
"""

from __future__ import annotations

import ctypes
import itertools
import math
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_kernel
from jarp.warp._ffi import _executors, _native, _target
from jarp.warp._ffi._registry import registry
from jarp.warp._plan._values import Plan
from jarp.warp._upstream import _warp_kernels, _warp_launches, _xla_ffi
from tests.support import kernels as k
from tests.support.lowered import plan_handles

_P = ctypes.c_void_p
CONTEXT = 0xC0C0_0000_0000  # the CUcontext of the fake device
FORWARD, BACKWARD = 0xF0F0_0000_0000, 0xB0B0_0000_0000  # the fake CUfunctions
STREAM = 0x5EA4_0000_0000  # what Stream_Get answers
XLA_CTX = 0xC7C7_0000_0000  # the frame's execution context
ERROR = 0xE550_0000  # what Error_Create returns
SLOW = 0x5100_0000  # what every slow-path callback returns
SMEM = {False: 48, True: 96}  # shared-memory bytes of the fake forward / backward entry points
CLUSTER = 2
STATE_ERROR = 0xE551_0000  # what State_Get returns for a call without a state of the asked type
RESOLVE_ERROR = 0xE552_0000  # what a failing resolve callback returns
ARG_BASE, RET_BASE = 0x1000_0000_0000, 0x9000_0000_0000  # fake buffer addresses (never dereferenced)


def _address(fn: Any) -> int:
    return ctypes.cast(fn, _P).value or 0


class State(ctypes.Structure):
    """The native handler's per-call state: the plan handle, the lease id, the release queue's link (24 bytes)."""

    _fields_ = (("handle", ctypes.c_int64), ("lease", ctypes.c_int64), ("next", _P))


class FakeXla:
    """A fake ``XLA_FFI_Api``: records the calls of its functions the handler makes.

    ``State_Get`` answers with ``state`` (an address, or an error if None) when asked for the instantiate
    stage's state of type ``type_id``, and with an error for any other type or stage, as XLA does.
    """

    def __init__(self) -> None:
        self.ordinal = 0
        self.type_id = 0  # the address of the XLA_FFI_TypeId whose state State_Get hands over
        self.state: int | None = None
        self.set_result: int | None = None  # what State_Set returns (None: success)
        self.calls: list[tuple[str, int, int]] = []  # (function, struct_size, ctx)
        self.errors: list[tuple[int, str]] = []  # (code, message) of each Error_Create
        self.destroyed: list[int] = []  # the errors Error_Destroy was given
        self.state_asks: list[tuple[int, int]] = []  # (stage, type_id) of each State_Get
        self.states_set: list[tuple[int, int, int]] = []  # (stage, type_id, state) of each State_Set
        self._keep = [
            _xla_ffi.ErrorCreate(self._error_create),
            _xla_ffi.StreamGet(self._stream_get),
            _xla_ffi.DeviceOrdinalGet(self._ordinal_get),
            _xla_ffi.StateCall(self._state_get),
            _xla_ffi.StateCall(self._state_set),
            ctypes.CFUNCTYPE(None, ctypes.POINTER(_xla_ffi._ErrorDestroyArgs))(self._error_destroy),
        ]
        self.api = _xla_ffi._Api()
        self.api.struct_size = ctypes.sizeof(_xla_ffi._Api)
        (
            self.api.Error_Create,
            self.api.Stream_Get,
            self.api.DeviceOrdinal_Get,
            self.api.State_Get,
            self.api.State_Set,
            self.api.Error_Destroy,
        ) = map(_address, self._keep)

    def reset(self) -> None:
        self.ordinal = 0
        self.state = None
        self.set_result = None
        for log in (self.calls, self.errors, self.destroyed, self.state_asks, self.states_set):
            log.clear()

    def _state_get(self, args: Any) -> int | None:
        a = args.contents
        self.calls.append(("State_Get", a.struct_size, a.ctx or 0))
        self.state_asks.append((a.stage, a.type_id or 0))
        if a.stage != _xla_ffi.STAGE_INSTANTIATE or (a.type_id or 0) != self.type_id or self.state is None:
            return STATE_ERROR
        a.state = self.state
        return None

    def _state_set(self, args: Any) -> int | None:
        a = args.contents
        self.calls.append(("State_Set", a.struct_size, a.ctx or 0))
        self.states_set.append((a.stage, a.type_id or 0, a.state or 0))
        return self.set_result

    def _error_destroy(self, args: Any) -> None:
        self.calls.append(("Error_Destroy", args.contents.struct_size, 0))
        self.destroyed.append(args.contents.error or 0)

    def _error_create(self, args: Any) -> int:
        a = args.contents
        self.calls.append(("Error_Create", a.struct_size, 0))
        self.errors.append((a.errc, a.message.decode()))
        return ERROR

    def _stream_get(self, args: Any) -> int | None:
        a = args.contents
        self.calls.append(("Stream_Get", a.struct_size, a.ctx or 0))
        a.stream = STREAM
        return None

    def _ordinal_get(self, args: Any) -> int | None:
        a = args.contents
        self.calls.append(("DeviceOrdinal_Get", a.struct_size, a.ctx or 0))
        a.device_ordinal = self.ordinal
        return None


class FakeCuda:
    """Fake ``wp_cuda_launch_kernel`` and ``wp_memset_device``, typed exactly as Warp declares them.

    A launch records its arguments and, as ``cuLaunchKernel`` copies them at launch, the bytes of each
    kernel parameter read through the params array (``sizes`` says how many bytes each one has).
    """

    def __init__(self) -> None:
        core = _warp_kernels.runtime_core()
        launch, memset, memcpy = core.wp_cuda_launch_kernel, core.wp_memset_device, core.wp_memcpy_d2d
        assert len(launch.argtypes) == 11
        assert len(memset.argtypes) == 5
        assert len(memcpy.argtypes) == 5
        self.launch = ctypes.CFUNCTYPE(launch.restype, *launch.argtypes)(self._launch)
        self.memset = ctypes.CFUNCTYPE(memset.restype, *memset.argtypes)(self._memset)
        self.memcpy = ctypes.CFUNCTYPE(memcpy.restype, *memcpy.argtypes)(self._memcpy)
        self.memcpys: list[tuple[int, int, int, int, int]] = []
        self.memcpy_result = True
        self.sizes: list[int] = []
        self.launches: list[dict[str, Any]] = []
        self.memsets: list[tuple[int, int, int, int, int]] = []
        self.order: list[str] = []  # "memset" / "launch", as called
        self.launch_result = 0
        self.memset_result = True
        # Warp's wp_get_error_string: the text of its last CUDA error (empty until a failure sets it)
        self.error_text = ctypes.create_string_buffer(256)
        self.error_string = ctypes.CFUNCTYPE(_P)(lambda: ctypes.addressof(self.error_text))

    def reset(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.launches.clear()
        self.memsets.clear()
        self.memcpys.clear()
        self.order.clear()
        self.launch_result, self.memset_result, self.memcpy_result = 0, True, True
        self.error_text.value = b""

    def _launch(self, *a: Any) -> int:
        context, fn, dim, max_blocks, block_dim, grid_stride, cluster_dim, smem, params, stream, info = a
        self.order.append("launch")
        pointers = [params[i] or 0 for i in range(len(self.sizes))]
        self.launches.append(
            {
                "args": (context or 0, fn or 0, dim, max_blocks, block_dim, grid_stride, cluster_dim, smem),
                "stream": stream or 0,
                "info": info or 0,
                "params": [ctypes.string_at(p, n) for p, n in zip(pointers, self.sizes, strict=True)],
            }
        )
        return self.launch_result

    def _memcpy(self, context: int | None, dst: int | None, src: int | None, nbytes: int, stream: int | None) -> bool:
        self.order.append("memcpy")
        self.memcpys.append((context or 0, dst or 0, src or 0, nbytes, stream or 0))
        return self.memcpy_result

    def _memset(self, context: int | None, ptr: int | None, value: int, nbytes: int, stream: int | None) -> bool:
        self.order.append("memset")
        self.memsets.append((context or 0, ptr or 0, value, nbytes, stream or 0))
        return self.memset_result


class Env:
    """A private copy of the handler, configured with the fakes and recording slow-path and resolve callbacks."""

    def __init__(self, handler: _native.NativeHandler) -> None:
        self.handler = handler
        self.xla = FakeXla()
        self.xla.type_id = handler.state_type  # the copy's own XLA_FFI_TypeId
        self.cuda = FakeCuda()
        self.slow_calls: list[tuple[str, bool, int]] = []
        self.resolve_calls: list[tuple[str, bool, int]] = []
        self.resolved: tuple[int, int] | None = None  # what resolve writes (None: it fails with RESOLVE_ERROR)
        keys = list(itertools.product(("cpu", "CUDA"), (True, False)))
        self._slow = {key: ctypes.CFUNCTYPE(_P, _P)(self._recorder(key)) for key in keys}
        self._resolve = {key: _target._RESOLVE_TYPE(self._resolver(key)) for key in keys}
        handler.configure(
            {key: _address(cb) for key, cb in self._slow.items()},
            {key: _address(cb) for key, cb in self._resolve.items()},
            cuda=(
                _address(self.cuda.launch),
                _address(self.cuda.memset),
                _address(self.cuda.error_string),
                _address(self.cuda.memcpy),
            ),
        )
        self.calls = {graph: ctypes.CFUNCTYPE(_P, _P)(handler.address("CUDA", graph)) for graph in (True, False)}
        self.instantiate = {
            graph: ctypes.CFUNCTYPE(_P, _P)(handler.instantiate_address("CUDA", graph)) for graph in (True, False)
        }

    def _recorder(self, key: tuple[str, bool]) -> Callable[[int], int]:
        def slow(frame: int) -> int:
            self.slow_calls.append((*key, frame))
            return SLOW

        return slow

    def _resolver(self, key: tuple[str, bool]) -> Callable[[int, Any], int | None]:
        def resolve(frame: int, out: Any) -> int | None:
            self.resolve_calls.append((*key, frame))
            if self.resolved is None:
                return RESOLVE_ERROR
            out[0], out[1] = self.resolved
            return None

        return resolve

    def reset(self, sizes: list[int] | None = None) -> None:
        self.xla.reset()
        self.cuda.reset(sizes or [])
        self.slow_calls.clear()
        self.resolve_calls.clear()
        self.resolved = None

    def call(self, frame: Frame, graph: bool = True) -> int:
        """Run the execute stage on ``frame``; State_Get answers with the frame's state (if it has one)."""
        self.xla.state = frame.state_address
        return self.calls[graph](ctypes.addressof(frame.frame)) or 0


@pytest.fixture(scope="module")
def env() -> Env:
    handler = _native.build(name=f"jarp_native_test_cuda_{id(Env)}")
    return Env(handler)


@pytest.fixture
def fresh(env: Env) -> Env:
    env.reset()
    return env


class Frame:
    """An ``XLA_FFI_CallFrame`` built by hand for a plan's buffers (with fake data pointers).

    The call's state (what its instantiate stage kept) holds ``handle``; None: the call has no state. A frame
    of the execute stage carries no attributes (the description was read once, by the instantiate stage).
    """

    def __init__(
        self,
        xla: FakeXla,
        args: list[tuple[Any, tuple[int, ...]]],
        rets: list[tuple[Any, tuple[int, ...]]],
        handle: int | None,
        stage: int = 3,  # execute
    ) -> None:
        self._keep: list[Any] = []
        self.state = None if handle is None else State(handle, 7, None)
        self.state_address = None if self.state is None else ctypes.addressof(self.state)
        f = _xla_ffi._CallFrame()
        f.struct_size = ctypes.sizeof(_xla_ffi._CallFrame)
        f.api = ctypes.addressof(xla.api)
        f.ctx = XLA_CTX
        f.stage = stage
        self.arg_ptrs = [ARG_BASE + i * 0x1_0000_0000 for i in range(len(args))]
        self.ret_ptrs = [RET_BASE + j * 0x1_0000_0000 for j in range(len(rets))]
        for side, buffers, ptrs in ((f.args, args, self.arg_ptrs), (f.rets, rets, self.ret_ptrs)):
            side.struct_size = ctypes.sizeof(_xla_ffi._Args)
            side.size = len(buffers)
            side.types = self._own((ctypes.c_int * max(len(buffers), 1))(*[1] * len(buffers)))  # BUFFER
            items = [self._buffer(dtype, dims, ptr) for (dtype, dims), ptr in zip(buffers, ptrs, strict=True)]
            side.args = self._own((_P * max(len(items), 1))(*items))
        f.attrs.struct_size = ctypes.sizeof(_xla_ffi._Attrs)
        f.attrs.size = 0
        self.frame = f

    def _own(self, obj: Any) -> int:
        self._keep.append(obj)
        return ctypes.addressof(obj)

    def _buffer(self, dtype: Any, dims: tuple[int, ...], data: int) -> int:
        b = _xla_ffi._Buffer()
        b.struct_size = ctypes.sizeof(_xla_ffi._Buffer)
        b.dtype = _xla_ffi.dtype_code(np.dtype(dtype))
        b.data = data
        b.rank = len(dims)
        b.dims = self._own((ctypes.c_int64 * max(len(dims), 1))(*dims))
        return self._own(b)


# ---- plans and their CUDA executors ----

_sss = jax_kernel(k.scale_sum_square, enable_backward=True)
_x9 = jnp.linspace(-1.0, 1.0, 9, dtype=jnp.float32)
_xs = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
_w4 = jnp.linspace(0.5, 2.0, 4, dtype=jnp.float32)


def _plan(fn: Callable[..., Any], *args: Any, adjoint: bool = False) -> tuple[int, Plan]:
    """The (handle, plan) of the kernel call ``jax.jit(fn)`` lowers to (the adjoint one if asked)."""
    text = jax.jit(fn).lower(*args).as_text()
    found = [(h, registry.plan(h)) for h in plan_handles(text)]
    found = [(h, p) for h, p in found if p.adjoint == adjoint]
    assert len(found) == 1, found
    return found[0]


PLANS: dict[str, Callable[[], tuple[int, Plan]]] = {
    "forward": lambda: _plan(lambda x: jax_kernel(k.triple_kernel)(x)[0], _x9),
    "adjoint": lambda: _plan(jax.grad(lambda x: jnp.sum(_sss(x, x, 2.0)[0])), _x9, adjoint=True),
    "batched forward, one operand unbatched": lambda: _plan(jax.vmap(lambda r: _sss(r, _w4, 2.0)[0]), _xs),
    "batched adjoint (vmap of grad)": lambda: _plan(
        jax.vmap(jax.grad(lambda r: jnp.sum(_sss(r, r, 2.0)[0]))), _xs, adjoint=True
    ),
    "zero-filled result": lambda: _plan(
        lambda w: jax_kernel(k.scatter_add_kernel, launch_dims=4, output_dims={"out": 3})(
            jnp.array([0, 2, 2, 1], jnp.int32), w
        )[0],
        _w4,
    ),
}


class FakeDevice:
    context = CONTEXT
    ordinal = 0

    def __str__(self) -> str:
        return "cuda:0"


def _cuda_executor(plan: Plan, monkeypatch: pytest.MonkeyPatch, cluster_dim: int = CLUSTER) -> Any:
    """A real `_executors.CudaKernelExecutor` for ``plan``; only Warp's module loading is faked."""
    size = math.prod(plan.launch_dims)
    device = FakeDevice()
    entry = SimpleNamespace(
        device=device,
        module_exec=None,
        hooks=SimpleNamespace(
            forward=FORWARD,
            backward=BACKWARD,
            forward_smem_bytes=SMEM[False],
            backward_smem_bytes=SMEM[True],
            forward_smem_shortfall=None,  # Warp's diagnosis of a kernel short of shared memory: none here
            backward_smem_shortfall=None,
        ),
        forward=FORWARD,
        backward=BACKWARD,
        block_dim=max(1, -(-size // cluster_dim)),  # a whole number of clusters, as Warp requires
        cluster_dim=cluster_dim,
        forward_smem=SMEM[False],
        backward_smem=SMEM[True],
        code_hash=plan.code_hash,  # the build of the code the plan was judged on
    )
    loads = []

    def load_entry_points(kernel: Any, dev: Any, block_dim: int | None = None) -> Any:
        loads.append((kernel, dev, block_dim))
        real(kernel, wp.get_device("cpu"))  # builds the module, which resolves the kernel's grid_stride
        return entry

    real = _warp_launches.load_entry_points

    monkeypatch.setattr(_warp_launches, "load_entry_points", load_entry_points)
    executor = _executors.CudaKernelExecutor(plan, device)
    assert loads == [(plan.target, device, plan.block_dim)]
    return executor


def _frame(env: Env, handle: int, plan: Plan, **kwargs: Any) -> Frame:
    args = [(b.dtype, plan.operand_shape(i)) for i, b in enumerate(plan.operands)]
    rets = [(b.dtype, plan.result_shape(j)) for j, b in enumerate(plan.results)]
    return Frame(env.xla, args, rets, handle, **kwargs)


def _param_sizes(plan: Plan, bounds: Any) -> list[int]:
    """The bytes of each kernel parameter: the bounds, then each parameter per argument block (Warp's types)."""
    sizes = []
    for _, t in _warp_kernels.kernel_params(plan.target):
        sizes.append(ctypes.sizeof(_warp_launches.ArrayStruct) if hasattr(t, "ndim") else ctypes.sizeof(t._type_))
    return [ctypes.sizeof(bounds)] + sizes * (2 if plan.adjoint else 1)


def _expected_params(plan: Plan, frame: Frame, s: int) -> list[Any]:
    """What each kernel parameter must hold in batch slice ``s``, from the plan's bindings and the frame."""

    def pointer(binding: Any) -> int:
        if binding.source == "operand":
            batched = any(plan.operand_batch[binding.index])
            return frame.arg_ptrs[binding.index] + (s * plan.operands[binding.index].nbytes if batched else 0)
        assert binding.source == "result"
        return frame.ret_ptrs[binding.index] + s * plan.results[binding.index].nbytes

    expected: list[Any] = [("bounds", tuple(plan.launch_dims))]
    for block in range(2 if plan.adjoint else 1):
        for param in plan.params:
            binding = param.primal if block == 0 else param.adjoint
            if param.spec.is_array:
                grad = pointer(param.adjoint) if block == 0 and plan.adjoint else 0
                buf = (plan.operands if binding.source == "operand" else plan.results)[binding.index]
                expected.append(("array", pointer(binding), grad, buf.shape, buf.dtype.itemsize))
            else:
                expected.append(("value", binding.value))
    return expected


def _decode(raw: list[bytes], expected: list[Any], bounds_type: Any) -> list[Any]:
    """The parameter bytes a launch read, decoded as what ``expected`` says each one is."""
    out: list[Any] = []
    for data, want in zip(raw, expected, strict=True):
        if want[0] == "bounds":
            b = bounds_type.from_buffer_copy(data)
            assert b.size == math.prod(want[1])
            out.append(("bounds", tuple(b.shape)))
        elif want[0] == "array":
            a = _warp_launches.ArrayStruct.from_buffer_copy(data)
            shape = tuple(a.shape[: a.ndim])
            out.append(("array", a.data, a.grad, shape, a.strides[a.ndim - 1]))
        else:
            out.append(("value", float(np.frombuffer(data, np.float32)[0])))
    return out


@pytest.mark.parametrize("case", list(PLANS))
@pytest.mark.parametrize("graph", [True, False])
def test_a_published_cuda_plan_launches_exactly_as_warp_would(
    case: str, graph: bool, env: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle, plan = PLANS[case]()
    executor = _cuda_executor(plan, monkeypatch)
    descriptor = executor.native_descriptor()
    assert descriptor is not None
    assert env.handler.publish(handle, 1, descriptor)  # slot 1: CUDA ordinal 0
    frame = _frame(env, handle, plan)
    bounds_type = type(executor.bounds)
    env.reset(_param_sizes(plan, bounds_type))

    assert env.call(frame, graph) == 0
    assert env.slow_calls == []
    nslices = math.prod(plan.batch_shape)
    assert (nslices > 1) == ("batched" in case)
    # the call's state (once: the instantiate stage's, of jarp's type), the ordinal, then the stream, each asked
    # once of the frame's context
    assert env.xla.calls == [
        ("State_Get", ctypes.sizeof(_xla_ffi.StateArgs), XLA_CTX),
        ("DeviceOrdinal_Get", _xla_ffi.DeviceOrdinalGetArgs.device_ordinal.offset + 4, XLA_CTX),
        ("Stream_Get", ctypes.sizeof(_xla_ffi.StreamGetArgs), XLA_CTX),
    ]
    # zero-filled results: the whole buffer (every slice), on the stream, before any launch
    zeroed = [(CONTEXT, frame.ret_ptrs[j], 0, plan.results[j].nbytes * nslices, STREAM) for j in plan.zero_results]
    assert env.cuda.memsets == zeroed
    if "zero" in case:
        assert zeroed
    assert env.cuda.order == ["memset"] * len(zeroed) + ["launch"] * nslices
    adjoint = plan.adjoint
    block_dim = executor.entry.block_dim
    assert [launch["args"] for launch in env.cuda.launches] == [
        (
            CONTEXT,
            BACKWARD if adjoint else FORWARD,
            math.prod(plan.launch_dims),
            0,  # max_blocks
            block_dim,
            int(plan.target.grid_stride),
            CLUSTER,
            SMEM[adjoint],
        )
    ] * nslices
    assert all(launch["stream"] == STREAM and launch["info"] == 0 for launch in env.cuda.launches)
    for s, launch in enumerate(env.cuda.launches):
        expected = _expected_params(plan, frame, s)
        assert _decode(launch["params"], expected, bounds_type) == expected, f"slice {s}"

    # The Python path's launch (CudaKernelExecutor.run through _warp_launches.cuda_launch and cuda_memset,
    # as the CUDA callback runs it) calls Warp's functions with the same arguments and parameter values.
    native = (list(env.cuda.memsets), [dict(launch) for launch in env.cuda.launches])
    env.reset(_param_sizes(plan, bounds_type))
    fake_core = SimpleNamespace(wp_cuda_launch_kernel=env.cuda.launch, wp_memset_device=env.cuda.memset)
    monkeypatch.setattr(_warp_kernels, "runtime_core", lambda: fake_core)
    executor.run(ctypes.addressof(frame.frame))
    assert (env.cuda.memsets, env.cuda.launches) == native


@pytest.mark.parametrize("fails", [False, True])
def test_in_out_copies_of_a_partitioned_call_run_first_on_the_stream(
    fails: bool, fresh: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A partitioned call passes an in-out operand and its result as two buffers (XLA keeps no aliases there): the
    # handler copies the operand to the result (Warp's wp_memcpy_d2d, on the call's stream) before any zero-fill or
    # launch. The adjoint plan's cotangent pairs stand in for a partitioned call's in-out pairs.
    handle, plan = PLANS["adjoint"]()
    executor = _cuda_executor(plan, monkeypatch)
    assert plan.aliases
    executor.copies = [(i, j, plan.results[j].nbytes) for i, j in plan.aliases]
    assert fresh.handler.publish(handle, 1, executor.native_descriptor())
    frame = _frame(fresh, handle, plan)
    fresh.reset(_param_sizes(plan, type(executor.bounds)))
    fresh.cuda.memcpy_result = not fails
    if fails:
        assert fresh.call(frame) == ERROR
        (error,) = fresh.xla.errors
        assert ": copying an in-out operand to its result before the launch failed" in error[1]
        assert fresh.cuda.order == ["memcpy"]
        return
    assert fresh.call(frame) == 0
    assert fresh.slow_calls == []
    assert fresh.cuda.memcpys == [
        (CONTEXT, frame.ret_ptrs[j], frame.arg_ptrs[i], nbytes, STREAM) for i, j, nbytes in executor.copies
    ]
    assert fresh.cuda.order == ["memcpy"] * len(executor.copies) + ["memset"] * len(plan.zero_results) + ["launch"]


def test_the_zero_fill_of_an_empty_launch_grid_still_runs(fresh: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    scatter = jax_kernel(k.scatter_add_kernel, launch_dims=0, output_dims={"out": 3})
    handle, plan = _plan(lambda w: scatter(jnp.zeros(0, jnp.int32), w)[0], jnp.zeros(0, jnp.float32))
    executor = _cuda_executor(plan, monkeypatch)
    assert executor.empty
    assert fresh.handler.publish(handle, 1, executor.native_descriptor())
    frame = _frame(fresh, handle, plan)
    assert fresh.call(frame) == 0
    assert fresh.cuda.memsets == [(CONTEXT, frame.ret_ptrs[0], 0, 12, STREAM)]
    assert fresh.cuda.launches == []
    assert fresh.slow_calls == []


@pytest.mark.parametrize("what", ["launch", "memset"])
def test_a_failed_launch_or_memset_is_an_xla_error_with_the_descriptors_message(
    what: str, fresh: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle, plan = (
        PLANS["batched forward, one operand unbatched"]() if what == "launch" else PLANS["zero-filled result"]()
    )
    executor = _cuda_executor(plan, monkeypatch)
    assert fresh.handler.publish(handle, 1, executor.native_descriptor())
    frame = _frame(fresh, handle, plan)
    fresh.reset(_param_sizes(plan, type(executor.bounds)))
    if what == "launch":
        fresh.cuda.launch_result = 1  # any nonzero CUresult
    else:
        fresh.cuda.memset_result = False
    why = "Warp CUDA error 701: too many resources requested for launch (/builds/warp/native/warp.cu:4242)"
    fresh.cuda.error_text.value = why.encode()
    assert fresh.call(frame) == ERROR
    # wp.launch's message, with Warp's diagnosis of the CUDA error (what the Python path raises; see below)
    begins = f"Error launching kernel: {plan.target.key} on device cuda:0"
    failed = "" if what == "launch" else ": zero-filling a result before the launch failed"
    message = f"{begins}{failed}: {why} (jarp's native launch)"
    assert fresh.xla.errors == [(int(_xla_ffi.ErrorCode.INTERNAL), message)]
    assert fresh.xla.calls[-1] == ("Error_Create", _xla_ffi.ErrorCreateArgs.errc.offset + 4, 0)
    # the first failure ends the call: one launch of three slices, or no launch after a failed memset
    assert len(fresh.cuda.launches) == (1 if what == "launch" else 0)
    assert fresh.slow_calls == []
    # The Python path reports the same failure with the same diagnosis.
    fake_runtime = SimpleNamespace(get_error_string=lambda: why)
    fake_core = SimpleNamespace(wp_cuda_launch_kernel=fresh.cuda.launch, wp_memset_device=fresh.cuda.memset)
    monkeypatch.setattr(_warp_kernels, "runtime_core", lambda: fake_core)
    monkeypatch.setattr(wp._src.context, "runtime", fake_runtime)
    with pytest.raises(RuntimeError) as info:
        executor.run(ctypes.addressof(frame.frame))
    assert why in str(info.value)
    if what == "launch":
        assert str(info.value) == f"{begins}: {why}"


def test_a_kernel_short_of_shared_memory_reports_warps_diagnosis_natively(
    fresh: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle, plan = PLANS["forward"]()
    executor = _cuda_executor(plan, monkeypatch)
    shortfall = "more than the 101376 bytes device 'cuda:0' allows"
    executor.entry.hooks.forward_smem_shortfall = shortfall  # Warp found it when it loaded the module
    executor.entry.hooks.forward_smem_bytes = 200_000
    assert fresh.handler.publish(handle, 1, executor.native_descriptor())
    frame = _frame(fresh, handle, plan)
    fresh.reset(_param_sizes(plan, type(executor.bounds)))
    fresh.cuda.launch_result = 1
    assert fresh.call(frame) == ERROR
    ((code, message),) = fresh.xla.errors
    assert code == int(_xla_ffi.ErrorCode.INTERNAL)
    assert message.startswith(
        f"Error launching kernel: {plan.target.key} on device cuda:0: the forward kernel requests 200000 bytes "
        f"of dynamic shared memory, {shortfall}."
    )
    assert message.endswith("(jarp's native launch)")


MISMATCHES = [
    "device ordinal 16",
    "device ordinal -1",
    "an ordinal with no descriptor",
    "no jarp state",
    "a null state",
    "an operand of other dims",
    "an operand of another dtype",
    "a missing result",
    "a plan handle with no descriptor",
]


def _mismatches(plan: Plan) -> dict[str, dict[str, Any]]:
    """How each case of `MISMATCHES` changes the frame of a call of ``plan``."""
    args = [(b.dtype, plan.operand_shape(i)) for i, b in enumerate(plan.operands)]
    rets = [(b.dtype, plan.result_shape(j)) for j, b in enumerate(plan.results)]
    longer = [(args[0][0], (args[0][1][0] + 1,)), *args[1:]]
    return {
        "device ordinal 16": {"ordinal": 16},
        "device ordinal -1": {"ordinal": -1},
        "an ordinal with no descriptor": {"ordinal": 1},
        "no jarp state": {"handle": None},  # State_Get fails: the instantiate stage was not jarp's
        "a null state": {"state": 0},  # State_Get succeeds without a state
        "an operand of other dims": {"args": longer},
        "an operand of another dtype": {"args": [(np.uint32, args[0][1]), *args[1:]]},
        "a missing result": {"rets": rets[:-1]},
        "a plan handle with no descriptor": {"handle": 1 << 20},
    }


@pytest.mark.parametrize("case", MISMATCHES)
@pytest.mark.parametrize("graph", [True, False])
def test_a_frame_the_handler_does_not_recognise_goes_to_the_slow_path(
    case: str, graph: bool, fresh: Env, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    handle, plan = PLANS["zero-filled result"]()  # would memset and launch if it were taken for the plan's
    executor = _cuda_executor(plan, monkeypatch)
    assert fresh.handler.publish(handle, 1, executor.native_descriptor())
    change = _mismatches(plan)[case]
    if case == "device ordinal 16":
        # Slot 1 + 16 of a handle would read the table entry of the next handle's CPU slot: publish one there.
        assert (handle + 1) % _native.NativeHandler.CHUNK_HANDLES != 0
        assert fresh.handler.publish(handle + 1, 0, executor.native_descriptor())
        request.addfinalizer(lambda: fresh.handler.withdraw([handle + 1]))
    fresh.xla.ordinal = change.get("ordinal", 0)
    args = change.get("args", [(b.dtype, plan.operand_shape(i)) for i, b in enumerate(plan.operands)])
    rets = change.get("rets", [(b.dtype, plan.result_shape(j)) for j, b in enumerate(plan.results)])
    frame = Frame(fresh.xla, args, rets, change.get("handle", handle))
    if "state" in change:
        frame.state_address = change["state"]
    assert fresh.call(frame, graph) == SLOW
    assert fresh.slow_calls == [("CUDA", graph, ctypes.addressof(frame.frame))]
    assert fresh.cuda.launches == []
    assert fresh.cuda.memsets == []
    assert fresh.xla.errors == []
    assert fresh.xla.state_asks == [(_xla_ffi.STAGE_INSTANTIATE, fresh.handler.state_type)]
    # State_Get's error for a call without a state is the handler's to destroy (the Python side explains)
    assert fresh.xla.destroyed == ([STATE_ERROR] if case == "no jarp state" else [])


def test_the_last_device_slot_is_ordinal_15(fresh: Env, monkeypatch: pytest.MonkeyPatch) -> None:
    handle, plan = PLANS["forward"]()
    executor = _cuda_executor(plan, monkeypatch)
    assert fresh.handler.publish(handle, 16, executor.native_descriptor())
    fresh.reset(_param_sizes(plan, type(executor.bounds)))
    fresh.xla.ordinal = 15
    frame = _frame(fresh, handle, plan)
    assert fresh.call(frame) == 0
    assert len(fresh.cuda.launches) == 1
    assert fresh.slow_calls == []


@pytest.mark.parametrize("stage", ["execute", "instantiate"])
@pytest.mark.parametrize("graph", [True, False])
def test_the_metadata_query_is_answered_with_the_command_buffer_trait_and_state_type(
    graph: bool, stage: str, fresh: Env
) -> None:
    handle, plan = PLANS["forward"]()
    frame = _frame(fresh, handle, plan)
    type_id = ctypes.c_int64.from_address(fresh.handler.state_type)
    type_id.value = 0x7A  # the copy's XLA_FFI_TypeId, as XLA assigns it when the type is registered
    storage = (ctypes.c_uint64 * 16)(*[0xAB] * 16)
    meta = _xla_ffi._Metadata.from_buffer(storage)
    meta.struct_size = ctypes.sizeof(_xla_ffi._Metadata)
    ext = _xla_ffi._MetadataExtension()
    ext.base.struct_size = ctypes.sizeof(ext)
    ext.base.type = _xla_ffi.EXTENSION_METADATA
    ext.metadata = ctypes.pointer(meta)
    frame.frame.extension_start = ctypes.addressof(ext)
    handler = fresh.calls if stage == "execute" else fresh.instantiate
    assert (handler[graph](ctypes.addressof(frame.frame)) or 0) == 0
    assert (meta.api_version.major, meta.api_version.minor) == (0, 1)
    assert meta.traits == (_xla_ffi.COMMAND_BUFFER_COMPATIBLE if graph else 0)
    assert meta.state_type_id == 0x7A  # jarp's calls keep a state of jarp's type
    assert fresh.slow_calls == []
    assert fresh.resolve_calls == []
    assert fresh.xla.calls == []
    assert fresh.cuda.launches == []


def _delete_state(handler: _native.NativeHandler, state: int) -> None:
    """Call the deleter of jarp's state type (``jarp_state_info``), as XLA does when it destroys an executable."""
    info = _target._TypeInfo.from_address(handler.state_info)
    assert info.struct_size == ctypes.sizeof(_target._TypeInfo)
    ctypes.CFUNCTYPE(None, _P)(info.deleter)(state)


@pytest.mark.parametrize("graph", [True, False])
def test_the_instantiate_stage_keeps_the_resolved_plan_as_the_calls_state(
    graph: bool, fresh: Env, monkeypatch: pytest.MonkeyPatch
) -> None:
    handle, plan = PLANS["forward"]()
    executor = _cuda_executor(plan, monkeypatch)
    assert fresh.handler.publish(handle, 1, executor.native_descriptor())
    fresh.handler.take_released()  # drain what earlier tests left in the copy's queue
    fresh.resolved = (handle, 1234)  # what jarp's Python side resolves the description to: handle and lease id
    setup = Frame(fresh.xla, [], [], None, stage=_xla_ffi.STAGE_INSTANTIATE)
    assert (fresh.instantiate[graph](ctypes.addressof(setup.frame)) or 0) == 0
    assert fresh.resolve_calls == [("CUDA", graph, ctypes.addressof(setup.frame))]
    assert fresh.slow_calls == []
    ((stage, type_id, address),) = fresh.xla.states_set
    assert (stage, type_id) == (_xla_ffi.STAGE_INSTANTIATE, fresh.handler.state_type)
    state = State.from_address(address)
    assert (state.handle, state.lease, state.next) == (handle, 1234, None)
    # each execution reads the handle from that state and launches the published plan
    frame = _frame(fresh, handle, plan)
    frame.state_address = address
    fresh.reset(_param_sizes(plan, type(executor.bounds)))
    assert fresh.call(frame, graph) == 0
    assert len(fresh.cuda.launches) == 1
    assert fresh.slow_calls == []
    # XLA destroys the executable: the deleter queues the lease, which the registry takes at its next safe point
    assert fresh.handler.take_released() == []
    _delete_state(fresh.handler, address)
    assert fresh.handler.take_released() == [1234]
    assert fresh.handler.take_released() == []


def test_a_failed_resolve_is_the_instantiate_stages_error_and_keeps_no_state(fresh: Env) -> None:
    fresh.handler.take_released()  # drain what earlier tests left in the copy's queue
    setup = Frame(fresh.xla, [], [], None, stage=_xla_ffi.STAGE_INSTANTIATE)
    assert (fresh.instantiate[True](ctypes.addressof(setup.frame)) or 0) == RESOLVE_ERROR
    assert fresh.resolve_calls == [("CUDA", True, ctypes.addressof(setup.frame))]
    assert fresh.xla.states_set == []
    assert fresh.handler.take_released() == []


def test_a_refused_state_gives_its_lease_back(fresh: Env) -> None:
    fresh.handler.take_released()  # drain what earlier tests left in the copy's queue
    fresh.resolved = (3, 4321)
    fresh.xla.set_result = 0xE553_0000  # XLA_FFI_State_Set fails
    setup = Frame(fresh.xla, [], [], None, stage=_xla_ffi.STAGE_INSTANTIATE)
    assert (fresh.instantiate[False](ctypes.addressof(setup.frame)) or 0) == 0xE553_0000
    assert len(fresh.xla.states_set) == 1
    assert fresh.handler.take_released() == [4321]  # the state went to the release queue: its lease is released


def test_a_clustered_kernel_needs_a_whole_number_of_clusters_as_in_wp_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    _, plan = PLANS["forward"]()  # 9 threads
    with pytest.raises(ValueError, match=r"multiple of cluster_dim; got 5 blocks \(dim=9, block_dim=2\)"):
        _cuda_executor(plan, monkeypatch, cluster_dim=6)  # block_dim 2: 5 blocks, not whole clusters


def test_the_copy_under_test_is_not_the_process_handler(env: Env) -> None:
    """Loading the object under another name gives the copy its own globals: the process's handler keeps its own."""
    real = _native.handler()
    if real is None:  # the handler cannot be built here: the process registered its Python callbacks
        assert _native.status().startswith("python")
        return
    assert real.address("CUDA", True) != env.handler.address("CUDA", True)
    assert real.state_type != env.handler.state_type  # each has its own XLA_FFI_TypeId
    _target.ensure_registered()
    # The process's handler asks for the state of its own type, which a call the copy instantiated does not
    # have: the frame goes to *its* slow path, jarp's Python callback, which asks again, refuses the call and
    # answers through the frame's (fake) Error_Create.
    env.reset()
    handle, plan = PLANS["forward"]()
    frame = _frame(env, handle, plan)
    env.xla.state = frame.state_address
    real_call = ctypes.CFUNCTYPE(_P, _P)(real.address("CUDA", True))
    assert (real_call(ctypes.addressof(frame.frame)) or 0) == ERROR
    assert env.slow_calls == []
    assert env.cuda.launches == []
    assert env.xla.state_asks == [(_xla_ffi.STAGE_INSTANTIATE, real.state_type)] * 2  # the handler's, then Python's
    assert env.xla.destroyed == [STATE_ERROR] * 2
    ((code, message),) = env.xla.errors
    assert code == int(_xla_ffi.ErrorCode.FAILED_PRECONDITION)
    assert "this call has no jarp state" in message
    # and CPU plans still run natively in this process
    f = jax.jit(lambda x: jax_kernel(k.triple_kernel)(x)[0])
    np.testing.assert_allclose(f(_x9), 3 * np.asarray(_x9), rtol=1e-6)
