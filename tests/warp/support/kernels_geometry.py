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
