"""How many CPU threads one jarp call may use: the setting, read from ``JARP_CPU_THREADS`` and `set_cpu_threads`.

The native handler runs the batch slices of a CPU call (and the index ranges of a provably race-free launch)
concurrently on XLA's intra-op thread pool, the pool XLA's own CPU operations use. This module holds the cap
and the size thresholds and hands them to the loaded handler; the work itself is in ``_native/_handler.cpp``.
The Python launch path (``JARP_LAUNCH=python``) always runs on the calling thread.
"""

from __future__ import annotations

import os
from collections.abc import Callable

from .._upstream import _locks

ENV = "JARP_CPU_THREADS"
PRIVATE_ENV = "JARP_CPU_PRIVATE_BYTES"
LINGER_ENV = "JARP_CPU_LINGER_US"
# A call goes to the pool with at least this many tasks (launch threads times batch slices): below, handing
# work to another thread costs more than it saves, and a small kernel's marginal launch cost must not move...
MIN_TASKS = 1 << 15
# ...or, for a launch that can be split into index ranges, when a whole single-threaded run of it was measured to
# take at least this long (the work threshold: few but long threads, an element kernel, a neighbour loop)...
MIN_COST_NS = 200_000
# ...in ranges of about this long each (at least one task).
ITEM_NS = 20_000
# A launch with fewer tasks gets a ranged entry point (so that the handler may time it and split it) when its tasks
# times its estimated statements per thread (`_races.work_estimate`) reach this.
MIN_WORK = 500_000
# A split launch's index ranges have at least this many tasks each, unless measured.
MIN_RANGE = 1 << 13
# The private copies of accumulated arrays one split launch may take, by default (`set_cpu_private_bytes`).
PRIVATE_BYTES = 64 << 20
# A helper that ran out of items waits this long for the next split call before it gives its pool thread back, by
# default (`set_cpu_linger_us`): waking a sleeping pool thread takes 0.1 to 0.25 ms on a virtual machine, as long
# as a FEM launch over 1e4 elements, so calls in quick succession would each wait for it (``linger`` in the handler).
LINGER_US = 100

_lock = _locks.make("threads")
_sinks: list[Callable[[int, int, int, int, int, int, int], None]] = []


_THREADS_MEANING = "0: every thread of XLA's CPU pool; 1: the calling thread only"
_BYTES_MEANING = "bytes; 0: never split an accumulating launch"
_LINGER_MEANING = "microseconds; 0: helpers never wait for the next call"


def _check(value: object, what: str, meaning: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} must be a whole number >= 0 ({meaning}), got {value!r}.")
    return value


def _from_env(name: str, default: int, meaning: str) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value: object = int(raw)
    except ValueError:
        value = raw  # refused below, naming the variable
    return _check(value, f"{name}={raw!r}", meaning)


class _Setting:
    """One whole-number setting >= 0: the value its setter gave last, else its environment variable (read at the
    first use), else its default."""

    def __init__(self, env: str, default: int, meaning: str) -> None:
        self.env, self.default, self.meaning = env, default, meaning
        self.value: int | None = None  # None: not read from the environment yet

    def get(self) -> int:
        with _lock:
            if self.value is None:
                self.value = _from_env(self.env, self.default, self.meaning)
            return self.value

    def set(self, n: object, what: str) -> None:
        """Set it (``what`` names the argument in the error) and hand the settings to the loaded handlers."""
        value = _check(n, what, self.meaning)
        with _lock:
            self.value = value
        _push()


_THREADS = _Setting(ENV, 0, _THREADS_MEANING)
_PRIVATE = _Setting(PRIVATE_ENV, PRIVATE_BYTES, _BYTES_MEANING)
_LINGER = _Setting(LINGER_ENV, LINGER_US, _LINGER_MEANING)


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
    return _THREADS.get()


def set_cpu_threads(n: int) -> None:
    """Cap the CPU threads one jarp call uses; 1 runs every launch on the calling thread.

    On the CPU, jarp's native launch runs the batch slices of a vmapped call, and index ranges of one launch of a
    kernel it proves race-free (every thread writes only at its own index; no atomics, tiles or ``printf``) or
    race-free but for accumulations into its outputs (each range then accumulates into its own copy of them, see
    `set_cpu_private_bytes`), on XLA's intra-op thread pool, the threads XLA's own CPU operations use. Results are
    bit-identical whatever the cap, except the float sums of accumulating kernels, which are within rounding and
    the same on every call for a given cap. A call with fewer than 32,768 tasks (launch threads times batch slices)
    splits only when its work is worth it (measured for race-free kernels, estimated from the code for accumulating
    ones). The setting applies to calls from now on, in every compiled program; ``JARP_CPU_THREADS`` sets it for a
    process. A cap of 1 gives every launch to the calling thread, bit for bit as one Warp launch.

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
    _THREADS.set(n, "set_cpu_threads(n): n")


def cpu_private_bytes() -> int:
    """The most bytes of private copies one split CPU launch may take (see `set_cpu_private_bytes`).

    Returns:
        The value `set_cpu_private_bytes` set last, else ``JARP_CPU_PRIVATE_BYTES``, else 64 MiB.

    Example:
        ```python
        import jarp.warp

        jarp.warp.cpu_private_bytes()  # 67108864 unless set
        ```
    """
    return _PRIVATE.get()


def set_cpu_private_bytes(n: int) -> None:
    """Cap the memory of the private copies a split CPU launch of an accumulating kernel takes.

    A kernel that accumulates into an output with ``wp.atomic_add`` (or ``+=``, ``atomic_sub``, ``atomic_min``,
    ``atomic_max``) and is otherwise race-free runs split on several cores: each index range accumulates into its own
    zeroed copy of the accumulated arrays, and the copies are combined after, in a fixed order. A launch whose copies
    would take more than ``n`` bytes uses fewer ranges; one that cannot use two stays on one thread. 0 never splits
    such launches.

    Args:
        n: the most bytes of copies per launch (64 MiB by default; ``JARP_CPU_PRIVATE_BYTES`` sets it for a process).

    Raises:
        ValueError: if ``n`` is not a whole number >= 0.

    Example:
        ```python
        import jarp.warp

        jarp.warp.set_cpu_private_bytes(16 << 20)  # at most 16 MiB of copies per launch
        ```
    """
    _PRIVATE.set(n, "set_cpu_private_bytes(n): n")


def cpu_linger_us() -> int:
    """How long a CPU helper thread waits for the next jarp call after its work (see `set_cpu_linger_us`).

    Returns:
        The value `set_cpu_linger_us` set last, else ``JARP_CPU_LINGER_US``, else 100 (microseconds).

    Example:
        ```python
        import jarp.warp

        jarp.warp.cpu_linger_us()  # 100 unless set
        ```
    """
    return _LINGER.get()


def set_cpu_linger_us(n: int) -> None:
    """Set how long a CPU helper thread that ran out of work waits (spinning) for the next split jarp call.

    A CPU launch split across cores runs on the calling thread and helpers from XLA's intra-op thread pool. Waking
    a sleeping pool thread takes 0.1 to 0.25 ms on a virtual machine, as long as a whole FEM launch over 1e4
    elements, so a helper that runs out of items stays on its pool thread up to ``n`` microseconds, spinning and
    yielding its core to anything else runnable, and joins the next split call if one starts meanwhile: the
    launches of one ``value_and_grad``, and the iterations of a solver or a training loop, then start on every core
    at once. OpenMP runtimes do the same (``OMP_WAIT_POLICY``, ``KMP_BLOCKTIME``). On a machine shared with other
    busy processes, 0 gives the cores back at once. Results are the same bits whatever the setting.

    Args:
        n: microseconds (100 by default; ``JARP_CPU_LINGER_US`` sets it for a process); 0 never waits.

    Raises:
        ValueError: if ``n`` is not a whole number >= 0.

    Example:
        ```python
        import jarp.warp

        jarp.warp.set_cpu_linger_us(0)  # helpers go back to XLA's pool as soon as their work is done
        jarp.warp.set_cpu_linger_us(100)  # the default
        ```
    """
    _LINGER.set(n, "set_cpu_linger_us(n): n")


def _settings() -> tuple[int, int, int, int, int, int, int]:
    linger_ns = cpu_linger_us() * 1000
    return (cpu_threads(), MIN_TASKS, MIN_RANGE, MIN_COST_NS, ITEM_NS, cpu_private_bytes(), linger_ns)


def _push() -> None:
    settings = _settings()
    with _lock:
        sinks = list(_sinks)
    for sink in sinks:
        sink(*settings)


def attach(sink: Callable[[int, int, int, int, int, int, int], None]) -> None:
    """Give ``sink`` (a loaded handler's ``set_threads``) the settings now and on every change."""
    settings = _settings()
    with _lock:
        _sinks.append(sink)
    sink(*settings)
