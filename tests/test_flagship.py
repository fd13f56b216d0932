"""The flagship example, examples/fit_stiffness.py: it runs end to end, and its implicit gradient is right.

The end-to-end run is a subprocess (the example turns on float64 itself, and Warp reads the kernels' source from the
real file). The other tests import the example's pieces in the float64 process only (``x64``): importing the example
switches ``jax_enable_x64`` on, so it must never happen in the float32 process.
"""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "fit_stiffness.py"


def load_example() -> ModuleType:
    """Import examples/fit_stiffness.py as a module (once per process)."""
    name = "jarp_example_fit_stiffness"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses (eqx.Module) look their module up while the class body runs
    spec.loader.exec_module(module)
    return module


@pytest.mark.example
def test_fit_stiffness_runs_end_to_end(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(EXAMPLE), "--grid", "6", "--regions", "2", "--steps", "60", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "JAX_ENABLE_X64": "0"},  # the example must turn float64 on by itself
        check=False,
    )
    out = proc.stdout
    assert proc.returncode == 0, f"exit {proc.returncode}\n{out}\n{proc.stderr}"
    match = re.search(r"loss: initial (\S+) -> final (\S+)", out)
    assert match is not None, out
    initial, final = float(match.group(1)), float(match.group(2))
    assert final < 1e-3 * initial, out
    error = re.search(r"stiffness error: max relative (\S+)", out)
    assert error is not None, out
    assert float(error.group(1)) < 0.05, out
    assert "round-tripped" in out, out
    for name in ("spring_net.eqx", "fit_stiffness.png"):
        assert (tmp_path / name).is_file(), name
        assert str(tmp_path / name) in out
    assert (tmp_path / "fit_stiffness.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


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
def test_train_step_decreases_the_loss() -> None:
    import equinox as eqx
    import jax.numpy as jnp

    ex = load_example()
    true_net = ex.make_net(5, 2, ex.true_log_stiffness(2, 0))
    x_obs, _ = ex.solve_equilibrium(true_net, true_net.rest_positions)
    net = ex.make_net(5, 2)
    params, static = eqx.partition(net, ex.trainable(net))
    opt = ex.Adam.init(params)
    x, losses = net.rest_positions, []
    for _ in range(15):
        params, opt, loss, x = ex.train_step(params, static, opt, x, x_obs, jnp.asarray(0.05))
        losses.append(float(loss))
    assert losses[-1] < 0.2 * losses[0], losses
