"""The cache table: every cache jarp keeps is registered in one place and emptied by `jarp.warp.clear_caches`.

Every ``functools.lru_cache`` in jarp's source is in the table (found by reading the source, so a new one that is
not registered fails here); clearing empties the analyses' caches and the weak caches kept on kernels; a jitted
program compiled before the clear keeps working, and a new call after it recomputes what it needs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import warp as wp

import jarp.warp
from jarp.warp._plan import _cache_table, _weakcache
from jarp.warp._plan._analysis import _generated

PACKAGE = Path(jarp.warp.__file__).parent.parent


@wp.kernel
def _double(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = 2.0 * x[i]


def _lru_cached_functions() -> set[str]:
    """``module.qualname`` of every function jarp decorates with ``functools.lru_cache`` or ``functools.cache``."""
    found = set()
    for path in PACKAGE.rglob("*.py"):
        module = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef):
                continue
            for deco in node.decorator_list:
                target = deco.func if isinstance(deco, ast.Call) else deco
                if isinstance(target, ast.Attribute) and target.attr in ("lru_cache", "cache"):
                    found.add(f"{module}.{node.name}")
    return found


# Warp's vector and matrix types that `jarp.warp.types` interns: identity matters, so they are not a cache.
NOT_CACHES = {"jarp.warp.types._cached_vector", "jarp.warp.types._cached_matrix"}


def _lru_caches_made_by_calls() -> list[str]:
    """``path:line`` of every ``lru_cache(...)(function)`` jarp makes by calling (not decorating)."""
    found = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Call):
                target = node.func.func
                if isinstance(target, ast.Attribute) and target.attr in ("lru_cache", "cache"):
                    found.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return found


def test_lru_caches_made_by_calls_are_in_the_table() -> None:
    # the energies memoise one custom_jvp function per parameter layout, per derivative kind
    assert [site.partition(":")[0] for site in _lru_caches_made_by_calls()] == ["warp/_energy.py"]
    assert {"jarp.warp._energy._energy_rule", "jarp.warp._energy._gradient_rule"} <= set(_cache_table.names())


def test_every_lru_cache_in_jarp_is_in_the_table() -> None:
    found = _lru_cached_functions()
    assert "jarp.warp._plan._analysis._generated.write_sites" in found  # the scan sees them
    assert found - NOT_CACHES <= set(_cache_table.names())


def test_clear_caches_empties_the_analyses_and_the_weak_caches() -> None:
    module = jarp.warp.jax_kernel(_double)
    module(jnp.arange(3.0))
    assert _generated.write_sites.cache_info().currsize > 0
    kept = _weakcache.cache_for(_double, "probe")
    kept["x"] = 1
    jarp.warp.clear_caches()
    assert _generated.write_sites.cache_info().currsize == 0
    assert "x" not in _weakcache.cache_for(_double, "probe")


def test_programs_compiled_before_a_clear_keep_working() -> None:
    module = jarp.warp.jax_kernel(_double)
    f = jax.jit(lambda x: module(x)[0])
    x = jnp.arange(4.0)
    np.testing.assert_allclose(f(x), 2 * np.arange(4.0))
    jarp.warp.clear_caches()
    np.testing.assert_allclose(f(x), 2 * np.arange(4.0))
    np.testing.assert_allclose(jax.jit(lambda x: module(x)[0] + 1)(x), 2 * np.arange(4.0) + 1)
    np.testing.assert_allclose(module(x)[0], 2 * np.arange(4.0))
