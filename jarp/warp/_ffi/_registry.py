"""The process-local registry of live plans: ``plan <-> handle``, descriptions, and the leases that keep a plan.

A compiled jarp call names its plan by content: a description (`jarp.warp._plan._content`) that means the
same in every process. The JAX stage's lowering asks for a plan's description (`content_text`), which the
registry remembers, and attaches a lease to the executable it lowers (in this process only: an exported
program carries nothing process-local). XLA's instantiate stage, once per loaded executable, hands the
description back (`resolve`): the plan is found (or, in a process that never traced it, rebuilt) and
leased for as long as XLA keeps that executable's state. Handles are this process's own: only the
description of a lambda's or closure's call names one, with this process's token, so another process
refuses it. It lives in the FFI stage because the custom call is where descriptions are resolved; it imports the
plan stage and nothing above it.
"""

from __future__ import annotations

import collections
import os
import weakref
from typing import Any

from .._plan import _content
from .._plan._values import Plan
from .._upstream import _locks

# The token of this process in the descriptions of plans that cannot be found again elsewhere.
_LOCAL = os.urandom(8).hex()


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
        # No module globals here: at interpreter shutdown they may already be None (nothing is left to release).
        try:  # noqa: SIM105 (not contextlib.suppress: contextlib may already be None)
            self._registry._dead.append(self.handle)
        except Exception:
            pass

    def __reduce__(self) -> tuple[Any, ...]:
        # `jax.experimental.serialize_executable` pickles an executable with its keepalives. The copy needs no
        # lease of its own: loaded in this process or another, its instantiate stage resolves each call's
        # description, and that call's XLA FFI state holds the lease.
        return (_no_lease, ())


def _no_lease() -> None:
    """What a pickled lease unpickles to: nothing (the loaded executable's instantiate stage leases the plan)."""
    return None


class _Registry:
    """Content-keyed plan registry: ``plan -> handle`` and back. Thread-safe.

    A handle is never reused. Its plan (and with it the kernel or function it runs, and the
    FFI executors built for it) is released once no lease on it is alive, that is once no
    executable lowered with it remains, at the next "safe point": when a call is traced,
    another plan is registered, the registry is listed, or on ``jax.clear_caches()``
    (`cache_clear`). Deferring to a safe point keeps a call that XLA has queued but not yet
    started from finding its plan gone when the last reference to its executable is dropped
    right after the call. Every loaded executable holds a lease in each call's XLA FFI state
    (`resolve`), so no call can reach a released plan. A plan that was registered but never
    leased (looked up directly by `handle`) stays until it is leased and released.
    """

    def __init__(self) -> None:
        self._lock = _locks.make("registry")
        self._handles: dict[Plan, int] = {}
        self._plans: dict[int, Plan] = {}
        self._leases: dict[int, int] = {}
        self._dead: collections.deque[int] = collections.deque()  # handles of collected leases
        self._idle: set[int] = set()
        self._next = 0
        self._hooks: list[Any] = []
        self._by_text: weakref.WeakValueDictionary[str, Plan] = weakref.WeakValueDictionary()
        self._state_leases: dict[int, _Lease] = {}  # lease id -> the lease an executable's XLA FFI state holds
        self._next_state = 0
        self._sources: list[Any] = []  # functions returning the lease ids of deleted states

    # -- descriptions (the content-addressed names of compiled calls) --

    def content_text(self, plan: Plan) -> str:
        """The text a compiled call of ``plan`` carries (`jarp.warp._plan._content`), remembered for `resolve`.

        A plan whose target cannot be found again in another process (a lambda, a closure) gets a
        description that only this process resolves: it names this process and the plan's handle.
        """
        why = _content.not_portable(plan)
        if why is None:
            text = _content.content_text(plan)
        else:
            text = _content.local_text(_LOCAL, self.handle(plan), plan.name, why)
        with self._lock:
            # Remember the registered instance of an equal plan, not ``plan`` itself: each trace makes a new
            # (equal) Plan object, and ``_by_text`` holds its plans weakly, so a plan object that dies with
            # its lowering would drop the entry while the registry still holds the plan under its handle
            # (`resolve` would rebuild a plan this process has, and `lookup` would not find it).
            handle = self._handles.get(plan)
            if handle is not None:
                plan = self._plans.get(handle, plan)
            self._by_text[text] = plan
        return text

    def resolve(self, text: str) -> tuple[int, int]:
        """The handle of the plan ``text`` describes and a lease id that keeps it registered (the instantiate stage).

        The plan is the one this process traced, or is rebuilt from the description (a program compiled
        elsewhere: a persistent-cache hit, a deserialised export or executable). The lease lasts until
        `release_states` receives its id, when XLA deletes the executable's state.

        Raises:
            jarp.warp._plan._content.ContentError: the description does not validate, names a kernel or
                function this process does not define (or defines with other code), or another process.
        """
        plan = self._by_text.get(text)
        if plan is None:
            read = _content.read_text(text)
            if not isinstance(read, _content.LocalName):
                plan = read
            elif read.process != _LOCAL:
                raise _content.ContentError(
                    "not_found", f"this call was compiled in another process and cannot be rebuilt here: {read.why}"
                )
            else:
                try:
                    plan = self.plan(read.handle)
                except ReleasedPlanError as e:
                    raise _content.ContentError("not_found", str(e)) from None
            self._by_text[text] = plan
        # Not a safe point: XLA may run the instantiate stage on a thread of its own while the thread that compiles
        # holds the executors' lock (a callable's first run compiling a nested jarp call), and releasing plans
        # here would run the release hooks, which take that lock: the two would wait for each other.
        handle, lease = self._acquire(plan, lease=True, release=False)
        assert lease is not None
        with self._lock:
            lease_id = self._next_state
            self._next_state += 1
            self._state_leases[lease_id] = lease
        return handle, lease_id

    def lookup(self, text: str) -> int | None:
        """The handle of the plan this process lowered with description ``text``, if it is registered (for inspection).

        Nothing is rebuilt or leased: a description this process never lowered (or whose plan it released) gives None.
        """
        plan = self._by_text.get(text)
        return None if plan is None else self._handles.get(plan)

    def release_states(self, lease_ids: list[int]) -> None:
        """Drop the leases of deleted XLA FFI states (their executables were destroyed)."""
        with self._lock:
            for lease_id in lease_ids:
                self._state_leases.pop(lease_id, None)

    def add_source(self, source: object) -> None:
        """Poll ``source()`` (the lease ids of deleted states) at every safe point."""
        self._sources.append(source)

    def state_leases(self) -> int:
        """How many executables' states hold a lease (for inspection and tests)."""
        self._poll()
        return len(self._state_leases)

    def _poll(self) -> None:
        for source in self._sources:
            ids = source()
            if ids:
                self.release_states(ids)

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

    def _new_lease(self, handle: int) -> _Lease:
        """Count one more lease on ``handle`` (with the lock held) and return it."""
        self._leases[handle] = self._leases.get(handle, 0) + 1
        self._idle.discard(handle)
        return _Lease(self, handle)

    def _acquire(self, plan: Plan, lease: bool, release: bool = True) -> tuple[int, _Lease | None]:
        if release:
            self._poll()
        with self._lock:
            released = self._collect() if release else []
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
            if plan is not None and self._handles.get(plan) == handle:
                del self._handles[plan]
            released.append(handle)
        self._idle.clear()
        return released

    def _notify(self, released: list[int]) -> None:
        # Outside the registry's lock: the hooks take their own (the FFI executors' lock is taken
        # before the registry's when an executor is built).
        if released:
            for hook in self._hooks:
                hook(released)

    def on_release(self, hook: object) -> None:
        """Call ``hook(handles)`` with the handles each release drops (to drop what was built for them)."""
        self._hooks.append(hook)

    def release_idle(self) -> None:
        """Release the handles no executable uses any more (a safe point: tracing a new call)."""
        self._poll()
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
            ReleasedPlanError: if ``handle`` was released or never made in this process.
        """
        try:
            return self._plans[handle]
        except (KeyError, TypeError):
            pass
        if isinstance(handle, int) and 0 <= handle < self._next:
            raise ReleasedPlanError(
                f"plan handle {handle} was released: no executable lowered or loaded with it was alive. Call the "
                "jarp module again to compile a fresh executable.",
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
