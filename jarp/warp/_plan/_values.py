"""Launch plans: everything static one FFI call needs, as hashable values (the registry is `_ffi._registry`).

A plan is a hashable value (a kernel overload plus static configuration and the
shapes of its buffers). JAX carries it as the parameter of jarp's primitive; at
lowering time it is interned in the registry, and the compiled call names it by
content: its ``desc`` attribute is the plan's content text (`_content`), which
means the same in every process. XLA's instantiate stage resolves that text to the
registered plan (or rebuilds the plan in a process that never traced it) once per
loaded executable, and the FFI handler finds it through the call's state. Handles
are the registry's own and never leave the process (only the text of a lambda's
or closure's call, which no other process can resolve, names one). So nothing per
trace is stored anywhere: two traces of the same call share one plan, and the
registry grows only with genuinely new configurations.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, Literal

import numpy as np

from ._arg_spec import ArgSpec
from ._static_keys import canonical, static_key


class Runs(enum.Enum):
    """What a plan runs: a Warp kernel's compiled entry point, or a Python function that launches kernels."""

    KERNEL = "kernel"
    CALLABLE = "callable"


@dataclasses.dataclass(frozen=True, eq=False)
class Binding:
    """Where a kernel parameter's value comes from in one FFI call.

    ``source`` is ``"operand"`` or ``"result"`` (a buffer, by index), ``"static"``
    (a Python scalar baked into the plan), ``"struct"`` (a ``wp.struct``: its array
    fields are the buffers ``fields``, its value fields ``value``) or ``"none"``.
    ``fields`` index operands in a primal binding and results in an adjoint one.

    Bindings (and so plans) compare ``value`` by identity of meaning
    (`_static_keys.static_key`), not Python equality: ``-0.0`` and ``0.0`` give
    different plans, every NaN the same one (``value`` holds the canonical NaN), and
    ``0``, ``0.0`` and ``False`` differ. Executors read the plain ``value``.
    """

    source: Literal["operand", "result", "static", "struct", "none"]
    index: int = -1
    value: Any = None
    fields: tuple[int, ...] = ()
    _key: tuple[Any, ...] = dataclasses.field(init=False, repr=False)

    def __post_init__(self) -> None:
        value = canonical(self.value)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "_key", (self.source, self.index, static_key(value), self.fields))

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Binding):
            return NotImplemented
        return self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)


@dataclasses.dataclass(frozen=True)
class Param:
    """A kernel parameter with the buffers bound to its primal and (for adjoints) adjoint value."""

    spec: ArgSpec
    primal: Binding
    adjoint: Binding = Binding("none")


@dataclasses.dataclass(frozen=True)
class Buffer:
    """The un-batched shape and dtype of one operand or result buffer (JAX convention)."""

    shape: tuple[int, ...]
    dtype: np.dtype

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize


@dataclasses.dataclass(frozen=True)
class Plan:
    """A static launch configuration.

    Attributes:
        runs: what the plan runs: a kernel (`Runs.KERNEL`) or a Python function that launches
            Warp kernels (`Runs.CALLABLE`).
        adjoint: whether it runs the reverse-mode pass (the kernel's backward entry point, or the
            function under a ``wp.Tape`` played back) instead of the forward one.
        target: the kernel overload, or the Python function.
        params: the parameters in call order, with their bindings.
        launch_dims: the Warp launch dims (ignored for callables).
        operands / results: the buffers, without batch dims.
        zero_results: result indices zero-filled before the launch.
        aliases: ``(operand, result)`` index pairs that share a buffer.
        batch_shape: leading batch dims added by ``vmap`` (run as one launch per slice).
        operand_batch: for each operand, which of ``batch_shape`` it carries (results carry all).
        has_side_effect: keep the call even when its results are unused.
        scalar_operands: operands that carry a runtime scalar parameter (one element, never folded).
        protected: results that only give a callable a private copy of an input (aliased, discarded).
        graph_compatible: may be captured in a CUDA graph by XLA.
        name: a human-readable name for errors and inspection.
        block_dim: the requested threads per block (None: Warp's default, 256 on CUDA and 1 on
            the CPU); each device loads the module variant built for it (see
            ``_warp_kernels.resolve_block_dim``). Ignored for callables.
        cpu_blocks: ``wp.config.enable_cpu_blocks`` when the call was traced. It decides the
            CPU variant of a ``block_dim`` above 1, so a change of the setting makes a new plan
            (and a new executor) instead of reusing one loaded under the old setting.
        bounds_checked: the kernel is built in Warp's debug mode (every index checked); its CPU launches
            run under jarp's guard (`jarp.warp._ffi._native._guard`), which turns a failed check into an error.
        partitioned: lowered for XLA's batch partitioner (`jarp.warp._jax._lowering`): every operand carries
            all of ``batch_shape`` or none of it, and the call's buffers have the shapes `call_operand_shape`
            and `call_result_shape`, whose leading batch dims each device's call sees as its local part of
            ``batch_shape`` (the executors take the slice count from the frame).
        race_free: the kernel provably writes only at its own thread index, with no atomics, tiles or printing
            (`_races.race_blocker`), and runs forward with one thread per block, unchecked: its CPU launch may be
            split into index ranges run concurrently. Derived from the rest (never described; a rebuilt plan
            recomputes it); False for callables. For an adjoint (`_races.adjoint_split_proofs`): its backward
            launch may be split with no private copies.
        private: where the launch is not race-free only because it accumulates into output or in-out arrays
            (`_races.split_proofs`), each such result buffer with its combination (``(result index, "add")``; also
            ``"min"``, ``"max"``): a split CPU launch gives each index range a zeroed copy of them and combines the
            copies after. Derived like ``race_free``; empty for callables. For an adjoint: the operands' adjoint
            results its backward launch accumulates into (``"add"``), where `_races.adjoint_split_proofs` allows.
        shares_cpu_state: two launches of the kernel at once would share state (it uses tiles, whose CPU scratch
            storage is one global of the module, or prints), or jarp cannot tell (`_races.sharing_blocker`);
            True for callables. Otherwise the batch slices of a CPU call may run concurrently. Derived like
            ``race_free``.
        code_hash: Warp's hash of the kernel's code these verdicts (writes, races, fills) were drawn from
            (`_warp_kernels.current_code_hash`); None for callables. A plan traced after a name the kernel's code
            resolves was rebound to other code differs from one traced before, and an executor refuses to launch a
            build of the kernel with another hash. Derived like ``race_free``.
    """

    runs: Runs
    adjoint: bool
    target: Any
    params: tuple[Param, ...]
    launch_dims: tuple[int, ...]
    operands: tuple[Buffer, ...]
    results: tuple[Buffer, ...]
    zero_results: tuple[int, ...] = ()
    aliases: tuple[tuple[int, int], ...] = ()
    batch_shape: tuple[int, ...] = ()
    operand_batch: tuple[tuple[bool, ...], ...] = ()
    has_side_effect: bool = False
    graph_compatible: bool = True
    scalar_operands: tuple[int, ...] = ()
    protected: tuple[int, ...] = ()
    name: str = ""
    block_dim: int | None = None
    cpu_blocks: bool = False
    bounds_checked: bool = False
    partitioned: bool = False
    race_free: bool = False
    private: tuple[tuple[int, str], ...] = ()
    shares_cpu_state: bool = True
    code_hash: str | None = None

    def __post_init__(self) -> None:
        if not self.operand_batch:
            object.__setattr__(self, "operand_batch", tuple(() for _ in self.operands))

    @property
    def label(self) -> str:
        """``"kernel"``, ``"adjoint"``, ``"callable"`` or ``"callable_adjoint"`` (for inspection and messages)."""
        if self.runs is Runs.KERNEL:
            return "adjoint" if self.adjoint else "kernel"
        return "callable_adjoint" if self.adjoint else "callable"

    @property
    def in_out_aliases(self) -> tuple[tuple[int, int], ...]:
        """The ``(operand, result)`` pairs of in-out arguments (the protected input copies excluded)."""
        return tuple((op, res) for op, res in self.aliases if res not in self.protected)

    def operand_shape(self, i: int) -> tuple[int, ...]:
        """The full shape of operand ``i``, with the batch dims it carries."""
        batch = tuple(n for n, has in zip(self.batch_shape, self.operand_batch[i], strict=True) if has)
        return batch + self.operands[i].shape

    def result_shape(self, j: int) -> tuple[int, ...]:
        return self.batch_shape + self.results[j].shape

    def call_operand_shape(self, i: int) -> tuple[int, ...]:
        """The global shape of operand ``i`` in the lowered call (`operand_shape` unless `partitioned`).

        A partitioned call passes a batched operand as ``(*batch_shape, 1, *shape)`` and an unbatched one
        flattened to one dim (a scalar as it is): XLA's batch partitioner splits the leading
        ``len(batch_shape) + 1`` dims of every buffer that has more dims than that and replicates the
        others, so an operand broadcast across the batch reaches every device whole.
        """
        if not self.partitioned:
            return self.operand_shape(i)
        shape = self.operands[i].shape
        if all(self.operand_batch[i]):
            return (*self.batch_shape, 1, *shape)
        return (math.prod(shape),) if shape else ()

    def call_result_shape(self, j: int) -> tuple[int, ...]:
        """The global shape of result ``j`` in the lowered call (`result_shape` unless `partitioned`)."""
        if not self.partitioned:
            return self.result_shape(j)
        return (*self.batch_shape, 1, *self.results[j].shape)
