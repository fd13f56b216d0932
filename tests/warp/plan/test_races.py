"""The generated code's say over the source-level proofs (`jarp.warp._plan._analysis._generated`): a launch is split
(race-free, or with private copies) and a zero-fill skipped only where the C++ Warp generates agrees.

The source-level proofs read the kernel's Python; what Warp calls for an operator (a user ``@wp.func`` named ``mul``),
a reference parameter, a native snippet, run code they never see. `race_veto` lets a launch be split only where every
write into an array is a plain store in the kernel's own code; `private_veto` lets accumulated arrays be written only
by the atomics of their combination; `stored_only` lets a fill be skipped only where the output's pointer goes to
plain stores alone. Each keeps the launch whole (or the fill) rather than refusing, and none vetoes the kernels the
source-level proofs accept today (``tests/warp/ffi/test_cpu_threads.py``, ``test_privatised.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import jax
import numpy as np
import pytest
import warp as wp

import jarp.warp as jw
from jarp.warp import _kernel
from jarp.warp._inspect import list_plans
from jarp.warp._plan._analysis import _generated, _overwrites, _races, _writes
from jarp.warp._plan._signature import make_signature
from jarp.warp._plan._values import Runs
from jarp.warp._upstream import _warp_codegen, _warp_kernels
from tests.support import kernels_generated_races as kgr
from tests.support import kernels_generated_writes as kg
from tests.support import kernels_operator_add as ka
from tests.support import kernels_private as kp
from tests.support import kernels_races as kr


@pytest.fixture
def every_thread() -> Iterator[None]:
    before = jw.cpu_threads()
    jw.set_cpu_threads(0)
    yield
    jw.set_cpu_threads(before)


def _functions(kernel: wp.Kernel) -> tuple[_warp_codegen.GeneratedFunction, ...]:
    return _writes.codegen_record(kernel).functions


def _params(kernel: wp.Kernel, num_outputs: int = 1) -> tuple[object, ...]:
    return make_signature(_warp_kernels.kernel_params(kernel), num_outputs, (), what="test").params


# -- race freedom -----------------------------------------------------------------------------------------------------


@pytest.mark.native_launches
def test_an_operator_overload_racing_on_a_struct_field_keeps_the_launch_whole(
    monkeypatch: pytest.MonkeyPatch, every_thread: None
) -> None:
    """``out[i] = s * 1.0`` calls a user ``mul`` that adds one to ``s.arr[0]`` without an atomic: split, the threads
    lose each other's updates (a quarter of a million counted of four million)."""
    # The write check refuses the kernel (a struct's array is an input: `test_writes.py`); without it, the race
    # proof alone must keep the launch whole
    monkeypatch.setattr(_kernel, "_check_writes", lambda *args: None)
    n = 1 << 22
    module = jw.jax_kernel(kgr.count_through_operator, launch_dims=n)
    f = jax.jit(lambda arr: module({"arr": arr})[0])
    for _ in range(3):  # (the handler times a first launch whole, then splits the next ones where it may)
        counts = np.asarray(f(np.zeros(1, np.float32)))
        assert counts.max() == n  # every update kept: one thread ran them all, in order
    (info,) = [i for i in list_plans() if i.kernel == kgr.count_through_operator.key]
    assert info.race_free is False


@pytest.mark.parametrize(
    ("kernel", "veto"),
    [
        (kgr.count_through_operator, "writes 's.arr' by store in mul, a function it calls"),
        (kgr.operator_writes_field, "writes 's.arr' by store in sub, a function it calls"),
        (kgr.native_writes_struct, "writes 's.arr' by native code in native_field_store, a function it calls"),
        (kg.operator_writes_x, "writes 'x' by store in mul, a function it calls"),
        (kg.reference_writes_x, "writes 'x' by store in add_through_ref, a function it calls"),
        (kg.native_writes_x, "writes 'x' by native code in native_store, a function it calls"),
        (kg.address_of_writes_x, "writes 'x' by a pointer cast"),
        (kg.pointer_writes_x, "writes 'x' by a pointer cast"),
        # plain stores in the kernel's own code, which the source-level proof judges (it refuses wp.store)
        (kgr.store_address_writes_field, None),
        (kg.store_address_writes_x, None),
        (kgr.reads_field_many_ways, None),
        (kr.elementwise, None),
        (kgr.stores_into_components, None),  # an element's entry, row, component, in place
        (ka.elementwise_through_add, None),  # an operator overload on values writes nothing
    ],
    ids=lambda v: getattr(v, "key", None),
)
def test_the_race_veto_names_each_write_outside_the_kernels_own_stores(kernel: wp.Kernel, veto: str | None) -> None:
    arrays = [name for name, _ in _races._kernel_arrays(kernel, _params(kernel)).arrays]
    reason = _generated.race_veto(_functions(kernel), arrays)
    assert reason == (None if veto is None else f"the generated code {veto}")


def test_no_generated_code_vetoes() -> None:
    assert _generated.race_veto((), ["x"]) == "no generated code to check"
    assert _generated.private_veto((), ["x"], {"x": "add"}) == "no generated code to check"


def test_the_veto_reaches_the_plan_and_spares_value_operators() -> None:
    # the source-level proof refuses the struct used whole; the generated code refuses the write in ``mul``: either way
    # the plan says so
    assert _races.race_blocker(kgr.count_through_operator, _params(kgr.count_through_operator), 1) is not None
    assert _races.split_proofs(
        Runs.KERNEL, kgr.count_through_operator, _params(kgr.count_through_operator), None, False, (8,)
    ) == (False, ())
    assert _races.race_blocker(ka.elementwise_through_add, _params(ka.elementwise_through_add), 1) is None


# -- private copies ---------------------------------------------------------------------------------------------------


def test_the_private_veto_takes_only_the_atomics_of_each_combination() -> None:
    functions = _functions(kp.accumulated_in_a_function)  # out accumulated by wp.atomic_add in add_into
    arrays = ["idx", "x", "out"]
    assert _generated.private_veto(functions, arrays, {"out": "add"}) is None
    assert _generated.private_veto(functions, arrays, {"out": "max"}) == (
        "the generated code writes the accumulated array 'out' (max) by atomic_add in add_into, a function it calls"
    )
    # an array not accumulated, written by a function the kernel calls
    assert _generated.private_veto(functions, arrays, {}) == (
        "the generated code writes 'out' by atomic_add in add_into, a function it calls"
    )
    # a plain store into an accumulated array: not an accumulation (a user ``add`` Warp would call for ``+=``)
    stored = _functions(kr.elementwise)
    assert _generated.private_veto(stored, ["x", "out"], {"out": "add"}) == (
        "the generated code writes the accumulated array 'out' (add) by store"
    )


def test_privatised_kernels_pass_the_veto() -> None:
    assert _races.private_blocker(kp.scatter, _params(kp.scatter, 4), 1) == (
        None,
        (("total", "add"), ("low", "min"), ("high", "max"), ("count", "add")),
    )
    kernel = kp.accumulated_in_a_function
    assert _races.private_blocker(kernel, _params(kernel), 1) == (None, (("out", "add"),))


# -- zero-fills -------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kernel", "stored"),
    [
        (kr.elementwise, ("out",)),
        (ka.elementwise_through_add, ("out",)),
        (kgr.output_stored_with_its_shape, ("out",)),
        (kgr.output_read_through_operator, ()),  # handed to the user ``div``
        (kgr.output_read_in_a_function, ()),  # handed to ``first``
        (kp.stored_then_read, ()),  # loaded
        (kg.store_address_writes_x, ("y",)),  # a reference taken to ``x``
        (kg.native_writes_x, ("y",)),
    ],
    ids=lambda v: getattr(v, "key", None),
)
def test_stored_only_lists_outputs_whose_pointer_only_reaches_plain_stores(
    kernel: wp.Kernel, stored: tuple[str, ...]
) -> None:
    assert _generated.stored_only(_functions(kernel)) == stored


@pytest.mark.parametrize(
    "kernel", [kgr.output_read_through_operator, kgr.output_read_in_a_function], ids=lambda v: v.key
)
def test_a_fill_the_source_proof_would_skip_is_kept_where_the_generated_code_reads_the_output(
    kernel: wp.Kernel, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source-level proof sees these reads of ``out`` (its name in the expression); one that missed a read Warp
    makes through an operator or a function (as a proof of text may) would skip the fill: the generated code keeps
    it, and the unfilled element is never read."""
    monkeypatch.setattr(_overwrites, "overwritten_outputs", lambda source, names: dict.fromkeys(names, 1))
    assert _overwrites.overwritten_in_code(kernel, ("out",)) == {}
    n = 16
    module = jw.jax_kernel(kernel, output_dims=n)
    f = jax.jit(lambda x: module(x)[0])
    x = np.arange(n, dtype=np.float32)
    np.testing.assert_array_equal(np.asarray(f(x)), x)  # ``out`` read as zeros
    (info,) = [i for i in list_plans() if i.kernel == kernel.key and i.launch_dims == (n,)]
    assert info.zero_results == (0,)


def test_a_plain_output_still_skips_its_fill() -> None:
    assert _overwrites.overwritten_in_code(kr.elementwise, ("out",)) == {"out": 1}
    assert _overwrites.overwritten_in_code(ka.elementwise_through_add, ("out",)) == {"out": 1}
    n = 16
    module = jw.jax_kernel(ka.elementwise_through_add, output_dims=n)
    x = np.arange(n, dtype=np.float32) - 4.0
    f = jax.jit(lambda x: module(x)[0])  # (held: a plan lives as long as a program that calls it)
    np.testing.assert_array_equal(np.asarray(f(x)), np.maximum(x, 1.0))
    (info,) = [i for i in list_plans() if i.kernel == ka.elementwise_through_add.key and i.launch_dims == (n,)]
    assert info.zero_results == ()
