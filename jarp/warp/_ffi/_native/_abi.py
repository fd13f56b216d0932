"""The ctypes mirrors of the handler's C structs (``_handler.cpp``): the launch descriptor and its tables.

Their layout is checked against the compiled one when the handler loads (`_handler.expected_layout`).
"""

from __future__ import annotations

import ctypes

I64 = ctypes.c_int64
PTR = ctypes.c_void_p


class BufferSpec(ctypes.Structure):
    _fields_ = (("dtype", I64), ("rank", I64), ("dims", PTR))


class PointerSlot(ctypes.Structure):
    _fields_ = (("block", I64), ("word", I64), ("source", I64), ("index", I64), ("offsets", PTR))


class CopySpec(ctypes.Structure):
    _fields_ = (("arg", I64), ("ret", I64), ("nbytes", I64))


class ZeroFill(ctypes.Structure):
    _fields_ = (("index", I64), ("nbytes", I64))


class KernelParam(ctypes.Structure):
    _fields_ = (("block", I64), ("offset", I64))


class PrivateSpec(ctypes.Structure):
    _fields_ = (("slot", I64), ("op", I64), ("scalar", I64), ("nbytes", I64))


class Measure(ctypes.Structure):
    _fields_ = (("cost_ns", I64), ("samples", I64))


KEPT = 4  # meshes kept per structure (kKept)


class StructState(ctypes.Structure):
    _fields_ = (
        ("busy", I64),
        ("clock", I64),
        ("id", ctypes.c_uint64 * KEPT),
        ("used", I64 * KEPT),
        ("own", PTR * (KEPT + 1)),
    )


class StructSpec(ctypes.Structure):
    _fields_ = (
        ("kind", I64),
        ("word", I64),
        ("arg", I64 * 3),
        ("count", I64),
        ("nindices", I64),
        ("index_type", I64),
        ("winding", I64),
        ("constructor", I64),
        ("leaf_size", I64),
        ("state", PTR),
        ("offsets", PTR),
    )


class Descriptor(ctypes.Structure):
    """The C ``Descriptor`` of ``_handler.cpp`` (its layout is checked against the compiled one at load)."""

    _fields_ = (
        ("nargs", I64),
        ("nrets", I64),
        ("args", PTR),
        ("rets", PTR),
        ("nzero", I64),
        ("zero", PTR),
        ("launch", I64),
        ("nslices", I64),
        ("nblocks", I64),
        ("block_bytes", I64 * 2),
        ("templates", PTR * 2),
        ("nslots", I64),
        ("slots", PTR),
        ("bounds", PTR),
        ("entry", PTR),
        ("context", PTR),
        ("dim", I64),
        ("block_dim", I64),
        ("grid_stride", I64),
        ("cluster_dim", I64),
        ("smem_bytes", I64),
        ("nparams", I64),
        ("params", PTR),
        ("failure", PTR),
        ("concurrent", I64),
        ("range_entry", PTR),
        ("tasks", I64),
        ("ncopies", I64),
        ("copies", PTR),
        ("nprivate", I64),
        ("private_specs", PTR),
        ("measure", PTR),
        ("work", I64),
        ("nstructs", I64),
        ("structs", PTR),
    )
