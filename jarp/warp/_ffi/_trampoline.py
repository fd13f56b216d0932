"""The one way jarp turns a Python function into an XLA FFI target: a ctypes trampoline per platform.

XLA holds raw pointers to the trampolines for the life of the process's executables, so they are kept
here for good; XLA refuses a second handler under a name it knows, so each name is registered once.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from typing import Any

import jax

PLATFORMS = ("cpu", "CUDA")  # XLA's platform names, as `jax.ffi.register_ffi_target` takes them
_CALLBACK_TYPE = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p)
_keepalive: list[Any] = []  # every trampoline XLA may call, for the life of the process


def trampoline(func: Callable[[int], int | None]) -> int:
    """The address of a C function ``XLA_FFI_Error* (XLA_FFI_CallFrame*)`` that calls ``func(frame)``, kept alive.

    ``func`` must never raise (ctypes would swallow the exception and XLA read garbage as success): it returns
    None for success or an ``XLA_FFI_Error*``.
    """
    cb = _CALLBACK_TYPE(func)
    _keepalive.append(cb)
    address = ctypes.cast(cb, ctypes.c_void_p).value
    assert address is not None
    return address


def register_target(name: str, addresses: Mapping[str, int]) -> None:
    """Register the handler at ``addresses[platform]`` as the FFI target ``name`` for each of `PLATFORMS`."""
    for platform in PLATFORMS:
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(addresses[platform]), platform=platform)


def register_bundle(name: str, bundles: Mapping[str, Mapping[str, int]]) -> None:
    """Register the FFI target ``name`` with a handler per execution stage (``{"instantiate": address, ...}``)."""
    for platform in PLATFORMS:
        stages = {stage: jax.ffi.pycapsule(address) for stage, address in bundles[platform].items()}
        jax.ffi.register_ffi_target(name, stages, platform=platform)
