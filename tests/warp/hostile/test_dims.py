"""Hostile input: the dims asked for: ``output_dims``, ``launch_dims``, ``vmap_method``, empty launches.

Random ``output_dims`` and ``launch_dims`` forms at construction and per call (ints, lists, tuples with or without the
element dims, dicts, NumPy integers, nonsense), unknown or falsy ``vmap_method`` values, and launches of size 0. A call
returns the NumPy answer in an output of the dims asked for (zero-size or zero-filled for an empty launch) or raises an
error naming the option; only launches that stay in bounds run here (``test_bounds.py`` has the others). The
modules, their NumPy references and the checks are in ``tests/support/hostile.py``.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from tests.support.hostile import (
    CASES,
    ERRORS,
    F32,
    KINDS,
    OUTPUT_CASES,
    Arr,
    _no_hang,  # noqa: F401 (autouse fixture)
    call,
    check_error,
    check_result,
    draw_valid,
    fuzz,
    kinds_of,
)

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)


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


# Outputs larger than the launch the first input sets are what these forms ask for: the inferred-launch warning is
# right, and expected.
_LARGER_OUTPUTS = pytest.mark.filterwarnings("ignore::jarp.warp.LaunchDimsWarning")


@_LARGER_OUTPUTS
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


@_LARGER_OUTPUTS
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


@pytest.mark.parametrize("where", ["call", "module"])
@pytest.mark.parametrize("form", [(4, 1), [2, 2]], ids=["tuple", "list"])
def test_a_launch_with_more_dims_than_its_output_is_refused(form, where):
    # found by test_launch_dims_forms (commit 8470536): an output with fewer array dims than the launch took the first
    # input's shape; only an output with more dims than the launch does (Warp's rule), this one is refused
    case = CASES["affine"]
    a = jnp.arange(4, dtype=jnp.float32)
    with pytest.raises(ERRORS) as excinfo:
        case.kernel(a, launch_dims=form) if where == "call" else case.module("kernel", launch_dims=form)(a)
    check_error(excinfo, "launch dims")


def test_jax_callable_has_no_launch_dims():
    with pytest.raises(TypeError, match="launch_dims"):
        CASES["affine"].func(jnp.ones(3), launch_dims=3)


@_LARGER_OUTPUTS
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
