"""The process's handler: built once, on the native path unless ``JARP_LAUNCH=python`` (`handler`), and which path
this process uses (`status`)."""

from __future__ import annotations

import os
import warnings
from typing import Any

from ..._upstream import _locks
from ._build import build
from ._handler import NativeHandler

ENV = "JARP_LAUNCH"
_lock = _locks.make("native_build")
_state: dict[str, Any] = {}


def handler() -> NativeHandler | None:
    """The native handler, built and loaded at the first call; None if it cannot be built here.

    With ``JARP_LAUNCH=python`` the handler still serves XLA's instantiate stage (the per-executable state
    that keeps a call's plan), but `activate` is not called, so no launch is published and every execution
    goes to the Python callback. When the handler cannot be built or loaded, jarp warns once (unless
    ``JARP_LAUNCH=python`` chose the Python path) and runs both stages in Python.
    """
    with _lock:
        if "handler" in _state:
            return _state["handler"]
        choice = os.environ.get(ENV, "native").strip().lower()
        if choice not in ("native", "", "python"):
            raise ValueError(f"{ENV}={os.environ[ENV]!r} is not a launch path; use 'native' (the default) or 'python'.")
        result: NativeHandler | None = None
        try:
            result = build()
            _state["status"] = "native" if choice != "python" else f"python ({ENV}=python)"
        except Exception as e:
            if choice == "python":
                _state["status"] = f"python ({ENV}=python)"
            else:
                _state["status"] = f"python (the native handler failed to build: {e})"
                warnings.warn(
                    f"jarp could not build its native launch handler ({type(e).__name__}: {e}); kernels launch "
                    f"through the Python callback instead (correct, but ~3 us more per launch and serialised by "
                    f"the GIL, and the plans of destroyed executables are kept until the process ends). Set "
                    f"{ENV}=python to choose that path explicitly and silence this warning.",
                    RuntimeWarning,
                    stacklevel=3,
                )
        _state["handler"] = result
        return result


def activate(native: NativeHandler) -> None:
    """Let ``native`` launch published plans itself (`_target.ensure_registered`, on the native path only)."""
    _state["active"] = native


def active() -> NativeHandler | None:
    """The native handler that launches published plans; None on the Python path or before registration."""
    return _state.get("active")


def status() -> str:
    """Which launch path this process uses: ``"native"``, or ``"python (<why>)"``; ``"not decided"`` before the first call."""
    return _state.get("status", "not decided")
