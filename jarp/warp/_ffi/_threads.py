"""How many CPU threads one jarp call may use: the setting, read from ``JARP_CPU_THREADS`` and `set_cpu_threads`.

The native handler runs the batch slices of a CPU call (and the index ranges of a provably race-free launch)
concurrently on XLA's intra-op thread pool, the pool XLA's own CPU operations use. This module holds the cap
and the size thresholds and hands them to the loaded handler; the work itself is in ``_native_handler.cpp``.
The Python launch path (``JARP_LAUNCH=python``) always runs on the calling thread.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

__all__ = ["ENV", "MIN_RANGE", "MIN_TASKS", "attach", "cpu_threads", "set_cpu_threads"]

ENV = "JARP_CPU_THREADS"
# A call goes to the pool only with at least this many tasks (launch threads times batch slices): below, handing
# work to another thread costs more than it saves, and a small kernel's marginal launch cost must not move.
MIN_TASKS = 1 << 15
# A split launch's index ranges have at least this many tasks each.
MIN_RANGE = 1 << 13

_lock = threading.Lock()
_cap: int | None = None  # None: not read from the environment yet
_sinks: list[Callable[[int, int, int], None]] = []


def _check(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(
            f"{what} must be a whole number >= 0 (0: every thread of XLA's CPU pool; 1: the calling thread only), "
            f"got {value!r}."
        )
    return value


def _from_env() -> int:
    raw = os.environ.get(ENV, "").strip()
    if not raw:
        return 0
    try:
        value: object = int(raw)
    except ValueError:
        value = raw  # refused below, naming the variable
    return _check(value, f"{ENV}={raw!r}")


def cpu_threads() -> int:
    """The most CPU threads one jarp call uses (0: every thread of XLA's CPU pool).

    Returns:
        The value `set_cpu_threads` set last, else ``JARP_CPU_THREADS`` (read at the first use), else 0.

    Example:
        ```python
        import jarp.warp

        jarp.warp.cpu_threads()  # 0 unless JARP_CPU_THREADS is set
        ```
    """
    global _cap
    with _lock:
        if _cap is None:
            _cap = _from_env()
        return _cap


def set_cpu_threads(n: int) -> None:
    """Cap the CPU threads one jarp call uses; 1 runs every launch on the calling thread.

    On the CPU, jarp's native launch runs the batch slices of a vmapped call, and index ranges of one launch of a
    kernel it proves race-free (every thread writes only at its own index; no atomics, tiles or ``printf``), on
    XLA's intra-op thread pool, the threads XLA's own CPU operations use. Results are bit-identical whatever the
    cap. Calls with fewer than 32,768 tasks (launch threads times batch slices) always stay on the calling thread.
    The setting applies to calls from now on, in every compiled program; ``JARP_CPU_THREADS`` sets it for a process.

    Args:
        n: the most threads per call, the calling thread included; 0 for as many as XLA's pool has (the default).

    Raises:
        ValueError: if ``n`` is not a whole number >= 0.

    Example:
        ```python
        import jarp.warp

        jarp.warp.set_cpu_threads(1)  # one thread per launch, as Warp's own CPU launches
        jarp.warp.set_cpu_threads(0)  # back to every core
        ```
    """
    global _cap
    value = _check(n, "set_cpu_threads(n): n")
    with _lock:
        _cap = value
        sinks = list(_sinks)
    for sink in sinks:
        sink(value, MIN_TASKS, MIN_RANGE)


def attach(sink: Callable[[int, int, int], None]) -> None:
    """Give ``sink`` (a loaded handler's ``set_threads``) the setting now and on every change."""
    cap = cpu_threads()
    with _lock:
        _sinks.append(sink)
    sink(cap, MIN_TASKS, MIN_RANGE)
