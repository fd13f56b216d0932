"""What jarp keeps alive: dropped kernels are released with their plans (failed builds: test_stale_state.py).

Unit: the plan registry's leases (``_registry._Registry``: a handle stays registered while an executable lowered with
it lives, and is released at the next trace or ``jax.clear_caches()`` once none does), with the FFI executors and
native launch descriptors dropped with their plans. Measured with weak references, ``gc.collect()`` and
``tracemalloc``; Warp alone is the reference for what stays alive (its module keeps the latest kernel of each key).
"""

from __future__ import annotations

import ctypes
import gc
import threading
import time
import tracemalloc
import weakref
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable, jax_kernel, list_plans
from jarp.warp._ffi import _executors, _native, _registry
from jarp.warp._ffi._registry import ReleasedPlanError, registry
from jarp.warp._upstream import _warp_kernels, _warp_launches
from tests.support.kernels_lifetimes import make_scale_kernel

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)


# Kernels dropped per test: any one kept by jarp fails the count at the end, and a cache growing by one a call shows
# from the third on; `test_memory_is_bounded_over_110_create_call_drop_cycles` runs the long series.
CYCLES = 4


def _alive(refs: list[weakref.ref[Any]]) -> int:
    gc.collect()
    return sum(r() is not None for r in refs)


def _alive_settled(refs: list[weakref.ref[Any]], at_most: int = 2, seconds: float = 2.0) -> int:
    """`_alive` once it is ``<= at_most``, or after ``seconds``: XLA's thread may drop an executable (and with it
    its lease) a moment after the call's output is ready, so its plan waits for a safe point after that."""
    deadline = time.monotonic() + seconds
    while (alive := _alive(refs)) > at_most and time.monotonic() < deadline:
        registry.release_idle()  # a safe point: count the leases collected since
        time.sleep(0.01)
    return alive


@pytest.mark.parametrize("how", ["eager", "jit", "grad", "runtime scalar"])
def test_dropped_kernels_are_released_as_warp_releases_them(how: str) -> None:
    x = jnp.arange(4.0, dtype=jnp.float32)
    refs = []
    for i in range(1, CYCLES + 1):
        kernel = make_scale_kernel(i)
        refs.append(weakref.ref(kernel))
        m = jax_kernel(kernel, enable_backward=how == "grad")
        if how == "eager":
            (y,) = m(x)
        elif how == "jit":
            y = jax.jit(lambda x, m=m: m(x)[0])(x)
        elif how == "grad":
            y = jax.grad(lambda x, m=m: jnp.sum(m(x)[0]))(x) * x
        else:
            y = jnp.asarray(np.arange(4.0, dtype=np.float32) * i)  # the variant below is checked instead
            variant = jax_kernel(_runtime_scalar_kernel(i))
            refs.append(weakref.ref(variant.kernel))
            (z,) = variant(x, jnp.float32(i))
            np.testing.assert_array_equal(z, np.arange(4.0) * i)
            del variant, z
        np.testing.assert_array_equal(y, np.arange(4.0) * i)
        del kernel, m, y
    jax.clear_caches()
    # Warp keeps the latest kernel of each key in its module, and the kernels its last build saw until the
    # module changes: one more kernel of each key replaces them. jarp then keeps none of the dropped ones.
    (y,) = jax_kernel(make_scale_kernel(CYCLES + 1))(x)
    (z,) = jax_kernel(_runtime_scalar_kernel(CYCLES + 1))(x, jnp.float32(2))
    np.testing.assert_array_equal(z, np.arange(4.0) * 2)
    del y, z
    assert _alive(refs) == 0


@pytest.mark.parametrize("runs", ["kernel", "callable"])
def test_kernels_differentiated_under_jit_grad_are_released(runs: str) -> None:
    # Nothing on the reverse-mode path may hold a plan past its executables: a kernel alive when Warp
    # next builds its module is kept by that build (Warp hashes every live kernel of the module) until
    # the module changes again, so one strong cache of plans keeps every kernel differentiated since.
    x = jnp.arange(4.0, dtype=jnp.float32)
    refs = []
    for i in range(1, CYCLES + 1):
        kernel = make_scale_kernel(i)
        refs.append(weakref.ref(kernel))
        if runs == "kernel":
            m = jax_kernel(kernel, enable_backward=True)
        else:
            m = jax_callable(_launcher(kernel), enable_backward=True)
        g = jax.jit(jax.grad(lambda x, m=m: jnp.sum(m(x)[0] * x)))(x)
        np.testing.assert_array_equal(g, 2 * np.arange(4.0) * i)
        del kernel, m, g
        _alive_settled(refs, at_most=1)  # this call's executable is gone before the next kernel is built
    jax.clear_caches()
    list_plans()
    # as with Warp alone: its module keeps the latest kernel of the key
    assert _alive(refs) <= 1


def _launcher(kernel: Any) -> Callable[..., None]:
    def launch(a: wp.array(dtype=float), out: wp.array(dtype=float)) -> None:
        wp.launch(kernel, dim=a.shape, inputs=[a], outputs=[out])

    return launch


def _runtime_scalar_kernel(i: int) -> Any:
    @wp.kernel
    def scale_rt(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
        t = wp.tid()
        out[t] = a[t] * s + float(i - i)

    return scale_rt


def test_dropped_kernels_are_released_without_clearing_jax_caches() -> None:
    # Each call's executable goes with its module; its plan is released at the next trace.
    x = jnp.arange(4.0, dtype=jnp.float32)
    refs = []
    for i in range(1, CYCLES + 1):
        kernel = make_scale_kernel(i)
        refs.append(weakref.ref(kernel))
        (y,) = jax_kernel(kernel)(x)
        np.testing.assert_array_equal(y, np.arange(4.0) * i)
        del kernel, y
        gc.collect()
        # this one, and the previous one until the next trace releases its plan
        assert _alive_settled(refs) <= 2
    assert _alive_settled(refs) <= 2


def test_an_eager_module_is_held_only_when_rebuilt_equal_to_a_collected_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # An eager call's module rebuilt equal to one collected shortly before is held until jax.clear_caches(), so that
    # `jax_kernel(k)(x)` in a loop does not retrace. A kernel hashes by its address, which a new kernel often gets
    # once an old one is collected: its module then hashes like the collected one's, and only the kernel's identity
    # tells them apart. Here every module hashes alike, as if each new kernel took a collected one's address.
    from jarp.warp._module import _eager
    from tests.support.kernels import count_lowerings

    monkeypatch.setattr(_eager, "hash", lambda module: 0, raising=False)
    x = jnp.arange(4.0, dtype=jnp.float32)
    kernel = make_scale_kernel(3)
    for _ in range(2):  # the first module is collected after its call; the second is rebuilt equal to it: held
        (y,) = jax_kernel(kernel)(x)
    with count_lowerings() as lowerings:
        (y,) = jax_kernel(kernel)(x)  # shares the held module's executable
    assert lowerings() == 0
    other = jax_kernel(make_scale_kernel(4))  # a hash like theirs, but another kernel: not held
    ref = weakref.ref(other)
    (y,) = other(x)
    np.testing.assert_array_equal(y, np.arange(4.0) * 4)
    del other, y
    assert _alive([ref]) == 0
    jax.clear_caches()


def test_dropped_callable_is_released() -> None:
    def make(i: int) -> Callable[..., None]:
        kernel = make_scale_kernel(i)

        def launch(a: wp.array(dtype=float), out: wp.array(dtype=float)) -> None:
            wp.launch(kernel, dim=a.shape, inputs=[a], outputs=[out])

        return launch

    x = jnp.arange(4.0, dtype=jnp.float32)
    refs = []
    for i in range(1, 5):
        func = make(i)
        refs.append(weakref.ref(func))
        (y,) = jax_callable(func)(x)
        np.testing.assert_array_equal(y, np.arange(4.0) * i)
        del func, y
    jax.clear_caches()
    assert _alive(refs) == 0


def test_a_live_executable_keeps_its_plan_and_runs_after_its_kernel_module_is_dropped() -> None:
    x = jnp.arange(4.0, dtype=jnp.float32)
    kernel = make_scale_kernel(5)
    ref = weakref.ref(kernel)
    compiled = _lower(jax_kernel(kernel), x).compile()
    del kernel
    jax.clear_caches()
    jax_kernel(make_scale_kernel(6))(x)  # another trace: a safe point for releases
    assert _alive([ref]) == 1  # the compiled executable holds a lease on its plan
    np.testing.assert_array_equal(compiled(x), np.arange(4.0) * 5)
    del compiled
    jax_kernel(make_scale_kernel(7))(x)
    assert _alive([ref]) == 0


def test_released_handle_fails_loudly_and_is_never_reused() -> None:
    x = jnp.arange(4.0, dtype=jnp.float32)
    kernel = make_scale_kernel(3)
    lowered = _lower(jax_kernel(kernel), x)
    (handle,) = [int(h) for h in _handles(lowered.as_text())]
    assert registry.plan(handle).target is kernel
    ref = weakref.ref(kernel)
    del lowered
    jax.clear_caches()
    gc.collect()
    assert handle not in registry  # released: no executable uses it, even though the kernel lives on
    with pytest.raises(ReleasedPlanError, match=f"plan handle {handle} was released"):
        registry.plan(handle)
    del kernel
    (y,) = jax_kernel(make_scale_kernel(4))(x)  # Warp's module now keeps this kernel of the same name instead
    np.testing.assert_array_equal(y, np.arange(4.0) * 4)
    assert _alive([ref]) == 0
    with pytest.raises(ReleasedPlanError, match=f"plan handle {handle} was released"):
        registry.plan(handle)
    with pytest.raises(ReleasedPlanError, match="plan handle 1000000000 is not one this process made"):
        registry.plan(10**9)
    (new,) = [int(h) for h in _handles(_lower(jax_kernel(make_scale_kernel(3)), x).as_text())]
    assert new > handle


class _LoweringWithoutLease:
    """The registry as the JAX stage's lowering sees it, except that the lease a lowering attaches dies at once."""

    def __getattr__(self, name: str) -> Any:
        return getattr(registry, name)

    def lease(self, plan: Any) -> tuple[int, object]:
        handle, _ = registry.lease(plan)
        return handle, object()


def test_a_loaded_executable_keeps_its_plan_with_the_lease_of_its_own_state(monkeypatch: pytest.MonkeyPatch) -> None:
    # The lowering's lease (a keepalive JAX keeps with the executable) is not what keeps a running executable's
    # plan: its calls' XLA FFI states hold leases of their own, from XLA's instantiate stage. Without the lowering's
    # lease, a jitted function's executable still calls its plan after every safe point.
    from jarp.warp._jax import _lowering

    x = jnp.arange(4.0, dtype=jnp.float32)
    kernel = make_scale_kernel(11)
    module = jax_kernel(kernel)
    f = jax.jit(lambda x: module(x)[0])
    monkeypatch.setattr(_lowering, "registry", _LoweringWithoutLease())
    np.testing.assert_array_equal(f(x), np.arange(4.0) * 11)
    monkeypatch.undo()
    for i in range(3):
        gc.collect()
        jax_kernel(make_scale_kernel(12 + i))(x)  # a safe point: releases every plan no lease holds
        assert any(p.target is kernel for p in registry.plans())
        np.testing.assert_array_equal(f(x), np.arange(4.0) * 11)
    del f
    jax.clear_caches()
    deadline = time.monotonic() + 10.0  # XLA deletes an executable's state when it gets to it
    while any(p.target is kernel for p in registry.plans()) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    assert not any(p.target is kernel for p in registry.plans())  # the state went with the executable, its lease too


def test_an_executable_deserialised_in_this_process_holds_its_own_lease() -> None:
    from jax.experimental import serialize_executable

    x = jnp.arange(4.0, dtype=jnp.float32)
    kernel = make_scale_kernel(6)
    ref = weakref.ref(kernel)
    compiled = _lower(jax_kernel(kernel), x).compile()
    loaded = serialize_executable.deserialize_and_load(*serialize_executable.serialize(compiled))
    del compiled, kernel
    jax.clear_caches()
    jax_kernel(make_scale_kernel(7))(x)  # a safe point, and Warp's module keeps this kernel of the same key instead
    assert _alive([ref]) == 1  # the deserialised copy's lease keeps the plan
    np.testing.assert_array_equal(loaded(x), np.arange(4.0) * 6)
    del loaded
    jax_kernel(make_scale_kernel(8))(x)
    assert _alive([ref]) == 0


@pytest.mark.native_launches  # counts the native handler's descriptors
def test_released_plans_drop_their_executors() -> None:
    x = jnp.arange(4.0, dtype=jnp.float32)
    jax.clear_caches()
    gc.collect()
    _registry.registry.release_idle()
    native = _native.active()
    before = _executors.executor_count()
    published = native.published() if native is not None else 0
    for i in range(1, 6):
        (y,) = jax_kernel(make_scale_kernel(i))(x)
        np.testing.assert_array_equal(y, np.arange(4.0) * i)
        del y
        if native is not None:
            # the live plan's launch descriptor is published (the previous kernels' plans may be released already)
            assert native.published() >= published + 1
    jax.clear_caches()
    gc.collect()
    _registry.registry.release_idle()
    assert _executors.executor_count() <= before
    if native is not None:
        assert native.published() <= published  # released plans' descriptors are withdrawn


def test_a_released_plan_keeps_its_loaded_code_while_its_kernel_lives() -> None:
    # An executable JAX holds without its lease may still reach the code; it is unloaded with the kernel.
    x = jnp.arange(4.0, dtype=jnp.float32)
    kernel = make_scale_kernel(5)
    compiled = _lower(jax_kernel(kernel), x).compile()
    np.testing.assert_array_equal(compiled(x), np.arange(4.0) * 5)
    (handle,) = [int(h) for h in _handles(compiled.as_text())]
    module_exec = weakref.ref(_executors.cpu_executors[handle].entry.module_exec)
    del compiled
    jax.clear_caches()
    jax_kernel(make_scale_kernel(6))(x)  # Warp rebuilds the module (a new kernel of the same key): a new ModuleExec
    assert handle not in registry  # released
    assert handle not in _executors.cpu_executors  # its executor dropped
    assert _alive([module_exec]) == 1  # but the code it called stays loaded while the kernel lives
    del kernel
    jax_kernel(make_scale_kernel(7))(x)
    assert _alive([module_exec]) == 0


def test_dropped_code_is_unloaded_under_warps_lock(monkeypatch: pytest.MonkeyPatch) -> None:
    # Warp unloads a module's code when its ModuleExec is collected. Where jarp holds the last reference,
    # that must not happen wherever the kernel is collected (any thread, during another thread's Warp build),
    # only under Warp's lock, at a safe point.
    x = jnp.arange(4.0, dtype=jnp.float32)
    kernel = make_scale_kernel(5)
    compiled = _lower(jax_kernel(kernel), x).compile()
    np.testing.assert_array_equal(compiled(x), np.arange(4.0) * 5)
    (handle,) = [int(h) for h in _handles(compiled.as_text())]
    module_exec = _executors.cpu_executors[handle].entry.module_exec
    ref, exec_id, exec_type = weakref.ref(module_exec), id(module_exec), type(module_exec)
    del compiled, module_exec
    jax.clear_caches()
    jax_kernel(make_scale_kernel(6))(x)  # Warp rebuilds the module: jarp's retained entry holds the old code alone
    unloads: list[bool] = []
    unload = exec_type.__del__

    def recording_unload(self: Any) -> None:
        if id(self) == exec_id:
            unloads.append(_warp_kernels.warp_lock_held())
        unload(self)

    monkeypatch.setattr(exec_type, "__del__", recording_unload)
    del kernel
    later = make_scale_kernel(7)  # a new kernel of the key: Warp's module lets go of the old one, which is collected
    gc.collect()
    assert unloads == []  # not here, on this thread, without the lock
    assert _alive([ref]) == 1
    jax.clear_caches()  # a safe point
    assert unloads == [True]
    assert _alive([ref]) == 0
    (y,) = jax_kernel(later)(x)
    np.testing.assert_array_equal(y, np.arange(4.0) * 7)


def test_a_withdrawn_launch_descriptor_lets_go_of_its_code() -> None:
    # A withdrawn descriptor's memory is kept until the next withdrawal (a handler may have read it just before),
    # which may come much later or never; its code must not be: `_executors._retained` keeps the code while its
    # kernel lives, and a collected kernel's module is unloaded at the next safe point, not at another release.
    native = _native.handler()
    assert native is not None, _native.status()

    class Code:  # for an EntryPoints
        pass

    code, bounds = Code(), ctypes.c_int64(0)
    descriptor = _native.LaunchDescriptor(
        args=(),
        rets=(),
        zero=(),
        launch=False,
        nslices=1,
        templates=(bytes(8),),
        slots=(),
        bounds=ctypes.addressof(bounds),
        entry=0,
        keep=bounds,
        code=code,
    )
    held, code_ref = weakref.ref(descriptor), weakref.ref(code)
    handle = native.CHUNK_HANDLES * native.MAX_CHUNKS - 1  # the table's last handle: no plan reaches it here
    assert native.publish(handle, 0, descriptor)
    del descriptor, code
    assert _alive([code_ref]) == 1  # published: the handler may call it
    native.withdraw([handle])
    assert _alive([held]) == 1  # its memory is kept (until the next withdrawal)
    assert _alive([code_ref]) == 0  # its code is not


def test_code_dropped_during_another_threads_build_waits_for_the_lock() -> None:
    seen: list[bool] = []

    class StandIn:  # for a ModuleExec: records whether Warp's lock is held when it goes
        def __del__(self) -> None:
            seen.append(_warp_kernels.warp_lock_held())

    entry = object.__new__(_warp_launches.EntryPoints)
    entry.module_exec = StandIn()
    building, done = threading.Event(), threading.Event()

    def build() -> None:
        with _warp_kernels.warp_lock():
            building.set()
            done.wait(10)

    thread = threading.Thread(target=build)
    thread.start()
    try:
        assert building.wait(10)
        del entry  # collected here while the other thread builds
        jax.clear_caches()  # a safe point; it does not wait for the lock (that could deadlock): nothing goes yet
        assert seen == []
    finally:
        done.set()
        thread.join()
    jax.clear_caches()
    assert seen == [True]


def _lower(module: Any, x: jax.Array) -> Any:
    """``jit(module)`` lowered for ``x`` (the lowered stage keeps the plans' leases)."""
    return jax.jit(lambda x: module(x)[0]).lower(x)


def _handles(text: str) -> list[int | None]:
    from tests.support.lowered import plan_handles

    return plan_handles(text)


# About 9 s of cycles: `nox -s tests_full` runs it (the tests above release each kind of object once).
@pytest.mark.slow
def test_memory_is_bounded_over_110_create_call_drop_cycles() -> None:
    x = jnp.arange(16.0, dtype=jnp.float32)

    def cycles(n: int, start: int) -> None:
        for i in range(start, start + n):
            kernel = make_scale_kernel(i % 7 + 1)
            (y,) = jax_kernel(kernel)(x)
            assert float(y[1]) == i % 7 + 1
            del kernel, y
        jax.clear_caches()
        gc.collect()

    cycles(20, 0)  # warm-up: JAX's and Warp's one-time state
    tracemalloc.start()
    try:
        cycles(45, 20)
        first, _ = tracemalloc.get_traced_memory()
        cycles(45, 65)
        second, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Without a leak the second 45 cycles add 35-40 KiB; a module kept alive per cycle (its plan and executable
    # with it) adds about 27 KiB per cycle, 1.2 MiB here. The bound catches any leak above 2.8 KiB per cycle.
    assert second - first < 128 * 1024, f"grew {(second - first) / 1024:.0f} KiB over 45 cycles"
    assert sum("scale_by" in getattr(p.target, "key", "") for p in _registry.registry.plans()) == 0


def test_a_local_description_names_the_handle_its_lowering_leases() -> None:
    # A closure's call is named by its plan's handle (no other process could find the function). Lowered again
    # after the last lowering was dropped (its lease dead but not yet counted), it must name the handle the new
    # lowering leases: the lease's safe point releases the old one, and a call naming it could never be resolved.
    import json

    from tests.support import kernels as k
    from tests.support.lowered import custom_calls

    def triple(x: wp.array(dtype=float), out: wp.array(dtype=float)) -> None:
        wp.launch(k.triple_kernel, dim=x.shape, inputs=[x], outputs=[out])

    c = jax_callable(triple)
    x = jnp.arange(4.0, dtype=jnp.float32)
    first = jax.jit(lambda x: c(x)[0]).lower(x)
    (call,) = custom_calls(first.as_text())
    old = json.loads(call["desc"])["local"]["handle"]
    traced = jax.jit(lambda x: c(x)[0]).trace(x)  # tracing is a safe point: the old lease is still alive here
    del first, call
    gc.collect()  # the old lease dies between the trace and the lowering
    second = traced.lower()
    (call,) = custom_calls(second.as_text())
    handle = json.loads(call["desc"])["local"]["handle"]
    assert handle != old  # the lowering's lease released the old handle (nothing else held it) ...
    assert handle in registry  # ... and the text names the one it holds
    np.testing.assert_array_equal(second.compile()(x), 3 * np.arange(4.0))
