"""jarp's Energy inside the JAX scientific stack: optimistix, lineax, optax (float64 spring nets, jnp references)."""

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optax
import optimistix as optx
import pytest

from jarp.warp import Energy, energy, jax_kernel
from tests.support import kernels_energy as K

pytestmark = pytest.mark.x64

N_NODES = 6
PINNED = 3  # nodes 0, 1, 2: a non-collinear triangle, which removes the rigid motions


def _energy(m: int, n: int, *, projected: bool = False) -> Energy:
    def kern(k, out, **kw):
        return jax_kernel(k, launch_dims=m, output_dims=out, **kw)

    if projected:
        return energy(
            kern(K.spring_energy, 1, enable_backward=True),
            kern(K.spring_grad, n, enable_backward=True),
            kern(K.spring_hess_prod_projected, n),
            kern(K.spring_hess_diag_projected, n),
            hessian="projected",
        )
    return energy(
        kern(K.spring_energy, 1, enable_backward=True),
        kern(K.spring_grad, n, enable_backward=True),
        kern(K.spring_hess_prod, n),
        kern(K.spring_hess_diag, n),
    )


def _net(stretch: float):
    """A complete spring net on 6 nodes, every rest length ``stretch`` times its length at ``x0``."""
    x0, edges, k, _ = (jnp.asarray(a) for a in K.spring_problem(N_NODES, seed=7))
    rest = stretch * jnp.linalg.norm(x0[edges[:, 0]] - x0[edges[:, 1]], axis=-1)
    free = jnp.where(jnp.arange(N_NODES)[:, None] < PINNED, 0.0, 1.0) * jnp.ones((1, 3))
    return x0, edges, k, rest, free


def _ref_grad(x, edges, k, rest):
    return jax.grad(K.spring_energy_ref)(x, edges, k, rest)


# (a) optimistix: Newton root find of the residual, implicit gradient of the solution


def _residual(grad_fn, x0, edges, rest, free, load):
    def residual(x, k):
        # x on the free nodes, x0 on the pinned ones: the Jacobian is free*H*free + pinned (symmetric)
        xf = free * x + (1.0 - free) * x0
        return free * (grad_fn(xf, edges, k, rest) - load) + (1.0 - free) * (x - x0)

    return residual


@pytest.mark.parametrize(
    "linear_solver",
    [lx.AutoLinearSolver(well_posed=None), lx.CG(rtol=1e-13, atol=1e-13, max_steps=200)],
    ids=["lu", "cg"],
)
def test_optimistix_newton_root_find_with_implicit_gradient(linear_solver):
    x0, edges, k, rest, free = _net(stretch=1.0)  # stress-free at x0: Newton starts in its basin
    E = _energy(edges.shape[0], N_NODES)
    load = 0.005 * jnp.asarray(np.random.default_rng(8).normal(size=x0.shape)) * free
    target = x0 + 0.02 * jnp.asarray(np.random.default_rng(9).normal(size=x0.shape)) * free
    solver = optx.Newton(rtol=1e-12, atol=1e-12, linear_solver=linear_solver)
    tags = frozenset({lx.symmetric_tag, lx.positive_semidefinite_tag})

    def solve(grad_fn, k):
        sol = optx.root_find(
            _residual(grad_fn, x0, edges, rest, free, load),
            solver,
            x0,
            k,
            adjoint=optx.ImplicitAdjoint(linear_solver=linear_solver),
            tags=tags,
            max_steps=50,
        )
        return sol.value

    def loss(grad_fn, k):
        return jnp.sum((solve(grad_fn, k) - target) ** 2)

    x_star = jax.jit(lambda k: solve(E.grad, k))(k)
    np.testing.assert_allclose(free * (_ref_grad(x_star, edges, k, rest) - load), 0.0, atol=1e-11)
    np.testing.assert_allclose(x_star, jax.jit(lambda k: solve(_ref_grad, k))(k), atol=1e-11)  # the jnp root
    assert float(jnp.max(jnp.abs(x_star - x0))) > 1e-2  # the load moved the net

    g = jax.jit(jax.grad(lambda k: loss(E.grad, k)))(k)
    g_ref = jax.jit(jax.grad(lambda k: loss(_ref_grad, k)))(k)
    np.testing.assert_allclose(g, g_ref, rtol=1e-9, atol=1e-12)
    # finite differences of the whole solve, along random directions
    warp_loss = jax.jit(lambda k: loss(E.grad, k))
    for seed in range(2):
        u = jnp.asarray(np.random.default_rng(30 + seed).normal(size=k.shape))
        h = 1e-5
        fd = (warp_loss(k + h * u) - warp_loss(k - h * u)) / (2 * h)
        np.testing.assert_allclose(jnp.vdot(g, u), fd, rtol=1e-6)


# (b) lineax: the Warp Hessian product as a linear operator, CG with a Jacobi preconditioner


@pytest.mark.parametrize("projected", [False, True], ids=["exact", "projected"])
def test_lineax_cg_over_hess_prod_with_jacobi_preconditioner(projected):
    # exact: every spring stretched (rest 0.9 l), the Hessian is positive definite on the free nodes.
    # projected: every spring compressed (rest 1.2 l), the exact Hessian is indefinite, the projected one is not.
    x0, edges, k, rest, free = _net(stretch=1.2 if projected else 0.9)
    E = _energy(edges.shape[0], N_NODES, projected=projected)
    pinned = 1.0 - free
    structure = jax.ShapeDtypeStruct(x0.shape, x0.dtype)
    op = lx.FunctionLinearOperator(
        lambda v: free * E.hess_prod(x0, edges, k, rest, v=free * v) + pinned * v,
        structure,
        tags=(lx.symmetric_tag, lx.positive_semidefinite_tag),
    )
    diag = free * E.hess_diag(x0, edges, k, rest) + pinned
    precond = lx.TaggedLinearOperator(lx.DiagonalLinearOperator(1.0 / diag), lx.positive_semidefinite_tag)
    b = jnp.asarray(np.random.default_rng(40).normal(size=x0.shape))

    if projected:
        h = K.spring_projected_hessian_ref(x0, edges, k, rest)
        assert np.linalg.eigvalsh(jax.hessian(K.spring_energy_ref)(x0, edges, k, rest).reshape(h.shape)).min() < -1e-2
    else:
        h = jax.hessian(K.spring_energy_ref)(x0, edges, k, rest).reshape(x0.size, x0.size)
    f, p = free.ravel(), pinned.ravel()
    h_masked = f[:, None] * h * f[None, :] + jnp.diag(p)
    x_ref = jnp.linalg.solve(h_masked, b.ravel()).reshape(x0.shape)
    np.testing.assert_allclose(op.as_matrix(), h_masked, atol=1e-12)

    cg = lx.CG(rtol=1e-12, atol=1e-12, max_steps=500)
    plain = eqx.filter_jit(lambda b: lx.linear_solve(op, b, cg))(b)
    pre = eqx.filter_jit(lambda b: lx.linear_solve(op, b, cg, options={"preconditioner": precond}))(b)
    for sol in (plain, pre):
        assert sol.result == lx.RESULTS.successful
        np.testing.assert_allclose(sol.value, x_ref, rtol=1e-9, atol=1e-10)
    assert int(pre.stats["num_steps"]) <= int(plain.stats["num_steps"])
    # differentiable with respect to the right-hand side: d(x . w)/db = H^-1 w
    w = jnp.asarray(np.random.default_rng(41).normal(size=x0.shape))
    db = jax.grad(lambda b: jnp.vdot(lx.linear_solve(op, b, cg).value, w))(b)
    np.testing.assert_allclose(db.ravel(), jnp.linalg.solve(h_masked, w.ravel()), rtol=1e-8, atol=1e-10)


# (c) lineax's JacobianLinearOperator of E.grad, materialised: the Hessian


@pytest.mark.parametrize("jac", [None, "fwd", "bwd"])
@pytest.mark.parametrize("projected", [False, True], ids=["exact", "projected"])
def test_jacobian_linear_operator_of_grad_is_the_hessian(jac, projected):
    x, edges, k, rest = (jnp.asarray(a) for a in K.spring_problem())  # 7 of its 10 springs compressed
    E = _energy(edges.shape[0], x.shape[0], projected=projected)
    op = lx.JacobianLinearOperator(lambda x, args: E.grad(x, *args), x, (edges, k, rest), jac=jac)
    h_ref = jax.hessian(K.spring_energy_ref)(x, edges, k, rest).reshape(x.size, x.size)
    np.testing.assert_allclose(op.as_matrix(), h_ref, atol=1e-12)  # exact even with a projected hess_prod
    v = jnp.asarray(np.random.default_rng(50).normal(size=x.shape))
    np.testing.assert_allclose(op.mv(v).ravel(), h_ref @ v.ravel(), atol=1e-12)
    np.testing.assert_allclose(jax.jacfwd(E.grad)(x, edges, k, rest).reshape(h_ref.shape), h_ref, atol=1e-12)
    np.testing.assert_allclose(jax.hessian(E)(x, edges, k, rest).reshape(h_ref.shape), h_ref, atol=1e-12)


# (d) optax: training a model that holds a jarp Energy


class SpringModel(eqx.Module):
    energy: Energy
    stiffness: jax.Array
    edges: jax.Array  # integer: not trained

    def forces(self, x: jax.Array, rest: jax.Array) -> jax.Array:
        return -self.energy.grad(x, self.edges, self.stiffness, rest)


def test_optax_adam_fits_stiffness_of_a_model_holding_an_energy():
    x0, edges, k_true, rest = (jnp.asarray(a) for a in K.spring_problem(N_NODES, seed=11))
    m = edges.shape[0]
    # three observed configurations and their forces (from the jnp energy): together they determine all
    # 15 stiffnesses (one configuration gives only 3 * 6 - 6 = 12 independent equations)
    xs = [x0 + 0.1 * jnp.asarray(np.random.default_rng(60 + i).normal(size=x0.shape)) for i in range(3)]
    fs = [-_ref_grad(x, edges, k_true, rest) for x in xs]
    E = _energy(m, N_NODES)
    model = SpringModel(E, jnp.ones(m), edges)

    def loss(model: SpringModel) -> jax.Array:
        return sum(jnp.mean((model.forces(x, rest) - f) ** 2) for x, f in zip(xs, fs, strict=True))

    optimiser = optax.adam(optax.exponential_decay(0.05, transition_steps=100, decay_rate=0.5))
    opt_state = optimiser.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def step(model, opt_state):
        value, grads = eqx.filter_value_and_grad(loss)(model)
        # optax's bias correction computes `decay ** count` with an int32 count, which the suite's strict
        # dtype promotion (tests/conftest.py) refuses; optax is written for JAX's standard promotion.
        with jax.numpy_dtype_promotion("standard"):
            updates, opt_state = optimiser.update(grads, opt_state, eqx.filter(model, eqx.is_inexact_array))
        return eqx.apply_updates(model, updates), opt_state, value

    # the gradient with respect to the model against the jnp one
    grads = eqx.filter_grad(loss)(model)
    ref = jax.grad(
        lambda k: sum(jnp.mean((-_ref_grad(x, edges, k, rest) - f) ** 2) for x, f in zip(xs, fs, strict=True))
    )(model.stiffness)
    np.testing.assert_allclose(grads.stiffness, ref, rtol=1e-11)

    losses = []
    for _ in range(400):
        model, opt_state, value = step(model, opt_state)
        losses.append(float(value))
    assert losses[-1] < 1e-3 * losses[0]
    assert losses[-1] < 1e-10
    np.testing.assert_allclose(model.stiffness, k_true, rtol=1e-6)
    # the untrained parts ride along untouched
    assert model.energy == E
    np.testing.assert_array_equal(model.edges, edges)
