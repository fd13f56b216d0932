"""Rebuilt modules compare equal: user callables stored in a module are compared by value where they can be.

A model that builds its jarp modules afresh (each training step, each solver call) hands ``eqx.filter_jit`` a new
module every time; it must not retrace when nothing changed. Module-level functions compare by identity, which is
stable; closures and lambdas made inside a function compare by code and captured values
(`jarp.warp._module._value_callables.value_callable`), partials by function and arguments. A closure that captures something jarp
cannot compare (an array, a list) retraces at every rebuild, and the second build warns once with the fix.
"""

from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._module import _option_warnings, _value_callables
from jarp.warp._module._value_callables import value_callable
from tests.support import kernels as k
from tests.support import kernels64 as k64
from tests.support import kernels_corner_cases as kr
from tests.support.retrace import X, count_traces


def _factory_closure(scale: int) -> Any:
    def factory(a_dtype: Any, b_dtype: Any) -> list[Any]:  # captures `scale`, a hashable int
        assert scale > 0
        return k64.generic_add_arg_types_list(a_dtype, b_dtype)

    return factory


def test_module_level_factory_traces_once() -> None:
    assert (
        count_traces(lambda: jax_kernel(k64.generic_add_kernel, arg_types_factory=k64.generic_add_arg_types_list)) == 1
    )


def test_closure_factory_over_hashable_values_traces_once() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # and no rebuild warning
        assert count_traces(lambda: jax_kernel(k64.generic_add_kernel, arg_types_factory=_factory_closure(2))) == 1
        # A lambda made afresh each time, capturing nothing.
        assert (
            count_traces(
                lambda: jax_kernel(
                    k64.generic_add_kernel, arg_types_factory=lambda a, b: k64.generic_add_arg_types_list(a, b)
                )
            )
            == 1
        )


def test_partial_factory_traces_once() -> None:
    def build() -> Any:
        factory = functools.partial(k64.generic_add_arg_types_list)
        return jax_kernel(k64.generic_add_kernel, arg_types_factory=factory)

    assert count_traces(build) == 1


def test_closures_with_other_captured_values_differ() -> None:
    assert value_callable(_factory_closure(2)) == value_callable(_factory_closure(2))
    assert value_callable(_factory_closure(2)) != value_callable(_factory_closure(3))
    assert hash(value_callable(_factory_closure(2))) == hash(value_callable(_factory_closure(2)))
    f = value_callable(_factory_closure(2))
    assert f.__qualname__.endswith("_factory_closure.<locals>.factory")
    assert [t.dtype for t in f(wp.float32, wp.float64)] == [wp.float32, wp.float64, wp.float32]  # calls through


def test_unhashable_closure_warns_once_on_rebuild_and_says_the_fix(monkeypatch: pytest.MonkeyPatch) -> None:
    # The warning is once per process and option: start from a process that has not warned yet.
    monkeypatch.setattr(_option_warnings, "_warned", set())
    monkeypatch.setattr(_value_callables, "_nested_seen", {})

    def build() -> Any:
        captured = [k64.generic_add_arg_types_list]  # a list: not comparable by value

        def factory(a_dtype: Any, b_dtype: Any) -> list[Any]:
            return captured[0](a_dtype, b_dtype)

        return jax_kernel(k64.generic_add_kernel, arg_types_factory=factory)

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert count_traces(build) == 3  # every rebuild retraces: what the warning is about
    messages = [str(w.message) for w in caught if "arg_types_factory" in str(w.message)]
    assert len(messages) == 1, messages
    assert "retrace at every rebuild" in messages[0]
    assert "module level" in messages[0]
    assert "functools.partial" in messages[0]


def test_jvp_rule_and_callable_function_closures_compare_by_value() -> None:
    def rule() -> Any:
        return lambda x, t: (t,)

    a = jax_kernel(k.triple_kernel, jvp=rule())
    b = jax_kernel(k.triple_kernel, jvp=rule())
    assert a == b
    assert hash(a) == hash(b)

    def func_closure(scale: float) -> Any:
        def double(x: wp.array(dtype=float), y: wp.array(dtype=float)) -> None:
            wp.launch(k.scale_kernel, dim=x.shape, inputs=[x, scale], outputs=[y])

        return double

    f, g = jax_callable(func_closure(2.0)), jax_callable(func_closure(2.0))
    assert f == g
    assert jax_callable(func_closure(3.0)) != f
    np.testing.assert_allclose(f(X)[0], 2 * np.asarray(X))


@pytest.mark.parametrize("value", [None, k64.generic_add_arg_types_list, jax_kernel(k.triple_kernel)])
def test_values_that_compare_already_are_kept(value: Any) -> None:
    assert value_callable(value) is value


# -- values that compare equal but behave differently; copies ----------------------------------------------------------


def _scaled_by(c: Any) -> Any:
    return lambda x: x * c


@pytest.mark.parametrize(("a", "b"), [(1, 1.0), (1, True), (0.0, -0.0)])
def test_closures_over_equal_but_different_values_differ(a: Any, b: Any) -> None:
    # 1 == 1.0 == True and 0.0 == -0.0, yet x // c, jnp.full(n, c) or 1 / c differ: not the same function.
    assert value_callable(_scaled_by(a)) != value_callable(_scaled_by(b))


def test_closures_over_nan_compare_equal() -> None:
    assert value_callable(_scaled_by(float("nan"))) == value_callable(_scaled_by(float("nan")))


def test_value_functions_copy_and_deepcopy() -> None:
    import copy

    f = value_callable(_scaled_by(2.0))
    assert copy.copy(f) == f
    assert copy.deepcopy(f) == f  # both recursed without end (an unset slot looked up through __getattr__)
    assert copy.deepcopy(f)(3.0) == 6.0


def test_callable_closures_with_other_annotations_differ() -> None:
    # `dtype` is not captured (annotations are evaluated where `f` is defined): the code, globals and closure
    # of both functions are equal, and jax_callable handed back the float32 module for the float16 function.
    f32, f16 = jax_callable(kr.callable_of(wp.float32)), jax_callable(kr.callable_of(wp.float16))
    assert f32 != f16
    assert [s.dtype for s in f16.input_specs()] == [wp.float16]
    assert jax_callable(kr.callable_of(wp.float32)) == f32  # rebuilt equal: still compared by value
