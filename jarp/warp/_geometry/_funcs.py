"""The Warp functions a kernel's variant calls in place of Warp's mesh builtins (`_variants`).

Each has the builtin's parameters and value, and computes what depends smoothly on the vertices from the face's
vertices read as arrays, in code Warp differentiates. This module is Warp device code only: Warp compiles and checks
it; Python's type checker reads Warp's scalars, vectors and ``wp.tid()`` as their Python stand-ins and cannot check it.
"""

# pyright: reportArgumentType=false, reportAttributeAccessIssue=false, reportCallIssue=false
# pyright: reportGeneralTypeIssues=false, reportOperatorIssue=false, reportOptionalMemberAccess=false
# pyright: reportOptionalSubscript=false, reportReturnType=false, reportInvalidTypeForm=false

from __future__ import annotations

import warp as wp


@wp.func
def jarp_mesh_eval_position(mesh: wp.uint64, face: int, u: float, v: float) -> wp.vec3:
    m = wp.mesh_get(mesh)
    return (
        u * m.points[m.indices[3 * face + 0]]
        + v * m.points[m.indices[3 * face + 1]]
        + (1.0 - u - v) * m.points[m.indices[3 * face + 2]]
    )


@wp.func
def jarp_mesh_eval_velocity(mesh: wp.uint64, face: int, u: float, v: float) -> wp.vec3:
    m = wp.mesh_get(mesh)
    if m.velocities.shape[0] == 0:
        return wp.vec3()  # as Warp's builtin: a mesh without velocities has zero velocity
    return (
        u * m.velocities[m.indices[3 * face + 0]]
        + v * m.velocities[m.indices[3 * face + 1]]
        + (1.0 - u - v) * m.velocities[m.indices[3 * face + 2]]
    )


@wp.func
def jarp_mesh_eval_face_normal(mesh: wp.uint64, face: int) -> wp.vec3:
    m = wp.mesh_get(mesh)
    p = m.points[m.indices[3 * face + 0]]
    q = m.points[m.indices[3 * face + 1]]
    r = m.points[m.indices[3 * face + 2]]
    return wp.normalize(wp.cross(q - p, r - p))


@wp.func
def jarp_mesh_get_point(mesh: wp.uint64, index: int) -> wp.vec3:
    m = wp.mesh_get(mesh)
    return m.points[m.indices[index]]


@wp.func
def jarp_mesh_get_velocity(mesh: wp.uint64, index: int) -> wp.vec3:
    m = wp.mesh_get(mesh)
    if m.velocities.shape[0] == 0:
        return wp.vec3()
    return m.velocities[m.indices[index]]


# -- the queries ------------------------------------------------------------------------------------------------------
# Each replacement calls Warp's query for what is piecewise constant in the vertices (the face, the side, whether
# there is a result) and recomputes the rest from the face's vertices. Warp's adjoint of the query itself then
# gets a zero cotangent for every field it drops, and adds nothing.


@wp.struct
class MeshQueryPoint:
    """``wp.MeshQueryPoint``'s fields, as the variant's point queries return them (differentiable ``u``, ``v``)."""

    result: wp.bool
    sign: wp.float32
    face: wp.int32
    u: wp.float32
    v: wp.float32


@wp.struct
class MeshQueryRay:
    """``wp.MeshQueryRay``'s fields, as the variant's ray query returns them (differentiable ``t``, ``u``, ``v``,
    ``sign``, ``normal``)."""

    result: wp.bool
    sign: wp.float32
    face: wp.int32
    t: wp.float32
    u: wp.float32
    v: wp.float32
    normal: wp.vec3


@wp.func
def jarp_closest_barycentrics(a: wp.vec3, b: wp.vec3, c: wp.vec3, p: wp.vec3) -> wp.vec2:
    # Warp's closest_point_to_triangle (native/intersect.h, Ericson's regions), operation for operation: the weights
    # of a and b of the point of the triangle closest to p. Each region's formula is smooth; the region is chosen by
    # comparisons, as in Warp's.
    ab = b - a
    ac = c - a
    ap = p - a
    d1 = wp.dot(ab, ap)
    d2 = wp.dot(ac, ap)
    bp = p - b
    d3 = wp.dot(ab, bp)
    d4 = wp.dot(ac, bp)
    cp = p - c
    d5 = wp.dot(ab, cp)
    d6 = wp.dot(ac, cp)
    vc = d1 * d4 - d3 * d2
    vb = d5 * d2 - d1 * d6
    va = d3 * d6 - d5 * d4
    v = wp.float32(0.0)
    w = wp.float32(0.0)
    if d1 <= 0.0 and d2 <= 0.0:
        v = 0.0
        w = 0.0
    elif d3 >= 0.0 and d4 <= d3:
        v = 1.0
        w = 0.0
    elif vc <= 0.0 and d1 >= 0.0 and d3 <= 0.0:
        v = d1 / (d1 - d3)
        w = 0.0
    elif d6 >= 0.0 and d5 <= d6:
        v = 0.0
        w = 1.0
    elif vb <= 0.0 and d2 >= 0.0 and d6 <= 0.0:
        v = 0.0
        w = d2 / (d2 - d6)
    elif va <= 0.0 and (d4 - d3) >= 0.0 and (d5 - d6) >= 0.0:
        w = (d4 - d3) / ((d4 - d3) + (d5 - d6))
        v = 1.0 - w
    else:
        denom = 1.0 / (va + vb + vc)
        v = vb * denom
        w = vc * denom
    return wp.vec2(1.0 - v - w, v)


@wp.func
def jarp_furthest_barycentrics(a: wp.vec3, b: wp.vec3, c: wp.vec3, p: wp.vec3) -> wp.vec2:
    # Warp's furthest_point_to_triangle: the furthest vertex (constant weights, so a zero derivative, exactly)
    da = wp.length_sq(p - a)
    db = wp.length_sq(p - b)
    dc = wp.length_sq(p - c)
    uv = wp.vec2(0.0, 0.0)
    if da > db and da > dc:
        uv = wp.vec2(1.0, 0.0)
    elif db > dc:
        uv = wp.vec2(0.0, 1.0)
    return uv


@wp.func
def jarp_point_result(
    mesh: wp.uint64, point: wp.vec3, result: wp.bool, sign: float, face: int, furthest: wp.bool
) -> MeshQueryPoint:
    u = wp.float32(0.0)  # Warp leaves a query without result at zero barycentrics
    v = wp.float32(0.0)
    if result:
        m = wp.mesh_get(mesh)
        a = m.points[m.indices[3 * face + 0]]
        b = m.points[m.indices[3 * face + 1]]
        c = m.points[m.indices[3 * face + 2]]
        uv = wp.vec2()
        if furthest:
            uv = jarp_furthest_barycentrics(a, b, c, point)
        else:
            uv = jarp_closest_barycentrics(a, b, c, point)
        # as Warp's query writes them: through the weight of c
        w = 1.0 - uv[0] - uv[1]
        u = 1.0 - uv[1] - w
        v = uv[1]
    out = MeshQueryPoint()
    out.result = result
    out.sign = sign
    out.face = face
    out.u = u
    out.v = v
    return out


@wp.func
def jarp_mesh_query_point(id: wp.uint64, point: wp.vec3, max_dist: float) -> MeshQueryPoint:
    q = wp.mesh_query_point(id, point, max_dist)
    return jarp_point_result(id, point, q.result, q.sign, q.face, False)


@wp.func
def jarp_mesh_query_point_no_sign(id: wp.uint64, point: wp.vec3, max_dist: float) -> MeshQueryPoint:
    q = wp.mesh_query_point_no_sign(id, point, max_dist)
    return jarp_point_result(id, point, q.result, q.sign, q.face, False)


@wp.func
def jarp_mesh_query_point_sign_normal(
    id: wp.uint64, point: wp.vec3, max_dist: float, epsilon: float = 1.0e-3
) -> MeshQueryPoint:
    q = wp.mesh_query_point_sign_normal(id, point, max_dist, epsilon)
    return jarp_point_result(id, point, q.result, q.sign, q.face, False)


@wp.func
def jarp_mesh_query_point_sign_winding_number(
    id: wp.uint64, point: wp.vec3, max_dist: float, accuracy: float = 2.0, threshold: float = 0.5
) -> MeshQueryPoint:
    q = wp.mesh_query_point_sign_winding_number(id, point, max_dist, accuracy, threshold)
    return jarp_point_result(id, point, q.result, q.sign, q.face, False)


@wp.func
def jarp_mesh_query_point_sign_parity(
    id: wp.uint64, point: wp.vec3, max_dist: float, n_sample: int = 1, perturbation_scale: float = 0.1
) -> MeshQueryPoint:
    q = wp.mesh_query_point_sign_parity(id, point, max_dist, n_sample, perturbation_scale)
    return jarp_point_result(id, point, q.result, q.sign, q.face, False)


@wp.func
def jarp_mesh_query_furthest_point_no_sign(id: wp.uint64, point: wp.vec3, min_dist: float) -> MeshQueryPoint:
    q = wp.mesh_query_furthest_point_no_sign(id, point, min_dist)
    return jarp_point_result(id, point, q.result, q.sign, q.face, True)


@wp.func
def jarp_mesh_query_ray(id: wp.uint64, start: wp.vec3, dir: wp.vec3, max_t: float, root: int = -1) -> MeshQueryRay:
    q = wp.mesh_query_ray(id, start, dir, max_t, root)
    t = wp.float32(0.0)  # Warp leaves a ray without hit at zeros
    u = wp.float32(0.0)
    v = wp.float32(0.0)
    sign = wp.float32(0.0)
    normal = wp.vec3()
    if q.result:
        m = wp.mesh_get(id)
        a = m.points[m.indices[3 * q.face + 0]]
        b = m.points[m.indices[3 * q.face + 1]]
        c = m.points[m.indices[3 * q.face + 2]]
        n = wp.cross(b - a, c - a)
        dn = wp.dot(dir, n)
        # start + t dir = u a + v b + (1 - u - v) c, solved by triple products about the ray's start (as Warp's
        # watertight test works in the ray's frame): u and v are the signed volumes the ray spans with the
        # opposite edges
        t = wp.dot(a - start, n) / dn
        u = wp.dot(dir, wp.cross(b - start, c - start)) / dn
        v = wp.dot(dir, wp.cross(c - start, a - start)) / dn
        # Warp's sign is the determinant of its test in the ray's sheared frame: -<dir, n> over dir's largest
        # component (in magnitude), smooth in the vertices and the direction
        sign = -dn / wp.max(wp.abs(dir[0]), wp.max(wp.abs(dir[1]), wp.abs(dir[2])))
        normal = wp.normalize(n)
    out = MeshQueryRay()
    out.result = q.result
    out.sign = sign
    out.face = q.face
    out.t = t
    out.u = u
    out.v = v
    out.normal = normal
    return out
