"""Module preloading: compile and load a kernel's Warp module at trace time (``wp.JaxModulePreloadMode``)."""

from __future__ import annotations

import threading
from typing import Any

import jax
import warp as wp

from . import _internals

_preloaded: set[tuple[Any, str]] = set()
_preload_lock = threading.Lock()


def preload(kernel: Any, mode: Any, block_dim: int | None = None) -> None:
    """Compile and load ``kernel``'s module (its variant for ``block_dim``) at trace time, per ``wp.JaxModulePreloadMode``."""
    mode = wp.JaxModulePreloadMode(mode)
    if mode == wp.JaxModulePreloadMode.NONE:
        return
    if mode == wp.JaxModulePreloadMode.CURRENT_DEVICE:
        platforms = [jax.default_backend()]
    else:
        platforms = ["cpu", "gpu"]
    devices = []
    for platform in platforms:
        if platform == "cpu":
            devices.append(wp.get_device("cpu"))
        elif platform in ("gpu", "cuda"):
            devices.extend(wp.get_cuda_devices())
    for device in devices:
        key = (kernel, str(device), block_dim, bool(wp.config.enable_cpu_blocks))
        if key in _preloaded:
            continue
        with _preload_lock:
            _internals.load_entry_points(kernel, device, block_dim)
            _preloaded.add(key)
