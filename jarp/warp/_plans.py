"""Launch plans: everything static one FFI call needs, and the process-local registry of them.

A plan is a hashable value (a kernel overload plus static configuration and the
shapes of its buffers). JAX carries it as the parameter of jarp's primitive; at
lowering time it is interned in the registry, and only its integer handle is
baked into the compiled call as an attribute. The FFI callback reads that handle
and finds the plan again, so nothing per trace is stored anywhere: two traces of
the same call share one plan, and the registry grows only with genuinely new
configurations.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import enum
import math
import os
import threading
import weakref
from typing import Any, Literal

import numpy as np

from ._signature import ArgSpec
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
            ``_internals.resolve_block_dim``). Ignored for callables.
        cpu_blocks: ``wp.config.enable_cpu_blocks`` when the call was traced. It decides the
            CPU variant of a ``block_dim`` above 1, so a change of the setting makes a new plan
            (and a new executor) instead of reusing one loaded under the old setting.
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


class ReleasedPlanError(LookupError):
    """An FFI call named a plan handle that this process released (or never made).

    Attributes:
        released: True if this process made the handle and released it, False if it never made it.
    """

    def __init__(self, message: str, released: bool) -> None:
        super().__init__(message)
        self.released = released


class _Lease:
    """Keeps a plan handle registered while it lives; lowering attaches one to each executable.

    JAX keeps a lowering's "keepalives" with the compiled executable (and with its lowered
    and compiled stages), so a handle stays registered as long as something that can call
    it does. Its finaliser only queues the handle (no lock: it may run in any thread, at any
    point, e.g. inside a Warp build); the registry counts it at its next safe point.
    """

    __slots__ = ("__weakref__", "_registry", "handle")

    def __init__(self, registry: _Registry, handle: int) -> None:
        self._registry = registry
        self.handle = handle

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter shutdown there is nothing left to release
            self._registry._dead.append(self.handle)

    def __reduce__(self) -> tuple[Any, ...]:
        # `jax.experimental.serialize_executable` pickles an executable with its keepalives: loaded
        # in this process, the copy holds a lease of its own; loaded elsewhere, none (the FFI
        # callback refuses the other process's session token there).
        return (_unpickle_lease, (_PROCESS, self.handle))


_PROCESS = os.urandom(16)  # tells a lease pickled in this process from one pickled in another


def _unpickle_lease(process: bytes, handle: int) -> _Lease | None:
    """A lease on ``handle`` for a deserialised executable, if it was pickled in this process and still has its plan."""
    return registry.renew(handle) if process == _PROCESS else None


class _Registry:
    """Content-keyed plan registry: ``plan -> handle`` and back. Thread-safe.

    A handle is never reused. Its plan (and with it the kernel or function it runs, and the
    FFI executors built for it) is released once no lease on it is alive, that is once no
    executable lowered with it remains, at the next "safe point": when a call is traced,
    another plan is registered, the registry is listed, or on ``jax.clear_caches()``
    (`cache_clear`). Deferring to a safe point keeps a call that XLA has queued but not yet
    started from finding its plan gone when the last reference to its executable is dropped
    right after the call. A released plan stays recoverable (without being kept alive) while
    its kernel or function lives on elsewhere. A plan that was registered but never leased
    (looked up directly by `handle`) stays until it is leased and released.
    """

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._handles: dict[Plan, int] = {}
        self._plans: dict[int, Plan] = {}
        self._leases: dict[int, int] = {}
        self._dead: collections.deque[int] = collections.deque()  # handles of collected leases
        # handle -> (weak ref to the target, the plan without it): released plans whose target lives on
        self._weak: dict[int, tuple[weakref.ref[Any], Plan]] = {}
        self._idle: set[int] = set()
        self._next = 0
        self._hooks: list[Any] = []

    def handle(self, plan: Plan) -> int:
        """The handle of ``plan``, registering it if it is new."""
        handle = self._handles.get(plan)
        if handle is not None:
            return handle
        return self._acquire(plan, lease=False)[0]

    def lease(self, plan: Plan) -> tuple[int, _Lease]:
        """The handle of ``plan`` (registered if new) and a lease that keeps it registered while alive."""
        handle, lease = self._acquire(plan, lease=True)
        assert lease is not None
        return handle, lease

    def renew(self, handle: int) -> _Lease | None:
        """A new lease on a registered (or recoverable) ``handle``; None if it is released for good."""
        with self._lock:
            try:
                self.plan(handle)
            except ReleasedPlanError:
                return None
            return self._new_lease(handle)

    def _new_lease(self, handle: int) -> _Lease:
        """Count one more lease on ``handle`` (with the lock held) and return it."""
        self._leases[handle] = self._leases.get(handle, 0) + 1
        self._idle.discard(handle)
        return _Lease(self, handle)

    def _acquire(self, plan: Plan, lease: bool) -> tuple[int, _Lease | None]:
        with self._lock:
            released = self._collect()
            handle = self._handles.get(plan)
            if handle is None:
                handle = self._next
                self._next += 1
                self._plans[handle] = plan
                self._handles[plan] = handle
            token = self._new_lease(handle) if lease else None
        self._notify(released)
        return handle, token

    def _collect(self) -> list[int]:
        """Count collected leases and release every handle none holds any more (with the lock held)."""
        dead = self._dead
        while dead:
            handle = dead.popleft()
            count = self._leases.get(handle, 0) - 1
            if count > 0:
                self._leases[handle] = count
                continue
            self._leases.pop(handle, None)
            if handle in self._plans:
                self._idle.add(handle)
        released = []
        for handle in self._idle:
            plan = self._plans.pop(handle, None)
            if plan is not None:
                if self._handles.get(plan) == handle:
                    del self._handles[plan]
                self._hold_weakly(handle, plan)
            released.append(handle)
        self._idle.clear()
        return released

    def _notify(self, released: list[int]) -> None:
        # Outside the registry's lock: the hooks take their own (the FFI executors' lock is taken
        # before the registry's when an executor is built).
        if released:
            for hook in self._hooks:
                hook(released)

    def _hold_weakly(self, handle: int, plan: Plan) -> None:
        """Keep ``plan`` recoverable while its target lives elsewhere, without keeping the target alive.

        JAX's C++ dispatch cache can keep calling an executable after JAX's Python caches (and
        with them the lease) let it go; while the kernel or function is still alive (the jitted
        function that closes over the module holds it) such a call gets the plan back.
        """
        try:
            ref = weakref.ref(plan.target, lambda _, h=handle: self._weak.pop(h, None))
        except TypeError:  # not weakly referenceable: released for good
            return
        self._weak[handle] = (ref, dataclasses.replace(plan, target=None))

    def _recover(self, handle: int) -> Plan | None:
        entry = self._weak.get(handle)
        target = entry[0]() if entry is not None else None
        if target is None:
            return None
        with self._lock:
            plan = dataclasses.replace(entry[1], target=target)
            self._weak.pop(handle, None)
            self._plans[handle] = plan
            self._handles.setdefault(plan, handle)
            if handle not in self._leases:
                self._idle.add(handle)  # released again at the next safe point unless leased
        return plan

    def on_release(self, hook: Any) -> None:
        """Call ``hook(handles)`` with the handles each release drops (to drop what was built for them)."""
        self._hooks.append(hook)

    def release_idle(self) -> None:
        """Release the handles no executable uses any more (a safe point: tracing a new call)."""
        if self._dead or self._idle:
            with self._lock:
                released = self._collect()
            self._notify(released)

    def cache_clear(self) -> None:
        """Release the handles no executable uses any more (``jax.clear_caches()`` calls this)."""
        self.release_idle()

    def plan(self, handle: int) -> Plan:
        """The plan registered under ``handle``.

        Raises:
            ReleasedPlanError: if ``handle`` was released (and its kernel or function collected)
                or never made in this process.
        """
        try:
            return self._plans[handle]
        except (KeyError, TypeError):
            pass
        plan = self._recover(handle) if isinstance(handle, int) else None
        if plan is not None:
            return plan
        if isinstance(handle, int) and 0 <= handle < self._next:
            raise ReleasedPlanError(
                f"plan handle {handle} was released: no executable lowered with it was alive and the kernel or "
                "function it ran was collected. An executable kept only through a copy JAX does "
                "not know about (a deserialised or exported one) cannot call it; call the jarp module again "
                "to compile a fresh executable.",
                released=True,
            ) from None
        raise ReleasedPlanError(
            f"plan handle {handle!r} is not one this process made (its handles run from 0 to {self._next - 1}); "
            "handles are given by jarp's lowering, never written by hand.",
            released=False,
        ) from None

    def plans(self) -> tuple[Plan, ...]:
        """The registered plans, in handle order."""
        return tuple(plan for _, plan in self.items())

    def items(self) -> tuple[tuple[int, Plan], ...]:
        """``(handle, plan)`` for each registered plan, in handle order (after releasing unused ones)."""
        self.release_idle()
        with self._lock:
            return tuple(sorted(self._plans.items(), key=lambda item: item[0]))

    def __contains__(self, handle: object) -> bool:
        self.release_idle()
        return handle in self._plans

    def __len__(self) -> int:
        self.release_idle()
        return len(self._plans)


registry = _Registry()
