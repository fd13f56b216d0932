"""No stale state after an error: a failed build is retried after a fix.

Unit: the caches keyed on user kernels and functions (``_weakcache``: signatures, overloads, runtime-scalar variants,
preloads, generic callables' specialisations) and the eager executables (``_eager._Executables``), which hold their
kernels weakly and never cache a failure. A kernel module is redefined in place, as a notebook re-run does.
"""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_kernel

_MODULE = """
import warp as wp


@wp.kernel
def untouched(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] + 1.0


@wp.kernel
def edited(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * {expr}
"""


@pytest.fixture
def notebook(tmp_path: Path) -> Callable[[str], ModuleType]:
    """Write and (re)load a module the way a notebook re-run redefines its kernels: same name, same namespace."""
    name = f"jarp_lifetimes_{uuid.uuid4().hex}"
    path = tmp_path / f"{name}.py"
    sys.path.insert(0, str(tmp_path))
    loaded: list[ModuleType] = []

    def define(expr: str) -> ModuleType:
        path.write_text(_MODULE.format(expr=expr))
        importlib.invalidate_caches()
        if not loaded:
            loaded.append(importlib.import_module(name))
        else:
            importlib.reload(loaded[0])  # the source's size changes, so its cached bytecode is not reused
        return loaded[0]

    yield define
    sys.path.remove(str(tmp_path))
    sys.modules.pop(name, None)


def _codegen_error() -> tuple[type[Exception], ...]:
    """Warp's code-generation errors (an undefined name raises the ``KeyError`` one)."""
    from warp._src.codegen import WarpCodegenError, WarpCodegenKeyError

    return (WarpCodegenError, WarpCodegenKeyError)


# ======================================================================================================================
# A failed build is retried after the fix
# ======================================================================================================================


def test_fixed_kernel_and_untouched_kernels_of_its_module_work_after_a_codegen_error(notebook) -> None:
    x = jnp.arange(3.0, dtype=jnp.float32)
    module = notebook("undefined_name")
    with pytest.raises(_codegen_error(), match="undefined_name"):
        jax_kernel(module.edited)(x)
    module = notebook("2.0")  # the user fixes the cell and runs it again
    (fixed,) = jax_kernel(module.edited)(x)
    np.testing.assert_array_equal(fixed, np.arange(3.0) * 2)
    (other,) = jax_kernel(module.untouched)(x)
    np.testing.assert_array_equal(other, np.arange(3.0) + 1)


def test_fixed_kernel_works_under_jit_after_a_codegen_error(notebook) -> None:
    x = jnp.arange(3.0, dtype=jnp.float32)
    module = notebook("undefined_name")
    with pytest.raises(_codegen_error()):
        jax.jit(lambda x: jax_kernel(module.edited)(x)[0])(x)
    module = notebook("3.0")
    out = jax.jit(lambda x: jax_kernel(module.edited)(x)[0])(x)
    np.testing.assert_array_equal(out, np.arange(3.0) * 3)


def test_generic_factory_that_failed_is_called_again() -> None:
    calls = []

    def factory(dtype):
        calls.append(dtype)
        if len(calls) == 1:
            raise RuntimeError("first try fails")
        return [wp.array(dtype=dtype), wp.array(dtype=dtype), wp.array(dtype=dtype)]

    from tests.support import kernels64 as k64

    m = jax_kernel(k64.generic_add_kernel, arg_types_factory=lambda a, b: factory(a))
    a = jnp.arange(4.0, dtype=jnp.float32)
    with pytest.raises(RuntimeError, match="first try fails"):
        m(a, a)
    (out,) = m(a, a)  # failures are not cached
    np.testing.assert_array_equal(out, np.arange(4.0) * 2)
    m(a, a)
    assert calls == [wp.float32, wp.float32]  # successes are


# ======================================================================================================================
# Dropped kernels are released
# ======================================================================================================================
