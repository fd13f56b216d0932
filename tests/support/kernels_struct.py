"""Warp structs and kernels for ``tests/warp/modules/test_struct_params.py`` (one Warp module; not collected by pytest).

* ``Mat`` / ``Mat64``: a scalar value field and a float array field, used by ``scale_kernel`` / ``scale64_kernel``
  (``out[i] = m.k * m.w[i] * x[i]**2``) and by the ``jax_callable`` functions.
* ``Outer`` holds an ``Inner`` struct field (nested structs), used by ``nested_kernel``.
* ``Frame`` has vector and matrix value fields and a vec3 array field (``affine_kernel``, whose only array parameter
  is its output, so the launch is sized by the struct's ``p`` field).
* ``Params``: a generic struct (``jarp.warp.struct`` with ``__annotations_factory__``) used through the generic
  ``generic_kernel`` and ``generic_arg_types``.
* ``Mesh`` / ``Material``: a float64 tetrahedral mesh and a Stable Neo-Hookean material (Smith et al. 2018,
  ``Psi = mu/2 (I_C - 3) + lam/2 (J - alpha)^2`` with ``alpha = 1 + mu/lam``), with an energy kernel
  (``atomic_add`` into one element) and a hand-written gradient kernel, both launched over tets.
"""

from __future__ import annotations

from typing import Any

import warp as wp

import jarp

# ----------------------------------------------------------------------------------------------------------------------
# A value field and an array field
# ----------------------------------------------------------------------------------------------------------------------


@wp.struct
class Mat:
    k: wp.float32
    w: wp.array(dtype=wp.float32)


@wp.struct
class Mat64:
    k: wp.float64
    w: wp.array(dtype=wp.float64)


@wp.kernel
def scale_kernel(m: Mat, x: wp.array(dtype=wp.float32), out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = m.k * m.w[i] * x[i] * x[i]


@wp.kernel
def scale64_kernel(m: Mat64, x: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    out[i] = m.k * m.w[i] * x[i] * x[i]


def scale_func(m: Mat, x: wp.array(dtype=wp.float32), out: wp.array(dtype=wp.float32)):
    """A ``jax_callable`` function: receives a ``Mat`` instance whose ``w`` wraps XLA's buffer."""
    wp.launch(scale_kernel, dim=x.shape, inputs=[m, x], outputs=[out])


def scale64_func(m: Mat64, x: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    """float64 twin of `scale_func`."""
    wp.launch(scale64_kernel, dim=x.shape, inputs=[m, x], outputs=[out])


# ----------------------------------------------------------------------------------------------------------------------
# Nested structs
# ----------------------------------------------------------------------------------------------------------------------


@wp.struct
class Inner:
    w: wp.array(dtype=wp.float32)
    c: wp.float32


@wp.struct
class Outer:
    s: wp.float32
    inner: Inner
    b: wp.array(dtype=wp.float32)


@wp.kernel
def nested_kernel(o: Outer, x: wp.array(dtype=wp.float32), out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = o.s * o.inner.w[i] * x[i] + o.inner.c * o.b[i] * o.b[i]


@wp.struct
class Inner64:
    w: wp.array(dtype=wp.float64)
    c: wp.float64


@wp.struct
class Outer64:
    s: wp.float64
    inner: Inner64
    b: wp.array(dtype=wp.float64)


@wp.kernel
def nested64_kernel(o: Outer64, x: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    out[i] = o.s * o.inner.w[i] * x[i] + o.inner.c * o.b[i] * o.b[i]


# ----------------------------------------------------------------------------------------------------------------------
# Vector / matrix value fields and a vec3 array field
# ----------------------------------------------------------------------------------------------------------------------


@wp.struct
class Frame:
    rot: wp.mat33f
    offset: wp.vec3f
    p: wp.array(dtype=wp.vec3f)


@wp.kernel
def affine_kernel(f: Frame, out: wp.array(dtype=wp.vec3f)):
    i = wp.tid()
    q = f.rot * f.p[i] + f.offset
    out[i] = wp.cw_mul(q, q)


# ----------------------------------------------------------------------------------------------------------------------
# A struct as an output parameter (refused)
# ----------------------------------------------------------------------------------------------------------------------


@wp.kernel
def struct_output_kernel(x: wp.array(dtype=wp.float32), m: Mat):
    i = wp.tid()
    m.w[i] = x[i]


# ----------------------------------------------------------------------------------------------------------------------
# A generic struct through a generic kernel
# ----------------------------------------------------------------------------------------------------------------------


@jarp.warp.struct
class Params:
    """Generic over the scalar type: a scale and a weight array."""

    @staticmethod
    def __annotations_factory__(dtype: Any) -> dict[str, Any]:
        return {"k": dtype, "w": wp.array(dtype=dtype)}


@wp.kernel
def generic_kernel(p: Any, x: wp.array(dtype=Any), out: wp.array(dtype=Any)):
    i = wp.tid()
    out[i] = p.k * p.w[i] * x[i]


def generic_arg_types(p_dtype: Any, x_dtype: Any) -> list[Any]:
    """``arg_types_factory``: ``p_dtype`` is the dtype of the struct's first floating array field."""
    return [Params[p_dtype], wp.array(dtype=x_dtype), wp.array(dtype=x_dtype)]


# ----------------------------------------------------------------------------------------------------------------------
# Tetrahedral FEM: Stable Neo-Hookean energy and its hand-written gradient (float64)
# ----------------------------------------------------------------------------------------------------------------------


@wp.struct
class Mesh:
    tets: wp.array(dtype=wp.vec4i)
    Dm_inv: wp.array(dtype=wp.mat33d)
    vol: wp.array(dtype=wp.float64)


@wp.struct
class Material:
    mu: wp.float64
    lam: wp.float64


@wp.func
def deformation_gradient(x: wp.array(dtype=wp.vec3d), mesh: Mesh, e: int):
    t = mesh.tets[e]
    x0 = x[t[0]]
    ds = wp.matrix_from_cols(x[t[1]] - x0, x[t[2]] - x0, x[t[3]] - x0)
    return ds * mesh.Dm_inv[e]


@wp.kernel
def snh_energy(x: wp.array(dtype=wp.vec3d), mesh: Mesh, mat: Material, energy: wp.array(dtype=wp.float64)):
    e = wp.tid()
    f = deformation_gradient(x, mesh, e)
    ic = wp.ddot(f, f)
    j = wp.determinant(f)
    alpha = wp.float64(1.0) + mat.mu / mat.lam
    half = wp.float64(0.5)
    psi = half * mat.mu * (ic - wp.float64(3.0)) + half * mat.lam * (j - alpha) * (j - alpha)
    wp.atomic_add(energy, 0, mesh.vol[e] * psi)


@wp.kernel
def snh_grad(x: wp.array(dtype=wp.vec3d), mesh: Mesh, mat: Material, grad: wp.array(dtype=wp.vec3d)):
    e = wp.tid()
    f = deformation_gradient(x, mesh, e)
    f0 = wp.vec3d(f[0, 0], f[1, 0], f[2, 0])
    f1 = wp.vec3d(f[0, 1], f[1, 1], f[2, 1])
    f2 = wp.vec3d(f[0, 2], f[1, 2], f[2, 2])
    dj = wp.matrix_from_cols(wp.cross(f1, f2), wp.cross(f2, f0), wp.cross(f0, f1))  # dJ/dF, the cofactor matrix
    alpha = wp.float64(1.0) + mat.mu / mat.lam
    p = mat.mu * f + mat.lam * (wp.determinant(f) - alpha) * dj  # first Piola-Kirchhoff stress
    h = mesh.vol[e] * p * wp.transpose(mesh.Dm_inv[e])  # dE/dDs: column c is the gradient at vertex c + 1
    t = mesh.tets[e]
    g1 = wp.vec3d(h[0, 0], h[1, 0], h[2, 0])
    g2 = wp.vec3d(h[0, 1], h[1, 1], h[2, 1])
    g3 = wp.vec3d(h[0, 2], h[1, 2], h[2, 2])
    wp.atomic_add(grad, t[0], -(g1 + g2 + g3))
    wp.atomic_add(grad, t[1], g1)
    wp.atomic_add(grad, t[2], g2)
    wp.atomic_add(grad, t[3], g3)


# Every overload the suite resolves, declared at import (a later overload would rebuild this Warp module).
for _dtype in (wp.float32, wp.float64):
    wp.overload(generic_kernel, generic_arg_types(_dtype, _dtype))
