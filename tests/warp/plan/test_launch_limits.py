"""Warp's launch rules where jarp used to be stricter, and load failures reported at the call site.

* A launch extent above ``2**31 - 1`` is accepted in a dimension the kernel provably never reads through ``wp.tid()``
  and refused, with Warp's message, in one it does (Warp's ``_validate_ffi_kernel_launch_bounds``). As in Warp's own
  tests, these launches are only traced and lowered: running ``2**31`` threads would take minutes.
* A module Warp cannot load, and a Warp build without CPU support, raise a ``RuntimeError`` with Warp's phrase at
  trace or call time, not an opaque error from inside the compiled call.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._ffi._registry import registry
from jarp.warp._upstream import _warp_launches
from tests.support import kernels as k
from tests.support.lowered import plan_handles

BIG = 2**31 + 1
SCALAR_TID_DISABLED = False


@wp.kernel
def inc_1d_kernel(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] + 1.0


@wp.kernel
def inc_2d_kernel(x: wp.array2d(dtype=float), y: wp.array2d(dtype=float)):
    i, j = wp.tid()
    y[i, j] = x[i, j] + 1.0


@wp.kernel
def dead_tid_kernel(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    # code generation drops the branch, so the kernel never uses wp.tid()
    if SCALAR_TID_DISABLED:
        i = wp.tid()
        y[i] = x[i]


# kernels in modules of their own: the load-failure tests need modules that no other test preloaded
@wp.kernel(module="unique")
def load_fails_kernel(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] + 1.0


@wp.kernel(module="unique")
def no_cpu_kernel(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = x[i] + 1.0


def _lower(f: Any, *args: Any) -> str:
    return jax.jit(f).trace(*args).lower().as_text()


def _plan_launch_dims(text: str) -> tuple[int, ...]:
    (handle,) = plan_handles(text)
    return registry.plan(handle).launch_dims


TID_MESSAGE = r"Warp cannot launch a kernel using wp\.tid\(\) with extent 2147483649 in dimension {}"


# ======================================================================================================================
# Launch extents above 2**31 - 1
# ======================================================================================================================


def test_oversized_extent_read_through_tid_is_refused_with_warps_message() -> None:
    inc = jax_kernel(inc_1d_kernel, launch_dims=BIG, output_dims=1)
    with pytest.raises(ValueError, match=TID_MESSAGE.format(0)) as excinfo:
        _lower(lambda x: inc(x)[0], jnp.ones(1, jnp.float32))
    assert "launch_dims" in str(excinfo.value)
    inc2 = jax_kernel(inc_2d_kernel, launch_dims=(1, BIG), output_dims=(1, 1))
    with pytest.raises(ValueError, match=TID_MESSAGE.format(1)):
        _lower(lambda x: inc2(x)[0], jnp.ones((1, 1), jnp.float32))


def test_oversized_extent_inferred_from_an_input_is_refused() -> None:
    inc = jax_kernel(inc_1d_kernel, output_dims=1)
    with pytest.raises(ValueError, match=TID_MESSAGE.format(0)):
        _lower(lambda x: inc(x)[0], jax.ShapeDtypeStruct((BIG,), jnp.float32))


def test_oversized_extent_in_a_dim_past_the_tid_arity_is_accepted() -> None:
    # inc_1d reads one coordinate; the second launch dim only repeats threads (Warp folds it into coord_mult)
    inc = jax_kernel(inc_1d_kernel, launch_dims=(1, BIG), output_dims=1)
    assert _plan_launch_dims(_lower(lambda x: inc(x)[0], jnp.ones(1, jnp.float32))) == (1, BIG)


def test_oversized_extent_of_a_kernel_without_tid_is_accepted() -> None:
    noop = jax_kernel(dead_tid_kernel, launch_dims=BIG, output_dims=1, module_preload_mode=wp.JaxModulePreloadMode.NONE)
    assert _plan_launch_dims(_lower(lambda x: noop(x)[0], jnp.ones(1, jnp.float32))) == (BIG,)
    # per call too
    noop = jax_kernel(dead_tid_kernel, output_dims=1, module_preload_mode=wp.JaxModulePreloadMode.NONE)
    assert _plan_launch_dims(_lower(lambda x: noop(x, launch_dims=(2, BIG))[0], jnp.ones(1, jnp.float32))) == (2, BIG)


def test_an_oversized_but_empty_launch_runs() -> None:
    # Warp's rule looks at the thread count first: an empty launch is never refused.
    inc = jax_kernel(inc_1d_kernel, launch_dims=(BIG, 0), output_dims=1)
    (y,) = inc(jnp.ones(1, jnp.float32))
    np.testing.assert_array_equal(y, np.zeros(1, np.float32))


def test_broadcast_all_folding_past_the_tid_limit_is_refused_at_trace_time() -> None:
    add = jax_kernel(k.add_kernel, vmap_method="broadcast_all")
    f = jax.vmap(lambda a, b: add(a, b)[0])
    half = 2**30 + 1
    spec = jax.ShapeDtypeStruct((2, half), jnp.float32)
    with pytest.raises(
        ValueError, match="broadcast_all.*" + TID_MESSAGE.format(0).replace("2147483649", str(2 * half))
    ):
        _lower(f, spec, spec)


def test_array_dims_stay_within_warps_32_bit_limit() -> None:
    # the launch is fine (no wp.tid()), but a Warp array cannot describe the input
    noop = jax_kernel(dead_tid_kernel, output_dims=1, module_preload_mode=wp.JaxModulePreloadMode.NONE)
    with pytest.raises(ValueError, match=r"argument 'x' has dims \(2147483649,\).*32-bit"):
        _lower(lambda x: noop(x)[0], jax.ShapeDtypeStruct((BIG,), jnp.float32))


def test_other_launch_dims_checks_are_unchanged() -> None:
    with pytest.raises(ValueError, match="non-negative"):
        jax_kernel(inc_1d_kernel, launch_dims=-1)
    with pytest.raises(TypeError, match="launch_dims must be an int or a sequence"):
        jax_kernel(inc_1d_kernel, launch_dims=1.5)
    with pytest.raises(ValueError, match="more than 2\\*\\*63 - 1 threads"):
        jax_kernel(inc_1d_kernel, launch_dims=(2**40, 2**40))
    # a launch Warp accepts, but the output dims default to the launch dims: too large for a Warp array
    noop = jax_kernel(dead_tid_kernel, launch_dims=BIG, module_preload_mode=wp.JaxModulePreloadMode.NONE)
    with pytest.raises(ValueError, match=r"argument 'y' has dims \(2147483649,\).*32-bit"):
        _lower(lambda x: noop(x)[0], jnp.ones(1, jnp.float32))


# ======================================================================================================================
# Module load failure and Warp without CPU support
# ======================================================================================================================


@pytest.mark.parametrize("mode", [wp.JaxModulePreloadMode.CURRENT_DEVICE, wp.JaxModulePreloadMode.NONE])
def test_failed_module_load_raises_runtime_error_at_the_call(monkeypatch: pytest.MonkeyPatch, mode: Any) -> None:
    module = jax_kernel(load_fails_kernel, module_preload_mode=mode)
    n = 2 if mode == wp.JaxModulePreloadMode.CURRENT_DEVICE else 1  # a plan per case: no executor prepared yet
    x = jnp.arange(3.0, dtype=jnp.float32)
    name = load_fails_kernel.module.name
    monkeypatch.setattr(load_fails_kernel.module, "load", lambda *a, **kw: None)
    message = f"Failed to load Warp module '{name}' on device 'cpu' after a previous build failure"
    with pytest.raises(Exception, match=message) as excinfo:
        jax.block_until_ready(jax.jit(lambda x: module(x, launch_dims=n)[0])(x))
    if mode == wp.JaxModulePreloadMode.CURRENT_DEVICE:
        assert excinfo.type is RuntimeError  # raised while tracing, by the preload
    else:
        assert "RuntimeError" in str(excinfo.value)  # from the first run of the compiled call
    monkeypatch.undo()
    np.testing.assert_array_equal(module(x, launch_dims=n)[0][:n], x[:n] + 1.0)


def test_failed_module_load_in_load_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inc_1d_kernel.module, "load", lambda *a, **kw: None)
    with pytest.raises(RuntimeError, match=r"after a previous build failure.*kernel 'inc_1d_kernel'"):
        _warp_launches.load_entry_points(inc_1d_kernel, wp.get_device("cpu"), 64)


@pytest.mark.parametrize("what", ["kernel", "callable"])
def test_warp_without_cpu_support_raises_at_trace_time(monkeypatch: pytest.MonkeyPatch, what: str) -> None:
    monkeypatch.setattr(wp, "is_cpu_available", lambda: False)
    if what == "kernel":
        module = jax_kernel(k.triple_kernel, module_preload_mode=wp.JaxModulePreloadMode.NONE)
        f = lambda x: module(x)[0]  # noqa: E731
    else:
        module = jax_callable(k.scale_func)
        f = lambda x: module(x, 2.0)[0]  # noqa: E731
    x = jnp.arange(5.0, dtype=jnp.float32)
    with pytest.raises(RuntimeError, match="does not include CPU support"):
        jax.jit(f)(x)
    with pytest.raises(RuntimeError, match="does not include CPU support"):
        jax.jit(f).trace(x).lower()
    # lowering for CUDA needs no CPU support
    assert "jarp_warp_call" in jax.jit(f).trace(x).lower(lowering_platforms=("cuda",)).as_text()


def test_warp_without_cpu_support_raises_at_preload(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wp, "is_cpu_available", lambda: False)
    module = jax_kernel(no_cpu_kernel)  # preloads on the current (CPU) device while tracing
    with pytest.raises(RuntimeError, match="This Warp build does not include CPU support"):
        jax.jit(lambda x: module(x)[0]).trace(jnp.ones(3, jnp.float32))
