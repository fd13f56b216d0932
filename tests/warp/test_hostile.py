"""Hostile input (issue 6): every call gives the right answer or a clear Python exception, never a crash or a hang.

Property-based tests throw random shapes (size-0 dims included), dtypes, ndims (0-D to 7-D), vector/matrix inner dims,
argument counts, NumPy and JAX inputs, Python scalars of the wrong kind, traced values, ``output_dims`` and
``launch_dims`` forms and ``vmap`` axes at `jax_kernel` and `jax_callable` modules of a few representative kernels
(``support/kernels_hostile.py``: elementwise, vec3 arrays, 2-D, a gather through indices, scalar parameters, an
in-out accumulator, a 4-D array of matrices). Each call must either

* return the right result (checked against NumPy), or
* raise a ``TypeError``/``ValueError`` whose message names the offending argument or option,

and must leave the caller's arrays bit-identical (in-out arguments included: XLA copies them, the caller keeps its own).

Some bad input cannot be caught by jarp: Warp kernels index raw memory and Warp does no bounds checks on the CPU
unless ``wp.config.mode == "debug"``. Such calls (an out-of-range index in a gather, a launch larger than the arrays it
reads, arrays of mismatched lengths, a launch whose rank differs from the kernel's ``wp.tid()``) run in subprocesses:
the tests document what happens and check only that the process ends in time without taking the test run down. In-process
tests only ever make calls that stay in bounds. Two such calls jarp does refuse (an output smaller than the launch of
a kernel that writes every thread's element, output dims whose element count overflows int64): their subprocesses must
raise a ``ValueError`` naming ``output_dims``.
"""

from __future__ import annotations

import ast
import faulthandler
import math
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from jarp.warp import jax_callable, jax_kernel
from tests.warp.support import kernels_hostile as kh

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)

ERRORS = (TypeError, ValueError)
HANG_LIMIT = 300  # seconds per test (first compiles included); a hang dumps every thread's stack and ends the run
SUBPROCESS_TIMEOUT = 240

fuzz = partial(
    settings,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


@pytest.fixture(autouse=True)
def _no_hang():
    """A call that never returns must not hang CI: dump all stacks and exit after HANG_LIMIT seconds."""
    faulthandler.dump_traceback_later(HANG_LIMIT, exit=True)
    yield
    faulthandler.cancel_dump_traceback_later()


# ======================================================================================================================
# The representative modules, their parameters and NumPy references
# ======================================================================================================================

F32, I32 = np.dtype(np.float32), np.dtype(np.int32)


@dataclass(frozen=True)
class Arr:
    """An array parameter as JAX sees it."""

    name: str
    dtype: np.dtype
    warp_ndim: int
    inner: tuple[int, ...] = ()

    @property
    def ndim(self) -> int:
        return self.warp_ndim + len(self.inner)


@dataclass(frozen=True)
class Scalar:
    """A scalar parameter: ``kind`` is "float", "int" or "bool"."""

    name: str
    kind: str
    default: Any


@dataclass(frozen=True)
class Case:
    """A kernel (and an annotated function launching it) with its inputs, its pure output and a NumPy reference.

    ``shapes(data)`` draws consistent valid shapes of the array inputs; ``fill(rng, shapes)`` makes valid values for
    them (in-range indices); ``ref(*inputs)`` is the NumPy result (the in-out value or the pure output).
    """

    name: str
    kernel: Any
    func: Any
    inputs: tuple[Arr | Scalar, ...]
    out: Arr | None
    tid_rank: int
    shapes: Callable[[Any], list[tuple[int, ...]]]
    fill: Callable[[np.random.Generator, list[tuple[int, ...]]], list[np.ndarray]]
    ref: Callable[..., np.ndarray]
    foldable: bool = True  # vmap_method="broadcast_all" is right for it (no reads of thread indices or shapes)
    in_out: tuple[str, ...] = field(default=())

    @property
    def arrays(self) -> list[Arr]:
        return [p for p in self.inputs if isinstance(p, Arr)]

    def module(self, kind: str, **options: Any) -> Any:
        if not options:
            return self.kernel if kind == "kernel" else self.func
        if kind == "kernel":
            return jax_kernel(self.kernel.kernel, in_out_argnames=self.in_out, **options)
        return jax_callable(self.func.func, in_out_argnames=self.in_out, **options)

    def merge(self, arrays: Iterable[Any], scalars: dict[str, Any] | None = None) -> list[Any]:
        """Interleave array inputs with scalar values (defaults unless given) in parameter order."""
        it = iter(arrays)
        scalars = scalars or {}
        return [next(it) if isinstance(p, Arr) else scalars.get(p.name, p.default) for p in self.inputs]

    def expected(self, arrays: list[np.ndarray], scalars: dict[str, Any] | None = None) -> np.ndarray:
        return self.ref(*self.merge(arrays, scalars))


def _randn(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    # quarter steps: exact in float32, so the references agree to the last bit but for fused multiply-adds
    return (rng.integers(-16, 17, size=shape) / 4).astype(np.float32)


dim = st.integers(0, 4)


def _one(data: Any) -> list[tuple[int, ...]]:
    return [(data.draw(dim, label="n"),)]


def _fill_plain(rng, shapes):
    return [_randn(rng, s) for s in shapes]


def _shapes_vec3(data):
    n = data.draw(dim, label="n")
    return [(n, 3), (n,)]


def _shapes_grid(data):
    return [(data.draw(dim, label="rows"), data.draw(dim, label="cols"))]


def _shapes_pick(data):
    n = data.draw(dim, label="n")
    t = data.draw(st.integers(0 if n == 0 else 1, 5), label="table")
    return [(n,), (t,)]


def _fill_pick(rng, shapes):
    (n,), (t,) = shapes
    # Warp indexes like Python: -t <= i < t is in range
    idx = rng.integers(-t, t, size=n).astype(np.int32) if t else np.zeros(0, np.int32)
    return [idx, _randn(rng, (t,))]


def _shapes_acc(data):
    n = data.draw(dim, label="n")
    return [(n,), (n,)]


def _shapes_mat4d(data):
    d = tuple(data.draw(st.integers(0, 2), label=f"d{i}") for i in range(4))
    return [(*d, 2, 2)]


def _ref_grid(g):
    i = np.arange(g.shape[0], dtype=np.float32)[:, None]
    j = np.arange(g.shape[1], dtype=np.float32)[None, :]
    return g + np.float32(10) * i - j


def _ref_knobs(a, gain, shift, flip):
    with np.errstate(invalid="ignore", over="ignore"):  # inf * 0
        v = np.float32(gain) * a + np.float32(shift)
    return -v if flip else v


CASES = {
    c.name: c
    for c in [
        Case(
            "affine",
            jax_kernel(kh.affine_kernel),
            jax_callable(kh.affine_func),
            (Arr("a", F32, 1),),
            Arr("out", F32, 1),
            1,
            _one,
            _fill_plain,
            lambda a: np.float32(2) * a + np.float32(1),
        ),
        Case(
            "vec3",
            jax_kernel(kh.weigh_vec3_kernel),
            jax_callable(kh.weigh_vec3_func),
            (Arr("p", F32, 1, (3,)), Arr("w", F32, 1)),
            Arr("out", F32, 1, (3,)),
            1,
            _shapes_vec3,
            _fill_plain,
            lambda p, w: w[:, None] * p,
        ),
        Case(
            "grid",
            jax_kernel(kh.grid_kernel),
            jax_callable(kh.grid_func),
            (Arr("g", F32, 2),),
            Arr("out", F32, 2),
            2,
            _shapes_grid,
            _fill_plain,
            _ref_grid,
            foldable=False,  # the values depend on the thread index, which folding shifts
        ),
        Case(
            "pick",
            jax_kernel(kh.pick_kernel),
            jax_callable(kh.pick_func),
            (Arr("idx", I32, 1), Arr("table", F32, 1)),
            Arr("out", F32, 1),
            1,
            _shapes_pick,
            _fill_pick,
            lambda idx, table: table[idx],
            foldable=False,  # gathers through indices into a per-slice table
        ),
        Case(
            "knobs",
            jax_kernel(kh.knobs_kernel),
            jax_callable(kh.knobs_func),
            (Arr("a", F32, 1), Scalar("gain", "float", 1.5), Scalar("shift", "int", -2), Scalar("flip", "bool", True)),
            Arr("out", F32, 1),
            1,
            _one,
            _fill_plain,
            _ref_knobs,
        ),
        Case(
            "accumulate",
            jax_kernel(kh.accumulate_kernel, in_out_argnames=["acc"]),
            jax_callable(kh.accumulate_func, in_out_argnames=["acc"]),
            (Arr("a", F32, 1), Arr("acc", F32, 1)),
            None,
            1,
            _shapes_acc,
            _fill_plain,
            lambda a, acc: acc + a,
            in_out=("acc",),
        ),
        Case(
            "mat4d",
            jax_kernel(kh.mat22_4d_kernel),
            None,
            (Arr("m", F32, 4, (2, 2)),),
            Arr("out", F32, 4, (2, 2)),
            4,
            _shapes_mat4d,
            _fill_plain,
            lambda m: np.swapaxes(m, -1, -2),
        ),
    ]
}
OUTPUT_CASES = [name for name, c in CASES.items() if c.out is not None]
KINDS = ["kernel", "callable"]


def kinds_of(case: Case) -> list[str]:
    return KINDS if case.func is not None else ["kernel"]


# ======================================================================================================================
# Helpers: calling in several ways, snapshots of the caller's arrays, checks of results and errors
# ======================================================================================================================


def as_form(x: np.ndarray, form: str) -> Any:
    """The caller's copy of an array input: a NumPy array or a JAX array (a fresh buffer either way)."""
    return np.array(x, copy=True) if form == "numpy" else jnp.asarray(np.array(x, copy=True))


def snapshot(values: Iterable[Any]) -> list[tuple[Any, bytes | None]]:
    out = []
    for v in values:
        if isinstance(v, (np.ndarray, jax.Array)):
            arr = np.asarray(v)
            out.append((v, (arr.dtype.str, arr.shape, arr.tobytes())))
        else:
            out.append((v, None))
    return out


def assert_unchanged(snap: list[tuple[Any, Any]]) -> None:
    for i, (v, before) in enumerate(snap):
        if before is None:
            continue
        arr = np.asarray(v)
        assert (arr.dtype.str, arr.shape, arr.tobytes()) == before, f"the call changed the caller's argument {i}"


def call(module: Any, args: list[Any], mode: str, **options: Any) -> Any:
    """Call ``module(*args, **options)`` eagerly or under ``jax.jit`` (JAX arrays become jit arguments, so they are
    traced; everything else, NumPy arrays included, is closed over and reaches the module as is)."""
    if mode == "eager":
        return module(*args, **options)
    traced = [i for i, a in enumerate(args) if isinstance(a, jax.Array)]

    def f(*xs):
        full = list(args)
        for i, x in zip(traced, xs, strict=True):
            full[i] = x
        return module(*full, **options)

    return jax.jit(f)(*(args[i] for i in traced))


def check_result(out: Any, expected: list[np.ndarray], atol: float = 1e-5) -> None:
    assert isinstance(out, tuple), f"modules return a tuple, got {type(out).__name__}"
    assert len(out) == len(expected)
    for got, want in zip(out, expected, strict=True):
        assert isinstance(got, jax.Array)
        assert got.shape == want.shape, (got.shape, want.shape)
        assert got.dtype == want.dtype, (got.dtype, want.dtype)
        np.testing.assert_allclose(np.asarray(got), want, rtol=1e-6, atol=atol, equal_nan=True)


def check_error(excinfo: pytest.ExceptionInfo, *names: str) -> str:
    """The exception is a TypeError/ValueError whose message names (at least) one of ``names``."""
    msg = str(excinfo.value)
    assert excinfo.type in ERRORS or issubclass(excinfo.type, ERRORS), f"{excinfo.type.__name__}: {msg}"
    assert any(n in msg for n in names), f"the message names none of {names}: {msg}"
    return msg


def quoted(name: str) -> str:
    return repr(name)


def draw_valid(data: Any, case: Case) -> tuple[list[np.ndarray], np.random.Generator]:
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    return case.fill(rng, case.shapes(data)), rng


def out_shape(case: Case, arrays: list[np.ndarray]) -> tuple[int, ...]:
    return case.expected(arrays).shape


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
# output_dims and launch_dims: random forms at construction and per call
# ======================================================================================================================

DIM_VALUES = st.one_of(
    st.integers(-3, 7),
    st.lists(st.integers(-2, 7), max_size=7).flatmap(lambda v: st.sampled_from([tuple(v), list(v)])),
    st.floats(-2, 7),
    st.text(max_size=3),
    st.sampled_from([None, (2.0,), ((2,),), [[1, 2]], object()]),
)


def near(dims: tuple[int, ...]) -> st.SearchStrategy:
    """Valid-looking forms around ``dims``: equal or larger in each axis, sometimes with the element dims (JAX)."""
    return st.lists(st.integers(0, 2), min_size=len(dims), max_size=len(dims)).map(
        lambda d: tuple(n + e for n, e in zip(dims, d, strict=True))
    )


def dims_form(warp_dims: tuple[int, ...], inner: tuple[int, ...]) -> st.SearchStrategy:
    good = near(warp_dims)
    forms = [good, good.map(lambda d: d + inner), good.map(list), DIM_VALUES]
    if len(warp_dims) == 1:
        forms.append(good.map(lambda d: d[0]))
    value = st.one_of(*forms)
    keys = st.sampled_from(["out", "zzz", "OUT", "a", ""])  # mixed-type keys: see the tests below
    return st.one_of(value, st.dictionaries(keys, value, max_size=3), value.map(lambda v: {"out": v}))


def as_dims(value: Any) -> tuple[int, ...] | None:
    """The dims an int or a list/tuple of ints stands for (None if it is anything else or negative)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        dims = (value,)
    elif isinstance(value, (list, tuple)) and all(isinstance(d, int) and not isinstance(d, bool) for d in value):
        dims = tuple(value)
    else:
        return None
    return dims if all(d >= 0 for d in dims) else None


def output_oracle(form: Any, spec: Arr) -> tuple[int, ...] | None:
    """The Warp dims of the output that ``form`` asks for, or None if the form is invalid."""
    if isinstance(form, dict):
        values = {k: as_dims(v) for k, v in form.items()}
        if any(v is None for v in values.values()) or set(form) != {spec.name}:
            return None
        dims = values[spec.name]
    else:
        dims = as_dims(form)
        if dims is None:
            return None
    if len(dims) == spec.warp_ndim:
        return dims
    if spec.inner and len(dims) == spec.ndim and dims[spec.warp_ndim :] == spec.inner:
        return dims[: spec.warp_ndim]
    return None


def place(ref: np.ndarray, launch: tuple[int, ...], dims: tuple[int, ...], inner: tuple[int, ...]) -> np.ndarray:
    """A zero-filled output of Warp dims ``dims`` holding the reference where the launch reached."""
    out = np.zeros(dims + inner, ref.dtype)
    reach = tuple(slice(0, n) for n in launch)
    out[reach] = ref[reach]
    return out


def covers(dims: tuple[int, ...], launch: tuple[int, ...]) -> bool:
    return len(dims) == len(launch) and all(d >= n for d, n in zip(dims, launch, strict=True))


@pytest.mark.parametrize("name", OUTPUT_CASES)
@fuzz(max_examples=18)
@given(data=st.data())
def test_output_dims_forms(name, data):
    case = CASES[name]
    kind = data.draw(st.sampled_from(kinds_of(case)), label="kind")
    where = data.draw(st.sampled_from(["call", "module"]), label="where")
    arrays, _ = draw_valid(data, case)
    launch = arrays[0].shape[: case.arrays[0].warp_ndim]
    form = data.draw(dims_form(launch, case.out.inner), label="output_dims")
    dims = launch if form is None else output_oracle(form, case.out)  # None: the default
    # a valid output smaller than the launch is written out of bounds by these kernels: see the subprocess tests
    assume(dims is None or covers(dims, launch))
    args = case.merge(jnp.asarray(a) for a in arrays)

    def run():
        if where == "call":
            return case.module(kind)(*args, output_dims=form)
        return case.module(kind, output_dims=form)(*args)

    if dims is None:
        with pytest.raises(ERRORS) as excinfo:
            run()
        check_error(excinfo, "output_dims")
    else:
        check_result(run(), [place(case.expected(arrays), launch, dims, case.out.inner)])


def launch_oracle(form: Any) -> tuple[int, ...] | None:
    dims = as_dims(form)
    return dims if dims is not None and 1 <= len(dims) <= 4 else None


@pytest.mark.parametrize("name", OUTPUT_CASES)
@fuzz(max_examples=18)
@given(data=st.data())
def test_launch_dims_forms(name, data):
    case = CASES[name]
    where = data.draw(st.sampled_from(["call", "module"]), label="where")
    arrays, _ = draw_valid(data, case)
    shape = arrays[0].shape[: case.arrays[0].warp_ndim]
    # launches within the first input (so every read is in bounds), or anything
    within = st.lists(st.integers(0, 4), min_size=len(shape), max_size=len(shape)).map(
        lambda d: tuple(min(a, b) for a, b in zip(d, shape, strict=True))
    )
    forms = [within, within.map(list), DIM_VALUES]
    if len(shape) == 1:
        forms.append(within.map(lambda d: d[0]))
    form = data.draw(st.one_of(*forms), label="launch_dims")
    out_form = data.draw(st.one_of(st.none(), dims_form(shape, case.out.inner)), label="output_dims")
    launch = shape if form is None else launch_oracle(form)  # None: the default
    dims = None if launch is None else output_oracle(launch if out_form is None else out_form, case.out)
    if launch is not None and out_form is None and len(launch) < case.out.warp_ndim:
        # Warp's rule: an output with more array dims than the launch takes the first input's shape of its rank
        same_rank = [a for a, spec in zip(arrays, case.arrays, strict=False) if spec.warp_ndim == case.out.warp_ndim]
        dims = tuple(same_rank[0].shape[: case.out.warp_ndim]) if same_rank else dims
    if launch is not None and dims is not None:
        # only launches that stay in bounds run here: the kernel's rank, inside the input, inside the output
        assume(len(launch) == case.tid_rank and covers(shape, launch) and covers(dims, launch))
    args = case.merge(jnp.asarray(a) for a in arrays)
    options = {} if out_form is None else {"output_dims": out_form}

    def run():
        if where == "call":
            return case.kernel(*args, launch_dims=form, **options)
        return case.module("kernel", launch_dims=form)(*args, **options)

    if launch is None or dims is None:
        with pytest.raises(ERRORS) as excinfo:
            run()
        check_error(excinfo, "launch_dims", "launch dims", "output_dims")
    else:
        check_result(run(), [place(case.expected(arrays), launch, dims, case.out.inner)])


def test_jax_callable_has_no_launch_dims():
    with pytest.raises(TypeError, match="launch_dims"):
        CASES["affine"].func(jnp.ones(3), launch_dims=3)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dims", [np.int64(3), (np.int64(3),), [np.int32(3)]])
def test_numpy_integer_output_dims_after_a_dict_form(kind, dims):
    case = CASES["affine"]
    module = case.module(kind)
    x = jnp.arange(3.0)
    module(x, output_dims={"out": 5})
    check_result(module(x, output_dims=dims), [np.float32(2) * np.arange(3, dtype=np.float32) + 1])


@pytest.mark.parametrize("kind", KINDS)
def test_numpy_integer_dims_are_accepted(kind):
    # at construction, under jit and with NumPy inputs (eager calls on JAX arrays: the test above)
    case = CASES["affine"]
    x = jnp.arange(4.0)
    expect = [np.float32(2) * np.arange(4, dtype=np.float32) + 1]
    for dims in (np.int64(4), (np.int32(4),), [np.uint8(4)]):
        module = case.module(kind)
        check_result(jax.jit(lambda x, m=module, d=dims: m(x, output_dims=d))(x), expect)
        check_result(module(np.arange(4, dtype=np.float32), output_dims=dims), expect)
        check_result(case.module(kind, output_dims=dims)(x), expect)
    check_result(jax.jit(lambda x: case.kernel(x, launch_dims=np.int64(4)))(x), expect)


@pytest.mark.parametrize("kind", KINDS)
def test_output_dims_dict_with_mixed_key_types_at_construction(kind):
    with pytest.raises(ERRORS) as excinfo:
        CASES["affine"].module(kind, output_dims={"out": 3, 1: 2})
    check_error(excinfo, "output_dims")


@pytest.mark.parametrize("kind", KINDS)
def test_output_dims_dict_with_mixed_key_types_per_call(kind):
    with pytest.raises(ValueError, match="output_dims") as excinfo:
        CASES["affine"].module(kind)(jnp.ones(3), output_dims={"out": 3, 1: 2})
    check_error(excinfo, "output_dims")


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("method", [0, "", False])
def test_falsy_vmap_method_is_refused(kind, method):
    with pytest.raises(ValueError, match="vmap_method"):
        CASES["affine"].module(kind)(jnp.ones(3), vmap_method=method)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("method", ["zzz", "Sequential", 1, 2.5, ("sequential",)])
def test_unknown_vmap_method_is_refused(kind, method):
    with pytest.raises(ERRORS, match="vmap_method"):
        CASES["affine"].module(kind)(jnp.ones(3), vmap_method=method)
    with pytest.raises(ERRORS, match="vmap_method"):
        CASES["affine"].module(kind, vmap_method=method)


# ======================================================================================================================
# vmap with random in_axes (size-0 batches, negative axes, nested), both vmap methods where they are valid
# ======================================================================================================================


def batched_inputs(rng, case, shapes, batch, axes):
    """Inputs batched along ``axes`` (None: shared), and the unbatched inputs of each batch slice."""
    common = case.fill(rng, shapes)
    slices = [case.fill(rng, shapes) for _ in range(batch)]
    per_slice = [[s[k] if axes[k] is not None else common[k] for k in range(len(shapes))] for s in slices]
    args = []
    for k, axis in enumerate(axes):
        if axis is None:
            args.append(common[k])
            continue
        stacked = np.stack([s[k] for s in slices]) if batch else np.zeros((0, *shapes[k]), common[k].dtype)
        args.append(np.moveaxis(stacked, 0, axis))
    return args, per_slice


@pytest.mark.parametrize("name", list(CASES))
@fuzz(max_examples=10)
@given(data=st.data())
def test_vmap_with_random_in_axes(name, data):
    case = CASES[name]
    kind = data.draw(st.sampled_from(kinds_of(case)), label="kind")
    methods = ["sequential", "broadcast_all"] if case.foldable else ["sequential"]
    method = data.draw(st.sampled_from(methods), label="vmap_method")
    form = data.draw(st.sampled_from(["numpy", "jax"]), label="form")
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))
    shapes = case.shapes(data)
    batch = data.draw(st.integers(0, 3), label="batch")
    axes = [data.draw(st.one_of(st.none(), st.integers(-s.ndim - 1, s.ndim)), label="axis") for s in case.arrays]
    if all(a is None for a in axes):
        axes[0] = 0
    outer = data.draw(st.integers(0, 2), label="outer batch")  # 0: no outer vmap
    scalars = {}
    if name == "knobs" and kind == "kernel" and data.draw(st.booleans(), label="runtime gain"):
        scalars["gain"] = "batched"

    def one_level():
        args, per_slice = batched_inputs(rng, case, shapes, batch, axes)
        gains = rng.integers(-8, 9, size=batch).astype(np.float32) / 4
        expect = [case.expected(s, {"gain": g} if scalars else None) for s, g in zip(per_slice, gains, strict=True)]
        single = out_shape(case, case.fill(rng, shapes))
        expect = np.stack(expect) if batch else np.zeros((0, *single), F32)
        return args, gains, expect

    module = case.module(kind)

    def f(*xs):
        *arrays, gain = xs
        values = {"gain": gain} if scalars else {}
        return module(*case.merge(arrays, values), vmap_method=method)

    in_axes = (*axes, 0 if scalars else None)
    g = jax.vmap(f, in_axes=in_axes)
    if outer:
        levels = [one_level() for _ in range(outer)]
        args = [np.stack([lv[0][k] for lv in levels]) for k in range(len(axes))]
        gains = np.stack([lv[1] for lv in levels])
        expect = np.stack([lv[2] for lv in levels])
        g = jax.vmap(g, in_axes=0)
    else:
        args, gains, expect = one_level()
    args = [as_form(a, form) for a in args]
    snap = snapshot(args)
    if data.draw(st.booleans(), label="jit"):
        g = jax.jit(g)
    check_result(g(*args, jnp.asarray(gains) if scalars else None), [expect])
    assert_unchanged(snap)


# ======================================================================================================================
# Empty arrays: a launch of size 0 returns correctly-shaped zero-size (or zero-filled) outputs
# ======================================================================================================================

EMPTY_SHAPES = {
    "affine": [[(0,)]],
    "vec3": [[(0, 3), (0,)]],
    "grid": [[(0, 3)], [(3, 0)], [(0, 0)]],
    "pick": [[(0,), (0,)], [(0,), (4,)]],
    "knobs": [[(0,)]],
    "accumulate": [[(0,), (0,)]],
    "mat4d": [[(0, 1, 2, 1, 2, 2)], [(2, 1, 1, 0, 2, 2)]],
}


@pytest.mark.parametrize(
    ("name", "shapes"), [(name, shapes) for name, options in EMPTY_SHAPES.items() for shapes in options]
)
@pytest.mark.parametrize("mode", ["eager", "jit", "vmap", "numpy"])
def test_empty_launches_return_zero_size_outputs(name, shapes, mode):
    case = CASES[name]
    arrays = case.fill(np.random.default_rng(0), shapes)
    expected = case.expected(arrays)
    assert expected.size == 0
    for kind in kinds_of(case):
        module = case.module(kind)
        if mode == "numpy":
            out = module(*case.merge(arrays))
        elif mode == "vmap":
            (out,) = jax.vmap(lambda *xs, m=module: m(*case.merge(xs)))(*(jnp.asarray(a)[None] for a in arrays))
            assert out.shape == (1, *expected.shape)
            out = (out[0],)
        else:
            out = call(module, case.merge(map(jnp.asarray, arrays)), mode)
        check_result(out, [expected])


@pytest.mark.parametrize("kind", KINDS)
def test_empty_launch_with_larger_outputs_returns_zeros(kind):
    for name, form, want in [
        ("affine", 3, np.zeros(3, F32)),
        ("vec3", {"out": (2, 3)}, np.zeros((2, 3), F32)),
        ("grid", (2, 4), np.zeros((2, 4), F32)),
        ("pick", [5], np.zeros(5, F32)),
    ]:
        case = CASES[name]
        arrays = case.fill(np.random.default_rng(0), [(0,) * s.warp_ndim + s.inner for s in case.arrays])
        check_result(case.module(kind)(*case.merge(map(jnp.asarray, arrays)), output_dims=form), [want])
    check_result(CASES["affine"].kernel(jnp.ones(4), launch_dims=0, output_dims=2), [np.zeros(2, F32)])


def test_empty_vmap_batch_of_an_empty_array():
    for kind in KINDS:
        module = CASES["vec3"].module(kind)
        (out,) = jax.vmap(module)(jnp.zeros((0, 0, 3)), jnp.zeros((0, 0)))
        assert out.shape == (0, 0, 3)


# ======================================================================================================================
# Kernels that write into an input not declared in-out: refused at construction, or the caller's array stays intact
# ======================================================================================================================

WRITERS = {
    "overwrite": kh.overwrite_input_kernel,
    "augassign": kh.augassign_input_kernel,
    "atomic_add": kh.atomic_input_kernel,
    "vector component": kh.vec_component_input_kernel,
}
MISSED_WRITERS = {
    "atomic_or": kh.atomic_or_input_kernel,
    "local alias": kh.alias_input_kernel,
    "@wp.func": kh.func_input_kernel,
}


def _victim(kernel: wp.Kernel) -> np.ndarray:
    if kernel is kh.vec_component_input_kernel:
        return np.ones((3, 3), np.float32)
    if kernel is kh.atomic_or_input_kernel:
        return np.ones(3, np.int32)
    return np.ones(3, np.float32)


@pytest.mark.parametrize("writer", list(WRITERS))
def test_kernel_writing_an_undeclared_input_is_refused_at_construction(writer):
    with pytest.raises(ValueError, match="victim") as excinfo:
        jax_kernel(WRITERS[writer])
    msg = check_error(excinfo, "'victim'")
    assert "in_out_argnames" in msg, msg


@pytest.mark.parametrize("writer", list(WRITERS))
def test_declaring_the_written_input_in_out_returns_it_and_keeps_the_callers_array(writer):
    kernel = WRITERS[writer]
    module = jax_kernel(kernel, num_outputs=2, in_out_argnames=["victim"])
    for x in (jnp.asarray(_victim(kernel)), _victim(kernel)):
        snap = snapshot([x])
        victim, _ = module(x)
        assert not np.array_equal(np.asarray(victim), np.asarray(x)), "the kernel's write is returned"
        assert_unchanged(snap)


def build_or_refusal(build: Callable[..., Any], target: Any) -> tuple[Any, str | None]:
    try:
        return build(target), None
    except ValueError as e:
        return None, str(e)


def _assert_call_keeps_the_callers_array(module: Any, x: Any) -> None:
    snap = snapshot([x])
    jax.block_until_ready(module(x))
    assert_unchanged(snap)


@pytest.mark.parametrize("writer", list(MISSED_WRITERS))
def test_kernel_writing_an_input_in_ways_the_analysis_misses(writer):
    kernel = MISSED_WRITERS[writer]
    module, refusal = build_or_refusal(jax_kernel, kernel)
    if refusal is not None:  # refused at construction: fine, if it names the argument
        assert "'victim'" in refusal, refusal
        return
    _assert_call_keeps_the_callers_array(module, jnp.asarray(_victim(kernel)))


@pytest.mark.parametrize("mode", ["eager", "jit"])
def test_jax_callable_launching_a_kernel_that_writes_an_input(mode):
    module, refusal = build_or_refusal(jax_callable, kh.overwrite_input_func)
    if refusal is not None:
        assert "'victim'" in refusal, refusal
        return
    x = jnp.asarray(np.ones(3, np.float32))
    snap = snapshot([x])
    jax.block_until_ready(call(module, [x], mode))
    assert_unchanged(snap)


def test_jax_callable_writing_an_input_leaves_numpy_callers_intact():
    # NumPy inputs are copied into XLA buffers, so the write cannot reach them (JAX inputs: the test above)
    x = np.ones(3, np.float32)
    jax.block_until_ready(jax_callable(kh.overwrite_input_func)(x))
    np.testing.assert_array_equal(x, np.ones(3, np.float32))


# ======================================================================================================================
# In-out arguments: the caller's array never changes (XLA copies it), however it is passed
# ======================================================================================================================


@pytest.mark.parametrize("kind", KINDS)
def test_in_out_arguments_leave_the_callers_array_intact(kind):
    module = CASES["accumulate"].module(kind)
    a = jnp.asarray(np.arange(3, dtype=np.float32))
    acc = jnp.asarray(np.full(3, 10, np.float32))
    acc_np = np.full(3, 10, np.float32)
    snap = snapshot([a, acc, acc_np])
    want = np.float32([10, 11, 12])
    check_result(module(a, acc), [want])
    check_result(module(a, acc_np), [want])
    check_result(jax.jit(module)(a, acc), [want])
    # the same array as input and in-out argument
    check_result(module(acc, acc), [np.full(3, 20, np.float32)])
    check_result((jax.jit(lambda x: module(x, x)[0] - x)(acc),), [np.full(3, 10, np.float32)])
    # the in-out input is still read after the call inside the same jit
    f = jax.jit(lambda a, acc: (module(a, acc)[0], acc * 2, module(a, acc)[0] + acc))
    check_result(f(a, acc), [want, np.full(3, 20, np.float32), want + 10])
    # a loop carry, and an unbatched in-out argument under vmap (each batch slice gets its own copy)
    loop = jax.jit(lambda c: jax.lax.fori_loop(0, 3, lambda i, c: module(a, c)[0], c))
    check_result((loop(acc),), [np.float32([10, 13, 16])])
    for method in ("sequential", "broadcast_all"):
        batched = jax.vmap(partial(module, vmap_method=method), in_axes=(0, None))
        (out,) = batched(jnp.ones((2, 3)), acc)
        np.testing.assert_array_equal(out, np.full((2, 3), 11, np.float32))
    assert_unchanged(snap)


# ======================================================================================================================
# What jarp cannot catch: out-of-bounds indexing inside kernels. Each scenario runs in its own interpreter.
# ======================================================================================================================

_PRELUDE = """
import sys
import jax, jax.numpy as jnp, numpy as np, warp as wp
wp.config.quiet = True
{setup}
from jarp.warp import jax_callable, jax_kernel
from tests.warp.support import kernels_hostile as kh
try:
    out = {call}
    print("RESULT", [np.asarray(o).tolist() for o in out], flush=True)
except Exception as e:
    print("RAISED", type(e).__name__, str(e), flush=True)
"""

# What each did on the CPU of the machine these tests were written on (warp-lang 1.19, jax 0.10) is noted above it.
SCENARIOS = {
    # an index just past the end of the table: Warp reads whatever lies there (no bounds check on the CPU).
    # Seen: exit 0, out[1] = 0.0 or 4.6e-41 (garbage), out[0] and out[2] right.
    "gather past the end": ("", "jax_kernel(kh.pick_kernel)(jnp.array([0, 5, 1], jnp.int32), jnp.arange(4.0))"),
    # far out of range (a negative index: Warp indexes from the end like Python, then reads 400 MB before the table).
    # Seen: SIGSEGV.
    "gather far out of range, jax_callable": (
        "",
        "jax_callable(kh.pick_func)(jnp.array([0, -(10**8), 1], jnp.int32), jnp.arange(4.0))",
    ),
    # Warp's debug build checks bounds, but on the CPU a failed check aborts the process, it does not raise.
    # Seen: "Assertion failed: 'i >= -arr.shape[0] && i < arr.shape[0]'", then SIGILL.
    "gather past the end, wp.config.mode = 'debug'": (
        "wp.config.mode = 'debug'",
        "jax_kernel(kh.pick_kernel)(jnp.array([0, 5, 1], jnp.int32), jnp.arange(4.0))",
    ),
    # launch_dims beyond the input the kernel reads at its thread index. Seen: SIGSEGV.
    "launch larger than the input": ("", "jax_kernel(kh.affine_kernel)(jnp.ones(4), launch_dims=2**22)"),
    # arrays of mismatched lengths: the launch follows `p`, `w` is read past its end.
    # Seen: exit 0, out[:2] right, out[2:] garbage (a silently wrong answer; jarp cannot know how a kernel indexes).
    "mismatched input lengths": ("", "jax_kernel(kh.weigh_vec3_kernel)(jnp.ones((64, 3)), jnp.ones(2))"),
    # a 1-D launch of a kernel that unpacks `i, j = wp.tid()`: i runs past the output's rows (j stays 0).
    # Seen: a result, then "double free or corruption" / "corrupted size vs. prev_size" and SIGABRT at exit.
    "launch rank differs from wp.tid()": (
        "",
        "jax_kernel(kh.grid_kernel)(jnp.ones((2, 3)), launch_dims=(64,), output_dims=(2, 3))",
    ),
    # refused (test_output_dims_overflowing_int64_are_refused): a shape whose element count overflows int64. Plain JAX
    # aborts on it (jnp.zeros((2**31, 2**31))), but output_dims is jarp's option, checked by jarp. Seen without that
    # check: "terminate called after throwing an instance of 'absl::BadStatusOrAccess' ... overflow in static extent
    # product", SIGABRT.
    "output dims overflowing int64": (
        "",
        "jax_kernel(kh.grid_kernel)(jnp.ones((2, 2)), output_dims=(2**31, 2**31))",
    ),
    # refused (test_output_smaller_than_the_launch_of_an_overwriting_kernel_is_refused): jarp knows this kernel writes
    # out[i] on every thread, so an output smaller than the launch is a certain out-of-bounds write. Seen without that
    # check: a result, then SIGSEGV or SIGABRT (heap corruption).
    "output smaller than the launch": (
        "",
        "jax_kernel(kh.weigh_vec3_kernel)(jnp.ones((64, 3)), jnp.ones(64), output_dims=2)",
    ),
}


@dataclass
class Outcome:
    returncode: int
    stdout: str
    stderr: str

    def report(self) -> str:
        return f"exit code {self.returncode}\nstdout:\n{self.stdout[-2000:]}\nstderr:\n{self.stderr[-3000:]}"


_running: dict[str, subprocess.Popen] = {}


@pytest.fixture(scope="module", autouse=True)
def _start_scenarios(request):
    """Start every scenario in its own interpreter when the module's first test runs (if any scenario test is
    selected), so that they run alongside the in-process tests; stop any still running at the end."""
    if any("scenarios" in getattr(item, "fixturenames", ()) for item in request.session.items):
        root = Path(__file__).resolve().parents[2]
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
        env["JAX_ENABLE_X64"] = "0"
        env["JAX_PLATFORMS"] = "cpu"
        for name, (setup, expr) in SCENARIOS.items():
            _running[name] = subprocess.Popen(
                [sys.executable, "-c", _PRELUDE.format(setup=setup, call=expr)],
                cwd=root,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
    yield
    for proc in _running.values():
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    _running.clear()


@pytest.fixture(scope="module")
def scenarios() -> dict[str, Outcome]:
    """The outcome of every scenario; each ends by itself or is killed at the timeout (a hang)."""
    outcomes = {}
    deadline = time.monotonic() + SUBPROCESS_TIMEOUT  # they run concurrently: one deadline for all
    for name, proc in _running.items():
        try:
            stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            stdout += f"\nHUNG: killed after {SUBPROCESS_TIMEOUT} s"
        outcomes[name] = Outcome(proc.returncode, stdout, stderr)
    return outcomes


# the scenarios jarp refuses, each checked by its own test below; the others are undefined behaviour
REFUSED_SCENARIOS = ("output smaller than the launch", "output dims overflowing int64")


@pytest.mark.parametrize("name", [n for n in SCENARIOS if n not in REFUSED_SCENARIOS])
def test_out_of_bounds_indexing_ends_without_hanging_or_taking_the_run_down(scenarios, name):
    """Undefined behaviour inside the kernel (Warp's semantics): the process may print a result, raise, or die by a
    signal; it must end in time, and this test run goes on either way."""
    outcome = scenarios[name]
    assert "HUNG" not in outcome.stdout, outcome.report()
    assert outcome.returncode == 0 or outcome.returncode < 0 or outcome.returncode > 128, outcome.report()
    if outcome.returncode == 0 and "RESULT" in outcome.stdout and name.startswith("gather"):
        # the in-range entries are right whatever the out-of-range one read
        (result,) = ast.literal_eval(outcome.stdout.split("RESULT", 1)[1].strip())
        assert (result[0], result[2]) == (0.0, 1.0), outcome.report()


def test_output_smaller_than_the_launch_of_an_overwriting_kernel_is_refused(scenarios):
    outcome = scenarios["output smaller than the launch"]
    assert outcome.returncode == 0, outcome.report()
    assert "RAISED ValueError" in outcome.stdout, outcome.report()
    assert "output_dims" in outcome.stdout, outcome.report()


def test_output_dims_overflowing_int64_are_refused(scenarios):
    outcome = scenarios["output dims overflowing int64"]
    assert outcome.returncode == 0, outcome.report()
    assert "RAISED ValueError" in outcome.stdout, outcome.report()
    assert "output_dims" in outcome.stdout, outcome.report()


@pytest.mark.parametrize("option", [{"output_dims": 2**70}, {"launch_dims": 2**33, "output_dims": 4}])
def test_dims_too_large_for_xla_or_warp_are_refused_naming_the_option(option):
    with pytest.raises(ERRORS) as excinfo:
        CASES["affine"].kernel(jnp.ones(4), **option)
    check_error(excinfo, *option)


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


# ======================================================================================================================
# Construction options: random num_outputs / in_out_argnames are accepted or refused naming the option
# ======================================================================================================================


@fuzz(max_examples=30)
@given(
    num_outputs=st.one_of(st.integers(-2, 6), st.sampled_from(["1", None, 2.5])),  # 1.0, True: the test below
    in_out=st.one_of(
        st.lists(st.sampled_from(["a", "gain", "shift", "flip", "out", "zzz"]), max_size=3), st.sampled_from(["a", ""])
    ),
    kind=st.sampled_from(KINDS),
)
def test_random_output_options_at_construction(num_outputs, in_out, kind):
    target = kh.knobs_kernel if kind == "kernel" else kh.knobs_func
    build = jax_kernel if kind == "kernel" else jax_callable
    try:
        build(target, num_outputs=num_outputs, in_out_argnames=in_out)
        refusal = None
    except ERRORS as e:
        refusal = str(e)
    if refusal is not None:
        assert any(o in refusal for o in ("num_outputs", "in_out_argnames", "output parameter")), refusal
        return
    # accepted: the options describe knobs' parameters consistently (every output is an array; a, out in-out at most)
    names = [in_out] if isinstance(in_out, str) else list(in_out)
    assert isinstance(num_outputs, int), num_outputs
    assert num_outputs - len(names) in (0, 1), (num_outputs, names)
    assert set(names) <= {"a", "out"}, names
    assert len(set(names)) == len(names), names


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("value", [1.0, True])
def test_non_int_num_outputs_is_refused_even_after_an_int_one(kind, value):
    target = kh.knobs_kernel if kind == "kernel" else kh.knobs_func
    build = jax_kernel if kind == "kernel" else jax_callable
    build(target, num_outputs=1)
    with pytest.raises(TypeError, match="num_outputs"):
        build(target, num_outputs=value)


# ======================================================================================================================
# float64 process: 64-bit JAX arrays and scalars reach the float32/int32 kernels
# ======================================================================================================================


@pytest.mark.x64
@pytest.mark.parametrize("name", list(CASES))
@fuzz(max_examples=8)
@given(data=st.data())
def test_x64_wide_jax_arrays_are_refused_naming_the_argument(name, data):
    case = CASES[name]
    kind = data.draw(st.sampled_from(kinds_of(case)), label="kind")
    arrays, _ = draw_valid(data, case)
    k = data.draw(st.integers(0, len(arrays) - 1), label="which")
    wide = {np.dtype(np.float32): jnp.float64, np.dtype(np.int32): jnp.int64}[case.arrays[k].dtype]
    args = [jnp.asarray(a) for a in arrays]
    args[k] = args[k].astype(wide)
    with pytest.raises(TypeError) as excinfo:
        call(case.module(kind), case.merge(args), data.draw(st.sampled_from(["eager", "jit"]), label="mode"))
    msg = check_error(excinfo, quoted(case.arrays[k].name))
    assert str(np.dtype(wide)) in msg, msg
    assert "astype" in msg, msg
    # the right types still work in the float64 process, Python floats included (static, converted to float32)
    check_result(case.module(kind)(*case.merge(map(jnp.asarray, arrays))), [case.expected(arrays)])


@pytest.mark.x64
def test_x64_scalars():
    case = CASES["knobs"]
    a = np.arange(3, dtype=np.float32)
    check_result(case.kernel(jnp.asarray(a), 0.1, 2, False), [_ref_knobs(a, 0.1, 2, False)])
    check_result(case.kernel(jnp.asarray(a), jnp.float32(0.5), 2, False), [_ref_knobs(a, 0.5, 2, False)])
    for value in (jnp.float64(0.5), jnp.asarray(0.5)):
        with pytest.raises(TypeError) as excinfo:
            case.kernel(jnp.asarray(a), value, 2, False)
        assert "float64" in check_error(excinfo, "'gain'")
    with pytest.raises(TypeError) as excinfo:
        case.kernel(jnp.asarray(a), 1.0, jnp.int64(2), False)
    check_error(excinfo, "'shift'")
