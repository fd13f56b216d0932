"""Names resolved as Warp resolves them, and the branches Warp folds (`jarp.warp._plan._analysis._names`)."""

from __future__ import annotations

import ast

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_kernel, list_plans
from jarp.warp._plan._analysis import _names
from jarp.warp._upstream import _warp_codegen
from tests.support import kernels_writes as kw
from tests.support import kernels_writes_helpers as helpers
from tests.support.lowered import plan_handles

FLAG = True
COUNT = 3
NOT_A_NUMBER = "text"


def _expr(text: str) -> ast.expr:
    return ast.parse(text, mode="eval").body


def _here() -> None:
    pass


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("True", True),
        ("FLAG", True),
        ("not FLAG", False),
        ("FLAG and COUNT > 2", True),
        ("COUNT == 4 or not FLAG", False),
        ("np.float32(1.0)", _names.UNKNOWN),  # a call is not evaluated
        ("NOT_A_NUMBER", _names.UNKNOWN),  # only numbers and bools
        ("local", _names.UNKNOWN),  # bound in the function
        ("flag", False),  # a parameter the call being followed passes a constant
    ],
)
def test_constant(text: str, value: object) -> None:
    got = _names.constant(_here, _expr(text), frozenset({"local", "flag"}), {"flag": False})
    assert got is value if value is _names.UNKNOWN else got == value


def test_resolve_follows_closures_globals_warp_and_builtins() -> None:
    captured = helpers.bump

    def f() -> None:
        captured  # noqa: B018

    assert _names.resolve(f, "captured") is helpers.bump
    assert _names.resolve(f, "FLAG") is True
    assert _names.resolve(f, "atomic_add") is wp.atomic_add
    assert _names.resolve(f, "len") is len
    assert _names.resolve(f, "no_such_name") is _names.MISSING
    assert _names.resolve_path(f, "helpers.bump") is helpers.bump


def test_a_bare_name_that_is_no_warp_builtin_is_no_builtin() -> None:
    call = _expr("tid()")
    assert _names.builtin_key("tid", _names.MISSING, _here) == "tid"
    assert _names.builtin_key("no_such_builtin", _names.MISSING, _here) is None
    assert isinstance(call, ast.Call)


def test_compiled_source_folds_what_warp_folds() -> None:
    for factory, store in ((kw.make_variant, "vectors[i]"), (kw.make_static_variant, "vectors[i]")):
        kept, dropped = factory(True), factory(False)
        _warp_codegen.array_access(dropped)  # Warp's hash pass substitutes wp.static() values
        _warp_codegen.array_access(kept)
        assert store in _names.compiled_source(kept)
        assert store not in _names.compiled_source(dropped)
        assert "y[i] = x[i] + 1.0" in _names.compiled_source(dropped)


def test_a_folded_branch_does_not_bound_the_launch() -> None:
    # w is shorter than the launch: indexing it on every thread would be refused, but Warp compiles that
    # branch only in the weighted variant
    x, w = jnp.arange(6.0, dtype=jnp.float32), jnp.ones(2, jnp.float32)
    (y,) = jax_kernel(kw.make_extent_variant(False))(x, w)
    np.testing.assert_array_equal(y, np.arange(6.0))
    with pytest.raises(ValueError, match=r"indexes w with wp\.tid"):
        jax_kernel(kw.make_extent_variant(True))(x, w)


def _zero_results(kernel: wp.Kernel, x: jax.Array) -> tuple[int, ...]:
    module = jax_kernel(kernel, num_outputs=2, module_preload_mode=wp.JaxModulePreloadMode.NONE)
    lowered = jax.jit(lambda x: module(x)).trace(x).lower()  # holds its plan while it lives
    handles = plan_handles(lowered.as_text())
    (info,) = [i for i in list_plans() if i.handle in handles]
    return info.zero_results


def test_a_folded_store_counts_for_the_zero_fill() -> None:
    # with num_outputs=2, `vectors` and `y` are outputs: the reading variant never writes `vectors`, so it keeps
    # its fill; `y` is overwritten at the thread index on every thread in both
    x = jnp.arange(4.0, dtype=jnp.float32)
    assert _zero_results(kw.make_variant(False), x) == (0,)
    # in the writing variant the folded store is top-level code: both outputs are overwritten, no fill
    assert _zero_results(kw.make_variant(True), x) == ()


def test_an_overwrite_warp_folds_away_does_not_block_the_adjoint() -> None:
    # enable_backward refuses in-out arguments the kernel overwrites; only the overwriting variant compiles one
    jax_kernel(kw.make_accumulator(False), in_out_argnames=("acc",), enable_backward=True)
    with pytest.raises(ValueError, match=r"in_out_argnames \['acc'\] are overwritten"):
        jax_kernel(kw.make_accumulator(True), in_out_argnames=("acc",), enable_backward=True)
