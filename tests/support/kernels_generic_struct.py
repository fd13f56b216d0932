"""A dtype-generic jarp struct and a plain one, with kernels taking them (`tests/warp/modules/test_struct.py`; the
GPU tests compile this module ahead of time for CUDA)."""

from __future__ import annotations

from typing import Any

import warp as wp

from jarp.warp._struct import struct


@struct
class Params:
    """A generic struct: a scale and an offset vector of one scalar type."""

    @staticmethod
    def __annotations_factory__(dtype: Any) -> dict[str, Any]:
        return {"scale": dtype, "offset": wp.types.vector(3, dtype)}

    def phrase(self) -> str:
        return f"scale={self.scale}"


@struct
class Plain:
    """A plain struct."""

    count: wp.int32


@wp.kernel
def affine32(p: Params[wp.float32], q: Plain, out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = p.scale * wp.float32(i) + p.offset[1] + wp.float32(q.count)


@wp.kernel
def affine64(p: Params[wp.float64], out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    out[i] = p.scale * wp.float64(i) + p.offset[2]
