"""The module contract of ``jarp.warp.JaxKernel`` (issue 2, "The module contract" and "Semantics").

All kernels come from ``tests/warp/kernels.py`` (float32) and ``tests/warp/kernels64.py`` (generic kernels). Values are
checked against NumPy; "default vmap" results are also checked against a per-slice Python loop.
"""

import dataclasses
import os
import subprocess
import sys
from functools import partial
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax
from jax.sharding import PartitionSpec as P
from jax.test_util import check_grads

from jarp.warp import JaxKernel, jax_kernel
from tests.warp import kernels as k
from tests.warp import kernels64 as k64
from tests.warp.kernels import (
    BIN_WEIGHTS,
    BINS,
    ERRORS,
    N_BINS,
    N_SPRING,
    STIFFNESS,
    count_lowerings,
    spring_data,
    spring_expected,
)


def spring(**kwargs) -> JaxKernel:
    return jax_kernel(k.spring_kernel, num_outputs=2, **kwargs)


# ======================================================================================================================
# Equinox module: no leaves, immutable, equal and hashable by value
# ======================================================================================================================

BUILDERS = {
    "triple": lambda: jax_kernel(k.triple_kernel),
    "sincos": lambda: jax_kernel(k.sincos_kernel, num_outputs=2),
    "rowsum-in-out": lambda: jax_kernel(k.rowsum_kernel, in_out_argnames=["sums"]),
    "funky-dict-output-dims": lambda: jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"c": 3, "b": [5]}),
    "diagonal-launch-dims": lambda: jax_kernel(k.diagonal_kernel, launch_dims=[4]),
    "enable-backward": lambda: jax_kernel(k.scale_sum_square, enable_backward=True),
    "broadcast-all": lambda: jax_kernel(k.add_kernel, vmap_method="broadcast_all"),
    "preload-none": lambda: jax_kernel(k.triple_kernel, module_preload_mode=wp.JaxModulePreloadMode.NONE),
    "arg-types-factory": lambda: jax_kernel(k64.generic_add_kernel, arg_types_factory=k64.generic_add_arg_types_list),
}


@pytest.mark.parametrize("name", list(BUILDERS))
def test_module_has_no_leaves_and_only_static_fields(name):
    m = BUILDERS[name]()
    assert isinstance(m, JaxKernel)
    assert isinstance(m, eqx.Module)
    assert jax.tree_util.tree_leaves(m) == []
    assert jax.tree_util.tree_leaves(eqx.filter(m, eqx.is_array)) == []
    for field in dataclasses.fields(m):
        assert field.metadata.get("static", False), f"field {field.name!r} is not static"
    leaves, treedef = jax.tree_util.tree_flatten(m)
    assert jax.tree_util.tree_unflatten(treedef, leaves) == m
    hash(m)


@pytest.mark.parametrize("name", list(BUILDERS))
def test_module_is_immutable(name):
    m = BUILDERS[name]()
    for field in dataclasses.fields(m):
        with pytest.raises(AttributeError):
            setattr(m, field.name, None)
    with pytest.raises(AttributeError):
        m.some_new_attribute = 1


EQUAL_PAIRS = {
    "same-kernel": (lambda: jax_kernel(k.triple_kernel), lambda: jax_kernel(k.triple_kernel)),
    "explicit-defaults": (
        lambda: jax_kernel(k.triple_kernel),
        lambda: jax_kernel(
            k.triple_kernel,
            num_outputs=1,
            vmap_method="sequential",
            launch_dims=None,
            output_dims=None,
            in_out_argnames=[],
            enable_backward=False,
        ),
    ),
    "in-out-list-vs-tuple": (
        lambda: jax_kernel(k.rowsum_kernel, in_out_argnames=["sums"]),
        lambda: jax_kernel(k.rowsum_kernel, in_out_argnames=("sums",)),
    ),
    "output-dims-dict-key-order": (
        lambda: jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"b": 5, "c": 3}),
        lambda: jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"c": 3, "b": 5}),
    ),
    "output-dims-dict-of-lists-vs-tuples": (
        lambda: jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"b": [5], "c": (3,)}),
        lambda: jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"c": [3], "b": (5,)}),
    ),
    "launch-dims-list-vs-tuple": (
        lambda: jax_kernel(k.matmul_kernel, launch_dims=[3, 4]),
        lambda: jax_kernel(k.matmul_kernel, launch_dims=(3, 4)),
    ),
    "enable-backward": (
        lambda: jax_kernel(k.scale_sum_square, enable_backward=True),
        lambda: jax_kernel(k.scale_sum_square, enable_backward=True),
    ),
    "arg-types-factory": (
        lambda: jax_kernel(k64.generic_add_kernel, arg_types_factory=k64.generic_add_arg_types_dict),
        lambda: jax_kernel(k64.generic_add_kernel, arg_types_factory=k64.generic_add_arg_types_dict),
    ),
    "decorator-vs-call": (
        lambda: jax_kernel(num_outputs=2)(k.sincos_kernel),
        lambda: jax_kernel(k.sincos_kernel, num_outputs=2),
    ),
}


@pytest.mark.parametrize("name", list(EQUAL_PAIRS))
def test_equal_options_give_equal_modules(name):
    build1, build2 = EQUAL_PAIRS[name]
    m1, m2 = build1(), build2()
    assert m1 == m2
    assert hash(m1) == hash(m2)
    assert jax.tree_util.tree_structure(m1) == jax.tree_util.tree_structure(m2)


UNEQUAL_PAIRS = {
    "kernel": (lambda: jax_kernel(k.triple_kernel), lambda: jax_kernel(k.reverse_kernel)),
    "num_outputs": (
        lambda: jax_kernel(k.rowsum_count_kernel, num_outputs=2),
        lambda: jax_kernel(k.rowsum_count_kernel, num_outputs=3),
    ),
    "enable_backward": (
        lambda: jax_kernel(k.scale_sum_square),
        lambda: jax_kernel(k.scale_sum_square, enable_backward=True),
    ),
    "vmap_method": (lambda: jax_kernel(k.add_kernel), lambda: jax_kernel(k.add_kernel, vmap_method="broadcast_all")),
    "output_dims": (
        lambda: jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"b": 5, "c": 3}),
        lambda: jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"b": 5, "c": 4}),
    ),
    "launch_dims": (
        lambda: jax_kernel(k.diagonal_kernel, launch_dims=4),
        lambda: jax_kernel(k.diagonal_kernel, launch_dims=5),
    ),
    "in_out_argnames": (
        lambda: jax_kernel(k.rowsum_kernel),
        lambda: jax_kernel(k.rowsum_kernel, in_out_argnames=["sums"]),
    ),
}


@pytest.mark.parametrize("name", list(UNEQUAL_PAIRS))
def test_different_options_give_different_modules(name):
    build1, build2 = UNEQUAL_PAIRS[name]
    m1, m2 = build1(), build2()
    assert m1 != m2
    assert jax.tree_util.tree_structure(m1) != jax.tree_util.tree_structure(m2)


def test_options_are_copied_at_construction():
    # a mutable option mutated after construction must not change the (static, hashed) module
    names = ["sums"]
    dims = {"b": [5], "c": 3}
    rowsum = jax_kernel(k.rowsum_kernel, in_out_argnames=names)
    funky = jax_kernel(k.funky_kernel, num_outputs=2, output_dims=dims)
    hashes = hash(rowsum), hash(funky)

    names.append("matrix")
    dims["b"].append(1)
    dims["c"] = 7

    assert (hash(rowsum), hash(funky)) == hashes
    assert rowsum == jax_kernel(k.rowsum_kernel, in_out_argnames=("sums",))
    assert funky == jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"b": 5, "c": 3})
    b, c = funky(jnp.arange(8, dtype=jnp.float32))
    assert (b.shape, c.shape) == ((5,), (3,))


def test_filter_jit_does_not_retrace_rebuilt_modules():
    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def apply(rowsum, funky, scale, matrix, sums, a):
        (s,) = rowsum(matrix, sums)
        b, c = funky(a)
        (o,) = scale(a, a, 2.0)
        return s, b, c, o

    matrix = jnp.arange(12, dtype=jnp.float32).reshape((3, 4))
    sums = jnp.ones(3, dtype=jnp.float32)
    a = jnp.arange(8, dtype=jnp.float32)
    for i in range(3):
        # rebuilt every call, with freshly made (and differently ordered) list/dict options
        rowsum = jax_kernel(k.rowsum_kernel, in_out_argnames=["sums"])
        funky = jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"c": 3, "b": 5} if i % 2 else {"b": 5, "c": 3})
        scale = jax_kernel(k.scale_sum_square, enable_backward=True)
        s, b, c, o = apply(rowsum, funky, scale, matrix, sums, a)

    a_np = np.arange(8, dtype=np.float32)
    np.testing.assert_array_equal(s, 1.0 + np.arange(12, dtype=np.float32).reshape((3, 4)).sum(axis=1))
    np.testing.assert_array_equal(b, a_np[:5] + 1.0)
    np.testing.assert_array_equal(c, 2.0 * a_np[:3])
    np.testing.assert_allclose(o, (3.0 * a_np) ** 2)


def test_jax_jit_does_not_retrace_rebuilt_modules():
    traces = []

    @jax.jit
    def apply(m, x):
        traces.append(None)
        return m(x)[0]

    x = jnp.arange(5, dtype=jnp.float32)
    for _ in range(3):
        out = apply(jax_kernel(k.triple_kernel), x)
    assert len(traces) == 1
    np.testing.assert_array_equal(out, 3.0 * np.arange(5, dtype=np.float32))


def test_eager_calls_reuse_one_executable():
    x = jnp.arange(6, dtype=jnp.float32)
    m = jax_kernel(k.triple_kernel)
    m(x)  # warm up: compiles once
    with count_lowerings() as lowerings:
        for _ in range(3):
            (y,) = m(x)
        for _ in range(2):
            (y,) = jax_kernel(k.triple_kernel)(x)  # an equal, rebuilt module
    assert lowerings() == 0
    np.testing.assert_array_equal(y, 3.0 * np.arange(6, dtype=np.float32))


def test_eager_numpy_vmap_and_grad_calls_reuse_executables():
    spr = spring()
    p, w = spring_data()
    rev = jax_kernel(k.reverse_kernel)
    xs = jnp.ones((3, 5), dtype=jnp.float32)
    sss = jax_kernel(k.scale_sum_square, enable_backward=True)
    a = jnp.arange(4, dtype=jnp.float32)

    def calls():
        spr(p, w, STIFFNESS)  # NumPy inputs
        jax.vmap(rev)(xs)
        return jax.grad(lambda a: jnp.sum(sss(a, a, 2.0)[0]))(a)

    calls()  # warm up
    with count_lowerings() as lowerings:
        for _ in range(3):
            grad = calls()
    assert lowerings() == 0
    np.testing.assert_allclose(grad, 2.0 * (3.0 * np.arange(4)) * 3.0)


def test_rebuilding_and_calling_registers_no_new_ffi_targets(monkeypatch):
    from jax._src.lib import xla_client

    a = jnp.arange(4, dtype=jnp.float32)
    b = jnp.ones(4, dtype=jnp.float32)

    def build_and_call():
        m = jax_kernel(k.scale_sum_square, enable_backward=True)
        m(a, b, 2.0)
        jax.jit(lambda a, b: m(a, b, 2.0))(a, b)
        return jax.grad(lambda a: jnp.sum(m(a, b, 2.0)[0]))(a)

    build_and_call()  # the first build may register targets

    registered = []
    original = xla_client.register_custom_call_target

    def counting(name, *args, **kwargs):
        registered.append(name)
        return original(name, *args, **kwargs)

    monkeypatch.setattr(xla_client, "register_custom_call_target", counting)
    for _ in range(4):
        grad = build_and_call()
    assert registered == []
    np.testing.assert_allclose(grad, 2.0 * (2.0 * np.arange(4) + 1.0) * 2.0)


# ======================================================================================================================
# Construction errors name the option
# ======================================================================================================================


@pytest.mark.parametrize(
    ("kernel", "options", "match"),
    [
        pytest.param(k.triple_kernel, {"num_outputs": 0}, "num_outputs", id="num_outputs-zero"),
        pytest.param(k.triple_kernel, {"num_outputs": 3}, "num_outputs", id="num_outputs-above-arg-count"),
        pytest.param(k.rowsum_kernel, {"in_out_argnames": ["nope"]}, "in_out_argnames", id="in_out-unknown-name"),
        pytest.param(k.rowsum_kernel, {"in_out_argnames": ["sums", "sums"]}, "in_out_argnames", id="in_out-duplicate"),
        pytest.param(
            k.sincos_kernel,
            {"num_outputs": 2, "in_out_argnames": ["cos_out"]},
            "in_out_argnames",
            id="in_out-after-output-only",
        ),
        pytest.param(
            k.rowsum_kernel,
            {"num_outputs": 1, "in_out_argnames": ["matrix", "sums"]},
            "num_outputs|in_out_argnames",
            id="in_out-more-than-num_outputs",
        ),
        pytest.param(k.spring_kernel, {"num_outputs": 3}, "stiffness|num_outputs", id="non-array-output"),
    ],
)
def test_construction_error_names_option(kernel, options, match):
    with pytest.raises(ERRORS, match=match):
        jax_kernel(kernel, **options)


def test_unknown_vmap_method_is_value_error_at_construction_and_call():
    with pytest.raises(ValueError, match="vmap_method"):
        jax_kernel(k.add_kernel, vmap_method="bogus")
    with pytest.raises(ValueError, match="vmap_method"):
        jax_kernel(vmap_method="bogus")(k.add_kernel)
    m = jax_kernel(k.add_kernel)
    a = jnp.ones(3, dtype=jnp.float32)
    with pytest.raises(ValueError, match="vmap_method"):
        m(a, a, vmap_method="bogus")


@pytest.mark.parametrize(
    "obj", [lambda x: x, k.example_func, 42, "triple_kernel"], ids=["lambda", "func", "int", "str"]
)
def test_non_kernel_is_type_error(obj):
    with pytest.raises(TypeError, match="kernel"):
        jax_kernel(obj)
    with pytest.raises(TypeError, match="kernel"):
        jax_kernel(num_outputs=1)(obj)


# ======================================================================================================================
# Call errors name the argument, before tracing
# ======================================================================================================================


def _bad_calls():
    return {
        # jax-array cases: checked eagerly and under jax.jit
        "too-few-args": (lambda m, p, w: m(p, w), r"\b3\b|stiffness"),
        "too-many-args": (lambda m, p, w: m(p, w, STIFFNESS, w), r"\b3\b|\b4\b"),
        "int32-weights": (lambda m, p, w: m(p, jnp.ones(N_SPRING, dtype=jnp.int32), STIFFNESS), "weights"),
        "ndim-weights": (lambda m, p, w: m(p, w.reshape((N_SPRING, 1)), STIFFNESS), "weights"),
        "ndim-positions": (lambda m, p, w: m(p.reshape(-1), w, STIFFNESS), "positions"),
        "inner-dims-positions": (lambda m, p, w: m(p[:, :2], w, STIFFNESS), "positions"),
        "output-dims-dict-missing-name": (
            lambda m, p, w: m(p, w, STIFFNESS, output_dims={"energies": N_SPRING}),
            "forces",
        ),
    }


@pytest.mark.parametrize("case", list(_bad_calls()))
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_call_error_names_argument(case, jit):
    call, match = _bad_calls()[case]
    m = spring()
    p, w = (jnp.asarray(x) for x in spring_data(N_SPRING))
    fn = jax.jit(partial(call, m)) if jit else partial(call, m)
    with pytest.raises(ERRORS, match=match):
        fn(p, w)


@pytest.mark.parametrize("which", ["positions", "weights"])
def test_float64_numpy_array_to_float32_kernel_names_argument(which):
    # x64 is off in this process, so the float64 array can only come from NumPy; it must not be silently downcast
    m = spring()
    p, w = spring_data(N_SPRING)
    if which == "positions":
        p = p.astype(np.float64)
    else:
        w = w.astype(np.float64)
    with pytest.raises(ERRORS, match=which):
        m(p, w, STIFFNESS)


def test_numpy_float32_arrays_are_accepted():
    m = spring()
    p, w = spring_data(N_SPRING)
    energies, forces = m(p, w, STIFFNESS)
    exp_e, exp_f = spring_expected(p, w)
    np.testing.assert_allclose(energies, exp_e, rtol=1e-5)
    np.testing.assert_allclose(forces, exp_f, rtol=1e-5)


def test_traced_scalar_is_a_runtime_value():
    m = spring()
    p, w = (jnp.asarray(x) for x in spring_data(N_SPRING))
    exp_e, exp_f = spring_expected(p, w)
    energies, forces = jax.jit(lambda p, w, s: m(p, w, s))(p, w, STIFFNESS)
    np.testing.assert_allclose(energies, exp_e, rtol=1e-5)
    np.testing.assert_allclose(forces, exp_f, rtol=1e-5)
    stiff = jnp.array([1.0, 2.0], dtype=jnp.float32)
    batched_e, _ = jax.vmap(lambda s: m(p, w, s))(stiff)
    np.testing.assert_allclose(batched_e, np.stack([spring_expected(p, w, float(s))[0] for s in stiff]), rtol=1e-5)


def test_runtime_scalar_with_wrong_dtype_is_named():
    m = spring()
    p, w = (jnp.asarray(x) for x in spring_data(N_SPRING))
    with pytest.raises(TypeError, match="stiffness"):
        m(p, w, jnp.int32(2))


def test_missing_launch_dims_is_named():
    m = jax_kernel(k.diagonal_kernel)
    with pytest.raises(ERRORS, match="launch_dims"):
        m()
    with pytest.raises(ERRORS, match="launch_dims"):
        jax.jit(lambda: m())()


@pytest.mark.parametrize("s", [2, 2.0, np.float32(2.0), np.float64(2.0), np.int32(2)], ids=type)
def test_static_scalar_forms(s):
    m = spring()
    p, w = spring_data(N_SPRING)
    energies, forces = jax.jit(lambda p, w: m(p, w, s))(jnp.asarray(p), jnp.asarray(w))
    exp_e, exp_f = spring_expected(p, w, 2.0)
    np.testing.assert_allclose(energies, exp_e, rtol=1e-5)
    np.testing.assert_allclose(forces, exp_f, rtol=1e-5)


# ======================================================================================================================
# Launch and output dims: construction-time defaults, call-time overrides
# ======================================================================================================================


def test_construction_time_launch_and_output_dims():
    diag = jax_kernel(k.diagonal_kernel, launch_dims=4)
    (out,) = diag()
    assert out.shape == (4, 3, 3)
    (out,) = diag(launch_dims=2)  # the call option wins
    assert out.shape == (2, 3, 3)
    np.testing.assert_array_equal(out[1], np.diag([1.0, 2.0, 3.0]).astype(np.float32))

    funky = jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"b": 5, "c": 3})
    a_np = np.arange(8, dtype=np.float32)
    b, c = jax.jit(funky)(jnp.asarray(a_np))
    np.testing.assert_array_equal(b, a_np[:5] + 1.0)
    np.testing.assert_array_equal(c, 2.0 * a_np[:3])
    b, c = funky(jnp.asarray(a_np), output_dims=2)  # the call option wins
    np.testing.assert_array_equal(b, a_np[:2] + 1.0)
    np.testing.assert_array_equal(c, 2.0 * a_np[:2])


def test_matmul_tuple_output_dims_and_construction_launch_dims():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(3, 2)).astype(np.float32)
    b = rng.normal(size=(2, 4)).astype(np.float32)
    m = jax_kernel(k.matmul_kernel, launch_dims=(3, 4))
    (c,) = m(jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-6)
    # output bigger than the launch: the rest stays zero
    (c,) = m(jnp.asarray(a), jnp.asarray(b), output_dims=(4, 5))
    expected = np.zeros((4, 5), np.float32)
    expected[:3, :4] = a @ b
    np.testing.assert_allclose(c, expected, rtol=1e-5, atol=1e-6)


# ======================================================================================================================
# Zero-filled outputs
# ======================================================================================================================


def test_pure_outputs_start_zero_filled():
    m = jax_kernel(k.scatter_add_kernel)
    expected = np.bincount(BINS, weights=BIN_WEIGHTS, minlength=N_BINS).astype(np.float32)
    bins, weights = jnp.asarray(BINS), jnp.asarray(BIN_WEIGHTS)
    for _ in range(3):
        (out,) = m(bins, weights, output_dims=N_BINS)
        np.testing.assert_array_equal(out, expected)

    @jax.jit
    def twice(bins, weights):
        (x,) = m(bins, weights, output_dims=N_BINS)
        (y,) = m(bins, weights, output_dims=N_BINS)
        return x, y, x + y

    for _ in range(2):
        x, y, z = twice(bins, weights)
        np.testing.assert_array_equal(x, expected)
        np.testing.assert_array_equal(y, expected)
        np.testing.assert_array_equal(z, 2.0 * expected)


def test_in_out_comes_first_and_pure_output_is_zero_filled():
    m = jax_kernel(k.rowsum_count_kernel, num_outputs=2, in_out_argnames=["sums"])
    matrix = np.arange(12, dtype=np.float32).reshape((3, 4))
    init = np.array([10.0, 20.0, 30.0], np.float32)
    call = partial(m, output_dims={"counts": 3})
    for fn in (call, jax.jit(call)):
        sums, counts = fn(jnp.asarray(matrix), jnp.asarray(init))
        np.testing.assert_array_equal(sums, init + matrix.sum(axis=1))
        np.testing.assert_array_equal(counts, np.full(3, 4.0, np.float32))
    # and under the default vmap
    matrices = np.arange(24, dtype=np.float32).reshape((2, 3, 4))
    inits = np.array([[1.0, 2.0, 3.0], [-1.0, -2.0, -3.0]], np.float32)
    sums, counts = jax.vmap(partial(m, output_dims={"counts": 3}))(jnp.asarray(matrices), jnp.asarray(inits))
    np.testing.assert_array_equal(sums, inits + matrices.sum(axis=2))
    np.testing.assert_array_equal(counts, np.full((2, 3), 4.0, np.float32))


def test_empty_arrays():
    triple = jax_kernel(k.triple_kernel)
    (y,) = triple(jnp.zeros(0, dtype=jnp.float32))
    assert y.shape == (0,)
    (y,) = jax.jit(jax.vmap(triple))(jnp.zeros((3, 0), dtype=jnp.float32))
    assert y.shape == (3, 0)
    (y,) = jax.vmap(triple)(jnp.zeros((0, 4), dtype=jnp.float32))
    assert y.shape == (0, 4)
    (h,) = jax_kernel(k.scatter_add_kernel)(jnp.zeros(0, jnp.int32), jnp.zeros(0, jnp.float32), output_dims=3)
    np.testing.assert_array_equal(h, np.zeros(3, np.float32))  # nothing launched, still zero-filled


# ======================================================================================================================
# vmap: the default is correct for every kernel; "broadcast_all" folding stays available for elementwise kernels
# ======================================================================================================================

B, N, M, NB = 3, 5, 7, 4


def _nonelementwise_cases():
    rng = np.random.default_rng(1)
    tables = rng.normal(size=(B, N)).astype(np.float32)
    indices = rng.integers(0, N, size=(B, M)).astype(np.int32)
    x = rng.normal(size=(B, N)).astype(np.float32)
    bins = rng.integers(0, NB, size=(B, M)).astype(np.int32)
    weights = rng.random((B, M)).astype(np.float32)
    return {
        # per-batch lookup table gathered through indices
        "gather-per-batch-table": (
            k.gather_kernel,
            (indices, tables),
            {},
            np.take_along_axis(tables, indices, axis=1),
        ),
        # reads a.shape[0]
        "reads-shape": (k.reverse_kernel, (x,), {}, x[:, ::-1]),
        # atomic reduction into a fixed-size output
        "atomic-fixed-size-output": (
            k.scatter_add_kernel,
            (bins, weights),
            {"output_dims": NB},
            np.stack([np.bincount(bins[b], weights=weights[b], minlength=NB) for b in range(B)]).astype(np.float32),
        ),
    }


@pytest.mark.parametrize("case", list(_nonelementwise_cases()))
@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_default_vmap_is_correct_for_nonelementwise_kernels(case, jit):
    kernel, args, call_kwargs, expected = _nonelementwise_cases()[case]
    m = jax_kernel(kernel)
    fn = jax.vmap(partial(m, **call_kwargs))
    if jit:
        fn = jax.jit(fn)
    (out,) = fn(*(jnp.asarray(a) for a in args))
    loop = np.stack([np.asarray(m(*(jnp.asarray(a[b]) for a in args), **call_kwargs)[0]) for b in range(B)])
    np.testing.assert_allclose(loop, expected, rtol=1e-6)
    np.testing.assert_allclose(out, expected, rtol=1e-6)


@pytest.mark.parametrize("case", list(_nonelementwise_cases()))
def test_explicit_sequential_vmap_method(case):
    kernel, args, call_kwargs, expected = _nonelementwise_cases()[case]
    for m, kwargs in [
        (jax_kernel(kernel, vmap_method="sequential"), call_kwargs),
        (jax_kernel(kernel, vmap_method="broadcast_all"), {**call_kwargs, "vmap_method": "sequential"}),
    ]:
        (out,) = jax.jit(jax.vmap(partial(m, **kwargs)))(*(jnp.asarray(a) for a in args))
        np.testing.assert_allclose(out, expected, rtol=1e-6)


@settings(max_examples=12, deadline=None, derandomize=True, database=None)
@given(batch=st.integers(1, 4), n=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_default_vmap_property_reverse_and_gather(batch, n, seed):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(batch, n)).astype(np.float32)
    indices = rng.integers(0, n, size=(batch, 3)).astype(np.int32)
    (rev,) = jax.vmap(jax_kernel(k.reverse_kernel))(jnp.asarray(x))
    np.testing.assert_array_equal(rev, x[:, ::-1])
    (gathered,) = jax.vmap(jax_kernel(k.gather_kernel))(jnp.asarray(indices), jnp.asarray(x))
    np.testing.assert_array_equal(gathered, np.take_along_axis(x, indices, axis=1))


@pytest.mark.parametrize("method", ["broadcast_all", "expand_dims"])
@pytest.mark.parametrize("where", ["construction", "call"])
def test_broadcast_all_is_available_and_correct_for_elementwise_kernels(method, where):
    rng = np.random.default_rng(2)
    a = rng.normal(size=(B, N)).astype(np.float32)
    b = rng.normal(size=(B, N)).astype(np.float32)
    if where == "construction":
        add = jax_kernel(k.add_kernel, vmap_method=method)
        sincos = jax_kernel(k.sincos_kernel, num_outputs=2, vmap_method=method)
        scale = jax_kernel(k.scale_kernel, vmap_method=method)
    else:
        add = partial(jax_kernel(k.add_kernel), vmap_method=method)
        sincos = partial(jax_kernel(k.sincos_kernel, num_outputs=2), vmap_method=method)
        scale = partial(jax_kernel(k.scale_kernel), vmap_method=method)

    @jax.jit
    def f(a, b):
        (s,) = jax.vmap(add)(a, b)
        (t,) = jax.vmap(add, in_axes=(0, None))(a, b[0])
        sin, cos = jax.vmap(sincos)(a)
        (u,) = jax.vmap(lambda x: scale(x, 3.0))(a)
        return s, t, sin, cos, u

    s, t, sin, cos, u = f(jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_allclose(s, a + b, rtol=1e-6)
    np.testing.assert_allclose(t, a + b[0][None, :], rtol=1e-6)
    np.testing.assert_allclose(sin, np.sin(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(cos, np.cos(a), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(u, 3.0 * a, rtol=1e-6)


def test_broadcast_all_folds_the_batch_into_launch_dim_0():
    # folding is what "broadcast_all" means: a kernel reading a.shape[0] sees the whole folded batch
    x = np.arange(B * N, dtype=np.float32).reshape((B, N))
    (folded,) = jax.vmap(jax_kernel(k.reverse_kernel, vmap_method="broadcast_all"))(jnp.asarray(x))
    np.testing.assert_array_equal(folded, x.reshape(-1)[::-1].reshape((B, N)))
    (correct,) = jax.vmap(jax_kernel(k.reverse_kernel))(jnp.asarray(x))
    np.testing.assert_array_equal(correct, x[:, ::-1])


def test_vmap_in_axes_none_mixes():
    rng = np.random.default_rng(4)
    a = rng.normal(size=(N,)).astype(np.float32)
    bs = rng.normal(size=(B, N)).astype(np.float32)
    table = rng.normal(size=(N,)).astype(np.float32)
    tables = rng.normal(size=(B, N)).astype(np.float32)
    idx = rng.integers(0, N, size=(M,)).astype(np.int32)
    idxs = rng.integers(0, N, size=(B, M)).astype(np.int32)
    add = jax_kernel(k.add_kernel)
    gather = jax_kernel(k.gather_kernel)

    @jax.jit
    def f(a, bs, table, tables, idx, idxs):
        (r1,) = jax.vmap(add, in_axes=(None, 0))(a, bs)
        (r2,) = jax.vmap(add, in_axes=(0, None))(bs, a)
        (r3,) = jax.vmap(gather, in_axes=(0, None))(idxs, table)  # shared table
        (r4,) = jax.vmap(gather, in_axes=(None, 0))(idx, tables)  # shared indices, per-batch tables
        return r1, r2, r3, r4

    r1, r2, r3, r4 = f(*(jnp.asarray(x) for x in (a, bs, table, tables, idx, idxs)))
    np.testing.assert_allclose(r1, a[None, :] + bs, rtol=1e-6)
    np.testing.assert_allclose(r2, bs + a[None, :], rtol=1e-6)
    np.testing.assert_array_equal(r3, table[idxs])
    np.testing.assert_array_equal(r4, tables[:, idx])


def test_vmap_multi_output_with_shared_input():
    m = spring()
    rng = np.random.default_rng(5)
    ps = rng.normal(size=(B, N_SPRING, 3)).astype(np.float32)
    _, w = spring_data(N_SPRING)
    energies, forces = jax.jit(jax.vmap(lambda p, w: m(p, w, STIFFNESS), in_axes=(0, None)))(
        jnp.asarray(ps), jnp.asarray(w)
    )
    assert energies.shape == (B, N_SPRING)
    assert forces.shape == (B, N_SPRING, 3)
    for b in range(B):
        exp_e, exp_f = spring_expected(ps[b], w)
        np.testing.assert_allclose(energies[b], exp_e, rtol=1e-5)
        np.testing.assert_allclose(forces[b], exp_f, rtol=1e-5)


def test_vmap_unbatched_in_out_argument():
    # the in-out buffer is shared (in_axes None) while the matrices are batched: every slice starts from `init`
    m = jax_kernel(k.rowsum_kernel, in_out_argnames=["sums"])
    matrices = np.arange(24, dtype=np.float32).reshape((2, 3, 4))
    init = np.array([1.0, 2.0, 3.0], np.float32)
    (out,) = jax.jit(jax.vmap(m, in_axes=(0, None)))(jnp.asarray(matrices), jnp.asarray(init))
    np.testing.assert_array_equal(out, init[None, :] + matrices.sum(axis=2))


def test_vmap_nonzero_in_and_out_axes():
    x = np.random.default_rng(6).normal(size=(N, B)).astype(np.float32)
    rev = jax_kernel(k.reverse_kernel)
    (out,) = jax.jit(jax.vmap(rev, in_axes=1))(jnp.asarray(x))
    np.testing.assert_array_equal(out, x.T[:, ::-1])
    (out,) = jax.jit(jax.vmap(rev, in_axes=1, out_axes=1))(jnp.asarray(x))
    np.testing.assert_array_equal(out, x[::-1, :])


def test_nested_vmap():
    A = 2
    rng = np.random.default_rng(7)
    x = rng.normal(size=(A, B, N)).astype(np.float32)
    tables = rng.normal(size=(A, N)).astype(np.float32)
    idxs = rng.integers(0, N, size=(A, B, M)).astype(np.int32)
    rev = jax_kernel(k.reverse_kernel)
    gather = jax_kernel(k.gather_kernel)
    add = jax_kernel(k.add_kernel)
    add_folded = jax_kernel(k.add_kernel, vmap_method="broadcast_all")

    (r1,) = jax.vmap(jax.vmap(rev))(jnp.asarray(x))
    np.testing.assert_array_equal(r1, x[..., ::-1])

    (r2,) = jax.jit(jax.vmap(jax.vmap(gather, in_axes=(0, None)), in_axes=(0, 0)))(
        jnp.asarray(idxs), jnp.asarray(tables)
    )
    np.testing.assert_array_equal(r2, tables[np.arange(A)[:, None, None], idxs])

    for m in (add, add_folded):
        (r3,) = jax.jit(jax.vmap(jax.vmap(m)))(jnp.asarray(x), jnp.asarray(x))
        np.testing.assert_allclose(r3, 2.0 * x, rtol=1e-6)


# ======================================================================================================================
# Composition: jit, filter_jit, filter_vmap, grad, scan, while_loop
# ======================================================================================================================


def test_jax_jit_and_eqx_filter_jit():
    x_np = np.arange(7, dtype=np.float32) - 3.0
    x = jnp.asarray(x_np)
    triple = jax_kernel(k.triple_kernel)
    scale = jax_kernel(k.scale_kernel)

    (a,) = jax.jit(lambda x: triple(x))(x)
    (b,) = eqx.filter_jit(triple)(x)
    (c,) = eqx.filter_jit(lambda m, x, s: m(x, s))(scale, x, -2.0)  # the Python float stays static
    (d,) = eqx.filter_jit(lambda m, x: m(x))(triple, x)
    np.testing.assert_array_equal(a, 3.0 * x_np)
    np.testing.assert_array_equal(b, 3.0 * x_np)
    np.testing.assert_array_equal(c, -2.0 * x_np)
    np.testing.assert_array_equal(d, 3.0 * x_np)


def test_eqx_filter_vmap():
    x = np.random.default_rng(8).normal(size=(B, N)).astype(np.float32)
    rev = jax_kernel(k.reverse_kernel)
    (out,) = eqx.filter_vmap(rev)(jnp.asarray(x))
    np.testing.assert_array_equal(out, x[:, ::-1])
    out = eqx.filter_vmap(lambda m, x: m(x)[0], in_axes=(None, 0))(rev, jnp.asarray(x))
    np.testing.assert_array_equal(out, x[:, ::-1])
    out = eqx.filter_jit(eqx.filter_vmap(lambda m, x: m(x)[0], in_axes=(None, 0)))(rev, jnp.asarray(x))
    np.testing.assert_array_equal(out, x[:, ::-1])


def _ab(n=8, seed=9):
    rng = np.random.default_rng(seed)
    return (0.5 + rng.random(n)).astype(np.float32), (rng.random(n) - 0.5).astype(np.float32)


def test_grad_values_scale_sum_square():
    m = jax_kernel(k.scale_sum_square, enable_backward=True)
    a, b = _ab()
    s = 1.5

    def loss(a, b):
        (out,) = m(a, b, s)
        return jnp.sum(out)

    inner = a * s + b
    for grad_fn in (
        jax.grad(loss, argnums=(0, 1)),
        jax.jit(jax.grad(loss, argnums=(0, 1))),
        jax.grad(jax.jit(loss), argnums=(0, 1)),
    ):
        da, db = grad_fn(jnp.asarray(a), jnp.asarray(b))
        np.testing.assert_allclose(da, 2.0 * inner * s, rtol=1e-5)
        np.testing.assert_allclose(db, 2.0 * inner, rtol=1e-5)


def test_eqx_filter_grad_values():
    m = jax_kernel(k.scale_sum_square, enable_backward=True)
    a, b = _ab()
    da, db = eqx.filter_grad(lambda ab: jnp.sum(m(ab[0], ab[1], 1.5)[0]))((jnp.asarray(a), jnp.asarray(b)))
    inner = a * 1.5 + b
    np.testing.assert_allclose(da, 2.0 * inner * 1.5, rtol=1e-5)
    np.testing.assert_allclose(db, 2.0 * inner, rtol=1e-5)


def test_check_grads_float32():
    sss = jax_kernel(k.scale_sum_square, enable_backward=True)
    multi = jax_kernel(k.multi_output, num_outputs=2, enable_backward=True)
    vec = jax_kernel(k.scale_vec2, enable_backward=True)
    spr = spring(enable_backward=True)
    a, b = (jnp.asarray(x) for x in _ab())
    p, w = (jnp.asarray(x) for x in spring_data(N_SPRING))
    tol = {"order": 1, "modes": ("rev",), "atol": 1e-2, "rtol": 1e-2, "eps": 1e-3}
    check_grads(lambda a, b: sss(a, b, 1.5), (a, b), **tol)
    check_grads(lambda a, b: multi(a, b, 1.5), (a, b), **tol)
    check_grads(lambda x: vec(x, -0.5), (a.reshape((4, 2)),), **tol)
    check_grads(lambda p, w: spr(p, w, STIFFNESS), (p, w), **tol)


def test_grad_values_two_outputs_vec3():
    # both cotangents (energies and the vec3 forces) must reach the inputs
    m = spring(enable_backward=True)
    p, w = spring_data(N_SPRING)
    c = np.random.default_rng(10).normal(size=(N_SPRING, 3)).astype(np.float32)

    def loss(p, w):
        energies, forces = m(p, w, STIFFNESS)
        return jnp.sum(energies) + jnp.sum(forces * jnp.asarray(c))

    dp, dw = jax.jit(jax.grad(loss, argnums=(0, 1)))(jnp.asarray(p), jnp.asarray(w))
    s = STIFFNESS
    np.testing.assert_allclose(dp, s * w[:, None] * p - s * w[:, None] * c, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dw, 0.5 * s * np.sum(p * p, axis=1) - s * np.sum(p * c, axis=1), rtol=1e-4, atol=1e-5)


def test_grad_with_unused_output_and_gather_adjoint():
    multi = jax_kernel(k.multi_output, num_outputs=2, enable_backward=True)
    a, b = _ab()
    da, db = jax.grad(lambda a, b: jnp.sum(multi(a, b, 2.0)[0]), argnums=(0, 1))(jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_allclose(da, 2.0 * a, rtol=1e-6)
    np.testing.assert_array_equal(db, np.zeros_like(b))

    # gradient w.r.t. a table read through integer indices: a scatter-add of the cotangent (atomic in the adjoint)
    gather = jax_kernel(k.gather_kernel, enable_backward=True)
    rng = np.random.default_rng(12)
    idx = rng.integers(0, N, size=(B, M)).astype(np.int32)
    tables = rng.normal(size=(B, N)).astype(np.float32)
    cot = rng.normal(size=(B, M)).astype(np.float32)

    def loss(i, t, c):
        return jnp.sum(gather(i, t)[0] * c)

    dt = jax.grad(loss, argnums=1)(jnp.asarray(idx[0]), jnp.asarray(tables[0]), jnp.asarray(cot[0]))
    np.testing.assert_allclose(dt, np.bincount(idx[0], weights=cot[0], minlength=N), rtol=1e-5, atol=1e-6)
    # per-batch tables under the default vmap: each slice's adjoint scatters into its own table
    dts = jax.jit(jax.vmap(jax.grad(loss, argnums=1)))(jnp.asarray(idx), jnp.asarray(tables), jnp.asarray(cot))
    expected = np.stack([np.bincount(idx[b], weights=cot[b], minlength=N) for b in range(B)])
    np.testing.assert_allclose(dts, expected, rtol=1e-5, atol=1e-6)


def test_grad_and_vmap_compose():
    m = jax_kernel(k.scale_sum_square, enable_backward=True)
    rng = np.random.default_rng(11)
    A = (0.5 + rng.random((B, 8))).astype(np.float32)
    Bm = (rng.random((B, 8)) - 0.5).astype(np.float32)
    expected_da = 2.0 * (A * 1.5 + Bm) * 1.5

    def loss(a, b):
        return jnp.sum(m(a, b, 1.5)[0])

    # per-example gradients: vmap of grad
    da = jax.jit(jax.vmap(jax.grad(loss)))(jnp.asarray(A), jnp.asarray(Bm))
    np.testing.assert_allclose(da, expected_da, rtol=1e-5)
    # grad of vmap
    da = jax.grad(lambda A, Bm: jnp.sum(jax.vmap(lambda a, b: m(a, b, 1.5)[0])(A, Bm)))(jnp.asarray(A), jnp.asarray(Bm))
    np.testing.assert_allclose(da, expected_da, rtol=1e-5)
    # grad of vmap with a shared (unbatched) input
    b0 = jnp.asarray(Bm[0])
    db = jax.grad(lambda b: jnp.sum(jax.vmap(lambda a: m(a, b, 1.5)[0])(jnp.asarray(A))))(b0)
    np.testing.assert_allclose(db, np.sum(2.0 * (A * 1.5 + Bm[0][None, :]), axis=0), rtol=1e-5)


def test_lax_scan_and_grad_through_scan():
    m = jax_kernel(k.scale_kernel, enable_backward=True)
    x_np = np.arange(1, 7, dtype=np.float32)

    def run(x):
        def body(carry, _):
            (y,) = m(carry, 0.5)
            return y, jnp.sum(y)

        return lax.scan(body, x, None, length=3)

    final, sums = jax.jit(run)(jnp.asarray(x_np))
    np.testing.assert_allclose(final, 0.125 * x_np)
    np.testing.assert_allclose(sums, np.sum(x_np) * np.array([0.5, 0.25, 0.125], np.float32), rtol=1e-6)
    grad = jax.grad(lambda x: jnp.sum(run(x)[0]))(jnp.asarray(x_np))
    np.testing.assert_allclose(grad, np.full(6, 0.125, np.float32))


def test_lax_while_loop_and_cond():
    triple = jax_kernel(k.triple_kernel)
    x_np = np.arange(5, dtype=np.float32) - 2.0

    @jax.jit
    def run(x):
        def cond(carry):
            i, _ = carry
            return i < 4

        def body(carry):
            i, y = carry
            (y,) = triple(y)
            return i + 1, y

        _, y = lax.while_loop(cond, body, (0, x))
        z = lax.cond(jnp.sum(y) > 0, lambda v: triple(v)[0], lambda v: -v, y)
        return y, z

    y, z = run(jnp.asarray(x_np))
    np.testing.assert_array_equal(y, 81.0 * x_np)
    expected_z = 3.0 * 81.0 * x_np if np.sum(81.0 * x_np) > 0 else -81.0 * x_np
    np.testing.assert_array_equal(z, expected_z)


def test_checkpoint_aot_and_shard_map():
    sss = jax_kernel(k.scale_sum_square, enable_backward=True)
    triple = jax_kernel(k.triple_kernel)
    x_np = np.arange(8, dtype=np.float32)
    x = jnp.asarray(x_np)

    grad = jax.grad(jax.checkpoint(lambda a: jnp.sum(sss(a, a, 2.0)[0])))(x)  # sum((2a + a)^2)
    np.testing.assert_allclose(grad, 18.0 * x_np, rtol=1e-6)

    compiled = jax.jit(lambda x: triple(x)[0]).lower(x).compile()
    np.testing.assert_array_equal(compiled(x), 3.0 * x_np)

    # the guide's shard_map example, on the CPU devices at hand
    mesh = jax.sharding.Mesh(np.array(jax.devices()), "x")
    f = jax.shard_map(lambda a: triple(a)[0], mesh=mesh, in_specs=(P("x"),), out_specs=P("x"))
    np.testing.assert_array_equal(jax.jit(f)(x), 3.0 * x_np)


def test_grad_without_enable_backward_names_the_option():
    triple = jax_kernel(k.triple_kernel)
    with pytest.raises(TypeError, match="enable_backward"):
        jax.grad(lambda a: jnp.sum(triple(a)[0]))(jnp.arange(3, dtype=jnp.float32))


def test_vmap_vec3_input_on_axis_1():
    m = spring()
    p, w = spring_data()
    ps = np.stack([p, 2.0 * p, -p], axis=1)  # (n, 3 batch, 3 components)
    energies, forces = jax.jit(jax.vmap(lambda p: m(p, w, STIFFNESS), in_axes=1, out_axes=1))(jnp.asarray(ps))
    assert energies.shape == (N_SPRING, 3)
    assert forces.shape == (N_SPRING, 3, 3)
    for b in range(3):
        exp_e, exp_f = spring_expected(ps[:, b], w)
        np.testing.assert_allclose(energies[:, b], exp_e, rtol=1e-5)
        np.testing.assert_allclose(forces[:, b], exp_f, rtol=1e-5)


# ======================================================================================================================
# A JaxKernel as a field of a user model; serialisation
# ======================================================================================================================


class SpringModel(eqx.Module):
    weights: jax.Array
    spring: JaxKernel
    stiffness: float = eqx.field(static=True, default=STIFFNESS)

    def __call__(self, positions):
        energies, _forces = self.spring(positions, self.weights, self.stiffness)
        return jnp.sum(energies)


def test_model_field_and_training_with_filter_jit():
    p, w = spring_data(N_SPRING)
    positions = jnp.asarray(p)
    g = 0.5 * STIFFNESS * np.sum(p * p, axis=1)  # d loss / d weights (constant)

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def step(model, positions):
        loss, grads = eqx.filter_value_and_grad(lambda m: m(positions))(model)
        updates = jax.tree_util.tree_map(lambda g: -0.1 * g, grads)
        return loss, eqx.apply_updates(model, updates)

    model = SpringModel(jnp.asarray(w), spring(enable_backward=True))
    assert jax.tree_util.tree_leaves(model) == [model.weights]
    losses = []
    for _ in range(3):
        loss, model = step(model, positions)
        losses.append(float(loss))
        # rebuild the model around a freshly built kernel layer: no retrace
        model = SpringModel(model.weights, spring(enable_backward=True))
    np.testing.assert_allclose(model.weights, w - 0.3 * g, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(losses[0], np.sum(g * w), rtol=1e-5)
    assert losses[0] > losses[1] > losses[2]


def test_serialise_round_trip(tmp_path):
    p, w = spring_data(N_SPRING)
    model = SpringModel(jnp.asarray(w), spring(enable_backward=True))
    path = tmp_path / "model.eqx"
    eqx.tree_serialise_leaves(path, model)

    like = SpringModel(jnp.zeros(N_SPRING, dtype=jnp.float32), spring(enable_backward=True))
    loaded = eqx.tree_deserialise_leaves(path, like)
    assert loaded.spring == model.spring
    assert jax.tree_util.tree_structure(loaded) == jax.tree_util.tree_structure(model)
    np.testing.assert_array_equal(loaded.weights, w)
    np.testing.assert_allclose(eqx.filter_jit(loaded)(jnp.asarray(p)), np.sum(spring_expected(p, w)[0]), rtol=1e-5)

    # a bare kernel module (no leaves) round-trips too
    bare = tmp_path / "bare.eqx"
    eqx.tree_serialise_leaves(bare, model.spring)
    assert eqx.tree_deserialise_leaves(bare, spring(enable_backward=True)) == model.spring


# ======================================================================================================================
# Decorator form; arg_types_factory overloads
# ======================================================================================================================


def test_decorator_form():
    decorator = jax_kernel(num_outputs=2)
    jax_sincos = decorator(k.sincos_kernel)
    assert isinstance(jax_sincos, JaxKernel)
    assert jax_sincos == jax_kernel(k.sincos_kernel, num_outputs=2)
    angle = np.linspace(0.0, 3.0, 9, dtype=np.float32)
    s, c = jax_sincos(jnp.asarray(angle))
    np.testing.assert_allclose(s, np.sin(angle), atol=1e-6)
    np.testing.assert_allclose(c, np.cos(angle), atol=1e-6)

    jax_sss = jax_kernel(enable_backward=True)(k.scale_sum_square)
    a, b = _ab()
    da = jax.grad(lambda a: jnp.sum(jax_sss(a, jnp.asarray(b), 1.5)[0]))(jnp.asarray(a))
    np.testing.assert_allclose(da, 2.0 * (a * 1.5 + b) * 1.5, rtol=1e-5)


def _counting(factory):
    calls = []

    def counted(*dtypes):
        calls.append(dtypes)
        return factory(*dtypes)

    return counted, calls


@pytest.mark.parametrize(
    "factory", [k64.generic_add_arg_types_list, k64.generic_add_arg_types_dict], ids=["list", "dict"]
)
def test_arg_types_factory_float32_and_cached(factory):
    counted, calls = _counting(factory)
    m = jax_kernel(k64.generic_add_kernel, arg_types_factory=counted)
    a = np.arange(5, dtype=np.float32)
    b = np.full(5, 0.25, np.float32)
    for _ in range(3):
        (out,) = m(jnp.asarray(a), jnp.asarray(b))
    (out_jit,) = jax.jit(lambda a, b: m(a, b))(jnp.asarray(a), jnp.asarray(b))
    (out_vmap,) = jax.vmap(m)(jnp.asarray(np.stack([a, b])), jnp.asarray(np.stack([b, a])))
    assert out.dtype == jnp.float32
    np.testing.assert_array_equal(out, a + b)
    np.testing.assert_array_equal(out_jit, a + b)
    np.testing.assert_array_equal(out_vmap, np.stack([a + b, b + a]))
    assert calls == [(wp.float32, wp.float32)]


def test_arg_types_factory_second_dtype_signature():
    counted, calls = _counting(k64.generic_add_arg_types_list)
    m = jax_kernel(k64.generic_add_kernel, arg_types_factory=counted)
    (f,) = m(jnp.arange(4, dtype=jnp.float32), jnp.ones(4, dtype=jnp.float32))
    (i,) = m(jnp.arange(4, dtype=jnp.int32), jnp.full(4, 7, dtype=jnp.int32))
    (f2,) = m(jnp.arange(4, dtype=jnp.float32), jnp.ones(4, dtype=jnp.float32))
    assert (f.dtype, i.dtype) == (jnp.float32, jnp.int32)
    np.testing.assert_array_equal(f, np.arange(4) + 1.0)
    np.testing.assert_array_equal(f2, np.arange(4) + 1.0)
    np.testing.assert_array_equal(i, np.arange(4) + 7)
    assert calls == [(wp.float32, wp.float32), (wp.int32, wp.int32)]


def test_arg_types_factory_python_float_scalar_is_float32():
    counted, calls = _counting(k64.generic_scale_arg_types)
    m = jax_kernel(k64.generic_scale_kernel, arg_types_factory=counted, enable_backward=True)
    a = np.arange(6, dtype=np.float32)
    (out,) = jax.jit(lambda a: m(a, 2.5))(jnp.asarray(a))
    np.testing.assert_array_equal(out, 2.5 * a)
    grad = jax.grad(lambda a: jnp.sum(m(a, 2.5)[0]))(jnp.asarray(a))
    np.testing.assert_array_equal(grad, np.full(6, 2.5, np.float32))
    assert set(calls) == {(wp.float32, wp.float32)}


@pytest.mark.x64
def test_arg_types_factory_float64():
    counted, calls = _counting(k64.generic_add_arg_types_dict)
    m = jax_kernel(k64.generic_add_kernel, arg_types_factory=counted)
    a = np.arange(5, dtype=np.float64) / 3.0
    b = np.full(5, 1e-12, np.float64)
    for _ in range(2):
        (out,) = m(jnp.asarray(a), jnp.asarray(b))
    assert out.dtype == jnp.float64
    np.testing.assert_array_equal(out, a + b)  # exact in float64, not representable in float32
    assert calls == [(wp.float64, wp.float64)]

    counted, calls = _counting(k64.generic_scale_arg_types)
    scale = jax_kernel(k64.generic_scale_kernel, arg_types_factory=counted)
    (out,) = jax.jit(lambda a: scale(a, 1.0 / 3.0))(jnp.asarray(a))
    assert out.dtype == jnp.float64
    np.testing.assert_allclose(out, a / 3.0, rtol=1e-15)
    # a float32 array with a Python float (float64 under x64): one dtype per runtime positional argument
    (out32,) = scale(jnp.arange(3, dtype=jnp.float32), 2.0)
    assert out32.dtype == jnp.float32
    np.testing.assert_array_equal(out32, 2.0 * np.arange(3, dtype=np.float32))
    assert calls == [(wp.float64, wp.float64), (wp.float32, wp.float64)]


# ======================================================================================================================
# A new overload rebuilds the kernel's Warp module: earlier launches must stay valid (run in a subprocess, since a
# dangling entry point crashes the interpreter)
# ======================================================================================================================

_REBUILD_SCRIPT = """
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import warp as wp

from jarp.warp import jax_kernel


@wp.kernel
def fresh_generic_add(a: wp.array(dtype=Any), b: wp.array(dtype=Any), out: wp.array(dtype=Any)):
    i = wp.tid()
    out[i] = a[i] + b[i]


@wp.kernel
def fresh_triple(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = 3.0 * a[i]


def arg_types(a_dtype, b_dtype):
    return [wp.array(dtype=a_dtype), wp.array(dtype=b_dtype), wp.array(dtype=a_dtype)]


add = jax_kernel(fresh_generic_add, arg_types_factory=arg_types)
triple = jax_kernel(fresh_triple)
x = jnp.arange(4, dtype=jnp.float32)
jit_add = jax.jit(lambda a, b: add(a, b)[0])
(t1,) = triple(x)
f1 = jit_add(x, x)
(e1,) = add(x, x)
# a new dtype signature adds an overload: Warp rebuilds (and unloads the old build of) this Python module's Warp module
(i1,) = add(jnp.arange(4, dtype=jnp.int32), jnp.ones(4, dtype=jnp.int32))
(t2,) = triple(x)  # a plain kernel of the same Warp module
f2 = jit_add(x, x)  # the first overload, through a cached jit executable
(e2,) = add(x, x)  # the first overload, eagerly
np.testing.assert_array_equal(i1, np.arange(4) + 1)
np.testing.assert_array_equal(t2, 3.0 * np.arange(4))
np.testing.assert_array_equal(f2, 2.0 * np.arange(4))
np.testing.assert_array_equal(e2, 2.0 * np.arange(4))
print("REBUILD-OK")
"""


def test_new_overload_rebuilding_the_warp_module_keeps_earlier_launches_valid(tmp_path):
    script = tmp_path / "fresh_module_kernels.py"
    script.write_text(_REBUILD_SCRIPT)
    root = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))}
    env.pop("JAX_ENABLE_X64", None)
    proc = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600, check=False
    )
    report = (
        f"exit code {proc.returncode} (-11 = segfault)\nstdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-4000:]}"
    )
    assert proc.returncode == 0, report
    assert "REBUILD-OK" in proc.stdout, report
