"""The write check (`jarp.warp._plan._analysis._writes`): a kernel's writes as Warp compiles them.

Every spelling Warp compiles into a store or atomic on an input is refused at construction naming the parameter
(or struct field), or honoured when declared in-out, and the caller's array never changes; a store Warp never
emits (a branch folded on a Python constant) is no write. Warp's own record and jarp's resolver are compared over
every kernel of the suite and of Warp's JAX test suite.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

import tests.support as support
from jarp.warp import jax_callable, jax_kernel
from jarp.warp._plan._analysis import _names, _writes
from jarp.warp._upstream import _warp_codegen, _warp_kernels, _warp_types
from tests.support import kernels_generated_races as kgr
from tests.support import kernels_generated_writes as kg
from tests.support import kernels_write_escapes as ke
from tests.support import kernels_write_spellings as ks
from tests.support import kernels_writes as kw

N = 4


def _key(v: object) -> str | None:
    return getattr(v, "key", None)


@pytest.mark.parametrize(
    "kernel", [*kw.WRITERS, kw.view_writes_x, kw.tile_store_writes_x, *kg.GENERATED_WRITERS], ids=_key
)
def test_a_write_warp_compiles_is_refused_naming_the_input(kernel: wp.Kernel) -> None:
    with pytest.raises(ValueError, match=r"writes to input\(s\) \['x'\].*in_out_argnames"):
        jax_kernel(kernel)


@pytest.mark.parametrize("kernel", kg.GENERATED_WRITERS, ids=_key)
def test_the_generated_code_shows_writes_no_python_spelling_does(kernel: wp.Kernel) -> None:
    """A store through an address, a reference, a native snippet, pointer arithmetic, an operator overload: the
    generated C++ says the pointer of ``x`` reaches a store (or code jarp cannot see into)."""
    assert _writes.generated_writes(kernel) == ("x", "y")


def test_reads_in_the_generated_code_are_no_write() -> None:
    # views, shapes, lengths, loads through addresses, a function returning its array, tile loads (accepted as an
    # input: tests/warp/plan/test_read_only_uses.py)
    assert _writes.generated_writes(kg.reads_x_many_ways) == ("y",)


@pytest.mark.parametrize(("kernel", "field"), list(kgr.FIELD_WRITERS.items()), ids=_key)
def test_a_struct_field_written_only_in_the_generated_code_is_refused(kernel: wp.Kernel, field: str) -> None:
    """An operator overload (a user ``mul``, ``sub``), a store through an address, a native snippet handed the
    struct: Warp writes the field, the resolver sees no write, the generated code does (the struct whole where native
    code gets it)."""
    arr = wp.zeros(N, dtype=float, device="cpu")
    s = kgr.Counter()
    s.arr = arr
    wp.launch(kernel, dim=N, inputs=[s], outputs=[wp.zeros(N, dtype=float, device="cpu")], device="cpu")
    assert arr.numpy().any(), "the kernel writes the field"
    assert _writes.written_struct_fields(kernel, ("s",)) == (field,)
    with pytest.raises(ValueError, match=rf"writes to struct field\(s\) \['{field}'\]"):
        jax_kernel(kernel)


def test_reads_of_a_struct_field_in_the_generated_code_are_no_write() -> None:
    # in place, through a function, its shape and length, a load through its address
    assert _writes.written_struct_fields(kgr.reads_field_many_ways, ("s",)) == ()
    arr = jnp.arange(N, dtype=jnp.float32)
    (y,) = jax_kernel(kgr.reads_field_many_ways)({"arr": arr})
    np.testing.assert_array_equal(y, 3.0 * np.arange(N, dtype=np.float32) + 2.0 * N)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("kernel", kg.GENERATED_WRITERS, ids=_key)
def test_generated_writers_declared_in_out_keep_the_callers_array(kernel: wp.Kernel, jit: bool) -> None:
    m = jax_kernel(kernel, num_outputs=2, in_out_argnames=("x",))
    z = jnp.zeros(N, jnp.float32)
    x_new, y = (jax.jit(m) if jit else m)(z)
    np.testing.assert_array_equal(x_new, np.full(N, 100.0, np.float32))
    np.testing.assert_array_equal(y, np.ones(N, np.float32))
    np.testing.assert_array_equal(z, np.zeros(N, np.float32))


@pytest.mark.parametrize("kernel", kw.STRUCT_WRITERS, ids=_key)
def test_a_write_through_a_struct_field_is_refused_naming_the_field(kernel: wp.Kernel) -> None:
    with pytest.raises(ValueError, match=r"writes to struct field\(s\) \['s\.arr'\]"):
        jax_kernel(kernel)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("kernel", kw.WRITERS, ids=_key)
def test_declared_in_out_the_write_is_returned_and_the_callers_array_kept(kernel: wp.Kernel, jit: bool) -> None:
    m = jax_kernel(kernel, num_outputs=2, in_out_argnames=("x",))
    z = jnp.zeros(N, jnp.float32)
    call = jax.jit(m) if jit else m
    x_new, y = call(z)
    np.testing.assert_array_equal(x_new, np.full(N, 100.0, np.float32))
    np.testing.assert_array_equal(y, np.ones(N, np.float32))
    np.testing.assert_array_equal(z, np.zeros(N, np.float32))
    # the same under one program that reads the caller's array after the call
    total = jax.jit(lambda z: jnp.sum(m(z)[0]) + jnp.sum(z))(z + 2.5)
    assert float(total) == pytest.approx(N * 102.5 + N * 2.5)


def _launch_writer(kernel: wp.Kernel, x: wp.array(dtype=float), y: wp.array(dtype=float)) -> None:
    wp.launch(kernel, dim=x.shape[0], inputs=[x], outputs=[y], device=x.device)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("kernel", kw.WRITERS, ids=_key)
def test_a_callable_launching_a_writer_never_changes_the_callers_array(kernel: wp.Kernel, jit: bool) -> None:
    c = jax_callable(functools.partial(_launch_writer, kernel))
    z = jnp.zeros(N, jnp.float32)
    (y,) = (jax.jit(c) if jit else c)(z)
    np.testing.assert_array_equal(y, np.ones(N, np.float32))
    np.testing.assert_array_equal(z, np.zeros(N, np.float32))
    total = jax.jit(lambda z: jnp.sum(c(z)[0]) + jnp.sum(z))(z + 1.0)
    assert float(total) == pytest.approx(N + N * 1.0)


def _warp_launch(kernel: wp.Kernel, *arrays: np.ndarray) -> list[np.ndarray]:
    wp_arrays = [wp.array(a, dtype=float, device="cpu") for a in arrays]
    wp.launch(kernel, dim=len(arrays[0]), inputs=wp_arrays, device="cpu")
    return [a.numpy() for a in wp_arrays]


@pytest.mark.parametrize("factory", [kw.make_variant, kw.make_static_variant], ids=["closure", "wp.static"])
def test_a_factory_variant_is_judged_on_its_own_code(factory) -> None:
    x = np.arange(N, dtype=np.float32)
    reading = jax_kernel(factory(False))  # Warp folds the store into `vectors` away
    empty = jnp.zeros(N, jnp.float32)  # the unused array, passed as an input as the library's binding does
    (y,) = reading(jnp.asarray(x), empty)
    _, _, expected = _warp_launch(factory(False), x, np.zeros(N, np.float32), np.zeros(N, np.float32))
    np.testing.assert_array_equal(y, expected)
    with pytest.raises(ValueError, match=r"writes to input\(s\) \['vectors'\]"):
        jax_kernel(factory(True))
    vectors, y = jax_kernel(factory(True), num_outputs=2, in_out_argnames=("vectors",))(jnp.asarray(x), empty)
    np.testing.assert_array_equal(vectors, 2.0 * x)
    np.testing.assert_array_equal(y, x + 1.0)


def test_a_struct_variant_is_judged_on_its_own_code() -> None:
    # Warp records nothing for struct fields: the resolver alone folds this branch
    jax_kernel(kw.make_struct_variant(False))
    with pytest.raises(ValueError, match=r"struct field\(s\) \['s\.arr'\]"):
        jax_kernel(kw.make_struct_variant(True))


@pytest.mark.parametrize("kernel", [kw.literal_false_into_func, kw.literal_false_through_two_funcs], ids=_key)
def test_a_constant_false_into_a_function_is_no_write(kernel: wp.Kernel) -> None:
    # Warp compiles ``if (var_flag) array_store(...)`` and its record marks ``x`` written for every call; with the
    # constant this kernel passes the store never runs, and the resolver, agreeing with the record without the
    # constant, proves it
    assert _warp_codegen.array_access(kernel)["x"].written
    assert "x" in _writes.writes(kernel, specialise=False)
    x = np.arange(N, dtype=np.float32)
    (y,) = jax_kernel(kernel)(jnp.asarray(x))
    _, y_ref = _warp_launch(kernel, x, np.zeros(N, np.float32))
    np.testing.assert_array_equal(y, y_ref)


@pytest.mark.parametrize(
    "kernel", [kw.literal_true_into_func, kw.literal_false_flipped, kw.runtime_flag_into_func], ids=_key
)
def test_a_flag_that_may_be_true_still_writes(kernel: wp.Kernel) -> None:
    with pytest.raises(ValueError, match=r"writes to input\(s\) \['x'\]"):
        jax_kernel(kernel)


# -- planted bugs: each of these must make the tests above fail ---------------------------------------------------


def test_without_closures_the_resolver_misses_a_captured_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    kernel = kw.make_struct_writer()
    assert _writes.written_struct_fields(kernel, ("s",)) == ("s.arr",)
    real = _names.resolve

    def no_closures(func, name):
        return real(type("F", (), {"__globals__": func.__globals__})(), name)

    monkeypatch.setattr(_names, "resolve", no_closures)
    # an unresolved callee handed the struct counts it written whole (and the generated code sees the field)
    assert _writes.written_struct_fields(kw.make_struct_writer(), ("s",)) == ("s", "s.arr")


def test_without_folding_a_folded_struct_store_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _writes.written_struct_fields(kw.make_struct_variant(False), ("s",)) == ()
    monkeypatch.setattr(_names, "constant", lambda *_: _names.UNKNOWN)
    assert _writes.written_struct_fields(kw.make_struct_variant(False), ("s",)) == ("s.arr",)


# -- Warp's record and the resolver, over every kernel -----------------------------------------------------------

# Where the resolver sees a write that Warp's record does not: tile stores, stores through a local alias, a local
# struct's field, a returned array or an explicit view, and atomics in deterministic mode (lowered without Warp's
# marking). The union decides.
_RESOLVER_ONLY = {
    "row_sum_tile": {"out"},
    "row_sum_kernel": {"out"},
    "sum_kernel": {"total"},
    "scatter_add_kernel": {"out"},
    "alias_input_kernel": {"victim"},
    "through_alias": {"a"},
    # through what a function returns, a local struct handed whole, a struct built with the array, a pointer view
    "returned_array": {"x"},
    "nested_call": {"x"},
    "local_struct_to_func": {"x"},
    "struct_ctor": {"x"},
    "ptr_array": {"x"},
    "view_call": {"x"},
    "through_local_struct": {"a"},
    "shift_through_local_struct": {"out"},
    "alias_of_local_struct_field": {"out"},
    "shift_through_a_function": {"out"},
    "tiled": {"b"},
    "tile_copy": {"out"},
    "tile_through_function": {"out"},
    "tile_store_writes_x": {"x"},
    "shaped_tile_store_kernel": {"output"},
}


def _all_kernels() -> list[wp.Kernel]:
    modules = [
        importlib.import_module(f"tests.support.{m.name}")
        for m in pkgutil.iter_modules(support.__path__)
        if m.name.startswith("kernels")
    ]
    x64 = jax.config.jax_enable_x64
    try:
        modules.append(importlib.import_module("warp.tests.interop.test_jax"))
    finally:
        jax.config.update("jax_enable_x64", x64)  # Warp's test module switches float64 on at import
    found: dict[int, wp.Kernel] = {}
    for module in modules:
        for value in vars(module).values():
            values = (
                value.values() if isinstance(value, dict) else value if isinstance(value, (list, tuple)) else [value]
            )
            for v in values:
                if isinstance(v, wp.Kernel):
                    for concrete in v.overloads.values() if v.is_generic else [v]:
                        found.setdefault(id(concrete), concrete)
    return list(found.values())


# A cross-check over every kernel of the suite and of Warp's JAX tests (about 35 s): `nox -s tests_full` runs it.
@pytest.mark.slow
def test_warps_record_and_the_resolver_agree_on_every_kernel() -> None:
    kernels = _all_kernels()
    assert len(kernels) > 250
    disagreements, specialised = {}, {}
    for kernel in kernels:
        record = _warp_codegen.array_access(kernel)
        assert record is not None, (kernel.key, _warp_codegen.codegen_error(kernel))
        by_warp = {p for p, access in record.items() if access.written}
        # on Warp's model (a function writes a parameter if any call could): the resolver sees all Warp records
        by_resolver = {p for p in _writes.writes(kernel, specialise=False) if p in record}
        # the generated-code analysis sees every write Warp records; the resolver every one but those only the
        # generated code shows (`kernels_generated_writes.py`)
        by_generated = set(_writes.generated_writes(kernel))
        assert by_warp <= by_generated, f"{kernel.key}: Warp records writes the generated-code analysis misses"
        if kernel.module.name == kg.__name__:
            continue
        assert by_warp <= by_resolver, f"{kernel.key}: Warp records writes the resolver misses"
        if by_resolver != by_warp:
            disagreements[kernel.key] = by_resolver - by_warp
        dead = by_resolver - set(_writes.writes(kernel))
        if dead:
            specialised[kernel.key] = dead
    assert disagreements == _RESOLVER_ONLY
    # the constants a call passes make these writes dead: the only writes of Warp's record jarp overrules
    assert specialised == {"literal_false_into_func": {"x"}, "literal_false_through_two_funcs": {"x"}}


def _launch_struct_writer(kernel: wp.Kernel, s: kw.Holder, y: wp.array(dtype=float)) -> None:
    wp.launch(kernel, dim=y.shape[0], inputs=[s], outputs=[y], device=y.device)


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("kernel", kw.STRUCT_WRITERS, ids=_key)
def test_a_callable_writing_a_struct_field_never_changes_the_callers_array(kernel: wp.Kernel, jit: bool) -> None:
    c = jax_callable(functools.partial(_launch_struct_writer, kernel), output_dims={"y": N})
    z = jnp.zeros(N, jnp.float32)
    (y,) = (jax.jit(c) if jit else c)({"arr": z})
    np.testing.assert_array_equal(y, np.ones(N, np.float32))
    np.testing.assert_array_equal(z, np.zeros(N, np.float32))
    total = jax.jit(lambda z: jnp.sum(c({"arr": z})[0]) + jnp.sum(z))(z + 1.0)
    assert float(total) == pytest.approx(N + N * 1.0)


@pytest.mark.parametrize(("kernel", "written"), list(ks.WRITES.items()), ids=lambda v: getattr(v, "key", None))
def test_what_each_spelling_writes(kernel: wp.Kernel, written: tuple[str, ...]) -> None:
    assert _writes.writes(kernel) == tuple(sorted(written))
    params = _warp_kernels.kernel_params(kernel)
    arrays = tuple(label for label, t in params if wp.types.is_array(t))
    assert _writes.written_inputs(kernel, arrays) == tuple(p for p in arrays if p in written)
    structs = tuple(label for label, t in params if _warp_types.is_struct_type(t))
    assert _writes.written_struct_fields(kernel, structs) == tuple(sorted(w for w in written if "." in w))


# -- indirect routes: returned arrays, nested calls, local structs, aliases, views -------------------------------------


@pytest.mark.parametrize("kernel", ke.ARRAY_ESCAPES, ids=_key)
def test_an_escaped_array_write_is_refused_and_honoured_in_out(kernel: wp.Kernel) -> None:
    with pytest.raises(ValueError, match=r"writes to input\(s\) \['x'\]"):
        jax_kernel(kernel)
    z = jnp.zeros(N, jnp.float32)
    x_new, y = jax_kernel(kernel, num_outputs=2, in_out_argnames=("x",))(z)
    x_ref, y_ref = _warp_launch(kernel, np.zeros(N, np.float32), np.zeros(N, np.float32))
    np.testing.assert_array_equal(x_new, x_ref)
    np.testing.assert_array_equal(y, y_ref)
    np.testing.assert_array_equal(z, np.zeros(N, np.float32))


def test_a_view_made_with_wp_view_is_a_write() -> None:
    with pytest.raises(ValueError, match=r"writes to input\(s\) \['x'\]"):
        jax_kernel(ke.view_call, launch_dims=(N,))


@pytest.mark.parametrize("kernel", [*ke.STRUCT_ESCAPES, ke.component_named_field], ids=_key)
def test_an_escaped_struct_field_write_is_refused(kernel: wp.Kernel) -> None:
    # a field returned by a function counts as the whole struct for the resolver (what the function returns is
    # anything it is handed); the generated code sees the field itself
    fields = {ke.component_named_field: "'s.x'", ke.returned_field: "'s', 's.arr'"}.get(kernel, "'s.arr'")
    with pytest.raises(ValueError, match=rf"writes to struct field\(s\) \[{fields}\]"):
        jax_kernel(kernel)


def test_a_dense_builtin_writes_its_arrays() -> None:
    # Warp's record misses dense_gemm_batched's output, and the kernel does not build on the CPU (so it lives alone)
    def gemm(
        m: wp.array(dtype=wp.int32),
        st: wp.array(dtype=wp.int32),
        a: wp.array(dtype=wp.float32),
        c: wp.array(dtype=wp.float32),
        y: wp.array(dtype=float),
    ):
        i = wp.tid()
        wp.dense_gemm_batched(m, m, m, 0, 0, st, st, st, a, a, c)
        y[i] = 1.0

    kernel = wp.kernel(module="unique")(gemm)
    with pytest.raises(ValueError, match=r"writes to input\(s\) \['m', 'st', 'a', 'c'\]"):
        jax_kernel(kernel)


def test_a_flag_changed_after_construction_is_judged_again(monkeypatch: pytest.MonkeyPatch) -> None:
    m = jax_kernel(kw.flag_writer)  # the store is folded away: accepted
    z = jnp.zeros(N, jnp.float32)
    (y,) = m(z)
    np.testing.assert_array_equal(y, np.ones(N, np.float32))
    monkeypatch.setattr(kw, "WRITE_FLAG", True)
    # a new plan (a new trace) judges the code Warp would now compile, which stores into the input
    with pytest.raises(ValueError, match=r"writes to input\(s\) \['x'\]"):
        jax.jit(lambda z: jnp.sum(m(z)[0]) + jnp.sum(z))(z)
    np.testing.assert_array_equal(z, np.zeros(N, np.float32))
    monkeypatch.setattr(kw, "WRITE_FLAG", False)
    jax.jit(lambda z: m(z)[0])(z)  # and accepted again once the flag is back
