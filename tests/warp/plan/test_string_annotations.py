"""Kernels and callables from a module with ``from __future__ import annotations`` (see ``string_annotations.py``)."""

from __future__ import annotations

import sys
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._plan import _annotations
from tests.support import kernels as k
from tests.support import string_annotations as sa


def _vectors(n: int = 6, dtype: Any = jnp.float32) -> jax.Array:
    return jnp.asarray(np.random.default_rng(0).standard_normal((n, 3)), dtype)


def test_module_level_function_reads_annotations() -> None:
    params = _annotations.function_params(k.scale_func)
    assert [name for name, _ in params] == ["a", "s", "out"]
    assert params[1][1] is float
    assert wp.types.is_array(params[0][1])


def test_string_annotations_naming_globals_resolve() -> None:
    assert all(isinstance(t, str) for t in sa.scale_func.__annotations__.values())
    params = dict(_annotations.function_params(sa.scale_func))
    assert params["s"] is wp.float32
    assert params["a"].dtype is wp.float32
    a = jnp.arange(5, dtype=jnp.float32)
    (out,) = jax.jit(jax_callable(sa.scale_func), static_argnums=1)(a, 2.5)
    np.testing.assert_allclose(out, 2.5 * np.arange(5))


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
def test_generic_factory_with_aliases_only_in_annotations(dtype: Any) -> None:
    v = _vectors(dtype=dtype)
    m = jax_callable(sa.norm_factory, generic=True)
    (out,) = m(v)
    assert out.dtype == dtype
    tol = 1e-6 if dtype == jnp.float32 else 4e-3
    np.testing.assert_allclose(np.asarray(out, np.float64), jnp.linalg.norm(v.astype(jnp.float32), axis=-1), rtol=tol)
    (batched,) = jax.vmap(m)(jnp.stack([v, 2 * v]))
    np.testing.assert_allclose(batched[1], 2 * np.asarray(out), rtol=tol)


def test_generic_factory_delegating_to_a_helper() -> None:
    # the locals read are those of the frame that defined the returned function, not the factory's
    v = _vectors(n=4)
    (out,) = jax_callable(lambda dtype: sa.norm_factory(dtype), generic=True)(v)
    np.testing.assert_allclose(out, jnp.linalg.norm(v, axis=-1), rtol=1e-6)


def test_generic_factory_with_closure_aliases() -> None:
    a = jnp.arange(4, dtype=jnp.float32)
    (out,) = jax_callable(sa.scale_factory, generic=True)(a, 3.0)
    np.testing.assert_allclose(out, 3.0 * np.arange(4))


def test_closure_of_a_nested_function_resolves() -> None:
    func = sa.make_closure_callable(wp.float32)
    v = _vectors()
    (out,) = jax_callable(func)(v)
    np.testing.assert_allclose(out, jnp.linalg.norm(v, axis=-1), rtol=1e-6)


def test_undefined_name_in_a_factory_is_named() -> None:
    m = jax_callable(sa.typo_factory, generic=True)
    with pytest.raises(TypeError, match=r"annotation 'wp.array\(dtype=vec4\)' of parameter 'v' of .*typo.*'vec4'") as e:
        m(_vectors())
    assert "locals of the generic factory" in str(e.value)


def test_local_alias_missing_from_a_closure_is_named() -> None:
    func = sa.make_nested_callable(wp.float32)
    with pytest.raises(TypeError, match=r"parameter 'v' of 'make_nested_callable.<locals>.nested'.*'vec3'") as e:
        jax_callable(func)
    assert "not in its closure" in str(e.value)
    assert "generic" in str(e.value)  # points at the fix


def test_other_annotation_errors_are_named() -> None:
    with pytest.raises(TypeError, match=r"parameter 'a' of 'broken_expression': ZeroDivisionError"):
        jax_callable(sa.broken_expression)


def test_factory_locals_are_not_read_under_another_profiler() -> None:
    calls: list[str] = []

    def profiler(frame: Any, event: str, arg: Any) -> None:
        calls.append(event)

    m = jax_callable(lambda dtype: sa.norm_factory(dtype), generic=True)  # a new factory: nothing cached
    sys.setprofile(profiler)
    try:
        with pytest.raises(TypeError, match="'vec3' is not defined"):
            m(_vectors(n=3))
    finally:
        sys.setprofile(None)
    assert calls  # the user's profiler stayed installed throughout


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.float16])
def test_kernel_with_string_annotations_and_arg_types_factory(dtype: Any) -> None:
    assert all(isinstance(t, str) for t in sa.scale_kernel.func.__annotations__.values())
    a = jnp.arange(6, dtype=dtype)
    (out,) = jax.jit(jax_kernel(sa.scale_kernel, arg_types_factory=sa.scale_arg_types), static_argnums=1)(a, 0.5)
    assert out.dtype == dtype
    np.testing.assert_allclose(np.asarray(out, np.float64), 0.5 * np.arange(6))
