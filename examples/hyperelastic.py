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

    python examples/hyperelastic.py                      # 12 x 3 x 3 boxes (648 tets), 4 regions, 60 steps
    python examples/hyperelastic.py --nx 6 --ny 2 --nz 2 --regions 2 --steps 15 --out /tmp/fem
"""

from __future__ import annotations

from typing import NamedTuple

import equinox as eqx
import jax.numpy as jnp
import numpy as np
import warp as wp
from jaxtyping import Array, Float, Int

import jarp.warp

wp.config.quiet = True

DENSITY = 1000.0  # kg / m^3 (rubber-like)
GRAVITY = 9.81  # m / s^2, along -z
POISSON = 0.3
YOUNGS = 2.0e6  # Pa: the initial guess of every region's Young's modulus, and the scale of the true ones

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
