"""The few pieces of XLA's FFI C ABI (``xla/ffi/api/c_api.h``) that jarp's callback reads.

The callback is on the hot path of every launch, so it reads the call frame by
fixed byte offsets instead of building ctypes structures. The offsets are those
of the 64-bit layout of the C structs; `check_layout` recomputes them from
ctypes declarations so that a test fails loudly if they ever disagree.
"""

from __future__ import annotations

import ctypes
import enum
import struct
from typing import Any

import ml_dtypes
import numpy as np

_P = ctypes.c_void_p


class _Args(ctypes.Structure):
    _fields_ = (("struct_size", ctypes.c_size_t), ("ext", _P), ("size", ctypes.c_int64), ("types", _P), ("args", _P))


class _Attrs(ctypes.Structure):
    _fields_ = (
        ("struct_size", ctypes.c_size_t),
        ("ext", _P),
        ("size", ctypes.c_int64),
        ("types", _P),
        ("names", _P),
        ("attrs", _P),
    )


class _CallFrame(ctypes.Structure):
    _fields_ = (
        ("struct_size", ctypes.c_size_t),
        ("extension_start", _P),
        ("api", _P),
        ("ctx", _P),
        ("stage", ctypes.c_int),
        ("args", _Args),
        ("rets", _Args),
        ("attrs", _Attrs),
        ("future", _P),
    )


class _Buffer(ctypes.Structure):
    _fields_ = (
        ("struct_size", ctypes.c_size_t),
        ("ext", _P),
        ("dtype", ctypes.c_int),
        ("data", _P),
        ("rank", ctypes.c_int64),
        ("dims", _P),
    )


class _Scalar(ctypes.Structure):
    _fields_ = (("dtype", ctypes.c_int), ("value", _P))


class _Array(ctypes.Structure):
    _fields_ = (("dtype", ctypes.c_int), ("size", ctypes.c_size_t), ("data", _P))


class _ByteSpan(ctypes.Structure):
    _fields_ = (("ptr", _P), ("len", ctypes.c_size_t))


class _ExtensionBase(ctypes.Structure):
    _fields_ = (("struct_size", ctypes.c_size_t), ("type", ctypes.c_int), ("next", _P))


class _ApiVersion(ctypes.Structure):
    _fields_ = (("struct_size", ctypes.c_size_t), ("ext", _P), ("major", ctypes.c_int), ("minor", ctypes.c_int))


class _Metadata(ctypes.Structure):
    _fields_ = (
        ("struct_size", ctypes.c_size_t),
        ("api_version", _ApiVersion),
        ("traits", ctypes.c_uint32),
        ("state_type_id", ctypes.c_int64),  # an XLA_FFI_TypeId
    )


class _MetadataExtension(ctypes.Structure):
    _fields_ = (("base", _ExtensionBase), ("metadata", ctypes.POINTER(_Metadata)))


class ErrorCreateArgs(ctypes.Structure):
    _fields_ = (("struct_size", ctypes.c_size_t), ("ext", _P), ("message", ctypes.c_char_p), ("errc", ctypes.c_int))


class StreamGetArgs(ctypes.Structure):
    _fields_ = (("struct_size", ctypes.c_size_t), ("ext", _P), ("ctx", _P), ("stream", _P))


class DeviceOrdinalGetArgs(ctypes.Structure):
    _fields_ = (("struct_size", ctypes.c_size_t), ("ext", _P), ("ctx", _P), ("device_ordinal", ctypes.c_int32))


class StateArgs(ctypes.Structure):
    """``XLA_FFI_State_Set_Args`` and ``XLA_FFI_State_Get_Args`` (the same layout)."""

    _fields_ = (
        ("struct_size", ctypes.c_size_t),
        ("ext", _P),
        ("ctx", _P),
        ("stage", ctypes.c_int),
        ("type_id", _P),
        ("state", _P),
    )


ErrorCreate = ctypes.CFUNCTYPE(_P, ctypes.POINTER(ErrorCreateArgs))
StateCall = ctypes.CFUNCTYPE(_P, ctypes.POINTER(StateArgs))
StreamGet = ctypes.CFUNCTYPE(_P, ctypes.POINTER(StreamGetArgs))
DeviceOrdinalGet = ctypes.CFUNCTYPE(_P, ctypes.POINTER(DeviceOrdinalGetArgs))


class _Api(ctypes.Structure):
    _fields_ = (
        ("struct_size", ctypes.c_size_t),
        ("ext", _P),
        ("api_version", _ApiVersion),
        ("internal_api", _P),
        *(
            (name, _P)
            for name in (
                "Error_Create",
                "Error_GetMessage",
                "Error_Destroy",
                "Handler_Register",
                "Stream_Get",
                "TypeId_Register",
                "ExecutionContext_Get",
                "State_Set",
                "State_Get",
                "DeviceMemory_Allocate",
                "DeviceMemory_Free",
                "ThreadPool_Schedule",
                "ThreadPool_NumThreads",
                "Future_Create",
                "Future_SetAvailable",
                "Future_SetError",
                "RunId_Get",
                "DeviceOrdinal_Get",
            )
        ),
    )


_API_ERROR_CREATE = 48
_API_STREAM_GET = 80
_API_DEVICE_ORDINAL_GET = 184
_API_STATE_SET = 104
_API_STATE_GET = 112
_API_ERROR_DESTROY = 64
METADATA_STATE_TYPE = 40
STAGE_INSTANTIATE = 0

FRAME_EXTENSION = 8
FRAME_API = 16
FRAME_CTX = 24
FRAME_STAGE = 32
FRAME_ARGS_SIZE = 56
FRAME_ARGS = 72
FRAME_RETS_SIZE = 96
FRAME_RETS = 112
FRAME_ATTRS_SIZE = 136
FRAME_ATTRS = 160
FRAME_ATTRS_STRUCT = 120
ATTRS_SIZE = 16
ATTRS_TYPES = 24
ATTRS_NAMES = 32
ATTRS_VALUES = 40
BUFFER_DTYPE = 16
BUFFER_DATA = 24
BUFFER_RANK = 32
BUFFER_DIMS = 40
SCALAR_VALUE = 8
ARRAY_SIZE = 8
ARRAY_DATA = 16
BYTESPAN_LEN = 8
EXTENSION_TYPE = 8
EXTENSION_METADATA = 1
METADATA_TRAITS_OFFSET = 8 + ctypes.sizeof(_ApiVersion)
COMMAND_BUFFER_COMPATIBLE = 1


class ErrorCode(enum.IntEnum):
    """The subset of ``XLA_FFI_Error_Code`` that jarp reports."""

    CANCELLED = 1
    INVALID_ARGUMENT = 3
    NOT_FOUND = 5
    RESOURCE_EXHAUSTED = 8
    FAILED_PRECONDITION = 9
    INTERNAL = 13
    UNKNOWN = 2


class DataType(enum.IntEnum):
    """``XLA_FFI_DataType``: the element type of a buffer, scalar or array attribute."""

    INVALID = 0
    PRED = 1
    S1 = 30
    S2 = 26
    S4 = 21
    S8 = 2
    S16 = 3
    S32 = 4
    S64 = 5
    U1 = 31
    U2 = 27
    U4 = 22
    U8 = 6
    U16 = 7
    U32 = 8
    U64 = 9
    F16 = 10
    F32 = 11
    F64 = 12
    BF16 = 16
    C64 = 15
    C128 = 18
    TOKEN = 17
    F8E5M2 = 19
    F8E3M4 = 29
    F8E4M3 = 28
    F8E4M3FN = 20
    F8E4M3B11FNUZ = 23
    F8E5M2FNUZ = 24
    F8E4M3FNUZ = 25
    F4E2M1FN = 32
    F8E8M0FNU = 33


class AttrType(enum.IntEnum):
    """``XLA_FFI_AttrType``: the kind of a call attribute."""

    ARRAY = 1
    DICTIONARY = 2
    SCALAR = 3
    STRING = 4


# The one table of element types: each ``XLA_FFI_DataType`` with a NumPy dtype (ml_dtypes for the narrow floats),
# for jarp's buffers and for the buffers and attributes `register_ffi_callback` exposes.
_NUMPY_DTYPES: dict[DataType, np.dtype] = {
    DataType.PRED: np.dtype(np.bool_),
    DataType.S8: np.dtype(np.int8),
    DataType.S16: np.dtype(np.int16),
    DataType.S32: np.dtype(np.int32),
    DataType.S64: np.dtype(np.int64),
    DataType.U8: np.dtype(np.uint8),
    DataType.U16: np.dtype(np.uint16),
    DataType.U32: np.dtype(np.uint32),
    DataType.U64: np.dtype(np.uint64),
    DataType.F16: np.dtype(np.float16),
    DataType.F32: np.dtype(np.float32),
    DataType.F64: np.dtype(np.float64),
    DataType.C64: np.dtype(np.complex64),
    DataType.C128: np.dtype(np.complex128),
    DataType.BF16: np.dtype(ml_dtypes.bfloat16),
    DataType.F8E5M2: np.dtype(ml_dtypes.float8_e5m2),
    DataType.F8E3M4: np.dtype(ml_dtypes.float8_e3m4),
    DataType.F8E4M3: np.dtype(ml_dtypes.float8_e4m3),
    DataType.F8E4M3FN: np.dtype(ml_dtypes.float8_e4m3fn),
    DataType.F8E4M3B11FNUZ: np.dtype(ml_dtypes.float8_e4m3b11fnuz),
    DataType.F8E5M2FNUZ: np.dtype(ml_dtypes.float8_e5m2fnuz),
    DataType.F8E4M3FNUZ: np.dtype(ml_dtypes.float8_e4m3fnuz),
    DataType.F8E8M0FNU: np.dtype(ml_dtypes.float8_e8m0fnu),
}
_DTYPE_CODES: dict[np.dtype, DataType] = {dtype: code for code, dtype in _NUMPY_DTYPES.items()}


def dtype_code(dtype: np.dtype) -> int:
    """The ``XLA_FFI_DataType`` of a NumPy dtype; `DataType.INVALID` for one XLA buffers never have here."""
    return int(_DTYPE_CODES.get(np.dtype(dtype), DataType.INVALID))


def numpy_dtype(code: int) -> np.dtype | None:
    """The NumPy dtype of an ``XLA_FFI_DataType`` code; None for one with no NumPy counterpart (e.g. a token)."""
    return _NUMPY_DTYPES.get(code)  # type: ignore[call-overload]


def dtype_name(code: int) -> str:
    """A readable name for an ``XLA_FFI_DataType`` code (the NumPy name where there is one)."""
    dtype = numpy_dtype(code)
    if dtype is not None:
        return dtype.name
    return DataType(code).name if code in DataType._value2member_map_ else f"XLA_FFI_DataType {code}"


_SCALAR_FORMATS = {
    DataType.PRED: "?",
    DataType.S8: "b",
    DataType.S16: "h",
    DataType.S32: "i",
    DataType.S64: "q",
    DataType.U8: "B",
    DataType.U16: "H",
    DataType.U32: "I",
    DataType.U64: "Q",
    DataType.F16: "e",
    DataType.F32: "f",
    DataType.F64: "d",
}


def check_layout() -> None:
    """Raise `AssertionError` if the hard-coded offsets disagree with the ctypes declarations."""
    assert ctypes.sizeof(ctypes.c_void_p) == 8, "jarp's FFI bridge needs a 64-bit Python"
    expected = {
        "FRAME_EXTENSION": _CallFrame.extension_start.offset,
        "FRAME_API": _CallFrame.api.offset,
        "FRAME_CTX": _CallFrame.ctx.offset,
        "FRAME_STAGE": _CallFrame.stage.offset,
        "FRAME_ARGS_SIZE": _CallFrame.args.offset + _Args.size.offset,
        "FRAME_ARGS": _CallFrame.args.offset + _Args.args.offset,
        "FRAME_RETS_SIZE": _CallFrame.rets.offset + _Args.size.offset,
        "FRAME_RETS": _CallFrame.rets.offset + _Args.args.offset,
        "FRAME_ATTRS_SIZE": _CallFrame.attrs.offset + _Attrs.size.offset,
        "FRAME_ATTRS": _CallFrame.attrs.offset + _Attrs.attrs.offset,
        "FRAME_ATTRS_STRUCT": _CallFrame.attrs.offset,
        "ATTRS_SIZE": _Attrs.size.offset,
        "ATTRS_TYPES": _Attrs.types.offset,
        "ATTRS_NAMES": _Attrs.names.offset,
        "ATTRS_VALUES": _Attrs.attrs.offset,
        "BUFFER_DTYPE": _Buffer.dtype.offset,
        "BUFFER_DATA": _Buffer.data.offset,
        "BUFFER_RANK": _Buffer.rank.offset,
        "BUFFER_DIMS": _Buffer.dims.offset,
        "SCALAR_VALUE": _Scalar.value.offset,
        "ARRAY_SIZE": _Array.size.offset,
        "ARRAY_DATA": _Array.data.offset,
        "BYTESPAN_LEN": _ByteSpan.len.offset,
        "EXTENSION_TYPE": _ExtensionBase.type.offset,
        "METADATA_TRAITS_OFFSET": _Metadata.traits.offset,
        "_API_ERROR_CREATE": _Api.Error_Create.offset,
        "_API_STREAM_GET": _Api.Stream_Get.offset,
        "_API_DEVICE_ORDINAL_GET": _Api.DeviceOrdinal_Get.offset,
        "_API_STATE_SET": _Api.State_Set.offset,
        "_API_STATE_GET": _Api.State_Get.offset,
        "_API_ERROR_DESTROY": _Api.Error_Destroy.offset,
        "METADATA_STATE_TYPE": _Metadata.state_type_id.offset,
    }
    for name, offset in expected.items():
        assert globals()[name] == offset, f"XLA FFI layout mismatch for {name}: {globals()[name]} != {offset}"


def read_ptr(address: int) -> int:
    """Read a pointer-sized value at ``address`` (0 for NULL)."""
    return ctypes.c_void_p.from_address(address).value or 0


def answer_metadata_query(frame: int, graph_compatible: bool, state_type: int = 0) -> bool:
    """Answer XLA's first-call metadata query; return whether the frame was such a query.

    ``state_type`` is the id of the handler's state type (0: none; jarp's calls have one, see `set_state`).
    """
    ext = read_ptr(frame + FRAME_EXTENSION)
    if not ext or ctypes.c_int.from_address(ext + EXTENSION_TYPE).value != EXTENSION_METADATA:
        return False
    meta = ctypes.cast(ext, ctypes.POINTER(_MetadataExtension)).contents.metadata.contents
    meta.api_version.major = 0
    meta.api_version.minor = 1
    meta.traits = COMMAND_BUFFER_COMPATIBLE if graph_compatible else 0
    meta.state_type_id = state_type
    return True


def create_error(frame: int, code: ErrorCode, message: str) -> int:
    """Create an ``XLA_FFI_Error`` carrying ``message``; XLA raises it in Python at the call site."""
    api = read_ptr(frame + FRAME_API)
    fn = ErrorCreate(read_ptr(api + _API_ERROR_CREATE))
    args = ErrorCreateArgs(ctypes.sizeof(ErrorCreateArgs), None, message.encode("utf-8", "replace"), int(code))
    return fn(ctypes.byref(args)) or 0


def get_stream(frame: int) -> int:
    """Return the platform stream (``cudaStream_t``) XLA runs this call on."""
    api = read_ptr(frame + FRAME_API)
    fn = StreamGet(read_ptr(api + _API_STREAM_GET))
    args = StreamGetArgs(ctypes.sizeof(StreamGetArgs), None, read_ptr(frame + FRAME_CTX), None)
    fn(ctypes.byref(args))
    return args.stream or 0


def get_device_ordinal(frame: int) -> int:
    """Return the ordinal of the device XLA runs this call on."""
    api = read_ptr(frame + FRAME_API)
    fn = DeviceOrdinalGet(read_ptr(api + _API_DEVICE_ORDINAL_GET))
    args = DeviceOrdinalGetArgs(ctypes.sizeof(DeviceOrdinalGetArgs), None, read_ptr(frame + FRAME_CTX), 0)
    fn(ctypes.byref(args))
    return int(args.device_ordinal)


def set_state(frame: int, type_id: int, state: int) -> int:
    """Keep ``state`` (a pointer) as this call's state of the type at ``type_id``; an ``XLA_FFI_Error*`` or 0.

    Called in the instantiate stage: XLA keeps the state with the executable and hands it to the
    type's deleter when the executable is destroyed.
    """
    api = read_ptr(frame + FRAME_API)
    fn = StateCall(read_ptr(api + _API_STATE_SET))
    args = StateArgs(ctypes.sizeof(StateArgs), None, read_ptr(frame + FRAME_CTX), STAGE_INSTANTIATE, type_id, state)
    return fn(ctypes.byref(args)) or 0


def get_state(frame: int, type_id: int) -> int:
    """The state this call's instantiate stage set (a pointer), or 0 if it has none of the type at ``type_id``."""
    api = read_ptr(frame + FRAME_API)
    fn = StateCall(read_ptr(api + _API_STATE_GET))
    args = StateArgs(ctypes.sizeof(StateArgs), None, read_ptr(frame + FRAME_CTX), STAGE_INSTANTIATE, type_id, None)
    error = fn(ctypes.byref(args))
    if error:
        destroy_error(frame, error)
        return 0
    return args.state or 0


def destroy_error(frame: int, error: int) -> None:
    """Destroy an ``XLA_FFI_Error`` jarp received and does not pass on."""
    api = read_ptr(frame + FRAME_API)
    ctypes.CFUNCTYPE(None, ctypes.POINTER(_ErrorDestroyArgs))(read_ptr(api + _API_ERROR_DESTROY))(
        ctypes.byref(_ErrorDestroyArgs(ctypes.sizeof(_ErrorDestroyArgs), None, error))
    )


class _ErrorDestroyArgs(ctypes.Structure):
    _fields_ = (("struct_size", ctypes.c_size_t), ("ext", _P), ("error", _P))


def read_bytes(span: int) -> bytes:
    """The raw bytes of an ``XLA_FFI_ByteSpan`` (a string attribute)."""
    size = ctypes.c_size_t.from_address(span + BYTESPAN_LEN).value
    return ctypes.string_at(read_ptr(span), size) if size else b""


def read_stage(frame: int) -> int:
    """Return the frame's ``XLA_FFI_ExecutionStage`` (3, execute, for a plain handler)."""
    return ctypes.c_int.from_address(frame + FRAME_STAGE).value


def read_buffers(frame: int, results: bool) -> list[tuple[int, int, tuple[int, ...]]]:
    """Return ``(dtype, data, dims)`` for each argument buffer of the frame, or each result buffer if ``results``.

    ``dtype`` is an ``XLA_FFI_DataType`` code, ``data`` the buffer's address (device memory on GPUs).
    """
    n = ctypes.c_int64.from_address(frame + (FRAME_RETS_SIZE if results else FRAME_ARGS_SIZE)).value
    if n <= 0:
        return []
    bufs = (ctypes.c_void_p * n).from_address(read_ptr(frame + (FRAME_RETS if results else FRAME_ARGS)))
    out = []
    for buf in bufs:
        rank = ctypes.c_int64.from_address(buf + BUFFER_RANK).value
        dims = tuple((ctypes.c_int64 * rank).from_address(read_ptr(buf + BUFFER_DIMS))) if rank > 0 else ()
        out.append((ctypes.c_int.from_address(buf + BUFFER_DTYPE).value, read_ptr(buf + BUFFER_DATA), dims))
    return out


def read_attrs(attrs: int) -> list[tuple[str, int, int]]:
    """Return ``(name, AttrType code, address of the value)`` for each attribute of an ``XLA_FFI_Attrs`` struct.

    ``attrs`` is ``frame + FRAME_ATTRS_STRUCT`` for a call's attributes, or the value address of a
    ``DICTIONARY`` attribute. XLA passes attributes sorted by name.
    """
    n = ctypes.c_int64.from_address(attrs + ATTRS_SIZE).value
    if n <= 0:
        return []
    types = (ctypes.c_int * n).from_address(read_ptr(attrs + ATTRS_TYPES))
    names = (ctypes.c_void_p * n).from_address(read_ptr(attrs + ATTRS_NAMES))
    values = (ctypes.c_void_p * n).from_address(read_ptr(attrs + ATTRS_VALUES))
    return [(read_string(names[i]), types[i], values[i] or 0) for i in range(n)]


def read_string(span: int) -> str:
    """Decode an ``XLA_FFI_ByteSpan`` (a string attribute or an attribute name) as UTF-8."""
    size = ctypes.c_size_t.from_address(span + BYTESPAN_LEN).value
    return ctypes.string_at(read_ptr(span), size).decode("utf-8", "replace") if size else ""


def read_scalar(scalar: int) -> tuple[int, int]:
    """Return ``(dtype, address of the value)`` of an ``XLA_FFI_Scalar``."""
    return ctypes.c_int.from_address(scalar).value, read_ptr(scalar + SCALAR_VALUE)


def read_scalar_value(scalar: int) -> tuple[int, Any]:
    """Return ``(dtype, value)`` of an ``XLA_FFI_Scalar``; the value is None for an element type it does not decode."""
    code, ptr = read_scalar(scalar)
    fmt = _SCALAR_FORMATS.get(code)  # type: ignore[call-overload]
    if fmt is None or not ptr:
        return code, None
    return code, struct.unpack(fmt, ctypes.string_at(ptr, struct.calcsize(fmt)))[0]


def attr_kind(kind: int, value: int) -> str:
    """The declared type of one attribute (a `read_attrs` row), read without copying its value (for messages).

    ``"int64"`` (and the other NumPy names of scalar types), ``"string"``, ``"array"`` or ``"dictionary"``.
    """
    if kind == AttrType.SCALAR:
        return dtype_name(read_scalar(value)[0])
    if kind == AttrType.STRING:
        return "string"
    if kind == AttrType.ARRAY:
        return "array"
    if kind == AttrType.DICTIONARY:
        return "dictionary"
    return f"XLA_FFI_AttrType {kind}"


def span_length(span: int) -> int:
    """The length in bytes of an ``XLA_FFI_ByteSpan`` (a string attribute), read without copying it."""
    return ctypes.c_size_t.from_address(span + BYTESPAN_LEN).value


def read_array(array: int) -> tuple[int, int, int]:
    """Return ``(dtype, number of elements, address of the data)`` of an ``XLA_FFI_Array``."""
    return (
        ctypes.c_int.from_address(array).value,
        ctypes.c_size_t.from_address(array + ARRAY_SIZE).value,
        read_ptr(array + ARRAY_DATA),
    )
