"""Generic targets: a ``JaxKernel``'s ``arg_types_factory`` overloads and a ``JaxCallable``'s ``generic=True`` factories.

Unit: target resolution for the argument dtypes (``JaxKernel._target_for``/``JaxCallable._target_for``): one Warp dtype
per runtime positional argument, the factory called once per dtype signature (cached), float32 and int32 signatures
in the default process and float64 ones in the ``x64`` process (``JAX_ENABLE_X64=1 ... -m x64``), under eager calls,
``jit``, ``vmap`` and ``grad``. A new overload rebuilds the kernel's Warp module; earlier launches must stay valid
(checked in a subprocess, since a dangling entry point would crash the interpreter).

The generic kernels and factories come from ``tests/support/kernels64.py``; values are checked against NumPy.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable, jax_kernel
from tests.support import forked
from tests.support import kernels64 as k64
from tests.support.paths import child_environment

# ======================================================================================================================
# arg_types_factory (JaxKernel)
# ======================================================================================================================


def _counting(factory):
    calls = []

    def counted(*dtypes):
        calls.append(dtypes)
        return factory(*dtypes)

    return counted, calls


@pytest.mark.parametrize(
    "factory", [k64.generic_add_arg_types_list, k64.generic_add_arg_types_dict], ids=["list", "dict"]
)
def test_arg_types_factory_float32_and_cached(factory):
    counted, calls = _counting(factory)
    m = jax_kernel(k64.generic_add_kernel, arg_types_factory=counted)
    a = np.arange(5, dtype=np.float32)
    b = np.full(5, 0.25, np.float32)
    for _ in range(3):
        (out,) = m(jnp.asarray(a), jnp.asarray(b))
    (out_jit,) = jax.jit(lambda a, b: m(a, b))(jnp.asarray(a), jnp.asarray(b))
    (out_vmap,) = jax.vmap(m)(jnp.asarray(np.stack([a, b])), jnp.asarray(np.stack([b, a])))
    assert out.dtype == jnp.float32
    np.testing.assert_array_equal(out, a + b)
    np.testing.assert_array_equal(out_jit, a + b)
    np.testing.assert_array_equal(out_vmap, np.stack([a + b, b + a]))
    assert calls == [(wp.float32, wp.float32)]


def test_arg_types_factory_second_dtype_signature():
    counted, calls = _counting(k64.generic_add_arg_types_list)
    m = jax_kernel(k64.generic_add_kernel, arg_types_factory=counted)
    (f,) = m(jnp.arange(4, dtype=jnp.float32), jnp.ones(4, dtype=jnp.float32))
    (i,) = m(jnp.arange(4, dtype=jnp.int32), jnp.full(4, 7, dtype=jnp.int32))
    (f2,) = m(jnp.arange(4, dtype=jnp.float32), jnp.ones(4, dtype=jnp.float32))
    assert (f.dtype, i.dtype) == (jnp.float32, jnp.int32)
    np.testing.assert_array_equal(f, np.arange(4) + 1.0)
    np.testing.assert_array_equal(f2, np.arange(4) + 1.0)
    np.testing.assert_array_equal(i, np.arange(4) + 7)
    assert calls == [(wp.float32, wp.float32), (wp.int32, wp.int32)]


def test_arg_types_factory_python_float_scalar_is_float32():
    counted, calls = _counting(k64.generic_scale_arg_types)
    m = jax_kernel(k64.generic_scale_kernel, arg_types_factory=counted, enable_backward=True)
    a = np.arange(6, dtype=np.float32)
    (out,) = jax.jit(lambda a: m(a, 2.5))(jnp.asarray(a))
    np.testing.assert_array_equal(out, 2.5 * a)
    grad = jax.grad(lambda a: jnp.sum(m(a, 2.5)[0]))(jnp.asarray(a))
    np.testing.assert_array_equal(grad, np.full(6, 2.5, np.float32))
    assert set(calls) == {(wp.float32, wp.float32)}


@pytest.mark.x64
def test_arg_types_factory_float64():
    counted, calls = _counting(k64.generic_add_arg_types_dict)
    m = jax_kernel(k64.generic_add_kernel, arg_types_factory=counted)
    a = np.arange(5, dtype=np.float64) / 3.0
    b = np.full(5, 1e-12, np.float64)
    for _ in range(2):
        (out,) = m(jnp.asarray(a), jnp.asarray(b))
    assert out.dtype == jnp.float64
    np.testing.assert_array_equal(out, a + b)  # exact in float64, not representable in float32
    assert calls == [(wp.float64, wp.float64)]

    counted, calls = _counting(k64.generic_scale_arg_types)
    scale = jax_kernel(k64.generic_scale_kernel, arg_types_factory=counted)
    (out,) = jax.jit(lambda a: scale(a, 1.0 / 3.0))(jnp.asarray(a))
    assert out.dtype == jnp.float64
    np.testing.assert_allclose(out, a / 3.0, rtol=1e-15)
    # a float32 array with a Python float (float64 under x64): one dtype per runtime positional argument
    (out32,) = scale(jnp.arange(3, dtype=jnp.float32), 2.0)
    assert out32.dtype == jnp.float32
    np.testing.assert_array_equal(out32, 2.0 * np.arange(3, dtype=np.float32))
    assert calls == [(wp.float64, wp.float64), (wp.float32, wp.float64)]


# ======================================================================================================================
# generic=True (JaxCallable)
# ======================================================================================================================


def test_generic_factory_float32_python_scalar_and_cached():
    counted, calls = _counting(k64.generic_scale_func_factory)
    m = jax_callable(counted, generic=True)
    x = np.arange(6, dtype=np.float32)
    for _ in range(3):
        (y,) = m(jnp.asarray(x), 2.5)
    (y_jit,) = jax.jit(lambda x: m(x, 2.5))(jnp.asarray(x))
    (y_vmap,) = jax.vmap(lambda x: m(x, 2.5))(jnp.asarray(np.stack([x, -x])))
    assert y.dtype == jnp.float32
    np.testing.assert_array_equal(y, 2.5 * x)
    np.testing.assert_array_equal(y_jit, 2.5 * x)
    np.testing.assert_array_equal(y_vmap, np.stack([2.5 * x, -2.5 * x]))
    assert calls == [(wp.float32, wp.float32)]


def test_generic_factory_two_signatures():
    counted, calls = _counting(k64.generic_add_func_factory)
    m = jax_callable(counted, generic=True)
    (f,) = m(jnp.arange(4, dtype=jnp.float32), jnp.full(4, 0.5, dtype=jnp.float32))
    (i,) = m(jnp.arange(4, dtype=jnp.int32), jnp.full(4, 3, dtype=jnp.int32))
    (f2,) = jax.jit(m)(jnp.arange(4, dtype=jnp.float32), jnp.full(4, 0.5, dtype=jnp.float32))
    assert (f.dtype, i.dtype) == (jnp.float32, jnp.int32)
    np.testing.assert_array_equal(f, np.arange(4) + 0.5)
    np.testing.assert_array_equal(f2, np.arange(4) + 0.5)
    np.testing.assert_array_equal(i, np.arange(4) + 3)
    assert calls == [(wp.float32, wp.float32), (wp.int32, wp.int32)]


@pytest.mark.x64
def test_generic_factory_float64():
    counted, calls = _counting(k64.generic_scale_func_factory)
    m = jax_callable(counted, generic=True)
    x = np.arange(5, dtype=np.float64) / 7.0
    (y,) = m(jnp.asarray(x), 1.0 / 3.0)
    assert y.dtype == jnp.float64
    np.testing.assert_allclose(y, x / 3.0, rtol=1e-15)
    (y32,) = jax.jit(lambda x: m(x, 2.0))(jnp.arange(3, dtype=jnp.float32))
    assert y32.dtype == jnp.float32
    np.testing.assert_array_equal(y32, 2.0 * np.arange(3))
    assert calls == [(wp.float64, wp.float64), (wp.float32, wp.float64)]


# ======================================================================================================================
# A new overload rebuilds the kernel's Warp module: earlier launches must stay valid (run in a subprocess, since a
# dangling entry point crashes the interpreter)
# ======================================================================================================================

_REBUILD_SCRIPT = """
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import warp as wp

from jarp.warp import jax_kernel


@wp.kernel
def fresh_generic_add(a: wp.array(dtype=Any), b: wp.array(dtype=Any), out: wp.array(dtype=Any)):
    i = wp.tid()
    out[i] = a[i] + b[i]


@wp.kernel
def fresh_triple(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = 3.0 * a[i]


def arg_types(a_dtype, b_dtype):
    return [wp.array(dtype=a_dtype), wp.array(dtype=b_dtype), wp.array(dtype=a_dtype)]


add = jax_kernel(fresh_generic_add, arg_types_factory=arg_types)
triple = jax_kernel(fresh_triple)
x = jnp.arange(4, dtype=jnp.float32)
jit_add = jax.jit(lambda a, b: add(a, b)[0])
(t1,) = triple(x)
f1 = jit_add(x, x)
(e1,) = add(x, x)
# a new dtype signature adds an overload: Warp rebuilds (and unloads the old build of) this Python module's Warp module
(i1,) = add(jnp.arange(4, dtype=jnp.int32), jnp.ones(4, dtype=jnp.int32))
(t2,) = triple(x)  # a plain kernel of the same Warp module
f2 = jit_add(x, x)  # the first overload, through a cached jit executable
(e2,) = add(x, x)  # the first overload, eagerly
np.testing.assert_array_equal(i1, np.arange(4) + 1)
np.testing.assert_array_equal(t2, 3.0 * np.arange(4))
np.testing.assert_array_equal(f2, 2.0 * np.arange(4))
np.testing.assert_array_equal(e2, 2.0 * np.arange(4))
print("REBUILD-OK")
"""


def test_new_overload_rebuilding_the_warp_module_keeps_earlier_launches_valid(tmp_path):
    script = tmp_path / "fresh_module_kernels.py"
    script.write_text(_REBUILD_SCRIPT)
    env = child_environment()
    env.pop("JAX_ENABLE_X64", None)
    proc = forked.run([sys.executable, str(script)], cwd=tmp_path, env=env, timeout=600)
    report = (
        f"exit code {proc.returncode} (-11 = segfault)\nstdout:\n{proc.stdout[-2000:]}\nstderr:\n{proc.stderr[-4000:]}"
    )
    assert proc.returncode == 0, report
    assert "REBUILD-OK" in proc.stdout, report
