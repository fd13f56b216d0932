"""What every executor shares: the frame check, batch-slice offsets, zero-fills, and the capture check."""

from __future__ import annotations

import ctypes
import math
from typing import Any

import numpy as np

from .._plan._values import Plan
from .._upstream import _warp_launches, _xla_ffi
from . import _errors
from ._frame import CallError, FrameBuffers

ENTRY_FORWARD = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


ENTRY_BACKWARD = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


memset = ctypes.memset


memmove = ctypes.memmove


def check_load_during_capture(plan: Plan, device: Any, stream: int, first_run: bool) -> None:
    """Refuse to load Warp modules while XLA captures ``stream`` into a CUDA graph, where the driver cannot.

    CUDA drivers older than 12.3 cannot load a module during a stream capture (``wp.capture_begin`` loads
    every module before a capture of its own for them). XLA's command buffers capture a custom call's launches,
    the first one included, so a module that is not loaded yet would load inside XLA's capture: refuse with
    `CallError` instead. ``first_run``: a callable's first run, which may load any module its function launches.
    """
    if _warp_launches.loads_during_capture() or not _warp_launches.stream_is_capturing(stream):
        return
    if not first_run and _warp_launches.module_loaded(plan.target, device, plan.block_dim):
        return  # preloaded at trace time
    if first_run:
        what = "the Warp modules of the kernels the function launches are not loaded yet (they load on its first run)"
        fix = (
            "give the callable graph_mode=wp.JaxCallableGraphMode.NONE (XLA then runs it outside its command "
            "buffers), or update the CUDA driver"
        )
    else:
        what = f"the Warp module of kernel {plan.target.key!r} is not loaded on {device} yet"
        fix = (
            "load it at trace time with module_preload_mode=wp.JaxModulePreloadMode.CURRENT_DEVICE (the default; it "
            "loads on JAX's default device) or ALL_DEVICES (every local device), or update the CUDA driver"
        )
    raise CallError(
        _xla_ffi.ErrorCode.FAILED_PRECONDITION,
        f"{plan.name}: XLA is capturing this call on {device} into a CUDA graph (a command buffer) and {what}; "
        f"the CUDA driver cannot load modules during a capture before version 12.3. To run it, {fix}.",
    )


def _batch_offsets(plan: Plan, nbytes: tuple[int, ...], batch: tuple[tuple[bool, ...], ...]) -> list[list[int]]:
    """For each buffer, the byte offset of each batch slice (row-major over ``plan.batch_shape``)."""
    shape = plan.batch_shape
    nslices = math.prod(shape)
    idx = np.indices(shape).reshape(len(shape), nslices) if shape else np.zeros((0, 1), dtype=np.int64)
    out = []
    for size, has in zip(nbytes, batch, strict=True):
        strides, stride = [], size
        for n, h in reversed(list(zip(shape, has, strict=True))):
            strides.append(stride if h else 0)
            stride *= n if h else 1
        strides.reverse()
        offs = (np.asarray(strides, dtype=np.int64)[:, None] * idx).sum(axis=0) if shape else np.zeros(1, np.int64)
        out.append([int(o) for o in offs])
    return out


class Executor:
    """What every executor prepares from its plan: the frame check, the batch slices, the results to zero-fill.

    Attributes:
        pointers: checks a frame against the plan and returns its (operand, result) data pointers.
        nslices: the number of batch slices one call runs (1 without a batch).
        zero: ``(result index, bytes)`` of each result to zero-fill before the launches.
        copies: ``(operand index, result index, bytes)`` of each in-out pair a partitioned call passes as two
            buffers (XLA's partitioned call keeps no aliases): the operand is copied to the result first.
        offsets: for operands and for results, each buffer's byte offset of each batch slice.
    """

    def __init__(self, plan: Plan, device: Any) -> None:
        self.plan = plan
        self.device = device
        self.buffers = FrameBuffers(plan)
        self.pointers = self.buffers.pointers
        self.adjoint = plan.adjoint
        self.nslices = math.prod(plan.batch_shape)
        res_nbytes = tuple(b.nbytes for b in plan.results)
        self.zero = [(j, res_nbytes[j] * self.nslices) for j in plan.zero_results if res_nbytes[j]]
        self.copies = [
            (i, j, res_nbytes[j] * self.nslices) for i, j in plan.aliases if plan.partitioned and res_nbytes[j]
        ]
        self.offsets = (
            _batch_offsets(plan, tuple(b.nbytes for b in plan.operands), plan.operand_batch),
            _batch_offsets(plan, res_nbytes, tuple((True,) * len(plan.batch_shape) for _ in plan.results)),
        )

    def run(self, frame: int) -> None:
        raise NotImplementedError


_errors.own_frames(__file__)
