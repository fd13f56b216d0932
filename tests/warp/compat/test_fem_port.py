"""An FEM library's generic Warp energy, ported to JAX unchanged: ``jax_kernel`` + ``arg_types_factory`` + struct pytrees.

The kernels of ``tests/support/kernels_fem.py`` are written as a Warp FEM library writes them (Stable Neo-Hookean
on linear tetrahedra, generic over the float type, ``region`` and ``materials`` structs read in ``wp.func`` helpers,
``wp.atomic_add`` scatters) and are used here as they are: the only glue is one ``arg_types_factory`` per kernel and
the structs given as pytrees (an ``eqx.Module`` and a dict; a float32 smoke test tries all six spellings). On a cube
split into six tetrahedra, in float64: energy, gradient, Hessian-vector product and Hessian diagonal against the same
energy written from the math in ``jax.numpy`` (with ``jax.grad``, ``jax.jvp`` and ``jax.hessian``), the energy's
Warp adjoint and the gradient kernel against finite differences, and ``vmap`` over displacements with the structs
closed over (concrete arrays) and over a struct's float field.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from jax.test_util import check_grads

from jarp.warp import jax_kernel
from tests.support import kernels_fem as kf

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)

# ======================================================================================================================
# The glue: one module per kernel, and the structs as eqx.Modules
# ======================================================================================================================

FUN = jax_kernel(kf.fun_kernel, arg_types_factory=kf.fun_arg_types, enable_backward=True)
GRAD = jax_kernel(kf.grad_kernel, arg_types_factory=kf.grad_arg_types)
HESS_PROD = jax_kernel(kf.hess_prod_kernel, arg_types_factory=kf.hess_prod_arg_types)
HESS_DIAG = jax_kernel(kf.hess_diag_kernel, arg_types_factory=kf.hess_diag_arg_types)


class Region(eqx.Module):
    cells: jax.Array  # (cells, 4) int32
    dhdX: jax.Array  # (cells, quadrature, 4, 3)
    dV: jax.Array  # (cells, quadrature)


class Materials(eqx.Module):
    mu: jax.Array  # (cells,)
    lmbda: jax.Array  # (cells,)


class StableNeoHookean(eqx.Module):
    """The library's energy as a JAX model: the four kernels launched over (cells, quadrature points)."""

    region: Any
    materials: Any

    def _dims(self, outputs: int) -> dict[str, Any]:
        dhdx = self.region["dhdX"] if isinstance(self.region, dict) else self.region.dhdX
        return {"launch_dims": tuple(dhdx.shape[:2]), "output_dims": outputs}

    def fun(self, u: jax.Array) -> jax.Array:
        (out,) = FUN(u, self.region, self.materials, **self._dims(1))
        return out[0]

    def grad(self, u: jax.Array) -> jax.Array:
        (out,) = GRAD(u, self.region, self.materials, **self._dims(u.shape[0]))
        return out

    def hess_prod(self, u: jax.Array, p: jax.Array) -> jax.Array:
        (out,) = HESS_PROD(u, p, self.region, self.materials, **self._dims(u.shape[0]))
        return out

    def hess_diag(self, u: jax.Array) -> jax.Array:
        (out,) = HESS_DIAG(u, self.region, self.materials, **self._dims(u.shape[0]))
        return out


# ======================================================================================================================
# A small mesh and the reference energy
# ======================================================================================================================


class Mesh(NamedTuple):
    X: np.ndarray  # (points, 3) rest positions
    cells: np.ndarray  # (cells, 4) int32, positively oriented
    mu: np.ndarray
    lmbda: np.ndarray


def _mesh() -> Mesh:
    """A unit cube (slightly perturbed) split into six tetrahedra along its diagonal (Kuhn's split)."""
    corners = np.array(list(itertools.product([0.0, 1.0], repeat=3)))  # corner index = 4x + 2y + z
    cells = []
    for axes in itertools.permutations(range(3)):
        corner, path = np.zeros(3, int), [0]
        for a in axes:
            corner[a] = 1
            path.append(int(corner @ [4, 2, 1]))
        cells.append(path)
    cells = np.array(cells, np.int32)
    rng = np.random.default_rng(0)
    X = corners + 0.05 * rng.standard_normal(corners.shape)
    for c in cells:
        if np.linalg.det((X[c[1:]] - X[c[0]]).T) < 0:
            c[[1, 2]] = c[[2, 1]]
    return Mesh(X, cells, rng.uniform(1.0, 2.0, len(cells)), rng.uniform(5.0, 10.0, len(cells)))


MESH = _mesh()


def _region_fields(mesh: Mesh, dtype: Any) -> dict[str, np.ndarray]:
    """What the library precomputes: shape-function gradients and volumes (one quadrature point per tet)."""
    Dm = np.stack([(mesh.X[c[1:]] - mesh.X[c[0]]).T for c in mesh.cells])
    Dm_inv = np.linalg.inv(Dm)
    dhdX = np.concatenate([-Dm_inv.sum(axis=1, keepdims=True), Dm_inv], axis=1)  # (cells, 4, 3)
    dV = np.abs(np.linalg.det(Dm)) / 6.0
    return {"cells": mesh.cells, "dhdX": dhdX[:, None].astype(dtype), "dV": dV[:, None].astype(dtype)}


def _model(spelling: str, dtype: Any = np.float64, mesh: Mesh = MESH) -> StableNeoHookean:
    r = {k: jnp.asarray(v) for k, v in _region_fields(mesh, dtype).items()}
    mu, lmbda = jnp.asarray(mesh.mu.astype(dtype)), jnp.asarray(mesh.lmbda.astype(dtype))
    if spelling == "eqx_module":
        return StableNeoHookean(Region(**r), Materials(mu, lmbda))
    return StableNeoHookean(r, {"mu": mu, "lmbda": lmbda})


@jax.jit  # compiled once per transformation: op by op, the float64 checks took seconds each
def reference_energy(u: jax.Array, mu: Any = None) -> jax.Array:
    """Stable Neo-Hookean from the math: ``F = Ds Dm^-1`` from deformed and rest edge vectors, volume ``|det Dm| / 6``,
    ``Psi = mu/2 (tr F^T F - 3) - mu (det F - 1) + lmbda/2 (det F - 1)^2``, on `MESH`."""
    mesh = MESH
    mu = jnp.asarray(mesh.mu) if mu is None else mu
    X = jnp.asarray(mesh.X)
    x = X + u

    def edges(p: jax.Array) -> jax.Array:
        return jnp.stack([p[mesh.cells[:, i]] - p[mesh.cells[:, 0]] for i in (1, 2, 3)], axis=-1)

    Dm = edges(X)
    F = edges(x) @ jnp.linalg.inv(Dm)
    J = jnp.linalg.det(F)
    psi = (
        0.5 * mu * (jnp.sum(F * F, axis=(1, 2)) - 3.0) - mu * (J - 1.0) + 0.5 * jnp.asarray(mesh.lmbda) * (J - 1.0) ** 2
    )
    return jnp.sum(jnp.abs(jnp.linalg.det(Dm)) / 6.0 * psi)


def _u_p(dtype: Any = np.float64) -> tuple[jax.Array, jax.Array]:
    rng = np.random.default_rng(1)
    u = 0.15 * rng.standard_normal(MESH.X.shape)
    p = rng.standard_normal(MESH.X.shape)
    return jnp.asarray(u.astype(dtype)), jnp.asarray(p.astype(dtype))


SPELLINGS = ["eqx_module", "dict"]

# ======================================================================================================================
# float64: against the jax.numpy reference and finite differences
# ======================================================================================================================


@pytest.mark.x64
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_energy_gradient_hessian_match_the_reference(spelling: str) -> None:
    model = _model(spelling)
    u, p = _u_p()
    e, g, hp, hd = jax.jit(lambda m, u, p: (m.fun(u), m.grad(u), m.hess_prod(u, p), m.hess_diag(u)))(model, u, p)
    assert e.dtype == g.dtype == hp.dtype == hd.dtype == jnp.float64
    assert g.shape == hp.shape == hd.shape == MESH.X.shape
    np.testing.assert_allclose(e, reference_energy(u), rtol=1e-13)
    np.testing.assert_allclose(g, jax.grad(reference_energy)(u), rtol=1e-11, atol=1e-13)
    np.testing.assert_allclose(hp, jax.jvp(jax.grad(reference_energy), (u,), (p,))[1], rtol=1e-11, atol=1e-12)
    hessian = jax.hessian(lambda v: reference_energy(v.reshape(u.shape)))(u.reshape(-1))
    np.testing.assert_allclose(hd.reshape(-1), jnp.diag(hessian), rtol=1e-11, atol=1e-12)
    # and eagerly, with the same values
    np.testing.assert_allclose(model.fun(u), e, rtol=1e-15)
    np.testing.assert_allclose(model.hess_diag(u), hd, rtol=1e-15)


@pytest.mark.x64
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_gradients_match_finite_differences(spelling: str) -> None:
    model = _model(spelling)
    u, p = _u_p()
    # the energy kernel's Warp adjoint, in u and in a struct's float array field (materials.mu)
    check_grads(model.fun, (u,), order=1, modes=["rev"])

    def energy_of_mu(mu: jax.Array) -> jax.Array:
        materials = (
            dataclasses.replace(model.materials, mu=mu)
            if isinstance(model.materials, Materials)
            else {**model.materials, "mu": mu}
        )
        return dataclasses.replace(model, materials=materials).fun(u)

    mu = jnp.asarray(MESH.mu)
    check_grads(energy_of_mu, (mu,), order=1, modes=["rev"])
    np.testing.assert_allclose(
        jax.grad(energy_of_mu)(mu), jax.grad(lambda m: reference_energy(u, mu=m))(mu), rtol=1e-12
    )
    # the gradient kernel is the derivative of the energy kernel, the Hessian product that of the gradient kernel
    eps = 1e-6
    central = (model.fun(u + eps * p) - model.fun(u - eps * p)) / (2 * eps)
    np.testing.assert_allclose(jnp.vdot(model.grad(u), p), central, rtol=1e-8)
    central = (model.grad(u + eps * p) - model.grad(u - eps * p)) / (2 * eps)
    np.testing.assert_allclose(model.hess_prod(u, p), central, rtol=1e-7, atol=1e-8)


@pytest.mark.x64
@pytest.mark.parametrize("spelling", SPELLINGS)
def test_vmap_over_displacements_and_materials(spelling: str) -> None:
    model = _model(spelling)
    u, _ = _u_p()
    us = jnp.stack([u, 0.5 * u, -u])
    # structs closed over: concrete arrays inside vmap and jit
    es = jax.jit(jax.vmap(model.fun))(us)
    gs = jax.vmap(model.grad)(us)
    np.testing.assert_allclose(es, jax.vmap(reference_energy)(us), rtol=1e-13)
    np.testing.assert_allclose(gs, jax.vmap(jax.grad(reference_energy))(us), rtol=1e-11, atol=1e-13)
    # a struct's float field batched
    mus = jnp.stack([jnp.asarray(MESH.mu), 2.0 * jnp.asarray(MESH.mu)])

    def with_mu(mu: jax.Array) -> StableNeoHookean:
        if isinstance(model.materials, Materials):
            return dataclasses.replace(model, materials=Materials(mu, model.materials.lmbda))
        return dataclasses.replace(model, materials={**model.materials, "mu": mu})

    hds = jax.vmap(lambda mu: with_mu(mu).hess_diag(u))(mus)
    for mu, hd in zip(mus, hds, strict=True):
        hessian = jax.hessian(lambda v, mu=mu: reference_energy(v.reshape(u.shape), mu=mu))(u.reshape(-1))
        np.testing.assert_allclose(hd.reshape(-1), jnp.diag(hessian), rtol=1e-11, atol=1e-12)


# ======================================================================================================================
# float32: the same kernels, every struct spelling
# ======================================================================================================================


@dataclasses.dataclass
class RegionData:
    cells: Any
    dhdX: Any
    dV: Any


class RegionTuple(NamedTuple):
    cells: Any
    dhdX: Any
    dV: Any


class Attrs:
    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)


WARP_DTYPES32 = {
    "cells": wp.vec4i,
    "dhdX": wp.types.matrix((4, 3), wp.float32),
    "dV": wp.float32,
    "mu": wp.float32,
    "lmbda": wp.float32,
}


def _warp_struct(struct_type: Any, fields: dict[str, Any]) -> Any:
    s = struct_type()
    for name, value in fields.items():
        setattr(s, name, wp.array(np.asarray(value), dtype=WARP_DTYPES32[name]))
    return s


def _spelled(spelling: str, region: dict[str, Any], materials: dict[str, Any]) -> tuple[Any, Any]:
    if spelling == "dict":
        return region, materials
    if spelling == "namedtuple":
        return RegionTuple(**region), {"mu": materials["mu"], "lmbda": materials["lmbda"]}
    if spelling == "dataclass":
        return RegionData(**region), Attrs(**materials)
    if spelling == "eqx_module":
        return Region(**region), Materials(**materials)
    if spelling == "object":
        return Attrs(**region), Attrs(**materials)
    return (
        _warp_struct(kf.RegionStruct[wp.float32], region),
        _warp_struct(kf.MaterialsStruct[wp.float32], materials),
    )


@pytest.mark.parametrize("spelling", ["dict", "namedtuple", "dataclass", "eqx_module", "object", "warp_struct"])
def test_float32_every_spelling(spelling: str) -> None:
    """Structs of arrays only (an integer array first): the generic kernels resolve to float32 in every spelling."""
    region = {k: jnp.asarray(v) for k, v in _region_fields(MESH, np.float32).items()}
    materials = {"mu": jnp.asarray(MESH.mu, jnp.float32), "lmbda": jnp.asarray(MESH.lmbda, jnp.float32)}
    r, m = _spelled(spelling, region, materials)
    u, _ = _u_p(np.float32)
    dims = {"launch_dims": (len(MESH.cells), 1)}
    (e,) = FUN(u, r, m, output_dims=1, **dims)
    (g,) = jax.jit(lambda u: GRAD(u, r, m, output_dims=u.shape[0], **dims))(u)
    (gs,) = jax.vmap(lambda u: GRAD(u, r, m, output_dims=u.shape[0], **dims))(jnp.stack([u, -u]))
    assert e.dtype == g.dtype == jnp.float32
    np.testing.assert_allclose(e[0], reference_energy(u), rtol=1e-4)  # the reference in float32 too
    expected = jax.grad(reference_energy)(u)
    np.testing.assert_allclose(g, expected, rtol=1e-3, atol=1e-4)
    np.testing.assert_allclose(gs[0], g, rtol=1e-6)
