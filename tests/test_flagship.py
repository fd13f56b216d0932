"""The flagship example, examples/fit_stiffness.py: it runs end to end, its equilibrium and implicit gradient are
right, its optax step compiles once, and the compiled step is matrix-free on the Warp Hessian-product kernel.

The end-to-end run is a subprocess (the example turns on float64 itself, and Warp reads the kernels' source from the
real file). The other tests import the example's pieces in the float64 process only (``x64``): importing the example
switches ``jax_enable_x64`` on, so it must never happen in the float32 process.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

import numpy as np
import pytest

from tests.support.examples import load_example as load_example_module
from tests.support.examples import run_fit

if TYPE_CHECKING:
    import jax

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "fit_stiffness.py"
# The suite runs with strict dtype promotion (tests/conftest.py); optax's Adam and schedules mix Python floats with
# its int32 step count, which only standard promotion (JAX's default, the example's setting) allows.
OPTAX_PROMOTION = "standard"


def load_example() -> ModuleType:
    """Import examples/fit_stiffness.py as a module (once per process)."""
    return load_example_module(EXAMPLE, "jarp_example_fit_stiffness")


@pytest.mark.example
def test_fit_stiffness_runs_end_to_end(tmp_path: Path) -> None:
    run_fit(
        EXAMPLE,
        *("--grid", "6", "--regions", "2", "--steps", "60"),
        out=tmp_path,
        error="stiffness error",
        max_error=0.05,
        loss_drop=1e-3,
        files=("spring_net.eqx", "fit_stiffness.png"),
    )


@pytest.mark.x64
def test_spring_kernels_match_a_jax_reference() -> None:
    import jax
    import jax.numpy as jnp

    ex = load_example()
    net = ex.make_net(4, 2, ex.true_log_stiffness(2, 1))
    rng = np.random.default_rng(0)
    x = net.rest_positions + jnp.asarray(0.05 * rng.standard_normal(net.rest_positions.shape))
    v = jnp.asarray(rng.standard_normal(x.shape))
    edges, k, rest = net.edges, net.spring_constants(), net.rest_length

    @jax.jit  # compiled once per transformation (op by op it takes seconds)
    def reference(x: jax.Array) -> jax.Array:
        d = x[edges[:, 0]] - x[edges[:, 1]]
        s = jnp.sqrt(jnp.sum(d * d, axis=-1)) - rest
        return jnp.sum(0.5 * k * s * s)

    E = net.energy
    np.testing.assert_allclose(E(x, edges, k, rest), reference(x), rtol=1e-13)
    np.testing.assert_allclose(jax.grad(E)(x, edges, k, rest), jax.grad(reference)(x), atol=1e-13)
    hv = jax.jvp(jax.grad(reference), (x,), (v,))[1]
    np.testing.assert_allclose(E.hess_prod(x, edges, k, rest, v=v), hv, atol=1e-12)
    hessian = jax.hessian(reference)(x).reshape(x.size, x.size)
    np.testing.assert_allclose(E.hess_diag(x, edges, k, rest), jnp.diag(hessian).reshape(x.shape), atol=1e-12)


def _reference_energy(net: ModuleType) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """The net's total energy in plain jax.numpy, as a function of positions and log-stiffness (no Warp)."""
    import jax.numpy as jnp

    edges, rest, region = net.edges, net.rest_length, net.region

    def total(x: jax.Array, log_k: jax.Array) -> jax.Array:
        k = jnp.exp(log_k)[region] / rest
        d = x[edges[:, 0]] - x[edges[:, 1]]
        s = jnp.sqrt(jnp.sum(d * d, axis=-1)) - rest
        return jnp.sum(0.5 * k * s * s) - jnp.vdot(net.load, x)

    return total


def _dense_implicit_gradient(net: ModuleType, x: jax.Array, x_obs: jax.Array, misfit: Callable) -> jax.Array:
    """``dL/dlog_k`` at the equilibrium ``x`` by the implicit function theorem with dense jax.numpy matrices.

    Independent of the example's solver stack (optimistix, lineax, the Warp kernels): the Hessian and the mixed
    derivative come from ``jax.hessian``/``jax.jacobian`` of a plain-JAX energy, the adjoint from ``jnp.linalg.solve``.
    """
    import jax
    import jax.numpy as jnp

    energy = jax.jit(_reference_energy(net))  # compiled once per transformation (op by op it takes seconds)
    free = net.free.reshape(-1).astype(bool)
    n = x.size
    hessian = jax.hessian(energy)(x, net.log_stiffness).reshape(n, n)[np.ix_(free, free)]
    mixed = jax.jacobian(jax.grad(energy), argnums=1)(x, net.log_stiffness).reshape(n, -1)[free]
    x_bar = jax.grad(misfit)(x).reshape(-1)[free]
    lam = jnp.linalg.solve(hessian, x_bar)
    return -mixed.T @ lam


@pytest.mark.x64
def test_equilibrium_and_implicit_gradient_match_a_dense_reference() -> None:
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    ex = load_example()
    true_net = ex.make_net(5, 2, ex.true_log_stiffness(2, 0))
    x_obs, newton_steps = ex.solve_equilibrium(true_net, true_net.rest_positions)
    assert 2 <= int(newton_steps) < true_net.options.max_newton
    # The root is an equilibrium of the plain-JAX energy, with the pinned nodes at rest.
    force = jax.jit(jax.grad(_reference_energy(true_net)))(x_obs, true_net.log_stiffness)
    stop = true_net.options.tol * float(jnp.max(jnp.abs(true_net.load)))  # the documented stopping test
    assert float(jnp.max(jnp.abs(true_net.free * force))) <= stop
    np.testing.assert_array_equal((1 - true_net.free) * x_obs, (1 - true_net.free) * true_net.rest_positions)

    x_obs = x_obs + 1e-3 * jnp.asarray(np.random.default_rng(1).standard_normal(x_obs.shape))  # a nonzero residual
    start = ex.make_net(5, 2, jnp.asarray([0.3, -0.2, 0.1, 0.25]))

    def loss(log_k: jax.Array) -> jax.Array:
        net = eqx.tree_at(lambda n: n.log_stiffness, start, log_k)
        return ex.fit_loss(net, net.rest_positions, x_obs)[0]

    grad = jax.jit(jax.grad(loss))(start.log_stiffness)
    x, _ = ex.solve_equilibrium(start, start.rest_positions)
    reference = _dense_implicit_gradient(start, x, x_obs, lambda y: ex.misfit(y, x_obs, start))
    assert float(jnp.max(jnp.abs(reference))) > 1e-3
    np.testing.assert_allclose(grad, reference, rtol=1e-8, atol=1e-12)


@pytest.mark.x64
def test_implicit_gradient_matches_finite_differences() -> None:
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    ex = load_example()
    options = ex.SolverOptions(tol=1e-12, cg_tol=1e-10, adjoint_tol=1e-12)
    true_net = ex.make_net(4, 2, ex.true_log_stiffness(2, 0), options)
    x_obs, _ = ex.solve_equilibrium(true_net, true_net.rest_positions)
    x_obs = x_obs + 1e-3 * jnp.asarray(np.random.default_rng(1).standard_normal(x_obs.shape))  # a nonzero residual
    start = ex.make_net(4, 2, jnp.asarray([0.3, -0.2, 0.1, 0.25]), options)

    def loss(log_k: jax.Array) -> jax.Array:
        net = eqx.tree_at(lambda n: n.log_stiffness, start, log_k)
        return ex.fit_loss(net, net.rest_positions, x_obs)[0]

    log_k = start.log_stiffness
    grad = jax.jit(jax.grad(loss))(log_k)
    assert np.all(np.isfinite(grad))
    assert float(jnp.max(jnp.abs(grad))) > 1e-4
    f = jax.jit(loss)
    eps = 1e-5
    fd = np.array([(f(log_k.at[i].add(eps)) - f(log_k.at[i].add(-eps))) / (2 * eps) for i in range(log_k.shape[0])])
    np.testing.assert_allclose(grad, fd, rtol=1e-5, atol=1e-9)


@pytest.mark.x64
def test_train_step_decreases_the_loss_without_retracing() -> None:
    import equinox as eqx
    import jax

    ex = load_example()
    true_net = ex.make_net(5, 2, ex.true_log_stiffness(2, 0))
    x_obs, _ = ex.solve_equilibrium(true_net, true_net.rest_positions)
    net = ex.make_net(5, 2)
    params, static = eqx.partition(net, ex.trainable(net))
    optimiser = ex.make_optimiser(0.05, 0.1, 15)
    opt_state = optimiser.init(params)
    # The learning-rate schedule lives in the optimiser state: every step must reuse the first step's trace.
    step = eqx.filter_jit(eqx.debug.assert_max_traces(ex.train_step.__wrapped__, max_traces=1))
    x, losses = net.rest_positions, []
    with jax.numpy_dtype_promotion(OPTAX_PROMOTION):
        for _ in range(15):
            params, opt_state, loss, x = step(params, static, optimiser, opt_state, x, x_obs)
            losses.append(float(loss))
    assert losses[-1] < 0.2 * losses[0], losses


@pytest.mark.x64
def test_optax_schedule_matches_the_documented_decay() -> None:
    import jax
    import jax.numpy as jnp

    ex = load_example()
    # make_optimiser is Adam with the learning rate lr * decay ** (t / (steps - 1)) at step t (from 0), as the
    # hand-written loop had it. Step 0 with a unit gradient moves by lr; step 10 (the last of 11), after ten zero
    # gradients, moves by lr * decay times Adam's bias-corrected ratio, written out here.
    optimiser = ex.make_optimiser(0.05, 0.1, 11)
    params = jnp.zeros(3)
    state = optimiser.init(params)
    with jax.numpy_dtype_promotion(OPTAX_PROMOTION):
        updates, _ = optimiser.update(jnp.ones(3), state, params)
        np.testing.assert_allclose(updates, -0.05 * np.ones(3), rtol=1e-6)  # optax keeps the rate in float32
        for _ in range(10):
            _, state = optimiser.update(jnp.zeros(3), state, params)
        updates, _ = optimiser.update(jnp.ones(3), state, params)
    b1, b2, t = 0.9, 0.999, 11
    ratio = ((1 - b1) / (1 - b1**t)) / (np.sqrt((1 - b2) / (1 - b2**t)) + 1e-12)
    np.testing.assert_allclose(updates, -0.05 * 0.1 * ratio * np.ones(3), rtol=1e-6)


@pytest.mark.x64
def test_compiled_step_runs_the_hessian_product_kernel_and_no_dense_matrix() -> None:
    import math
    from collections import Counter

    import equinox as eqx
    import jax

    from jarp.warp._ffi._registry import registry
    from tests.support.lowered import plan_handles

    ex = load_example()
    true_net = ex.make_net(4, 2, ex.true_log_stiffness(2, 0))
    x_obs, _ = ex.solve_equilibrium(true_net, true_net.rest_positions)
    net = ex.make_net(4, 2)
    params, static = eqx.partition(net, ex.trainable(net))
    optimiser = ex.make_optimiser(0.05, 0.1, 10)
    with jax.numpy_dtype_promotion(OPTAX_PROMOTION):
        lowered = ex.train_step.lower(params, static, optimiser, optimiser.init(params), net.rest_positions, x_obs)
    text = lowered.as_text()
    plans = [registry.plan(h) for h in plan_handles(text)]
    calls = Counter((plan.name, plan.adjoint) for plan in plans)
    # Newton's CG and the adjoint CG both multiply by the Warp Hessian-product kernel (never its adjoint: the
    # Hessian is symmetric); the parameter cotangent is Warp's adjoint of the gradient kernel; the preconditioner
    # is the Hessian-diagonal kernel. No energy kernel: the solve is a root find of the gradient.
    assert calls[("jax_kernel(spring_hess_prod_kernel)", False)] >= 2, calls
    assert calls[("jax_kernel(spring_grad_kernel)", False)] >= 1, calls
    assert calls[("jax_kernel(spring_grad_kernel) (adjoint)", True)] >= 1, calls
    assert calls[("jax_kernel(spring_hess_diag_kernel)", False)] >= 1, calls
    assert set(calls) == {
        ("jax_kernel(spring_hess_prod_kernel)", False),
        ("jax_kernel(spring_grad_kernel)", False),
        ("jax_kernel(spring_grad_kernel) (adjoint)", True),
        ("jax_kernel(spring_hess_diag_kernel)", False),
    }, calls
    # Matrix-free: no float64 array anywhere in the program is as large as the dense Hessian.
    n = net.rest_positions.size
    sizes = [math.prod(int(d) for d in shape.split("x")[:-1]) for shape in re.findall(r"tensor<([0-9x]+f64)>", text)]
    assert sizes
    assert max(sizes) < n * n, max(sizes)
