"""`register_ffi_callback`: a Python function as an XLA FFI target, called by ``jax.ffi.ffi_call``.

The low-level counterpart of `jax_callable`, after Warp's ``register_ffi_callback``: XLA hands the
function its raw buffers, attributes and stream, and the function does the rest (checking shapes and
dtypes, launching kernels). Unlike Warp's, the target is registered for CPU as well as CUDA, re-registering
a name replaces the function instead of making XLA fail, and an exception becomes an error that JAX
raises at the call site, naming the callback.

XLA refuses (at registration, or when it initialises a backend later) a second handler under a name it
already knows, and asks a handler for its traits once, when it registers it. So each name gets one
ctypes trampoline per platform, registered once; the trampoline looks the function up by name at
every call.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np
import warp as wp

from .._upstream import _locks, _xla_ffi
from . import _errors, _target, _trampoline

_SHORT = {"cpu": "cpu", "CUDA": "cuda"}  # XLA platform name -> ExecutionContext.platform
_RESERVED = (_target.TARGET, _target.TARGET_NO_GRAPH)

_lock = _locks.make("user_callbacks")
# name -> (func, graph_compatible); the trampolines read the function from here at every call
_callbacks: dict[str, tuple[Callable[..., Any], bool]] = {}
# name -> {XLA platform: the address of its trampoline}, registered once per name
_trampolines: dict[str, dict[str, int]] = {}


def _numpy_dtype(code: int) -> np.dtype:
    dtype = _xla_ffi.numpy_dtype(code)
    if dtype is None:
        raise TypeError(
            f"XLA passed an element type register_ffi_callback cannot expose to Python ({_xla_ffi.dtype_name(code)}); "
            "use a byte-sized element type such as float32 or int8."
        )
    return dtype


class FfiBuffer:
    """An XLA buffer handed to a `register_ffi_callback` function: no copy, valid only during the call.

    Attributes:
        data: The address of the first element (device memory for CUDA buffers).
        shape: The buffer's shape, as JAX sees it (a ``wp.vec3`` array of length ``n`` is ``(n, 3)``).
        dtype: The NumPy element type.
        readonly: Whether the buffer is an input, which the function must not write.

    Buffers are dense and row-major. CPU buffers expose ``__array_interface__`` (so ``np.asarray(buf)``,
    ``wp.array(buf)`` and ``wp.launch(..., inputs=[buf])`` wrap them without copying); CUDA buffers expose
    ``__cuda_array_interface__``.
    """

    __slots__ = ("data", "dtype", "readonly", "shape")

    def __init__(self, data: int, shape: tuple[int, ...], dtype: np.dtype, readonly: bool) -> None:
        self.data = data
        self.shape = shape
        self.dtype = dtype
        self.readonly = readonly

    @property
    def ndim(self) -> int:
        """The number of dimensions."""
        return len(self.shape)

    @property
    def size(self) -> int:
        """The number of elements."""
        return int(np.prod(self.shape, dtype=np.int64))

    @property
    def nbytes(self) -> int:
        """The size in bytes."""
        return self.size * self.dtype.itemsize

    def _interface(self, version: int) -> dict[str, Any]:
        return {
            "shape": self.shape,
            "typestr": self.dtype.str,
            "data": (self.data, self.readonly),
            "strides": None,
            "version": version,
        }

    def __repr__(self) -> str:
        kind = "input" if self.readonly else "output"
        return f"{type(self).__name__}(shape={self.shape}, dtype={self.dtype}, {kind}, data=0x{self.data:x})"


class CpuBuffer(FfiBuffer):
    """A host `FfiBuffer`; NumPy and Warp read it through ``__array_interface__``."""

    __slots__ = ()

    @property
    def __array_interface__(self) -> dict[str, Any]:
        return self._interface(3)


class CudaBuffer(FfiBuffer):
    """A device `FfiBuffer`; Warp, CuPy and PyTorch read it through ``__cuda_array_interface__``."""

    __slots__ = ()

    @property
    def __cuda_array_interface__(self) -> dict[str, Any]:
        return self._interface(3)


class ExecutionContext:
    """Where XLA runs a `register_ffi_callback` call.

    Attributes:
        platform: ``"cpu"`` or ``"cuda"``.
        stage: The ``XLA_FFI_ExecutionStage`` (3, execute).
        stream: The ``cudaStream_t`` XLA runs the call on, as an integer; ``None`` on CPU. Launch the
            call's work on this stream (see `warp_stream`) and do not synchronize the host with it.
        device_ordinal: The ordinal of the device XLA runs the call on.
    """

    __slots__ = ("device_ordinal", "platform", "stage", "stream")

    def __init__(self, platform: str, stage: int, stream: int | None, device_ordinal: int) -> None:
        self.platform = platform
        self.stage = stage
        self.stream = stream
        self.device_ordinal = device_ordinal

    @property
    def device(self) -> Any:
        """The Warp device of the call: ``"cpu"``, or the CUDA device with XLA's ordinal."""
        return wp.get_device("cpu") if self.platform == "cpu" else wp.get_cuda_device(self.device_ordinal)

    @property
    def warp_stream(self) -> Any:
        """A ``wp.Stream`` wrapping XLA's stream (``None`` on CPU), for ``wp.launch(..., stream=...)``."""
        if self.stream is None:
            return None
        return wp.Stream(self.device, cuda_stream=self.stream)

    def __repr__(self) -> str:
        stream = "None" if self.stream is None else f"0x{self.stream:x}"
        return f"ExecutionContext(platform={self.platform!r}, device_ordinal={self.device_ordinal}, stream={stream})"


def register_ffi_callback(name: str, func: Callable[..., Any], graph_compatible: bool = True) -> None:
    """Register a Python function as the XLA FFI target ``name``, for CPU and CUDA.

    ``jax.ffi.ffi_call(name, result_shape_dtypes)(*arrays, **attributes)`` then calls
    ``func(inputs, outputs, attrs, ctx)``, where

    - ``inputs`` and ``outputs`` are lists of `FfiBuffer` (XLA's own memory, no copy: read the inputs, write
      every element of the outputs);
    - ``attrs`` is a dict of the call's keyword arguments, decoded by their XLA type: a Python ``int`` arrives
      as ``np.int64``, a ``float`` as ``np.float64``, ``np.float32(x)`` as ``np.float32``, a ``bool`` as
      ``np.bool_``, a ``str`` as ``str``, a NumPy array as a (copied) NumPy array and a ``dict`` as a dict;
    - ``ctx`` is an `ExecutionContext` (platform, device, CUDA stream).

    This is the low-level route: nothing checks shapes or dtypes, and the call is not differentiable or
    batchable unless the caller adds rules (``jax.custom_vjp``, ``vmap_method``). Prefer `jax_callable`
    when the function has Warp annotations. Registering ``name`` again replaces the function, also for
    functions already jitted. The function may run on several threads at once (one per device).

    Args:
        name: The FFI target name to pass to ``jax.ffi.ffi_call``.
        func: The function, ``func(inputs, outputs, attrs, ctx) -> None``. An exception it raises
            becomes an error that JAX raises at the call site.
        graph_compatible: Whether the function may be captured in a CUDA graph by XLA (it only enqueues
            work on ``ctx.stream``, without host synchronization or allocation). XLA reads this once, at
            the first registration of ``name``.

    Raises:
        TypeError: If ``name`` is not a non-empty string or ``func`` is not callable.
        ValueError: If ``name`` is one of jarp's own targets, or was registered before with another
            ``graph_compatible``.

    Example:
        ```python
        def double(inputs, outputs, attrs, ctx):
            wp.launch(scale_kernel, dim=inputs[0].shape, inputs=[inputs[0], attrs["s"]],
                      outputs=[outputs[0]], device=ctx.device, stream=ctx.warp_stream)

        jarp.warp.register_ffi_callback("double", double)
        y = jax.ffi.ffi_call("double", jax.ShapeDtypeStruct(x.shape, x.dtype))(x, s=np.float32(2.0))
        ```
    """
    if not isinstance(name, str) or not name:
        raise TypeError(f"register_ffi_callback: name must be a non-empty string, got {name!r}.")
    if not callable(func):
        raise TypeError(
            f"register_ffi_callback: func must be callable as func(inputs, outputs, attrs, ctx), got {func!r}."
        )
    if name in _RESERVED:
        raise ValueError(f"register_ffi_callback: {name!r} is a target of jarp itself; choose another name.")
    graph_compatible = bool(graph_compatible)
    with _lock:
        previous = _callbacks.get(name)
        if previous is not None:
            if previous[1] != graph_compatible:
                raise ValueError(
                    f"register_ffi_callback: {name!r} was registered with graph_compatible={previous[1]}, and XLA "
                    f"keeps the traits of a target's first registration; register graph_compatible="
                    f"{graph_compatible} under another name."
                )
            _callbacks[name] = (func, graph_compatible)
            return
        _xla_ffi.check_layout()
        _callbacks[name] = (func, graph_compatible)
        addresses = _trampolines[name] = {
            platform: _trampoline.trampoline(
                lambda frame, p=_SHORT[platform]: _callback(frame, name, p, graph_compatible)
            )
            for platform in _trampoline.PLATFORMS
        }
        _trampoline.register_target(name, addresses)


def _callback(frame: int, name: str, platform: str, graph_compatible: bool) -> int | None:
    func: Any = None
    try:
        if _xla_ffi.read_ptr(frame + _xla_ffi.FRAME_EXTENSION) and _xla_ffi.answer_metadata_query(
            frame, graph_compatible
        ):
            return None
        func = _callbacks[name][0]
        buffer = CpuBuffer if platform == "cpu" else CudaBuffer
        inputs = [buffer(d, s, _numpy_dtype(t), True) for t, d, s in _xla_ffi.read_buffers(frame, results=False)]
        outputs = [buffer(d, s, _numpy_dtype(t), False) for t, d, s in _xla_ffi.read_buffers(frame, results=True)]
        attrs = _decode_attrs(frame + _xla_ffi.FRAME_ATTRS_STRUCT)
        stream = None if platform == "cpu" else _xla_ffi.get_stream(frame)
        ctx = ExecutionContext(platform, _xla_ffi.read_stage(frame), stream, _xla_ffi.get_device_ordinal(frame))
        func(inputs, outputs, attrs, ctx)
        return None
    except BaseException as e:
        where = f"FFI callback {name!r}"
        if func is not None:
            qualname = getattr(func, "__qualname__", None)
            where += f" (function {getattr(func, '__module__', '?')}.{qualname})" if qualname else f" ({func!r})"
        try:
            return _errors.ffi_error(frame, e, where)
        except BaseException:  # never let an exception escape to ctypes: XLA would read garbage as success
            return _xla_ffi.create_error(frame, _xla_ffi.ErrorCode.INTERNAL, f"jarp: {where} failed")


_errors.own_frames(__file__)


def _decode_attrs(attrs: int) -> dict[str, Any]:
    """The attributes of an ``XLA_FFI_Attrs`` struct as a dict of NumPy scalars, arrays, strings and dicts."""
    out: dict[str, Any] = {}
    for name, kind, value in _xla_ffi.read_attrs(attrs):
        if kind == _xla_ffi.AttrType.SCALAR:
            code, ptr = _xla_ffi.read_scalar(value)
            dtype = _numpy_dtype(code)
            out[name] = np.frombuffer(ctypes.string_at(ptr, dtype.itemsize), dtype)[0]
        elif kind == _xla_ffi.AttrType.ARRAY:
            code, size, ptr = _xla_ffi.read_array(value)
            dtype = _numpy_dtype(code)
            raw = ctypes.string_at(ptr, size * dtype.itemsize) if size else b""
            out[name] = np.frombuffer(raw, dtype).copy()
        elif kind == _xla_ffi.AttrType.STRING:
            out[name] = _xla_ffi.read_string(value)
        elif kind == _xla_ffi.AttrType.DICTIONARY:
            out[name] = _decode_attrs(value)
        else:
            raise TypeError(f"XLA passed the attribute {name!r} with an unknown XLA_FFI_AttrType {kind}.")
    return out
