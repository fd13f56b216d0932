"""Errors raised inside an FFI call: named after the module, and handed back to the caller as they were raised.

XLA turns every error of an FFI handler into a ``jax.errors.JaxRuntimeError`` (whatever the
``XLA_FFI_Error_Code``: ``CANCELLED`` too), so the exception a user's function raised cannot
cross XLA itself. `ffi_error` therefore keeps it in a small side table under a token written
into the error's message, and `original` finds it again from the ``JaxRuntimeError``: the eager
paths (`call_reraising`, used by `_eager.try_eager` and the primitive's eager implementation)
re-raise the original exception, with its type and traceback, when the error reaches them synchronously. Under a user's ``jax.jit`` the ``JaxRuntimeError`` is all JAX
raises; its message names the module and carries the original type, message and traceback.

A kept exception's frames are cleared of their local variables (`release_frames`): they held ``wp.array``s over
the call's XLA buffers, which are freed once the call returns. Its traceback keeps files, lines and functions.

A ``KeyboardInterrupt`` inside a call becomes a ``CANCELLED`` error; outside an eager call the
interrupt is also re-raised in the main thread at its next opportunity (``_thread.interrupt_main``),
so that Ctrl-C still stops the program.
"""

from __future__ import annotations

import _thread
import collections
import contextlib
import inspect
import itertools
import re
import sys
import threading
import time
import traceback
from collections.abc import Callable
from types import TracebackType
from typing import TypeVar

from .._upstream import _locks, _xla_ffi

T = TypeVar("T")

# How many unclaimed exceptions to keep: errors under a user's jax.jit are never claimed, and
# an exception holds its traceback's frames alive (their locals are dropped: `release_frames`).
_KEEP = 16
_TOKEN = re.compile(r"jarp error (\d+): ")
_lock = _locks.make("own_frames")
_pending: collections.OrderedDict[int, tuple[BaseException, str]] = collections.OrderedDict()
_tokens = itertools.count(1)
# The files of jarp's FFI code (each module adds itself with `own_frames`): their frames are left out of the
# traceback text in a message, and an interrupt waits until the main thread has none of them on its stack.
_own_files: set[str] = set()


def own_frames(filename: str) -> None:
    """Mark the frames of the module at ``filename`` (its ``__file__``) as jarp's FFI code."""
    _own_files.add(filename)


own_frames(__file__)


def ffi_error(frame: int, exc: BaseException, name: str) -> int:
    """The ``XLA_FFI_Error`` for an exception raised while running module ``name``'s FFI call.

    Args:
        frame: The address of the call frame (for XLA's error-creation function).
        exc: The exception.
        name: How the module is written, e.g. ``"jax_callable(my_function)"`` (`Plan.name`).

    Returns:
        The error pointer to return to XLA.
    """
    token = next(_tokens)
    release_frames(exc)
    with _lock:
        _pending[token] = (exc, name)
        while len(_pending) > _KEEP:
            _pending.popitem(last=False)
    if isinstance(exc, KeyboardInterrupt):
        message = f"jarp error {token}: {name} was interrupted (KeyboardInterrupt)"
        error = _xla_ffi.create_error(frame, _xla_ffi.ErrorCode.CANCELLED, message)
        if not _under_reraising_call():
            _interrupt_main()
        return error
    try:
        text = str(exc)
    except Exception:
        text = "<exception str() failed>"
    try:
        tb = _traceback_text(exc)
    except Exception:
        tb = "<traceback unavailable>"
    message = f"jarp error {token}: {name} raised {type(exc).__name__}: {text}\n{tb}"
    return _xla_ffi.create_error(frame, _xla_ffi.ErrorCode.UNKNOWN, message)


_GENERATOR_FLAGS = inspect.CO_GENERATOR | inspect.CO_COROUTINE | inspect.CO_ASYNC_GENERATOR


def release_frames(exc: BaseException) -> None:
    """Drop the local variables of the finished frames in the tracebacks of ``exc`` and of the exceptions it chains.

    The exception is kept after the call returns (in `_pending`, and re-raised by `call_reraising`), and the
    frames it went through held ``wp.array``s wrapping the call's XLA buffers, which XLA frees or reuses once the
    call returns: a debugger or a traceback printer that shows locals would read that memory. The traceback keeps
    its files, lines and function names. Frames still executing keep their locals, and so do the frames of
    generators and coroutines (clearing one would close a generator that may still be suspended).
    """
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        tb = e.__traceback__
        while tb is not None:
            frame = tb.tb_frame
            if not frame.f_code.co_flags & _GENERATOR_FLAGS:
                with contextlib.suppress(RuntimeError):  # still executing (the FFI callback's own frame)
                    frame.clear()
            tb = tb.tb_next
        stack += [e.__cause__, e.__context__]
        if isinstance(e, BaseExceptionGroup):
            stack += e.exceptions


def original(error: BaseException) -> BaseException | None:
    """Take the exception behind a ``JaxRuntimeError`` made by `ffi_error` (once), or None.

    Returns:
        The exception raised inside the call, with a note naming the module; None when ``error``
        does not come from `ffi_error` or its exception was already taken or dropped.
    """
    match = _TOKEN.search(str(error))  # the first: ours leads the message, a nested call's error follows
    if match is None:
        return None
    with _lock:
        entry = _pending.pop(int(match.group(1)), None)
    if entry is None:
        return None
    exc, name = entry
    note = f"(raised inside {name})"
    if note not in getattr(exc, "__notes__", ()):
        exc.add_note(note)
    return exc


def _traceback_text(exc: BaseException) -> str:
    """The formatted traceback of ``exc`` without jarp's own FFI frames."""
    tb: TracebackType | None = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename in _own_files and tb.tb_next is not None:
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()


def call_reraising(func: Callable[..., T], *args: object) -> T:
    """``func(*args)``; an exception raised inside one of its FFI calls is raised again as it was raised.

    For calls that run synchronously (eager calls outside a user's ``jax.jit``): the ``JaxRuntimeError`` (or
    jaxlib's ``ValueError`` from its C++ fast path) gives way to the original exception, with its type and
    traceback and a note naming the module. Any other exception propagates unchanged. An interrupt raised
    under this call is not re-armed in the main thread: it reaches the caller here.
    """
    try:
        return func(*args)
    except Exception as e:
        original_exc = original(e)
        if original_exc is None:
            raise
    raise original_exc  # outside the except: the JaxRuntimeError is not chained to it


def _under_reraising_call() -> bool:
    """Whether this thread runs the call synchronously under `call_reraising`."""
    f = sys._getframe(1)
    code = call_reraising.__code__
    while f is not None:
        if f.f_code is code:
            return True
        f = f.f_back
    return False


def _interrupt_main() -> None:
    """Re-raise a ``KeyboardInterrupt`` in the main thread once it has left jarp's FFI callback.

    Off the main thread (XLA's worker threads), the interrupt is simply scheduled. On the main
    thread it must not fire inside the callback (an exception escaping a ctypes callback is
    swallowed and the call returns garbage to XLA), so a helper thread schedules it once no
    frame of the main thread is in jarp's FFI code any more.
    """
    if threading.current_thread() is not threading.main_thread():
        _thread.interrupt_main()
        return
    threading.Thread(
        target=_interrupt_when_out, args=(threading.main_thread().ident,), name="jarp-interrupt", daemon=True
    ).start()


def _interrupt_when_out(main: int) -> None:
    for spins in itertools.count():
        f = sys._current_frames().get(main)
        while f is not None and f.f_code.co_filename not in _own_files:
            f = f.f_back
        if f is None:
            break
        # sleep(0) hands the GIL straight back; the main thread gives it up again when it returns to
        # XLA, so the interrupt is scheduled before XLA returns to Python.
        time.sleep(0 if spins < 1000 else 0.001)
    _thread.interrupt_main()
