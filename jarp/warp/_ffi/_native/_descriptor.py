"""`LaunchDescriptor`: one plan's launch on one device, as the handler reads it (immutable, owned by Python)."""

from __future__ import annotations

import ctypes
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from ._abi import (
    KEPT,
    BufferSpec,
    CopySpec,
    Descriptor,
    KernelParam,
    Measure,
    PointerSlot,
    PrivateSpec,
    StructSpec,
    StructState,
    ZeroFill,
)

_MAX_BLOCK_BYTES = 1 << 16  # larger argument blocks (huge fixed-size struct values) stay on the Python path


@dataclasses.dataclass(frozen=True)
class NativeStructure:
    """A Warp structure the handler builds (first call, or a new topology) or refits from a call's buffers (CPU).

    Attributes:
        kind: ``"mesh"`` (buffers: points, indices, velocities or -1) or ``"bvh"`` (lowers, uppers, -1).
        word: the word of the primal argument block its id goes into.
        args: the frame arguments it is built from.
        count: its points (mesh) or boxes (BVH).
        nindices: a mesh's vertex indices (three per triangle); 0 for a BVH.
        index_type: a mesh's index scalar: 0 int32, 1 int64, 2 uint32, 3 uint64 (each checked in range in its
            own type before it is narrowed to Warp's int32).
        winding: a mesh's ``support_winding_number``.
        constructor: Warp's BVH constructor code for the CPU (`_warp_types.host_bvh_settings`).
        leaf_size: the tree's leaf size.
        offsets: for each batch slice, the byte offset of each of the three buffers in it (0 for one the batch does
            not carry, or none); each slice builds its own structure. Empty: one slice, offsets 0.
    """

    kind: str
    word: int
    args: tuple[int, int, int]
    count: int
    nindices: int = 0
    index_type: int = 0
    winding: bool = False
    constructor: int = 0
    leaf_size: int = 1
    offsets: tuple[tuple[int, int, int], ...] = ()


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
        structures: (CPU, one slice, one argument block, launched whole on the calling thread) the Warp structures
            the handler builds or refits before each launch, their ids written into the argument block. They live
            in the descriptor's memory until `destroy_structures`.
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
        structures: Sequence[NativeStructure] = (),
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
        assert not structures or (len(templates) == 1 and not concurrent and not range_entry), (
            "structures are built for whole launches on the calling thread"
        )
        self.structures = tuple(structures)
        # each structure's states, one per batch slice (built one after another, each launched with its own)
        self._states = [(StructState * nslices)(*[self._state(s) for _ in range(nslices)]) for s in structures]
        for states in self._states:
            self._keep.append(states)
        specs = []
        for s, states in zip(structures, self._states, strict=True):
            offsets = s.offsets or ((0, 0, 0),) * nslices
            assert len(offsets) == nslices, "one triple of offsets per batch slice"
            table = (ctypes.c_int64 * (3 * nslices))(*[o for triple in offsets for o in triple])
            specs.append(
                StructSpec(
                    0 if s.kind == "mesh" else 1,
                    s.word,
                    (ctypes.c_int64 * 3)(*s.args),
                    s.count,
                    s.nindices,
                    s.index_type,
                    int(s.winding),
                    s.constructor,
                    s.leaf_size,
                    ctypes.addressof(states),
                    self._own(table),
                )
            )
        table = (StructSpec * max(len(specs), 1))(*specs)
        d.nstructs, d.structs = len(specs), self._own(table)
        self.descriptor = d
        self.address = ctypes.addressof(d)

    def _state(self, structure: NativeStructure) -> StructState:
        """A structure's state with the memory the handler builds over (zeroed: no velocities read as zeros)."""
        state = StructState()
        if structure.kind == "mesh":
            # each kept mesh's int32 indices, then the zero velocities of a mesh given none
            sizes = [4 * structure.nindices] * KEPT + [12 * structure.count]
        else:
            sizes = [12 * structure.count] * 2  # the private copies of its bounds
        for k, nbytes in enumerate(sizes):
            state.own[k] = self._own((ctypes.c_char * max(nbytes, 1))())
        return state

    def structure_ids(self) -> list[tuple[int, ...]]:
        """For each structure, the ids of the Warp structures the handler keeps for it, every batch slice's (tests and
        inspection)."""
        return [tuple(int(i) for state in states for i in state.id if i) for states in self._states]

    def destroy_structures(self, destroy: Callable[[int, int], None]) -> None:
        """Destroy the structures the handler kept (once no call can use the descriptor any more).

        Args:
            destroy: the handler's ``jarp_destroy_structure(kind, id)`` (0: mesh, 1: BVH).
        """
        for structure, states in zip(self.structures, self._states, strict=True):
            for state in states:
                for k in range(KEPT):
                    if state.id[k]:
                        destroy(0 if structure.kind == "mesh" else 1, state.id[k])
                        state.id[k] = 0

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
