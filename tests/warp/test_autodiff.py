"""Reverse mode without holes: Warp's adjoint through jarp's bridge, checked against finite differences (float64)."""

from functools import partial

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jarp.warp import jax_callable, jax_kernel

from . import kernels_ad as K

pytestmark = pytest.mark.x64

rev = partial(check_grads, order=1, modes=["rev"], eps=1e-6, atol=1e-6, rtol=1e-6)


def _spring():
    m = jax_kernel(K.spring_energy64, enable_backward=True)
    x, edges, stiffness = K.spring_net()
    return m, jnp.asarray(x), jnp.asarray(edges), jnp.asarray(stiffness)


def test_spring_energy_value_and_grads_against_jnp():
    m, x, edges, stiffness = _spring()

    def energy(x, k, rest):
        return m(x, edges, k, rest, launch_dims=edges.shape[0], output_dims=1)[0][0]

    ref = partial(K.spring_energy_ref, edges=edges)
    np.testing.assert_allclose(energy(x, stiffness, 0.3), ref(x, stiffness=stiffness, rest=0.3), rtol=1e-12)
    gx, gk = jax.grad(energy, argnums=(0, 1))(x, stiffness, 0.3)
    rx, rk = jax.grad(lambda x, k: ref(x, stiffness=k, rest=0.3), argnums=(0, 1))(x, stiffness)
    np.testing.assert_allclose(gx, rx, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(gk, rk, rtol=1e-10, atol=1e-12)
    rev(lambda x, k: energy(x, k, 0.3), (x, stiffness))


def test_traced_scalar_value_grad_and_one_trace():
    m, x, edges, stiffness = _spring()

    @jax.jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def energy(x, rest):
        return m(x, edges, stiffness, rest, launch_dims=edges.shape[0], output_dims=1)[0][0]

    for rest in (0.1, 0.2, 0.7):  # one trace for every value: the scalar is a runtime value
        rest = jnp.float64(rest)
        np.testing.assert_allclose(energy(x, rest), K.spring_energy_ref(x, edges, stiffness, rest), rtol=1e-12)
        g = jax.grad(energy, argnums=1)(x, rest)
        r = jax.grad(lambda r: K.spring_energy_ref(x, edges, stiffness, r))(rest)
        np.testing.assert_allclose(g, r, rtol=1e-10)
    rev(energy, (x, jnp.float64(0.25)))


def test_runtime_scalar_derivative_is_closed_form():
    m = jax_kernel(K.scale_square64, enable_backward=True)
    a = jnp.arange(1.0, 6.0)
    s = jnp.float64(1.5)
    (out,) = m(a, s)
    np.testing.assert_allclose(out, a * s * s)
    ds = jax.grad(lambda s: jnp.sum(m(a, s)[0]))(s)
    np.testing.assert_allclose(ds, 2 * s * jnp.sum(a))  # d/ds sum(a s^2) = 2 s sum(a)
    # vmap over the scalar, and grad of that
    ss = jnp.array([0.5, 1.0, 2.0])
    np.testing.assert_allclose(jax.vmap(lambda s: m(a, s)[0])(ss), ss[:, None] ** 2 * a[None, :])
    np.testing.assert_allclose(jax.vmap(jax.grad(lambda s: jnp.sum(m(a, s)[0])))(ss), 2 * ss * jnp.sum(a))


def test_runtime_scalar_as_a_model_leaf():
    class Layer(eqx.Module):
        scale: jax.Array
        kernel: object = eqx.field(static=True)

        def __call__(self, a):
            return self.kernel(a, self.scale)[0]

    layer = Layer(jnp.float64(2.0), jax_kernel(K.scale_square64, enable_backward=True))
    a = jnp.arange(4.0)
    grads = eqx.filter_grad(lambda lay: jnp.sum(lay(a)))(layer)
    np.testing.assert_allclose(grads.scale, 2 * 2.0 * jnp.sum(a))


def test_per_call_launch_and_output_dims_with_grad():
    m = jax_kernel(K.matmul64, enable_backward=True)
    rng = np.random.default_rng(0)
    a, b = jnp.asarray(rng.normal(size=(3, 4))), jnp.asarray(rng.normal(size=(4, 5)))

    def f(a, b):
        return m(a, b, launch_dims=(3, 5), output_dims=(3, 5))[0]

    np.testing.assert_allclose(f(a, b), a @ b, rtol=1e-12)
    rev(f, (a, b))
    ga, gb = jax.grad(lambda a, b: jnp.sum(jnp.sin(f(a, b))), argnums=(0, 1))(a, b)
    ra, rb = jax.grad(lambda a, b: jnp.sum(jnp.sin(a @ b)), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ga, ra, rtol=1e-10)
    np.testing.assert_allclose(gb, rb, rtol=1e-10)


def test_several_outputs_and_vector_arrays():
    m = jax_kernel(K.two_outputs64, num_outputs=2, enable_backward=True)
    rng = np.random.default_rng(1)
    a, b = jnp.asarray(rng.normal(size=5)), jnp.asarray(rng.normal(size=(5, 2)))
    c, d = m(a, b)
    np.testing.assert_allclose(c, jnp.sin(a) * b[:, 0])
    np.testing.assert_allclose(d, b * a[:, None] ** 2)
    rev(lambda a, b: m(a, b), (a, b))


def test_in_out_accumulation_is_differentiable():
    m = jax_kernel(K.rowsum_sq64, in_out_argnames=["sums"], enable_backward=True)
    rng = np.random.default_rng(2)
    mat, init = jnp.asarray(rng.normal(size=(3, 4))), jnp.asarray(rng.normal(size=3))
    np.testing.assert_allclose(m(mat, init)[0], init + jnp.sum(mat * mat, axis=1))
    rev(lambda mat, init: m(mat, init)[0], (mat, init))


def test_overloads_from_arg_types_factory_are_differentiable():
    m = jax_kernel(K.generic_mul, arg_types_factory=K.generic_mul_types, enable_backward=True)
    a, b = jnp.linspace(0.5, 1.5, 4), jnp.linspace(-1.0, 2.0, 4)
    np.testing.assert_allclose(m(a, b)[0], a * b * b)
    rev(lambda a, b: m(a, b)[0], (a, b))


def test_vmap_of_grad_and_grad_of_vmap_eager_and_jit():
    m, x, edges, stiffness = _spring()

    def energy(x, k):
        return m(x, edges, k, 0.3, launch_dims=edges.shape[0], output_dims=1)[0][0]

    xs = jnp.stack([x, 1.1 * x, 0.9 * x])
    ref = jax.vmap(jax.grad(lambda x: K.spring_energy_ref(x, edges, stiffness, 0.3)))(xs)
    for wrap in (lambda f: f, jax.jit):
        np.testing.assert_allclose(wrap(jax.vmap(jax.grad(energy), in_axes=(0, None)))(xs, stiffness), ref, rtol=1e-10)
        total = wrap(jax.grad(lambda xs: jnp.sum(jax.vmap(energy, in_axes=(0, None))(xs, stiffness))))(xs)
        np.testing.assert_allclose(total, ref, rtol=1e-10)


def test_multi_kernel_callable_gradient():
    m = jax_callable(K.chain64, enable_backward=True)
    a, b = jnp.linspace(0.2, 2.0, 5), jnp.linspace(-1.0, 1.0, 5)
    np.testing.assert_allclose(m(a, b, 3.0)[0], 3.0 * a * a + jnp.sin(b))
    ga, gb = jax.grad(lambda a, b: jnp.sum(m(a, b, 3.0)[0]), argnums=(0, 1))(a, b)
    np.testing.assert_allclose(ga, 6.0 * a)
    np.testing.assert_allclose(gb, jnp.cos(b))
    rev(lambda a, b: m(a, b, 3.0)[0], (a, b))
    # vmap of the gradient runs the taped backward once per slice
    gs = jax.vmap(jax.grad(lambda a: jnp.sum(m(a, b, 3.0)[0])))(jnp.stack([a, 2 * a]))
    np.testing.assert_allclose(gs, 6.0 * jnp.stack([a, 2 * a]))


def test_overwritten_in_out_is_refused_with_backward():
    # matmul64 overwrites c (`c[i, j] = acc`): Warp's adjoint cannot differentiate that
    with pytest.raises(ValueError, match="'c'"):
        jax_kernel(K.matmul64, in_out_argnames=["c"], num_outputs=1, enable_backward=True)
    jax_kernel(K.rowsum_sq64, in_out_argnames=["sums"], enable_backward=True)  # accumulation is fine
