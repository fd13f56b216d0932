"""Every lock jarp takes, in one table, and the one order in which a thread takes them.

A thread that holds some of jarp's locks waits for another only if it comes later in `ORDER` (taking a re-entrant
lock it already holds again is fine, and so is trying one without waiting, ``acquire(blocking=False)``). Each lock
is made here, by its name in the table (`make`), so the table is the whole list; a lock kept per object (a
registry's, an eager cache's) is one entry made once per object, and two objects' locks of one entry are never held
together.

Warp's own ``_codegen_lock`` comes after ``warp`` (jarp takes it only while it holds ``warp``, in
`_warp_kernels`); the CPython import lock and JAX's and XLA's locks are not jarp's and are never waited for
while holding one of these.

With ``JARP_LOCK_ORDER=check`` in the environment when jarp is imported, every lock checks the order on each
acquisition and raises `LockOrderError` naming both locks (the stress test runs jarp so; the cost is one Python call
per acquisition, hence off by default). `held` lists what this thread holds, in that mode.
"""

from __future__ import annotations

import dataclasses
import os
import threading
from typing import Any


@dataclasses.dataclass(frozen=True)
class Entry:
    """One lock of the table: its name, whether it is re-entrant, what it guards (where it is made)."""

    name: str
    reentrant: bool
    guards: str


# Outermost first. The reasons for each place are the nestings jarp's code makes: a callable's first run takes the
# executors' lock and Warp's lock before its function runs (which may call another jarp module); an executor loads
# its Warp module under `executors` then `warp`; the FFI registration builds the native handler (its process-wide
# build lock, then Warp's lock for the compiler); plan building parses and resolves annotations under Warp's lock;
# the rest are held for a moment around a dict or a counter and take nothing while held.
ORDER: tuple[Entry, ...] = (
    Entry("bridge", True, "_bridge: Warp's patched bridge attributes (patch_warp / unpatch_warp)"),
    Entry("callables", True, "_ffi._locks.callables: one callable's function runs at a time (Warp's current device)"),
    Entry("executors", True, "_ffi._locks.executors: the executor tables and the building of an executor"),
    Entry("ffi_register", False, "_ffi._target: the one registration of jarp's FFI targets with XLA"),
    Entry("native_build", False, "_ffi._native._process: the one build and load of the native handler"),
    Entry("warp", True, "_upstream._warp_kernels.warp_lock: Warp's module creation, codegen, builds, loads"),
    Entry("eager", False, "_module._eager: one eager cache's tables (per cache)"),
    Entry("module_instances", False, "_module._factory: the live modules the factories share"),
    Entry("closure_depth", False, "_module._value_callables: the nested-closure warnings given"),
    Entry("annotation_scopes", False, "_plan._annotations: the scopes annotations resolve in"),
    Entry("launch_warnings", False, "_plan._launch_checks: the launch-dims warnings given"),
    Entry("weak_cache", False, "_plan._weakcache: the bounded strong cache of unreferenceable keys"),
    Entry("cache_table", False, "_plan._cache_table: the table of jarp's caches"),
    Entry("registry", True, "_ffi._registry.Registry: the plans, their handles and leases (per registry)"),
    Entry("checking", False, "_ffi._checking: the checking-mode switch"),
    Entry("threads", False, "_ffi._threads: the CPU thread settings"),
    Entry("user_callbacks", False, "_ffi._user_callback: the registered FFI callbacks"),
    Entry("guard", False, "_ffi._native._guard: the one jump buffer of bounds-checked launches"),
    Entry("handler_released", False, "_ffi._native._handler: the native handler's released-plan queue (one reader)"),
    Entry("handler", False, "_ffi._native._handler: the native handler's published launches and chunks"),
    Entry("own_frames", False, "_ffi._errors: the files whose frames errors leave out"),
    Entry("parse", False, "_upstream._python_ast: one parse at a time (CPython 3.11's shared AST counter)"),
)
RANK = {entry.name: rank for rank, entry in enumerate(ORDER)}
CHECKING = os.environ.get("JARP_LOCK_ORDER", "").strip().lower() == "check"


class LockOrderError(RuntimeError):
    """A thread took one of jarp's locks while holding one that comes later in `ORDER`."""


_local = threading.local()


def held() -> list[str]:
    """The names of the locks this thread holds, in the order taken (in ``JARP_LOCK_ORDER=check`` mode only)."""
    return [lock.name for lock in getattr(_local, "held", ())]


class _CheckedLock:
    """A lock that checks `ORDER` on each acquisition (``JARP_LOCK_ORDER=check``)."""

    __slots__ = ("_lock", "name", "rank")

    def __init__(self, name: str, reentrant: bool) -> None:
        self.name = name
        self.rank = RANK[name]
        self._lock: Any = threading.RLock() if reentrant else threading.Lock()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        stack: list[_CheckedLock] = _local.__dict__.setdefault("held", [])
        if blocking and self not in stack:  # a try-acquire cannot deadlock: any order is fine
            late = [lock for lock in stack if lock.rank >= self.rank]
            if late:
                raise LockOrderError(
                    f"jarp: lock {self.name!r} taken while holding {late[-1].name!r}, which comes after it in "
                    f"jarp.warp._upstream._locks.ORDER (held: {[lock.name for lock in stack]})"
                )
        ok = self._lock.acquire(blocking, timeout)
        if ok:
            stack.append(self)
        return ok

    def release(self) -> None:
        stack: list[_CheckedLock] = _local.__dict__.setdefault("held", [])
        for k in range(len(stack) - 1, -1, -1):
            if stack[k] is self:
                del stack[k]
                break
        self._lock.release()

    def __enter__(self) -> bool:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _is_owned(self) -> bool:
        return self._lock._is_owned()


def make(name: str) -> Any:
    """A new lock of table entry ``name`` (a ``threading.Lock`` or ``RLock`` as the entry says; checked in
    ``JARP_LOCK_ORDER=check`` mode)."""
    entry = ORDER[RANK[name]]
    if CHECKING:
        return _CheckedLock(name, entry.reentrant)
    return threading.RLock() if entry.reentrant else threading.Lock()


def is_owned(lock: Any) -> bool:
    """Whether this thread holds re-entrant ``lock`` (made by `make`)."""
    return lock._is_owned()
