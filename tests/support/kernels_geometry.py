"""Kernels that query Warp structures by id, for the id-argument tests (`tests/warp/plan/test_binding.py`)."""

import warp as wp


@wp.kernel
def mesh_sign(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), d: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point(mesh, p[i], 1.0e6)
    d[i] = wp.where(q.result, 1.0, 0.0)


@wp.struct
class Scene:
    mesh: wp.uint64
    scale: float


@wp.kernel
def scene_hit(scene: Scene, p: wp.array(dtype=wp.vec3), d: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point(scene.mesh, p[i], 1.0e6)
    d[i] = wp.where(q.result, scene.scale, 0.0)


@wp.kernel
def mesh_distance_kernel(mesh: wp.uint64, p: wp.array(dtype=wp.vec3), d: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, p[i], 1.0e6)
    closest = wp.mesh_eval_position(mesh, q.face, q.u, q.v)
    d[i] = wp.length(p[i] - closest)


LIVE_MESHES: list = []  # weak references to the meshes `mesh_distance` builds (tests check they outlive the tape)


def mesh_distance(
    points: wp.array(dtype=wp.vec3),
    indices: wp.array(dtype=wp.int32),
    p: wp.array(dtype=wp.vec3),
    d: wp.array(dtype=float),
):
    """A jax_callable building a mesh from its input each call (a local, freed when it returns)."""
    import weakref

    mesh = wp.Mesh(points=points, indices=indices)
    LIVE_MESHES.append(weakref.ref(mesh))
    wp.launch(mesh_distance_kernel, dim=p.shape[0], inputs=[mesh.id, p], outputs=[d], device=p.device)


# -- kernels for the geometry pytrees (`tests/warp/modules/test_geometry.py`) ------------------------------------------


@wp.func
def plane_distance(mesh: wp.uint64, face: int, o: wp.vec3, d: wp.vec3):
    """The ray parameter of the hit with the face's plane, from the vertices read as arrays (differentiable)."""
    m = wp.mesh_get(mesh)
    a = m.points[m.indices[3 * face + 0]]
    b = m.points[m.indices[3 * face + 1]]
    c = m.points[m.indices[3 * face + 2]]
    n = wp.cross(b - a, c - a)
    return wp.dot(a - o, n) / wp.dot(d, n)


@wp.kernel
def ray_depth(mesh: wp.uint64, origins: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    """Downward rays: the face from the query (piecewise constant), the distance from the vertices."""
    i = wp.tid()
    down = wp.vec3(0.0, 0.0, -1.0)
    q = wp.mesh_query_ray(mesh, origins[i], down, 1.0e6)
    if q.result:
        t[i] = plane_distance(mesh, q.face, origins[i], down)
    else:
        t[i] = -1.0


@wp.kernel
def ray_depth_builtin(mesh: wp.uint64, origins: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    """As `ray_depth`, with the query's own distance (whose adjoint drops the vertices)."""
    i = wp.tid()
    q = wp.mesh_query_ray(mesh, origins[i], wp.vec3(0.0, 0.0, -1.0), 1.0e6)
    t[i] = wp.where(q.result, q.t, -1.0)


@wp.kernel
def ray_hits(mesh: wp.uint64, origins: wp.array(dtype=wp.vec3), hit: wp.array(dtype=float)):
    """Only whether a ray hits (piecewise constant in the vertices)."""
    i = wp.tid()
    q = wp.mesh_query_ray(mesh, origins[i], wp.vec3(0.0, 0.0, -1.0), 1.0e6)
    hit[i] = wp.where(q.result, 1.0, 0.0)


@wp.kernel
def closest_distance(mesh: wp.uint64, x: wp.array(dtype=wp.vec3), d: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, x[i], 1.0e6)
    d[i] = wp.length(x[i] - wp.mesh_eval_position(mesh, q.face, q.u, q.v))


@wp.kernel
def vertex_velocity(mesh: wp.uint64, x: wp.array(dtype=wp.vec3), v: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, x[i], 1.0e6)
    v[i] = wp.mesh_eval_velocity(mesh, q.face, q.u, q.v)


@wp.kernel
def neighbour_counts(grid: wp.uint64, x: wp.array(dtype=wp.vec3), radius: float, count: wp.array(dtype=int)):
    i = wp.tid()
    n = wp.int32(0)  # a dynamic loop variable (Warp treats a literal as a constant)
    for j in wp.hash_grid_query(grid, x[i], radius):
        if j != i and wp.length(x[j] - x[i]) < radius:
            n += 1
    count[i] = n


@wp.kernel
def neighbour_energy(grid: wp.uint64, x: wp.array(dtype=wp.vec3), radius: float, e: wp.array(dtype=float)):
    """A pair energy over the grid's neighbours: its gradient flows through ``x`` (the grid gives indices only)."""
    i = wp.tid()
    for j in wp.hash_grid_query(grid, x[i], radius):
        r = wp.length(x[j] - x[i])
        if j != i and r < radius:
            wp.atomic_add(e, 0, (radius - r) * (radius - r))


@wp.kernel
def box_overlaps(
    bvh: wp.uint64, lowers: wp.array(dtype=wp.vec3), uppers: wp.array(dtype=wp.vec3), count: wp.array(dtype=int)
):
    i = wp.tid()
    query = wp.bvh_query_aabb(bvh, lowers[i], uppers[i])
    item = wp.int32(0)
    n = wp.int32(0)  # a dynamic loop variable (Warp treats a literal as a constant)
    while wp.bvh_query_next(query, item):
        n += 1
    count[i] = n


@wp.kernel
def volume_sample(volume: wp.uint64, x: wp.array(dtype=wp.vec3), phi: wp.array(dtype=float)):
    i = wp.tid()
    phi[i] = wp.volume_sample_f(volume, wp.volume_world_to_index(volume, x[i]), wp.Volume.LINEAR)


def depth_function(mesh: wp.Mesh, origins: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    """A jax_callable receiving the Warp mesh jarp built."""
    assert isinstance(mesh, wp.Mesh)
    wp.launch(ray_depth, dim=origins.shape[0], inputs=[mesh.id, origins], outputs=[t], device=origins.device)


@wp.kernel
def markers(
    mesh: wp.uint64,
    faces: wp.array(dtype=int),
    bary: wp.array(dtype=wp.vec2),
    x: wp.array(dtype=wp.vec3),
    v: wp.array(dtype=wp.vec3),
    n: wp.array(dtype=wp.vec3),
):
    """Points at fixed barycentrics on faces: positions, velocities and face normals through Warp's builtins."""
    i = wp.tid()
    f = faces[i]
    x[i] = wp.mesh_eval_position(mesh, f, bary[i][0], bary[i][1])
    v[i] = wp.mesh_eval_velocity(mesh, f, bary[i][0], bary[i][1])
    n[i] = wp.mesh_eval_face_normal(mesh, f) + wp.mesh_get_point(mesh, 3 * f + 1)


@wp.func
def eval_in_a_function(mesh: wp.uint64, f: int, u: float, v: float):
    return wp.mesh_eval_position(mesh, f, u, v)


@wp.kernel
def markers_in_a_function(
    mesh: wp.uint64, faces: wp.array(dtype=int), bary: wp.array(dtype=wp.vec2), x: wp.array(dtype=wp.vec3)
):
    i = wp.tid()
    x[i] = eval_in_a_function(mesh, faces[i], bary[i][0], bary[i][1])


def builtin_depth_function(mesh: wp.Mesh, origins: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    """A jax_callable launching a kernel whose ray distance comes from the query (vertex gradient dropped)."""
    wp.launch(ray_depth_builtin, dim=origins.shape[0], inputs=[mesh.id, origins], outputs=[t], device=origins.device)


def volume_function(volume: wp.Volume, x: wp.array(dtype=wp.vec3), phi: wp.array(dtype=float)):
    wp.launch(volume_sample, dim=x.shape[0], inputs=[volume.id, x], outputs=[phi], device=x.device)


@wp.kernel
def ray_depth_out_params(mesh: wp.uint64, origins: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    """Warp's older overload: the results land in the caller's variables (the distance's adjoint is dropped too)."""
    i = wp.tid()
    # dynamic variables (Warp's out-arguments need them: a literal would be a constant)
    dist = wp.float32(0.0)
    u = wp.float32(0.0)
    v = wp.float32(0.0)
    sign = wp.float32(0.0)
    n = wp.vec3()
    face = wp.int32(0)
    if wp.mesh_query_ray(mesh, origins[i], wp.vec3(0.0, 0.0, -1.0), 1.0e6, dist, u, v, sign, n, face):
        t[i] = dist


@wp.kernel
def two_meshes(a: wp.uint64, b: wp.uint64, origins: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    """The query's own distance on ``a`` (dropped), the vertices of ``b`` read as arrays (exact)."""
    i = wp.tid()
    q = wp.mesh_query_ray(a, origins[i], wp.vec3(0.0, 0.0, -1.0), 1.0e6)
    m = wp.mesh_get(b)
    t[i] = wp.where(q.result, q.t, 0.0) + m.points[m.indices[3 * i]][2]


@wp.kernel
def accumulate_depth(mesh: wp.uint64, origins: wp.array(dtype=wp.vec3), acc: wp.array(dtype=float)):
    i = wp.tid()
    down = wp.vec3(0.0, 0.0, -1.0)
    q = wp.mesh_query_ray(mesh, origins[i], down, 1.0e6)
    if q.result:
        acc[i] += plane_distance(mesh, q.face, origins[i], down)


def depth_through_struct(mesh: wp.Mesh, origins: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    """A jax_callable passing the mesh's id inside a struct to a kernel whose distance comes from the query."""
    scene = Scene()
    scene.mesh = mesh.id
    scene.scale = 1.0
    wp.launch(scene_depth, dim=origins.shape[0], inputs=[scene, origins], outputs=[t], device=origins.device)


@wp.kernel
def scene_depth(scene: Scene, origins: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_ray(scene.mesh, origins[i], wp.vec3(0.0, 0.0, -1.0), 1.0e6)
    t[i] = wp.where(q.result, scene.scale * q.t, -1.0)
