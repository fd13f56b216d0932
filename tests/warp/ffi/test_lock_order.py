"""The order of jarp's locks: the FFI executors' lock, then Warp's lock, then Warp's code-generation lock.

Unit: the FFI executors' lock (``_locks.executors``), Warp's lock (``_warp_kernels.warp_lock``) and Warp's own
``_codegen_lock`` as jarp takes them: a kernel's first call (``_executors.get_executor``), a callable's first run
(``CallableExecutor.run``, whose function may call another jarp module) and a generic callable's factory
(``_callable._specialise``). A thread that waits for an earlier lock while it holds a later one can deadlock with
a thread that takes them in order: a callable's first run held Warp's lock alone while a jarp kernel its function
called prepared its executor under the executors' lock, as ``get_executor`` on another thread held the executors'
lock and waited for Warp's. ``test_first_calls_take_the_locks_in_order`` records every acquisition through
proxies of the three locks; ``test_first_calls_from_four_threads_do_not_deadlock`` makes such first calls from four
threads at once under a watchdog. With the callable's first run under Warp's lock alone, the first named the nested
call and the second deadlocked in 3 runs of 3; with the factory under Warp's lock alone, the first named the factory.
References: NumPy.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._ffi import _executors, _locks
from jarp.warp._upstream import _warp_kernels

pytestmark = pytest.mark.launch_paths

_CPU = jax.devices("cpu")[0]
_THREADS = 4
_STRESS_S = 2.5  # how long the threads start new rounds
_MAX_ROUNDS = 4  # per thread: a bounded set of kernels, so that Warp's kernel cache is warm after the first run
_WATCHDOG_S = 60.0  # a thread still running this long after the start is taken to be deadlocked
# After a deadlock its threads keep jarp's locks: later tests, and JAX's clean-up at exit, would wait for them forever.
_EXIT_AFTER_S = 30.0


def _add_kernel(c: int) -> Any:
    """A new Warp kernel in a module of its own, ``out = a + c``.

    Args:
        c: the constant it adds (each value is a module of its own in Warp's kernel cache).

    Returns:
        The kernel.
    """

    @wp.kernel(module="unique")
    def add_c(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = a[i] + float(c)

    return add_c


def _callable_calling(kernel: Any, nested: Any) -> Callable[..., None]:
    """A callable's function: launch ``kernel`` (``out = a + c``) with ``wp.launch``, then add ``nested(a)``.

    Args:
        kernel: the Warp kernel the function launches on its arrays.
        nested: a jarp module called on a copy of ``a`` (its first call prepares its executor inside the
            callable's run), or None.

    Returns:
        The function, annotated for `jax_callable`.
    """

    def func(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        wp.launch(kernel, dim=a.shape, inputs=[a], outputs=[out])
        if nested is not None:
            (y,) = nested(jax.device_put(a.numpy(), _CPU))
            out.assign(out.numpy() + np.asarray(y))

    return func


def _x(n: int) -> jax.Array:
    """``0, 1, ..., n - 1`` as float32, on the CPU (the nested calls run there).

    Args:
        n: the length.

    Returns:
        The JAX array.
    """
    return jax.device_put(np.arange(n, dtype=np.float32), _CPU)


class _Recorder:
    """A proxy of a re-entrant lock that records, per thread, what the thread held when it asked for the lock.

    Attributes:
        lock: the real lock (mutual exclusion is the real lock's).
        rank: the lock's place in jarp's lock order (lower: taken first).
        name: the lock's name in the records.
        log: shared records, ``(thread name, asked for, held, reentrant, stack)`` for each blocking acquisition
            made while the thread held another recorded lock.
    """

    _held = threading.local()

    def __init__(self, lock: Any, rank: int, name: str, log: list[tuple[str, str, tuple[str, ...], bool, str]]):
        self.lock = lock
        self.rank = rank
        self.name = name
        self.log = log

    @classmethod
    def held(cls) -> list[_Recorder]:
        """The recorded locks this thread holds, innermost last (a re-entered lock once per acquisition)."""
        stack = getattr(cls._held, "stack", None)
        if stack is None:
            stack = cls._held.stack = []
        return stack

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        """Record the acquisition (if blocking, while other recorded locks are held), then acquire."""
        held = self.held()
        if blocking and held:
            names = tuple(dict.fromkeys(r.name for r in held))
            stack = "".join(traceback.format_stack(limit=25))
            self.log.append((threading.current_thread().name, self.name, names, self._is_owned(), stack))
        acquired = self.lock.acquire(blocking, timeout)
        if acquired:
            held.append(self)
        return acquired

    def release(self) -> None:
        """Release the real lock."""
        self.lock.release()
        held = self.held()
        for i in range(len(held) - 1, -1, -1):
            if held[i] is self:
                del held[i]
                break

    def _is_owned(self) -> bool:
        """Whether this thread holds the real lock (what `_warp_kernels.warp_lock_held` asks)."""
        return self.lock._is_owned()

    def __enter__(self) -> bool:
        """Acquire (blocking), as ``with lock:`` does."""
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        """Release."""
        self.release()


def _violations(
    log: list[tuple[str, str, tuple[str, ...], bool, str]], ranks: dict[str, int]
) -> list[tuple[str, str, tuple[str, ...], str]]:
    """The recorded waits for a lock while a lock later in the order was held (re-entering one held is no wait)."""
    return [
        (thread, asked, held, stack)
        for thread, asked, held, reentrant, stack in log
        if not reentrant and any(ranks[h] > ranks[asked] for h in held)
    ]


def _exit_later(seconds: float, fd: int) -> None:
    """End this process in ``seconds``, after writing every thread's stack to ``fd`` (faulthandler).

    A Python thread, not ``faulthandler.dump_traceback_later``: pytest cancels that timer when a test fails.

    Args:
        seconds: how long the process may go on.
        fd: the file descriptor of the terminal's stderr.
    """

    def run() -> None:
        time.sleep(seconds)
        faulthandler.dump_traceback(file=fd, all_threads=True)
        os._exit(1)

    threading.Thread(target=run, name="lock-order-exit", daemon=True).start()


def test_first_calls_take_the_locks_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    log: list[tuple[str, str, tuple[str, ...], bool, str]] = []
    ranks = {"executors": 0, "warp": 1, "codegen": 2}
    monkeypatch.setattr(_locks, "executors", _Recorder(_locks.executors, ranks["executors"], "executors", log))
    monkeypatch.setattr(_warp_kernels, "_WARP_LOCK", _Recorder(_warp_kernels._WARP_LOCK, ranks["warp"], "warp", log))
    monkeypatch.setattr(
        _warp_kernels, "_codegen_lock", _Recorder(_warp_kernels._codegen_lock, ranks["codegen"], "codegen", log)
    )
    x = _x(5)
    base = 1000  # new kernels (new plans and executors); their Warp modules are cached after the first run

    # A kernel's first call: `get_executor` prepares its executor.
    (y,) = jax_kernel(_add_kernel(base))(x)
    np.testing.assert_array_equal(y, np.arange(5, dtype=np.float32) + base)

    # A callable's first run, whose function calls a kernel module for the first time (from inside the run).
    inner = jax_kernel(_add_kernel(base + 1))
    (y,) = jax_callable(_callable_calling(_add_kernel(base + 2), inner))(x)
    np.testing.assert_array_equal(y, 2 * np.arange(5, dtype=np.float32) + 2 * base + 3)

    # A generic callable's factory that calls a kernel module for the first time (under `_executors.build_lock`).
    seen: list[np.ndarray] = []
    probe = jax_kernel(_add_kernel(base + 3))

    def factory(dtype: Any) -> Callable[..., None]:
        with jax.ensure_compile_time_eval():  # run now, not in the trace that resolves the factory
            (v,) = probe(_x(2))
        seen.append(np.asarray(v))
        return _callable_calling(_add_kernel(base + 4), None)

    (y,) = jax_callable(factory, generic=True)(x)
    np.testing.assert_array_equal(y, np.arange(5, dtype=np.float32) + base + 4)
    np.testing.assert_array_equal(seen[0], np.arange(2, dtype=np.float32) + base + 3)

    bad = _violations(log, ranks)
    assert not bad, "a lock taken after a later one in the order (executors -> warp -> codegen):\n" + "\n".join(
        f"{thread}: asked for {asked} holding {held}\n{stack}" for thread, asked, held, stack in bad
    )
    # The paths were taken: Warp's lock under the executors' lock (an executor's preparation), the executors' lock
    # again under Warp's (the nested first call inside the callable's run and the factory), and jarp's code
    # generation under Warp's lock.
    pairs = {(h, asked) for _, asked, held, _, _ in log for h in held}
    assert {("executors", "warp"), ("warp", "executors"), ("warp", "codegen")} <= pairs, pairs


def test_the_order_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    # The check above fails where a thread holding Warp's lock alone waits for the executors' lock.
    log: list[tuple[str, str, tuple[str, ...], bool, str]] = []
    ranks = {"executors": 0, "warp": 1}
    executors = _Recorder(threading.RLock(), ranks["executors"], "executors", log)
    warp = _Recorder(threading.RLock(), ranks["warp"], "warp", log)
    with executors, warp, executors:  # in order, then re-entered: no wait
        pass
    assert _violations(log, ranks) == []
    with warp, executors:
        pass
    assert [(asked, held) for _, asked, held, _ in _violations(log, ranks)] == [("executors", ("warp",))]


def test_build_lock_holds_the_executors_lock_then_warps() -> None:
    with _executors.build_lock():
        assert _locks.executors._is_owned()
        assert _warp_kernels.warp_lock_held()
        with _executors.build_lock():  # re-entrant
            assert _warp_kernels.warp_lock_held()
    assert not _locks.executors._is_owned()
    assert not _warp_kernels.warp_lock_held()


def test_first_calls_from_four_threads_do_not_deadlock(capsys: pytest.CaptureFixture[str]) -> None:
    # Each thread makes, round after round, the first calls of new modules: a callable launching a new kernel (its
    # first run loads the kernel's module), the kernel's own module (every other round called from inside the
    # callable's first run, else after it) and a jitted call of that module.
    start = threading.Barrier(_THREADS)
    deadline = [0.0]
    errors: list[str] = []
    rounds = [0] * _THREADS

    def work(t: int) -> None:
        try:
            start.wait(timeout=60)
            deadline[0] = deadline[0] or time.monotonic() + _STRESS_S
            i = 0
            while i == 0 or (i < _MAX_ROUNDS and time.monotonic() < deadline[0]):
                c = 10_000 + 1000 * t + i  # the same constants every run
                kernel = _add_kernel(c)
                x = _x(3 + t)
                expect = np.arange(3 + t, dtype=np.float32) + c
                module = jax_kernel(kernel)
                nested = module if i % 2 == 0 else None
                (y,) = jax_callable(_callable_calling(kernel, nested))(x)
                np.testing.assert_array_equal(y, 2 * expect if nested is not None else expect)
                (y,) = module(x)
                np.testing.assert_array_equal(y, expect)
                y = jax.jit(lambda v, m=module: m(v)[0] * 2.0)(x)
                np.testing.assert_array_equal(y, 2 * expect)
                i += 1
                rounds[t] = i
        except BaseException:
            errors.append(f"thread {t}:\n{traceback.format_exc()}")

    threads = [threading.Thread(target=work, args=(t,), name=f"lock-order-{t}", daemon=True) for t in range(_THREADS)]
    began = time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=max(0.0, began + _WATCHDOG_S - time.monotonic()))
    stuck = [thread for thread in threads if thread.is_alive()]
    if stuck:
        frames = sys._current_frames()
        stacks = "\n".join(
            f"--- {thread.name}\n{''.join(traceback.format_stack(frames[thread.ident]))}"
            for thread in stuck
            if thread.ident in frames
        )
        message = (
            f"deadlock: {len(stuck)} of {_THREADS} threads still running {_WATCHDOG_S:.0f} s after the start. They "
            f"keep the locks they hold, so this process exits in {_EXIT_AFTER_S:.0f} s (faulthandler). Their stacks:\n"
            f"{stacks}"
        )
        with capsys.disabled():  # to the terminal now: the report at the end of the session may never come
            print(message, file=sys.stderr, flush=True)
            stderr = os.dup(sys.stderr.fileno())
        _exit_later(_EXIT_AFTER_S, stderr)
        pytest.fail(message)
    assert not errors, "\n".join(errors)
    assert all(r >= 1 for r in rounds), rounds
