"""Float64: runs only in the ``JAX_ENABLE_X64=1`` process (see tests/conftest.py).

Float64 kernels come from ``tests/support/kernels64.py``; gradients are checked with ``jax.test_util.check_grads`` at
float64 tolerances and against closed forms.
"""

from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from jax.test_util import check_grads

from jarp.warp import JaxKernel, jax_callable, jax_kernel
from tests.support import kernels as k
from tests.support import kernels64 as k64
from tests.support.kernels import ERRORS, N_SPRING, STIFFNESS, spring_data, spring_expected

pytestmark = pytest.mark.x64

GRAD = {"order": 1, "modes": ("rev",)}  # reverse mode only (Warp adjoints); default float64 tolerances


def _ab(n=8, seed=0):
    rng = np.random.default_rng(seed)
    return 0.5 + rng.random(n), rng.random(n) - 0.5


def test_x64_is_on():
    assert jax.config.jax_enable_x64
    assert jnp.asarray(1.0).dtype == jnp.float64


def test_triple64_values_eager_and_jit():
    m = jax_kernel(k64.triple64_kernel)
    x = np.arange(7, dtype=np.float64) / 3.0 + 1e-12
    for (y,) in (m(jnp.asarray(x)), jax.jit(m)(jnp.asarray(x)), m(x)):
        assert y.dtype == jnp.float64
        np.testing.assert_allclose(y, 3.0 * x, rtol=1e-15)
        assert not np.allclose(np.asarray(y, np.float32).astype(np.float64), 3.0 * x, rtol=1e-12, atol=0)


def test_scale_sum_square64_grads():
    m = jax_kernel(k64.scale_sum_square64, enable_backward=True)
    a, b = _ab()
    s = 1.25

    @partial(jax.jit, static_argnames=["s"])
    def loss(a, b, s):
        (out,) = m(a, b, s)
        return jnp.sum(out)

    da, db = jax.grad(loss, argnums=(0, 1))(jnp.asarray(a), jnp.asarray(b), s)
    inner = a * s + b
    assert da.dtype == jnp.float64
    np.testing.assert_allclose(loss(jnp.asarray(a), jnp.asarray(b), s), np.sum(inner**2), rtol=1e-14)
    np.testing.assert_allclose(da, 2.0 * inner * s, rtol=1e-14)
    np.testing.assert_allclose(db, 2.0 * inner, rtol=1e-14)
    check_grads(lambda a, b: m(a, b, s), (jnp.asarray(a), jnp.asarray(b)), **GRAD)


def test_multi_output64_grads():
    m = jax_kernel(k64.multi_output64, num_outputs=2, enable_backward=True)
    a, b = _ab(seed=1)
    da, db = jax.grad(lambda a, b: jnp.sum(sum(m(a, b, 2.0))), argnums=(0, 1))(jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_allclose(da, 2.0 * a + 2.0 * b, rtol=1e-14)
    np.testing.assert_allclose(db, 2.0 * a, rtol=1e-14)
    check_grads(lambda a, b: m(a, b, 2.0), (jnp.asarray(a), jnp.asarray(b)), **GRAD)


def test_scale_vec2d_grads():
    m = jax_kernel(k64.scale_vec2d, enable_backward=True)
    a = np.arange(10, dtype=np.float64).reshape((5, 2)) / 3.0
    (out,) = m(jnp.asarray(a), 3.0)
    assert out.shape == (5, 2)
    np.testing.assert_allclose(out, 3.0 * a, rtol=1e-15)
    (da,) = jax.grad(lambda a: jnp.sum(m(a, 3.0)[0]), argnums=(0,))(jnp.asarray(a))
    np.testing.assert_allclose(da, np.full((5, 2), 3.0))
    check_grads(lambda a: m(a, -0.5), (jnp.asarray(a),), **GRAD)


def test_sin_mul64_grads_tight():
    m = jax_kernel(k64.sin_mul64, enable_backward=True)
    a, b = _ab(seed=2)
    da, db = jax.jit(jax.grad(lambda a, b: jnp.sum(m(a, b)[0]), argnums=(0, 1)))(jnp.asarray(a), jnp.asarray(b))
    np.testing.assert_allclose(da, np.cos(a) * b, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(db, np.sin(a), rtol=1e-13)
    check_grads(lambda a, b: m(a, b), (jnp.asarray(a), jnp.asarray(b)), **GRAD)


def test_spring64_values_and_grads():
    m = jax_kernel(k64.spring64_kernel, num_outputs=2, enable_backward=True)
    p, w = spring_data(dtype=np.float64)
    energies, forces = m(jnp.asarray(p), jnp.asarray(w), STIFFNESS)
    exp_e, exp_f = spring_expected(p, w)
    assert (energies.dtype, forces.dtype) == (jnp.float64, jnp.float64)
    np.testing.assert_allclose(energies, exp_e, rtol=1e-14)
    np.testing.assert_allclose(forces, exp_f, rtol=1e-14)
    check_grads(lambda p, w: m(p, w, STIFFNESS), (jnp.asarray(p), jnp.asarray(w)), **GRAD)


def test_float64_vmap_default_is_per_batch():
    m = jax_kernel(k64.gather64_kernel)
    rng = np.random.default_rng(3)
    tables = rng.normal(size=(3, 5))
    idx = rng.integers(0, 5, size=(3, 7)).astype(np.int32)
    (out,) = jax.jit(jax.vmap(m))(jnp.asarray(idx), jnp.asarray(tables))
    assert out.dtype == jnp.float64
    np.testing.assert_array_equal(out, np.take_along_axis(tables, idx, axis=1))


def test_float64_vmap_of_grad():
    m = jax_kernel(k64.sin_mul64, enable_backward=True)
    rng = np.random.default_rng(4)
    A, Bm = rng.random((3, 6)), rng.random((3, 6))
    da = jax.vmap(jax.grad(lambda a, b: jnp.sum(m(a, b)[0])))(jnp.asarray(A), jnp.asarray(Bm))
    np.testing.assert_allclose(da, np.cos(A) * Bm, rtol=1e-13)


def test_float64_array_to_float32_kernel_names_argument():
    # with x64 on, a float64 JAX array is easy to make by accident
    m = jax_kernel(k.spring_kernel, num_outputs=2)
    p, w = spring_data()
    with pytest.raises(ERRORS, match="weights"):
        m(jnp.asarray(p), jnp.asarray(w, dtype=jnp.float64), STIFFNESS)
    with pytest.raises(ERRORS, match="positions"):
        jax.jit(lambda p, w: m(p, w, STIFFNESS))(jnp.asarray(p, dtype=jnp.float64), jnp.asarray(w))


def test_float32_kernel_still_works_under_x64():
    # float32 arrays and a Python float (float64 under x64) for a float32 scalar parameter
    m = jax_kernel(k.spring_kernel, num_outputs=2)
    p, w = spring_data()
    energies, forces = jax.jit(lambda p, w: m(p, w, STIFFNESS))(jnp.asarray(p), jnp.asarray(w))
    assert (energies.dtype, forces.dtype) == (jnp.float32, jnp.float32)
    exp_e, exp_f = spring_expected(p, w)
    np.testing.assert_allclose(energies, exp_e, rtol=1e-5)
    np.testing.assert_allclose(forces, exp_f, rtol=1e-5)


def test_generic_add_kernel_float64_and_float32_side_by_side():
    m = jax_kernel(k64.generic_add_kernel, arg_types_factory=k64.generic_add_arg_types_list)
    a64 = np.arange(4, dtype=np.float64) / 3.0
    (o64,) = m(jnp.asarray(a64), jnp.asarray(a64))
    (o32,) = m(jnp.asarray(a64, dtype=jnp.float32), jnp.asarray(a64, dtype=jnp.float32))
    assert (o64.dtype, o32.dtype) == (jnp.float64, jnp.float32)
    np.testing.assert_allclose(o64, 2.0 * a64, rtol=1e-15)
    np.testing.assert_allclose(o32, 2.0 * a64.astype(np.float32), rtol=1e-6)


def test_jax_callable_float64():
    m = jax_callable(k64.scale64_func)
    a = np.arange(5, dtype=np.float64) / 7.0
    (out,) = jax.jit(lambda a: m(a, 0.5))(jnp.asarray(a))
    assert out.dtype == jnp.float64
    np.testing.assert_allclose(out, (a * 1.5) ** 2, rtol=1e-14)


class Spring64Model(eqx.Module):
    weights: jax.Array
    spring: JaxKernel

    def __call__(self, positions):
        energies, _ = self.spring(positions, self.weights, STIFFNESS)
        return jnp.sum(energies)


def test_float64_model_grad_and_serialise(tmp_path):
    p, w = spring_data(dtype=np.float64)
    model = Spring64Model(jnp.asarray(w), jax_kernel(k64.spring64_kernel, num_outputs=2, enable_backward=True))
    grads = eqx.filter_jit(eqx.filter_grad(lambda m, p: m(p)))(model, jnp.asarray(p))
    assert grads.weights.dtype == jnp.float64
    np.testing.assert_allclose(grads.weights, 0.5 * STIFFNESS * np.sum(p * p, axis=1), rtol=1e-14)

    path = tmp_path / "model64.eqx"
    eqx.tree_serialise_leaves(path, model)
    like = Spring64Model(
        jnp.zeros(N_SPRING, dtype=jnp.float64), jax_kernel(k64.spring64_kernel, num_outputs=2, enable_backward=True)
    )
    loaded = eqx.tree_deserialise_leaves(path, like)
    assert loaded.weights.dtype == jnp.float64
    np.testing.assert_array_equal(loaded.weights, w)
    assert loaded.spring == model.spring


def test_types_floating_is_float64():
    from jarp.warp import types

    assert types.floating is wp.float64
