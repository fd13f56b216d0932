"""Module preloading: compile and load a kernel's Warp module at trace time (``wp.JaxModulePreloadMode``)."""

from __future__ import annotations

from typing import Any

import jax
import warp as wp

from .._upstream import _warp_internals
from . import _weakcache


def preload(kernel: Any, mode: Any, block_dim: int | None = None) -> None:
    """Compile and load ``kernel``'s module (its variant for ``block_dim``) at trace time, per ``wp.JaxModulePreloadMode``.

    What was loaded is recorded with the kernel (`_weakcache.cache_for`), so the record
    goes with it, and a failed load is not recorded (the next trace tries again).
    """
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
    loaded = _weakcache.cache_for(kernel, "preloaded")
    for device in devices:
        key = (str(device), block_dim, bool(wp.config.enable_cpu_blocks))
        if key in loaded:
            continue
        _warp_internals.load_entry_points(kernel, device, block_dim)  # under Warp's lock
        loaded[key] = True
