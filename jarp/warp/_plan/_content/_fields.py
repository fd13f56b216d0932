"""The content text's grammar: its fields and limits, `ContentError`, and the readers of untrusted fields.

Each reader checks one field of a parsed text (its type, range and size) and raises `ContentError` (reason
``"invalid"``) naming the field; none evaluates, imports or unpickles anything.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Sequence
from typing import Any, Literal, NoReturn

import numpy as np

from .. import _dtypes
from .._arg_spec import MAX_WARP_NDIM
from .._values import Binding, Buffer

ABI_VERSION: int = 1
"""jarp's call ABI: what a description means. Bump it when the description's meaning changes."""


Reason = Literal["invalid", "abi", "not_found", "changed"]


MAX_TEXT = 1 << 20  # bytes of description text `rebuild` reads at most


_MAX_ITEMS = 4096  # parameters, buffers, indices, ... in one list


_MAX_STR = 4096


MAX_BATCH_DIMS = 32


MAX_SIZE = 2**63 - 1  # XLA sizes buffers with int64


_MAX_BUFFER_NDIM = MAX_WARP_NDIM + 2  # Warp dims and a matrix element's two


_MAX_VALUE_DEPTH = 3  # a struct's tuple of matrix rows


_HASH = re.compile(r"[0-9a-f]{64}")


_SOURCES = ("operand", "result", "static", "struct", "none")


DTYPES: dict[str, np.dtype] = {str(_dtypes.to_numpy(t)): _dtypes.to_numpy(t) for t in _dtypes.SCALAR_TYPES}


KERNEL_TARGET = ("checked", "hash", "key", "kind", "module", "overload", "python_module", "runtime")


CALLABLE_TARGET = ("hash", "kind", "module", "qualname")


PLAN_FIELDS = (
    "abi",
    "adjoint",
    "aliases",
    "batch_shape",
    "block_dim",
    "bounds_checked",
    "cpu_blocks",
    "graph_compatible",
    "has_side_effect",
    "launch_dims",
    "name",
    "operand_batch",
    "operands",
    "params",
    "protected",
    "results",
    "runs",
    "scalar_operands",
    "target",
    "zero_results",
)


class ContentError(ValueError):
    """A plan description that this process cannot turn back into a plan.

    Attributes:
        reason: ``"invalid"`` (not a well-formed, consistent description), ``"abi"`` (written for another
            jarp call ABI), ``"not_found"`` (its kernel or function is not defined in this process) or
            ``"changed"`` (found, but its code differs from the code the description was made from).
    """

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def invalid(message: str) -> NoReturn:
    raise ContentError("invalid", f"invalid jarp plan description: {message}.")


def show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")
    return out


def no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON value")


def check_keys(value: object, keys: Sequence[str], where: str) -> None:
    if not isinstance(value, dict):
        invalid(f"field '{where}' must be an object, got {show(value)}")
    if set(value) != set(keys):
        missing = sorted(set(keys) - set(value))
        extra = sorted(set(value) - set(keys))
        invalid(f"field '{where}' must have the keys {list(keys)} (missing {missing}, unknown {extra[:5]})")


def read_bool(value: object, where: str) -> bool:
    if type(value) is not bool:
        invalid(f"field '{where}' must be a bool, got {show(value)}")
    return value


def read_int(value: object, where: str, lo: int, hi: int) -> int:
    if type(value) is not int:
        invalid(f"field '{where}' must be an int, got {show(value)}")
    if not lo <= value <= hi:
        invalid(f"field '{where}' must be in [{lo}, {hi}], got {value}")
    return value


def read_str(value: object, where: str) -> str:
    if type(value) is not str:
        invalid(f"field '{where}' must be a string, got {show(value)}")
    if len(value) > _MAX_STR:
        invalid(f"field '{where}' is longer than {_MAX_STR} characters")
    return value


def read_hash(value: object, where: str) -> str:
    if type(value) is not str or not _HASH.fullmatch(value):
        invalid(f"field '{where}' must be 64 lowercase hex digits, got {show(value)}")
    return value


def read_list(value: object, where: str, max_len: int = _MAX_ITEMS) -> list[Any]:
    if type(value) is not list:
        invalid(f"field '{where}' must be a list, got {show(value)}")
    if len(value) > max_len:
        invalid(f"field '{where}' has {len(value)} items, more than {max_len}")
    return value


def read_ints(value: object, where: str, lo: int, hi: int, max_len: int = _MAX_ITEMS) -> tuple[int, ...]:
    return tuple(read_int(v, f"{where}[{i}]", lo, hi) for i, v in enumerate(read_list(value, where, max_len)))


def read_indices(value: object, where: str, n: int, increasing: bool = False) -> tuple[int, ...]:
    out = read_ints(value, where, 0, n - 1)
    if increasing and any(a >= b for a, b in itertools.pairwise(out)):
        invalid(f"field '{where}' must be strictly increasing, got {list(out)}")
    return out


def read_buffers(value: object, where: str) -> tuple[Buffer, ...]:
    out = []
    for i, item in enumerate(read_list(value, where)):
        here = f"{where}[{i}]"
        check_keys(item, ("dtype", "shape"), here)
        dtype = DTYPES.get(item["dtype"]) if type(item["dtype"]) is str else None
        if dtype is None:
            invalid(f"field '{here}.dtype' must be one of {sorted(DTYPES)}, got {show(item['dtype'])}")
        shape = read_ints(item["shape"], f"{here}.shape", 0, MAX_SIZE, max_len=_MAX_BUFFER_NDIM)
        if math.prod(shape) * dtype.itemsize > MAX_SIZE:
            invalid(f"field '{here}' {list(shape)} holds more than 2**63 - 1 bytes")
        out.append(Buffer(shape, dtype))
    return tuple(out)


def read_operand_batch(value: object, n_ops: int, n_batch: int) -> tuple[tuple[bool, ...], ...]:
    rows = read_list(value, "operand_batch")
    if len(rows) != n_ops:
        invalid(f"field 'operand_batch' must have one entry per operand ({n_ops}), got {len(rows)}")
    out = []
    for i, row in enumerate(rows):
        flags = tuple(
            read_bool(v, f"operand_batch[{i}][{j}]") for j, v in enumerate(read_list(row, f"operand_batch[{i}]"))
        )
        if len(flags) != n_batch:
            invalid(f"field 'operand_batch[{i}]' must have one flag per batch dim ({n_batch}), got {len(flags)}")
        out.append(flags)
    return tuple(out)


def read_aliases(value: object, n_ops: int, n_res: int) -> tuple[tuple[int, int], ...]:
    out = []
    for i, pair in enumerate(read_list(value, "aliases")):
        pair = read_list(pair, f"aliases[{i}]")
        if len(pair) != 2:
            invalid(f"field 'aliases[{i}]' must be an [operand, result] pair, got {show(pair)}")
        op = read_int(pair[0], f"aliases[{i}][0]", 0, n_ops - 1)
        res = read_int(pair[1], f"aliases[{i}][1]", 0, n_res - 1)
        out.append((op, res))
    if len({op for op, _ in out}) != len(out) or len({res for _, res in out}) != len(out):
        invalid(f"field 'aliases' names an operand or a result twice: {[list(p) for p in out]}")
    return tuple(out)


def read_binding(value: Any, where: str) -> Binding:
    check_keys(value, ("fields", "index", "source", "value"), where)
    source = value["source"]
    if type(source) is not str or source not in _SOURCES:
        invalid(f"field '{where}.source' must be one of {list(_SOURCES)}, got {show(source)}")
    index = read_int(value["index"], f"{where}.index", -1, _MAX_ITEMS)
    fields = read_ints(value["fields"], f"{where}.fields", 0, _MAX_ITEMS)
    return Binding(source, index, _decode_value(value["value"], f"{where}.value", 0), fields)


def _decode_value(value: object, where: str, depth: int) -> Any:
    if value is None or type(value) in (bool, int):
        if type(value) is int and not -(2**63) <= value < 2**64:
            invalid(f"field '{where}' {value} is outside the 64-bit integer range")
        return value
    if type(value) is dict and set(value) == {"float"}:
        text = value["float"]
        try:
            if type(text) is not str or len(text) > 64:
                raise ValueError
            return float.fromhex(text)
        except (ValueError, OverflowError):
            invalid(f"field '{where}.float' must be a float in hex (float.hex()), got {show(text)}")
    if type(value) is dict and set(value) == {"tuple"}:
        if depth >= _MAX_VALUE_DEPTH:
            invalid(f"field '{where}' nests tuples deeper than {_MAX_VALUE_DEPTH}")
        items = read_list(value["tuple"], f"{where}.tuple", max_len=256)
        return tuple(_decode_value(v, f"{where}.tuple[{i}]", depth + 1) for i, v in enumerate(items))
    if type(value) is dict and set(value) == {"numpy", "value"}:
        dtype = DTYPES.get(value["numpy"]) if type(value["numpy"]) is str else None
        if dtype is None:
            invalid(f"field '{where}.numpy' must be one of {sorted(DTYPES)}, got {show(value['numpy'])}")
        item = _decode_value(value["value"], f"{where}.value", _MAX_VALUE_DEPTH)
        if not _fits(dtype, item):
            invalid(f"field '{where}.value' {show(item)} is not a {dtype} value")
        return dtype.type(item)
    invalid(
        f"field '{where}' must be null, a bool, an int, or an object tagged float, tuple or numpy; got {show(value)}"
    )


def _fits(dtype: np.dtype, item: object) -> bool:
    """Whether the Python value ``item`` is a value of the NumPy scalar type ``dtype`` (exactly, for floats)."""
    if dtype.kind == "b":
        return type(item) is bool
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return type(item) is int and info.min <= item <= info.max
    if type(item) is not float:
        return False
    with np.errstate(over="ignore"):
        back = float(dtype.type(item))
    return back == item or (math.isnan(back) and math.isnan(item))
