"""Tests of `jarp.warp._to_warp.to_warp`: NumPy, JAX and Warp arrays into Warp arrays."""

from __future__ import annotations

import gc
from typing import Any

import hypothesis.extra.numpy as hnp
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from hypothesis import given, settings
from hypothesis import strategies as st

from jarp.warp._to_warp import to_warp

# Dtypes JAX holds in either precision mode, and those it holds only with jax_enable_x64.
NUMPY_DTYPES = [np.bool_, np.uint8, np.int8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64]
JAX_DTYPES_32 = [np.bool_, np.uint8, np.int8, np.int16, np.int32, np.uint32, np.float16, np.float32]
JAX_DTYPES_64 = [*JAX_DTYPES_32, np.int64, np.uint64, np.float64]

leading_shapes = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=4)
inner_sizes = st.integers(1, 5)
fuzz = settings(max_examples=30, deadline=None)


def _numpy_array(draw: st.DrawFn, dtypes: list[Any], shape: tuple[int, ...]) -> np.ndarray:
    dtype = draw(st.sampled_from(dtypes))
    return draw(hnp.arrays(dtype, shape, elements=hnp.from_dtype(np.dtype(dtype), allow_nan=False)))


@st.composite
def numpy_arrays(draw: st.DrawFn, inner: int = 0, dtypes: list[Any] = NUMPY_DTYPES) -> np.ndarray:
    """Arrays of at least 1 + `inner` dims."""
    shape = draw(leading_shapes) + tuple(draw(inner_sizes) for _ in range(inner))
    return _numpy_array(draw, dtypes, shape)


def _scalar(dtype: Any) -> Any:
    return wp.dtype_from_numpy(np.dtype(dtype))


def _jax(x: np.ndarray) -> jax.Array:
    out = jax.device_put(x)  # unlike jnp.asarray, compiles nothing per shape
    assert out.dtype == x.dtype
    return out


def _is_view_of(out: wp.array, x: jax.Array) -> bool:
    return out.ptr == x.unsafe_buffer_pointer()


# --- NumPy sources --------------------------------------------------------------------------------------------------


@fuzz
@given(x=numpy_arrays())
def test_numpy_without_dtype_keeps_shape_dtype_and_values(x: np.ndarray) -> None:
    out = to_warp(x)
    assert isinstance(out, wp.array)
    assert out.dtype is _scalar(x.dtype)
    assert out.shape == x.shape
    assert not out.requires_grad
    np.testing.assert_array_equal(out.numpy(), x)


@fuzz
@given(x=numpy_arrays(inner=1))
def test_numpy_vector_hint_takes_length_and_scalar_from_the_array(x: np.ndarray) -> None:
    out = to_warp(x, (-1, Any))
    assert out.shape == x.shape[:-1]
    assert wp.types.types_equal(out.dtype, wp.types.vector(x.shape[-1], _scalar(x.dtype)))
    np.testing.assert_array_equal(out.numpy(), x)


@fuzz
@given(x=numpy_arrays(inner=2))
def test_numpy_matrix_hint_takes_shape_and_scalar_from_the_array(x: np.ndarray) -> None:
    out = to_warp(x, (-1, -1, None))
    assert out.shape == x.shape[:-2]
    assert wp.types.types_equal(out.dtype, wp.types.matrix(x.shape[-2:], _scalar(x.dtype)))
    np.testing.assert_array_equal(out.numpy(), x)


@fuzz
@given(
    x=hnp.arrays(
        st.sampled_from([np.int16, np.float32, np.float64]),
        leading_shapes.map(lambda shape: (*shape, 3)),
        elements={"min_value": -1000, "max_value": 1000},
    ),
    scalar=st.sampled_from([wp.float32, wp.int32]),
)
def test_numpy_tuple_hint_with_scalar_casts(x: np.ndarray, scalar: Any) -> None:
    out = to_warp(x, (x.shape[-1], scalar))
    assert wp.types.types_equal(out.dtype, wp.types.vector(x.shape[-1], scalar))
    np.testing.assert_array_equal(out.numpy(), x.astype(wp.dtype_to_numpy(scalar)))


def test_numpy_concrete_dtypes() -> None:
    x = np.arange(24, dtype=np.float64).reshape(2, 4, 3)
    vec = to_warp(x, wp.vec3f)
    assert vec.dtype is wp.vec3f
    assert vec.shape == (2, 4)
    mat = to_warp(x[:, :3], wp.mat33d)
    assert mat.dtype is wp.mat33d
    assert mat.shape == (2,)
    np.testing.assert_array_equal(mat.numpy(), x[:, :3])
    quat = to_warp(np.ones((5, 4), np.float32), wp.quatf)
    assert quat.dtype is wp.quatf
    assert quat.shape == (5,)
    scalar = to_warp(x, wp.int32)
    assert scalar.dtype is wp.int32
    assert scalar.shape == x.shape


def test_numpy_builtin_types_are_used_for_inferred_dtypes() -> None:
    assert to_warp(np.zeros((2, 3), np.float32), (-1, Any)).dtype is wp.vec3f
    assert to_warp(np.zeros((2, 4, 4), np.float64), (-1, -1, Any)).dtype is wp.mat44d


@pytest.mark.parametrize(
    ("shape", "dtype", "warp_shape"),
    [
        ((1, 1, 1), (-1, Any), (1, 1)),
        ((2, 1, 1), (-1, -1, Any), (2,)),
        ((3, 1), None, (3, 1)),
        ((1, 3), wp.vec3f, (1,)),
    ],
    ids=str,
)
def test_numpy_trailing_dims_of_size_one_are_kept(
    shape: tuple[int, ...], dtype: Any, warp_shape: tuple[int, ...]
) -> None:
    assert to_warp(np.zeros(shape, np.float32), dtype).shape == warp_shape


def test_numpy_rejects_shape_keyword() -> None:
    with pytest.raises(TypeError, match=r"takes no shape= for a numpy\.ndarray"):
        to_warp(np.zeros((2, 3), np.float32), shape=(6,))


def test_numpy_is_copied() -> None:
    x = np.zeros((3, 2), np.float32)
    out = to_warp(x, (-1, Any))
    x[:] = 1.0
    np.testing.assert_array_equal(out.numpy(), np.zeros((3, 2), np.float32))


def test_numpy_requires_grad_and_kwargs_are_forwarded() -> None:
    out = to_warp(np.ones((4, 3), np.float32), (-1, Any), requires_grad=True, device="cpu")
    assert out.requires_grad
    assert out.device == wp.get_device("cpu")
    assert out.grad.dtype is wp.vec3f
    assert out.grad.shape == (4,)
    np.testing.assert_array_equal(out.grad.numpy(), np.zeros((4, 3), np.float32))


def test_numpy_copy_false_gives_a_cpu_view() -> None:
    x = np.zeros((3, 2), np.float32)
    out = to_warp(x, (-1, Any), copy=False, device="cpu")
    x[1] = 7.0
    np.testing.assert_array_equal(out.numpy()[1], [7.0, 7.0])


def test_numpy_non_contiguous_input() -> None:
    x = np.arange(24, dtype=np.float32).reshape(4, 6)[:, ::2]
    out = to_warp(x, (-1, Any))
    assert out.dtype is wp.vec3f
    np.testing.assert_array_equal(out.numpy(), x)


def test_numpy_without_warp_equivalent_raises_type_error() -> None:
    with pytest.raises(TypeError, match=r"numpy\.ndarray of dtype complex64, which has no Warp equivalent"):
        to_warp(np.zeros(3, np.complex64))


def test_numpy_casts_to_bfloat16_with_round_to_nearest_even() -> None:
    x = np.array([1.0, 1.0 + 2.0**-8, 1.0 + 3 * 2.0**-8, -3.3, 2.0**100], np.float32)
    out = to_warp(x, wp.bfloat16)
    assert out.dtype is wp.bfloat16
    # bfloat16 keeps 8 significant bits: the ties 1 + 2**-8 and 1 + 3 * 2**-8 round to the even neighbours.
    expected = np.array([1.0, 1.0, 1.0 + 2.0**-6, -3.296875, 2.0**100], np.float32)
    np.testing.assert_array_equal(out.numpy().astype(np.float32), expected)


def test_bfloat16_sources_map_to_warp_bfloat16() -> None:
    x = np.array([[0.5, -2.0, 3.0]], jnp.bfloat16)
    for source in (x, _jax(x)):
        out = to_warp(source, (-1, Any))
        assert wp.types.types_equal(out.dtype, wp.types.vector(3, wp.bfloat16))
        np.testing.assert_array_equal(out.numpy(), x)


# --- JAX sources ----------------------------------------------------------------------------------------------------


@fuzz
@given(x=numpy_arrays(dtypes=JAX_DTYPES_32))
def test_jax_without_dtype_is_a_zero_copy_view(x: np.ndarray) -> None:
    xj = _jax(x)
    out = to_warp(xj)
    assert out.dtype is _scalar(x.dtype)
    assert out.shape == x.shape
    assert _is_view_of(out, xj)
    np.testing.assert_array_equal(out.numpy(), x)


@fuzz
@given(x=numpy_arrays(inner=1, dtypes=JAX_DTYPES_32))
def test_jax_vector_hint_is_a_zero_copy_view(x: np.ndarray) -> None:
    xj = _jax(x)
    out = to_warp(xj, (-1, Any))
    assert out.shape == x.shape[:-1]
    assert wp.types.types_equal(out.dtype, wp.types.vector(x.shape[-1], _scalar(x.dtype)))
    assert _is_view_of(out, xj)
    np.testing.assert_array_equal(out.numpy(), x)


@fuzz
@given(x=numpy_arrays(inner=2, dtypes=JAX_DTYPES_32))
def test_jax_matrix_hint_is_a_zero_copy_view(x: np.ndarray) -> None:
    xj = _jax(x)
    out = to_warp(xj, (-1, -1, Any))
    assert out.shape == x.shape[:-2]
    assert wp.types.types_equal(out.dtype, wp.types.matrix(x.shape[-2:], _scalar(x.dtype)))
    assert _is_view_of(out, xj)
    np.testing.assert_array_equal(out.numpy(), x)


def test_jax_concrete_dtypes() -> None:
    x = jnp.arange(36, dtype=jnp.float32).reshape(4, 3, 3)
    vec = to_warp(x, wp.vec3f)
    assert vec.dtype is wp.vec3f
    assert vec.shape == (4, 3)
    mat = to_warp(x, (3, 3, wp.float32))
    assert mat.dtype is wp.mat33f
    assert mat.shape == (4,)
    assert _is_view_of(vec, x)
    assert _is_view_of(mat, x)


def test_jax_cast_keeps_the_cast_copy_alive() -> None:
    x = jnp.arange(12, dtype=jnp.int32).reshape(4, 3)
    out = to_warp(x, (-1, wp.float32))
    assert out.dtype is wp.vec3f
    assert not _is_view_of(out, x)
    gc.collect()
    np.testing.assert_array_equal(out.numpy(), np.arange(12, dtype=np.float32).reshape(4, 3))


def test_jax_float64_without_x64_raises_value_error() -> None:
    with pytest.raises(ValueError, match="jax_enable_x64 is off"):
        to_warp(jnp.zeros((2, 3), jnp.float32), (-1, wp.float64))


def test_jax_requires_grad_gives_a_zero_gradient() -> None:
    x = jnp.ones((5, 2), jnp.float32)
    out = to_warp(x, (-1, Any), requires_grad=True)
    assert out.requires_grad
    assert out.grad.dtype is wp.vec2f
    np.testing.assert_array_equal(out.grad.numpy(), np.zeros((5, 2), np.float32))
    assert not to_warp(x).requires_grad


def test_jax_accepts_its_own_device_only() -> None:
    x = jnp.ones(3)
    assert to_warp(x, device="cpu").device == wp.get_device("cpu")
    assert to_warp(x, device=None).device == wp.get_device("cpu")
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) 'copy', 'pinned' for a jax\.Array"):
        to_warp(x, copy=True, pinned=False)


def test_jax_tracer_raises_type_error() -> None:
    def f(x: jax.Array) -> jax.Array:
        to_warp(x)
        return x

    with pytest.raises(TypeError, match=r"arr is a JAX tracer .* float32\[3\]"):
        jax.jit(f)(jnp.ones(3, jnp.float32))


# --- Warp sources ---------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def vec3_array() -> wp.array:
    return wp.zeros(4, dtype=wp.vec3f, device="cpu")


@pytest.mark.parametrize(
    "dtype",
    [None, wp.vec3f, wp.types.vector(3, wp.float32), (-1, Any), (3, Any), (-1, wp.float32), (3, None)],
    ids=str,
)
def test_warp_array_matching_dtype_is_returned_as_is(vec3_array: wp.array, dtype: Any) -> None:
    assert to_warp(vec3_array, dtype) is vec3_array


@pytest.mark.parametrize(
    "dtype",
    [wp.float32, wp.vec3d, wp.vec4f, wp.mat33f, (-1, wp.float64), (4, Any), (-1, -1, Any), (3, 1, Any)],
    ids=str,
)
def test_warp_array_dtype_mismatch_raises_value_error(vec3_array: wp.array, dtype: Any) -> None:
    with pytest.raises(ValueError, match=r"warp\.array of dtype vec3f, which does not match dtype="):
        to_warp(vec3_array, dtype)


def test_warp_matrix_and_scalar_patterns() -> None:
    mat = wp.zeros(2, dtype=wp.types.matrix((2, 3), wp.float64), device="cpu")
    assert to_warp(mat, (-1, -1, Any)) is mat
    assert to_warp(mat, (2, 3, wp.float64)) is mat
    with pytest.raises(ValueError, match="does not match"):
        to_warp(mat, (3, 2, Any))
    scalars = wp.zeros((4, 3), dtype=wp.float32, device="cpu")
    assert to_warp(scalars, wp.float32) is scalars
    with pytest.raises(ValueError, match="never casts or reinterprets"):
        to_warp(scalars, (-1, Any))


def test_warp_array_requires_grad(vec3_array: wp.array) -> None:
    with pytest.raises(ValueError, match=r"requires_grad=True, but arr is a warp\.array without a gradient"):
        to_warp(vec3_array, requires_grad=True)
    assert not vec3_array.requires_grad
    with_grad = wp.zeros(2, dtype=wp.float32, device="cpu", requires_grad=True)
    assert to_warp(with_grad, requires_grad=True) is with_grad
    assert to_warp(with_grad) is with_grad


def test_warp_array_kwargs(vec3_array: wp.array) -> None:
    assert to_warp(vec3_array, device="cpu") is vec3_array
    with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) 'copy' for a warp\.array"):
        to_warp(vec3_array, copy=False)


# --- errors shared by all sources -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "arr",
    [[1.0, 2.0], (1, 2), 1.0, "abc", None, np.float32(1.0), wp.indexedarray(wp.zeros(3, device="cpu"))],
    ids=lambda a: type(a).__name__,
)
def test_unsupported_types_raise_type_error(arr: Any) -> None:
    name = type(arr).__qualname__
    with pytest.raises(TypeError, match=rf"does not support arr of type \S*{name}; supported types: warp\.array"):
        to_warp(arr)


@pytest.mark.parametrize(
    ("dtype", "error", "match"),
    [
        ("float32", TypeError, "is not supported"),
        (np.float32, TypeError, "is not supported"),
        (float, TypeError, "is not supported"),
        ((3,), TypeError, "not a valid hint"),
        ((1, 2, 3, Any), TypeError, "not a valid hint"),
        ((0, Any), ValueError, "dimension 0 must be -1"),
        ((-2, Any), ValueError, "dimension 0 must be -1"),
        ((3, 0, Any), ValueError, "dimension 1 must be -1"),
        ((3.0, Any), TypeError, "dimension 0 must be -1 or a positive int"),
        ((True, Any), TypeError, "got the bool"),
        ((3, float), TypeError, "must be a Warp scalar dtype"),
        ((3, wp.vec3f), TypeError, "must be a Warp scalar dtype"),
    ],
    ids=str,
)
@pytest.mark.parametrize("source", ["numpy", "jax", "warp"])
def test_bad_hints_raise(dtype: Any, error: type[Exception], match: str, source: str) -> None:
    x = np.zeros((2, 3), np.float32)
    arr = {"numpy": x, "jax": jnp.asarray(x), "warp": wp.array(x, device="cpu")}[source]
    with pytest.raises(error, match=match):
        to_warp(arr, dtype)


@pytest.mark.parametrize("convert", [np.asarray, jnp.asarray], ids=["numpy", "jax"])
@pytest.mark.parametrize(
    ("shape", "dtype", "match"),
    [
        ((), None, "0-d"),
        ((3,), (-1, Any), r"needs at least 2 dims"),
        ((3, 3), (-1, -1, Any), r"needs at least 3 dims"),
        ((4, 3), wp.vec4f, r"dtype=vec4f spans trailing dims \(4,\), but arr has shape \(4, 3\)"),
        ((4, 3), (4, Any), r"spans trailing dims \(4,\)"),
        ((2, 3, 3), (-1, 2, Any), r"spans trailing dims \(-1, 2\)"),
        ((2, 3, 3), wp.mat22f, "spans trailing dims"),
    ],
    ids=str,
)
def test_shapes_that_do_not_fit_raise_value_error(convert: Any, shape: tuple[int, ...], dtype: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        to_warp(convert(np.zeros(shape, np.float32)), dtype)


def test_docstring_example() -> None:
    a = to_warp(jnp.zeros((4, 3), jnp.float32), (-1, Any))
    assert (a.shape, a.dtype is wp.vec3f) == ((4,), True)
    assert to_warp(a, wp.vec3f) is a


# --- float64 (JAX_ENABLE_X64=1 process) -------------------------------------------------------------------------


@pytest.mark.x64
@fuzz
@given(x=numpy_arrays(inner=1, dtypes=JAX_DTYPES_64))
def test_jax_vector_hint_with_x64(x: np.ndarray) -> None:
    xj = _jax(x)
    out = to_warp(xj, (-1, Any))
    assert wp.types.types_equal(out.dtype, wp.types.vector(x.shape[-1], _scalar(x.dtype)))
    assert _is_view_of(out, xj)
    np.testing.assert_array_equal(out.numpy(), x)


@pytest.mark.x64
def test_jax_float64_is_viewed_with_x64() -> None:
    x = jnp.arange(18, dtype=jnp.float64).reshape(2, 3, 3)
    assert x.dtype == jnp.float64
    mat = to_warp(x, (-1, -1, Any))
    assert mat.dtype is wp.mat33d
    assert _is_view_of(mat, x)
    vec = to_warp(x, wp.vec3d)
    assert vec.shape == (2, 3)
    np.testing.assert_array_equal(vec.numpy(), np.asarray(x))


@pytest.mark.x64
def test_jax_cast_to_float64_with_x64() -> None:
    x = jnp.arange(6, dtype=jnp.float32).reshape(2, 3)
    out = to_warp(x, (-1, wp.float64), requires_grad=True)
    assert out.dtype is wp.vec3d
    assert out.grad.dtype is wp.vec3d
    np.testing.assert_array_equal(out.numpy(), np.arange(6, dtype=np.float64).reshape(2, 3))


@pytest.mark.x64
def test_numpy_float64_with_x64() -> None:
    out = to_warp(np.ones((3, 2, 2)), (-1, -1, Any))
    assert out.dtype is wp.mat22d
    np.testing.assert_array_equal(out.numpy(), np.ones((3, 2, 2)))
