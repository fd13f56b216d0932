"""Tests of struct parameters at the raw argument-block level: `_plan._struct_layout` (the type's leaves),
`_plan._binding`/`_plan._arg_checks` (a struct value's flattening) and `_ffi._struct_bytes` (the bytes).

The launch tests build a ctypes argument block by hand (as the FFI bridge does) from
`struct_bytes` / `pointer_slots` / `grad_pointer_slots` / `adjoint_struct_bytes`,
call the kernel's compiled forward and backward entry points directly, and compare
with ``wp.launch`` and ``wp.Tape`` on the same data, with a NumPy reference, and with
finite differences. No JAX is involved there; the flatten tests use JAX arrays.
"""

from __future__ import annotations

import ctypes
import dataclasses
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp._ffi._struct_bytes import (
    adjoint_struct_bytes,
    grad_pointer_slots,
    make_struct_instance,
    pointer_slots,
    struct_bytes,
)
from jarp.warp._plan._arg_checks import normalize_value
from jarp.warp._plan._binding import flatten_struct_value
from jarp.warp._plan._struct_layout import StructLayout, struct_layout
from jarp.warp._struct import struct as jarp_struct
from jarp.warp._upstream import _warp_kernels, _warp_launches, _warp_types

CPU = "cpu"

# --- structs and kernels (one Warp module for this file) ------------------------------------------------------------


@wp.struct
class Inner32:
    w: wp.array(dtype=wp.float32)
    c: wp.vec3f


@wp.struct
class Body32:
    x: wp.array(dtype=wp.vec3f)
    k: wp.float32
    m: wp.mat22f
    n: wp.int32
    inner: Inner32
    h: wp.float16
    flag: wp.bool
    grid: wp.array2d(dtype=wp.float32)
    rot: wp.array(dtype=wp.mat22f)


@wp.struct
class Inner64:
    w: wp.array(dtype=wp.float64)
    c: wp.vec3d


@wp.struct
class Body64:
    x: wp.array(dtype=wp.vec3d)
    k: wp.float64
    m: wp.mat22d
    n: wp.int32
    inner: Inner64
    h: wp.float16
    flag: wp.bool
    grid: wp.array2d(dtype=wp.float64)
    rot: wp.array(dtype=wp.mat22d)


@wp.kernel
def body32(s: Body32, y: wp.array(dtype=wp.float32), scale: wp.float32, out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    v = s.x[i]
    e = s.k * wp.dot(v, s.inner.c) * s.inner.w[i] + s.m[0, 1] * y[i] * y[i]
    e += wp.float32(s.n) + wp.float32(s.h) * v[0] * v[0] + s.grid[i, 1] * s.grid[i, 0]
    r = s.rot[i]
    e += r[0, 0] * r[1, 1] - r[0, 1] * v[2]
    if s.flag:
        e += 100.0
    out[i] = scale * e


@wp.kernel
def body64(s: Body64, y: wp.array(dtype=wp.float64), scale: wp.float64, out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    v = s.x[i]
    e = s.k * wp.dot(v, s.inner.c) * s.inner.w[i] + s.m[0, 1] * y[i] * y[i]
    e += wp.float64(s.n) + wp.float64(s.h) * v[0] * v[0] + s.grid[i, 1] * s.grid[i, 0]
    r = s.rot[i]
    e += r[0, 0] * r[1, 1] - r[0, 1] * v[2]
    if s.flag:
        e += wp.float64(100.0)
    out[i] = scale * e


@jarp_struct
class Material:
    """A dtype-generic struct (jarp.warp.struct)."""

    @staticmethod
    def __annotations_factory__(dtype: Any) -> dict[str, Any]:
        return {
            "lam": dtype,
            "dirs": wp.array(dtype=wp.types.vector(3, dtype)),
            "frame": wp.types.matrix((3, 3), dtype),
        }


@wp.kernel
def material64(mat: Material[wp.float64], out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    d = mat.dirs[i]
    out[i] = mat.lam * wp.dot(mat.frame * d, d)


@wp.kernel
def material32(mat: Material[wp.float32], out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    d = mat.dirs[i]
    out[i] = mat.lam * wp.dot(mat.frame * d, d)


# Structs only the layout sees, each in a Warp module of its own (never built).


class Point:
    p: wp.vec3f


class Cloud:
    pts: wp.array(dtype=Point)


class Outer:
    k: float
    cloud: Cloud


class Indexed:
    a: wp.indexedarray(dtype=float)


class Empty:
    pass


Point = wp.struct(Point, module="unique")
Cloud = wp.struct(Cloud, module="unique")
Outer = wp.struct(Outer, module="unique")
Indexed = wp.struct(Indexed, module="unique")
Empty = wp.struct(Empty, module="unique")

# --- raw argument blocks ----------------------------------------------------------------------------------------------

_FORWARD = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)
_BACKWARD = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p)


@dataclasses.dataclass
class StructArg:
    """A struct argument of a raw block: the buffers at `pointer_slots` (and optionally `grad_pointer_slots`)."""

    arrays: list[np.ndarray]
    statics: tuple[Any, ...] = ()
    grads: list[np.ndarray] | None = None  # patched at grad_pointer_slots (primal block of a backward launch)
    adjoint: bool = False  # adjoint_struct_bytes instead of struct_bytes


def _raw_block(kernel: wp.Kernel, values: list[Any]) -> ctypes.Structure:
    params = _warp_kernels.kernel_params(kernel)
    fields = []
    for name, t in params:
        if _warp_types.is_struct_type(t):
            fields.append((name, struct_layout(t, name).ctype))
        elif wp.types.is_array(t):
            fields.append((name, _warp_launches.ArrayStruct))
        else:
            fields.append((name, wp.types.type_ctype(t)))
    block_type = type("ArgBlock", (ctypes.Structure,), {"_fields_": fields})
    block = block_type()
    base = ctypes.addressof(block)
    for (name, t), value in zip(params, values, strict=True):
        off = getattr(block_type, name).offset
        if _warp_types.is_struct_type(t):
            layout = struct_layout(t, name)
            shapes = [a.shape for a in value.arrays]
            raw = adjoint_struct_bytes(layout, shapes) if value.adjoint else struct_bytes(layout, shapes, value.statics)
            assert len(raw) == ctypes.sizeof(layout.ctype) == layout.size
            ctypes.memmove(base + off, raw, len(raw))
            for slot, arr in zip(pointer_slots(layout), value.arrays, strict=True):
                assert (off + slot) % 8 == 0
                ctypes.c_uint64.from_address(base + off + slot).value = arr.ctypes.data
            for slot, g in zip(grad_pointer_slots(layout), value.grads or (), strict=False):
                ctypes.c_uint64.from_address(base + off + slot).value = g.ctypes.data
        elif wp.types.is_array(t):
            ndim = t.ndim
            arr = _warp_launches.ArrayStruct(value.ctypes.data, 0, ndim, value.shape[:ndim], value.strides[:ndim])
            setattr(block, name, arr)
        else:
            setattr(block, name, value)
    return block


def _raw_forward(kernel: wp.Kernel, n: int, values: list[Any]) -> None:
    entry = _warp_launches.load_entry_points(kernel, wp.get_device(CPU))
    bounds = _warp_launches.launch_bounds(kernel, (n,), entry.block_dim)
    block = _raw_block(kernel, values)
    _FORWARD(entry.forward)(ctypes.addressof(bounds), ctypes.addressof(block))


def _raw_backward(kernel: wp.Kernel, n: int, primal: list[Any], adjoint: list[Any]) -> None:
    entry = _warp_launches.load_entry_points(kernel, wp.get_device(CPU))
    bounds = _warp_launches.launch_bounds(kernel, (n,), entry.block_dim)
    block, adj = _raw_block(kernel, primal), _raw_block(kernel, adjoint)
    _BACKWARD(entry.backward)(ctypes.addressof(bounds), ctypes.addressof(block), ctypes.addressof(adj))


# --- data -------------------------------------------------------------------------------------------------------------

N = 5
# k, m, n, c, h, flag: in layout order of the value leaves (Body: k, m, n, inner.c, h, flag)
STATICS = (1.5, ((0.25, -2.0), (3.0, 4.0)), 7, (0.5, -1.0, 2.0), 0.75, False)


def _body_arrays(dtype: Any, seed: int = 0) -> list[np.ndarray]:
    """x (n, 3), inner.w (n,), grid (n, 2), rot (n, 2, 2): in layout order of the array leaves."""
    rng = np.random.default_rng(seed)
    return [
        rng.normal(size=(N, 3)).astype(dtype),
        rng.normal(size=N).astype(dtype),
        rng.normal(size=(N, 2)).astype(dtype),
        rng.normal(size=(N, 2, 2)).astype(dtype),
    ]


def _numpy_body(arrays: list[np.ndarray], statics: tuple[Any, ...], y: np.ndarray, scale: float) -> np.ndarray:
    x, w, grid, rot = (a.astype(np.float64) for a in arrays)
    k, m, n, c, h, flag = statics
    e = k * (x @ np.asarray(c)) * w + m[0][1] * y * y + n + np.float16(h) * x[:, 0] ** 2 + grid[:, 1] * grid[:, 0]
    e = e + rot[:, 0, 0] * rot[:, 1, 1] - rot[:, 0, 1] * x[:, 2] + (100.0 if flag else 0.0)
    return scale * e


def _wp_arrays(arrays: list[np.ndarray], vec: Any, mat: Any, **kwargs: Any) -> list[wp.array]:
    """The body's arrays as Warp arrays (x of vectors, rot of matrices)."""
    scalar = vec._wp_scalar_type_
    dtypes = (vec, scalar, scalar, mat)
    return [wp.array(a, dtype=dt, device=CPU, **kwargs) for a, dt in zip(arrays, dtypes, strict=True)]


def _warp_body(struct_type: Any, arrays: list[wp.array], statics: tuple[Any, ...], vec: Any, mat: Any) -> Any:
    """Build the Warp struct instance the Warp way (the reference for wp.launch)."""
    k, m, n, c, h, flag = statics
    s = struct_type()
    s.x, s.inner.w, s.grid, s.rot = arrays
    s.k, s.m, s.n, s.inner.c, s.h, s.flag = k, mat(*np.ravel(m)), n, vec(*c), h, flag
    return s


CASES = [
    pytest.param(body32, Body32, np.float32, wp.vec3f, wp.mat22f, wp.float32, 1e-5, id="float32"),
    pytest.param(body64, Body64, np.float64, wp.vec3d, wp.mat22d, wp.float64, 1e-12, id="float64"),
]


# --- layout -----------------------------------------------------------------------------------------------------------


def test_layout_flattens_nested_structs_in_memory_order() -> None:
    layout = struct_layout(Body32, "s")
    names = [leaf.name for leaf in layout.leaves]
    assert names == ["s.x", "s.k", "s.m", "s.n", "s.inner.w", "s.inner.c", "s.h", "s.flag", "s.grid", "s.rot"]
    assert [leaf.name for leaf in layout.arrays] == ["s.x", "s.inner.w", "s.grid", "s.rot"]
    ctype = Body32.ctype
    inner_base = ctype.inner.offset
    expected = {
        "s.x": ctype.x.offset,
        "s.k": ctype.k.offset,
        "s.m": ctype.m.offset,
        "s.n": ctype.n.offset,
        "s.inner.w": inner_base + Inner32.ctype.w.offset,
        "s.inner.c": inner_base + Inner32.ctype.c.offset,
        "s.h": ctype.h.offset,
        "s.flag": ctype.flag.offset,
        "s.grid": ctype.grid.offset,
        "s.rot": ctype.rot.offset,
    }
    assert {leaf.name: leaf.offset for leaf in layout.leaves} == expected
    assert layout.size == ctypes.sizeof(ctype)
    assert all(slot % 8 == 0 for slot in pointer_slots(layout))
    assert grad_pointer_slots(layout) == tuple(s + 8 for s in pointer_slots(layout))
    specs = {spec.name: spec for spec in layout.array_specs}
    assert specs["s.x"].inner_shape == (3,)
    assert specs["s.x"].warp_ndim == 1
    assert specs["s.grid"].warp_ndim == 2
    assert specs["s.grid"].np_dtype == np.float32
    assert specs["s.rot"].inner_shape == (2, 2)
    values = {leaf.name: leaf for leaf in layout.values}
    assert values["s.m"].value_shape == (2, 2)
    assert values["s.inner.c"].value_shape == (3,)
    assert values["s.h"].scalar_type is wp.float16
    assert values["s.k"].value_shape == ()


def test_layout_is_hashable_cached_and_per_name() -> None:
    a, b = struct_layout(Body64, "s"), struct_layout(Body64, "s")
    assert a == b
    assert hash(a) == hash(b)
    assert struct_layout(Body64, "t") != a
    assert struct_layout(Body64, "t").leaves[0].path == ("t", "x")
    assert isinstance(a, StructLayout)


def test_layout_refuses_arrays_of_structs_naming_the_field() -> None:
    with pytest.raises(TypeError, match=r"struct field 'o\.cloud\.pts' is an array of structs \(Point\)"):
        struct_layout(Outer, "o")


def test_layout_refuses_indexed_arrays_and_non_structs() -> None:
    with pytest.raises(
        TypeError, match=r"struct field 'q\.a' is a wp\.indexedarray \(1-d, of float32\); jarp passes plain wp\.array"
    ):
        struct_layout(Indexed, "q")
    with pytest.raises(TypeError, match="expected a Warp struct type"):
        struct_layout(wp.vec3f, "q")


def test_empty_struct_has_no_leaves() -> None:
    layout = struct_layout(Empty, "e")
    assert layout.leaves == ()
    assert struct_bytes(layout, [], []) == bytes(layout.size)


# --- bytes ------------------------------------------------------------------------------------------------------------


def test_struct_bytes_decode_to_shapes_strides_and_values() -> None:
    layout = struct_layout(Body32, "s")
    raw = struct_bytes(layout, [(N, 3), (N,), (N, 2), (N, 2, 2)], STATICS)
    st = Body32.ctype.from_buffer_copy(raw)
    assert (st.x.ndim, st.x.shape[0], st.x.strides[0], st.x.data, st.x.grad) == (1, N, 12, 0, 0)
    assert (st.grid.ndim, list(st.grid.shape[:2]), list(st.grid.strides[:2])) == (2, [N, 2], [8, 4])
    assert (st.rot.ndim, st.rot.strides[0]) == (1, 16)  # a mat22f element is 16 bytes
    assert (st.inner.w.ndim, st.inner.w.strides[0]) == (1, 4)
    assert st.k == 1.5
    assert st.n == 7
    assert st.flag is False
    assert [st.m[i][j] for i in range(2) for j in range(2)] == [0.25, -2.0, 3.0, 4.0]
    assert list(st.inner.c) == [0.5, -1.0, 2.0]
    assert st.h == int(np.float16(0.75).view(np.uint16))  # half as its bit pattern


def test_struct_bytes_accept_warp_shapes_too() -> None:
    layout = struct_layout(Body32, "s")
    jax_shapes = struct_bytes(layout, [(N, 3), (N,), (N, 2), (N, 2, 2)], STATICS)
    assert struct_bytes(layout, [(N,), (N,), (N, 2), (N,)], STATICS) == jax_shapes
    with pytest.raises(ValueError, match=r"struct field 's\.x'.*shape \(5, 4\)"):
        struct_bytes(layout, [(N, 4), (N,), (N, 2), (N,)], STATICS)


def test_struct_bytes_match_a_warp_instance_with_pointers_zeroed() -> None:
    arrays = _wp_arrays(_body_arrays(np.float32), wp.vec3f, wp.mat22f)
    s = _warp_body(Body32, arrays, STATICS, wp.vec3f, wp.mat22f)
    warp_raw = bytearray(bytes(_warp_types.struct_instance_ctype(s)))
    layout = struct_layout(Body32, "s")
    for slot in pointer_slots(layout):
        warp_raw[slot : slot + 8] = bytes(8)
    assert struct_bytes(layout, [a.shape for a in _body_arrays(np.float32)], STATICS) == bytes(warp_raw)


def test_adjoint_struct_bytes_zero_values_and_keep_shapes() -> None:
    layout = struct_layout(Body64, "s")
    raw = adjoint_struct_bytes(layout, [(N, 3), (N,), (N, 2), (N, 2, 2)])
    st = Body64.ctype.from_buffer_copy(raw)
    assert st.k == 0.0
    assert st.n == 0
    assert list(st.inner.c) == [0.0, 0.0, 0.0]
    assert (st.x.shape[0], st.x.strides[0], st.grid.strides[0], st.rot.strides[0]) == (N, 24, 16, 32)


# --- raw launches -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("kernel", "struct_type", "dtype", "vec", "mat", "scalar", "tol"), CASES)
@pytest.mark.parametrize("flag", [False, True])
def test_raw_forward_matches_wp_launch_and_numpy(
    kernel: Any, struct_type: Any, dtype: Any, vec: Any, mat: Any, scalar: Any, tol: float, flag: bool
) -> None:
    arrays = _body_arrays(dtype)
    statics = (*STATICS[:5], flag)
    y = np.linspace(-1.0, 1.0, N).astype(dtype)
    out = np.full(N, np.nan, dtype=dtype)
    _raw_forward(kernel, N, [StructArg(arrays, statics), y, 0.5, out])

    wp_out = wp.zeros(N, dtype=scalar, device=CPU)
    s = _warp_body(struct_type, _wp_arrays(arrays, vec, mat), statics, vec, mat)
    wp.launch(kernel, dim=N, inputs=[s, wp.array(y, device=CPU), 0.5], outputs=[wp_out], device=CPU)
    np.testing.assert_array_equal(out, wp_out.numpy())
    np.testing.assert_allclose(out, _numpy_body(arrays, statics, y.astype(np.float64), 0.5), rtol=tol, atol=tol)


def _raw_grads(kernel: Any, dtype: Any, arrays: list[np.ndarray], y: np.ndarray, seed: np.ndarray) -> list[np.ndarray]:
    """Struct-array gradients then y's, from the raw backward entry point."""
    grads = [np.zeros_like(a) for a in arrays]
    y_grad = np.zeros_like(y)
    out = np.zeros(N, dtype=dtype)
    primal = [StructArg(arrays, STATICS, grads=grads), y, 0.5, out]
    adjoint = [StructArg(grads, adjoint=True), y_grad, 0.0, seed.copy()]
    _raw_backward(kernel, N, primal, adjoint)
    return [*grads, y_grad]


@pytest.mark.parametrize(("kernel", "struct_type", "dtype", "vec", "mat", "scalar", "tol"), CASES)
def test_raw_backward_matches_wp_tape(
    kernel: Any, struct_type: Any, dtype: Any, vec: Any, mat: Any, scalar: Any, tol: float
) -> None:
    arrays = _body_arrays(dtype, seed=1)
    y = np.linspace(-1.0, 1.0, N).astype(dtype)
    seed = np.arange(1, N + 1).astype(dtype)
    raw = _raw_grads(kernel, dtype, arrays, y, seed)

    wp_arrays = _wp_arrays(arrays, vec, mat, requires_grad=True)
    wp_y = wp.array(y, device=CPU, requires_grad=True)
    wp_out = wp.zeros(N, dtype=scalar, device=CPU, requires_grad=True)
    s = _warp_body(struct_type, wp_arrays, STATICS, vec, mat)
    tape = wp.Tape()
    with tape:
        wp.launch(kernel, dim=N, inputs=[s, wp_y, 0.5], outputs=[wp_out], device=CPU)
    tape.backward(grads={wp_out: wp.array(seed, device=CPU)})
    expected = [a.grad.numpy() for a in wp_arrays] + [wp_y.grad.numpy()]
    for got, want in zip(raw, expected, strict=True):
        np.testing.assert_array_equal(got, want)
    assert all(np.any(g != 0) for g in raw)  # every input gets a gradient


def test_raw_backward_matches_finite_differences_float64() -> None:
    arrays = _body_arrays(np.float64, seed=2)
    y = np.linspace(-1.0, 1.0, N)
    seed = np.arange(1, N + 1, dtype=np.float64)
    grads = _raw_grads(body64, np.float64, arrays, y, seed)

    def loss(arrs: list[np.ndarray], yy: np.ndarray) -> float:
        out = np.zeros(N)
        _raw_forward(body64, N, [StructArg(arrs, STATICS), yy, 0.5, out])
        return float(seed @ out)

    eps = 1e-6
    inputs = [*arrays, y]
    for which, grad in enumerate(grads):
        fd = np.zeros_like(inputs[which])
        for idx in np.ndindex(fd.shape):
            plus = [a.copy() for a in inputs]
            minus = [a.copy() for a in inputs]
            plus[which][idx] += eps
            minus[which][idx] -= eps
            fd[idx] = (loss(plus[:-1], plus[-1]) - loss(minus[:-1], minus[-1])) / (2 * eps)
        np.testing.assert_allclose(grad, fd, rtol=1e-6, atol=1e-6)


def test_warp_reads_struct_gradients_through_the_primal_grad_pointer() -> None:
    """Pin Warp's behaviour: the adjoint struct's arrays are not read, the primal array_t.grad is.

    If this starts failing, Warp's codegen changed how struct adjoints flow; revisit
    the adjoint protocol in the `_struct_layout` module docstring.
    """
    arrays = _body_arrays(np.float64, seed=3)
    y = np.linspace(-1.0, 1.0, N)
    grads = [np.zeros_like(a) for a in arrays]
    y_grad = np.zeros_like(y)
    seed = np.ones(N)
    primal = [StructArg(arrays, STATICS), y, 0.5, np.zeros(N)]  # no grad pointers
    _raw_backward(body64, N, primal, [StructArg(grads, adjoint=True), y_grad, 0.0, seed])
    assert all(not np.any(g) for g in grads)
    assert np.any(y_grad)  # a plain array parameter's gradient does come from the adjoint block
    full = _raw_grads(body64, np.float64, arrays, y, seed)
    assert all(np.any(g) for g in full[:-1])
    np.testing.assert_array_equal(full[-1], y_grad)


# --- jarp.warp.struct specialisations -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kernel", "dtype", "scalar"),
    [pytest.param(material32, np.float32, wp.float32, id="float32"), (material64, np.float64, wp.float64)],
)
def test_generic_struct_specialisation_raw_launch(kernel: Any, dtype: Any, scalar: Any) -> None:
    specialised = Material[scalar]
    layout = struct_layout(specialised, "mat")
    assert [leaf.name for leaf in layout.leaves] == ["mat.lam", "mat.dirs", "mat.frame"]
    assert layout.arrays[0].spec is not None
    assert layout.arrays[0].spec.np_dtype == np.dtype(dtype)
    rng = np.random.default_rng(4)
    dirs = rng.normal(size=(N, 3)).astype(dtype)
    frame = rng.normal(size=(3, 3))
    statics = (2.5, tuple(map(tuple, frame.tolist())))
    out = np.zeros(N, dtype=dtype)
    _raw_forward(kernel, N, [StructArg([dirs], statics), out])
    f = frame.astype(dtype).astype(np.float64)
    d = dirs.astype(np.float64)
    expected = 2.5 * np.einsum("ni,ij,nj->n", d, f, d)
    np.testing.assert_allclose(out, expected, rtol=1e-5 if dtype == np.float32 else 1e-12)

    inst = make_struct_instance(specialised, layout, [wp.array(dirs, dtype=wp.types.vector(3, scalar))], statics)
    wp_out = wp.zeros(N, dtype=scalar, device=CPU)
    wp.launch(kernel, dim=N, inputs=[inst], outputs=[wp_out], device=CPU)
    np.testing.assert_array_equal(out, wp_out.numpy())


# --- make_struct_instance -----------------------------------------------------------------------------------------------


def test_make_struct_instance_wraps_external_buffers_and_tapes_gradients() -> None:
    arrays = _body_arrays(np.float64, seed=5)
    grads = [np.zeros_like(a) for a in arrays]
    dtypes = [wp.vec3d, wp.float64, wp.float64, wp.mat22d]
    shapes = [(N,), (N,), (N, 2), (N,)]  # Warp shapes
    # as the jax_callable executor does: arrays on raw pointers, .grad wrapping the adjoint buffers
    wrapped = [
        wp.array(
            ptr=a.ctypes.data,
            dtype=dt,
            shape=shape,
            device=CPU,
            grad=wp.array(ptr=g.ctypes.data, dtype=dt, shape=shape, device=CPU),
            requires_grad=True,
        )
        for a, g, dt, shape in zip(arrays, grads, dtypes, shapes, strict=True)
    ]
    layout = struct_layout(Body64, "s")
    inst = make_struct_instance(Body64, layout, wrapped, STATICS)
    assert inst.inner.w.ptr == arrays[1].ctypes.data
    assert inst.n == 7
    assert inst.inner.c[2] == 2.0

    y = np.linspace(-1.0, 1.0, N)
    out = wp.zeros(N, dtype=wp.float64, device=CPU, requires_grad=True)
    wp_y = wp.array(y, device=CPU, requires_grad=True)
    tape = wp.Tape()
    with tape:
        wp.launch(body64, dim=N, inputs=[inst, wp_y, 0.5], outputs=[out], device=CPU)
    np.testing.assert_allclose(out.numpy(), _numpy_body(arrays, STATICS, y, 0.5), rtol=1e-12)
    seed = np.arange(1, N + 1, dtype=np.float64)
    tape.backward(grads={out: wp.array(seed, device=CPU)})
    raw = _raw_grads(body64, np.float64, arrays, y, seed)
    for got, want in zip(grads, raw[:-1], strict=True):
        np.testing.assert_array_equal(got, want)  # accumulated straight into our buffers


def test_make_struct_instance_checks_types() -> None:
    layout = struct_layout(Inner32, "i")
    with pytest.raises(ValueError, match="expected 1 array"):
        make_struct_instance(Inner32, layout, [], [(0.0, 0.0, 0.0)])
    with pytest.raises(ValueError, match="the layout describes"):
        make_struct_instance(Inner64, layout, [wp.zeros(1, dtype=wp.float32)], [(0.0, 0.0, 0.0)])
    with pytest.raises(TypeError, match="expects dtype float32"):
        make_struct_instance(Inner32, layout, [wp.zeros(1, dtype=wp.float64)], [(0.0, 0.0, 0.0)])


# --- flatten ------------------------------------------------------------------------------------------------------------


def _jax_body() -> dict[str, Any]:
    arrays = [jnp.asarray(a) for a in _body_arrays(np.float32)]
    return {
        "x": arrays[0],
        "k": 1.5,
        "m": ((0.25, -2.0), (3.0, 4.0)),
        "n": 7,
        "inner": {"w": arrays[1], "c": [0.5, -1.0, 2.0]},
        "h": 0.75,
        "flag": False,
        "grid": arrays[2],
        "rot": arrays[3],
    }


class InnerNT(NamedTuple):
    w: Any
    c: Any


@dataclasses.dataclass
class BodyDC:
    x: Any
    k: Any
    m: Any
    n: Any
    inner: Any
    h: Any
    flag: Any
    grid: Any
    rot: Any
    extra: Any = None  # objects may carry more attributes than the struct's fields


class BodyModule(eqx.Module):
    x: Any
    k: Any
    m: Any
    n: Any
    inner: Any
    h: Any
    flag: Any
    grid: Any
    rot: Any


def test_flatten_dict_namedtuple_dataclass_module_and_warp_instance_agree() -> None:
    layout = struct_layout(Body32, "s")
    d = _jax_body()
    flat = flatten_struct_value(layout, d)
    assert flat.statics == STATICS
    assert [a.shape for a in flat.arrays] == [(N, 3), (N,), (N, 2), (N, 2, 2)]
    assert all(isinstance(a, jax.Array) for a in flat.arrays)
    fields = {**d, "inner": InnerNT(**d["inner"])}
    for value in (BodyDC(**fields), BodyModule(**fields)):
        other = flatten_struct_value(layout, value)
        assert other.statics == flat.statics
        assert all(a is b for a, b in zip(other.arrays, flat.arrays, strict=True))
    s = _warp_body(
        Body32, _wp_arrays([np.asarray(a) for a in flat.arrays], wp.vec3f, wp.mat22f), STATICS, wp.vec3f, wp.mat22f
    )
    from_warp = flatten_struct_value(layout, s)
    assert from_warp.statics == STATICS
    for a, b in zip(from_warp.arrays, flat.arrays, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_flatten_then_bytes_is_what_warp_packs() -> None:
    layout = struct_layout(Body32, "s")
    flat = flatten_struct_value(layout, _jax_body())
    raw = struct_bytes(layout, [a.shape for a in flat.arrays], flat.statics)
    assert raw == struct_bytes(layout, [a.shape for a in flat.arrays], STATICS)


def _with(path: tuple[str, ...], value: Any, *, delete: bool = False) -> dict[str, Any]:
    d = _jax_body()
    target = d
    for key in path[:-1]:
        target = target[key]
    if delete:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return d


@pytest.mark.parametrize(
    ("value", "error", "match"),
    [
        (_with(("inner", "w"), None, delete=True), TypeError, r"missing field 's\.inner\.w'"),
        (_with(("inner", "wx"), 1.0), TypeError, r"unknown field\(s\) 's\.inner\.wx'"),
        (_with(("x",), jnp.zeros((N, 3), jnp.int32)), TypeError, r"'s\.x' has dtype int32.*astype\(jnp\.float32\)"),
        (_with(("inner", "w"), jnp.zeros((N, 1))), TypeError, r"'s\.inner\.w' must have 1 dims, got shape \(5, 1\)"),
        (_with(("x",), jnp.zeros((N, 4))), TypeError, r"'s\.x' holds vec3f elements, so its trailing dims must be"),
        (_with(("rot",), jnp.zeros((N, 4))), TypeError, r"'s\.rot' must have 3 dims \(1 array dims \+ \(2, 2\)"),
        (_with(("k",), jnp.float32(2.0)), TypeError, r"'s\.k' is a value float32 field.*pass a Python number"),
        (_with(("inner", "c"), jnp.ones(3)), TypeError, r"'s\.inner\.c' is a value vec3f.*Python number or tuple"),
        (_with(("n",), 2.5), TypeError, r"'s\.n' is an integer field"),
        (_with(("n",), 2**40), ValueError, r"'s\.n' = 1099511627776 does not fit its int32 range"),
        (_with(("m",), (1.0, 2.0)), ValueError, r"'s\.m' expects a value mat22f of shape \(2, 2\), got \(2,\)"),
        (_with(("k",), "fast"), TypeError, r"'s\.k' expects a value float32"),
        (_with(("inner",), 3.0), TypeError, r"argument 's\.inner' is a struct Inner32 and got float"),
        (_with(("grid",), [[1.0, 2.0]]), TypeError, r"'s\.grid' expects a 2-d wp.array of float32 as a JAX or NumPy"),
        (_with(("inner",), Inner64()), TypeError, r"'s\.inner' is a struct Inner32 and got a Warp struct instance of"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_flatten_errors_name_the_field(value: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        flatten_struct_value(struct_layout(Body32, "s"), value, what="Kernel(body32)")


def test_flatten_error_names_the_caller_and_missing_attribute() -> None:
    fields = {k: v for k, v in _jax_body().items() if k != "flag"}
    with pytest.raises(TypeError, match=r"^Kernel\(b\): argument 's' is missing field 's\.flag' \(no attribute"):
        flatten_struct_value(struct_layout(Body32, "s"), _object_with(**fields), what="Kernel(b)")


def _object_with(**fields: Any) -> Any:
    return type("Partial", (), fields)()


def test_flatten_refuses_a_traced_value_field() -> None:
    layout = struct_layout(Body32, "s")

    @jax.jit
    def f(k: jax.Array) -> jax.Array:
        flatten_struct_value(layout, _with(("k",), k))
        return k

    with pytest.raises(TypeError, match=r"'s\.k' .* got a traced value .*pass a Python number"):
        f(jnp.float32(1.0))


def test_flatten_takes_runtime_values_when_asked() -> None:
    layout = struct_layout(Body32, "s")
    flat = flatten_struct_value(layout, _with(("k",), jnp.float32(2.5)), runtime=True)
    ((leaf, operand),) = flat.runtime
    assert leaf.name == "s.k"
    assert operand.shape == (1,)
    np.testing.assert_array_equal(operand, [2.5])
    assert flat.statics == flatten_struct_value(layout, _with(("k",), 0.0)).statics  # a zero placeholder


def test_flatten_accepts_traced_arrays() -> None:
    layout = struct_layout(Inner32, "i")

    @jax.jit
    def f(w: jax.Array) -> jax.Array:
        flat = flatten_struct_value(layout, {"w": w, "c": (1, 2, 3)})
        assert flat.statics == ((1.0, 2.0, 3.0),)
        return flat.arrays[0] * 2

    np.testing.assert_array_equal(f(jnp.ones(3)), [2.0, 2.0, 2.0])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (wp.vec3f(1.0, 2.0, 3.0), (1.0, 2.0, 3.0)),
        (np.array([1, 2, 3]), (1.0, 2.0, 3.0)),
        (wp.vec3h(0.5, 1.5, 2.5), (0.5, 1.5, 2.5)),
    ],
)
def test_normalize_vector_values(value: Any, expected: tuple[float, ...]) -> None:
    leaf = struct_layout(Inner32, "i").values[0]
    assert normalize_value(leaf, value) == expected
    assert all(type(v) is float for v in normalize_value(leaf, value))


def test_normalize_matrix_and_scalars() -> None:
    values = {leaf.name: leaf for leaf in struct_layout(Body32, "s").values}
    assert normalize_value(values["s.m"], wp.mat22f(1.0, 2.0, 3.0, 4.0)) == ((1.0, 2.0), (3.0, 4.0))
    assert normalize_value(values["s.n"], np.int64(3)) == 3
    assert normalize_value(values["s.n"], 4.0) == 4
    assert normalize_value(values["s.k"], wp.float32(2.5)) == 2.5
    assert normalize_value(values["s.flag"], 1) is True


@pytest.mark.x64
def test_flatten_float64_struct_and_hint_x64() -> None:
    layout = struct_layout(Inner64, "i")
    flat = flatten_struct_value(layout, {"w": jnp.ones(3, jnp.float64), "c": (1, 2, 3)})
    assert flat.arrays[0].dtype == jnp.float64
    assert flat.statics == ((1.0, 2.0, 3.0),)
    with pytest.raises(TypeError, match=r"'i\.w' has dtype float32, but the struct expects float64.*jax_enable_x64"):
        flatten_struct_value(layout, {"w": jnp.ones(3, jnp.float32), "c": (1, 2, 3)})
