"""The 3-D FEM example, examples/hyperelastic.py: its kernels against a `jax.numpy` energy, its mesh, and a run.

The end-to-end run is a subprocess (the example turns float64 on in `main`, and Warp reads the kernels' source from
the real file). The other tests import the example's pieces in the float64 process only (``x64``); importing it
changes no JAX flag, but its kernels are float64.
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tests.support.examples import load_example as load_example_module
from tests.support.examples import run_fit

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE = ROOT / "examples" / "hyperelastic.py"


def load_example() -> ModuleType:
    """Import examples/hyperelastic.py as a module (once per process)."""
    return load_example_module(EXAMPLE, "jarp_example_hyperelastic")


def test_make_beam_is_a_conforming_positive_mesh() -> None:
    ex = load_example()
    nx, ny, nz = 3, 2, 2
    m = ex.make_beam(nx, ny, nz, size=(1.5, 0.4, 0.3), regions=3)
    assert m.rest.shape == ((nx + 1) * (ny + 1) * (nz + 1), 3)
    assert m.tets.shape == (6 * nx * ny * nz, 4)
    assert m.tets.dtype == np.int32
    np.testing.assert_allclose(m.vol.sum(), 1.5 * 0.4 * 0.3, rtol=1e-12)
    assert m.vol.min() > 0
    dm = np.stack([m.rest[m.tets[:, k]] - m.rest[m.tets[:, 0]] for k in (1, 2, 3)], axis=-1)
    np.testing.assert_allclose(
        np.einsum("tij,tjk->tik", dm, m.Dm_inv), np.broadcast_to(np.eye(3), dm.shape), atol=1e-12
    )
    # conforming: every interior triangle is shared by exactly two tets, every boundary one lies on the box's surface
    faces = np.sort(m.tets[:, [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]].reshape(-1, 3), axis=1)
    unique, count = np.unique(faces, axis=0, return_counts=True)
    assert set(count.tolist()) == {1, 2}
    boundary = m.rest[unique[count == 1]]  # (faces, 3 vertices, 3)
    on_side = np.zeros(len(boundary), bool)
    for axis, extent in enumerate((1.5, 0.4, 0.3)):
        for value in (0.0, extent):
            on_side |= np.all(np.isclose(boundary[:, :, axis], value), axis=1)
    assert on_side.all()
    assert np.array_equal(np.unique(m.region), [0, 1, 2])
    assert np.array_equal(m.clamped, m.rest[:, 0] == 0.0)
    with pytest.raises(ValueError, match="nx, ny, nz >= 1"):
        ex.make_beam(0, 1, 1)


@pytest.mark.x64
def test_snh_kernels_match_the_jnp_energy() -> None:
    import jax
    import jax.numpy as jnp

    ex = load_example()
    m = ex.make_beam(3, 2, 2, regions=2)
    mesh = ex.MeshArrays(jnp.asarray(m.tets), jnp.asarray(m.Dm_inv), jnp.asarray(m.vol))
    material = ex.MaterialArrays(jnp.asarray(m.region), 0.3)
    log_youngs = jnp.log(jnp.asarray([1.0e6, 3.0e6]))
    E = ex.snh_energy(m.rest.shape[0], m.tets.shape[0])
    rng = np.random.default_rng(0)
    # a general deformation: a stretch, a twist-like shear and noise (some elements compressed, J far from 1)
    x = m.rest @ np.array([[1.1, 0.2, 0.0], [0.0, 0.8, 0.1], [0.05, 0.0, 1.2]]) + 0.02 * rng.standard_normal(
        m.rest.shape
    )
    x = jnp.asarray(x)
    v = jnp.asarray(rng.standard_normal(x.shape))
    ref = jax.jit(ex.snh_energy_ref)  # compiled once per transformation: op by op, the reference took 10 s
    args = (mesh, material, log_youngs)

    np.testing.assert_allclose(E(x, *args), ref(x, *args), rtol=1e-12)
    assert abs(float(ref(jnp.asarray(m.rest), *args))) < 1e-6  # stress free and zero at rest
    g_ref = jax.grad(ref)(x, *args)
    np.testing.assert_allclose(E.grad(x, *args), g_ref, rtol=1e-11, atol=1e-11 * float(jnp.max(jnp.abs(g_ref))))
    hv_ref = jax.jvp(lambda x: jax.grad(ref)(x, *args), (x,), (v,))[1]
    scale = float(jnp.max(jnp.abs(hv_ref)))
    np.testing.assert_allclose(E.hess_prod(x, *args, v=v), hv_ref, atol=1e-11 * scale)
    # the same through JAX's forward mode over E.grad (the route optimistix's Newton takes)
    np.testing.assert_allclose(jax.jvp(lambda x: E.grad(x, *args), (x,), (v,))[1], hv_ref, atol=1e-11 * scale)
    hessian = jax.hessian(ref)(x, *args).reshape(x.size, x.size)
    diag = E.hess_diag(x, *args)
    np.testing.assert_allclose(diag, jnp.diag(hessian).reshape(x.shape), atol=1e-11 * float(jnp.max(diag)))
    # derivatives with respect to the moduli (Warp's adjoint): of the energy and of the gradient
    np.testing.assert_allclose(
        jax.grad(lambda p: E(x, mesh, material, p))(log_youngs),
        jax.grad(lambda p: ref(x, mesh, material, p))(log_youngs),
        rtol=1e-11,
    )
    w = jnp.asarray(rng.standard_normal(x.shape))
    np.testing.assert_allclose(
        jax.grad(lambda p: jnp.vdot(E.grad(x, mesh, material, p), w))(log_youngs),
        jax.grad(lambda p: jnp.vdot(jax.grad(ref)(x, mesh, material, p), w))(log_youngs),
        rtol=1e-10,
    )


@pytest.mark.example
def test_hyperelastic_runs_end_to_end(tmp_path: Path) -> None:
    run_fit(
        EXAMPLE,
        *("--nx", "6", "--ny", "2", "--nz", "2", "--regions", "2", "--steps", "40"),
        out=tmp_path,
        error="modulus error",
        max_error=0.05,
        loss_drop=1e-2,
        files=("beam.eqx", "hyperelastic.png"),
    )


@pytest.mark.x64
def test_implicit_gradient_matches_finite_differences() -> None:
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    ex = load_example()
    mesh = ex.make_beam(4, 1, 1, regions=2)
    options = ex.SolverOptions(tol=1e-11, cg_rtol=1e-10, adjoint_rtol=1e-12)
    true_beam = ex.Beam(mesh, ex.true_log_youngs(2, 3), options)
    u_obs = ex.solve(true_beam, jnp.zeros_like(true_beam.rest), 3)
    np.testing.assert_allclose(true_beam.residual(u_obs), 0.0, atol=1e-9 * float(jnp.max(jnp.abs(true_beam.load))))
    start = ex.Beam(mesh, jnp.log(jnp.asarray([0.8e6, 1.3e6])), options)

    def loss(log_youngs: jax.Array) -> jax.Array:
        beam = eqx.tree_at(lambda b: b.log_youngs, start, log_youngs)
        return ex.fit_loss(beam, u_obs, u_obs)[0]  # warm start at the observation: a different equilibrium

    log_youngs = start.log_youngs
    grad = jax.jit(jax.grad(loss))(log_youngs)
    assert float(jnp.max(jnp.abs(grad))) > 1e-3
    f = jax.jit(loss)
    eps = 1e-5
    fd = np.array([(f(log_youngs.at[i].add(eps)) - f(log_youngs.at[i].add(-eps))) / (2 * eps) for i in range(2)])
    np.testing.assert_allclose(grad, fd, rtol=1e-5)
