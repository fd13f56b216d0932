"""The module contract, written once for both kinds: ``jarp.warp.JaxKernel`` and ``jarp.warp.JaxCallable``.

Unit: ``jarp/warp/_module/_base.py`` (``AbstractWarpModule``) and ``_module/_factory.py`` (the factories' module cache behind
``jax_kernel``/``jax_callable``). A module is an Equinox module with no leaves and only static fields; it is immutable,
equal and hashable by value, and copies (normalises) its options at construction. Rebuilding an equal module retraces
nothing under ``jax.jit`` and ``eqx.filter_jit``, compiles nothing new eagerly and registers no new FFI target.
Construction errors name the option; the factories work as decorators; a module is a (leafless) field of a user model
and survives serialisation.

Tests are parametrised over the kinds (``tests/support/kinds.py``), or over case tables whose ids start with the kind.
Values are checked against NumPy.
"""

import dataclasses
from collections.abc import Callable
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import JaxCallable, JaxKernel, jax_callable, jax_kernel
from jarp.warp._module._base import AbstractWarpModule
from tests.support import kernels as k
from tests.support import kernels64 as k64
from tests.support.kernels import (
    BIN_WEIGHTS,
    BINS,
    ERRORS,
    N_BINS,
    N_SPRING,
    STIFFNESS,
    count_lowerings,
    spring_data,
    spring_expected,
    vecmat_data,
)
from tests.support.kinds import Kind, over_kinds

CLASSES = {"kernel": JaxKernel, "callable": JaxCallable}


def _class_of(case_id: str) -> type[AbstractWarpModule]:
    """The module class a case id (``"kernel-..."`` or ``"callable-..."``) is about."""
    return CLASSES[case_id.partition("-")[0]]


# ======================================================================================================================
# Equinox module: no leaves, immutable, equal and hashable by value
# ======================================================================================================================

BUILDERS = {
    "kernel-triple": lambda: jax_kernel(k.triple_kernel),
    "kernel-sincos": lambda: jax_kernel(k.sincos_kernel, num_outputs=2),
    "kernel-rowsum-in-out": lambda: jax_kernel(k.rowsum_kernel, in_out_argnames=["sums"]),
    "kernel-funky-dict-output-dims": lambda: jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"c": 3, "b": [5]}),
    "kernel-diagonal-launch-dims": lambda: jax_kernel(k.diagonal_kernel, launch_dims=[4]),
    "kernel-enable-backward": lambda: jax_kernel(k.scale_sum_square, enable_backward=True),
    "kernel-broadcast-all": lambda: jax_kernel(k.add_kernel, vmap_method="broadcast_all"),
    "kernel-preload-none": lambda: jax_kernel(k.triple_kernel, module_preload_mode=wp.JaxModulePreloadMode.NONE),
    "kernel-arg-types-factory": lambda: jax_kernel(
        k64.generic_add_kernel, arg_types_factory=k64.generic_add_arg_types_list
    ),
    "callable-scale": lambda: jax_callable(k.scale_func),
    "callable-two-kernels": lambda: jax_callable(k.example_func, num_outputs=2),
    "callable-in-out": lambda: jax_callable(k.rowsum_func, in_out_argnames=["sums"]),
    "callable-dict-output-dims": lambda: jax_callable(
        k.vecmat_func, num_outputs=3, output_dims={"f": 4, "d": [4], "e": 4}
    ),
    "callable-generic": lambda: jax_callable(k64.generic_scale_func_factory, generic=True),
    "callable-graph-mode-none": lambda: jax_callable(k.scale_func, graph_mode=wp.JaxCallableGraphMode.NONE),
    "callable-side-effect": lambda: jax_callable(k.scale_func, has_side_effect=True),
    "callable-staging-options": lambda: jax_callable(
        k.scale_func, stage_in_argnames=["a"], stage_out_argnames=["out"], graph_cache_max=4
    ),
    "callable-broadcast-all": lambda: jax_callable(k.scale_func, vmap_method="broadcast_all"),
}


@pytest.mark.parametrize("name", list(BUILDERS))
def test_module_has_no_leaves_and_only_static_fields(name):
    m = BUILDERS[name]()
    assert isinstance(m, _class_of(name))
    assert isinstance(m, AbstractWarpModule)
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
    "kernel-same-kernel": (lambda: jax_kernel(k.triple_kernel), lambda: jax_kernel(k.triple_kernel)),
    "kernel-explicit-defaults": (
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
    "kernel-in-out-list-vs-tuple": (
        lambda: jax_kernel(k.rowsum_kernel, in_out_argnames=["sums"]),
        lambda: jax_kernel(k.rowsum_kernel, in_out_argnames=("sums",)),
    ),
    "kernel-output-dims-dict-key-order": (
        lambda: jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"b": 5, "c": 3}),
        lambda: jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"c": 3, "b": 5}),
    ),
    "kernel-output-dims-dict-of-lists-vs-tuples": (
        lambda: jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"b": [5], "c": (3,)}),
        lambda: jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"c": [3], "b": (5,)}),
    ),
    "kernel-launch-dims-list-vs-tuple": (
        lambda: jax_kernel(k.matmul_kernel, launch_dims=[3, 4]),
        lambda: jax_kernel(k.matmul_kernel, launch_dims=(3, 4)),
    ),
    "kernel-enable-backward": (
        lambda: jax_kernel(k.scale_sum_square, enable_backward=True),
        lambda: jax_kernel(k.scale_sum_square, enable_backward=True),
    ),
    "kernel-arg-types-factory": (
        lambda: jax_kernel(k64.generic_add_kernel, arg_types_factory=k64.generic_add_arg_types_dict),
        lambda: jax_kernel(k64.generic_add_kernel, arg_types_factory=k64.generic_add_arg_types_dict),
    ),
    "kernel-decorator-vs-call": (
        lambda: jax_kernel(num_outputs=2)(k.sincos_kernel),
        lambda: jax_kernel(k.sincos_kernel, num_outputs=2),
    ),
    "callable-same-func": (lambda: jax_callable(k.scale_func), lambda: jax_callable(k.scale_func)),
    "callable-explicit-defaults": (
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
    "callable-in-out-list-vs-tuple": (
        lambda: jax_callable(k.rowsum_func, in_out_argnames=["sums"]),
        lambda: jax_callable(k.rowsum_func, in_out_argnames=("sums",)),
    ),
    "callable-stage-list-vs-tuple": (
        lambda: jax_callable(k.scale_func, stage_in_argnames=["a"], stage_out_argnames=["out"]),
        lambda: jax_callable(k.scale_func, stage_in_argnames=("a",), stage_out_argnames=("out",)),
    ),
    "callable-output-dims-dict-key-order": (
        lambda: jax_callable(k.vecmat_func, num_outputs=3, output_dims={"d": 4, "e": 4, "f": 4}),
        lambda: jax_callable(k.vecmat_func, num_outputs=3, output_dims={"f": 4, "e": 4, "d": 4}),
    ),
    "callable-output-dims-dict-of-lists-vs-tuples": (
        lambda: jax_callable(k.vecmat_func, num_outputs=3, output_dims={"d": [4], "e": [4, 3], "f": (4,)}),
        lambda: jax_callable(k.vecmat_func, num_outputs=3, output_dims={"f": [4], "e": (4, 3), "d": (4,)}),
    ),
    "callable-generic": (
        lambda: jax_callable(k64.generic_scale_func_factory, generic=True),
        lambda: jax_callable(k64.generic_scale_func_factory, generic=True),
    ),
    "callable-decorator-vs-call": (
        lambda: jax_callable(num_outputs=2)(k.example_func),
        lambda: jax_callable(k.example_func, num_outputs=2),
    ),
}


@pytest.mark.parametrize("name", list(EQUAL_PAIRS))
def test_equal_options_give_equal_modules(name):
    build1, build2 = EQUAL_PAIRS[name]
    m1, m2 = build1(), build2()
    assert isinstance(m1, _class_of(name))
    assert m1 == m2
    assert hash(m1) == hash(m2)
    assert jax.tree_util.tree_structure(m1) == jax.tree_util.tree_structure(m2)


UNEQUAL_PAIRS = {
    "kernel-kernel": (lambda: jax_kernel(k.triple_kernel), lambda: jax_kernel(k.reverse_kernel)),
    "kernel-num_outputs": (
        lambda: jax_kernel(k.rowsum_count_kernel, num_outputs=2),
        lambda: jax_kernel(k.rowsum_count_kernel, num_outputs=3),
    ),
    "kernel-enable_backward": (
        lambda: jax_kernel(k.scale_sum_square),
        lambda: jax_kernel(k.scale_sum_square, enable_backward=True),
    ),
    "kernel-vmap_method": (
        lambda: jax_kernel(k.add_kernel),
        lambda: jax_kernel(k.add_kernel, vmap_method="broadcast_all"),
    ),
    "kernel-output_dims": (
        lambda: jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"b": 5, "c": 3}),
        lambda: jax_kernel(k.funky_kernel, num_outputs=2, output_dims={"b": 5, "c": 4}),
    ),
    "kernel-launch_dims": (
        lambda: jax_kernel(k.diagonal_kernel, launch_dims=4),
        lambda: jax_kernel(k.diagonal_kernel, launch_dims=5),
    ),
    "kernel-in_out_argnames": (
        lambda: jax_kernel(k.rowsum_kernel),
        lambda: jax_kernel(k.rowsum_kernel, in_out_argnames=["sums"]),
    ),
    "callable-func": (lambda: jax_callable(k.scale_func), lambda: jax_callable(k.reverse_func)),
    "callable-num_outputs": (
        lambda: jax_callable(k.sincos_func),
        lambda: jax_callable(k.sincos_func, num_outputs=2),
    ),
    "callable-graph_mode": (
        lambda: jax_callable(k.scale_func),
        lambda: jax_callable(k.scale_func, graph_mode=wp.JaxCallableGraphMode.NONE),
    ),
    "callable-vmap_method": (
        lambda: jax_callable(k.scale_func),
        lambda: jax_callable(k.scale_func, vmap_method="broadcast_all"),
    ),
    "callable-output_dims": (
        lambda: jax_callable(k.scatter_add_func, output_dims=4),
        lambda: jax_callable(k.scatter_add_func, output_dims=5),
    ),
    "callable-in_out_argnames": (
        lambda: jax_callable(k.rowsum_func),
        lambda: jax_callable(k.rowsum_func, in_out_argnames=["sums"]),
    ),
    "callable-generic": (
        lambda: jax_callable(k.scale_func),
        lambda: jax_callable(k64.generic_scale_func_factory, generic=True),
    ),
}


@pytest.mark.parametrize("name", list(UNEQUAL_PAIRS))
def test_different_options_give_different_modules(name):
    build1, build2 = UNEQUAL_PAIRS[name]
    m1, m2 = build1(), build2()
    assert isinstance(m1, _class_of(name))
    assert m1 != m2
    assert jax.tree_util.tree_structure(m1) != jax.tree_util.tree_structure(m2)


# per kind: a multi-output target, its number of outputs, fresh dict output_dims (with a list in it), the same dims
# spelled canonically, example inputs, and the output shapes these dims give
DICT_DIMS = {
    "kernel": (
        k.funky_kernel,
        2,
        lambda: {"b": [5], "c": 3},
        {"b": 5, "c": 3},
        (np.arange(8, dtype=np.float32),),
        ((5,), (3,)),
    ),
    "callable": (
        k.vecmat_func,
        3,
        lambda: {"d": [4], "e": 4, "f": 4},
        {"d": 4, "e": 4, "f": 4},
        vecmat_data(4),
        ((4,), (4, 3), (4, 2, 2)),
    ),
}


@over_kinds
def test_options_are_copied_at_construction(kind: Kind):
    # a mutable option mutated after construction must not change the (static, hashed) module
    target, num_outputs, fresh_dims, canonical_dims, inputs, shapes = DICT_DIMS[kind.name]
    names = ["sums"]
    dims = fresh_dims()
    rowsum = kind("rowsum", in_out_argnames=names)
    multi = kind.make(target, num_outputs=num_outputs, output_dims=dims)
    hashes = hash(rowsum), hash(multi)

    names.append("matrix")
    for name, value in list(dims.items()):
        if isinstance(value, list):
            value.append(1)
        else:
            dims[name] = 7

    assert (hash(rowsum), hash(multi)) == hashes
    assert rowsum == kind("rowsum", in_out_argnames=("sums",))
    assert multi == kind.make(target, num_outputs=num_outputs, output_dims=canonical_dims)
    outputs = multi(*(jnp.asarray(x) for x in inputs))
    assert tuple(out.shape for out in outputs) == shapes


# ======================================================================================================================
# Rebuilding an equal module: no retrace, no new executable, no new FFI target
# ======================================================================================================================

_MATRIX = np.arange(12, dtype=np.float32).reshape((3, 4))
_A8 = np.arange(8, dtype=np.float32)
_A10 = np.arange(10, dtype=np.float32)
_B52 = np.arange(10, dtype=np.float32).reshape((5, 2))


@dataclasses.dataclass(frozen=True)
class Example:
    """A module of one kind, to rebuild and call.

    Attributes:
        build: ``build(i)`` builds the module for the ``i``-th time: always an equal module, its options spelled
            differently (list or tuple, dict key order) from one ``i`` to the next.
        call: ``call(module, *inputs)`` calls it (defined once, so ``jax.jit`` can cache it).
        inputs: the array inputs (NumPy).
        expected: the outputs (NumPy).
        rtol: the relative tolerance of the check (0: exact).
    """

    build: Callable[[int], AbstractWarpModule]
    call: Callable[..., tuple[jax.Array, ...]]
    inputs: tuple[np.ndarray, ...]
    expected: tuple[np.ndarray, ...]
    rtol: float = 0.0

    def check(self, outputs: Any) -> None:
        """Check ``outputs`` against ``expected``."""
        assert len(outputs) == len(self.expected)
        for out, want in zip(outputs, self.expected, strict=True):
            np.testing.assert_allclose(out, want, rtol=self.rtol, atol=0)


EXAMPLES = {
    "kernel": (
        Example(
            lambda i: jax_kernel(k.rowsum_kernel, in_out_argnames=["sums"] if i % 2 else ("sums",)),
            lambda m, matrix, sums: m(matrix, sums),
            (_MATRIX, np.ones(3, np.float32)),
            (1.0 + _MATRIX.sum(axis=1),),
        ),
        Example(
            lambda i: jax_kernel(
                k.funky_kernel, num_outputs=2, output_dims={"c": 3, "b": 5} if i % 2 else {"b": [5], "c": (3,)}
            ),
            lambda m, a: m(a),
            (_A8,),
            (_A8[:5] + 1.0, 2.0 * _A8[:3]),
        ),
        Example(
            lambda i: jax_kernel(k.scale_sum_square, enable_backward=True),
            lambda m, a: m(a, a, 2.0),
            (_A8,),
            ((3.0 * _A8) ** 2,),
            rtol=1e-6,
        ),
        Example(lambda i: jax_kernel(k.triple_kernel), lambda m, x: m(x), (_A8,), (3.0 * _A8,)),
    ),
    "callable": (
        Example(
            lambda i: jax_callable(k.rowsum_func, in_out_argnames=["sums"] if i % 2 else ("sums",)),
            lambda m, matrix, sums: m(matrix, sums),
            (_MATRIX, np.ones(3, np.float32)),
            (1.0 + _MATRIX.sum(axis=1),),
        ),
        Example(
            lambda i: jax_callable(k.scatter_add_func, output_dims=N_BINS if i % 2 else [N_BINS]),
            lambda m, bins, weights: m(bins, weights),
            (BINS, BIN_WEIGHTS),
            (np.bincount(BINS, weights=BIN_WEIGHTS, minlength=N_BINS),),
        ),
        Example(
            lambda i: jax_callable(k.example_func, num_outputs=2),
            lambda m, a, b: m(a, b, 2.0, output_dims={"d": b.shape, "c": a.shape}),
            (_A10, _B52),
            (2.0 * _A10, 2.0 * _B52),
        ),
        Example(lambda i: jax_callable(k.scale_func), lambda m, x: m(x, 2.0), (_A8,), (2.0 * _A8,)),
    ),
}


def _inputs(examples: tuple[Example, ...]) -> list[tuple[jax.Array, ...]]:
    return [tuple(jnp.asarray(x) for x in ex.inputs) for ex in examples]


@over_kinds
@pytest.mark.parametrize("jit", [eqx.filter_jit, jax.jit], ids=["filter_jit", "jax.jit"])
def test_jit_does_not_retrace_rebuilt_modules(kind: Kind, jit: Any):
    examples = EXAMPLES[kind.name]

    @jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def apply(modules, inputs):
        return [ex.call(m, *xs) for ex, m, xs in zip(examples, modules, inputs, strict=True)]

    inputs = _inputs(examples)
    for i in range(3):
        # rebuilt every call, with freshly made (and differently spelled) list/dict options
        outputs = apply([ex.build(i) for ex in examples], inputs)
    for ex, out in zip(examples, outputs, strict=True):
        ex.check(out)


@over_kinds
def test_eager_calls_reuse_one_executable(kind: Kind):
    examples = EXAMPLES[kind.name]
    inputs = _inputs(examples)
    modules = [ex.build(0) for ex in examples]
    for ex, m, xs in zip(examples, modules, inputs, strict=True):
        ex.call(m, *xs)  # warm up: compiles once
    with count_lowerings() as lowerings:
        for ex, m, xs in zip(examples, modules, inputs, strict=True):
            for _ in range(3):
                ex.check(ex.call(m, *xs))
            for i in (1, 2):
                ex.check(ex.call(ex.build(i), *xs))  # an equal, rebuilt module
    assert lowerings() == 0


@over_kinds
def test_eager_numpy_vmap_and_grad_calls_reuse_executables(kind: Kind):
    spr = kind("spring", num_outputs=2)
    p, w = spring_data()
    rev = kind("reverse")
    xs = jnp.ones((3, 5), dtype=jnp.float32)
    sss = kind("scale_sum_square", enable_backward=True)
    a = jnp.arange(4, dtype=jnp.float32)

    def calls():
        energies, _ = spr(p, w, STIFFNESS)  # NumPy inputs
        (rs,) = jax.vmap(rev)(xs)
        return energies, rs, jax.grad(lambda a: jnp.sum(sss(a, a, 2.0)[0]))(a)

    calls()  # warm up
    with count_lowerings() as lowerings:
        for _ in range(3):
            energies, rs, grad = calls()
    assert lowerings() == 0
    np.testing.assert_allclose(energies, spring_expected(p, w)[0], rtol=1e-5)
    np.testing.assert_array_equal(rs, np.ones((3, 5), np.float32))
    np.testing.assert_allclose(grad, 2.0 * (3.0 * np.arange(4)) * 3.0)


@over_kinds
def test_rebuilding_and_calling_registers_no_new_ffi_targets(kind: Kind, monkeypatch):
    from jax._src.lib import xla_client

    a = jnp.arange(4, dtype=jnp.float32)
    b = jnp.ones(4, dtype=jnp.float32)

    def build_and_call():
        m = kind("scale_sum_square", enable_backward=True)
        (eager,) = m(a, b, 2.0)
        (jitted,) = jax.jit(lambda a, b: m(a, b, 2.0))(a, b)
        return eager, jitted, jax.grad(lambda a: jnp.sum(m(a, b, 2.0)[0]))(a)

    build_and_call()  # the first build may register targets

    registered = []
    original = xla_client.register_custom_call_target

    def counting(name, *args, **kwargs):
        registered.append(name)
        return original(name, *args, **kwargs)

    monkeypatch.setattr(xla_client, "register_custom_call_target", counting)
    for _ in range(4):
        eager, jitted, grad = build_and_call()
    assert registered == []
    expected = (2.0 * np.arange(4) + 1.0) ** 2
    np.testing.assert_allclose(eager, expected, rtol=1e-6)
    np.testing.assert_allclose(jitted, expected, rtol=1e-6)
    np.testing.assert_allclose(grad, 2.0 * (2.0 * np.arange(4) + 1.0) * 2.0)


# ======================================================================================================================
# Construction errors name the option
# ======================================================================================================================

CONSTRUCTION_ERRORS = {
    "num_outputs-zero": ("triple", {"num_outputs": 0}, "num_outputs"),
    "num_outputs-above-arg-count": ("triple", {"num_outputs": 3}, "num_outputs"),
    "num_outputs-above-arg-count-with-scalar": ("scale", {"num_outputs": 4}, "num_outputs"),
    "in_out-unknown-name": ("rowsum", {"in_out_argnames": ["nope"]}, "in_out_argnames"),
    "in_out-duplicate": ("rowsum", {"in_out_argnames": ["sums", "sums"]}, "in_out_argnames"),
    "in_out-after-output-only": ("sincos", {"num_outputs": 2, "in_out_argnames": ["cos_out"]}, "in_out_argnames"),
    "in_out-more-than-num_outputs": (
        "rowsum",
        {"num_outputs": 1, "in_out_argnames": ["matrix", "sums"]},
        "num_outputs|in_out_argnames",
    ),
    "non-array-output": ("spring", {"num_outputs": 3}, "stiffness|num_outputs"),
}


@pytest.mark.parametrize("case", list(CONSTRUCTION_ERRORS))
@over_kinds
def test_construction_error_names_option(kind: Kind, case):
    role, options, match = CONSTRUCTION_ERRORS[case]
    with pytest.raises(ERRORS, match=match):
        kind(role, **options)


@over_kinds
def test_unknown_vmap_method_is_value_error_at_construction_and_call(kind: Kind):
    with pytest.raises(ValueError, match="vmap_method"):
        kind("add", vmap_method="bogus")
    with pytest.raises(ValueError, match="vmap_method"):
        kind.make(vmap_method="bogus")(kind.targets["add"])
    m = kind("add")
    a = jnp.ones(3, dtype=jnp.float32)
    with pytest.raises(ValueError, match="vmap_method"):
        m(a, a, vmap_method="bogus")


# ======================================================================================================================
# Decorator form
# ======================================================================================================================


def _ab(n=8, seed=9):
    rng = np.random.default_rng(seed)
    return (0.5 + rng.random(n)).astype(np.float32), (rng.random(n) - 0.5).astype(np.float32)


@over_kinds
def test_decorator_form(kind: Kind):
    decorator = kind.make(num_outputs=2)
    jax_sincos = decorator(kind.targets["sincos"])
    assert isinstance(jax_sincos, kind.cls)
    assert jax_sincos == kind("sincos", num_outputs=2)
    angle = np.linspace(0.0, 3.0, 9, dtype=np.float32)
    s, c = jax_sincos(jnp.asarray(angle))
    np.testing.assert_allclose(s, np.sin(angle), atol=1e-6)
    np.testing.assert_allclose(c, np.cos(angle), atol=1e-6)

    jax_sss = kind.make(enable_backward=True)(kind.targets["scale_sum_square"])
    a, b = _ab()
    da = jax.grad(lambda a: jnp.sum(jax_sss(a, jnp.asarray(b), 1.5)[0]))(jnp.asarray(a))
    np.testing.assert_allclose(da, 2.0 * (a * 1.5 + b) * 1.5, rtol=1e-5)


# ======================================================================================================================
# A module as a field of a user model; serialisation
# ======================================================================================================================


class SpringModel(eqx.Module):
    weights: jax.Array
    spring: AbstractWarpModule
    stiffness: float = eqx.field(static=True, default=STIFFNESS)

    def __call__(self, positions):
        energies, _forces = self.spring(positions, self.weights, self.stiffness)
        return jnp.sum(energies)


@over_kinds
def test_model_field_and_training_with_filter_jit(kind: Kind):
    p, w = spring_data(N_SPRING)
    positions = jnp.asarray(p)
    g = 0.5 * STIFFNESS * np.sum(p * p, axis=1)  # d loss / d weights (constant)

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def step(model, positions):
        loss, grads = eqx.filter_value_and_grad(lambda m: m(positions))(model)
        updates = jax.tree_util.tree_map(lambda g: -0.1 * g, grads)
        return loss, eqx.apply_updates(model, updates)

    model = SpringModel(jnp.asarray(w), kind("spring", num_outputs=2, enable_backward=True))
    assert jax.tree_util.tree_leaves(model) == [model.weights]
    losses = []
    for _ in range(3):
        loss, model = step(model, positions)
        losses.append(float(loss))
        # rebuild the model around a freshly built module: no retrace
        model = SpringModel(model.weights, kind("spring", num_outputs=2, enable_backward=True))
    np.testing.assert_allclose(model.weights, w - 0.3 * g, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(losses[0], np.sum(g * w), rtol=1e-5)
    assert losses[0] > losses[1] > losses[2]


@over_kinds
def test_serialise_round_trip(kind: Kind, tmp_path):
    p, w = spring_data(N_SPRING)
    model = SpringModel(jnp.asarray(w), kind("spring", num_outputs=2, enable_backward=True))
    path = tmp_path / "model.eqx"
    eqx.tree_serialise_leaves(path, model)

    like = SpringModel(jnp.zeros(N_SPRING, dtype=jnp.float32), kind("spring", num_outputs=2, enable_backward=True))
    loaded = eqx.tree_deserialise_leaves(path, like)
    assert loaded.spring == model.spring
    assert jax.tree_util.tree_structure(loaded) == jax.tree_util.tree_structure(model)
    np.testing.assert_array_equal(loaded.weights, w)
    np.testing.assert_allclose(eqx.filter_jit(loaded)(jnp.asarray(p)), np.sum(spring_expected(p, w)[0]), rtol=1e-5)

    # a bare module (no leaves) round-trips too
    bare = tmp_path / "bare.eqx"
    eqx.tree_serialise_leaves(bare, model.spring)
    assert eqx.tree_deserialise_leaves(bare, kind("spring", num_outputs=2, enable_backward=True)) == model.spring


def test_a_module_kind_must_give_every_abstract_member() -> None:
    # The class-level settings are abstract class variables and the per-kind steps abstract methods: a kind that
    # forgets one cannot be instantiated (Equinox's pattern: subclasses override only abstract members).
    abstract_vars = {"_what", "_call_options", "_runtime_scalars"}
    assert abstract_vars <= set(AbstractWarpModule.__abstractclassvars__)
    assert "_annotated_target" in AbstractWarpModule.__abstractmethods__
    for kind in (JaxKernel, JaxCallable):
        assert not kind.__abstractmethods__, kind
        assert not kind.__abstractclassvars__, kind
        overridden = {
            name
            for name, member in vars(kind).items()
            if callable(member) and not name.startswith("__") and hasattr(AbstractWarpModule, name)
        }
        assert overridden <= AbstractWarpModule.__abstractmethods__, f"{kind.__name__} overrides {overridden}"
