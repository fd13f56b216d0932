"""Reading and checking an XLA FFI call frame: jarp trusts nothing it did not make.

A frame must carry exactly the attributes ``abi`` (an int64, jarp's call-ABI version) and ``desc`` (the
plan's description, a string), and buffers whose number, dtypes and shapes are its plan's; anything else
(a crafted program, a hand-written ``jax.ffi.ffi_call("jarp_warp_call", ...)``) is a `CallError` naming what
was wrong, which the target answers with an XLA FFI error instead of a crash.

The checks run on every call, so they are a few ``struct`` reads (each ~0.15 us) from a view of the
address space; the slow readers of `_xla_ffi` only explain a mismatch.
"""

from __future__ import annotations

import ctypes
import struct
import sys
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .._plan._values import Plan
from .._upstream import _xla_ffi
from . import _errors

# Reading raw memory through ctypes objects costs ~0.4 us a value, and iterating a ctypes
# pointer array ~1.7 us; unpacking with ``struct`` from a view of the whole address space
# costs ~0.2 us. The view is never indexed outside addresses XLA hands to the callback.
MEM = memoryview((ctypes.c_char * sys.maxsize).from_address(0)).cast("B")
U64 = struct.Struct("<Q").unpack_from
_I64 = struct.Struct("<q").unpack_from

# Every read follows a pointer XLA handed over, and a value is only dereferenced as what the frame
# declares it to be (a scalar's value only after its type says so).
_FRAME_ARGS_SIZE = _xla_ffi.FRAME_ARGS_SIZE
_COUNTS = struct.Struct("<q8xQ16xq8xQ").unpack_from  # at FRAME_ARGS_SIZE: #args, args, #rets, rets
_BUFFER = struct.Struct("<i4xQqQ").unpack_from  # at BUFFER_DTYPE: dtype, data, rank, dims
_BUFFER_DTYPE = _xla_ffi.BUFFER_DTYPE
_ATTR_NAMES = ("abi", "desc")  # XLA passes attributes sorted by name
MAX_DESCRIPTION = 1 << 20  # bytes; jarp's own descriptions are a few kB


class CallError(Exception):
    """A frame jarp did not make (or that does not match its plan), answered with an XLA FFI error ``code``."""

    def __init__(self, code: _xla_ffi.ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def read_content_text(frame: int, abi: int) -> str:
    """The plan description a call carries (its ``desc`` attribute); `CallError` for anything but jarp's attributes.

    A jarp call has exactly two attributes: ``abi``, the int64 version of jarp's call ABI it was lowered
    with, and ``desc``, the plan's description (UTF-8 JSON, `jarp.warp._plan._content`). They are read as
    the types the frame declares; a loaded program may have been crafted, so nothing else is assumed.

    Args:
        frame: the call frame (of the instantiate stage).
        abi: the call-ABI version this jarp speaks.
    """
    # The attribute table, read once; a value is copied only once its declared type (and, for the description,
    # its length) is checked.
    attrs = _xla_ffi.read_attrs(frame + _xla_ffi.FRAME_ATTRS_STRUCT)
    invalid = _xla_ffi.ErrorCode.INVALID_ARGUMENT
    found = tuple(name for name, _, _ in attrs)
    if found != _ATTR_NAMES:
        got = ", ".join(f"{name}: {_xla_ffi.attr_kind(kind, value)}" for name, kind, value in attrs)
        wrong = [f"attribute {n!r} is missing" for n in _ATTR_NAMES if n not in found]
        wrong += [f"attribute {n!r} is not one of them" for n in found if n not in _ATTR_NAMES]
        raise CallError(
            invalid,
            f"expects exactly the attributes abi (int64) and desc (string), as jarp lowers its calls; "
            f"{'; '.join(wrong) or 'an attribute is repeated'} (got {got or 'no attributes'}). The target is "
            "jarp's own: call kernels through jarp.warp.jax_kernel or jax_callable, not jax.ffi.ffi_call.",
        )
    (_, abi_type, abi_value), (_, desc_type, desc_value) = attrs
    abi_kind = _xla_ffi.attr_kind(abi_type, abi_value)
    if abi_kind != "int64":
        raise CallError(
            invalid, f"attribute 'abi' must be an int64 scalar, got {abi_kind}{_shown(abi_type, abi_value)}"
        )
    version = _xla_ffi.read_scalar_value(abi_value)[1]
    if version != abi:
        raise CallError(
            _xla_ffi.ErrorCode.FAILED_PRECONDITION,
            f"this program was compiled with jarp's call ABI version {version}, and this jarp "
            f"(jarp.warp call ABI {abi}) cannot run it; recompile the program with this jarp, or load it where "
            f"the jarp that compiled it is installed.",
        )
    desc_kind = _xla_ffi.attr_kind(desc_type, desc_value)
    if desc_kind != "string":
        raise CallError(invalid, f"attribute 'desc' must be a string, got {desc_kind}")
    size = _xla_ffi.span_length(desc_value)
    if size > MAX_DESCRIPTION:
        raise CallError(invalid, f"attribute 'desc' is {size} bytes; jarp's descriptions are at most {MAX_DESCRIPTION}")
    raw = _xla_ffi.read_bytes(desc_value)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CallError(invalid, f"attribute 'desc' is not UTF-8 text ({e})") from None


def _shown(kind: int, value: int) -> str:
    """A short attribute value for a message (`` '1'``, `` 1.5``), or nothing for a long or composite one."""
    if kind == _xla_ffi.AttrType.SCALAR:
        return f" {_xla_ffi.read_scalar_value(value)[1]!r}"
    if kind == _xla_ffi.AttrType.STRING and _xla_ffi.span_length(value) <= 64:
        return f" {_xla_ffi.read_string(value)!r}"
    return ""


class FrameBuffers:
    """What a plan expects of a call's buffers: `pointers` checks a frame against it and returns the data pointers.

    The number of argument and result buffers, each one's dtype, rank and dims (batch dims included) must
    be the plan's exactly, so a kernel never reads or writes past a buffer XLA allocated.
    """

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        ops = [(b.dtype, plan.call_operand_shape(i)) for i, b in enumerate(plan.operands)]
        res = [(b.dtype, plan.call_result_shape(j)) for j, b in enumerate(plan.results)]
        self.shapes = (ops, res)
        self.nops, self.nres = len(ops), len(res)
        self.pointers = self._compile()

    def _compile(self) -> Callable[[int], tuple[tuple[int, ...], tuple[int, ...]]]:
        """Generate `pointers` for this plan's buffers, unrolled.

        A Python loop over the buffers costs more than the reads themselves (~0.7 us against ~0.15 us a
        read), so each buffer gets straight-line code: one read of its dtype, data, rank and dims pointer,
        one of its dims (none for a scalar), compared with constants. Only integers from the plan enter the
        generated source.
        """
        # `fail` reaches this object weakly: a bound method in the generated function's globals would make
        # a reference cycle, and a dropped executor would keep its plan (and kernel) until the next gc.
        this = weakref.ref(self)

        def fail(frame: int, side: int, index: int) -> None:
            buffers = this()
            assert buffers is not None, "the executor calling `pointers` holds its _FrameBuffers"
            buffers._fail(frame, side, index)

        env: dict[str, Any] = {"_COUNTS": _COUNTS, "_BUFFER": _BUFFER, "MEM": MEM, "fail": fail}
        lines = [
            "def pointers(frame):",
            f"    nargs, args, nrets, rets = _COUNTS(MEM, frame + {_FRAME_ARGS_SIZE})",
            f"    if nargs != {self.nops} or nrets != {self.nres}:",
            "        fail(frame, -1, -1)",
        ]
        returns = []
        for side, (table, buffers) in enumerate((("args", self.shapes[0]), ("rets", self.shapes[1]))):
            if not buffers:
                returns.append("()")
                continue
            env[f"table{side}"] = struct.Struct(f"<{len(buffers)}Q").unpack_from
            lines.append(f"    {''.join(f'b{side}_{i}, ' for i in range(len(buffers)))}= table{side}(MEM, {table})")
            for i, (dtype, shape) in enumerate(buffers):
                lines.append(f"    dtype, p{side}_{i}, rank, dims = _BUFFER(MEM, b{side}_{i} + {_BUFFER_DTYPE})")
                check = f"dtype != {_xla_ffi.dtype_code(dtype)} or rank != {len(shape)}"
                if shape:
                    env[f"dims{side}_{i}"] = struct.Struct(f"<{len(shape)}q").unpack_from
                    check += f" or dims{side}_{i}(MEM, dims) != {tuple(int(n) for n in shape)!r}"
                lines += [f"    if {check}:", f"        fail(frame, {side}, {i})"]
            returns.append(f"({''.join(f'p{side}_{i}, ' for i in range(len(buffers)))})")
        lines.append(f"    return {returns[0]}, {returns[1]}")
        exec("\n".join(lines), env)  # the source is built above from integers only
        return env["pointers"]

    def local_batch(self, frame: int) -> tuple[int, ...] | None:
        """A partitioned plan's call (`Plan.partitioned`): the leading batch dims of the frame's first batched buffer.

        That is this device's part of the batch, which the plan's batch shape bounds dim by dim; None if the
        frame has no such buffer or its dims are out of those bounds (the caller then checks the frame against
        the whole batch, and explains). Only the dims are read here: `pointers` of the local plan checks the
        frame in full.
        """
        plan = self.plan
        k = len(plan.batch_shape)
        nargs, args, nrets, rets = _COUNTS(MEM, frame + _FRAME_ARGS_SIZE)
        if nrets == self.nres and self.nres:
            where = U64(MEM, rets)[0]
        else:
            first = next((i for i, flags in enumerate(plan.operand_batch) if all(flags)), None)
            if first is None or nargs != self.nops:
                return None
            where = U64(MEM, args + 8 * first)[0]
        _, _, rank, dims = _BUFFER(MEM, where + _BUFFER_DTYPE)
        if rank <= k:
            return None
        local = struct.unpack_from(f"<{k}q", MEM, dims)
        if any(not 0 <= n <= m for n, m in zip(local, plan.batch_shape, strict=True)):
            return None
        return local

    def _fail(self, frame: int, side: int, index: int) -> None:
        """Raise the `CallError` for a frame whose buffer counts (``side == -1``) or buffer ``index`` mismatch."""
        if side < 0:
            nargs = _I64(MEM, frame + _FRAME_ARGS_SIZE)[0]
            nrets = _I64(MEM, frame + _xla_ffi.FRAME_RETS_SIZE)[0]
            raise self._count_error(nargs, nrets)
        raise self._buffer_error(frame, side, index)

    def _count_error(self, nargs: int, nrets: int) -> CallError:
        def count(n: int, what: str) -> str:
            return f"{n} {what}" + ("" if n == 1 else "s")

        return CallError(
            _xla_ffi.ErrorCode.INVALID_ARGUMENT,
            f"{self._name()} expects {count(self.nops, 'operand')} and {count(self.nres, 'result')}, the call "
            f"passes {count(nargs, 'operand')} and {count(nrets, 'result')}.",
        )

    def _buffer_error(self, frame: int, side: int, i: int) -> CallError:
        code, _, dims = _xla_ffi.read_buffers(frame, results=bool(side))[i]
        dtype, shape = self.shapes[side][i]
        what = ("operand", "result")[side]
        return CallError(
            _xla_ffi.ErrorCode.INVALID_ARGUMENT,
            f"{what} {i} of {self._name()} is {_xla_ffi.dtype_name(code)}{list(dims)}, the plan expects "
            f"{np.dtype(dtype).name}{list(shape)}.",
        )

    def _name(self) -> str:
        return f"{self.plan.label} {self.plan.name!r}" if self.plan.name else self.plan.label


_errors.own_frames(__file__)
