"""Calls given Warp structures on the native path: a function that builds meshes or BVHs and launches one kernel.

A module call given a `jarp.warp.Mesh` or `Bvh` runs as a callable whose function builds the structures from the
call's buffers and launches the kernel with their ids (jarp's geometry package). Where that function describes
itself as a `NativeLaunch` (the kernel's plan, launched with the structures' ids in place of its ``wp.uint64``
parameters, and where each structure's buffers are among the callable's), the CPU forward call becomes a launch
descriptor the native handler runs without Python: it checks the indices, builds or refits each structure through
Warp's own host functions, writes the ids into the argument block and launches. Everything else (CUDA, batches the
callable runs one by one, the reverse pass, a hash grid or volume, options Warp's classes treat specially) stays on
the Python path, as does any call the handler does not recognise exactly (an index out of range: the Python path
names it).
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
from collections.abc import Sequence

import numpy as np
import warp as wp

from .._plan._values import Binding, Plan
from .._upstream import _xla_ffi
from . import _native
from ._kernel_executors import CpuKernelExecutor

# A mesh's index scalar, as the handler reads it (`_native.NativeStructure.index_type`).
_INDEX_TYPES = {np.dtype(np.int32): 0, np.dtype(np.int64): 1, np.dtype(np.uint32): 2, np.dtype(np.uint64): 3}


@dataclasses.dataclass(frozen=True)
class StructureOperands:
    """One structure of a `NativeLaunch`: the kernel parameter taking its id and the callable's parameters it is
    built from.

    Attributes:
        param: the kernel's ``wp.uint64`` parameter that takes the structure's id.
        kind: ``"mesh"`` or ``"bvh"``.
        arrays: the callable's parameter names of its buffers: a mesh's points, indices and velocities (None: a
            mesh without velocities), a BVH's lowers and uppers.
        winding: a mesh's ``support_winding_number``.
        constructor: Warp's BVH constructor code for the CPU (`_upstream._warp_types.host_bvh_settings`).
        leaf_size: the tree's leaf size.
    """

    param: str
    kind: str
    arrays: tuple[str | None, ...]
    winding: bool
    constructor: int
    leaf_size: int


@dataclasses.dataclass(frozen=True)
class NativeLaunch:
    """What a callable's function does, in terms the native handler can run: build these structures, then launch
    ``plan`` (a kernel plan whose structure parameters are static placeholders) with their ids."""

    plan: Plan
    structures: tuple[StructureOperands, ...]


def structure_descriptor(
    plan: Plan, launch: NativeLaunch, device: wp.Device, offsets: Sequence[Sequence[int]]
) -> _native.LaunchDescriptor | None:
    """The launch descriptor of callable ``plan`` whose function is ``launch``; None where it stays on Python's path.

    The kernel plan's buffers are matched to the callable's by parameter name, and each must be the same buffer
    (dtype and shape) there; any difference leaves the call on the Python path, which runs the function itself.

    Under ``vmap`` each batch slice builds its own structures (kept in the descriptor per slice) and launches the
    kernel on its slice of every buffer, as the Python path runs the function once per slice.

    Args:
        plan: the callable's forward plan.
        launch: its function's `NativeLaunch` (an unbatched kernel plan).
        device: the CPU device.
        offsets: the byte offset of each of the callable's operands in each batch slice (its executor's).
    """
    inner = launch.plan
    if plan.partitioned or inner.batch_shape or inner.partitioned or inner.bounds_checked:
        return None
    by_name = {p.spec.name: p.primal for p in plan.params}
    maps = _buffer_maps(plan, inner, by_name)
    if maps is None:
        return None
    operand_map, result_map = maps
    if plan.batch_shape:
        # the kernel's launch, once per slice, on the slices of the callable's buffers
        carried = tuple(plan.operand_batch[operand_map[i]] for i in range(len(inner.operands)))
        inner = dataclasses.replace(inner, batch_shape=plan.batch_shape, operand_batch=carried)
    nslices = math.prod(plan.batch_shape)
    executor = CpuKernelExecutor(inner, device)
    if executor.cooperative or len(executor.blocks) != 1:
        return None
    template = executor.blocks[0][2]
    structures = []
    for s in launch.structures:
        field = getattr(type(template), s.param, None)
        bound = [by_name.get(name) if name is not None else None for name in s.arrays]
        if field is None or field.offset % 8 or any(b is not None and b.source != "operand" for b in bound):
            return None
        if any(b is None for b, name in zip(bound, s.arrays, strict=True) if name is not None):
            return None
        args = [b.index if b is not None else -1 for b in bound] + [-1] * (3 - len(bound))
        first = plan.operands[args[0]]
        slices = tuple(
            (_offset(offsets, args[0], k), _offset(offsets, args[1], k), _offset(offsets, args[2], k))
            for k in range(nslices)
        )
        if s.kind == "mesh":
            index_type = _INDEX_TYPES.get(np.dtype(plan.operands[args[1]].dtype))
            if index_type is None:
                return None
            nindices = math.prod(plan.operands[args[1]].shape)
            structures.append(
                _native.NativeStructure(
                    "mesh", field.offset // 8, (args[0], args[1], args[2]), first.shape[0], nindices, index_type,
                    s.winding, s.constructor, s.leaf_size, slices,
                )
            )  # fmt: skip
        else:
            structures.append(
                _native.NativeStructure(
                    "bvh", field.offset // 8, (args[0], args[1], -1), first.shape[0], 0, 0, False, s.constructor,
                    s.leaf_size, slices,
                )
            )  # fmt: skip
    codes = [
        [(_xla_ffi.dtype_code(np.dtype(dtype)), tuple(int(n) for n in shape)) for dtype, shape in side]
        for side in (
            [(b.dtype, plan.operand_shape(i)) for i, b in enumerate(plan.operands)],
            [(b.dtype, plan.result_shape(j)) for j, b in enumerate(plan.results)],
        )
    ]
    return _native.LaunchDescriptor(
        args=codes[0],
        rets=codes[1],
        zero=[(result_map[j], nbytes) for j, nbytes in executor.zero],
        launch=not executor.empty,
        nslices=nslices,
        templates=[executor.blocks[0][1]],
        slots=[
            (block, word, src, (operand_map, result_map)[src][index], offs)
            for block, word, src, index, offs in executor.slots
        ],
        bounds=ctypes.addressof(executor.bounds),
        entry=executor.entry.forward,
        keep=executor,  # its launch bounds, and the plan's loaded code through its entry points
        code=executor.entry,
        tasks=math.prod(inner.launch_dims),
        structures=structures,
    )


def _offset(offsets: Sequence[Sequence[int]], operand: int, k: int) -> int:
    """The byte offset of operand ``operand`` in batch slice ``k`` (0 for none: -1)."""
    return 0 if operand < 0 else offsets[operand][k]


def _buffer_maps(plan: Plan, inner: Plan, by_name: dict[str, Binding]) -> tuple[dict[int, int], dict[int, int]] | None:
    """Each operand and result index of kernel plan ``inner`` in callable ``plan`` (the same buffer, by parameter
    name: ``by_name`` holds ``plan``'s bindings), or None unless every one of them is there and every result of
    ``plan`` is one of ``inner``'s."""
    maps: tuple[dict[int, int], dict[int, int]] = ({}, {})
    for p in inner.params:
        b = p.primal
        if b.source in ("static", "none"):
            continue
        outer: Binding | None = by_name.get(p.spec.name)
        if outer is None or outer.source != b.source:
            return None
        if b.source == "struct":
            if len(b.fields) != len(outer.fields):
                return None
            maps[0].update(zip(b.fields, outer.fields, strict=True))
        else:
            maps[0 if b.source == "operand" else 1][b.index] = outer.index
    # an in-out operand is bound through its result: map it through the aliases
    outer_aliases = {res: op for op, res in plan.aliases}
    for op, res in inner.aliases:
        if res not in maps[1] or maps[1][res] not in outer_aliases:
            return None
        maps[0][op] = outer_aliases[maps[1][res]]
    same = all(
        i in maps[0] and inner.operands[i] == plan.operands[maps[0][i]] for i in range(len(inner.operands))
    ) and all(j in maps[1] and inner.results[j] == plan.results[maps[1][j]] for j in range(len(inner.results)))
    if not same or sorted(maps[1].values()) != list(range(len(plan.results))):
        return None
    return maps
