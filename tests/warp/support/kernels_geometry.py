"""Kernels that query Warp structures by id, for the id-argument tests (`tests/warp/test_binding.py`)."""

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
