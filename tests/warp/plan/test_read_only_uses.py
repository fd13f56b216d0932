"""Inputs a kernel only reads are not counted as written: kernels jarp once refused with "writes to input(s)".

Each kernel of `tests/support/read_only_uses.py`, three of ``warp.sparse``'s library kernels (whose
``bsr_row_index`` overload calls its other overload and tests an array's truth) and
`kernels_generated_writes.reads_x_many_ways` only read their inputs. Each is accepted with them as inputs, its results
equal ``wp.launch``'s on the same values, and the caller's inputs keep their values. Both judgements see no write (the
generated code and the resolver), but for a function passed as an argument, which the resolver cannot follow: for
array parameters the generated code decides (`_writes.written_inputs`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
import warp._src.sparse as wp_sparse

from jarp.warp import jax_kernel
from jarp.warp._plan._analysis import _writes
from jarp.warp._upstream import _warp_kernels
from tests.support import kernels_generated_writes as kg
from tests.support import read_only_uses as kr

N = 4
_SPD = (np.eye(kr.DENSE_N) * 4.0 + np.arange(kr.DENSE_N**2).reshape(kr.DENSE_N, -1) / 10.0).astype(np.float32)
_SPD = ((_SPD + _SPD.T) / 2.0).ravel()
_VEC = np.arange(1.0, kr.DENSE_N**2 + 1.0, dtype=np.float32)
_CHOL = np.linalg.cholesky(_SPD.reshape(kr.DENSE_N, -1)).astype(np.float32).ravel()


class Case(NamedTuple):
    """One kernel: its inputs (in order; ints and structs stay Python values), its outputs' lengths, its launch dims."""

    kernel: wp.Kernel
    inputs: tuple[Any, ...]
    outputs: tuple[int, ...]
    dims: tuple[int, ...]


def _ints(*values: int) -> np.ndarray:
    return np.asarray(values, dtype=np.int32)


def _pair() -> Any:
    s = kr.Pair()
    s.a, s.b = 1.5, -2.0
    return s


CASES: dict[str, Callable[[], Case]] = {
    "len": lambda: Case(kr.len_reads_x, (np.arange(N, dtype=np.float32),), (N,), (N,)),
    "truth test": lambda: Case(kr.truth_test_reads_x, (np.arange(N, dtype=np.float32),), (N,), (N,)),
    "type(s)(...)": lambda: Case(kr.type_constructs_a_copy, (_pair(), np.arange(N, dtype=np.float32)), (N,), (N,)),
    "overload calls overload": lambda: Case(
        kr.overload_calls_overload, (_ints(0, 2, 3, 5, 9), _ints(2, 1, 2, 4)), (N,), (N,)
    ),
    "dense_gemm": lambda: Case(kr.dense_gemm_writes_c, (_SPD, _VEC), (kr.DENSE_N**2,), (1,)),
    "dense_chol": lambda: Case(kr.dense_chol_writes_l, (_SPD,), (kr.DENSE_N**2,), (1,)),
    "dense_subs": lambda: Case(kr.dense_subs_writes_x, (_CHOL, _VEC[: kr.DENSE_N]), (kr.DENSE_N,), (1,)),
    "dense_solve": lambda: Case(kr.dense_solve_writes_x, (_SPD, _CHOL, _VEC[: kr.DENSE_N]), (kr.DENSE_N,), (1,)),
    # warp.sparse: a 3-row block matrix with blocks at (0, 0), (0, 2), (1, 1), (2, 0), (2, 2)
    "bsr_get_block_row": lambda: Case(wp_sparse._bsr_get_block_row, (3, _ints(0, 2, 3, 5), _ints(2, 1, 2)), (5,), (5,)),
    "bsr_assign_list_blocks": lambda: Case(
        wp_sparse._bsr_assign_list_blocks,
        (2, 1, 1, 1, 3, _ints(0, 2, 3, 5), _ints(2, 1, 2), _ints(0, 2, 1, 0, 2)),
        (10, 10),
        (5, 2, 1),
    ),
    # x = [[A, .], [., B]], y = [[., C], [D, .]]: one product block per block of x
    # views, lengths, addresses loaded, a function returning its array, a tile load
    "reads_x_many_ways": lambda: Case(
        kg.reads_x_many_ways, (np.arange(3.0 * N, dtype=np.float32).reshape(N, 3),), (N,), (N,)
    ),
    # the resolver counts what it hands a function passed as an argument as written: the generated code decides
    "function argument": lambda: Case(kr.function_argument_reads_x, (np.arange(N, dtype=np.float32),), (N,), (N,)),
    "bsr_mm_list_coeffs": lambda: Case(
        wp_sparse._bsr_mm_list_coeffs,
        (
            *(0, 2, 2),  # copied_z_nnz, mm_nnz, x_nrow
            *(_ints(0, 1, 2), _ints(1, 1), _ints(0, 1)),  # x: offsets, row counts, columns
            *(_ints(0, 1, 2), _ints(1, 1), _ints(1, 0)),  # y
            *(_ints(-1, -1), _ints(0, 1, 2)),  # mm_row_min, mm_offsets
        ),
        (2, 2, 2),
        (2,),
    ),
}


def _case(name: str) -> Case:
    return CASES[name]()


def _warp_launch(case: Case) -> list[np.ndarray]:
    """The outputs of ``wp.launch`` on the case's values."""
    params = _warp_kernels.kernel_params(case.kernel)
    args = []
    for (_, warp_type), value in zip(params, case.inputs, strict=False):
        is_array = isinstance(value, np.ndarray)
        args.append(wp.array(value, dtype=warp_type.dtype, device="cpu") if is_array else value)
    outs = [
        wp.zeros(n, dtype=warp_type.dtype, device="cpu")
        for n, (_, warp_type) in zip(case.outputs, params[len(case.inputs) :], strict=True)
    ]
    wp.launch(case.kernel, dim=case.dims, inputs=args, outputs=outs, device="cpu")
    return [o.numpy() for o in outs]


def _jax_value(value: Any) -> Any:
    return jnp.asarray(value) if isinstance(value, np.ndarray) else value


def _array_inputs(case: Case) -> tuple[str, ...]:
    params = _warp_kernels.kernel_params(case.kernel)
    return tuple(p for (p, t), _ in zip(params, case.inputs, strict=False) if wp.types.is_array(t))


@pytest.mark.parametrize("name", list(CASES))
def test_the_inputs_are_not_written(name: str) -> None:
    case = _case(name)
    assert _writes.written_inputs(case.kernel, _array_inputs(case)) == ()


@pytest.mark.parametrize("name", list(CASES))
def test_the_generated_code_writes_no_input(name: str) -> None:
    case = _case(name)
    assert set(_writes.generated_writes(case.kernel)).isdisjoint(_array_inputs(case))


@pytest.mark.parametrize("name", [n for n in CASES if n != "function argument"])
def test_the_resolver_writes_no_input(name: str) -> None:
    case = _case(name)
    assert set(_writes.writes(case.kernel)).isdisjoint(_array_inputs(case))


def test_where_the_resolver_cannot_follow_the_generated_code_decides() -> None:
    case = _case("function argument")
    assert "x" in _writes.writes(case.kernel)  # a callee it cannot resolve: in doubt, written
    assert "x" not in _writes.generated_writes(case.kernel)
    assert _writes.written_inputs(case.kernel, ("x",)) == ()


@pytest.mark.parametrize("jit", [False, True], ids=["eager", "jit"])
@pytest.mark.parametrize("name", list(CASES))
def test_accepted_with_the_values_of_wp_launch(name: str, jit: bool) -> None:
    case = _case(name)
    names = [p for p, _ in _warp_kernels.kernel_params(case.kernel)][-len(case.outputs) :]
    dims = {p: (n,) for p, n in zip(names, case.outputs, strict=True)}
    module = jax_kernel(case.kernel, num_outputs=len(case.outputs), launch_dims=case.dims, output_dims=dims)
    values = [_jax_value(v) for v in case.inputs]
    arrays = [i for i, v in enumerate(case.inputs) if isinstance(v, np.ndarray)]

    def call(*given: Any) -> Any:  # the arrays traced, the other values (ints, a struct) static
        args = list(values)
        for i, a in zip(arrays, given, strict=True):
            args[i] = a
        return module(*args)

    got = (jax.jit(call) if jit else call)(*(values[i] for i in arrays))
    for g, expected in zip(got, _warp_launch(case), strict=True):
        np.testing.assert_array_equal(np.asarray(g), expected)
    for v, before in zip(values, case.inputs, strict=True):
        if isinstance(before, np.ndarray):
            np.testing.assert_array_equal(np.asarray(v), before)  # the caller's input is as it was


@wp.struct
class _Holder:
    arr: wp.array(dtype=float)


def test_an_array_of_structs_is_judged_by_the_resolver_too() -> None:
    # The generated code follows the array's own pointer, not those its elements' array fields hold: a store through
    # one (``args[0].arr[i] = ...``) is seen by the resolver alone, and still counts
    def store_through_element(args: wp.array(dtype=_Holder), y: wp.array(dtype=float)):
        i = wp.tid()
        s = args[0]
        s.arr[i] = 1.0
        y[i] = 1.0

    kernel = wp.kernel(module="unique")(store_through_element)
    assert "args" not in _writes.generated_writes(kernel)
    assert _writes.written_inputs(kernel, ("args",)) == ("args",)
