"""A kernel variant whose mesh builtins differentiate with respect to the vertices.

Warp's ``wp.mesh_eval_position`` (and its velocity, normal and point siblings) read the vertices inside native
code whose adjoint drops their gradient (`_geometry_adjoints`). With the barycentrics given, each is a small
function of vertices read as arrays, which Warp differentiates exactly: `vertex_reads` derives a variant of a
kernel in which every call of these builtins in the kernel's own body (names resolved as Warp resolves them) calls
such a function instead. Calls inside a ``@wp.func`` the kernel calls are left alone (and still refused by the
gradient check).
"""

from __future__ import annotations

import ast

import warp as wp

from .._upstream import _python_ast, _warp_internals
from ._analysis import _names
from ._runtime_scalars import rebuild
from ._weakcache import weak_cache


@wp.func
def _jarp_mesh_eval_position(mesh: wp.uint64, face: int, u: float, v: float) -> wp.vec3:
    m = wp.mesh_get(mesh)
    return (
        u * m.points[m.indices[3 * face + 0]]
        + v * m.points[m.indices[3 * face + 1]]
        + (1.0 - u - v) * m.points[m.indices[3 * face + 2]]
    )


@wp.func
def _jarp_mesh_eval_velocity(mesh: wp.uint64, face: int, u: float, v: float) -> wp.vec3:
    m = wp.mesh_get(mesh)
    if m.velocities.shape[0] == 0:
        return wp.vec3()  # as Warp's builtin: a mesh without velocities has zero velocity
    return (
        u * m.velocities[m.indices[3 * face + 0]]
        + v * m.velocities[m.indices[3 * face + 1]]
        + (1.0 - u - v) * m.velocities[m.indices[3 * face + 2]]
    )


@wp.func
def _jarp_mesh_eval_face_normal(mesh: wp.uint64, face: int) -> wp.vec3:
    m = wp.mesh_get(mesh)
    p = m.points[m.indices[3 * face + 0]]
    q = m.points[m.indices[3 * face + 1]]
    r = m.points[m.indices[3 * face + 2]]
    return wp.normalize(wp.cross(q - p, r - p))


@wp.func
def _jarp_mesh_get_point(mesh: wp.uint64, index: int) -> wp.vec3:
    m = wp.mesh_get(mesh)
    return m.points[m.indices[index]]


@wp.func
def _jarp_mesh_get_velocity(mesh: wp.uint64, index: int) -> wp.vec3:
    m = wp.mesh_get(mesh)
    if m.velocities.shape[0] == 0:
        return wp.vec3()
    return m.velocities[m.indices[index]]


_REPLACEMENTS = {
    "mesh_eval_position": _jarp_mesh_eval_position,
    "mesh_eval_velocity": _jarp_mesh_eval_velocity,
    "mesh_eval_face_normal": _jarp_mesh_eval_face_normal,
    "mesh_get_point": _jarp_mesh_get_point,
    "mesh_get_velocity": _jarp_mesh_get_velocity,
}


class _Replace(ast.NodeTransformer):
    def __init__(self, func: object, local_names: frozenset[str]) -> None:
        self.func = func
        self.local_names = local_names
        self.replaced = False

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        name, obj = _names.callee(self.func, node, self.local_names)
        key = _names.builtin_key(name, obj, self.func)
        if key in _REPLACEMENTS:
            node.func = ast.copy_location(ast.Name(id=_REPLACEMENTS[key].key, ctx=ast.Load()), node.func)
            self.replaced = True
        return node


@weak_cache(lock=_warp_internals.warp_lock)
def vertex_reads(kernel: wp.Kernel) -> wp.Kernel:
    """``kernel`` (a concrete overload or variant), or its variant reading the vertices as arrays (see above)."""
    tree = _python_ast.parse(_warp_internals.kernel_source(kernel), dedent=True)
    fn = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    fn.decorator_list = []
    replace = _Replace(kernel.func, _names.local_names(fn))
    fn.body = [replace.visit(stmt) for stmt in fn.body]
    if not replace.replaced:
        return kernel
    source = ast.unparse(ast.fix_missing_locations(tree))
    extra = {f.key: f for f in _REPLACEMENTS.values()}
    return rebuild(kernel, source, _warp_internals.kernel_params(kernel), "__jarp_vertices", extra_globals=extra)
