"""No Warp module loads inside XLA's capture of a command buffer on a CUDA driver that cannot (before 12.3).

Unit: `_executors.get_executor` (given the call frame, as `_target` passes it) and `_executors.check_load_during_capture`.
Preparing a CUDA kernel executor loads the kernel's module; if XLA is capturing the frame's stream, the driver is older
than 12.3 and nothing preloaded the module, that is refused with a ``FAILED_PRECONDITION`` naming the fixes, before
anything loads. Without a GPU the device, the stream's capture state, the driver's answer and the load are faked.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import pytest
import warp as wp

from jarp.warp import jax_kernel
from jarp.warp._ffi import _executors
from jarp.warp._ffi._frame import CallError
from jarp.warp._upstream import _warp_kernels, _warp_launches, _xla_ffi
from tests.support import kernels as k
from tests.support.lowered import plan_handles

STREAM = 0x5EA4_0000_0000
ORDINAL = 5  # a device slot no other test uses


class FakeDevice:
    is_cpu = False
    is_cuda = True
    context = 0xC0C0_0000_0000
    ordinal = ORDINAL

    def __str__(self) -> str:
        return f"cuda:{ORDINAL}"


class Fakes:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.capturing, self.new_driver, self.loaded = True, False, False
        self.loads: list[Any] = []
        self.device = FakeDevice()
        monkeypatch.setattr(wp, "get_cuda_device", lambda ordinal: self.device)
        monkeypatch.setattr(_xla_ffi, "get_stream", lambda frame: STREAM)
        monkeypatch.setattr(_warp_launches, "stream_is_capturing", lambda stream: stream == STREAM and self.capturing)
        monkeypatch.setattr(_warp_launches, "loads_during_capture", lambda: self.new_driver)
        monkeypatch.setattr(_warp_launches, "module_loaded", self._module_loaded)
        monkeypatch.setattr(_executors, "CudaKernelExecutor", self._executor)

    def _module_loaded(self, kernel: Any, device: Any, block_dim: int | None = None) -> bool:
        assert device is self.device
        return self.loaded

    def _executor(self, plan: Any, device: Any) -> Any:
        self.loads.append(plan.target)  # the real one loads the module here
        return object()


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Fakes:
    return Fakes(monkeypatch)


def _handle() -> int:
    f = jax_kernel(k.triple_kernel, module_preload_mode=wp.JaxModulePreloadMode.NONE)
    text = jax.jit(lambda x: f(x)[0]).lower(jnp.zeros(7, jnp.float32)).as_text()
    (handle,) = set(plan_handles(text))
    return handle


def _get(handle: int, frame: int = 1) -> Any:
    try:
        return _executors.get_executor((handle, ORDINAL), "cuda", frame)
    finally:
        _executors.executors.pop((handle, ORDINAL), None)


def test_a_load_inside_a_capture_on_an_old_driver_is_refused_before_anything_loads(fakes: Fakes) -> None:
    handle = _handle()
    with pytest.raises(CallError) as info:
        _get(handle)
    assert info.value.code == _xla_ffi.ErrorCode.FAILED_PRECONDITION
    message = str(info.value)
    assert "XLA is capturing this call on cuda:5 into a CUDA graph" in message
    assert "kernel 'triple_kernel' is not loaded on cuda:5" in message
    assert "before version 12.3" in message
    assert "module_preload_mode=wp.JaxModulePreloadMode.CURRENT_DEVICE" in message
    assert fakes.loads == []
    assert (handle, ORDINAL) not in _executors.executors


@pytest.mark.parametrize(
    "case", ["not capturing", "a driver of 12.3 or newer", "preloaded", "no frame (a caller outside XLA)"]
)
def test_otherwise_the_executor_is_prepared(fakes: Fakes, case: str) -> None:
    handle = _handle()
    if case == "not capturing":
        fakes.capturing = False
    elif case == "a driver of 12.3 or newer":
        fakes.new_driver = True
    elif case == "preloaded":
        fakes.loaded = True
    assert _get(handle, frame=0 if case.startswith("no frame") else 1) is not None
    assert [t.key for t in fakes.loads] == ["triple_kernel"]


def test_loads_during_capture_is_the_driver_version_test_warp_makes(monkeypatch: pytest.MonkeyPatch) -> None:
    _warp_kernels.runtime_core()
    runtime = wp._src.context.runtime
    for version, expected in [(None, False), ((11, 8), False), ((12, 2), False), ((12, 3), True), ((13, 0), True)]:
        monkeypatch.setattr(runtime, "driver_version", version)
        assert _warp_launches.loads_during_capture() is expected, version


@wp.kernel(module="unique")
def _probe(a: wp.array(dtype=float)):
    a[wp.tid()] = 1.0


def test_module_loaded_is_true_once_loaded_and_false_once_unloaded() -> None:
    cpu = wp.get_device("cpu")
    _probe.module.unload()
    assert not _warp_launches.module_loaded(_probe, cpu)
    _warp_launches.load_entry_points(_probe, cpu)
    assert _warp_launches.module_loaded(_probe, cpu)
    _probe.module.unload()  # what a rebuild does first
    assert not _warp_launches.module_loaded(_probe, cpu)
