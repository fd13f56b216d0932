"""Hostile input: the values passed: arrays, argument counts and scalars.

Valid calls on random shapes (size 0 included), NumPy or JAX inputs, eager or jit, must match NumPy and leave the inputs
intact; malformed array arguments (a wrong dtype, 0-D to 7-D, wrong vector/matrix inner dims, non-arrays, look-alikes
such as ``wp.array``), wrong argument counts and scalar parameters of every kind (Python and NumPy numbers, 0-D and
1-element arrays, JAX and traced values, out-of-range integers) must be used right or refused with a
``TypeError``/``ValueError`` naming the argument. The modules, their NumPy references and the checks are in
``tests/support/hostile.py``.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from hypothesis import assume, given
from hypothesis import strategies as st

from jarp.warp import jax_callable, jax_kernel
from tests.support import kernels_hostile as kh
from tests.support.hostile import (
    CASES,
    ERRORS,
    F32,
    KINDS,
    Arr,
    Scalar,
    _no_hang,  # noqa: F401 (autouse fixture)
    _randn,
    _ref_knobs,
    as_form,
    assert_unchanged,
    call,
    check_error,
    check_result,
    dim,
    draw_valid,
    fuzz,
    kinds_of,
    quoted,
    snapshot,
)

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)


# ======================================================================================================================
# Valid calls: random shapes (size 0 included), NumPy or JAX inputs, eager or jit -> the NumPy answer, inputs intact
# ======================================================================================================================


@pytest.mark.parametrize("name", list(CASES))
@fuzz(max_examples=10)
@given(data=st.data())
def test_valid_calls_match_numpy_and_leave_inputs_intact(name, data):
    case = CASES[name]
    kind = data.draw(st.sampled_from(kinds_of(case)), label="kind")
    form = data.draw(st.sampled_from(["numpy", "jax"]), label="form")
    mode = data.draw(st.sampled_from(["eager", "jit"]), label="mode")
    arrays, _ = draw_valid(data, case)
    args = case.merge(as_form(a, form) for a in arrays)
    snap = snapshot(args)
    out = call(case.module(kind), args, mode)
    check_result(out, [case.expected(arrays)])
    assert_unchanged(snap)


# ======================================================================================================================
# Malformed array arguments: wrong dtype, ndim (0-D to 7-D), inner dims, non-arrays -> TypeError naming the argument
# ======================================================================================================================

DTYPES = [
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.uint64,
    np.float16,
    np.float32,
    np.float64,
    np.bool_,
    np.complex64,
    np.complex128,
    jnp.bfloat16,
]
NON_ARRAYS = [None, "a", b"a", 1.5, 3, True, 2j, [1.0, 2.0], [1, 2], (1.0,), {"a": 1}, object(), Ellipsis, slice(3)]


@st.composite
def malformed(draw, spec: Arr, good_shape: tuple[int, ...]) -> tuple[Any, str]:
    """A value for ``spec`` that is wrong in one way, and how: "dtype", "ndim", "inner" or "object"."""
    how = draw(st.sampled_from(["dtype", "ndim", "inner", "object"] if spec.inner else ["dtype", "ndim", "object"]))
    if how == "object":
        return draw(st.sampled_from(NON_ARRAYS)), how
    dtype, shape = spec.dtype, good_shape
    if how == "dtype":
        dtype = np.dtype(draw(st.sampled_from([d for d in DTYPES if np.dtype(d) != spec.dtype])))
    elif how == "ndim":
        ndim = draw(st.integers(0, 7).filter(lambda k: k != spec.ndim))
        shape = tuple(draw(st.lists(st.integers(0, 3), min_size=ndim, max_size=ndim)))
    else:
        k = len(spec.inner)
        inner = tuple(draw(st.lists(st.integers(0, 5), min_size=k, max_size=k)))
        shape = good_shape[: spec.warp_ndim] + inner
    value = np.zeros(shape, dtype)
    if draw(st.booleans()):
        value = jnp.asarray(value)  # with x64 off, JAX stores 64-bit types as 32-bit ones
    return value, how


def is_valid_array(spec: Arr, value: Any) -> bool:
    if not (hasattr(value, "shape") and hasattr(value, "dtype")):
        return False
    shape = tuple(value.shape)
    return (
        np.dtype(value.dtype) == spec.dtype
        and len(shape) == spec.ndim
        and (not spec.inner or shape[spec.warp_ndim :] == spec.inner)
    )


@pytest.mark.parametrize("name", list(CASES))
@fuzz(max_examples=12)
@given(data=st.data())
def test_malformed_array_arguments_are_refused_naming_the_argument(name, data):
    case = CASES[name]
    kind = data.draw(st.sampled_from(kinds_of(case)), label="kind")
    mode = data.draw(st.sampled_from(["eager", "jit"]), label="mode")
    arrays, _ = draw_valid(data, case)
    k = data.draw(st.integers(0, len(arrays) - 1), label="which")
    spec = case.arrays[k]
    bad, how = data.draw(malformed(spec, arrays[k].shape), label="bad")
    assume(not is_valid_array(spec, bad))  # a 64-bit type that JAX stored as the expected 32-bit one
    args_arrays = [jnp.asarray(a) for a in arrays]
    args_arrays[k] = bad
    args = case.merge(args_arrays)
    snap = snapshot(args)
    with pytest.raises(ERRORS) as excinfo:
        call(case.module(kind), args, mode)
    msg = check_error(excinfo, quoted(spec.name))
    if how == "dtype":
        assert str(np.dtype(bad.dtype)) in msg, msg
    if how in ("ndim", "inner"):
        assert str(tuple(bad.shape)) in msg, msg
    assert_unchanged(snap)


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("ndim", [5, 6, 7])
def test_arrays_with_more_dims_than_warp_allows_are_refused(name, ndim):
    # Warp arrays have at most 4 dims; JAX arrays may carry up to 2 more for vector/matrix elements (mat4d: 6 dims)
    case = CASES[name]
    rng = np.random.default_rng(ndim)
    arrays = case.fill(rng, [(1,) * spec.warp_ndim + spec.inner for spec in case.arrays])
    for k, spec in enumerate(case.arrays):
        if spec.ndim == ndim:
            continue
        bad = list(map(jnp.asarray, arrays))
        bad[k] = jnp.zeros((1,) * ndim, spec.dtype)
        for kind in kinds_of(case):
            with pytest.raises(TypeError) as excinfo:
                case.module(kind)(*case.merge(bad))
            msg = check_error(excinfo, quoted(spec.name))
            assert f"must have {spec.ndim} dims" in msg, msg
            assert str((1,) * ndim) in msg, msg


@fuzz(max_examples=12)
@given(data=st.data())
def test_a_4d_array_of_matrices_is_six_dims_in_jax_and_works(data):
    # the largest Warp array (4 dims) of mat22: 6-D in JAX, 7-D under vmap; size-0 dims included
    case = CASES["mat4d"]
    arrays, rng = draw_valid(data, case)
    (m,) = arrays
    mode = data.draw(st.sampled_from(["eager", "jit", "vmap"]), label="mode")
    if mode == "vmap":
        batch = data.draw(st.integers(0, 2), label="batch")
        axis = data.draw(st.integers(-7, 6), label="axis")
        stacked = np.stack([_randn(rng, m.shape) for _ in range(batch)]) if batch else np.zeros((0, *m.shape), F32)
        x = jnp.asarray(np.moveaxis(stacked, 0, axis))
        method = data.draw(st.sampled_from(["sequential", "broadcast_all"]), label="method")
        (out,) = jax.vmap(partial(case.kernel, vmap_method=method), in_axes=axis)(x)
        assert out.shape == (batch, *m.shape)
        np.testing.assert_array_equal(out, np.swapaxes(stacked, -1, -2))
    else:
        check_result(call(case.kernel, [jnp.asarray(m)], mode), [np.swapaxes(m, -1, -2)])


@pytest.mark.parametrize("kind", KINDS)
def test_parameters_with_more_than_4_warp_dims_are_refused(kind):
    def build_and_call():
        if kind == "kernel":
            return jax_kernel(kh.five_d_kernel, output_dims=3)(jnp.ones((2, 1, 1, 1, 3)), launch_dims=3)
        return jax_callable(kh.five_d_func)(jnp.ones((2, 1, 1, 1, 3)))

    with pytest.raises(ERRORS) as excinfo:
        build_and_call()
    check_error(excinfo, "'a'")


# ======================================================================================================================
# Argument counts
# ======================================================================================================================


@pytest.mark.parametrize("name", list(CASES))
@fuzz(max_examples=8)
@given(count=st.integers(0, 7), data=st.data())
def test_wrong_argument_count_is_refused_with_the_expected_count(name, count, data):
    case = CASES[name]
    assume(count != len(case.inputs))
    kind = data.draw(st.sampled_from(kinds_of(case)), label="kind")
    arrays, _ = draw_valid(data, case)
    args = case.merge(jnp.asarray(a) for a in arrays)
    args = (args * 8)[:count]
    with pytest.raises(TypeError) as excinfo:
        case.module(kind)(*args)
    msg = str(excinfo.value)
    assert f"takes {len(case.inputs)} input(s)" in msg, msg
    assert f"got {count}" in msg, msg
    assert all(p.name in msg for p in case.inputs), msg


def test_inputs_are_positional_only():
    case = CASES["knobs"]
    for kind in KINDS:
        with pytest.raises(TypeError, match="gain"):
            case.module(kind)(jnp.ones(3), gain=1.0, shift=0, flip=False)


# ======================================================================================================================
# Scalar parameters: Python numbers of every kind, NumPy scalars and 0-D/1-element arrays, JAX values (runtime scalars
# for jax_kernel, refused by jax_callable), traced values
# ======================================================================================================================

INT32 = np.iinfo(np.int32)

FLOATS = st.one_of(
    st.floats(-1e3, 1e3, width=32), st.sampled_from([0.0, -0.0, float("inf"), float("-inf"), float("nan")])
)
INTS = st.integers(INT32.min, INT32.max)
STATIC_POOL = st.one_of(
    FLOATS,
    INTS,
    st.booleans(),
    st.integers(-5, 5).map(float),  # integral floats
    st.complex_numbers(max_magnitude=4),
    st.sampled_from([None, "1", b"1", [1.0], (1,), {"gain": 1}, object(), Ellipsis]),
    st.sampled_from([np.float32, np.float64, np.float16, np.int8, np.int32, np.int64, np.uint16, np.bool_]).flatmap(
        lambda t: st.integers(0, 3).map(t)
    ),
    # NumPy floats of the values a cache keyed by NumPy equality gets wrong: signed zeros, NaN, subnormals
    st.sampled_from([np.float16, np.float32, np.float64]).flatmap(
        lambda t: st.sampled_from([-0.0, 0.0, float("nan"), float("-inf"), 1e-45, -6e-8, 1e-40, -5e-324]).map(t)
    ),
    st.sampled_from([np.complex64(1 + 1j), np.str_("2")]),
    st.integers(-3, 3).map(lambda v: np.asarray(v, np.int32)),  # 0-D NumPy array: static
    st.floats(-3, 3, width=32).map(lambda v: np.asarray(v, np.float32)),
    st.sampled_from([np.ones(1, np.float32), np.ones((1, 1), np.int32), np.zeros(0, np.float32)]),
)
RUNTIME_TYPE = {"float": jnp.float32, "int": jnp.int32, "bool": jnp.bool_}


def runtime_pool(kind: str, valid: bool) -> st.SearchStrategy:
    """JAX scalars for a parameter of ``kind``: of its dtype (valid runtime scalars) or not (always refused)."""
    right = RUNTIME_TYPE[kind]
    wrong = [t for t in (jnp.float32, jnp.int32, jnp.bool_, jnp.uint8, jnp.float16) if t is not right]
    bad = st.one_of(
        st.sampled_from(wrong).map(lambda t: jnp.ones((), t)),
        st.sampled_from([(2,), (1, 1), (0,)]).map(lambda s: jnp.ones(s, right)),
    )
    if not valid:
        return bad
    return st.one_of(bad, st.sampled_from([(), (1,)]).map(lambda s: jnp.full(s, 0.75, right)))


def scalar_oracle(kind: str, value: Any, runtime_ok: bool) -> tuple[bool, Any]:
    """(ok, the value the kernel computes with) for a scalar parameter of ``kind`` given ``value``."""
    if isinstance(value, jax.Array):
        if not runtime_ok or value.dtype != RUNTIME_TYPE[kind] or value.shape not in ((), (1,)):
            return False, None
        return True, np.asarray(value).reshape(()).item()
    if isinstance(value, (np.ndarray, np.generic)):
        if np.ndim(value) != 0:
            return False, None
        value = value.item()
    if isinstance(value, complex) or not isinstance(value, (bool, int, float)):
        return False, None
    if kind == "float":
        return True, float(value)
    if kind == "bool":
        return True, bool(value)
    if isinstance(value, float) and not value.is_integer():
        return False, None
    return True, int(value)


@fuzz(max_examples=50)
@given(data=st.data())
def test_scalar_arguments_of_every_kind(data):
    case = CASES["knobs"]
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    mode = data.draw(st.sampled_from(["eager", "jit"]), label="mode")
    runtime_ok = kind == "kernel"
    # valid runtime (JAX) scalars only for `gain`, so that one kernel variant is ever compiled; wrong ones for all
    values = {
        p.name: data.draw(st.one_of(STATIC_POOL, runtime_pool(p.kind, p.name == "gain")), label=p.name)
        for p in case.inputs
        if isinstance(p, Scalar)
    }
    scalars = [p for p in case.inputs if isinstance(p, Scalar)]
    verdicts = {p.name: scalar_oracle(p.kind, values[p.name], runtime_ok) for p in scalars}
    # jax_callable given a concrete (untraced) JAX scalar: refused as "traced" when the call goes through the cached
    # eager executable, taken as a static number when it is traced directly (a NumPy array among the arguments
    # sends it there); either is fine, as long as an accepted value is used right
    lenient = {p.name: scalar_oracle(p.kind, _numpy_if_concrete(values[p.name]), runtime_ok) for p in scalars}
    (a,) = case.fill(np.random.default_rng(0), [(data.draw(dim, label="n"),)])
    args = case.merge([jnp.asarray(a)], values)
    bad = [name for name, (ok, _) in verdicts.items() if not ok]
    may_pass = kind == "callable" and mode == "eager" and all(ok for ok, _ in lenient.values())
    try:
        out, error = call(case.module(kind), args, mode), None
    except ERRORS as e:
        out, error = None, f"{type(e).__name__}: {e}"
    if error is not None:
        assert bad, f"refused valid scalars {values}: {error}"
        assert any(quoted(n) in error for n in bad), f"the message names none of {bad}: {error}"
        return
    assert not bad or may_pass, f"accepted invalid scalars {bad}: {values}"
    seen = {name: v for name, (_, v) in (lenient if bad else verdicts).items()}
    # a fused multiply-add may round gain * a + shift once instead of twice
    atol = 1e-5 + 1e-6 * (4 * abs(seen["gain"]) + abs(seen["shift"])) if math.isfinite(seen["gain"]) else 0
    check_result(out, [case.expected([a], seen)], atol=atol)


def _numpy_if_concrete(value: Any) -> Any:
    return np.asarray(value) if isinstance(value, jax.Array) else value


def test_traced_scalars_are_runtime_for_jax_kernel_and_refused_by_jax_callable():
    case = CASES["knobs"]
    a = np.arange(4, dtype=np.float32)
    f = jax.jit(lambda a, g: case.kernel(a, g, 3, False))
    check_result(f(jnp.asarray(a), jnp.float32(0.5)), [_ref_knobs(a, 0.5, 3, False)])
    with pytest.raises(TypeError) as excinfo:
        jax.jit(lambda a, s: case.kernel(a, 1.0, s, False))(jnp.asarray(a), jnp.float32(3.0))
    check_error(excinfo, "'shift'")
    for p in ("gain", "shift", "flip"):
        values = {"gain": 1.0, "shift": 0, "flip": False}

        def f(a, v, p=p, values=values):
            return case.func(*case.merge([a], {**values, p: v}))

        with pytest.raises(TypeError) as excinfo:
            jax.jit(f)(jnp.asarray(a), values[p])
        assert "traced" in check_error(excinfo, quoted(p))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("shift", [2**40, -(2**31) - 1, 2**31, np.int64(2**32 + 3), float(2**40)])
def test_integer_scalar_out_of_range_is_refused(kind, shift):
    case = CASES["knobs"]
    with pytest.raises(ERRORS) as excinfo:
        case.module(kind)(jnp.arange(3.0), 1.0, shift, False)
    check_error(excinfo, "'shift'")


# ======================================================================================================================
# Objects that look like arrays but are not JAX or NumPy arrays
# ======================================================================================================================


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("what", ["wp.array", "ShapeDtypeStruct"])
def test_array_lookalikes_are_refused_naming_the_argument(kind, what):
    value = wp.zeros(3, dtype=float) if what == "wp.array" else jax.ShapeDtypeStruct((3,), jnp.float32)
    with pytest.raises(ERRORS) as excinfo:
        CASES["affine"].module(kind)(value)
    check_error(excinfo, "'a'")
