"""Static values key plans by identity of meaning, not Python equality.

``-0.0 == 0.0`` but ``1 / -0.0 == -inf``: a plan (or eager executable) built for one must never run for the other.
``nan != nan``: a NaN static must find its plan again instead of building and compiling a new one per call. ``0``,
``0.0`` and ``False`` stay distinct keys, while the value a parameter receives is still normalised to its type.
References are NumPy (and ``wp.launch`` for the half type, whose rounding jarp mirrors).
"""

from __future__ import annotations

import functools
import gc
import math
import struct
import warnings
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._ffi import _registry
from jarp.warp._module import _eager, _option_warnings, _value_callables
from jarp.warp._module._value_callables import value_callable
from jarp.warp._plan import _values
from jarp.warp._plan._static_keys import Static, canonical, static_key
from tests.support import kernels as k
from tests.support import kernels64 as k64
from tests.support import kernels_corner_cases as kr
from tests.support import kernels_static_keys as K
from tests.support.retrace import count_traces

X = np.array([-1.0, 1.0, 2.0], np.float32)
SPECIAL = [0.0, -0.0, math.inf, -math.inf, math.nan, -math.nan, 5e-324, -5e-324, 1e-45, 1.4e-45, 1e-40, -1e-40]


def _bits32(a: Any) -> np.ndarray:
    return np.asarray(a, np.float32).view(np.uint32)


def _same_float32(actual: Any, expected: Any) -> bool:
    """Bit-identical float32 arrays, except that any NaN matches any NaN."""
    actual, expected = np.asarray(actual, np.float32), np.asarray(expected, np.float32)
    nan = np.isnan(expected)
    return bool(
        np.array_equal(np.isnan(actual), nan) and np.array_equal(_bits32(actual)[~nan], _bits32(expected)[~nan])
    )


def _divide_ref(s: float) -> np.ndarray:
    with np.errstate(divide="ignore", invalid="ignore"):
        return X / np.float32(s)


# --- the keys themselves ---------------------------------------------------------------------------------------------


def test_keys_separate_signed_zeros_and_types_and_join_nans() -> None:
    assert static_key(-0.0) != static_key(0.0)
    assert static_key(float("nan")) == static_key(-math.nan) == static_key(math.inf - math.inf)
    assert static_key(np.float64("nan")) == static_key(math.nan)
    assert len({static_key(0), static_key(0.0), static_key(False), static_key(0j)}) == 4
    assert static_key(np.int32(3)) == static_key(3)
    assert static_key(np.float32(0.5)) == static_key(0.5)
    assert static_key(np.bool_(True)) == static_key(True) != static_key(1)
    assert static_key((0.0, (1.0, -0.0))) != static_key((0.0, (1.0, 0.0)))
    assert static_key((0.0, (math.nan,))) == static_key((0.0, (-math.nan,)))
    assert static_key(complex(0.0, -0.0)) != static_key(0j)


def test_canonical_replaces_every_nan_and_keeps_the_rest() -> None:
    t = (1.0, -0.0)
    assert canonical(t) is t
    out = canonical((-math.nan, (2, -math.nan)))
    assert struct.pack("<d", out[0]) == struct.pack("<d", out[1][1]) == struct.pack("<d", math.nan)
    assert out[1][0] == 2
    assert type(out[1][0]) is int


def test_static_wrapper_compares_by_key() -> None:
    assert Static(-0.0) != Static(0.0)
    assert Static(float("nan")) == Static(float("nan"))
    assert hash(Static(float("nan"))) == hash(Static(-math.nan))
    assert Static(0) != Static(False) != Static(0.0)
    assert math.isnan(Static(-math.nan).value)


def test_bindings_compare_static_values_by_key() -> None:
    b = _values.Binding
    assert b("static", value=-0.0) != b("static", value=0.0)
    assert b("static", value=float("nan")) == b("static", value=float("nan"))
    assert hash(b("static", value=float("nan"))) == hash(b("static", value=-math.nan))
    assert b("static", value=0) != b("static", value=0.0)
    assert b("struct", value=(-0.0, (1.0, 2.0)), fields=(0,)) != b("struct", value=(0.0, (1.0, 2.0)), fields=(0,))
    assert b("operand", 1) == b("operand", 1) != b("result", 1)


# --- -0.0 and 0.0 --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("order", [(-0.0, 0.0), (0.0, -0.0)], ids=["neg-first", "pos-first"])
def test_signed_zero_divisors_eager(order: tuple[float, float]) -> None:
    k = jax_kernel(K.divide_kernel)
    for s in (*order, *order):
        (out,) = k(jnp.asarray(X), s)
        np.testing.assert_array_equal(out, _divide_ref(s))


@pytest.mark.parametrize("order", [(-0.0, 0.0), (0.0, -0.0)], ids=["neg-first", "pos-first"])
def test_signed_zero_divisors_in_fresh_jits(order: tuple[float, float]) -> None:
    k = jax_kernel(K.divide_kernel)
    for s in (*order, *order):
        (out,) = jax.jit(lambda x, s=s: k(x, s))(jnp.asarray(X))  # s baked into a fresh trace
        np.testing.assert_array_equal(out, _divide_ref(s))


def test_signed_zero_divisors_make_one_plan_each() -> None:
    k = jax_kernel(K.divide_kernel)
    x = jnp.asarray(X)
    for s in (0.0, -0.0, 0.0, -0.0):
        jax.block_until_ready(k(x, s))
    zeros = [
        p.params[1].primal.value
        for p in _registry.registry.plans()
        if p.target is K.divide_kernel and p.params[1].primal.source == "static" and p.params[1].primal.value == 0.0
    ]
    assert sorted(math.copysign(1.0, v) for v in zeros) == [-1.0, 1.0]


def test_signed_zero_struct_value_fields() -> None:
    k = jax_kernel(K.struct_divide_kernel, num_outputs=2)
    x = jnp.asarray(X)
    for s in (-0.0, 0.0, -0.0):
        for v in (0.0, -0.0, 0.0):
            eager = k(x, {"scale": s, "v": (1.0, v)})
            traced = jax.jit(lambda x, s=s, v=v: k(x, {"scale": s, "v": (1.0, v)}))(x)
            for by_scale, by_v in (eager, traced):
                np.testing.assert_array_equal(by_scale, _divide_ref(s))
                np.testing.assert_array_equal(by_v, _divide_ref(v))


def test_signed_zero_half_statics() -> None:
    k = jax_kernel(K.write_f16_kernel)
    x = jnp.zeros(2, jnp.float16)
    for s in (-0.0, 0.0, -0.0, 0.0):
        (out,) = k(x, s)
        assert np.asarray(out).view(np.uint16).tolist() == [np.float16(s).view(np.uint16)] * 2
        (out,) = jax.jit(lambda x, s=s: k(x, s))(x)
        assert np.asarray(out).view(np.uint16).tolist() == [np.float16(s).view(np.uint16)] * 2


# --- NaN -------------------------------------------------------------------------------------------------------------


def _nans() -> list[float]:
    """Twenty distinct NaN objects of several origins and signs."""
    origins = [lambda: float("nan"), lambda: -float("nan"), lambda: math.inf - math.inf, lambda: float(np.nan)]
    return [origins[i % len(origins)]() for i in range(20)]


def test_nan_static_makes_one_plan_and_one_eager_executable() -> None:
    k = jax_kernel(K.write_f32_kernel)
    x = jnp.zeros(3, jnp.float32)
    executable = _eager._executables.get(k)  # this module's eager entry
    plans, executables = len(_registry.registry), executable._cache_size()
    for s in _nans():
        (out,) = k(x, s)
        assert np.isnan(np.asarray(out)).all()
    assert len(_registry.registry) - plans <= 1
    assert executable._cache_size() - executables <= 1


def test_nan_static_in_fresh_jits_makes_one_plan() -> None:
    k = jax_kernel(K.write_f32_kernel)
    x = jnp.zeros(3, jnp.float32)
    plans = len(_registry.registry)
    for s in _nans():
        (out,) = jax.jit(lambda x, s=s: k(x, s))(x)
        assert np.isnan(np.asarray(out)).all()
    assert len(_registry.registry) - plans <= 1


def test_nan_struct_value_field_makes_one_plan() -> None:
    k = jax_kernel(K.struct_divide_kernel, num_outputs=2)
    x = jnp.asarray(X)
    plans = len(_registry.registry)
    for s in _nans():
        by_scale, by_v = k(x, {"scale": s, "v": (s, 2.0)})
        assert np.isnan(np.asarray(by_scale)).all()
        np.testing.assert_array_equal(by_v, X / np.float32(2.0))
    assert len(_registry.registry) - plans <= 1


# --- 0, 0.0 and False: normalised to the parameter's type --------------------------------------------------------


@pytest.mark.parametrize("one", [False, True], ids=["zero", "one"])
def test_int_float_bool_statics_are_normalised_to_the_parameter(one: bool) -> None:
    variants = [int(one), float(one), bool(one), np.int64(one), np.float32(one), np.bool_(one)]
    expected = X + np.float32(one) + np.float32(one) + np.float32(100.0 if one else 0.0)
    k = jax_kernel(K.mixed_kernel)
    x = jnp.asarray(X)
    for v in variants:
        (out,) = k(x, v, v, v)
        np.testing.assert_array_equal(out, expected)
        (out,) = jax.jit(lambda x, v=v: k(x, v, v, v))(x)
        np.testing.assert_array_equal(out, expected)
    K.SEEN.clear()
    c = jax_callable(K.record_statics)
    for v in variants:
        (out,) = c(x, v, v, v)
        np.testing.assert_array_equal(out, expected)
    assert [tuple(type(a) for a in seen) for seen in K.SEEN] == [(int, float, bool)] * len(variants)
    assert [(int(one), float(one), one)] * len(variants) == K.SEEN


def test_callable_receives_the_signed_zero_it_was_given() -> None:
    c = jax_callable(K.record_statics)
    x = jnp.asarray(X)
    K.SEEN.clear()
    for f in (-0.0, 0.0, -0.0):
        c(x, 0, f, False)
        jax.jit(lambda x, f=f: c(x, 0, f, False))(x)
    jax.effects_barrier()
    assert [math.copysign(1.0, seen[1]) for seen in K.SEEN] == [-1.0, -1.0, 1.0, 1.0, -1.0, -1.0]


# --- every float round-trips through the plan to the bits the kernel sees ------------------------------------------

_FLOATS = st.one_of(st.sampled_from(SPECIAL), st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True))


# six calls an example, each a new static value: a compile each
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=_FLOATS, b=_FLOATS)
def test_float32_static_round_trips_to_the_kernel(a: float, b: float) -> None:
    k = jax_kernel(K.write_f32_kernel)
    x = jnp.zeros(2, jnp.float32)
    for s in (a, b, a):
        with np.errstate(over="ignore"):
            expected = np.full(2, np.float32(s))
        (out,) = k(x, s)
        assert _same_float32(out, expected), (s, np.asarray(out))
        (out,) = jax.jit(lambda x, s=s: k(x, s))(x)
        assert _same_float32(out, expected), (s, np.asarray(out))


def _wp_write_f16(s: float) -> np.ndarray:
    out = wp.zeros(2, dtype=wp.float16, device="cpu")
    wp.launch(K.write_f16_kernel, dim=2, inputs=[wp.zeros(2, dtype=wp.float16, device="cpu"), s], outputs=[out])
    return out.numpy()


_HALF_FLOATS = st.one_of(
    st.sampled_from([*SPECIAL, 6e-8, -6e-8, 2.9e-8, 65504.0, -65504.0]),
    st.floats(min_value=-65504.0, max_value=65504.0, allow_subnormal=True),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(a=_HALF_FLOATS, b=_HALF_FLOATS)
def test_float16_static_round_trips_as_wp_launch_packs_it(a: float, b: float) -> None:
    k = jax_kernel(K.write_f16_kernel)
    x = jnp.zeros(2, jnp.float16)
    for s in (a, b, a):
        expected = _wp_write_f16(s)
        (out,) = k(x, s)
        out = np.asarray(out)
        if np.isnan(expected).any():
            assert np.isnan(out).all(), (s, out)
        else:
            assert out.view(np.uint16).tolist() == expected.view(np.uint16).tolist(), (s, out, expected)


# --- NumPy scalars: keyed by meaning like the Python numbers they hold ------------------------------------------------
# An eager call keys its executable by its static values (`_eager._freeze`); a NumPy float kept as it is there would
# compare by NumPy equality (np.float32(-0.0) == np.float16(0.0)), so the second of two such calls would reuse the
# first one's executable and its baked-in value.

NP_FLOATS = (np.float16, np.float32, np.float64)


def _signed_zeros() -> list[Any]:
    """-0.0 and 0.0 of every NumPy float type and as Python floats, each sign following the other at least once."""
    return [t(v) for v in (0.0, -0.0, 0.0) for t in (*NP_FLOATS, float)] + [np.float32(-0.0), np.float64(0.0)]


def _float32_of(s: Any) -> np.float32:
    with np.errstate(over="ignore", under="ignore"):
        return np.float32(s)


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_numpy_signed_zero_divisors(mode: str) -> None:
    k = jax_kernel(K.divide_kernel)
    x = jnp.asarray(X)
    for s in _signed_zeros():
        (out,) = k(x, s) if mode == "eager" else jax.jit(lambda x, s=s: k(x, s))(x)
        expected = _divide_ref(_float32_of(s))
        assert np.signbit(expected[1]) == np.signbit(s)  # 1 / -0.0 is -inf
        np.testing.assert_array_equal(out, expected, err_msg=f"{type(s).__name__}({s})")


# subnormals of each type (float32 ones survive XLA's flush-to-zero: executors pack statics outside it), values that
# round to a signed zero in float32, and the largest half
_NP_VALUES = [
    np.float16(6e-8),
    np.float16(-6e-8),
    np.float16(-0.0),
    np.float16(65504.0),
    np.float32(1e-45),
    np.float32(-1e-45),
    np.float32(1e-40),
    np.float32(-0.0),
    np.float64(5e-324),
    np.float64(-5e-324),
    np.float64(1e-40),
    np.float64(-1e-40),
    np.float64(-0.0),
    np.float32(0.0),
]


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_numpy_float_statics_reach_the_kernel_bit_exact(mode: str) -> None:
    k = jax_kernel(K.write_f32_kernel)
    x = jnp.zeros(2, jnp.float32)
    for s in (*_NP_VALUES, *reversed(_NP_VALUES)):
        (out,) = k(x, s) if mode == "eager" else jax.jit(lambda x, s=s: k(x, s))(x)
        expected = np.full(2, _float32_of(s))
        assert _same_float32(out, expected), (type(s).__name__, s, np.asarray(out))


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_numpy_half_statics_reach_the_kernel_bit_exact(mode: str) -> None:
    k = jax_kernel(K.write_f16_kernel)
    x = jnp.zeros(2, jnp.float16)
    values = [np.float16(6e-8), np.float16(-0.0), np.float16(0.0), np.float32(-0.0), np.float64(0.0), np.float16(-6e-8)]
    for s in (*values, *reversed(values)):
        (out,) = k(x, s) if mode == "eager" else jax.jit(lambda x, s=s: k(x, s))(x)
        expected = _wp_write_f16(s.item())
        assert np.asarray(out).view(np.uint16).tolist() == expected.view(np.uint16).tolist(), (s, np.asarray(out))
        assert expected.view(np.uint16)[0] == np.float16(s).view(np.uint16)  # the reference is NumPy's rounding


@pytest.mark.parametrize("dtype", NP_FLOATS)
def test_numpy_nan_static_makes_one_plan_and_one_eager_executable(dtype: type) -> None:
    k = jax_kernel(K.write_f32_kernel)
    x = jnp.zeros(3, jnp.float32)
    executable = _eager._executables.get(k)
    plans, executables = len(_registry.registry), executable._cache_size()
    for s in _nans():
        (out,) = k(x, dtype(s))
        assert np.isnan(np.asarray(out)).all()
        (out,) = jax.jit(lambda x, s=s: k(x, dtype(s)))(x)
        assert np.isnan(np.asarray(out)).all()
    assert len(_registry.registry) - plans <= 1
    assert executable._cache_size() - executables <= 1


# (n, f, b) for mixed_kernel: NumPy ints, floats and bools next to the Python numbers they equal, values alternating
_MIXED = [
    (0, 0.0, False),
    (np.int32(0), np.float32(-0.0), np.bool_(False)),
    (np.int64(3), np.float16(0.5), np.bool_(True)),
    (3, 0.5, True),
    (np.uint8(3), np.float64(0.5), True),
    (True, np.float32(1.0), np.bool_(True)),
    (np.bool_(True), 1.0, 1),
    (np.int8(-2), np.float32(1e-45), np.float32(1.0)),
    (-2, np.float64(-0.0), np.int64(0)),
    (np.int16(0), np.float16(0.0), np.float64(0.0)),
]


def _mixed_ref(n: Any, f: Any, b: Any) -> np.ndarray:
    return X + np.float32(int(n)) + _float32_of(f) + np.float32(100.0 if bool(b) else 0.0)


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_numpy_ints_floats_and_bools_next_to_python_ones(mode: str) -> None:
    k = jax_kernel(K.mixed_kernel)
    c = jax_callable(K.record_statics)
    x = jnp.asarray(X)
    K.SEEN.clear()
    for args in (*_MIXED, *reversed(_MIXED)):
        for m in (k, c):
            (out,) = m(x, *args) if mode == "eager" else jax.jit(lambda x, m=m, args=args: m(x, *args))(x)
            np.testing.assert_array_equal(out, _mixed_ref(*args), err_msg=f"{m.__class__.__name__}{args}")
    jax.effects_barrier()
    expected = [(int(n), float(_float32_of(f)), bool(b)) for n, f, b in (*_MIXED, *reversed(_MIXED))]
    assert [(n, f, b) for n, f, b in K.SEEN] == expected
    assert all(math.copysign(1.0, f) == math.copysign(1.0, e[1]) for (_, f, _), e in zip(K.SEEN, expected, strict=True))


# --- long double statics: no Warp or JAX dtype, refused with what to pass ----------------------------------------------

_LONG_DOUBLES = [
    np.longdouble(2.0),
    np.longdouble(1) / np.longdouble(3),
    np.clongdouble(2.0),
    np.array(2, np.longdouble),
]
_LONG_DOUBLE_HINT = r"long double .*has no Warp or JAX dtype\. Pass a Python float or np\.float64"


@pytest.mark.parametrize("mode", ["eager", "jit"])
@pytest.mark.parametrize("value", _LONG_DOUBLES, ids=["exact", "inexact", "complex", "0-d array"])
def test_long_double_statics_are_refused_naming_the_argument(mode: str, value: Any) -> None:
    k, c = jax_kernel(K.divide_kernel), jax_callable(K.record_statics)
    x = jnp.asarray(X)
    (out,) = k(x, 2.0)  # a Python float of the same value first: no cached executable may take the long double
    np.testing.assert_array_equal(out, X / np.float32(2.0))
    with pytest.raises(TypeError, match=r"kernel 'divide_kernel': scalar argument 's' got np\.c?longdouble"):
        k(x, value) if mode == "eager" else jax.jit(lambda x: k(x, value))(x)
    with pytest.raises(TypeError, match=rf"record_statics: scalar argument 'f' got .*{_LONG_DOUBLE_HINT}"):
        c(x, 1, value, True) if mode == "eager" else jax.jit(lambda x: c(x, 1, value, True))(x)


def test_long_double_statics_work_as_the_float64_the_message_says() -> None:
    (out,) = jax_kernel(K.divide_kernel)(jnp.asarray(X), float(np.longdouble(1) / np.longdouble(3)))
    np.testing.assert_array_equal(out, X / np.float32(1 / 3))


@pytest.mark.parametrize(
    ("field", "value"),
    [("scale", np.longdouble(2.0)), ("scale", np.clongdouble(2.0)), ("v", (np.longdouble(1.0), 2.0))],
    ids=["longdouble", "clongdouble", "vector item"],
)
def test_long_double_struct_value_fields_are_refused_naming_the_field(field: str, value: Any) -> None:
    p = {"scale": 2.0, "v": (1.0, 2.0), field: value}
    with pytest.raises(TypeError, match=rf"struct field 'p\.{field}' got .*{_LONG_DOUBLE_HINT}"):
        jax_kernel(K.struct_divide_kernel, num_outputs=2)(jnp.asarray(X), p)


@pytest.mark.x64
def test_long_double_statics_are_refused_for_float64_parameters() -> None:
    a = jnp.arange(3.0, dtype=jnp.float64)
    k = jax_kernel(k64.scale_sum_square64)
    with pytest.raises(TypeError, match=rf"scalar argument 's' got np\.longdouble\('2\.0'\); {_LONG_DOUBLE_HINT}"):
        k(a, a, np.longdouble(2.0))
    np.testing.assert_array_equal(k(a, a, np.float64(2.0))[0], (2 * np.asarray(a) + np.asarray(a)) ** 2)


# --- user callables: what a closure captures compares by value, or the rebuild warns -----------------------------------
#
# A module option holding a function (arg_types_factory, jvp, vjp, a jax_callable's function) is static: a model that
# builds its modules afresh retraces unless the function compares equal to the last build's. Captured closures and
# partials compare by value, level by level; a captured object that compares by identity (or an unhashable one) makes
# every rebuilt module differ, and the second build warns, naming the option, the closure and the captured value.


class _Plain:
    """A class without ``__eq__``: its instances compare by identity."""

    def arg_types(self, a_dtype: Any, b_dtype: Any) -> list[Any]:
        return k64.generic_add_arg_types_list(a_dtype, b_dtype)


_LONG_LIVED = _Plain()


def _count_traces(factory: Any, n: int = 3) -> int:
    """How many times a model holding a generic kernel with ``arg_types_factory=factory()``, rebuilt ``n`` times,
    traces."""
    return count_traces(lambda: jax_kernel(k64.generic_add_kernel, arg_types_factory=factory()), n)


@pytest.fixture
def fresh_warnings(monkeypatch: pytest.MonkeyPatch) -> None:
    """A process that has not warned yet (the warning is once per process and option) nor seen a closure."""
    monkeypatch.setattr(_option_warnings, "_warned", set())
    monkeypatch.setattr(_value_callables, "_nested_seen", {})


def _over_closure() -> Any:
    g = lambda a, b: k64.generic_add_arg_types_list(a, b)  # noqa: E731 - a new closure at every call
    return lambda a, b: g(a, b)


def _over_closure_over_constants(scale: Any) -> Any:
    def g(a: Any, b: Any) -> list[Any]:
        assert scale
        return k64.generic_add_arg_types_list(a, b)

    return lambda a, b: g(a, b)


def _recursive() -> Any:
    def factory(a: Any, b: Any, n: int = 1) -> list[Any]:
        return factory(a, b, n - 1) if n else k64.generic_add_arg_types_list(a, b)

    return factory


def _nested(levels: int) -> Any:
    f = lambda a, b: k64.generic_add_arg_types_list(a, b)  # noqa: E731
    for _ in range(levels):
        f = (lambda g: lambda a, b: g(a, b))(f)
    return f


def _over_partial() -> Any:
    p = functools.partial(k64.generic_add_arg_types_list)
    return lambda a, b: p(a, b)


def _partial_of_closure() -> Any:
    return functools.partial(lambda pad, a, b: k64.generic_add_arg_types_list(a, b), 1)


def _over_long_lived() -> Any:
    kernel, func, obj, method = k64.generic_add_kernel, kr.half_square, _LONG_LIVED, _LONG_LIVED.arg_types
    return lambda a, b: (kernel, func, obj, method(a, b))[-1]


def _over_fresh_object() -> Any:
    token = object()
    return lambda a, b: (token, k64.generic_add_arg_types_list(a, b))[1]


def _over_fresh_instance() -> Any:
    helper = _Plain()
    return lambda a, b: helper.arg_types(a, b)


def _over_fresh_bound_method() -> Any:
    arg_types = _Plain().arg_types
    return lambda a, b: arg_types(a, b)


def _over_closure_over_fresh_instance() -> Any:
    helper = _Plain()
    inner = lambda a, b: helper.arg_types(a, b)  # noqa: E731
    return lambda a, b: inner(a, b)


def _over_tuple_with_fresh_instance() -> Any:
    pair = (2, _Plain())
    return lambda a, b: pair[1].arg_types(a, b)


def _partial_of_fresh_instance() -> Any:
    return functools.partial(lambda helper, a, b: helper.arg_types(a, b), _Plain())


def _over_closure_over_list() -> Any:
    table = [k64.generic_add_arg_types_list]
    inner = lambda a, b: table[0](a, b)  # noqa: E731
    return lambda a, b: inner(a, b)


_COMPARED_BY_VALUE = {
    "closure over a closure": _over_closure,
    "closure over a closure over constants": lambda: _over_closure_over_constants((1, 2.5, "s")),
    "recursive closure": _recursive,
    f"{_value_callables._CAPTURE_DEPTH} closures deep": lambda: _nested(_value_callables._CAPTURE_DEPTH - 1),
    "closure over a partial": _over_partial,
    "partial of a closure": _partial_of_closure,
    "closure over long-lived objects": _over_long_lived,
}


@pytest.mark.parametrize("factory", _COMPARED_BY_VALUE.values(), ids=_COMPARED_BY_VALUE.keys())
def test_captured_closures_and_long_lived_objects_compare_by_value(fresh_warnings: None, factory: Any) -> None:
    assert value_callable(factory()) == value_callable(factory())
    assert hash(value_callable(factory())) == hash(value_callable(factory()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no rebuild warning
        assert _count_traces(factory) == 1


def test_captured_closures_over_other_values_differ() -> None:
    for a, b in [(1, 1.0), (1, True), (0.0, -0.0), (2, 3)]:
        assert value_callable(_over_closure_over_constants(a)) != value_callable(_over_closure_over_constants(b))
    assert value_callable(_over_closure_over_constants(math.nan)) == value_callable(
        _over_closure_over_constants(math.nan)
    )
    assert value_callable(_over_closure()) != value_callable(_over_closure_over_constants(1))
    assert value_callable(functools.partial(_scaled, 1)) != value_callable(functools.partial(_scaled, True))


def _scaled(c: Any, x: Any) -> Any:
    return x * c


# The warned cases: (factory, the captured value's path, what it is).
_COMPARED_BY_IDENTITY = {
    "fresh object()": (_over_fresh_object, "'token'", "an instance of object, compared by identity"),
    "fresh instance": (_over_fresh_instance, "'helper'", "an instance of _Plain, compared by identity"),
    "fresh bound method": (_over_fresh_bound_method, "'arg_types'", "a method bound to a _Plain object"),
    "closure over a fresh instance": (
        _over_closure_over_fresh_instance,
        "'inner' -> 'helper'",
        "an instance of _Plain",
    ),
    "tuple with a fresh instance": (_over_tuple_with_fresh_instance, "'pair'[1]", "an instance of _Plain"),
    "partial of a fresh instance": (_partial_of_fresh_instance, "args[0]", "an instance of _Plain"),
    "too deep": (
        lambda: _nested(_value_callables._CAPTURE_DEPTH + 1),
        " -> ".join(["'g'"] * (_value_callables._CAPTURE_DEPTH + 1)),
        f"a function more than {_value_callables._CAPTURE_DEPTH} closures deep",
    ),
    "closure over a closure over a list": (_over_closure_over_list, "'inner' -> 'table'", "an unhashable list"),
}


@pytest.mark.parametrize(("factory", "path", "what"), _COMPARED_BY_IDENTITY.values(), ids=_COMPARED_BY_IDENTITY.keys())
def test_captured_values_compared_by_identity_retrace_and_warn_naming_them(
    fresh_warnings: None, factory: Any, path: str, what: str
) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert _count_traces(factory) == 3  # every rebuild retraces: what the warning is about
    messages = [str(w.message) for w in caught if "arg_types_factory" in str(w.message)]
    assert len(messages) == 1, messages
    assert all(w.category is UserWarning for w in caught if "arg_types_factory" in str(w.message))
    message = messages[0]
    assert message.startswith("jax_kernel(): arg_types_factory is a new ")
    qualname = getattr(factory(), "__qualname__", None) or factory().func.__qualname__
    assert qualname in message
    assert f"capturing {path} ({what}" in message
    assert "jax.jit / eqx.filter_jit retrace at every rebuild" in message
    assert "module level" in message
    assert "functools.partial with hashable arguments" in message


def test_identity_warning_says_to_reuse_the_object(fresh_warnings: None) -> None:
    with pytest.warns(UserWarning, match=r"'helper' .*Create that object once and reuse it .*frozen dataclass"):
        _count_traces(_over_fresh_instance, n=2)


def test_identity_warning_needs_a_live_earlier_build(fresh_warnings: None) -> None:
    # Without jit nothing holds the last module: a rebuild with a new object retraces nothing, and does not warn.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(3):
            jax_kernel(k64.generic_add_kernel, arg_types_factory=_over_fresh_instance())
            gc.collect()
    # With both alive, the second build warns, once.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept = [jax_kernel(k64.generic_add_kernel, arg_types_factory=_over_fresh_instance()) for _ in range(3)]
    assert len([w for w in caught if "'helper'" in str(w.message)]) == 1
    assert kept[0] != kept[1]


@pytest.mark.parametrize("option", ["jvp", "func"])
def test_identity_warning_names_each_option(fresh_warnings: None, option: str) -> None:
    def rule() -> Any:
        helper = _Plain()
        return lambda x, t: (t, helper)[:1]

    def func() -> Any:
        helper = _Plain()

        def double(x: wp.array(dtype=float), y: wp.array(dtype=float)) -> None:  # type: ignore[valid-type]
            assert helper is not None

        return double

    build = (lambda: jax_kernel(k.triple_kernel, jvp=rule())) if option == "jvp" else (lambda: jax_callable(func()))
    first = build()
    with pytest.warns(UserWarning, match=rf"\(\): {option} is a new closure \(.*\) capturing 'helper' \(an instance"):
        second = build()
    assert first != second
