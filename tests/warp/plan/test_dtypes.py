"""Every Warp scalar type JAX has: float16, bfloat16, every integer width and bool, and their vectors/matrices.

References are jax.numpy/NumPy computations in the same precision (or exact integer arithmetic in Python ints).
Half-precision gradients are compared with the analytic derivative: finite differences are too coarse there.
The 64-bit integer tests run in the ``JAX_ENABLE_X64=1`` process.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._plan import _dtypes
from tests.support import kernels_dtypes as kd

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)

HALVES = [pytest.param(wp.float16, id="float16"), pytest.param(wp.bfloat16, id="bfloat16")]
EPS = {wp.float16: 2.0**-10, wp.bfloat16: 2.0**-7}


def _jnp(scalar: Any) -> Any:
    return jnp.dtype(_dtypes.to_numpy(scalar))


def _half_data(scalar: Any, shape: tuple[int, ...], seed: int = 0) -> jax.Array:
    rng = np.random.default_rng(seed)
    return jnp.asarray(rng.uniform(-2.0, 2.0, shape).astype(np.float32)).astype(_jnp(scalar))


def _assert_close_in(scalar: Any, actual: jax.Array, expected: Any, ulps: float = 4.0) -> None:
    """Close to within a few units of the half type's precision, relative to the data's magnitude."""
    assert actual.dtype == _jnp(scalar)
    actual64 = np.asarray(actual, np.float64)
    expected64 = np.asarray(expected, np.float64)
    scale = max(1.0, float(np.max(np.abs(expected64))))
    np.testing.assert_allclose(actual64, expected64, rtol=0, atol=ulps * EPS[scalar] * scale)


def _poly_kernel(**kwargs: Any) -> Any:
    return jax_kernel(kd.poly_kernel, arg_types_factory=kd.poly_arg_types, **kwargs)


def _poly_callable(**kwargs: Any) -> Any:
    return jax_callable(kd.poly_callable_factory, generic=True, **kwargs)


# --- the mapping --------------------------------------------------------------------------------------------------


def test_every_scalar_type_round_trips_through_its_jax_dtype() -> None:
    for scalar in _dtypes.SCALAR_TYPES:
        np_dtype = _dtypes.to_numpy(scalar)
        assert _dtypes.from_jax(np_dtype) is scalar
        assert jnp.dtype(np_dtype) == np_dtype
    assert _dtypes.to_numpy(wp.bfloat16) == jnp.bfloat16 == np.dtype(ml_dtypes.bfloat16)
    assert _dtypes.to_numpy(wp.types.vector(3, wp.bfloat16)) == jnp.bfloat16
    assert _dtypes.to_numpy(wp.mat22h) == np.float16
    assert _dtypes.from_jax(jnp.bfloat16) is wp.bfloat16
    assert _dtypes.from_jax(jnp.bool_) is wp.bool


@pytest.mark.parametrize("dtype", [jnp.complex64, jnp.float8_e4m3fn, jnp.int4, np.str_])
def test_dtypes_without_a_warp_type_are_named(dtype: Any) -> None:
    with pytest.raises(TypeError, match="no Warp scalar type"):
        _dtypes.from_jax(dtype)


def test_bfloat16_parameter_rejects_float16_with_the_cast_to_make() -> None:
    m = _poly_kernel()
    kernel = wp.overload(kd.poly_kernel, kd.poly_arg_types(wp.bfloat16, wp.bfloat16))
    with pytest.raises(TypeError, match=r"has dtype float16, but the kernel expects bfloat16.*astype\(jnp.bfloat16\)"):
        jax_kernel(kernel)(jnp.ones(3, jnp.float16), 1.0)
    (out,) = m(jnp.ones(3, jnp.bfloat16), 1.0)  # the generic module picks the bfloat16 overload
    assert out.dtype == jnp.bfloat16


# --- float16 / bfloat16 ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("scalar", HALVES)
@pytest.mark.parametrize("make", [_poly_kernel, _poly_callable], ids=["kernel", "callable"])
def test_half_elementwise_matches_jax(scalar: Any, make: Any) -> None:
    a = _half_data(scalar, (33,))
    s = 0.75
    expected = a * a * jnp.asarray(s, a.dtype) + a  # jax.numpy in the same precision
    m = make()
    for (out,) in (m(a, s), jax.jit(m, static_argnums=1)(a, s)):
        _assert_close_in(scalar, out, expected)


@pytest.mark.parametrize("scalar", HALVES)
@pytest.mark.parametrize("make", [_poly_kernel, _poly_callable], ids=["kernel", "callable"])
def test_half_grad_matches_the_analytic_derivative(scalar: Any, make: Any) -> None:
    a = _half_data(scalar, (17,), seed=1)
    s = 1.5
    m = make(enable_backward=True)

    def loss(x: jax.Array) -> jax.Array:
        (out,) = m(x, s)
        return jnp.sum(out)

    for grad in (jax.grad(loss)(a), jax.jit(jax.grad(loss))(a)):
        assert grad.dtype == a.dtype
        _assert_close_in(scalar, grad, 2.0 * np.asarray(a, np.float64) * s + 1.0)


@pytest.mark.parametrize("scalar", HALVES)
@pytest.mark.parametrize("make", [_poly_kernel, _poly_callable], ids=["kernel", "callable"])
def test_half_vmap(scalar: Any, make: Any) -> None:
    a = _half_data(scalar, (3, 8), seed=2)
    m = make()
    out = jax.vmap(lambda x: m(x, 0.5)[0])(a)
    assert out.shape == (3, 8)
    _assert_close_in(scalar, out, a * a * jnp.asarray(0.5, a.dtype) + a)


def _vec_kernel(scalar: Any) -> Any:
    return jax_kernel(
        kd.vec_kernel,
        num_outputs=2,
        arg_types_factory=lambda d: [wp.array(dtype=kd.VEC3[d]), wp.array(dtype=d), wp.array(dtype=kd.VEC3[d])],
        enable_backward=True,
    )


@pytest.mark.parametrize("scalar", HALVES)
def test_half_vectors_match_jax(scalar: Any) -> None:
    a = _half_data(scalar, (10, 3), seed=3) / 2
    m = _vec_kernel(scalar)
    norm2, scaled = jax.jit(m)(a)
    expected_norm2 = jnp.sum(a * a, axis=-1)
    _assert_close_in(scalar, norm2, expected_norm2)
    _assert_close_in(scalar, scaled, a * expected_norm2[:, None], ulps=8)
    grad = jax.grad(lambda x: jnp.sum(m(x)[0]))(a)
    _assert_close_in(scalar, grad, 2.0 * np.asarray(a, np.float64))


def test_vec3h_callable_matches_jax() -> None:
    a = _half_data(wp.float16, (6, 3), seed=4)
    norm2, scaled = jax_callable(kd.vec_func, num_outputs=2)(a)
    _assert_close_in(wp.float16, norm2, jnp.sum(a * a, axis=-1))
    _assert_close_in(wp.float16, scaled, a * jnp.sum(a * a, axis=-1)[:, None], ulps=16)


@pytest.mark.parametrize("scalar", HALVES)
def test_half_matrices_match_jax(scalar: Any) -> None:
    mats = _half_data(scalar, (5, 2, 2), seed=5)
    vecs = _half_data(scalar, (5, 2), seed=6)
    m = jax_kernel(
        kd.matvec_kernel,
        arg_types_factory=lambda md, vd: [
            wp.array(dtype=kd.MAT22[md]),
            wp.array(dtype=kd.VEC2[vd]),
            wp.array(dtype=kd.VEC2[vd]),
        ],
    )
    (out,) = m(mats, vecs)
    _assert_close_in(scalar, out, jnp.einsum("nij,nj->ni", mats, vecs))


# a tie (Warp's host conversion rounds float16 ties away from zero, NumPy to even), values needing rounding, exact
# ones, float16 and bfloat16 subnormals, the largest finite values, and values overflowing float16 (not bfloat16)
STATIC_VALUES = (
    *(1.0 + 2.0**-11, 1.0 + 2.0**-8, 0.1, -3.7, 0.75, 1e-3),
    *(6.0e-5, -3.0e-7, -3e-40),  # only one value becoming a float16 zero: plans holding 0.0 and -0.0 compare equal
    *(65504.0, 65519.0, -3.0e38),
)
# The smallest normal value of each half type: smaller static values reach callables as 0 (see below).
SMALLEST_NORMAL = {wp.float16: 2.0**-14, wp.bfloat16: 2.0**-126}


def _launch_reference(scalar: Any, value: float) -> np.ndarray:
    """What Warp writes for a static ``s`` through wp.launch on this (Python) thread: the reference."""
    kernel = wp.overload(kd.fill_kernel, [scalar, wp.array(dtype=scalar)])
    out = wp.zeros(1, dtype=scalar)
    wp.launch(kernel, dim=1, inputs=[value], outputs=[out])
    return out.numpy().view(np.uint16)


@pytest.mark.parametrize("scalar", HALVES)
def test_static_half_scalars_are_packed_as_wp_launch_packs_them(scalar: Any) -> None:
    m = jax_kernel(wp.overload(kd.fill_kernel, [scalar, wp.array(dtype=scalar)]), launch_dims=1)
    for value in STATIC_VALUES:
        if _dtypes.overflows(scalar, value):
            continue
        (out,) = m(value)
        np.testing.assert_array_equal(np.asarray(out).view(np.uint16), _launch_reference(scalar, value))
        assert float(out[0]) == _dtypes.static_float(scalar, value)


@pytest.mark.parametrize("scalar", HALVES)
def test_static_half_scalars_reach_callables_rounded(scalar: Any) -> None:
    m = jax_callable(kd.FILL_FUNCS[scalar], output_dims=1)
    for value in STATIC_VALUES:
        # Warp packs the scalar again inside the callable, on XLA's thread, whose flush-to-zero mode makes
        # Warp's host conversion drop subnormals (6e-5 becomes 0 in float16): a Warp/XLA limitation, not jarp's
        if _dtypes.overflows(scalar, value) or abs(value) < SMALLEST_NORMAL[scalar]:
            continue
        (out,) = m(value)
        np.testing.assert_array_equal(np.asarray(out).view(np.uint16), _launch_reference(scalar, value))


def test_half_conversion_matches_warp_on_random_bit_patterns() -> None:
    from warp._src.types import float_to_bfloat16_bits, float_to_half_bits

    rng = np.random.default_rng(8)
    with np.errstate(invalid="ignore"):  # signalling NaNs among the bit patterns
        values = rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32).astype(np.float64)
    ties = (np.float32(1.0 + 2.0**-11) * 2.0 ** np.arange(-30, 16)).tolist()
    beyond_float32 = [1e39, -1e300, 1e-39, -1e-46, 2.0**-150, 3.4028235677973366e38 * (1 + 2**-24)]
    values = [*values.tolist(), *ties, *beyond_float32]
    wp.init()
    for value in values:
        assert _dtypes.ctype_value(wp.float16, value).value == float_to_half_bits(value), value
        assert _dtypes.ctype_value(wp.bfloat16, value).value == float_to_bfloat16_bits(value), value


def test_static_float16_scalar_value_reaches_the_kernel() -> None:
    # 0.1 is not a float16: the kernel must see the nearest float16, not the float's bits cut down or 0.
    one = jnp.ones(1, jnp.float16)
    m = _poly_kernel()
    np.testing.assert_array_equal(m(one, 0.1)[0], one * jnp.asarray(0.1, jnp.float16) + one)
    np.testing.assert_array_equal(m(one, 2.0**-3)[0], jnp.asarray([1.125], jnp.float16))
    np.testing.assert_array_equal(m(one, -1.0)[0], jnp.asarray([0.0], jnp.float16))
    np.testing.assert_array_equal(m(jnp.full(1, 2.0, jnp.float16), 3.0)[0], jnp.asarray([14.0], jnp.float16))


@pytest.mark.parametrize("make", [_poly_kernel, _poly_callable], ids=["kernel", "callable"])
def test_static_float16_overflow_is_named(make: Any) -> None:
    with pytest.raises(ValueError, match=r"'s' = 100000.0 overflows the parameter's float16"):
        make()(jnp.ones(2, jnp.float16), 1e5)
    (out,) = make()(jnp.ones(1, jnp.bfloat16), 1e5)  # bfloat16 has float32's range
    assert float(out[0]) == pytest.approx(1e5, rel=2**-7)


def test_runtime_half_scalar() -> None:
    a = _half_data(wp.float16, (9,), seed=7)
    s = jnp.asarray(0.25, jnp.float16)
    m = _poly_kernel(enable_backward=True)
    (out,) = jax.jit(m)(a, s)
    _assert_close_in(wp.float16, out, a * a * s + a)
    ds = jax.grad(lambda t: jnp.sum(m(a, t)[0]))(s)
    _assert_close_in(wp.float16, ds, np.sum(np.asarray(a, np.float64) ** 2), ulps=16)


# --- integers and bool ----------------------------------------------------------------------------------------------


def _int_case(scalar: Any, n: int = 12, seed: int = 0) -> tuple[np.ndarray, np.ndarray, int, np.ndarray]:
    """a, b and k with a * k + b in range, b close to the type's limits (so a narrower type would fail)."""
    dtype = _dtypes.to_numpy(scalar)
    info = np.iinfo(dtype)
    rng = np.random.default_rng(seed)
    k = 3
    a_lo = -4 if info.min < 0 else 0
    a = rng.integers(a_lo, 5, n).astype(dtype)
    b_lo, b_hi = int(info.min) + 12, int(info.max) - 12
    b = np.array([int(x) for x in rng.integers(0, 2**62, n)], dtype=object) % (b_hi - b_lo) + b_lo
    b[:2] = [b_lo, b_hi]
    b = b.astype(dtype)
    expected = np.array([int(x) * k + int(y) for x, y in zip(a, b, strict=True)], dtype=object).astype(dtype)
    return a, b, k, expected


def _check_int_type(scalar: Any) -> None:
    a, b, k, expected = _int_case(scalar)
    kernel = jax_kernel(kd.int_affine_kernel, arg_types_factory=kd.int_affine_arg_types)
    func = jax_callable(kd.int_affine_callable_factory, generic=True)
    for m in (kernel, func):
        (out,) = m(jnp.asarray(a), jnp.asarray(b), k)
        assert out.dtype == a.dtype
        np.testing.assert_array_equal(np.asarray(out), expected)
        (out,) = jax.jit(m, static_argnums=2)(jnp.asarray(a), jnp.asarray(b), k)
        np.testing.assert_array_equal(np.asarray(out), expected)
    batched = jax.vmap(lambda x, y: kernel(x, y, k)[0])(jnp.stack([a, a]), jnp.stack([b, b]))
    np.testing.assert_array_equal(np.asarray(batched), np.stack([expected, expected]))
    too_big = int(np.iinfo(a.dtype).max) + 1
    with pytest.raises(ValueError, match=rf"'k' = {too_big} does not fit the parameter's {a.dtype}"):
        kernel(jnp.asarray(a), jnp.asarray(b), too_big)


@pytest.mark.parametrize("scalar", kd.INT_TYPES_32, ids=lambda t: t.__name__)
def test_integer_types_in_kernels_and_callables(scalar: Any) -> None:
    _check_int_type(scalar)


@pytest.mark.x64
@pytest.mark.parametrize("scalar", kd.INT_TYPES_64, ids=lambda t: t.__name__)
def test_64_bit_integer_types_in_kernels_and_callables(scalar: Any) -> None:
    _check_int_type(scalar)


@pytest.mark.x64
def test_64_bit_integer_parameter_rejects_32_bit_arrays() -> None:
    kernel = wp.overload(kd.int_affine_kernel, kd.int_affine_arg_types(wp.int64, wp.int64, wp.int64))
    with pytest.raises(TypeError, match=r"has dtype int32, but the kernel expects int64"):
        jax_kernel(kernel)(jnp.ones(2, jnp.int32), jnp.ones(2, jnp.int32), 1)


def test_bool_in_kernels_and_callables() -> None:
    a = np.array([False, False, True, True])
    b = np.array([False, True, False, True])
    for m in (jax_kernel(kd.bool_kernel), jax_callable(kd.bool_func)):
        for flip in (False, True):
            (out,) = m(jnp.asarray(a), jnp.asarray(b), flip)
            assert out.dtype == jnp.bool_
            np.testing.assert_array_equal(np.asarray(out), (a != b) ^ flip)
        batched = jax.vmap(lambda x, y, m=m: m(x, y, True)[0])(jnp.stack([a, b]), jnp.stack([b, b]))
        np.testing.assert_array_equal(np.asarray(batched), np.stack([a == b, np.ones(4, bool)]))
