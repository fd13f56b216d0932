"""jarp.warp.energy: a spring energy with hand-written derivative kernels under every JAX derivative."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jarp.warp import energy, jax_kernel

from . import kernels_energy as K

pytestmark = pytest.mark.x64


def _problem():
    x, edges, k, rest = (jnp.asarray(a) for a in K.spring_problem())
    m, n = edges.shape[0], x.shape[0]
    E = energy(
        jax_kernel(K.spring_energy, launch_dims=m, output_dims=1, enable_backward=True),
        jax_kernel(K.spring_grad, launch_dims=m, output_dims=n, enable_backward=True),
        jax_kernel(K.spring_hess_prod, launch_dims=m, output_dims=n),
        jax_kernel(K.spring_hess_diag, launch_dims=m, output_dims=n),
    )
    return E, x, (edges, k, rest)


def _ref(x, edges, k, rest):
    return K.spring_energy_ref(x, edges, k, rest)


def test_value_grad_and_jvp():
    E, x, params = _problem()
    np.testing.assert_allclose(E(x, *params), _ref(x, *params), rtol=1e-13)
    assert E(x, *params).shape == ()
    np.testing.assert_allclose(jax.grad(E)(x, *params), jax.grad(_ref)(x, *params), atol=1e-13)
    v = jnp.asarray(np.random.default_rng(1).normal(size=x.shape))
    _, t = jax.jvp(lambda x: E(x, *params), (x,), (v,))
    np.testing.assert_allclose(t, jnp.vdot(jax.grad(_ref)(x, *params), v), rtol=1e-12)


def test_hessian_vector_products_and_hessian():
    E, x, params = _problem()
    v = jnp.asarray(np.random.default_rng(2).normal(size=x.shape))
    h_ref = jax.hessian(_ref)(x, *params)
    hv_ref = jnp.einsum("iajb,jb->ia", h_ref, v)
    np.testing.assert_allclose(jax.jvp(lambda x: E.grad(x, *params), (x,), (v,))[1], hv_ref, atol=1e-12)
    np.testing.assert_allclose(jax.jvp(lambda x: jax.grad(E)(x, *params), (x,), (v,))[1], hv_ref, atol=1e-12)
    np.testing.assert_allclose(E.hess_prod(x, *params, v=v), hv_ref, atol=1e-12)
    np.testing.assert_allclose(jax.hessian(E)(x, *params), h_ref, atol=1e-12)
    np.testing.assert_allclose(jax.jacfwd(E.grad)(x, *params), h_ref, atol=1e-12)
    np.testing.assert_allclose(jax.jacrev(E.grad)(x, *params), h_ref, atol=1e-12)
    n = x.size
    np.testing.assert_allclose(E.hess_diag(x, *params), jnp.diag(h_ref.reshape(n, n)).reshape(x.shape), atol=1e-12)
    _, lin = jax.linearize(lambda x: E.grad(x, *params), x)
    np.testing.assert_allclose(lin(v), hv_ref, atol=1e-12)


def test_parameter_derivatives_through_warps_adjoint():
    E, x, (edges, k, rest) = _problem()
    np.testing.assert_allclose(
        jax.grad(E, argnums=2)(x, edges, k, rest), jax.grad(_ref, argnums=2)(x, edges, k, rest), atol=1e-13
    )
    w = jnp.asarray(np.random.default_rng(3).normal(size=x.shape))
    mixed = jax.grad(lambda k: jnp.vdot(E.grad(x, edges, k, rest), w))(k)
    mixed_ref = jax.grad(lambda k: jnp.vdot(jax.grad(_ref)(x, edges, k, rest), w))(k)
    np.testing.assert_allclose(mixed, mixed_ref, atol=1e-12)
    check_grads(lambda k: E(x, edges, k, rest), (k,), order=1, modes=["rev"])


def test_newton_cg_inside_jit_and_while_loop():
    E, x0, (edges, k, rest) = _problem()
    pinned = jnp.zeros(x0.shape[0], bool).at[0].set(True)  # pin one node: the Hessian is then definite
    free = jnp.where(pinned[:, None], 0.0, 1.0)
    load = jnp.asarray(np.random.default_rng(4).normal(size=x0.shape)) * 0.05 * free

    def total(x):
        return E(x, edges, k, rest) - jnp.vdot(load, x)

    def hvp(x, v):
        return free * E.hess_prod(x, edges, k, rest, v=free * v) + (1.0 - free) * v

    @jax.jit
    def solve(x):
        def body(state):
            x, _, it = state
            g = free * jax.grad(total)(x)
            dx, _ = jax.scipy.sparse.linalg.cg(lambda v: hvp(x, v), -g, tol=1e-12, maxiter=200)
            return x + dx, jnp.linalg.norm(g), it + 1

        x, _, _ = jax.lax.while_loop(lambda s: (s[1] > 1e-10) & (s[2] < 30), body, (x, jnp.inf, 0))
        return x

    x = solve(x0)
    np.testing.assert_allclose(free * jax.grad(total)(x), 0.0, atol=1e-8)

    # the CG solve with the Hessian module, differentiated with respect to its right-hand side
    def cg_solve(b):
        return jax.scipy.sparse.linalg.cg(lambda v: hvp(x, v), b, tol=1e-14, maxiter=500)[0]

    b = jnp.asarray(np.random.default_rng(5).normal(size=x0.shape)) * free
    sol = cg_solve(b)
    np.testing.assert_allclose(hvp(x, sol), b, atol=1e-9)
    check_grads(cg_solve, (b,), order=1, modes=["rev", "fwd"], atol=1e-5, rtol=1e-5)


def test_missing_hess_diag_is_named():
    E, x, params = _problem()
    E2 = energy(E.fun, E.grad_fn, E.hess_prod_fn)
    with pytest.raises(ValueError, match="hess_diag"):
        E2.hess_diag(x, *params)
    with pytest.raises(TypeError, match="grad"):
        energy(E.fun, 3, E.hess_prod_fn)
