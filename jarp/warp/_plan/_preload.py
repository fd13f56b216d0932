"""Module preloading: compile and load a kernel's Warp module at trace time (``wp.JaxModulePreloadMode``)."""

from __future__ import annotations

from typing import Any

import jax
import warp as wp

from .._upstream import _warp_launches
from . import _weakcache


def preload(kernel: Any, mode: Any, block_dim: int | None = None) -> None:
    """Compile and load ``kernel``'s module (its variant for ``block_dim``) at trace time, per ``wp.JaxModulePreloadMode``.

    ``CURRENT_DEVICE`` loads on JAX's current device only, ``ALL_DEVICES`` on every local JAX CPU and CUDA
    device (`preload_devices`). What was loaded is recorded with the kernel (`_weakcache.cache_for`), so the
    record goes with it, and a failed load is not recorded (the next trace tries again).
    """
    devices = preload_devices(mode)
    if not devices:
        return
    loaded = _weakcache.cache_for(kernel, "preloaded")
    for device in devices:
        key = (str(device), block_dim, bool(wp.config.enable_cpu_blocks))
        if key in loaded:
            continue
        _warp_launches.load_entry_points(kernel, device, block_dim)  # under Warp's lock
        loaded[key] = True


def preload_devices(mode: object) -> list[Any]:
    """The Warp devices a preload in ``mode`` loads on, as Warp's bridge chooses them.

    ``CURRENT_DEVICE``: JAX's current device (``jax.default_device``'s, else the first local device), so
    no context is created and nothing compiled for a GPU this process does not compute on. ``ALL_DEVICES``:
    every local JAX CPU and CUDA device, once each. A JAX device Warp cannot map (another platform, a GPU of
    another process) is skipped.
    """
    mode = wp.JaxModulePreloadMode(mode)
    if mode == wp.JaxModulePreloadMode.NONE:
        return []
    if mode == wp.JaxModulePreloadMode.CURRENT_DEVICE:
        jax_devices = [_current_jax_device()]
    else:
        jax_devices = []
        for backend in ("cpu", "cuda"):
            try:
                jax_devices.extend(jax.local_devices(backend=backend))
            except RuntimeError:  # no such backend in this process
                continue
    devices: list[Any] = []
    for jax_device in jax_devices:
        try:
            device = wp.device_from_jax(jax_device)
        except (IndexError, RuntimeError):
            continue
        if all(device is not d for d in devices):
            devices.append(device)
    return devices


def _current_jax_device() -> Any:
    """JAX's current device: the one ``jax.default_device`` (or ``jax_default_device``) names, else the first local one."""
    device = jax.config.jax_default_device  # pyright: ignore[reportAttributeAccessIssue]  # JAX sets its options on Config at run time
    if device is None:
        return jax.local_devices()[0]
    if isinstance(device, str):  # a platform name
        return jax.local_devices(backend=device)[0]
    return device
