"""Kernels given Warp structures with the inputs users get wrong (`tests/warp/hostile/test_geometry_inputs.py`)."""

import warp as wp


@wp.kernel
def closest_face(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), face: wp.array(dtype=int)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, p[i], 1.0e6)
    face[i] = q.face


@wp.kernel
def weighted_face(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, p[i], 1.0e6)
    out[i] = w[i] * float(q.face)


@wp.kernel
def store_into_points(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    m = wp.mesh_get(mesh)
    m.points[0] = p[i]
    out[i] = 1.0


@wp.kernel
def add_into_velocities(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(wp.mesh_get(mesh).velocities, 0, p[i])
    out[i] = 1.0


@wp.func
def nudge(points: wp.array(dtype=wp.vec3), v: wp.vec3):
    points[0] = points[0] + v


@wp.kernel
def store_through_a_function(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    nudge(wp.mesh_get(mesh).points, p[i])
    out[i] = 1.0


@wp.kernel
def store_the_id(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.uint64)):
    i = wp.tid()
    out[i] = mesh


@wp.kernel
def store_a_derived_id(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.uint64)):
    i = wp.tid()
    out[i] = mesh + wp.uint64(i)


@wp.func
def face_of(mesh: wp.uint64, x: wp.vec3) -> int:
    return wp.mesh_query_point_no_sign(mesh, x, 1.0e6).face


@wp.kernel
def query_in_a_function(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), face: wp.array(dtype=int)):
    i = wp.tid()
    face[i] = face_of(mesh, p[i])


@wp.kernel
def read_vertices(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    m = wp.mesh_get(mesh)
    q = wp.mesh_query_point_no_sign(mesh, p[i], 1.0e6)
    a = m.points[m.indices[3 * q.face]]
    out[i] = wp.length(a - p[i]) + float(m.points.shape[0])


@wp.kernel
def count_neighbours(grid: wp.uint64, p: wp.array(dtype=wp.vec3), r: float, c: wp.array(dtype=int)):
    i = wp.tid()
    n = wp.int32(0)
    for j in wp.hash_grid_query(grid, p[i], r):
        if wp.length(p[j] - p[i]) <= r:
            n += 1
    c[i] = n


@wp.kernel
def count_neighbours_f64(grid: wp.uint64, p: wp.array(dtype=wp.vec3d), r: wp.float64, c: wp.array(dtype=int)):
    i = wp.tid()
    n = wp.int32(0)
    for j in wp.hash_grid_query(grid, p[i], r):
        if wp.length(p[j] - p[i]) <= r:
            n += 1
    c[i] = n


@wp.kernel
def store_into_a_volume(vol: wp.uint64, p: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.volume_store_f(vol, 0, 0, 0, 1.0)
    out[i] = 1.0


@wp.func
def ident(id: wp.uint64) -> wp.uint64:
    return id


@wp.kernel
def store_an_id_a_function_returns(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.uint64)):
    i = wp.tid()
    out[i] = ident(mesh)


@wp.kernel
def read_velocities(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    m = wp.mesh_get(mesh)
    out[i] = m.velocities[m.indices[0]] + wp.mesh_eval_velocity(mesh, 0, 0.3, 0.3)


@wp.kernel
def read_past_the_queries(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = p[7][0]


@wp.kernel
def weighted_neighbours(
    grid: wp.uint64, w: wp.array(dtype=float), q: wp.array(dtype=wp.vec3), r: float, c: wp.array(dtype=float)
):
    # the launch is inferred from `w`; the query point `q[i]` is read by every thread, before the loop
    i = wp.tid()
    n = wp.float32(0.0)  # a dynamic loop variable (Warp treats a literal as a constant)
    for j in wp.hash_grid_query(grid, q[i], r):
        n += w[j]
    c[i] = n
