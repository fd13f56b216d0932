"""The module contract of ``jarp.warp.JaxCallable``: annotated Python functions that launch Warp kernels.

The functions come from ``tests/warp/kernels.py`` (float32) and ``tests/warp/kernels64.py`` (generic factories).
"""

import dataclasses
from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from jax import lax

from jarp.warp import JaxCallable, jax_callable
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


def spring_func(**kwargs) -> JaxCallable:
    return jax_callable(k.spring_func, num_outputs=2, **kwargs)


# ======================================================================================================================
# Equinox module: no leaves, immutable, equal and hashable by value
# ======================================================================================================================

BUILDERS = {
    "scale": lambda: jax_callable(k.scale_func),
    "two-kernels": lambda: jax_callable(k.example_func, num_outputs=2),
    "in-out": lambda: jax_callable(k.rowsum_func, in_out_argnames=["sums"]),
    "dict-output-dims": lambda: jax_callable(k.vecmat_func, num_outputs=3, output_dims={"f": 4, "d": [4], "e": 4}),
    "generic": lambda: jax_callable(k64.generic_scale_func_factory, generic=True),
    "graph-mode-none": lambda: jax_callable(k.scale_func, graph_mode=wp.JaxCallableGraphMode.NONE),
    "side-effect": lambda: jax_callable(k.scale_func, has_side_effect=True),
    "staging-options": lambda: jax_callable(
        k.scale_func, stage_in_argnames=["a"], stage_out_argnames=["out"], graph_cache_max=4
    ),
    "broadcast-all": lambda: jax_callable(k.scale_func, vmap_method="broadcast_all"),
}


@pytest.mark.parametrize("name", list(BUILDERS))
def test_module_has_no_leaves_and_only_static_fields(name):
    m = BUILDERS[name]()
    assert isinstance(m, JaxCallable)
    assert isinstance(m, eqx.Module)
    assert jax.tree_util.tree_leaves(m) == []
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
    "same-func": (lambda: jax_callable(k.scale_func), lambda: jax_callable(k.scale_func)),
    "explicit-defaults": (
        lambda: jax_callable(k.scale_func),
        lambda: jax_callable(
            k.scale_func,
            generic=False,
            num_outputs=1,
            graph_mode=wp.JaxCallableGraphMode.JAX,
            vmap_method="sequential",
            output_dims=None,
            in_out_argnames=[],
            stage_in_argnames=[],
            stage_out_argnames=[],
            graph_cache_max=None,
            has_side_effect=False,
        ),
    ),
    "in-out-list-vs-tuple": (
        lambda: jax_callable(k.rowsum_func, in_out_argnames=["sums"]),
        lambda: jax_callable(k.rowsum_func, in_out_argnames=("sums",)),
    ),
    "stage-list-vs-tuple": (
        lambda: jax_callable(k.scale_func, stage_in_argnames=["a"], stage_out_argnames=["out"]),
        lambda: jax_callable(k.scale_func, stage_in_argnames=("a",), stage_out_argnames=("out",)),
    ),
    "output-dims-dict-key-order": (
        lambda: jax_callable(k.vecmat_func, num_outputs=3, output_dims={"d": 4, "e": 4, "f": 4}),
        lambda: jax_callable(k.vecmat_func, num_outputs=3, output_dims={"f": 4, "e": 4, "d": 4}),
    ),
    "output-dims-dict-of-lists-vs-tuples": (
        lambda: jax_callable(k.vecmat_func, num_outputs=3, output_dims={"d": [4], "e": [4, 3], "f": (4,)}),
        lambda: jax_callable(k.vecmat_func, num_outputs=3, output_dims={"f": [4], "e": (4, 3), "d": (4,)}),
    ),
    "generic": (
        lambda: jax_callable(k64.generic_scale_func_factory, generic=True),
        lambda: jax_callable(k64.generic_scale_func_factory, generic=True),
    ),
    "decorator-vs-call": (
        lambda: jax_callable(num_outputs=2)(k.example_func),
        lambda: jax_callable(k.example_func, num_outputs=2),
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
    "func": (lambda: jax_callable(k.scale_func), lambda: jax_callable(k.reverse_func)),
    "num_outputs": (lambda: jax_callable(k.sincos_func), lambda: jax_callable(k.sincos_func, num_outputs=2)),
    "graph_mode": (
        lambda: jax_callable(k.scale_func),
        lambda: jax_callable(k.scale_func, graph_mode=wp.JaxCallableGraphMode.NONE),
    ),
    "vmap_method": (
        lambda: jax_callable(k.scale_func),
        lambda: jax_callable(k.scale_func, vmap_method="broadcast_all"),
    ),
    "output_dims": (
        lambda: jax_callable(k.scatter_add_func, output_dims=4),
        lambda: jax_callable(k.scatter_add_func, output_dims=5),
    ),
    "in_out_argnames": (
        lambda: jax_callable(k.rowsum_func),
        lambda: jax_callable(k.rowsum_func, in_out_argnames=["sums"]),
    ),
    "generic": (
        lambda: jax_callable(k.scale_func),
        lambda: jax_callable(k64.generic_scale_func_factory, generic=True),
    ),
}


@pytest.mark.parametrize("name", list(UNEQUAL_PAIRS))
def test_different_options_give_different_modules(name):
    build1, build2 = UNEQUAL_PAIRS[name]
    m1, m2 = build1(), build2()
    assert m1 != m2
    assert jax.tree_util.tree_structure(m1) != jax.tree_util.tree_structure(m2)


def test_options_are_copied_at_construction():
    names = ["sums"]
    dims = {"d": [4], "e": 4, "f": 4}
    rowsum = jax_callable(k.rowsum_func, in_out_argnames=names)
    vecmat = jax_callable(k.vecmat_func, num_outputs=3, output_dims=dims)
    hashes = hash(rowsum), hash(vecmat)
    names.append("matrix")
    dims["d"].append(2)
    dims["e"] = 9
    assert (hash(rowsum), hash(vecmat)) == hashes
    assert rowsum == jax_callable(k.rowsum_func, in_out_argnames=("sums",))
    assert vecmat == jax_callable(k.vecmat_func, num_outputs=3, output_dims={"d": 4, "e": 4, "f": 4})


def test_filter_jit_does_not_retrace_rebuilt_modules():
    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def apply(rowsum, scatter, two, matrix, sums, bins, weights, a, b):
        (s,) = rowsum(matrix, sums)
        (h,) = scatter(bins, weights)
        c, d = two(a, b, 2.0, output_dims={"d": b.shape, "c": a.shape})
        return s, h, c, d

    matrix = jnp.arange(12, dtype=jnp.float32).reshape((3, 4))
    sums = jnp.ones(3, dtype=jnp.float32)
    a = jnp.arange(10, dtype=jnp.float32)
    b = jnp.arange(10, dtype=jnp.float32).reshape((5, 2))
    for i in range(3):
        rowsum = jax_callable(k.rowsum_func, in_out_argnames=["sums"])
        scatter = jax_callable(k.scatter_add_func, output_dims=N_BINS if i % 2 else [N_BINS])
        two = jax_callable(k.example_func, num_outputs=2)
        s, h, c, d = apply(rowsum, scatter, two, matrix, sums, jnp.asarray(BINS), jnp.asarray(BIN_WEIGHTS), a, b)

    np.testing.assert_array_equal(s, 1.0 + np.arange(12, dtype=np.float32).reshape((3, 4)).sum(axis=1))
    np.testing.assert_array_equal(h, np.bincount(BINS, weights=BIN_WEIGHTS, minlength=N_BINS))
    np.testing.assert_array_equal(c, 2.0 * np.arange(10))
    np.testing.assert_array_equal(d, 2.0 * np.arange(10).reshape((5, 2)))


def test_eager_calls_reuse_one_executable():
    x = jnp.arange(6, dtype=jnp.float32)
    m = jax_callable(k.scale_func)
    m(x, 2.0)
    with count_lowerings() as lowerings:
        for _ in range(3):
            (y,) = m(x, 2.0)
        (y,) = jax_callable(k.scale_func)(x, 2.0)
    assert lowerings() == 0
    np.testing.assert_array_equal(y, 2.0 * np.arange(6, dtype=np.float32))


def test_rebuilding_and_calling_registers_no_new_ffi_targets(monkeypatch):
    from jax._src.lib import xla_client

    x = jnp.arange(4, dtype=jnp.float32)

    def build_and_call():
        m = jax_callable(k.scale_func)
        m(x, 3.0)
        return jax.jit(lambda x: m(x, 3.0))(x)

    build_and_call()
    registered = []
    original = xla_client.register_custom_call_target

    def counting(name, *args, **kwargs):
        registered.append(name)
        return original(name, *args, **kwargs)

    monkeypatch.setattr(xla_client, "register_custom_call_target", counting)
    for _ in range(4):
        (y,) = build_and_call()
    assert registered == []
    np.testing.assert_array_equal(y, 3.0 * np.arange(4))


# ======================================================================================================================
# Errors
# ======================================================================================================================


@pytest.mark.parametrize(
    ("func", "options", "match"),
    [
        pytest.param(k.scale_func, {"num_outputs": 0}, "num_outputs", id="num_outputs-zero"),
        pytest.param(k.scale_func, {"num_outputs": 4}, "num_outputs", id="num_outputs-above-arg-count"),
        pytest.param(k.rowsum_func, {"in_out_argnames": ["nope"]}, "in_out_argnames", id="in_out-unknown-name"),
        pytest.param(k.rowsum_func, {"in_out_argnames": ["sums", "sums"]}, "in_out_argnames", id="in_out-duplicate"),
        pytest.param(k.spring_func, {"num_outputs": 3}, "stiffness|num_outputs", id="non-array-output"),
    ],
)
def test_construction_error_names_option(func, options, match):
    with pytest.raises(ERRORS, match=match):
        jax_callable(func, **options)


def test_unknown_vmap_method_is_value_error():
    with pytest.raises(ValueError, match="vmap_method"):
        jax_callable(k.scale_func, vmap_method="bogus")
    with pytest.raises(ValueError, match="vmap_method"):
        jax_callable(k.scale_func)(jnp.ones(3, dtype=jnp.float32), 2.0, vmap_method="bogus")


def test_unannotated_function_names_the_parameter():
    def unannotated(alpha_in, beta_out: wp.array(dtype=float)):
        pass

    with pytest.raises(TypeError, match="alpha_in"):
        jax_callable(unannotated)


def test_non_callable_is_type_error():
    with pytest.raises(TypeError):
        jax_callable(42)


def test_no_launch_dims_call_option():
    with pytest.raises(TypeError):
        jax_callable(k.scale_func)(jnp.ones(3, dtype=jnp.float32), 2.0, launch_dims=3)


def _bad_calls():
    return {
        "too-few-args": (lambda m, p, w: m(p, w), r"\b3\b|stiffness"),
        "too-many-args": (lambda m, p, w: m(p, w, STIFFNESS, w), r"\b3\b|\b4\b"),
        "int32-weights": (lambda m, p, w: m(p, jnp.ones(N_SPRING, dtype=jnp.int32), STIFFNESS), "weights"),
        "ndim-weights": (lambda m, p, w: m(p, w.reshape((N_SPRING, 1)), STIFFNESS), "weights"),
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
    m = spring_func()
    p, w = (jnp.asarray(x) for x in spring_data(N_SPRING))
    fn = jax.jit(partial(call, m)) if jit else partial(call, m)
    with pytest.raises(ERRORS, match=match):
        fn(p, w)


def test_float64_numpy_array_names_argument():
    p, w = spring_data(N_SPRING)
    with pytest.raises(ERRORS, match="weights"):
        spring_func()(p, w.astype(np.float64), STIFFNESS)


def test_traced_scalar_is_type_error_naming_argument():
    m = spring_func()
    p, w = (jnp.asarray(x) for x in spring_data(N_SPRING))
    with pytest.raises(TypeError, match="stiffness"):
        jax.jit(lambda s: m(p, w, s))(STIFFNESS)


# ======================================================================================================================
# Semantics: values, output dims, zero fill, in-out
# ======================================================================================================================


def test_spring_values_numpy_and_jax_inputs():
    p, w = spring_data(N_SPRING)
    exp_e, exp_f = spring_expected(p, w)
    m = spring_func()
    for energies, forces in (m(p, w, STIFFNESS), jax.jit(lambda p, w: m(p, w, STIFFNESS))(p, w)):
        assert forces.shape == (N_SPRING, 3)
        np.testing.assert_allclose(energies, exp_e, rtol=1e-5)
        np.testing.assert_allclose(forces, exp_f, rtol=1e-5)


def test_default_output_dims_follow_first_array_input_and_are_zero_filled():
    # c and d both default to the Warp shape of `a` (10,); the vec2 kernel only writes d[:5], the rest stays zero
    m = jax_callable(k.example_func, num_outputs=2)
    a = np.arange(10, dtype=np.float32)
    b = np.arange(10, dtype=np.float32).reshape((5, 2))
    c, d = jax.jit(lambda a, b: m(a, b, 2.0))(jnp.asarray(a), jnp.asarray(b))
    assert c.shape == (10,)
    assert d.shape == (10, 2)
    np.testing.assert_array_equal(c, 2.0 * a)
    np.testing.assert_array_equal(d[:5], 2.0 * b)
    np.testing.assert_array_equal(d[5:], np.zeros((5, 2), np.float32))


N4 = 4


def _vecmat_inputs():
    a = 1.0 + 0.5 * np.arange(N4, dtype=np.float32)
    b = np.arange(3 * N4, dtype=np.float32).reshape((N4, 3))
    c = np.arange(4 * N4, dtype=np.float32).reshape((N4, 2, 2)) - 7.0
    return a, b, c


@pytest.mark.parametrize(
    ("construction", "call"),
    [
        pytest.param(None, None, id="default"),
        pytest.param(None, N4, id="int"),
        pytest.param(None, (N4,), id="tuple"),
        pytest.param(None, {"d": N4, "e": N4, "f": N4}, id="dict-warp"),
        pytest.param(None, {"d": N4, "e": (N4, 3), "f": (N4, 2, 2)}, id="dict-jax"),
        pytest.param(None, {"d": (N4,), "e": (N4, 3), "f": (N4, 2, 2)}, id="dict-from-shapes"),
        pytest.param({"f": (N4, 2, 2), "d": N4, "e": [N4]}, None, id="construction-dict"),
        pytest.param(N4, None, id="construction-int"),
    ],
)
def test_vecmat_output_dims_forms(construction, call):
    a, b, c = _vecmat_inputs()
    m = jax_callable(k.vecmat_func, num_outputs=3, output_dims=construction)
    fn = jax.jit(lambda a, b, c: m(a, b, c) if call is None else m(a, b, c, output_dims=call))
    d, e, f = fn(jnp.asarray(a), jnp.asarray(b), jnp.asarray(c))
    assert (d.shape, e.shape, f.shape) == ((N4,), (N4, 3), (N4, 2, 2))
    np.testing.assert_allclose(d, 2.0 * a)
    np.testing.assert_allclose(e, b * a[:, None])
    np.testing.assert_allclose(f, c * a[:, None, None])


def test_pure_outputs_start_zero_filled():
    m = jax_callable(k.scatter_add_func, output_dims=N_BINS)
    expected = np.bincount(BINS, weights=BIN_WEIGHTS, minlength=N_BINS).astype(np.float32)
    bins, weights = jnp.asarray(BINS), jnp.asarray(BIN_WEIGHTS)
    for _ in range(3):
        (out,) = m(bins, weights)
        np.testing.assert_array_equal(out, expected)

    @jax.jit
    def twice(bins, weights):
        (x,) = m(bins, weights)
        (y,) = m(bins, weights)
        return x, y

    for _ in range(2):
        x, y = twice(bins, weights)
        np.testing.assert_array_equal(x, expected)
        np.testing.assert_array_equal(y, expected)


def test_in_out_argument():
    m = jax_callable(k.rowsum_func, in_out_argnames=["sums"])
    matrix = np.arange(12, dtype=np.float32).reshape((3, 4))
    init = np.array([10.0, -20.0, 30.0], np.float32)
    for fn in (m, jax.jit(m)):
        (sums,) = fn(jnp.asarray(matrix), jnp.asarray(init))
        np.testing.assert_array_equal(sums, init + matrix.sum(axis=1))


def test_in_out_comes_first_and_pure_output_is_zero_filled():
    m = jax_callable(k.rowsum_count_func, num_outputs=2, in_out_argnames=["sums"])
    matrix = np.arange(12, dtype=np.float32).reshape((3, 4))
    init = np.array([10.0, 20.0, 30.0], np.float32)
    call = partial(m, output_dims={"counts": 3})
    for fn in (call, jax.jit(call)):
        sums, counts = fn(jnp.asarray(matrix), jnp.asarray(init))
        np.testing.assert_array_equal(sums, init + matrix.sum(axis=1))
        np.testing.assert_array_equal(counts, np.full(3, 4.0, np.float32))
    matrices = np.arange(24, dtype=np.float32).reshape((2, 3, 4))
    inits = np.array([[1.0, 2.0, 3.0], [-1.0, -2.0, -3.0]], np.float32)
    sums, counts = jax.jit(jax.vmap(partial(m, output_dims={"counts": 3})))(jnp.asarray(matrices), jnp.asarray(inits))
    np.testing.assert_array_equal(sums, inits + matrices.sum(axis=2))
    np.testing.assert_array_equal(counts, np.full((2, 3), 4.0, np.float32))


@pytest.mark.parametrize(
    "options",
    [
        {"graph_mode": wp.JaxCallableGraphMode.NONE},
        {"graph_mode": wp.JaxCallableGraphMode.WARP},
        {"has_side_effect": True},
        {"stage_in_argnames": ["a"], "stage_out_argnames": ["out"], "graph_cache_max": 2},
        {"module_preload_mode": wp.JaxModulePreloadMode.NONE},
    ],
    ids=["graph-none", "graph-warp", "side-effect", "staging", "preload-none"],
)
def test_options_accepted_on_cpu(options):
    m = jax_callable(k.scale_func, **options)
    x = np.arange(5, dtype=np.float32)
    (y,) = jax.jit(lambda x: m(x, -3.0))(jnp.asarray(x))
    np.testing.assert_array_equal(y, -3.0 * x)
    (y,) = m(jnp.asarray(x), 0.5)
    np.testing.assert_array_equal(y, 0.5 * x)


def test_decorator_form():
    jax_sincos = jax_callable(num_outputs=2)(k.sincos_func)
    assert isinstance(jax_sincos, JaxCallable)
    angle = np.linspace(0.0, 3.0, 9, dtype=np.float32)
    s, c = jax_sincos(jnp.asarray(angle))
    np.testing.assert_allclose(s, np.sin(angle), atol=1e-6)
    np.testing.assert_allclose(c, np.cos(angle), atol=1e-6)


# ======================================================================================================================
# generic=True
# ======================================================================================================================


def _counting(factory):
    calls = []

    def counted(*dtypes):
        calls.append(dtypes)
        return factory(*dtypes)

    return counted, calls


def test_generic_factory_float32_python_scalar_and_cached():
    counted, calls = _counting(k64.generic_scale_func_factory)
    m = jax_callable(counted, generic=True)
    x = np.arange(6, dtype=np.float32)
    for _ in range(3):
        (y,) = m(jnp.asarray(x), 2.5)
    (y_jit,) = jax.jit(lambda x: m(x, 2.5))(jnp.asarray(x))
    (y_vmap,) = jax.vmap(lambda x: m(x, 2.5))(jnp.asarray(np.stack([x, -x])))
    assert y.dtype == jnp.float32
    np.testing.assert_array_equal(y, 2.5 * x)
    np.testing.assert_array_equal(y_jit, 2.5 * x)
    np.testing.assert_array_equal(y_vmap, np.stack([2.5 * x, -2.5 * x]))
    assert calls == [(wp.float32, wp.float32)]


def test_generic_factory_two_signatures():
    counted, calls = _counting(k64.generic_add_func_factory)
    m = jax_callable(counted, generic=True)
    (f,) = m(jnp.arange(4, dtype=jnp.float32), jnp.full(4, 0.5, dtype=jnp.float32))
    (i,) = m(jnp.arange(4, dtype=jnp.int32), jnp.full(4, 3, dtype=jnp.int32))
    (f2,) = jax.jit(m)(jnp.arange(4, dtype=jnp.float32), jnp.full(4, 0.5, dtype=jnp.float32))
    assert (f.dtype, i.dtype) == (jnp.float32, jnp.int32)
    np.testing.assert_array_equal(f, np.arange(4) + 0.5)
    np.testing.assert_array_equal(f2, np.arange(4) + 0.5)
    np.testing.assert_array_equal(i, np.arange(4) + 3)
    assert calls == [(wp.float32, wp.float32), (wp.int32, wp.int32)]


@pytest.mark.x64
def test_generic_factory_float64():
    counted, calls = _counting(k64.generic_scale_func_factory)
    m = jax_callable(counted, generic=True)
    x = np.arange(5, dtype=np.float64) / 7.0
    (y,) = m(jnp.asarray(x), 1.0 / 3.0)
    assert y.dtype == jnp.float64
    np.testing.assert_allclose(y, x / 3.0, rtol=1e-15)
    (y32,) = jax.jit(lambda x: m(x, 2.0))(jnp.arange(3, dtype=jnp.float32))
    assert y32.dtype == jnp.float32
    np.testing.assert_array_equal(y32, 2.0 * np.arange(3))
    assert calls == [(wp.float64, wp.float64), (wp.float32, wp.float64)]


# ======================================================================================================================
# vmap
# ======================================================================================================================

B, N, M, NB = 3, 5, 7, 4


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
def test_default_vmap_is_correct_for_nonelementwise_functions(jit):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(B, N)).astype(np.float32)
    bins = rng.integers(0, NB, size=(B, M)).astype(np.int32)
    weights = rng.random((B, M)).astype(np.float32)
    rev = jax_callable(k.reverse_func)
    scatter = jax_callable(k.scatter_add_func, output_dims=NB)

    def f(x, bins, weights):
        (r,) = jax.vmap(rev)(x)
        (h,) = jax.vmap(scatter)(bins, weights)
        return r, h

    if jit:
        f = jax.jit(f)
    r, h = f(jnp.asarray(x), jnp.asarray(bins), jnp.asarray(weights))
    expected_h = np.stack([np.bincount(bins[b], weights=weights[b], minlength=NB) for b in range(B)])
    np.testing.assert_array_equal(r, x[:, ::-1])
    np.testing.assert_allclose(h, expected_h, rtol=1e-6)
    loop_r = np.stack([np.asarray(rev(jnp.asarray(x[b]))[0]) for b in range(B)])
    loop_h = np.stack([np.asarray(scatter(jnp.asarray(bins[b]), jnp.asarray(weights[b]))[0]) for b in range(B)])
    np.testing.assert_array_equal(loop_r, x[:, ::-1])
    np.testing.assert_allclose(loop_h, expected_h, rtol=1e-6)


@pytest.mark.parametrize("method", ["broadcast_all", "expand_dims"])
def test_broadcast_all_correct_for_elementwise_functions(method):
    x = np.random.default_rng(2).normal(size=(B, N)).astype(np.float32)
    for m, kwargs in [
        (jax_callable(k.scale_func, vmap_method=method), {}),
        (jax_callable(k.scale_func), {"vmap_method": method}),
    ]:
        (y,) = jax.jit(jax.vmap(lambda x, m=m, kwargs=kwargs: m(x, 2.0, **kwargs)))(jnp.asarray(x))
        np.testing.assert_allclose(y, 2.0 * x, rtol=1e-6)


def test_vmap_in_axes_none_and_nested():
    a, b, c = _vecmat_inputs()
    As = np.stack([a, 2.0 * a, -a])
    m = jax_callable(k.vecmat_func, num_outputs=3)
    d, e, f = jax.jit(jax.vmap(m, in_axes=(0, None, None)))(jnp.asarray(As), jnp.asarray(b), jnp.asarray(c))
    assert (d.shape, e.shape, f.shape) == ((3, N4), (3, N4, 3), (3, N4, 2, 2))
    np.testing.assert_allclose(d, 2.0 * As)
    np.testing.assert_allclose(e, b[None] * As[:, :, None])
    np.testing.assert_allclose(f, c[None] * As[:, :, None, None])

    x = np.random.default_rng(3).normal(size=(2, B, N)).astype(np.float32)
    (r,) = jax.jit(jax.vmap(jax.vmap(jax_callable(k.reverse_func))))(jnp.asarray(x))
    np.testing.assert_array_equal(r, x[..., ::-1])


# ======================================================================================================================
# Composition; model field; serialisation
# ======================================================================================================================


def test_filter_jit_filter_vmap_scan_while_loop():
    scale = jax_callable(k.scale_func)
    x_np = np.arange(1, 6, dtype=np.float32)
    x = jnp.asarray(x_np)

    (y,) = eqx.filter_jit(lambda m, x, s: m(x, s))(scale, x, 4.0)
    np.testing.assert_array_equal(y, 4.0 * x_np)

    y = eqx.filter_vmap(lambda m, x: m(x, 2.0)[0], in_axes=(None, 0))(scale, jnp.stack([x, -x]))
    np.testing.assert_array_equal(y, np.stack([2.0 * x_np, -2.0 * x_np]))

    def body(carry, _):
        (z,) = scale(carry, 0.5)
        return z, jnp.sum(z)

    final, sums = jax.jit(lambda x: lax.scan(body, x, None, length=3))(x)
    np.testing.assert_allclose(final, 0.125 * x_np)
    np.testing.assert_allclose(sums, np.sum(x_np) * np.array([0.5, 0.25, 0.125], np.float32), rtol=1e-6)

    def loop(x):
        return lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, scale(c[1], 2.0)[0]), (0, x))[1]

    np.testing.assert_array_equal(jax.jit(loop)(x), 8.0 * x_np)


class ScaleModel(eqx.Module):
    offset: jax.Array
    scale: JaxCallable
    factor: float = eqx.field(static=True, default=2.0)

    def __call__(self, x):
        (y,) = self.scale(x, self.factor)
        return y + self.offset


def test_model_field_and_serialise_round_trip(tmp_path):
    offset = np.array([1.0, -1.0, 0.5, 2.0], np.float32)
    x = np.arange(4, dtype=np.float32)
    model = ScaleModel(jnp.asarray(offset), jax_callable(k.scale_func))
    assert jax.tree_util.tree_leaves(model) == [model.offset]

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def apply(model, x):
        return model(x)

    for _ in range(2):
        y = apply(ScaleModel(model.offset, jax_callable(k.scale_func)), jnp.asarray(x))
    np.testing.assert_array_equal(y, 2.0 * x + offset)

    path = tmp_path / "model.eqx"
    eqx.tree_serialise_leaves(path, model)
    like = ScaleModel(jnp.zeros(4, dtype=jnp.float32), jax_callable(k.scale_func))
    loaded = eqx.tree_deserialise_leaves(path, like)
    assert loaded.scale == model.scale
    np.testing.assert_array_equal(loaded.offset, offset)
    np.testing.assert_array_equal(apply(loaded, jnp.asarray(x)), 2.0 * x + offset)
