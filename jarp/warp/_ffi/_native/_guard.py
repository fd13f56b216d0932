"""The launch guard of bounds-checked kernels: an out-of-bounds index becomes a Python error, not an abort.

A kernel built in Warp's debug mode (``jax_kernel(..., bounds_check=True)``, or ``wp.config.mode = "debug"``)
checks every array index. On the CPU a failed check prints the check and aborts the process; jarp calls such a
kernel's entry point through a small native guard (``_guard.cpp``, built at first use with the Clang in the
warp-lang wheel, cached in Warp's kernel cache) that turns that abort into a return code, and the executor then
raises an error naming the kernel. Guarded launches run one at a time. On CUDA, Warp's device-side check makes the
launch fail with a CUDA error, which XLA reports. The guard needs Linux's signals; elsewhere bounds-checked CPU
launches are refused.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.resources
import platform
from collections.abc import Callable

import warp as wp

from ..._upstream import _locks, _warp_builds
from ._build import cached_object

_SOURCE = importlib.resources.files(__package__).joinpath("_guard.cpp")  # pyright: ignore[reportArgumentType]  # a module of a package: __package__ is set
_GUARD = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)
_lock = _locks.make("guard")  # one jump buffer: guarded launches run one at a time
_state: dict[str, object] = {}


def available() -> bool:
    """Whether bounds-checked CPU launches can be guarded here (Linux)."""
    return platform.system() == "Linux"


def _guard() -> Callable[..., int]:
    fn = _state.get("guard")
    if fn is None:
        source = _SOURCE.read_text()
        digest = hashlib.sha256(f"{source}|{wp.config.version}|{platform.machine()}".encode()).hexdigest()[:16]
        obj = cached_object("jarp_guard", digest, source, str(_SOURCE), {}, [])
        lookup = _warp_builds.load_cpu_object(str(obj), f"jarp_guard_{digest}")
        fn = _state["guard"] = _GUARD(lookup("jarp_guarded_call"))
    return fn  # type: ignore[return-value]


def call(entry: int, bounds: int, args: int, adjoint_args: int | None = None) -> int:
    """Call a CPU entry point ``entry(bounds, args[, adjoint_args])`` under the guard.

    Returns:
        0 if the launch completed, else the number of the signal Warp's failed check raised.
    """
    guard = _guard()
    with _lock:
        return int(guard(entry, bounds, args, adjoint_args))
