"""The CUDA branch of `_executors.CallableExecutor`, without a GPU: XLA's capture, the stream switch and its lock.

Warp's bridge runs a callable's function under ``wp.ScopedStream`` on XLA's stream, inside
``wp.ScopedCapture(external=True)`` when XLA is recording the call into a command buffer (a CUDA graph), keeps the
capture (its graph retains the modules the function launched), and runs one callable at a time. Here the executor is
real (a real plan), and what needs a GPU is faked: the device, XLA's stream, Warp's capture query, ``wp.Stream``,
``wp.ScopedStream`` and ``wp.ScopedCapture`` (recording what was entered), and the arrays the function receives.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import jax
import jax.numpy as jnp
import pytest
import warp as wp

from jarp.warp import jax_callable
from jarp.warp._ffi import _executors
from jarp.warp._ffi._frame import CallError
from jarp.warp._ffi._registry import registry
from jarp.warp._plan._values import Plan
from jarp.warp._upstream import _warp_launches, _xla_ffi
from tests.support.lowered import plan_handles

STREAM = 0x5EA4_0000_0000  # the CUstream XLA hands the call


class FakeDevice:
    is_cpu = False
    is_cuda = True
    context = 0xC0C0_0000_0000

    def __init__(self, ordinal: int = 0) -> None:
        self.ordinal = ordinal

    def __str__(self) -> str:
        return f"cuda:{self.ordinal}"


class Log:
    """What the fakes saw, in order, from every thread."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.lock = threading.Lock()

    def add(self, *event: Any) -> None:
        with self.lock:
            self.events.append(event)


LOG = Log()
MODULES: list[Any] = []  # what the fake capture's graph retained: one new "module" per capture


class FakeStream:
    def __init__(self, device: Any, cuda_stream: int) -> None:
        self.device, self.cuda_stream = device, cuda_stream


class FakeScopedStream:
    def __init__(self, stream: FakeStream, sync_enter: bool = True) -> None:
        self.stream, self.sync_enter = stream, sync_enter

    def __enter__(self) -> FakeStream:
        LOG.add("stream", str(self.stream.device), self.stream.cuda_stream, self.sync_enter)
        return self.stream

    def __exit__(self, *exc: Any) -> None:
        LOG.add("/stream")


class FakeScopedCapture:
    def __init__(self, device: Any = None, stream: Any = None, external: bool = False, **kwargs: Any) -> None:
        self.external, self.graph = external, None

    def __enter__(self) -> FakeScopedCapture:
        LOG.add("capture", self.external)
        return self

    def __exit__(self, *exc: Any) -> None:
        module = object()
        MODULES.append(module)
        self.graph = SimpleNamespace(module_execs={module})  # what Warp's graph retains
        LOG.add("/capture")


def record(a: wp.array(dtype=float), out: wp.array(dtype=float)) -> None:
    LOG.add("func", threading.get_ident())
    time.sleep(0.002)  # long enough for another thread to come in, were it not locked out
    LOG.add("/func", threading.get_ident())


_callable = jax_callable(record)
_x = jnp.linspace(0.0, 1.0, 8, dtype=jnp.float32)


def _plan(fn: Callable[..., Any], *args: Any) -> Plan:
    text = jax.jit(fn).lower(*args).as_text()
    (handle,) = set(plan_handles(text))
    return registry.plan(handle)


class Fakes:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.capturing = False
        self.new_driver = True
        self.memsets: list[tuple[int, int, int]] = []
        monkeypatch.setattr(wp, "Stream", FakeStream)
        monkeypatch.setattr(wp, "ScopedStream", FakeScopedStream)
        monkeypatch.setattr(wp, "ScopedCapture", FakeScopedCapture)
        monkeypatch.setattr(_xla_ffi, "get_stream", lambda frame: STREAM)
        monkeypatch.setattr(_warp_launches, "stream_is_capturing", self._is_capturing)
        monkeypatch.setattr(_warp_launches, "loads_during_capture", lambda: self.new_driver)
        monkeypatch.setattr(_warp_launches, "cuda_memset", self._memset)
        LOG.events.clear()
        MODULES.clear()

    def _is_capturing(self, stream: int) -> bool:
        assert stream == STREAM
        return self.capturing

    def _memset(self, device: Any, ptr: int, nbytes: int, stream: int) -> None:
        self.memsets.append((ptr, nbytes, stream))

    def executor(self, ordinal: int = 0) -> Any:
        executor = _executors.CallableExecutor(_plan(lambda x: _callable(x)[0], _x), FakeDevice(ordinal))
        # The buffers: fake addresses for the frame; the arrays: what the function is handed (wp.array needs a device).
        executor.pointers = lambda frame: ([0x1000], [0x2000])
        executor._array = lambda spec, binding, ops, res, s, grad=None: (binding.source, binding.index, s)
        return executor


@pytest.fixture
def fakes(monkeypatch: pytest.MonkeyPatch) -> Fakes:
    return Fakes(monkeypatch)


def _run(executor: Any) -> list[tuple[Any, ...]]:
    LOG.events.clear()
    executor.run(1)
    return [e[:1] if e[0] in ("func", "/func") else e for e in LOG.events]


def test_outside_a_capture_the_function_runs_on_xlas_stream_without_a_capture(fakes: Fakes) -> None:
    executor = fakes.executor()
    for _ in range(2):  # the first run (under Warp's lock) and a warm one
        assert _run(executor) == [("stream", "cuda:0", STREAM, False), ("func",), ("/func",), ("/stream",)]
    assert executor.capture is None
    assert executor.captured_modules == {}


def test_while_xla_captures_the_function_runs_in_an_external_warp_capture_kept_by_the_executor(fakes: Fakes) -> None:
    executor = fakes.executor()
    fakes.capturing = True
    expected = [("stream", "cuda:0", STREAM, False), ("capture", True), ("func",), ("/func",), ("/capture",)]
    expected.append(("/stream",))
    assert _run(executor) == expected
    first = executor.capture
    assert isinstance(first, FakeScopedCapture)
    assert first.external
    assert list(executor.captured_modules.values()) == MODULES
    # a later capture (XLA records the command buffer again): the newest capture is kept, and every module retained
    assert _run(executor) == expected
    assert executor.capture is not first
    assert list(executor.captured_modules.values()) == MODULES
    assert len(MODULES) == 2
    # and a run outside a capture changes neither
    fakes.capturing = False
    assert ("capture", True) not in _run(executor)
    assert len(executor.captured_modules) == 2


def test_capture_modules_reads_what_warps_graph_retained() -> None:
    module = object()
    capture = SimpleNamespace(graph=SimpleNamespace(module_execs={module}))
    assert _warp_launches.capture_modules(capture) == [module]
    assert _warp_launches.capture_modules(SimpleNamespace(graph=None)) == []
    assert _warp_launches.capture_modules(SimpleNamespace(graph=wp.Graph(wp.get_device("cpu")))) == []


@pytest.mark.parametrize("ordinals", [(0, 0), (0, 1)], ids=["one device", "two devices"])
def test_callables_on_several_threads_run_one_at_a_time(fakes: Fakes, ordinals: tuple[int, int]) -> None:
    # Warp's current device is process-wide and a device's current stream device-wide: two devices share the lock too.
    executors = [fakes.executor(o) for o in ordinals]
    for executor in executors:
        executor.run(1)  # warm: later runs take only the callable lock
    LOG.events.clear()
    barrier = threading.Barrier(4)

    def work(executor: Any) -> None:
        barrier.wait()
        for _ in range(5):
            executor.run(1)

    threads = [threading.Thread(target=work, args=(executors[i % 2],)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    depth = 0  # a stream switch and a function run nest: 2 at most, unless two threads overlap
    for event in LOG.events:
        if event[0] in ("stream", "func"):
            depth += 1
        elif event[0] in ("/stream", "/func"):
            depth -= 1
        assert depth <= 2, f"two functions or stream switches overlapped: {LOG.events}"
    assert sum(e[0] == "func" for e in LOG.events) == 20
    assert len({e[1] for e in LOG.events if e[0] == "func"}) == 4  # every thread ran


def test_a_zero_filled_result_is_cleared_on_xlas_stream_before_the_function_runs(fakes: Fakes) -> None:
    executor = fakes.executor()
    executor.zero = [(0, 32)]
    fakes.capturing = True
    executor.run(1)
    assert fakes.memsets == [(0x2000, 32, STREAM)]


def test_a_first_run_in_a_capture_on_an_old_driver_is_refused(fakes: Fakes) -> None:
    executor = fakes.executor()
    fakes.capturing, fakes.new_driver = True, False
    with pytest.raises(CallError, match=r"cannot load modules during a capture before version 12\.3") as info:
        executor.run(1)
    assert info.value.code == _xla_ffi.ErrorCode.FAILED_PRECONDITION
    assert "graph_mode=wp.JaxCallableGraphMode.NONE" in str(info.value)
    assert [e for e in LOG.events if e[0] == "func"] == []
    assert not executor.warm
    # outside a capture it runs (and loads), and later captures need no load: they run
    fakes.capturing = False
    executor.run(1)
    fakes.capturing = True
    assert ("capture", True) in _run(executor)
    # a new driver loads during a capture: the first run is not refused
    fresh = fakes.executor()
    fakes.new_driver = True
    assert ("func",) in _run(fresh)
