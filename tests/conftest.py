"""Strict JAX settings and the float32/float64 split for the whole suite.

The suite runs in two processes: the default one (float32, ``jax_enable_x64``
off) and one with ``JAX_ENABLE_X64=1`` that runs only the tests marked
``x64``. Precision is a process-wide JAX flag, so mixing both in one process
would let one test's precision leak into another's traces.
"""

from __future__ import annotations

import jax
import pytest

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")
jax.config.update("jax_debug_key_reuse", True)

# The hostile-input tests' checks live in a support module: rewrite its asserts as pytest rewrites the tests' own.
pytest.register_assert_rewrite("tests.warp.support.hostile")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "x64: runs only in the JAX_ENABLE_X64=1 process (float64 tests)")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU visible to Warp and JAX; skipped elsewhere")
    config.addinivalue_line(
        "markers", "launch_paths: runs again with JARP_LAUNCH=python (the Python launch path) in `nox -s tests`"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    x64 = bool(jax.config.jax_enable_x64)
    selected, deselected = [], []
    for item in items:
        (selected if (item.get_closest_marker("x64") is not None) == x64 else deselected).append(item)
    if deselected:
        config.hook.pytest_deselected(items=deselected)
        items[:] = selected
