"""Recover the Young's modulus of each region of a sagging hyperelastic beam from its observed deformation.

A 3-D finite-element example. A rectangular beam, meshed in the script into tetrahedra (a structured grid of boxes,
six tetrahedra each), is clamped at one end and sags under its own weight. Its elastic energy is Stable Neo-Hookean
(Smith, de Goes and Kim 2018, without the logarithmic term), written as four Warp kernels in float64 that take the
mesh and the material as ``wp.struct`` parameters: the energy, its gradient, the exact Hessian-vector product and the
Hessian diagonal, one thread per tetrahedron, scattered with ``wp.atomic_add``. `jarp.warp.energy` makes them one
differentiable `jarp.warp.Energy`, held by `Beam`, an ``eqx.Module`` whose learnable parameter is the logarithm of the
Young's modulus of every region of the beam (regions are slices along its length).

The "observed" deformation is the equilibrium under the true moduli. Training minimises the misfit
``|x*(E) - x_obs|^2`` where ``x*(E)`` is the equilibrium for the moduli ``E``:

* the equilibrium is a root of the residual (the out-of-balance force on the free nodes), found by
  `optimistix.Newton` whose linear solver is `lineax.CG` over the Warp Hessian-product kernel (through
  ``jax.linearize`` of ``Energy.grad``). Optimistix hands its linear solver no preconditioner, so the Jacobi
  preconditioner (the Hessian-diagonal kernel) enters as a symmetric diagonal change of variables of the root find;
  the first solve from the rest shape steps the load up;
* the gradient of the misfit comes from `optimistix.ImplicitAdjoint` (the implicit function theorem: one more CG
  solve with the Hessian kernel and Warp's adjoint of the gradient kernel with respect to the moduli);
* the optimiser is `optax.adam` with a cosine-decay schedule, the whole outer step under `eqx.filter_jit`.

The trained model is saved with `eqx.tree_serialise_leaves` and reloaded, and a PNG shows the beam coloured by
region, the observed and recovered deformed shapes, the loss curve and the true and recovered moduli.

The physics runs in float64: `main` turns ``jax_enable_x64`` on. Importing this module only defines the kernels and
the model (no JAX flag changes), so other scripts (``benchmarks/bench_fem.py``) can reuse `make_beam` and the kernels.

Run (needs the ``examples`` extra: ``pip install -e .[examples]``):

    python examples/hyperelastic.py                      # 12 x 3 x 3 cells (648 tets), 3 regions, 100 steps
    python examples/hyperelastic.py --nx 6 --ny 2 --nz 2 --regions 2 --steps 15 --out /tmp/fem
"""

from __future__ import annotations

import argparse
import math
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import lineax as lx
import numpy as np
import optax
import optimistix as optx
import warp as wp
from jaxtyping import Array, Float, Int

import jarp.warp

wp.config.log_level = wp.LOG_WARNING  # no banner, no per-module load lines

DENSITY = 1000.0  # kg / m^3 (rubber-like)
GRAVITY = 9.81  # m / s^2, along -z
POISSON = 0.3
YOUNGS = 1.0e6  # Pa: the initial guess of every region's Young's modulus, and the scale of the true ones

# ----------------------------------------------------------------------------------------------------------------------
# Warp kernels: Stable Neo-Hookean energy of a tetrahedral mesh, its gradient, Hessian product and Hessian diagonal
# ----------------------------------------------------------------------------------------------------------------------
#
# Per tetrahedron e with deformation gradient F = Ds Dm^-1 (Ds: edge vectors x_i - x_0 as columns, Dm: the same at
# rest), volume V, Lame parameters mu and lam:
#
#     Psi(F) = mu/2 (|F|^2 - 3) + lam/2 (det F - alpha)^2 - lam/2 (1 - alpha)^2,     alpha = 1 + mu/lam
#
# (the constant makes Psi(I) = 0; alpha makes the rest shape stress free). With lam = lam_L + mu, where mu and lam_L
# are the Lame parameters of Young's modulus E and Poisson's ratio nu, the linearisation at rest is linear elasticity
# with (E, nu). The first Piola-Kirchhoff stress is P = mu F + lam (J - alpha) cof F, with cof F = dJ/dF, whose columns
# are f1 x f2, f2 x f0, f0 x f1 (f_k the columns of F). The nodal gradient is V P Dm^-T (columns: vertices 1..3;
# vertex 0 takes minus their sum). Its derivative along dF = dDs Dm^-1 is
#
#     dP = mu dF + lam (cof F : dF) cof F + lam (J - alpha) dcof,   dcof = (df1 x f2 + f1 x df2, ...),
#
# which is the exact Hessian product (no 12 x 12 matrix). On the diagonal, dF = e_i b^T is rank one (b a row of
# Dm^-1, or minus their sum for vertex 0), along which det is linear, so H_ii = V (mu |b|^2 + lam (cof F b)_i^2).


@wp.struct
class Mesh:
    """The rest shape: connectivity, inverse rest edge matrices and rest volumes, one entry per tetrahedron."""

    tets: wp.array(dtype=wp.vec4i)
    Dm_inv: wp.array(dtype=wp.mat33d)
    vol: wp.array(dtype=wp.float64)


@wp.struct
class Material:
    """The region of every tetrahedron and the Poisson ratio (a value field: static, baked into the launch)."""

    region: wp.array(dtype=wp.int32)
    poisson: wp.float64


@wp.func
def lame(mat: Material, log_youngs: wp.array(dtype=wp.float64), e: int):
    """(mu, lam) of tetrahedron ``e``: its region's Young's modulus, the SNH ``lam = lam_L + mu``."""
    youngs = wp.exp(log_youngs[mat.region[e]])
    nu = mat.poisson
    one = wp.float64(1.0)
    mu = youngs / (wp.float64(2.0) * (one + nu))
    lam = youngs * nu / ((one + nu) * (one - wp.float64(2.0) * nu)) + mu
    return wp.vec2d(mu, lam)


@wp.func
def deformation_gradient(x: wp.array(dtype=wp.vec3d), mesh: Mesh, e: int):
    """F = Ds Dm^-1 of tetrahedron ``e`` at positions ``x``."""
    t = mesh.tets[e]
    x0 = x[t[0]]
    ds = wp.matrix_from_cols(x[t[1]] - x0, x[t[2]] - x0, x[t[3]] - x0)
    return ds * mesh.Dm_inv[e]


@wp.func
def cofactor(f: wp.mat33d):
    """cof F = dJ/dF: columns f1 x f2, f2 x f0, f0 x f1."""
    c = wp.transpose(f)  # rows of c are the columns of f
    return wp.matrix_from_cols(wp.cross(c[1], c[2]), wp.cross(c[2], c[0]), wp.cross(c[0], c[1]))


@wp.func
def scatter(out: wp.array(dtype=wp.vec3d), t: wp.vec4i, h: wp.mat33d):
    """Add the columns of ``h`` to vertices 1..3 of ``t`` and minus their sum to vertex 0."""
    c = wp.transpose(h)
    wp.atomic_add(out, t[0], -(c[0] + c[1] + c[2]))
    wp.atomic_add(out, t[1], c[0])
    wp.atomic_add(out, t[2], c[1])
    wp.atomic_add(out, t[3], c[2])


@wp.kernel
def snh_energy_kernel(
    x: wp.array(dtype=wp.vec3d),
    mesh: Mesh,
    mat: Material,
    log_youngs: wp.array(dtype=wp.float64),
    energy: wp.array(dtype=wp.float64),
):
    """Accumulate tetrahedron ``e``'s elastic energy ``V Psi(F)`` into ``energy[0]`` (a pure output: starts at 0)."""
    e = wp.tid()
    ml = lame(mat, log_youngs, e)
    mu = ml[0]
    lam = ml[1]
    f = deformation_gradient(x, mesh, e)
    alpha = wp.float64(1.0) + mu / lam
    j = wp.determinant(f)
    half = wp.float64(0.5)
    rest = (wp.float64(1.0) - alpha) * (wp.float64(1.0) - alpha)
    psi = half * mu * (wp.ddot(f, f) - wp.float64(3.0)) + half * lam * ((j - alpha) * (j - alpha) - rest)
    wp.atomic_add(energy, 0, mesh.vol[e] * psi)


@wp.kernel
def snh_grad_kernel(
    x: wp.array(dtype=wp.vec3d),
    mesh: Mesh,
    mat: Material,
    log_youngs: wp.array(dtype=wp.float64),
    grad: wp.array(dtype=wp.vec3d),
):
    """Scatter tetrahedron ``e``'s energy gradient ``V P Dm^-T`` onto its four vertices."""
    e = wp.tid()
    ml = lame(mat, log_youngs, e)
    mu = ml[0]
    lam = ml[1]
    f = deformation_gradient(x, mesh, e)
    alpha = wp.float64(1.0) + mu / lam
    p = mu * f + lam * (wp.determinant(f) - alpha) * cofactor(f)
    scatter(grad, mesh.tets[e], mesh.vol[e] * p * wp.transpose(mesh.Dm_inv[e]))


@wp.kernel
def snh_hess_prod_kernel(
    x: wp.array(dtype=wp.vec3d),
    mesh: Mesh,
    mat: Material,
    log_youngs: wp.array(dtype=wp.float64),
    v: wp.array(dtype=wp.vec3d),
    hv: wp.array(dtype=wp.vec3d),
):
    """Scatter tetrahedron ``e``'s part of the exact Hessian-vector product ``H(x) v``."""
    e = wp.tid()
    ml = lame(mat, log_youngs, e)
    mu = ml[0]
    lam = ml[1]
    t = mesh.tets[e]
    dm_inv = mesh.Dm_inv[e]
    f = deformation_gradient(x, mesh, e)
    v0 = v[t[0]]
    df = wp.matrix_from_cols(v[t[1]] - v0, v[t[2]] - v0, v[t[3]] - v0) * dm_inv
    c = wp.transpose(f)
    d = wp.transpose(df)
    dcof = wp.matrix_from_cols(
        wp.cross(d[1], c[2]) + wp.cross(c[1], d[2]),
        wp.cross(d[2], c[0]) + wp.cross(c[2], d[0]),
        wp.cross(d[0], c[1]) + wp.cross(c[0], d[1]),
    )
    cof = cofactor(f)
    alpha = wp.float64(1.0) + mu / lam
    dp = mu * df + lam * wp.ddot(cof, df) * cof + lam * (wp.determinant(f) - alpha) * dcof
    scatter(hv, t, mesh.vol[e] * dp * wp.transpose(dm_inv))


@wp.func
def add_diag(
    diag: wp.array(dtype=wp.vec3d),
    i: int,
    b: wp.vec3d,
    cof: wp.mat33d,
    mu: wp.float64,
    lam: wp.float64,
    vol: wp.float64,
):
    """Add ``V (mu |b|^2 + lam (cof b)_k^2)`` to the three diagonal entries of vertex ``i``."""
    cb = cof * b
    one = wp.float64(1.0)
    wp.atomic_add(diag, i, vol * (mu * wp.dot(b, b) * wp.vec3d(one, one, one) + lam * wp.cw_mul(cb, cb)))


@wp.kernel
def snh_hess_diag_kernel(
    x: wp.array(dtype=wp.vec3d),
    mesh: Mesh,
    mat: Material,
    log_youngs: wp.array(dtype=wp.float64),
    diag: wp.array(dtype=wp.vec3d),
):
    """Scatter tetrahedron ``e``'s part of the Hessian's diagonal ``V (mu |b|^2 + lam (cof F b)_i^2)``."""
    e = wp.tid()
    ml = lame(mat, log_youngs, e)
    mu = ml[0]
    lam = ml[1]
    t = mesh.tets[e]
    dm_inv = mesh.Dm_inv[e]
    cof = cofactor(deformation_gradient(x, mesh, e))
    vol = mesh.vol[e]
    b0 = -(dm_inv[0] + dm_inv[1] + dm_inv[2])
    add_diag(diag, t[0], b0, cof, mu, lam, vol)
    add_diag(diag, t[1], dm_inv[0], cof, mu, lam, vol)
    add_diag(diag, t[2], dm_inv[1], cof, mu, lam, vol)
    add_diag(diag, t[3], dm_inv[2], cof, mu, lam, vol)


class MeshArrays(eqx.Module):
    """The JAX side of the `Mesh` struct: its array fields by name (operands of every launch)."""

    tets: Int[Array, "tets 4"]
    Dm_inv: Float[Array, "tets 3 3"]
    vol: Float[Array, " tets"]


class MaterialArrays(eqx.Module):
    """The JAX side of the `Material` struct: the region array, and the Poisson ratio as a static Python float."""

    region: Int[Array, " tets"]
    poisson: float = eqx.field(static=True)


def snh_energy(n_nodes: int, n_tets: int) -> jarp.warp.Energy:
    """The four kernels as one `jarp.warp.Energy` ``E(x, mesh, material, log_youngs)``.

    Every kernel launches one thread per tetrahedron; gradient-like outputs hold one ``vec3d`` per node. The energy
    and gradient modules are built with ``enable_backward=True``: the derivatives with respect to ``log_youngs``
    (the implicit gradient of the fit) go through Warp's adjoint of those kernels. The Hessian product is the exact
    Hessian (``hessian="exact"``), so JAX uses it as the derivative of ``E.grad``.
    """

    def module(kernel: wp.Kernel, out: int, backward: bool = False) -> jarp.warp.JaxKernel:
        return jarp.warp.jax_kernel(kernel, launch_dims=n_tets, output_dims=out, enable_backward=backward)

    return jarp.warp.energy(
        module(snh_energy_kernel, 1, True),
        module(snh_grad_kernel, n_nodes, True),
        module(snh_hess_prod_kernel, n_nodes),
        module(snh_hess_diag_kernel, n_nodes),
    )


# ----------------------------------------------------------------------------------------------------------------------
# The mesh: a box of nx x ny x nz cells, six tetrahedra per cell
# ----------------------------------------------------------------------------------------------------------------------


class BeamMesh(NamedTuple):
    """A tetrahedral beam as NumPy arrays (float64 and int32)."""

    rest: np.ndarray  # (nodes, 3) rest positions
    tets: np.ndarray  # (tets, 4) vertex indices, positively oriented
    Dm_inv: np.ndarray  # (tets, 3, 3) inverse rest edge matrices
    vol: np.ndarray  # (tets,) rest volumes
    region: np.ndarray  # (tets,) region index: slices along the length
    clamped: np.ndarray  # (nodes,) True on the clamped end (x = 0)


# Kuhn's subdivision of the unit cube: one tetrahedron per ordering of the axes, each a path from corner 000 to 111.
# Every face is cut along the diagonal from its lowest to its highest corner, so neighbouring cells conform.
_KUHN = [(0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0)]


def make_beam(
    nx: int, ny: int, nz: int, size: tuple[float, float, float] = (1.0, 0.2, 0.2), regions: int = 1
) -> BeamMesh:
    """A box ``[0, size[0]] x [0, size[1]] x [0, size[2]]`` of ``nx * ny * nz`` cells, 6 tetrahedra each.

    Args:
        nx, ny, nz: cells along the length (x), the width (y) and the height (z), each >= 1.
        size: the box's extent along x, y, z.
        regions: slices of the beam along x, by tetrahedron centroid; ``region`` numbers them from the clamped end.

    Returns:
        A `BeamMesh` with ``6 * nx * ny * nz`` tetrahedra and ``(nx + 1) (ny + 1) (nz + 1)`` nodes.

    Example:
        ```python
        mesh = make_beam(100, 10, 10)  # 60,000 tetrahedra
        ```
    """
    if min(nx, ny, nz) < 1 or regions < 1:
        raise ValueError(f"make_beam: need nx, ny, nz >= 1 and regions >= 1, got {(nx, ny, nz)}, regions={regions}")
    shape = (nx + 1, ny + 1, nz + 1)
    grid = np.stack(np.meshgrid(*(np.linspace(0.0, s, n) for s, n in zip(size, shape, strict=True)), indexing="ij"))
    rest = grid.reshape(3, -1).T.copy()
    index = np.arange(rest.shape[0]).reshape(shape)
    base = np.stack(np.meshgrid(np.arange(nx), np.arange(ny), np.arange(nz), indexing="ij"), -1).reshape(-1, 3)
    tets = []
    for order in _KUHN:
        corner = base.copy()
        path = [index[tuple(corner.T)]]
        for axis in order:
            corner[:, axis] += 1
            path.append(index[tuple(corner.T)])
        tets.append(np.stack(path, -1))
    tets_np = np.concatenate(tets).astype(np.int32)
    dm = np.stack([rest[tets_np[:, k]] - rest[tets_np[:, 0]] for k in (1, 2, 3)], axis=-1)  # edge vectors as columns
    flip = np.linalg.det(dm) < 0  # odd orderings come out inverted: swap two vertices
    tets_np[flip] = tets_np[flip][:, [0, 2, 1, 3]]
    dm[flip] = dm[flip][:, :, [1, 0, 2]]
    vol = np.linalg.det(dm) / 6.0
    centroid = rest[tets_np].mean(axis=1)
    region = np.minimum((centroid[:, 0] / size[0] * regions).astype(np.int32), regions - 1)
    return BeamMesh(rest, tets_np, np.linalg.inv(dm), vol, region.astype(np.int32), rest[:, 0] == 0.0)


def snh_energy_ref(
    x: Float[Array, "nodes 3"], mesh: MeshArrays, material: MaterialArrays, log_youngs: Float[Array, " regions"]
) -> Float[Array, ""]:
    """The same Stable Neo-Hookean energy in `jax.numpy` (the tests' reference and the benchmark's baseline)."""
    t = mesh.tets
    ds = jnp.stack([x[t[:, k]] - x[t[:, 0]] for k in (1, 2, 3)], axis=-1)
    f = ds @ mesh.Dm_inv
    youngs = jnp.exp(log_youngs)[material.region]
    nu = material.poisson
    mu = youngs / (2.0 * (1.0 + nu))
    lam = youngs * nu / ((1.0 + nu) * (1.0 - 2.0 * nu)) + mu
    alpha = 1.0 + mu / lam
    j = jnp.linalg.det(f)
    psi = 0.5 * mu * (jnp.sum(f * f, axis=(1, 2)) - 3.0) + 0.5 * lam * ((j - alpha) ** 2 - (1.0 - alpha) ** 2)
    return jnp.sum(mesh.vol * psi)


# ----------------------------------------------------------------------------------------------------------------------
# The model: a clamped beam under gravity, with a learnable Young's modulus per region
# ----------------------------------------------------------------------------------------------------------------------


class SolverOptions(eqx.Module):
    """Tolerances of the Newton-CG equilibrium solve and of the adjoint CG solve (static: part of the program)."""

    tol: float = eqx.field(static=True, default=1e-9)  # Newton: on the Jacobi-scaled residual and on the step
    max_newton: int = eqx.field(static=True, default=40)
    cg_rtol: float = eqx.field(static=True, default=1e-8)  # every Newton step's CG solve
    cg_atol: float = eqx.field(static=True, default=1e-13)  # lineax's scale is per entry: atol > 0 for zero entries
    cg_max_steps: int = eqx.field(static=True, default=5000)
    adjoint_rtol: float = eqx.field(static=True, default=1e-10)  # the implicit adjoint's CG solve


class Beam(eqx.Module):
    """A tetrahedral beam, clamped at ``x = 0``, under its own weight, with a learnable modulus per region.

    The unknowns are the displacements ``u`` of the nodes (zero on the clamped ones, by the 0/1 mask ``free``); the
    positions are ``rest + free * u``. The total energy is the elastic energy (the Warp kernels) minus the work of the
    nodal weights ``load``.
    """

    log_youngs: Float[Array, " regions"]  # the only trained leaf: log of Young's modulus (Pa) per region
    rest: Float[Array, "nodes 3"]
    mesh: MeshArrays
    material: MaterialArrays
    free: Float[Array, "nodes 3"]
    load: Float[Array, "nodes 3"]  # gravity (a quarter of every tet's weight on each of its nodes) and an end weight
    cell: float = eqx.field(static=True)  # the mesh size: displacements are solved for in units of it
    energy: jarp.warp.Energy
    options: SolverOptions

    def __init__(self, mesh: BeamMesh, log_youngs: Float[Array, " regions"], options: SolverOptions | None = None):
        """The model of ``mesh`` with moduli ``exp(log_youngs)``; the kernels are sized from the mesh."""
        self.log_youngs = log_youngs
        self.rest = jnp.asarray(mesh.rest)
        self.mesh = MeshArrays(jnp.asarray(mesh.tets), jnp.asarray(mesh.Dm_inv), jnp.asarray(mesh.vol))
        self.material = MaterialArrays(jnp.asarray(mesh.region), POISSON)
        free = np.where(mesh.clamped[:, None], 0.0, 1.0) * np.ones((1, 3))
        weight = np.zeros_like(mesh.rest)
        np.add.at(weight[:, 2], mesh.tets.ravel(), np.repeat(-DENSITY * GRAVITY * mesh.vol / 4.0, 4))
        # plus a weight hung from the free end, as heavy as the beam, spread over the end face's nodes
        tip = mesh.rest[:, 0] == mesh.rest[:, 0].max()
        weight[tip, 2] -= DENSITY * GRAVITY * mesh.vol.sum() / tip.sum()
        self.free = jnp.asarray(free)
        self.load = jnp.asarray(free * weight)
        self.cell = float(np.cbrt(np.mean(mesh.vol) * 6.0))
        self.energy = snh_energy(mesh.rest.shape[0], mesh.tets.shape[0])
        self.options = SolverOptions() if options is None else options

    def args(self) -> tuple[MeshArrays, MaterialArrays, Float[Array, " regions"]]:
        """The kernels' parameters after ``x``: the two structs (as pytrees) and the moduli array."""
        return self.mesh, self.material, self.log_youngs

    def positions(self, u: Float[Array, "nodes 3"]) -> Float[Array, "nodes 3"]:
        """Node positions for displacements ``u`` (the clamped nodes stay at rest)."""
        return self.rest + self.free * u

    def residual(self, u: Float[Array, "nodes 3"], load_factor: float | jax.Array = 1.0) -> Float[Array, "nodes 3"]:
        """The out-of-balance force ``dE/dx - load`` on the free degrees of freedom (the Warp gradient kernel)."""
        return self.free * (self.energy.grad(self.positions(u), *self.args()) - load_factor * self.load)

    def jacobi(self, u: Float[Array, "nodes 3"]) -> Float[Array, "nodes 3"]:
        """The Hessian diagonal at ``u`` on the free degrees of freedom (the Warp kernel), 1 on the clamped ones."""
        return self.free * self.energy.hess_diag(self.positions(u), *self.args()) + (1.0 - self.free)


def _scaled_residual(z: Float[Array, "nodes 3"], args: tuple[Beam, jax.Array, jax.Array, jax.Array]) -> jax.Array:
    """The root find's function: the residual in Jacobi-scaled variables.

    With ``D`` the Hessian diagonal (mean ``d`` over the free entries) and ``s = sqrt(D / d)``, the unknowns are
    ``z = s u / h`` and the residual is ``r / (h d s)``: its Jacobian is ``S^-1 (H / d) S^-1``, the Jacobi-
    preconditioned Hessian (unit diagonal), symmetric positive definite near a stable equilibrium. On the clamped
    degrees of freedom the residual is ``z`` itself (their displacement is zero).
    """
    beam, s, d, load_factor = args
    u = beam.cell * z / s
    return beam.residual(u, load_factor) / (beam.cell * d * s) + (1.0 - beam.free) * z


def _newton(beam: Beam, u_init: jax.Array, load_factor: float) -> jax.Array:
    """One equilibrium solve at ``load_factor`` times the load, from ``u_init``, differentiable by `ImplicitAdjoint`."""
    opts = beam.options
    # A fixed change of variables for the solve (not differentiated: the root does not depend on it).
    diag = jax.lax.stop_gradient(beam).jacobi(jax.lax.stop_gradient(u_init))
    d = jnp.sum(beam.free * diag) / jnp.sum(beam.free)
    s = jnp.sqrt(diag / d)
    z0 = jax.lax.stop_gradient(s * u_init / beam.cell)
    tags = frozenset({lx.symmetric_tag, lx.positive_semidefinite_tag})
    solver = optx.Newton(
        rtol=opts.tol,
        atol=opts.tol,
        linear_solver=lx.CG(rtol=opts.cg_rtol, atol=opts.cg_atol, max_steps=opts.cg_max_steps),
    )
    adjoint = optx.ImplicitAdjoint(
        linear_solver=lx.CG(rtol=opts.adjoint_rtol, atol=opts.cg_atol, max_steps=opts.cg_max_steps)
    )
    sol = optx.root_find(
        _scaled_residual,
        solver,
        z0,
        (beam, s, d, jnp.asarray(load_factor, z0.dtype)),
        adjoint=adjoint,
        tags=tags,
        max_steps=opts.max_newton,
    )
    return beam.cell * sol.value / s


def equilibrium(beam: Beam, u_init: Float[Array, "nodes 3"], load_steps: int = 1) -> Float[Array, "nodes 3"]:
    """The equilibrium displacements of ``beam`` under its full load, differentiable with respect to the beam.

    From ``u_init``, the load is stepped up in ``load_steps`` equal increments (Newton from the rest shape under the
    full load can overshoot into inverted elements); only the last solve is differentiated, by the implicit function
    theorem, so the gradient does not depend on how the equilibrium was reached.
    """
    u = jax.lax.stop_gradient(u_init)
    frozen = jax.lax.stop_gradient(beam)
    for step in range(1, load_steps):
        u = _newton(frozen, u, step / load_steps)
    return _newton(beam, u, 1.0)


def misfit(beam: Beam, u: Float[Array, "nodes 3"], u_obs: Float[Array, "nodes 3"]) -> Float[Array, ""]:
    """``|u - u_obs|^2`` over the free nodes, relative to ``|u_obs|^2``."""
    return jnp.sum(beam.free * (u - u_obs) ** 2) / jnp.sum(beam.free * u_obs**2)


def fit_loss(
    beam: Beam, u_init: Float[Array, "nodes 3"], u_obs: Float[Array, "nodes 3"], load_steps: int = 1
) -> tuple[Float[Array, ""], Float[Array, "nodes 3"]]:
    """The outer loss of ``beam`` against the observed displacements, and the equilibrium it was computed at."""
    u = equilibrium(beam, u_init, load_steps)
    return misfit(beam, u, u_obs), u


# ----------------------------------------------------------------------------------------------------------------------
# Training: optax Adam on log_youngs, the whole step under eqx.filter_jit
# ----------------------------------------------------------------------------------------------------------------------


def trainable(beam: Beam) -> Beam:
    """Filter spec selecting ``log_youngs``, the only trained leaf."""
    spec = jax.tree_util.tree_map(lambda _: False, beam)
    return eqx.tree_at(lambda b: b.log_youngs, spec, replace=True)


def optimiser(lr: float, steps: int) -> optax.GradientTransformation:
    """Adam with a cosine decay of the learning rate to a tenth of ``lr`` over ``steps``."""
    return optax.adam(optax.cosine_decay_schedule(lr, max(steps, 1), alpha=0.1))


@eqx.filter_jit
def train_step(
    params: Beam,
    static: Beam,
    opt: optax.GradientTransformation,
    opt_state: Any,
    u_init: Float[Array, "nodes 3"],
    u_obs: Float[Array, "nodes 3"],
    load_steps: int = 1,
) -> tuple[Beam, Any, Float[Array, ""], Float[Array, "nodes 3"]]:
    """One outer step: equilibrium solve, implicit gradient, optax update.

    Returns the new parameters and optimiser state, the loss before the update and the equilibrium it was computed
    at (the warm start of the next solve).
    """

    def loss_fn(p: Beam) -> tuple[Float[Array, ""], Float[Array, "nodes 3"]]:
        return fit_loss(eqx.combine(p, static), u_init, u_obs, load_steps)

    (loss, u), grads = eqx.filter_value_and_grad(loss_fn, has_aux=True)(params)
    # optax's bias correction mixes an int32 count with floats: JAX's standard promotion, whatever the caller's
    with jax.numpy_dtype_promotion("standard"):
        updates, opt_state = opt.update(grads, opt_state, params)
    return eqx.apply_updates(params, updates), opt_state, loss, u


@eqx.filter_jit
def solve(beam: Beam, u_init: Float[Array, "nodes 3"], load_steps: int = 1) -> Float[Array, "nodes 3"]:
    """Jitted `equilibrium` (the forward solve alone)."""
    return equilibrium(beam, u_init, load_steps)


def true_log_youngs(regions: int, seed: int) -> Float[Array, " regions"]:
    """The hidden moduli: ``YOUNGS`` times a log-normal factor within [0.5, 2]."""
    rng = np.random.default_rng(seed)
    return jnp.asarray(math.log(YOUNGS) + np.clip(0.4 * rng.standard_normal(regions), -0.69, 0.69))


def progress(steps: int) -> tuple[Iterable[int], Callable[[str], None], Callable[[float], None]]:
    """A tqdm bar when tqdm is installed (the ``examples`` extra), plain prints otherwise."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return range(steps), print, lambda loss: None
    bar = tqdm(range(steps), desc="fitting Young's moduli", disable=None)
    return bar, tqdm.write, lambda loss: bar.set_postfix(loss=f"{loss:.2e}")


def modulus_error(beam: Beam, youngs_true: np.ndarray) -> float:
    """The largest relative error of the recovered moduli."""
    return float(np.max(np.abs(np.exp(np.asarray(beam.log_youngs)) - youngs_true) / youngs_true))


def surface(tets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The boundary triangles of a tetrahedral mesh (faces owned by one tet) and the tet owning each."""
    faces = tets[:, [[1, 2, 3], [0, 2, 3], [0, 1, 3], [0, 1, 2]]].reshape(-1, 3)
    key = np.sort(faces, axis=1)
    _, inverse, count = np.unique(key, axis=0, return_inverse=True, return_counts=True)
    boundary = count[inverse.ravel()] == 1
    return faces[boundary], np.repeat(np.arange(len(tets)), 4)[boundary]


def plot(
    path: Path,
    losses: list[float],
    mesh: BeamMesh,
    x_obs: np.ndarray,
    x_fit: np.ndarray,
    x_init: np.ndarray,
    youngs_true: np.ndarray,
    youngs_fit: np.ndarray,
) -> None:
    """Write the PNG: the observed deformed beam coloured by region, side views, the loss, true vs recovered moduli."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from mpl_toolkits.mplot3d.art3d import Poly3DCollection

    faces, owner = surface(mesh.tets)
    fig = plt.figure(figsize=(19, 4.8))
    grid = fig.add_gridspec(1, 4, width_ratios=[1.3, 1.1, 0.9, 0.9])

    ax3 = fig.add_subplot(grid[0], projection="3d")
    cmap = plt.get_cmap("viridis")
    value = youngs_true[mesh.region[owner]] / 1e6
    norm = matplotlib.colors.Normalize(value.min(), value.max() + 1e-9)
    ax3.add_collection3d(Poly3DCollection(mesh.rest[faces], facecolors="none", edgecolors="0.8", linewidths=0.2))
    ax3.add_collection3d(
        Poly3DCollection(x_obs[faces], facecolors=cmap(norm(value)), edgecolors="k", linewidths=0.15, alpha=0.95)
    )
    lo = np.minimum(mesh.rest.min(0), x_obs.min(0))
    hi = np.maximum(mesh.rest.max(0), x_obs.max(0))
    ax3.set(xlim=(lo[0], hi[0]), ylim=(lo[1], hi[1]), zlim=(lo[2], hi[2]), xlabel="x (m)", zlabel="z (m)", yticks=[])
    ax3.set_box_aspect(hi - lo)
    ax3.view_init(elev=18, azim=-60)
    ax3.set_title("observed deformation, coloured by true E (MPa)")
    fig.colorbar(matplotlib.cm.ScalarMappable(norm, cmap), ax=ax3, fraction=0.03, pad=0.08, label="E (MPa)")

    ax_side = fig.add_subplot(grid[1])
    edges = np.unique(np.sort(faces[:, [[0, 1], [1, 2], [2, 0]]].reshape(-1, 2), axis=1), axis=0)
    from matplotlib.collections import LineCollection

    def side(x: np.ndarray) -> np.ndarray:
        return x[edges][:, :, [0, 2]]

    ax_side.add_collection(LineCollection(side(mesh.rest), colors="0.85", linewidths=0.5, label="rest"))
    ax_side.add_collection(LineCollection(side(x_init), colors="tab:green", linewidths=0.5, label="initial guess"))
    ax_side.add_collection(LineCollection(side(x_obs), colors="tab:blue", linewidths=1.6, label="observed (true E)"))
    ax_side.add_collection(
        LineCollection(side(x_fit), colors="tab:red", linewidths=0.7, linestyles="--", label="recovered (fitted E)")
    )
    ax_side.autoscale()
    ax_side.set_aspect("equal")
    ax_side.set(xlabel="x (m)", ylabel="z (m)", title="side view: clamped at x = 0, under gravity and an end weight")
    ax_side.legend(loc="lower left", fontsize=8)

    ax_loss = fig.add_subplot(grid[2])
    ax_loss.semilogy(np.arange(1, len(losses) + 1), losses)
    ax_loss.set(xlabel="Adam step", ylabel="relative misfit |u*(E) - u_obs|^2", title="loss")
    ax_loss.grid(True, which="both", alpha=0.3)

    ax_e = fig.add_subplot(grid[3])
    idx = np.arange(len(youngs_true))
    ax_e.bar(idx - 0.2, youngs_true / 1e6, width=0.4, label="true", color="tab:blue")
    ax_e.bar(idx + 0.2, youngs_fit / 1e6, width=0.4, label="recovered", color="tab:red")
    ax_e.axhline(YOUNGS / 1e6, color="tab:green", lw=1, ls=":", label="initial guess")
    ax_e.set(xlabel="region (from the clamped end)", ylabel="Young's modulus (MPa)", title="per-region modulus")
    ax_e.set_xticks(idx)
    ax_e.legend(fontsize=8)

    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    """Generate the observation, fit the moduli, save/reload the model and write the PNG."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nx", type=int, default=12, help="cells along the beam (x)")
    parser.add_argument("--ny", type=int, default=3, help="cells across (y)")
    parser.add_argument("--nz", type=int, default=3, help="cells through the height (z)")
    parser.add_argument("--regions", type=int, default=3, help="slices along the beam, each with its own modulus")
    parser.add_argument("--steps", type=int, default=100, help="Adam steps")
    parser.add_argument("--lr", type=float, default=0.05, help="initial Adam learning rate (on log E)")
    parser.add_argument("--load-steps", type=int, default=4, help="load increments of the first solves from rest")
    parser.add_argument("--seed", type=int, default=0, help="seed of the hidden moduli")
    parser.add_argument("--out", type=Path, default=None, help="output directory (default: a new temporary one)")
    args = parser.parse_args(argv)
    if min(args.nx, args.ny, args.nz) < 1 or not 1 <= args.regions <= args.nx or args.steps < 1:
        parser.error("need --nx, --ny, --nz >= 1, 1 <= --regions <= --nx and --steps >= 1")
    out = args.out if args.out is not None else Path(tempfile.mkdtemp(prefix="jarp_hyperelastic_"))
    out.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_enable_x64", True)  # the physics runs in float64: before any array is created

    start = time.perf_counter()
    mesh = make_beam(args.nx, args.ny, args.nz, regions=args.regions)
    youngs_true = np.exp(np.asarray(true_log_youngs(args.regions, args.seed)))
    true_beam = Beam(mesh, jnp.log(jnp.asarray(youngs_true)))
    zero = jnp.zeros_like(true_beam.rest)
    u_obs = solve(true_beam, zero, args.load_steps)
    x_obs = true_beam.positions(u_obs)
    residual = float(jnp.max(jnp.abs(true_beam.residual(u_obs))) / jnp.max(jnp.abs(true_beam.load)))
    f = np.asarray(x_obs)[mesh.tets]
    j_min = float(np.min(np.linalg.det(np.stack([f[:, k] - f[:, 0] for k in (1, 2, 3)], -1) @ mesh.Dm_inv)))
    print(
        f"beam: {args.nx} x {args.ny} x {args.nz} cells, {mesh.tets.shape[0]} tets, {mesh.rest.shape[0]} nodes, "
        f"{args.regions} regions"
    )
    print(
        f"observed equilibrium: tip deflection {-float(jnp.min(u_obs[:, 2])):.3f} m over a length of 1 m, "
        f"min det F {j_min:.3f}, max |residual| / max |load| {residual:.1e}"
    )

    beam = Beam(mesh, jnp.full(args.regions, math.log(YOUNGS)))  # the initial guess: YOUNGS everywhere
    print(f"initial max relative modulus error: {modulus_error(beam, youngs_true):.3f}")
    params, static = eqx.partition(beam, trainable(beam))
    opt = optimiser(args.lr, args.steps)
    opt_state = opt.init(params)
    steps, log, show = progress(args.steps)
    every = max(args.steps // 10, 1)
    losses: list[float] = []
    u = zero
    x_init = None
    for step in steps:
        load_steps = args.load_steps if step == 0 else 1  # later solves start from the last equilibrium
        params, opt_state, loss, u = train_step(params, static, opt, opt_state, u, u_obs, load_steps)
        if x_init is None:
            x_init = np.asarray(beam.positions(u))
        losses.append(float(loss))
        show(losses[-1])
        if step == 0 or (step + 1) % every == 0 or step + 1 == args.steps:
            err = modulus_error(eqx.combine(params, static), youngs_true)
            log(f"step {step + 1:4d}  loss {losses[-1]:.3e}  max relative modulus error {err:.2e}")
    trained = eqx.combine(params, static)
    u_fit = solve(trained, u)
    final = float(misfit(trained, u_fit, u_obs))
    print(f"loss: initial {losses[0]:.3e} -> final {final:.3e} in {args.steps} steps")
    err = modulus_error(trained, youngs_true)
    youngs_fit = np.exp(np.asarray(trained.log_youngs))
    print(f"modulus error: max relative {err:.2e}")
    print("true E (MPa):     ", np.array2string(youngs_true / 1e6, precision=4))
    print("recovered E (MPa):", np.array2string(youngs_fit / 1e6, precision=4))

    model_path = out / "beam.eqx"
    eqx.tree_serialise_leaves(model_path, trained)
    reloaded = eqx.tree_deserialise_leaves(model_path, Beam(mesh, jnp.zeros(args.regions)))
    same = bool(eqx.tree_equal(reloaded, trained))
    same = same and bool(jnp.array_equal(solve(reloaded, u), u_fit))
    print(f"saved {model_path} and reloaded it: {'round-tripped' if same else 'MISMATCH'}")

    png = out / "hyperelastic.png"
    try:
        x_fit = np.asarray(trained.positions(u_fit))
        plot(png, losses, mesh, np.asarray(x_obs), x_fit, x_init, youngs_true, youngs_fit)
        print(f"wrote {png}")
    except ImportError:
        print("matplotlib is not installed (pip install -e .[examples]); no PNG written")
    print(f"total time {time.perf_counter() - start:.1f} s")
    return 0 if same and math.isfinite(final) else 1


if __name__ == "__main__":
    raise SystemExit(main())
