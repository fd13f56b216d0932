"""`jarp.warp.register_ffi_callback`: Python functions as XLA FFI targets called by ``jax.ffi.ffi_call``."""

from __future__ import annotations

import itertools
import re
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

import jarp
from jarp.warp import register_ffi_callback
from jarp.warp._ffi import _user_callback
from tests.support.gpu import cuda_device as cuda_device  # the fixture
from tests.support.gpu import requires_gpu

_counter = itertools.count()


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A target name no other test registers (XLA's registry is per process)."""
    return f"jarp_test_{request.node.name}_{next(_counter)}".replace("[", "_").replace("]", "_")


# The kernels of Warp's interop guide ("Generic JAX FFI Callbacks").
@wp.kernel
def scale_kernel(a: wp.array(dtype=float), s: float, output: wp.array(dtype=float)):
    tid = wp.tid()
    output[tid] = a[tid] * s


@wp.kernel
def scale_vec_kernel(a: wp.array(dtype=wp.vec2), s: float, output: wp.array(dtype=wp.vec2)):
    tid = wp.tid()
    output[tid] = a[tid] * s


def warp_func(inputs: list[Any], outputs: list[Any], attrs: dict[str, Any], ctx: Any) -> None:
    """The guide's callback, with the device and stream taken from ``ctx`` so that it runs on CPU too."""
    a, b = inputs
    s = attrs["scale"]
    c, d = outputs
    wp.launch(scale_kernel, dim=a.shape, inputs=[a, s], outputs=[c], device=ctx.device, stream=ctx.warp_stream)
    # the shapes are JAX's, so the inner dimension of the vec2 array is stripped for the launch
    wp.launch(scale_vec_kernel, dim=b.shape[0], inputs=[b, s], outputs=[d], device=ctx.device, stream=ctx.warp_stream)


def _guide_call(name: str) -> Any:
    n = 10
    return jax.ffi.ffi_call(
        name,
        [jax.ShapeDtypeStruct((n,), jnp.float32), jax.ShapeDtypeStruct((n // 2, 2), jnp.float32)],
    )


def _guide_inputs() -> tuple[jax.Array, jax.Array]:
    n = 10
    return jnp.arange(n, dtype=jnp.float32), jnp.arange(n, dtype=jnp.float32).reshape((n // 2, 2)) + 0.5


def test_guide_example_on_cpu(name: str) -> None:
    register_ffi_callback(name, warp_func)
    a, b = _guide_inputs()
    c, d = _guide_call(name)(a, b, scale=2.0)
    np.testing.assert_array_equal(np.asarray(c), 2.0 * np.arange(10, dtype=np.float32))
    np.testing.assert_array_equal(np.asarray(d), 2.0 * (np.arange(10, dtype=np.float32).reshape(5, 2) + 0.5))


def test_works_under_jit_and_is_exported_at_the_top(name: str) -> None:
    assert jarp.register_ffi_callback is register_ffi_callback is jarp.warp.register_ffi_callback
    jarp.register_ffi_callback(name, warp_func)
    a, b = _guide_inputs()
    f = jax.jit(lambda a, b, s: _guide_call(name)(jnp.sin(a) * s, b, scale=np.float32(3.0)))
    s = jnp.float32(0.5)
    for _ in range(2):  # a second call runs the cached executable
        c, d = f(a, b, s)
        np.testing.assert_allclose(np.asarray(c), 3.0 * np.sin(np.arange(10, dtype=np.float32)) * 0.5, rtol=1e-6)
        np.testing.assert_array_equal(np.asarray(d), 3.0 * np.asarray(b))


def test_buffers_wrap_xla_memory_without_copies(name: str) -> None:
    seen: dict[str, Any] = {}

    def func(inputs: list[Any], outputs: list[Any], attrs: dict[str, Any], ctx: Any) -> None:
        (x,), (y, count) = inputs, outputs
        xa, ya, ca = np.asarray(x), np.asarray(y), np.asarray(count)
        seen.update(
            shapes=(x.shape, y.shape, count.shape),
            dtypes=(x.dtype, y.dtype, count.dtype),
            same_memory=(xa.ctypes.data == x.data, ya.ctypes.data == y.data),
            writeable=(xa.flags.writeable, ya.flags.writeable),
            cuda=hasattr(x, "__cuda_array_interface__"),
            ctx=(ctx.platform, ctx.stream, ctx.device.is_cpu, ctx.warp_stream),
        )
        ya[...] = xa[:, ::-1] * 2
        ca[...] = np.count_nonzero(xa > 2)

    register_ffi_callback(name, func)
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    y, count = jax.ffi.ffi_call(name, (jax.ShapeDtypeStruct((2, 3), jnp.float32), jax.ShapeDtypeStruct((), jnp.int32)))(
        x
    )
    np.testing.assert_array_equal(np.asarray(y), np.arange(6, dtype=np.float32).reshape(2, 3)[:, ::-1] * 2)
    assert int(count) == 3
    assert seen["shapes"] == ((2, 3), (2, 3), ())
    assert seen["dtypes"] == (np.dtype(np.float32), np.dtype(np.float32), np.dtype(np.int32))
    assert seen["same_memory"] == (True, True)
    assert seen["writeable"] == (False, True)  # inputs are read-only views
    assert not seen["cuda"]
    assert seen["ctx"] == ("cpu", None, True, None)


def test_attributes_of_several_types(name: str) -> None:
    seen: dict[str, Any] = {}

    def func(inputs: list[Any], outputs: list[Any], attrs: dict[str, Any], ctx: Any) -> None:
        seen.update(attrs)
        np.asarray(outputs[0])[...] = np.asarray(inputs[0]) * attrs["f32"] + attrs["i"]

    register_ffi_callback(name, func)
    x = jnp.arange(4, dtype=jnp.float32)
    out = jax.ffi.ffi_call(name, jax.ShapeDtypeStruct((4,), jnp.float32))(
        x,
        i=7,
        f=2.5,
        f32=np.float32(1.5),
        u8=np.uint8(200),
        flag=True,
        label="hello",
        table=np.array([1, 2, 3], np.int32),
        opts={"depth": 2, "mode": "fast"},
    )
    np.testing.assert_array_equal(np.asarray(out), np.arange(4, dtype=np.float32) * 1.5 + 7)
    assert sorted(seen) == ["f", "f32", "flag", "i", "label", "opts", "table", "u8"]
    assert seen["i"] == 7
    assert seen["i"].dtype == np.int64
    assert seen["f"] == 2.5
    assert seen["f"].dtype == np.float64
    assert seen["f32"] == 1.5
    assert seen["f32"].dtype == np.float32
    assert seen["u8"] == 200
    assert seen["u8"].dtype == np.uint8
    assert seen["flag"] is np.True_
    assert seen["label"] == "hello"
    np.testing.assert_array_equal(seen["table"], [1, 2, 3])
    assert seen["table"].dtype == np.int32
    assert seen["opts"] == {"depth": 2, "mode": "fast"}


def test_exception_surfaces_at_the_call_site_naming_the_callback(name: str) -> None:
    def exploding_callback(inputs: list[Any], outputs: list[Any], attrs: dict[str, Any], ctx: Any) -> None:
        raise ValueError(f"bad scale {attrs['scale']}")

    register_ffi_callback(name, exploding_callback)
    call = jax.ffi.ffi_call(name, jax.ShapeDtypeStruct((3,), jnp.float32))
    pattern = rf"FFI callback '{name}' \(function .*exploding_callback\) raised ValueError: bad scale -1"
    with pytest.raises(RuntimeError, match=pattern) as info:
        call(jnp.ones(3, jnp.float32), scale=-1).block_until_ready()
    assert "Traceback" in str(info.value)
    with pytest.raises(RuntimeError, match=pattern):
        jax.jit(lambda x: call(x, scale=-1))(jnp.ones(3, jnp.float32)).block_until_ready()


def test_registering_a_name_again_replaces_the_function(name: str) -> None:
    def fill(value: float) -> Any:
        def func(inputs: list[Any], outputs: list[Any], attrs: dict[str, Any], ctx: Any) -> None:
            np.asarray(outputs[0])[...] = np.asarray(inputs[0]) + value

        return func

    register_ffi_callback(name, fill(1.0))
    f = jax.jit(lambda x: jax.ffi.ffi_call(name, jax.ShapeDtypeStruct(x.shape, x.dtype))(x))
    x = jnp.zeros(3, jnp.float32)
    np.testing.assert_array_equal(np.asarray(f(x)), np.ones(3, np.float32))
    register_ffi_callback(name, fill(5.0))  # XLA would refuse a second handler; jarp swaps the function
    np.testing.assert_array_equal(np.asarray(f(x)), np.full(3, 5.0, np.float32))  # also in compiled code
    assert len(_user_callback._trampolines[name]) == 2  # one per platform, registered once

    with pytest.raises(ValueError, match="graph_compatible=True"):
        register_ffi_callback(name, fill(2.0), graph_compatible=False)
    np.testing.assert_array_equal(np.asarray(f(x)), np.full(3, 5.0, np.float32))


def test_graph_incompatible_callback_runs_on_cpu(name: str) -> None:
    register_ffi_callback(name, warp_func, graph_compatible=False)
    a, b = _guide_inputs()
    c, _ = _guide_call(name)(a, b, scale=-1.0)
    np.testing.assert_array_equal(np.asarray(c), -np.arange(10, dtype=np.float32))


def test_sequential_vmap_calls_once_per_slice(name: str) -> None:
    calls: list[tuple[int, ...]] = []

    def func(inputs: list[Any], outputs: list[Any], attrs: dict[str, Any], ctx: Any) -> None:
        calls.append(inputs[0].shape)
        np.asarray(outputs[0])[...] = np.cumsum(np.asarray(inputs[0]))

    register_ffi_callback(name, func)
    call = jax.ffi.ffi_call(name, jax.ShapeDtypeStruct((4,), jnp.float32), vmap_method="sequential")
    x = jnp.arange(12, dtype=jnp.float32).reshape(3, 4)
    y = jax.vmap(call)(x)
    np.testing.assert_array_equal(np.asarray(y), np.cumsum(np.arange(12, dtype=np.float32).reshape(3, 4), axis=1))
    assert calls == [(4,)] * 3


def test_invalid_arguments_are_rejected(name: str) -> None:
    with pytest.raises(TypeError, match="name must be a non-empty string"):
        register_ffi_callback("", warp_func)
    with pytest.raises(TypeError, match="func must be callable"):
        register_ffi_callback(name, 3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="a target of jarp itself"):
        register_ffi_callback("jarp_warp_call", warp_func)
    assert name not in _user_callback._callbacks


def test_lowers_for_cuda_and_registers_a_cuda_handler(name: str) -> None:
    from jax._src.lib import xla_client

    register_ffi_callback(name, warp_func)
    a, b = _guide_inputs()
    text = (
        jax.jit(lambda a, b: _guide_call(name)(a, b, scale=np.float32(2.0)))
        .trace(a, b)
        .lower(lowering_platforms=("cuda",))
        .as_text()
    )
    (call,) = re.findall(rf"stablehlo\.custom_call @{name}\(.*", text)
    assert "scale = 2.000000e+00 : f32" in call
    # Lowering does not look the target up, so check the registration itself: without a GPU backend,
    # jax queues the CUDA registration (typed FFI, api_version 1) until one initialises (on a GPU
    # machine it goes straight to XLA, and test_gpu_guide_example runs it).
    if "CUDA" not in xla_client._custom_callback_handler:
        queued = xla_client._custom_callback.get("CUDA", [])
        assert [api for target, _, api, _ in queued if target == name] == [1]


@pytest.mark.gpu
@requires_gpu
def test_gpu_guide_example(name: str, cuda_device: Any) -> None:
    seen: list[Any] = []

    def func(inputs: list[Any], outputs: list[Any], attrs: dict[str, Any], ctx: Any) -> None:
        seen.append((ctx.platform, ctx.stream is not None, hasattr(inputs[0], "__cuda_array_interface__")))
        warp_func(inputs, outputs, attrs, ctx)

    register_ffi_callback(name, func)
    a, b = (jax.device_put(x, cuda_device) for x in _guide_inputs())
    for c, d in (_guide_call(name)(a, b, scale=2.0), jax.jit(lambda a, b: _guide_call(name)(a, b, scale=2.0))(a, b)):
        assert c.devices() == {cuda_device}
        np.testing.assert_array_equal(np.asarray(c), 2.0 * np.arange(10, dtype=np.float32))
        np.testing.assert_array_equal(np.asarray(d), 2.0 * np.asarray(b))
    assert seen
    assert all(s == ("cuda", True, True) for s in seen)
