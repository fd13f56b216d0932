"""A tetrahedral FEM energy written the way a Warp FEM library writes it (one Warp module; not collected by pytest).

The Warp code in the first part is library code as jarp users bring it: nothing in it knows about JAX or jarp. Its
style follows the Warp FEM energies of liblaf/apple (https://github.com/liblaf/apple, ``src/liblaf/apple/warp/fem/``:
``_base.py``, ``_stable_neo_hookean.py``, ``func/``; commit 8b3209d4a38b620e37d9ddfa1ea3986d6f52809b): kernels over
``(cell, quadrature point)`` that are generic over the float type (every type is ``Any``, structs included), a
``region`` struct (cells, shape-function gradients, quadrature weights) and a ``materials`` struct (per-cell Lame
parameters) read inside ``wp.func`` helpers, and per-cell contributions scattered with ``wp.atomic_add``. It is NOT a
copy of that code: it was written independently for this suite, from the math below, in that style (the tooling this
suite was written with does not allow copying third-party code verbatim).

Energy: Stable Neo-Hookean (Smith, de Goes and Kim 2018, in the form without the log barrier),
``Psi(F) = mu/2 (|F|^2 - 3) - mu (J - 1) + lmbda/2 (J - 1)^2`` with ``J = det F`` and ``F = I + sum_i u_i dhdX_i^T`` on
a linear tetrahedron with vertex displacements ``u_i`` and shape-function gradients ``dhdX_i`` (the rows of ``dhdX``).
Kernels: energy (``fun_kernel``), gradient (``grad_kernel``), Hessian-vector product (``hess_prod_kernel``) and
Hessian diagonal (``hess_diag_kernel``).

The second part is the glue jarp needs: the struct types per float type (``Region[dtype]``, ``Materials[dtype]``, as a
library's per-dtype struct builder would give them) and an ``arg_types_factory`` per kernel.
"""

from __future__ import annotations

from typing import Any

import warp as wp

import jarp

# ----------------------------------------------------------------------------------------------------------------------
# Library code: generic over the float type
# ----------------------------------------------------------------------------------------------------------------------

floating = Any
vec3 = Any
mat33 = Any
mat43 = Any
Region = Any
Materials = Any


@wp.func
def get_cell_points(u: wp.array1d(dtype=vec3), cell: wp.vec4i):
    """The four vertex values of a cell, one per row (4x3)."""
    return wp.matrix_from_rows(u[cell[0]], u[cell[1]], u[cell[2]], u[cell[3]])


@wp.func
def deformation_gradient(u_cell: mat43, dhdX: mat43):
    """``F = I + du/dX``."""
    return wp.transpose(u_cell) @ dhdX + wp.identity(3, dtype=u_cell.dtype)


@wp.func
def deformation_gradient_jvp(dhdX: mat43, p_cell: mat43):
    """``dF/du . p``."""
    return wp.transpose(p_cell) @ dhdX


@wp.func
def deformation_gradient_vjp(dhdX: mat43, P: mat33):
    """``(dF/du)^T : P``, one row per vertex."""
    return dhdX @ wp.transpose(P)


@wp.func
def column(F: mat33, j: int):
    return wp.vector(F[0, j], F[1, j], F[2, j])


@wp.func
def cofactor(F: mat33):
    """``dJ/dF``: its columns are the cross products of the other two columns of ``F``."""
    f0 = column(F, 0)
    f1 = column(F, 1)
    f2 = column(F, 2)
    return wp.matrix_from_cols(wp.cross(f1, f2), wp.cross(f2, f0), wp.cross(f0, f1))


@wp.func
def cofactor_jvp(F: mat33, dF: mat33):
    """``d(dJ/dF) . dF``."""
    f0 = column(F, 0)
    f1 = column(F, 1)
    f2 = column(F, 2)
    d0 = column(dF, 0)
    d1 = column(dF, 1)
    d2 = column(dF, 2)
    return wp.matrix_from_cols(
        wp.cross(d1, f2) + wp.cross(f1, d2),
        wp.cross(d2, f0) + wp.cross(f2, d0),
        wp.cross(d0, f1) + wp.cross(f0, d1),
    )


@wp.func
def energy_density(F: mat33, materials: Materials, cid: int):
    mu = materials.mu[cid]
    la = materials.lmbda[cid]
    J = wp.determinant(F)
    one = F.dtype(1.0)
    half = F.dtype(0.5)
    return half * mu * (wp.ddot(F, F) - F.dtype(3.0)) - mu * (J - one) + half * la * (J - one) * (J - one)


@wp.func
def first_piola_kirchhoff(F: mat33, materials: Materials, cid: int):
    mu = materials.mu[cid]
    la = materials.lmbda[cid]
    J = wp.determinant(F)
    return mu * F + (la * (J - F.dtype(1.0)) - mu) * cofactor(F)


@wp.func
def first_piola_kirchhoff_jvp(F: mat33, dF: mat33, materials: Materials, cid: int):
    mu = materials.mu[cid]
    la = materials.lmbda[cid]
    J = wp.determinant(F)
    g3 = cofactor(F)
    return mu * dF + la * wp.ddot(g3, dF) * g3 + (la * (J - F.dtype(1.0)) - mu) * cofactor_jvp(F, dF)


@wp.func
def hess_diag_rows(F: mat33, dhdX: mat43, materials: Materials, cid: int):
    """The Hessian's diagonal, one row per vertex: moving one coordinate of one vertex changes ``F`` by a rank-one
    matrix, along which ``J`` is linear, so only the ``|F|^2`` and ``(J - 1)^2`` terms contribute."""
    mu = materials.mu[cid]
    la = materials.lmbda[cid]
    g = deformation_gradient_vjp(dhdX, cofactor(F))  # row i: dJ/du_i
    r0 = mu * wp.dot(dhdX[0], dhdX[0])
    r1 = mu * wp.dot(dhdX[1], dhdX[1])
    r2 = mu * wp.dot(dhdX[2], dhdX[2])
    r3 = mu * wp.dot(dhdX[3], dhdX[3])
    return wp.matrix_from_rows(
        wp.vector(r0, r0, r0) + la * wp.cw_mul(g[0], g[0]),
        wp.vector(r1, r1, r1) + la * wp.cw_mul(g[1], g[1]),
        wp.vector(r2, r2, r2) + la * wp.cw_mul(g[2], g[2]),
        wp.vector(r3, r3, r3) + la * wp.cw_mul(g[3], g[3]),
    )


@wp.kernel
def fun_kernel(
    u: wp.array1d(dtype=vec3),  # (points,)
    region: Region,
    materials: Materials,
    output: wp.array1d(dtype=floating),  # (1,)
):
    cid, qid = wp.tid()
    cell = region.cells[cid]
    dhdX = region.dhdX[cid, qid]
    F = deformation_gradient(get_cell_points(u, cell), dhdX)
    wp.atomic_add(output, 0, energy_density(F, materials, cid) * region.dV[cid, qid])


@wp.kernel
def grad_kernel(
    u: wp.array1d(dtype=vec3),  # (points,)
    region: Region,
    materials: Materials,
    output: wp.array1d(dtype=vec3),  # (points,)
):
    cid, qid = wp.tid()
    cell = region.cells[cid]
    dhdX = region.dhdX[cid, qid]
    F = deformation_gradient(get_cell_points(u, cell), dhdX)
    P = first_piola_kirchhoff(F, materials, cid)
    grad_cell = deformation_gradient_vjp(dhdX, P) * region.dV[cid, qid]
    for i in range(4):
        wp.atomic_add(output, cell[i], grad_cell[i])


@wp.kernel
def hess_prod_kernel(
    u: wp.array1d(dtype=vec3),  # (points,)
    p: wp.array1d(dtype=vec3),  # (points,)
    region: Region,
    materials: Materials,
    output: wp.array1d(dtype=vec3),  # (points,)
):
    cid, qid = wp.tid()
    cell = region.cells[cid]
    dhdX = region.dhdX[cid, qid]
    F = deformation_gradient(get_cell_points(u, cell), dhdX)
    dF = deformation_gradient_jvp(dhdX, get_cell_points(p, cell))
    dP = first_piola_kirchhoff_jvp(F, dF, materials, cid)
    prod_cell = deformation_gradient_vjp(dhdX, dP) * region.dV[cid, qid]
    for i in range(4):
        wp.atomic_add(output, cell[i], prod_cell[i])


@wp.kernel
def hess_diag_kernel(
    u: wp.array1d(dtype=vec3),  # (points,)
    region: Region,
    materials: Materials,
    output: wp.array1d(dtype=vec3),  # (points,)
):
    cid, qid = wp.tid()
    cell = region.cells[cid]
    dhdX = region.dhdX[cid, qid]
    F = deformation_gradient(get_cell_points(u, cell), dhdX)
    diag_cell = hess_diag_rows(F, dhdX, materials, cid) * region.dV[cid, qid]
    for i in range(4):
        wp.atomic_add(output, cell[i], diag_cell[i])


# ----------------------------------------------------------------------------------------------------------------------
# Glue for jarp: the struct types per float type, and one arg_types_factory per kernel
# ----------------------------------------------------------------------------------------------------------------------


@jarp.warp.struct
class RegionStruct:
    """The mesh: ``cells`` (cells,) vertex indices, ``dhdX`` (cells, quadrature) shape-function gradients (4x3),
    ``dV`` (cells, quadrature) quadrature weights (volumes)."""

    @staticmethod
    def __annotations_factory__(dtype: Any) -> dict[str, Any]:
        return {
            "cells": wp.array1d(dtype=wp.vec4i),
            "dhdX": wp.array2d(dtype=wp.types.matrix((4, 3), dtype)),
            "dV": wp.array2d(dtype=dtype),
        }


@jarp.warp.struct
class MaterialsStruct:
    """Per-cell Lame parameters ``mu`` and ``lmbda`` (cells,)."""

    @staticmethod
    def __annotations_factory__(dtype: Any) -> dict[str, Any]:
        return {"mu": wp.array1d(dtype=dtype), "lmbda": wp.array1d(dtype=dtype)}


def _vec3(dtype: Any) -> Any:
    return wp.types.vector(3, dtype)


def fun_arg_types(u: Any, region: Any, materials: Any) -> list[Any]:
    return [wp.array1d(dtype=_vec3(u)), RegionStruct[region], MaterialsStruct[materials], wp.array1d(dtype=u)]


def grad_arg_types(u: Any, region: Any, materials: Any) -> list[Any]:
    return [wp.array1d(dtype=_vec3(u)), RegionStruct[region], MaterialsStruct[materials], wp.array1d(dtype=_vec3(u))]


def hess_diag_arg_types(u: Any, region: Any, materials: Any) -> list[Any]:
    return grad_arg_types(u, region, materials)


def hess_prod_arg_types(u: Any, p: Any, region: Any, materials: Any) -> list[Any]:
    return [
        wp.array1d(dtype=_vec3(u)),
        wp.array1d(dtype=_vec3(p)),
        RegionStruct[region],
        MaterialsStruct[materials],
        wp.array1d(dtype=_vec3(u)),
    ]


# Every overload the suite resolves, declared at import (a later overload would rebuild this Warp module).
for _dtype in (wp.float32, wp.float64):
    wp.overload(fun_kernel, fun_arg_types(_dtype, _dtype, _dtype))
    wp.overload(grad_kernel, grad_arg_types(_dtype, _dtype, _dtype))
    wp.overload(hess_diag_kernel, hess_diag_arg_types(_dtype, _dtype, _dtype))
    wp.overload(hess_prod_kernel, hess_prod_arg_types(_dtype, _dtype, _dtype, _dtype))
