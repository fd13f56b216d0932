"""``wp.struct`` parameters of ``jax_kernel`` and ``jax_callable``, end to end.

A struct argument is a pytree of its fields (a dict, NamedTuple, dataclass or ``eqx.Module``; nested structs as nested
pytrees): array fields are operands of the launch (batched by ``jax.vmap``, differentiated through Warp's adjoint),
value fields are static Python numbers or tuples. Checked here: forward values (eager and jitted) against NumPy,
gradients against analytic values and (float64, ``x64`` process) finite differences, ``vmap``, nested structs,
vector/matrix value fields and vec3 array fields, struct-taking modules inside an ``eqx.Module`` model (no retrace,
serialisation), errors naming the parameter and field, ``jax_callable``, a generic ``jarp.warp.struct`` through
``arg_types_factory``, ``list_plans``, CUDA lowering, and a float64 tetrahedral FEM energy (Stable Neo-Hookean) against
the same energy in ``jax.numpy`` and a hand-written gradient kernel.

The Warp code lives in ``tests/support/kernels_struct.py``.
"""

from __future__ import annotations

import dataclasses
import io
import itertools
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from jax.test_util import check_grads

import jarp
from jarp.warp import LaunchDimsWarning, jax_callable, jax_kernel, list_plans
from jarp.warp._ffi._registry import registry
from jarp.warp._plan import _launch_checks
from tests.support import kernels_struct as ks
from tests.support.lowered import custom_calls

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)

# ======================================================================================================================
# Struct values of several pytree kinds
# ======================================================================================================================


class MatTuple(NamedTuple):
    k: float
    w: Any


@dataclasses.dataclass(frozen=True)
class MatData:
    k: float
    w: Any


class MatModule(eqx.Module):
    w: jax.Array
    k: float = eqx.field(static=True)


STRUCT_KINDS = {
    "dict": lambda k, w: {"k": k, "w": w},
    "namedtuple": lambda k, w: MatTuple(k=k, w=w),
    "dataclass": lambda k, w: MatData(k=k, w=w),
    "eqx-module": lambda k, w: MatModule(w=w, k=k),
}

_scale = jax_kernel(ks.scale_kernel, enable_backward=True)
_scale_callable = jax_callable(ks.scale_func, enable_backward=True)


def _wx(n: int = 7) -> tuple[np.ndarray, np.ndarray]:
    w = np.linspace(0.5, 2.0, n, dtype=np.float32)
    x = np.linspace(-1.0, 1.5, n, dtype=np.float32)
    return w, x


def _scale_ref(k: float, w: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.float32(k) * w * x * x


# ======================================================================================================================
# Forward: eager and jitted, for each kind of struct value
# ======================================================================================================================


@pytest.mark.parametrize("kind", list(STRUCT_KINDS))
def test_forward_eager_and_jit(kind: str) -> None:
    make = STRUCT_KINDS[kind]
    w, x = _wx()
    (eager,) = _scale(make(3.0, jnp.asarray(w)), jnp.asarray(x))
    # value fields are static: build the struct inside the traced function from its array fields
    (jitted,) = jax.jit(lambda w, x: _scale(make(3.0, w), x))(jnp.asarray(w), jnp.asarray(x))
    np.testing.assert_allclose(eager, _scale_ref(3.0, w, x), rtol=1e-6)
    np.testing.assert_allclose(jitted, _scale_ref(3.0, w, x), rtol=1e-6)
    assert eager.dtype == jnp.float32


def test_numpy_array_fields_and_different_values_of_a_value_field() -> None:
    w, x = _wx()
    for k in (3.0, -0.5):
        (out,) = _scale({"k": k, "w": w}, x)  # NumPy arrays for the array field and the plain parameter
        np.testing.assert_allclose(out, _scale_ref(k, w, x), rtol=1e-6)


def test_eqx_module_struct_passed_through_filter_jit() -> None:
    w, x = _wx()
    f = eqx.filter_jit(lambda m, x: _scale(m, x)[0])
    out = f(MatModule(w=jnp.asarray(w), k=2.0), jnp.asarray(x))
    np.testing.assert_allclose(out, _scale_ref(2.0, w, x), rtol=1e-6)


def test_warp_struct_instance_as_the_value() -> None:
    w, x = _wx()
    m = ks.Mat()
    m.k = 2.0
    m.w = wp.array(w, dtype=wp.float32, device="cpu")
    (out,) = _scale(m, x)
    np.testing.assert_allclose(out, _scale_ref(2.0, w, x), rtol=1e-6)


def test_launch_dims_come_from_the_first_array_parameter(monkeypatch: pytest.MonkeyPatch) -> None:
    # the struct's w is longer than x; the launch (and the output) follow x, and jarp warns that w's tail is unused
    monkeypatch.setattr(_launch_checks, "_warned_launches", set())  # each warning is given once per process
    w = np.linspace(0.5, 2.0, 9, dtype=np.float32)
    x = np.linspace(-1.0, 1.5, 4, dtype=np.float32)
    with pytest.warns(LaunchDimsWarning, match=r"launch dims \(4,\)\. But the kernel indexes m\.w \(9 elements\)"):
        (out,) = _scale({"k": 3.0, "w": w}, x)
    np.testing.assert_allclose(out, _scale_ref(3.0, w[:4], x), rtol=1e-6)


# ======================================================================================================================
# Gradients with respect to array fields
# ======================================================================================================================


@pytest.mark.parametrize("kind", list(STRUCT_KINDS))
def test_grad_wrt_array_field_and_plain_array_analytic(kind: str) -> None:
    make = STRUCT_KINDS[kind]
    w, x = _wx()
    cot = np.linspace(1.0, 2.0, w.size, dtype=np.float32)

    def loss(w: jax.Array, x: jax.Array) -> jax.Array:
        return jnp.sum(jnp.asarray(cot) * _scale(make(3.0, w), x)[0])

    gw, gx = jax.jit(jax.grad(loss, argnums=(0, 1)))(jnp.asarray(w), jnp.asarray(x))
    np.testing.assert_allclose(gw, cot * 3.0 * x * x, rtol=1e-6)
    np.testing.assert_allclose(gx, cot * 6.0 * w * x, rtol=1e-6)


def test_grad_wrt_the_struct_pytree_itself() -> None:
    w, x = _wx()
    m = MatModule(w=jnp.asarray(w), k=3.0)
    grads = eqx.filter_grad(lambda m: jnp.sum(_scale(m, jnp.asarray(x))[0]))(m)
    assert isinstance(grads, MatModule)
    np.testing.assert_allclose(grads.w, 3.0 * x * x, rtol=1e-6)


@pytest.mark.x64
def test_grad_wrt_array_field_float64_finite_differences() -> None:
    scale64 = jax_kernel(ks.scale64_kernel, enable_backward=True)
    w = jnp.linspace(0.5, 2.0, 6, dtype=jnp.float64)
    x = jnp.linspace(-1.0, 1.5, 6, dtype=jnp.float64)

    def f(w: jax.Array, x: jax.Array) -> jax.Array:
        return scale64({"k": 1.5, "w": w}, x)[0]

    check_grads(f, (w, x), order=1, modes=["rev"])
    check_grads(jax.jit(f), (w, x), order=1, modes=["rev"])
    gw = jax.grad(lambda w: jnp.sum(f(w, x)))(w)
    np.testing.assert_allclose(gw, 1.5 * x * x, rtol=1e-14)


# ======================================================================================================================
# vmap
# ======================================================================================================================


def test_vmap_over_one_array_field() -> None:
    w, x = _wx()
    ws = np.stack([w, 2 * w, -w])
    (out,) = jax.vmap(lambda w: _scale({"k": 3.0, "w": w}, jnp.asarray(x)))(jnp.asarray(ws))
    np.testing.assert_allclose(out, np.stack([_scale_ref(3.0, wi, x) for wi in ws]), rtol=1e-6)


def test_vmap_over_an_array_field_and_a_plain_array() -> None:
    w, x = _wx()
    ws, xs = np.stack([w, 2 * w]), np.stack([x, x + 1])
    f = jax.jit(jax.vmap(lambda w, x: _scale(MatTuple(k=0.5, w=w), x)[0]))
    out = f(jnp.asarray(ws), jnp.asarray(xs))
    np.testing.assert_allclose(
        out, np.stack([_scale_ref(0.5, wi, xi) for wi, xi in zip(ws, xs, strict=True)]), rtol=1e-6
    )


def test_vmap_broadcast_all_over_an_array_field() -> None:
    w, x = _wx()
    ws = np.stack([w, 2 * w])
    folded = jax_kernel(ks.scale_kernel, vmap_method="broadcast_all")
    out = jax.vmap(lambda w: folded({"k": 3.0, "w": w}, x)[0])(jnp.asarray(ws))
    np.testing.assert_allclose(out, np.stack([_scale_ref(3.0, wi, x) for wi in ws]), rtol=1e-6)


def test_vmap_of_grad_wrt_array_field() -> None:
    w, x = _wx()
    xs = np.stack([x, 2 * x])
    g = jax.vmap(lambda x: jax.grad(lambda w: jnp.sum(_scale({"k": 3.0, "w": w}, x)[0]))(jnp.asarray(w)))
    np.testing.assert_allclose(g(jnp.asarray(xs)), 3.0 * xs * xs, rtol=1e-6)


# ======================================================================================================================
# Nested structs
# ======================================================================================================================

_nested = jax_kernel(ks.nested_kernel, enable_backward=True)


def _nested_ref(s: float, w: np.ndarray, c: float, b: np.ndarray, x: np.ndarray) -> np.ndarray:
    return np.float32(s) * w * x + np.float32(c) * b * b


def test_nested_struct_forward_and_grad() -> None:
    w, x = _wx()
    b = np.linspace(-2.0, 0.5, w.size, dtype=np.float32)

    class InnerNT(NamedTuple):
        w: Any
        c: float

    def outer(w: Any, b: Any) -> dict[str, Any]:
        return {"s": 2.0, "inner": InnerNT(w=w, c=0.5), "b": b}  # a dict holding a NamedTuple

    (out,) = _nested(outer(w, b), x)
    np.testing.assert_allclose(out, _nested_ref(2.0, w, 0.5, b, x), rtol=1e-6)
    (out_jit,) = jax.jit(lambda w, b, x: _nested(outer(w, b), x))(jnp.asarray(w), jnp.asarray(b), jnp.asarray(x))
    np.testing.assert_allclose(out_jit, _nested_ref(2.0, w, 0.5, b, x), rtol=1e-6)

    gw, gb, gx = jax.grad(lambda w, b, x: jnp.sum(_nested(outer(w, b), x)[0]), argnums=(0, 1, 2))(
        jnp.asarray(w), jnp.asarray(b), jnp.asarray(x)
    )
    np.testing.assert_allclose(gw, 2.0 * x, rtol=1e-6)
    np.testing.assert_allclose(gb, 2.0 * 0.5 * b, rtol=1e-6)
    np.testing.assert_allclose(gx, 2.0 * w, rtol=1e-6)


def test_nested_struct_vmap_over_inner_field() -> None:
    w, x = _wx()
    b = np.ones_like(w)
    ws = np.stack([w, -w, 3 * w])
    out = jax.vmap(lambda w: _nested({"s": 1.0, "inner": {"w": w, "c": 2.0}, "b": b}, x)[0])(jnp.asarray(ws))
    np.testing.assert_allclose(out, np.stack([_nested_ref(1.0, wi, 2.0, b, x) for wi in ws]), rtol=1e-6)


@pytest.mark.x64
def test_nested_struct_grad_float64_finite_differences() -> None:
    nested64 = jax_kernel(ks.nested64_kernel, enable_backward=True)
    w = jnp.linspace(0.5, 2.0, 5, dtype=jnp.float64)
    b = jnp.linspace(-2.0, 0.5, 5, dtype=jnp.float64)
    x = jnp.linspace(-1.0, 1.5, 5, dtype=jnp.float64)

    def f(w: jax.Array, b: jax.Array, x: jax.Array) -> jax.Array:
        return nested64({"s": 2.0, "inner": {"w": w, "c": -0.75}, "b": b}, x)[0]

    check_grads(f, (w, b, x), order=1, modes=["rev"])


# ======================================================================================================================
# Vector / matrix value fields, vec3 array fields
# ======================================================================================================================

_affine = jax_kernel(ks.affine_kernel, enable_backward=True)
_ROT = ((0.0, 1.0, 0.0), (1.0, 0.0, 0.0), (0.0, 0.0, 2.0))
_OFFSET = (1.0, -2.0, 0.5)


def _points(n: int = 6) -> np.ndarray:
    return np.linspace(-1.0, 1.0, 3 * n, dtype=np.float32).reshape(n, 3)


def test_vector_and_matrix_value_fields_and_vec3_array_field() -> None:
    p = _points()
    q = p @ np.asarray(_ROT, np.float32).T + np.asarray(_OFFSET, np.float32)
    # the launch is sized by the struct's array field: the kernel's only array parameter is its output
    (out,) = _affine({"rot": _ROT, "offset": _OFFSET, "p": p})
    np.testing.assert_allclose(out, q * q, rtol=1e-6)
    assert out.shape == (6, 3)
    # value fields also take NumPy arrays and Warp values
    rot = np.asarray(_ROT, np.float32)
    (jitted,) = jax.jit(lambda p: _affine({"rot": rot, "offset": wp.vec3f(*_OFFSET), "p": p}))(jnp.asarray(p))
    np.testing.assert_allclose(jitted, q * q, rtol=1e-6)


def test_grad_wrt_vec3_array_field() -> None:
    p = _points()
    rot = np.asarray(_ROT, np.float32)
    q = p @ rot.T + np.asarray(_OFFSET, np.float32)
    g = jax.grad(lambda p: jnp.sum(_affine({"rot": _ROT, "offset": _OFFSET, "p": p})[0]))(jnp.asarray(p))
    np.testing.assert_allclose(g, 2.0 * q @ rot, rtol=1e-6)


def test_vmap_and_grad_when_only_the_struct_sizes_the_launch() -> None:
    ps = np.stack([_points(), 2 * _points()])
    rot = np.asarray(_ROT, np.float32)
    qs = ps @ rot.T + np.asarray(_OFFSET, np.float32)

    def f(p: jax.Array) -> jax.Array:
        return _affine({"rot": _ROT, "offset": _OFFSET, "p": p})[0]

    np.testing.assert_allclose(jax.vmap(f)(jnp.asarray(ps)), qs * qs, rtol=1e-6)
    g = jax.vmap(jax.grad(lambda p: jnp.sum(f(p))))(jnp.asarray(ps))
    np.testing.assert_allclose(g, 2.0 * qs @ rot, rtol=1e-6)


def test_different_static_values_give_different_results() -> None:
    p = _points()
    (a,) = _affine({"rot": _ROT, "offset": (0.0, 0.0, 0.0), "p": p})
    (b,) = _affine({"rot": _ROT, "offset": _OFFSET, "p": p})
    assert not np.allclose(a, b)


# ======================================================================================================================
# Struct-taking modules inside an eqx.Module model
# ======================================================================================================================


class Layer(eqx.Module):
    """A model holding the array field of a struct as a leaf and the value field as static."""

    w: jax.Array
    k: float = eqx.field(static=True)
    kernel: jarp.JaxKernel  # a plain field: no array leaves, hashable, compares by value

    def __init__(self, w: jax.Array, k: float) -> None:
        self.w = w
        self.k = k
        self.kernel = jax_kernel(ks.scale_kernel, enable_backward=True)  # a fresh module each time

    def __call__(self, x: jax.Array) -> jax.Array:
        (out,) = self.kernel({"k": self.k, "w": self.w}, x)
        return out


def test_rebuilt_model_does_not_retrace() -> None:
    w, x = _wx()

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def loss(model: Layer, x: jax.Array) -> jax.Array:
        return jnp.sum(model(x))

    first = loss(Layer(jnp.asarray(w), 3.0), jnp.asarray(x))
    second = loss(Layer(jnp.asarray(2 * w), 3.0), jnp.asarray(x))  # a new model, a new JaxKernel: same trace
    np.testing.assert_allclose(first, np.sum(_scale_ref(3.0, w, x)), rtol=1e-6)
    np.testing.assert_allclose(second, 2 * first, rtol=1e-6)
    grads = eqx.filter_grad(loss)(Layer(jnp.asarray(w), 3.0), jnp.asarray(x))
    np.testing.assert_allclose(grads.w, 3.0 * x * x, rtol=1e-6)


def test_serialise_round_trip_gives_the_same_outputs() -> None:
    w, x = _wx()
    model = Layer(jnp.asarray(w), 3.0)
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, model)
    buffer.seek(0)
    like = Layer(jnp.zeros_like(jnp.asarray(w)), 3.0)
    loaded = eqx.tree_deserialise_leaves(buffer, like)
    np.testing.assert_array_equal(loaded.w, w)
    np.testing.assert_array_equal(loaded(jnp.asarray(x)), model(jnp.asarray(x)))
    assert not np.array_equal(like(jnp.asarray(x)), model(jnp.asarray(x)))


# ======================================================================================================================
# Errors name the parameter and the field
# ======================================================================================================================


def _error_cases() -> dict[str, tuple[Any, Any, type[Exception], str]]:
    w, x = _wx()
    return {
        "missing-field": (_scale, ({"w": w}, x), TypeError, r"missing field 'm\.k'"),
        "unknown-dict-field": (_scale, ({"k": 1.0, "w": w, "kk": 2.0}, x), TypeError, r"unknown field\(s\) 'm\.kk'"),
        "wrong-dtype": (_scale, ({"k": 1.0, "w": w.astype(np.float64)}, x), TypeError, r"'m\.w' has dtype float64"),
        "int-array-for-float-field": (_scale, ({"k": 1.0, "w": np.arange(7)}, x), TypeError, r"'m\.w' has dtype"),
        "wrong-dims": (_scale, ({"k": 1.0, "w": w.reshape(1, 7)}, x), TypeError, r"'m\.w' must have 1 dims"),
        "jax-int-array-for-float-value-field": (
            _scale,
            ({"k": jnp.int32(1), "w": w}, x),
            TypeError,
            r"'m\.k' is a value float32 field and got a int32 array",
        ),
        "array-for-the-struct": (_scale, (w, x), TypeError, r"'m' is a struct Mat"),
        "nested-missing": (
            _nested,
            ({"s": 1.0, "inner": {"c": 1.0}, "b": w}, x),
            TypeError,
            r"missing field 'o\.inner\.w'",
        ),
        "nested-not-a-struct": (_nested, ({"s": 1.0, "inner": 3.0, "b": w}, x), TypeError, r"'o\.inner' is a struct"),
        "vector-value-wrong-shape": (
            _affine,
            ({"rot": _ROT, "offset": (1.0, 2.0), "p": _points()},),
            ValueError,
            r"'f\.offset'.*shape \(3,\)",
        ),
        "vec3-array-wrong-trailing-dims": (
            _affine,
            ({"rot": _ROT, "offset": _OFFSET, "p": np.zeros((6, 2), np.float32)},),
            TypeError,
            r"'f\.p'.*trailing dims must be \(3,\)",
        ),
    }


@pytest.mark.parametrize("name", list(_error_cases()))
def test_errors_name_the_parameter_and_field(name: str) -> None:
    module, args, error, match = _error_cases()[name]
    with pytest.raises(error, match=match):
        module(*args)


def test_missing_attribute_of_an_object() -> None:
    w, x = _wx()

    class OnlyW(NamedTuple):
        w: Any

    with pytest.raises(TypeError, match=r"missing field 'm\.k' \(no attribute 'k' on the OnlyW given\)"):
        _scale(OnlyW(w=w), x)


def test_traced_value_field_is_read_at_run_time_under_jit() -> None:
    # A value field given a JAX value is a runtime value, as a top-level scalar parameter is
    # (tests/warp/modules/test_struct_runtime.py has the rest: gradients, vmap, nested and vector fields).
    w, x = _wx()
    f = jax.jit(lambda k: _scale({"k": k, "w": w}, x)[0])
    for k in (1.0, -2.5):
        np.testing.assert_allclose(f(jnp.float32(k)), _scale_ref(k, w, x), rtol=1e-6)


def test_struct_output_parameter_is_refused_at_construction() -> None:
    with pytest.raises(TypeError, match=r"output parameter 'm' is a struct Mat; jarp does not return structs"):
        jax_kernel(ks.struct_output_kernel)


# ======================================================================================================================
# jax_callable taking a struct
# ======================================================================================================================


def test_callable_forward_eager_and_jit() -> None:
    w, x = _wx()
    (eager,) = _scale_callable({"k": 3.0, "w": w}, x)
    (jitted,) = jax.jit(lambda w, x: _scale_callable(MatTuple(k=3.0, w=w), x))(jnp.asarray(w), jnp.asarray(x))
    np.testing.assert_allclose(eager, _scale_ref(3.0, w, x), rtol=1e-6)
    np.testing.assert_allclose(jitted, _scale_ref(3.0, w, x), rtol=1e-6)


def test_callable_receives_a_warp_struct_instance() -> None:
    seen: list[Any] = []

    def probe(m: ks.Mat, out: wp.array(dtype=wp.float32)):
        seen.append((type(m), m.k, m.w.shape, m.w.dtype))
        wp.copy(out, m.w)

    w, _ = _wx()
    (out,) = jax_callable(probe, output_dims={"out": w.shape})({"k": 2.5, "w": w})
    np.testing.assert_array_equal(out, w)
    ((cls, k, shape, dtype),) = seen
    assert cls is type(ks.Mat())
    assert (k, shape, dtype) == (2.5, w.shape, wp.float32)


def test_callable_grad_analytic() -> None:
    w, x = _wx()
    gw, gx = jax.grad(lambda w, x: jnp.sum(_scale_callable({"k": 3.0, "w": w}, x)[0]), argnums=(0, 1))(
        jnp.asarray(w), jnp.asarray(x)
    )
    np.testing.assert_allclose(gw, 3.0 * x * x, rtol=1e-6)
    np.testing.assert_allclose(gx, 6.0 * w * x, rtol=1e-6)


def nested_func(o: ks.Outer, x: wp.array(dtype=wp.float32), out: wp.array(dtype=wp.float32)):
    wp.launch(ks.nested_kernel, dim=x.shape, inputs=[o, x], outputs=[out])


def test_callable_nested_struct_vmap_and_grad() -> None:
    w, x = _wx()
    b = np.linspace(-2.0, 0.5, w.size, dtype=np.float32)
    call = jax_callable(nested_func, enable_backward=True)

    def f(w: jax.Array, b: jax.Array) -> jax.Array:
        return call({"s": 2.0, "inner": {"w": w, "c": 0.5}, "b": b}, x)[0]

    ws, bs = np.stack([w, -w]), np.stack([b, 2 * b])
    out = jax.vmap(f)(jnp.asarray(ws), jnp.asarray(bs))
    np.testing.assert_allclose(out, np.stack([_nested_ref(2.0, ws[i], 0.5, bs[i], x) for i in range(2)]), rtol=1e-6)
    gw, gb = jax.vmap(jax.grad(lambda w, b: jnp.sum(f(w, b)), argnums=(0, 1)))(jnp.asarray(ws), jnp.asarray(bs))
    np.testing.assert_allclose(gw, np.stack([2.0 * x, 2.0 * x]), rtol=1e-6)
    np.testing.assert_allclose(gb, bs, rtol=1e-6)


@pytest.mark.x64
def test_callable_grad_float64_finite_differences() -> None:
    scale64 = jax_callable(ks.scale64_func, enable_backward=True)
    w = jnp.linspace(0.5, 2.0, 6, dtype=jnp.float64)
    x = jnp.linspace(-1.0, 1.5, 6, dtype=jnp.float64)
    check_grads(lambda w, x: scale64({"k": -1.25, "w": w}, x)[0], (w, x), order=1, modes=["rev"])


# ======================================================================================================================
# A generic struct (jarp.warp.struct) through a generic kernel's arg_types_factory
# ======================================================================================================================


def _generic_run(dtype: Any) -> tuple[list[tuple[Any, ...]], Any, Any, np.ndarray, np.ndarray]:
    calls: list[tuple[Any, ...]] = []

    def factory(*dtypes: Any) -> list[Any]:
        calls.append(dtypes)
        return ks.generic_arg_types(*dtypes)

    m = jax_kernel(ks.generic_kernel, arg_types_factory=factory, enable_backward=True)
    w = np.linspace(0.5, 2.0, 5).astype(dtype)
    x = (np.arange(5) / 3.0).astype(dtype)
    (out,) = jax.jit(lambda w, x: m({"k": 2.0, "w": w}, x))(jnp.asarray(w), jnp.asarray(x))
    gw = jax.grad(lambda w: jnp.sum(m({"k": 2.0, "w": w}, jnp.asarray(x))[0]))(jnp.asarray(w))
    return calls, out, gw, w, x


def test_generic_struct_float32() -> None:
    calls, out, gw, w, x = _generic_run(np.float32)
    assert out.dtype == jnp.float32
    np.testing.assert_allclose(out, 2.0 * w * x, rtol=1e-6)
    np.testing.assert_allclose(gw, 2.0 * x, rtol=1e-6)
    assert set(calls) == {(wp.float32, wp.float32)}


@pytest.mark.x64
def test_generic_struct_float64() -> None:
    calls, out, gw, w, x = _generic_run(np.float64)
    assert out.dtype == jnp.float64
    np.testing.assert_allclose(out, 2.0 * w * x, rtol=1e-15)
    np.testing.assert_allclose(gw, 2.0 * x, rtol=1e-15)
    assert set(calls) == {(wp.float64, wp.float64)}


# ======================================================================================================================
# Inspection and CUDA lowering
# ======================================================================================================================


def test_list_plans_shows_the_struct_parameter() -> None:
    w, x = _wx()
    jax.value_and_grad(lambda w: jnp.sum(_scale({"k": 4.5, "w": w}, jnp.asarray(x))[0]))(jnp.asarray(w))
    plans = [p for p in list_plans() if p.kernel == "scale_kernel" and "4.5" in p.params[0].primal]
    assert {p.kind for p in plans} == {"kernel", "adjoint"}
    for plan in plans:
        m = plan.params[0]
        assert (m.name, m.type) == ("m", "struct Mat")
        assert m.primal == "struct: arrays from operands [0], values (4.5,)"
        assert plan.params[1].primal == "operand 1"
        assert plan.operands[0].shape == (7,)
        assert "m: struct Mat <- struct: arrays from operands [0]" in str(plan)
    (adjoint,) = [p for p in plans if p.kind == "adjoint"]
    assert adjoint.params[0].adjoint == "struct: arrays from results [0]"


def test_jitted_struct_call_lowers_for_cuda() -> None:
    w, x = _wx()

    def f(w: jax.Array, b: jax.Array, x: jax.Array) -> Any:
        value = jnp.sum(_nested({"s": 2.0, "inner": {"w": w, "c": 0.5}, "b": b}, x)[0])
        return value + jnp.sum(_scale({"k": 3.0, "w": w}, x)[0])

    lowered = jax.jit(jax.value_and_grad(f, argnums=(0, 1))).trace(jnp.asarray(w), jnp.asarray(w), jnp.asarray(x))
    text = lowered.lower(lowering_platforms=("cuda",)).as_text()
    calls = [(c["target"], len(c["operands"]), c["plan"]) for c in custom_calls(text)]
    assert calls, text
    plans = [registry.plan(plan) for _, _, plan in calls]
    assert [target for target, _, _ in calls] == ["jarp_warp_call"] * len(calls)
    labels = sorted((p.target.key, p.label) for p in plans)
    assert labels == sorted(itertools.product(["nested_kernel", "scale_kernel"], ["adjoint", "kernel"]))
    for (_, n_operands, _), plan in zip(calls, plans, strict=True):
        # forward: the struct's array fields, then x; the adjoint adds the output's cotangent
        n_arrays = {"nested_kernel": 3, "scale_kernel": 2}[plan.target.key]
        assert n_operands == n_arrays + (plan.label == "adjoint")


# ======================================================================================================================
# A tetrahedral FEM energy in float64: Stable Neo-Hookean over a Mesh struct and a Material struct
# ======================================================================================================================


def _cube_mesh(nx: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A row of ``nx`` unit cubes, each split into 6 positively oriented tets (Kuhn); rest and deformed positions."""
    rng = np.random.default_rng(seed)
    grid = np.array([(i, j, k) for k in range(2) for j in range(2) for i in range(nx + 1)], np.float64)
    index = {tuple(p.astype(int)): n for n, p in enumerate(grid)}
    tets = []
    for c in range(nx):
        for perm in itertools.permutations(range(3)):
            corner = np.array([c, 0, 0])
            verts = [corner.copy()]
            for axis in perm:
                corner[axis] += 1
                verts.append(corner.copy())
            tets.append([index[tuple(v)] for v in verts])
    tets_arr = np.asarray(tets, np.int32)
    rest = grid + 0.05 * rng.standard_normal(grid.shape)
    dm = _edges(rest, tets_arr)
    flip = np.linalg.det(dm) < 0
    tets_arr[flip, 2], tets_arr[flip, 3] = tets_arr[flip, 3], tets_arr[flip, 2].copy()
    deformed = rest @ np.diag([1.2, 0.9, 1.05]) + 0.08 * rng.standard_normal(grid.shape)
    return rest, deformed, tets_arr


def _edges(x: Any, tets: Any) -> Any:
    """Per tet, the matrix whose columns are x1 - x0, x2 - x0, x3 - x0."""
    xt = x[tets]
    return (xt[:, 1:] - xt[:, :1]).transpose(0, 2, 1)


def _snh_energy_jnp(x: jax.Array, tets: Any, dm_inv: jax.Array, vol: jax.Array, mu: float, lam: float) -> jax.Array:
    f = _edges(x, tets) @ dm_inv
    ic = jnp.sum(f * f, axis=(1, 2))
    j = jnp.linalg.det(f)
    alpha = 1.0 + mu / lam
    return jnp.sum(vol * (0.5 * mu * (ic - 3.0) + 0.5 * lam * (j - alpha) ** 2))


@pytest.fixture(scope="module")
def fem() -> dict[str, Any]:
    rest, deformed, tets = _cube_mesh(nx=2, seed=0)
    dm = _edges(rest, tets)
    assert np.all(np.linalg.det(dm) > 0)
    return {
        "x": jnp.asarray(deformed),
        "rest": jnp.asarray(rest),
        "tets": tets,
        "dm_inv": jnp.asarray(np.linalg.inv(dm)),
        "vol": jnp.asarray(np.linalg.det(dm) / 6.0),
        "mu": 1.3,
        "lam": 7.5,
    }


_snh_energy = jax_kernel(ks.snh_energy, enable_backward=True)
_snh_grad = jax_kernel(ks.snh_grad)


def _jarp_energy(x: jax.Array, tets: Any, dm_inv: jax.Array, vol: jax.Array, mu: float, lam: float) -> jax.Array:
    mesh = {"tets": tets, "Dm_inv": dm_inv, "vol": vol}
    (energy,) = _snh_energy(x, mesh, {"mu": mu, "lam": lam}, launch_dims=len(tets), output_dims={"energy": 1})
    return energy[0]


def _args(fem: dict[str, Any]) -> tuple[Any, ...]:
    return fem["x"], fem["tets"], fem["dm_inv"], fem["vol"], fem["mu"], fem["lam"]


@pytest.mark.x64
def test_fem_energy_matches_jnp(fem: dict[str, Any]) -> None:
    expected = _snh_energy_jnp(*_args(fem))
    assert expected > 1e-2  # a deformed mesh: the energy is not trivially zero
    np.testing.assert_allclose(_jarp_energy(*_args(fem)), expected, rtol=1e-12)
    jitted = jax.jit(_jarp_energy, static_argnums=(4, 5))(*_args(fem))  # the mesh arrays traced, tets included
    np.testing.assert_allclose(jitted, expected, rtol=1e-12)
    # the rest state (F = I) is stress-free (zero gradient) with energy density mu^2 / (2 lam)
    _, tets, dm_inv, vol, mu, lam = _args(fem)
    rest = fem["rest"]
    np.testing.assert_allclose(
        _jarp_energy(rest, tets, dm_inv, vol, mu, lam), np.sum(vol) * mu**2 / (2 * lam), rtol=1e-12
    )
    g_rest = jax.grad(_jarp_energy)(rest, tets, dm_inv, vol, mu, lam)
    np.testing.assert_allclose(g_rest, 0.0, atol=1e-12)


@pytest.mark.x64
def test_fem_gradient_adjoint_jnp_and_hand_written_kernel_agree(fem: dict[str, Any]) -> None:
    x, tets, dm_inv, vol, mu, lam = _args(fem)
    g_jnp = jax.grad(_snh_energy_jnp)(*_args(fem))
    g_adjoint = jax.jit(jax.grad(lambda x: _jarp_energy(x, tets, dm_inv, vol, mu, lam)))(x)
    mesh = {"tets": tets, "Dm_inv": dm_inv, "vol": vol}
    (g_kernel,) = _snh_grad(x, mesh, {"mu": mu, "lam": lam}, launch_dims=len(tets), output_dims={"grad": len(x)})
    assert np.max(np.abs(g_jnp)) > 1e-2
    np.testing.assert_allclose(g_adjoint, g_jnp, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g_kernel, g_jnp, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(g_adjoint, g_kernel, rtol=1e-10, atol=1e-12)


@pytest.mark.x64
def test_fem_gradient_wrt_mesh_fields_and_finite_differences(fem: dict[str, Any]) -> None:
    x, tets, dm_inv, vol, mu, lam = _args(fem)
    # gradients with respect to the struct's float array fields, through Warp's adjoint
    grads = jax.grad(lambda x, d, v: _jarp_energy(x, tets, d, v, mu, lam), argnums=(0, 1, 2))(x, dm_inv, vol)
    expected = jax.grad(lambda x, d, v: _snh_energy_jnp(x, tets, d, v, mu, lam), argnums=(0, 1, 2))(x, dm_inv, vol)
    for g, e in zip(grads, expected, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-10, atol=1e-12)
    check_grads(lambda x, d, v: _jarp_energy(x, tets, d, v, mu, lam), (x, dm_inv, vol), order=1, modes=["rev"])


@pytest.mark.x64
def test_fem_energy_vmap_over_positions(fem: dict[str, Any]) -> None:
    x, tets, dm_inv, vol, mu, lam = _args(fem)
    xs = jnp.stack([x, 1.1 * x, x + 0.5])
    energies = jax.vmap(lambda x: _jarp_energy(x, tets, dm_inv, vol, mu, lam))(xs)
    expected = jnp.stack([_snh_energy_jnp(xi, tets, dm_inv, vol, mu, lam) for xi in xs])
    np.testing.assert_allclose(energies, expected, rtol=1e-12)
    np.testing.assert_allclose(energies[2], energies[0], rtol=1e-12)  # translation invariance
