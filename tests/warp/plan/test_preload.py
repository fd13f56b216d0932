"""Which devices a trace-time preload loads a kernel's module on (``_plan/_preload.py``), with faked JAX devices.

Warp's bridge (``_preload_ffi_module``) preloads ``CURRENT_DEVICE`` on JAX's current device only (the one
``jax.default_device`` names, else the first local device) and ``ALL_DEVICES`` on every local JAX CPU and CUDA
device, skipping devices ``wp.device_from_jax`` cannot map. Without a GPU, JAX's device list and Warp's mapping are
faked, and so is the load, which records the devices it was asked for.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import warp as wp

from jarp.warp._plan import _preload
from jarp.warp._upstream import _warp_launches

MODES = wp.JaxModulePreloadMode


class FakeJaxDevice:
    def __init__(self, platform: str, ordinal: int, mappable: bool = True) -> None:
        self.platform, self.ordinal, self.mappable = platform, ordinal, mappable

    def __repr__(self) -> str:
        return f"jax:{self.platform}:{self.ordinal}"


CPU = FakeJaxDevice("cpu", 0)
GPU0, GPU1 = FakeJaxDevice("gpu", 0), FakeJaxDevice("gpu", 1)
REMOTE_GPU = FakeJaxDevice("gpu", 7, mappable=False)  # a GPU of another process: Warp cannot map it
TPU = FakeJaxDevice("tpu", 0, mappable=False)


class FakeWarpDevice:
    def __init__(self, name: str) -> None:
        self.name = name

    def __str__(self) -> str:
        return self.name


WARP = {("cpu", 0): FakeWarpDevice("cpu"), ("gpu", 0): FakeWarpDevice("cuda:0"), ("gpu", 1): FakeWarpDevice("cuda:1")}


class Fakes:
    """JAX's device list and default device, Warp's device mapping and the module load, faked and recorded."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.default: Any = None
        self.backends: dict[str, list[FakeJaxDevice]] = {"cpu": [CPU], "cuda": [GPU0, GPU1]}
        self.order = ["cuda", "cpu"]  # jax.local_devices() lists the default backend first
        self.loads: list[tuple[str, Any]] = []
        fake_jax = SimpleNamespace(config=self, local_devices=self.local_devices)
        monkeypatch.setattr(_preload, "jax", fake_jax)
        monkeypatch.setattr(wp, "device_from_jax", self.device_from_jax)
        monkeypatch.setattr(_warp_launches, "load_entry_points", self.load)

    @property
    def jax_default_device(self) -> Any:
        return self.default

    def local_devices(self, backend: str | None = None) -> list[FakeJaxDevice]:
        if backend is None:
            return [d for b in self.order for d in self.backends.get(b, [])]
        if backend not in self.backends:
            raise RuntimeError(f"Unknown backend {backend}")
        return self.backends[backend]

    def device_from_jax(self, jax_device: FakeJaxDevice) -> FakeWarpDevice:
        if not jax_device.mappable:
            raise RuntimeError(f"Unsupported Jax device {jax_device}")
        return WARP[(jax_device.platform, jax_device.ordinal)]

    def load(self, kernel: Any, device: Any, block_dim: int | None = None) -> None:
        self.loads.append((str(device), block_dim))

    def preloaded(self, mode: Any, block_dim: int | None = None) -> list[tuple[str, Any]]:
        self.loads.clear()
        # a fresh kernel each time: the record of what was preloaded lives with the kernel (the load is faked)
        _preload.preload(FakeKernel(), mode, block_dim)
        return list(self.loads)


class FakeKernel:
    """Stands for a kernel: the preload record lives with it, and the faked load never reads it."""


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Fakes:
    return Fakes(monkeypatch)


def test_current_device_is_the_first_local_device_only(fakes: Fakes) -> None:
    assert fakes.preloaded(MODES.CURRENT_DEVICE) == [("cuda:0", None)]  # not cuda:1, not the CPU
    fakes.order = ["cpu", "cuda"]
    assert fakes.preloaded(MODES.CURRENT_DEVICE, 64) == [("cpu", 64)]


def test_current_device_is_the_one_jax_default_device_names(fakes: Fakes) -> None:
    fakes.default = GPU1
    assert fakes.preloaded(MODES.CURRENT_DEVICE) == [("cuda:1", None)]
    fakes.default = "cpu"  # jax.default_device("cpu") sets a platform name
    assert fakes.preloaded(MODES.CURRENT_DEVICE) == [("cpu", None)]
    fakes.default = "cuda"
    assert fakes.preloaded(MODES.CURRENT_DEVICE) == [("cuda:0", None)]


def test_current_device_that_warp_cannot_map_loads_nothing(fakes: Fakes) -> None:
    fakes.default = REMOTE_GPU
    assert fakes.preloaded(MODES.CURRENT_DEVICE) == []
    fakes.default = None
    fakes.backends, fakes.order = {"tpu": [TPU]}, ["tpu"]
    assert fakes.preloaded(MODES.CURRENT_DEVICE) == []


def test_all_devices_is_every_local_cpu_and_cuda_device_warp_maps_once_each(fakes: Fakes) -> None:
    fakes.backends["cuda"] = [GPU0, REMOTE_GPU, GPU1, GPU0]  # unmappable and repeated devices are skipped
    fakes.backends["tpu"] = [TPU]  # neither CPU nor CUDA: not asked for
    assert fakes.preloaded(MODES.ALL_DEVICES) == [("cpu", None), ("cuda:0", None), ("cuda:1", None)]


def test_all_devices_without_a_cuda_backend_is_the_cpu(fakes: Fakes) -> None:
    del fakes.backends["cuda"]
    assert fakes.preloaded(MODES.ALL_DEVICES) == [("cpu", None)]


def test_none_loads_nothing_and_asks_jax_nothing(fakes: Fakes, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fakes, "local_devices", None)  # any question to JAX would fail
    monkeypatch.setattr(_preload, "jax", None)
    assert fakes.preloaded(MODES.NONE) == []
    assert _preload.preload_devices(0) == []


def test_a_device_is_loaded_once_per_kernel_and_block_dim(fakes: Fakes) -> None:
    kernel = FakeKernel()
    for _ in range(2):
        _preload.preload(kernel, MODES.ALL_DEVICES)
    _preload.preload(kernel, MODES.CURRENT_DEVICE, 32)
    assert fakes.loads == [("cpu", None), ("cuda:0", None), ("cuda:1", None), ("cuda:0", 32)]


def test_the_real_devices_here_are_what_warp_maps_from_jax() -> None:
    """Unfaked: on this machine's JAX devices, the same choice as Warp's own bridge."""
    current = _preload.preload_devices(MODES.CURRENT_DEVICE)
    assert current == [wp.device_from_jax(_preload._current_jax_device())]
    assert wp.get_device("cpu") in _preload.preload_devices(MODES.ALL_DEVICES)
