"""Kernels reading the smooth fields of Warp's mesh queries, for `tests/warp/modules/test_geometry_gradients.py`.

In a variant (`jarp.warp._geometry._variants.vertex_reads`) each query's barycentrics, ray distance, normal
and ray sign are recomputed from the vertices, so that their gradient with respect to the mesh points (and the
query points, ray origins and directions) is exact. The kernels are few (each variant is a build of its own).
"""

from typing import Any

import warp as wp

# -- the query families ----------------------------------------------------------------------------------------------


@wp.kernel
def point_queries(
    mesh: wp.uint64,
    x: wp.array(dtype=wp.vec3),
    bary: wp.array2d(dtype=wp.vec2),
    face: wp.array2d(dtype=int),
    sign: wp.array2d(dtype=float),
):
    """Every point query's barycentrics, face and sign: one column per query."""
    i = wp.tid()
    p = x[i]
    q = wp.mesh_query_point_no_sign(mesh, p, 1.0e6)
    bary[i, 0] = wp.vec2(q.u, q.v)
    face[i, 0] = q.face
    sign[i, 0] = q.sign
    q = wp.mesh_query_point(mesh, p, 1.0e6)
    bary[i, 1] = wp.vec2(q.u, q.v)
    face[i, 1] = q.face
    sign[i, 1] = q.sign
    q = wp.mesh_query_point_sign_normal(mesh, p, 1.0e6, epsilon=1.0e-3)
    bary[i, 2] = wp.vec2(q.u, q.v)
    face[i, 2] = q.face
    sign[i, 2] = q.sign
    q = wp.mesh_query_point_sign_winding_number(mesh, p, 1.0e6)
    bary[i, 3] = wp.vec2(q.u, q.v)
    face[i, 3] = q.face
    sign[i, 3] = q.sign
    q = wp.mesh_query_point_sign_parity(mesh, p, 1.0e6, 1, 0.1)
    bary[i, 4] = wp.vec2(q.u, q.v)
    face[i, 4] = q.face
    sign[i, 4] = q.sign
    q = wp.mesh_query_furthest_point_no_sign(mesh, p, 0.0)
    bary[i, 5] = wp.vec2(q.u, q.v)
    face[i, 5] = q.face
    sign[i, 5] = q.sign


@wp.kernel
def ray_queries(
    mesh: wp.uint64,
    o: wp.array(dtype=wp.vec3),
    d: wp.array(dtype=wp.vec3),
    tuv: wp.array(dtype=wp.vec3),
    sign: wp.array(dtype=float),
    normal: wp.array(dtype=wp.vec3),
    face: wp.array(dtype=int),
):
    """A ray's distance, barycentrics, sign, normal and face (zeros and -1 for a miss)."""
    i = wp.tid()
    q = wp.mesh_query_ray(mesh, o[i], d[i], 1.0e6)
    tuv[i] = wp.vec3(q.t, q.u, q.v)
    sign[i] = q.sign
    normal[i] = q.normal
    face[i] = wp.where(q.result, q.face, -1)


# -- inside functions, and a barycentric read only in a condition ----------------------------------------------------


@wp.func
def eval_at(mesh: wp.uint64, q: wp.MeshQueryPoint) -> wp.vec3:
    """The point a query found: takes Warp's result type (the variant passes jarp's, with the same fields)."""
    return wp.mesh_eval_position(mesh, q.face, q.u, q.v)


@wp.func
def closest_offset(mesh: wp.uint64, p: wp.vec3):
    q = wp.mesh_query_point_no_sign(mesh, p, 1.0e6)
    return p - eval_at(mesh, q), q.face


@wp.func
def hit_point(mesh: wp.uint64, o: wp.vec3, d: wp.vec3):
    q = wp.mesh_query_ray(mesh, o, d, 1.0e6)
    # the hit point twice over: along the ray, and at the barycentrics; and the normal's projection on the ray
    return o + q.t * d + wp.mesh_eval_position(mesh, q.face, q.u, q.v), wp.dot(q.normal, d), q.face


@wp.kernel
def in_functions(
    mesh: wp.uint64,
    x: wp.array(dtype=wp.vec3),
    o: wp.array(dtype=wp.vec3),
    d: wp.array(dtype=wp.vec3),
    offset: wp.array(dtype=wp.vec3),
    hit: wp.array(dtype=wp.vec4),
    faces: wp.array(dtype=wp.vec2i),
):
    """The queries in (nested) ``@wp.func``s: a closest point's offset, a ray's hit point and normal."""
    i = wp.tid()
    r, closest = closest_offset(mesh, x[i])
    offset[i] = r
    h, c, f = hit_point(mesh, o[i], d[i])
    hit[i] = wp.vec4(h[0], h[1], h[2], c)
    faces[i] = wp.vec2i(closest, f)


@wp.kernel
def u_in_a_condition(mesh: wp.uint64, x: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    """``q.u`` decides a branch only (no derivative through it); the value comes from the vertices."""
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, x[i], 1.0e6)
    z = wp.mesh_eval_position(mesh, q.face, 0.25, 0.5)[2]
    if q.u > 0.4:
        out[i] = 2.0 * z
    else:
        out[i] = z - x[i][2]


# -- rewritten or not: judged on the generated code only (each kernel in a Warp module of its own, never built) -------


@wp.func
def barycentric_sum(mesh: wp.uint64, p: wp.vec3) -> float:
    q = wp.mesh_query_point_no_sign(mesh, p, 1.0e6)
    return q.u + q.v


@wp.func
def barycentric_sum(mesh: wp.uint64, p: wp.vec3, scale: float) -> float:  # noqa: F811 (a Warp overload)
    q = wp.mesh_query_point(mesh, p, 1.0e6)
    return scale * (q.u + q.v)


@wp.func
def generic_distance(mesh: wp.uint64, o: Any, d: Any):
    q = wp.mesh_query_ray(mesh, o, d, 1.0e6)
    return q.t


@wp.kernel(module="unique")
def overloads_and_generics(
    mesh: wp.uint64, x: wp.array(dtype=wp.vec3), d: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)
):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, x[i], 1.0e6)
    out[i] = barycentric_sum(mesh, x[i]) + barycentric_sum(mesh, x[i], 2.0) + generic_distance(mesh, x[i], d[i]) + q.v


@wp.kernel(module="unique")
def through_static(mesh: wp.uint64, x: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = wp.static(barycentric_sum)(mesh, x[i])  # the function Warp evaluated is not followed: refused


@wp.kernel(module="unique")
def two_meshes_out_params(a: wp.uint64, b: wp.uint64, origins: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    """Warp's older ray query on ``a`` (results in the caller's variables: not rewritten), the newer one on ``b``."""
    i = wp.tid()
    down = wp.vec3(0.0, 0.0, -1.0)
    dist = wp.float32(0.0)  # dynamic variables, as Warp's out-arguments need
    u = wp.float32(0.0)
    v = wp.float32(0.0)
    sign = wp.float32(0.0)
    n = wp.vec3()
    face = wp.int32(0)
    hit = wp.mesh_query_ray(a, origins[i], down, 1.0e6, dist, u, v, sign, n, face)
    q = wp.mesh_query_ray(b, origins[i], down, 1.0e6)
    t[i] = wp.where(hit, dist, 0.0) + q.t
