"""Every Warp element type has its right JAX shape and dtype everywhere, and launches equal ``wp.launch``.

Unit: ``jarp/warp/_plan/_dtypes.py`` (``element_shape``, ``element_bytes``: the one source of truth for a Warp type's
JAX shape) and its uses: kernel and callable parameters, pure outputs, in-out arguments, struct fields,
``output_dims``, ``vmap``, ``grad`` and ``to_warp``. Types: every scalar, vector, matrix, quaternion, transform, spatial
vector and spatial matrix Warp exports, in every precision, and user-made ``wp.types.vector``/``wp.types.matrix``;
arrays of 1 to 4 dims. Values are checked against ``wp.launch`` of the same kernel on the same inputs, byte for byte.
64-bit types run in the ``x64`` process (JAX carries them only there).
"""

from __future__ import annotations

import math
import re
import types
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

import jarp.warp
from jarp.warp import jax_callable, jax_kernel
from jarp.warp._plan import _dtypes
from tests.support import kernels_types as kt

X64 = bool(jax.config.jax_enable_x64)
# The types this process's JAX carries: 64-bit ones in the x64 process only, the others in the float32 one.
HERE = {name: t for name, t in kt.ALL_TYPES.items() if kt.is_64_bit(t) == X64}
pytestmark = [pytest.mark.x64] if X64 else []
both_precisions = pytest.mark.parametrize("name", sorted(HERE))
# One of each family (and a user-made vector and matrix) for the uses that do not depend on the scalar type.
FAMILIES = [
    n
    for n in (
        "quat",
        "quatd",
        "transform",
        "transformd",
        "spatial_matrix",
        "spatial_vectord",
        "quath",
        "mat33h",
        "vector(5, float16)",
        "matrix((2, 5), float32)",
        "matrix((3, 1), float64)",
    )
    if n in HERE
]
SHAPES = {1: (6,), 2: (3, 4), 3: (2, 3, 2), 4: (2, 2, 1, 3)}


@wp.kernel
def rotate_points(q: wp.array(dtype=wp.quat), x: wp.array(dtype=wp.transform), out: wp.array(dtype=wp.vec3)):
    # A differentiable use of both 4- and 7-scalar types, for gradients.
    i = wp.tid()
    p = wp.transform_point(x[i], wp.vec3(1.0, 2.0, 3.0))
    out[i] = wp.quat_rotate(q[i], p)


@wp.kernel
def fill_vec3(a: wp.array(dtype=wp.vec3), v: wp.vec3, b: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    b[i] = a[i] + v


def _values(dtype: Any, warp_shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Deterministic values of ``dtype``'s scalars in the JAX shape of a Warp array of ``warp_shape``."""
    shape = (*warp_shape, *_dtypes.element_shape(dtype))
    np_dtype = _dtypes.to_numpy(dtype)
    count = math.prod(shape)
    if np_dtype == np.bool_:
        return (np.arange(count) % 3 == seed % 3).reshape(shape)
    if np.issubdtype(np_dtype, np.integer):
        return ((np.arange(count) * 7 + seed) % 100).astype(np_dtype).reshape(shape)
    return (np.arange(count, dtype=np.float64) * 0.25 - 3.0 + seed).astype(np_dtype).reshape(shape)


def _warp_array(values: np.ndarray, dtype: Any) -> wp.array:
    if dtype is wp.bfloat16 or getattr(dtype, "_wp_scalar_type_", None) is wp.bfloat16:
        values = values.view(np.uint16)  # Warp's NumPy side of bfloat16 is its bit pattern
    n = len(_dtypes.element_shape(dtype))
    return wp.array(values, dtype=dtype, shape=values.shape[: values.ndim - n], device="cpu")


def _wp_launch(kernel: wp.Kernel, a: np.ndarray, c: np.ndarray, dtype: Any) -> tuple[np.ndarray, np.ndarray]:
    """Warp's own launch of a copy kernel: ``(c, b)`` after it, as bytes-comparable NumPy arrays."""
    wa, wc = _warp_array(a, dtype), _warp_array(c, dtype)
    wb = wp.zeros(wa.shape, dtype=dtype, device="cpu")
    wp.launch(kernel, dim=wa.shape, inputs=[wa, wc, wb], device="cpu")
    return wc.numpy(), wb.numpy()


def _same_bytes(jax_value: Any, warp_value: np.ndarray) -> None:
    got = np.asarray(jax_value)
    assert got.shape == warp_value.shape
    np.testing.assert_array_equal(got.view(np.uint8), np.ascontiguousarray(warp_value).view(np.uint8))


# ======================================================================================================================
# The source of truth
# ======================================================================================================================


@pytest.mark.parametrize("name", sorted(kt.ALL_TYPES))
def test_element_shape_and_bytes_agree_with_warp(name: str):
    dtype = kt.ALL_TYPES[name]
    shape = _dtypes.element_shape(dtype)
    assert shape == (tuple(dtype._shape_) if wp.types.type_is_composite(dtype) else ())
    assert _dtypes.element_bytes(dtype) == _dtypes.to_numpy(dtype).itemsize * math.prod(shape)


def test_named_shapes_of_the_families():
    assert _dtypes.element_shape(wp.quat) == (4,)
    assert _dtypes.element_shape(wp.transformh) == (7,)
    assert _dtypes.element_shape(wp.spatial_vectord) == (6,)
    assert _dtypes.element_shape(wp.spatial_matrix) == (6, 6)
    assert _dtypes.element_shape(wp.float16) == ()


def test_types_jax_cannot_carry_are_refused_by_name():
    @wp.struct
    class Pair:
        x: float
        y: float

    with pytest.raises(TypeError, match=r"Pair.*no JAX element shape"):
        _dtypes.element_shape(Pair)

    def takes_structs(a, b):
        pass

    takes_structs.__annotations__ = {"a": wp.array(dtype=Pair), "b": wp.array(dtype=float)}

    with pytest.raises(TypeError, match=r"'a' is an array of .*Pair.*which JAX cannot carry"):
        jax_callable(takes_structs)(jnp.zeros((2, 2), jnp.float32))


# ======================================================================================================================
# Kernel parameters, pure outputs and in-out arguments: every type, 1 to 4 dims
# ======================================================================================================================


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
@both_precisions
def test_result_shapes_and_refusals_without_element_dims(name: str, ndim: int):
    """Traced only (no launch): results have the element dims, and an array without them is refused, never handed to
    Warp as fewer, larger elements."""
    dtype = HERE[name]
    m = jax_kernel(kt.copy_overload(dtype, ndim), num_outputs=2, in_out_argnames=["c"])
    a = _values(dtype, SHAPES[ndim], 0)
    c_out, b_out = jax.eval_shape(m, a, a)
    assert c_out.shape == b_out.shape == a.shape
    assert c_out.dtype == b_out.dtype == _dtypes.to_numpy(dtype)
    if _dtypes.element_shape(dtype):
        flat = a.reshape((*SHAPES[ndim][:-1], -1))  # the element dims folded away: same bytes, wrong shape
        with pytest.raises(TypeError, match="argument 'a' must have"):
            jax.eval_shape(m, flat, a)


@pytest.mark.launch_paths
@both_precisions
def test_launch_equals_wp_launch(name: str):
    dtype = HERE[name]
    ndims = (1, 2, 3, 4) if name in FAMILIES or name in ("float16", "bfloat16", "bool", "vec3ub") else (1,)
    for ndim in ndims:
        kernel = kt.copy_overload(dtype, ndim)
        a, c = _values(dtype, SHAPES[ndim], 1), _values(dtype, SHAPES[ndim], 2)
        want_c, want_b = _wp_launch(kernel, a, c, dtype)
        got_c, got_b = jax.jit(jax_kernel(kernel, num_outputs=2, in_out_argnames=["c"]))(a, c)
        _same_bytes(got_c, want_c)
        _same_bytes(got_b, want_b)


# ======================================================================================================================
# Value parameters: every type, static (a Warp value, nested tuples, NumPy) or a JAX value read at run time
# ======================================================================================================================


def _warp_value(dtype: Any, values: np.ndarray) -> Any:
    """``values`` (one element's scalars, in its JAX shape) as the Warp value ``wp.launch`` takes."""
    if not _dtypes.element_shape(dtype):
        return values.item()
    return dtype(*values.reshape(-1).tolist())


@both_precisions
def test_value_parameters(name: str):
    dtype = HERE[name]
    kernel = kt.FILLS[name]
    a = _values(dtype, (4,), 1)
    v = _values(dtype, (1,), 3)[0]
    want = wp.zeros(4, dtype=dtype, device="cpu")
    wp.launch(kernel, dim=4, inputs=[_warp_array(a, dtype), _warp_value(dtype, v), want], device="cpu")
    m = jax_kernel(kernel)
    statics = [v.tolist(), v] + ([_warp_value(dtype, v)] if _dtypes.element_shape(dtype) else [])
    for static in statics:  # nested lists/tuples, NumPy, a Warp value
        _same_bytes(m(a, static)[0], want.numpy())
    if name not in FAMILIES and name not in ("float16", "int8", "vec3"):
        return  # each kernel reading a JAX value is a build of its own: one type of each family
    (got,) = jax.jit(m)(a, jnp.asarray(v))  # a JAX value: read at run time, not baked in
    _same_bytes(got, want.numpy())
    if _dtypes.element_shape(dtype):
        with pytest.raises(TypeError, match=r"argument 'v' takes a value of shape"):
            jax.jit(m)(a, jnp.asarray(v).reshape(-1)[:-1])


@pytest.mark.skipif(X64, reason="the float32 kernel runs in the float32 process")
def test_gradient_of_a_vector_value_parameter():
    m = jax_kernel(fill_vec3, enable_backward=True)
    a = jnp.zeros((4, 3), jnp.float32)
    weights = jnp.arange(12, dtype=jnp.float32).reshape((4, 3))
    grad = jax.grad(lambda v: jnp.sum(weights * m(a, v)[0]))(jnp.array([1.0, 2.0, 3.0], jnp.float32))
    np.testing.assert_array_equal(grad, np.asarray(weights).sum(axis=0))


# ======================================================================================================================
# The other uses, one type of each family
# ======================================================================================================================


def _callable_for(dtype: Any) -> Any:
    kernel = kt.copy_overload(dtype, 1)

    def copy(a, c, b):
        wp.launch(kernel, dim=a.shape, inputs=[a, c, b])

    copy.__annotations__ = {name: wp.array(dtype=dtype) for name in ("a", "c", "b")}
    return copy


@pytest.mark.launch_paths
@pytest.mark.parametrize("name", FAMILIES)
def test_callable_parameters(name: str):
    dtype = HERE[name]
    a, c = _values(dtype, (5,), 1), _values(dtype, (5,), 2)
    want_c, want_b = _wp_launch(kt.copy_overload(dtype, 1), a, c, dtype)
    got_c, got_b = jax.jit(jax_callable(_callable_for(dtype), num_outputs=2, in_out_argnames=["c"]))(a, c)
    _same_bytes(got_c, want_c)
    _same_bytes(got_b, want_b)


def _struct_kernel(dtype: Any, name: str) -> tuple[Any, wp.Kernel]:
    """A struct with an array field of ``dtype`` and a kernel copying it out (both built for this type)."""
    # names and a module of its own that are the same in every run: Warp's kernel cache then holds the build
    # (a name that changes per process, or one module growing a kernel per type, rebuilds at every launch)
    tag = re.sub(r"\W", "_", name)
    holder = type(f"Holder_{tag}", (), {"__annotations__": {"v": wp.array(dtype=dtype)}})
    struct = wp.struct(holder)

    def body(s, b):
        i = wp.tid()
        b[i] = s.v[i]

    func = types.FunctionType(body.__code__, body.__globals__, "struct_copy")
    func.__annotations__ = {"s": struct, "b": wp.array(dtype=dtype)}
    kernel = wp.Kernel(func, key=f"struct_copy_{holder.__name__}", module=wp.get_module(f"{__name__}_structs_{tag}"))
    return struct, kernel


@pytest.mark.parametrize("name", FAMILIES)
def test_struct_array_fields(name: str):
    dtype = HERE[name]
    struct, kernel = _struct_kernel(dtype, name)
    a = _values(dtype, (5,), 3)
    s = struct()
    s.v = _warp_array(a, dtype)
    want = wp.zeros(5, dtype=dtype, device="cpu")
    wp.launch(kernel, dim=5, inputs=[s, want], device="cpu")
    (got,) = jax.jit(jax_kernel(kernel))({"v": a})
    _same_bytes(got, want.numpy())
    with pytest.raises(TypeError, match="v"):  # the field without its element dims
        jax_kernel(kernel)({"v": a.reshape(-1)})


@pytest.mark.parametrize("name", FAMILIES)
def test_output_dims_in_warp_and_jax_form(name: str):
    dtype = HERE[name]
    a, c = _values(dtype, (5,), 1), _values(dtype, (5,), 2)
    m = jax_kernel(kt.copy_overload(dtype, 1), num_outputs=2, in_out_argnames=["c"])
    for dims in (5, (5,), (5, *_dtypes.element_shape(dtype)), {"b": 5}, {"b": 5, "c": 5}):
        _, b = jax.jit(lambda a, c, dims=dims: m(a, c, output_dims=dims))(a, c)
        assert b.shape == a.shape
        _same_bytes(b, a)


@pytest.mark.parametrize("method", ["sequential", "broadcast_all"])
@pytest.mark.parametrize("name", FAMILIES)
def test_vmap(name: str, method: str):
    dtype = HERE[name]
    m = jax_kernel(kt.copy_overload(dtype, 1), num_outputs=2, in_out_argnames=["c"], vmap_method=method)
    # an even length: folding the batch into the launch keeps each element's index parity (the in-out's pattern)
    a = np.stack([_values(dtype, (6,), s) for s in (1, 2, 3)])
    c = np.stack([_values(dtype, (6,), s) for s in (4, 5, 6)])
    got_c, got_b = jax.jit(jax.vmap(m))(a, c)
    for i in range(3):
        want_c, want_b = _wp_launch(kt.copy_overload(dtype, 1), a[i], c[i], dtype)
        _same_bytes(got_c[i], want_c)
        _same_bytes(got_b[i], want_b)


def _quat_rotate(q: jax.Array, v: jax.Array) -> jax.Array:
    """Warp's ``quat_rotate`` (``warp/native/quat.h``), in jax.numpy."""
    u, w = q[..., :3], q[..., 3:]
    return v * (2.0 * w * w - 1.0) + jnp.cross(u, v) * w * 2.0 + u * jnp.sum(u * v, axis=-1, keepdims=True) * 2.0


@pytest.mark.skipif(X64, reason="the float32 kernel runs in the float32 process")
def test_grad_through_quaternion_and_transform_arrays():
    m = jax_kernel(rotate_points, enable_backward=True)
    rng = np.random.default_rng(0)
    q = rng.normal(size=(4, 4)).astype(np.float32)
    x = rng.normal(size=(4, 7)).astype(np.float32)
    point = jnp.tile(jnp.array([1.0, 2.0, 3.0], jnp.float32), (4, 1))

    def f(q, x):
        return jnp.sum(jnp.sin(m(q, x)[0]))

    def reference(q, x):  # transform_point: the transform's rotation (x[3:]) applied, then its translation
        return jnp.sum(jnp.sin(_quat_rotate(q, _quat_rotate(x[:, 3:], point) + x[:, :3])))

    np.testing.assert_allclose(f(q, x), reference(q, x), rtol=1e-5)
    for got, want in zip(jax.grad(f, argnums=(0, 1))(q, x), jax.grad(reference, argnums=(0, 1))(q, x), strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", FAMILIES)
def test_to_warp(name: str):
    dtype = HERE[name]
    a = _values(dtype, (5,), 1)
    for source in (a, jnp.asarray(a)):
        converted = jarp.warp.to_warp(source, dtype=dtype)
        assert converted.shape == (5,)
        assert converted.dtype is dtype
        _same_bytes(a, converted.numpy())
    pattern = (*(-1 for _ in _dtypes.element_shape(dtype)), Any)
    assert jarp.warp.to_warp(_warp_array(a, dtype), dtype=pattern).dtype is dtype


@pytest.mark.parametrize("ndim", [1, 2, 3, 4])
@pytest.mark.parametrize("name", FAMILIES)
def test_subscript_and_ndim_annotations(name: str, ndim: int):
    """``wp.array[T]``, ``wp.array2d[T]`` ... and ``wp.array(dtype=T, ndim=n)`` annotate a callable's parameters as
    ``wp.array(dtype=T)`` does (Warp's bridge accepts all three spellings)."""
    dtype = HERE[name]
    subscripted = {1: wp.array, 2: wp.array2d, 3: wp.array3d, 4: wp.array4d}[ndim][dtype]
    kernel = kt.copy_overload(dtype, ndim)
    a, c = _values(dtype, SHAPES[ndim], 1), _values(dtype, SHAPES[ndim], 2)
    want_c, want_b = _wp_launch(kernel, a, c, dtype)
    for annotation in (subscripted, wp.array(dtype=dtype, ndim=ndim)):

        def copy(a, c, b):  # a new function for each spelling: modules are cached by their function
            wp.launch(kernel, dim=a.shape, inputs=[a, c, b])

        copy.__annotations__ = dict.fromkeys(("a", "c", "b"), annotation)
        got_c, got_b = jax_callable(copy, num_outputs=2, in_out_argnames=["c"])(a, c)
        _same_bytes(got_c, want_c)
        _same_bytes(got_b, want_b)
