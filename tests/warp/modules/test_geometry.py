"""Warp's geometry as pytrees (`jarp.warp.Mesh`, `Bvh`, `HashGrid`, `Volume`), built inside the call.

Values against brute-force NumPy references (ray distances, closest-point distances, neighbour counts, box
overlaps) with the structures' arrays traced inside the program, under `jit`, `vmap` and `grad`; vertex gradients
against finite differences; the refusal where Warp's adjoint drops a vertex gradient; refits and rebuilds; the
lifetime of what the call builds.
"""

import gc
import io
import os
import subprocess
import sys

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from jax.test_util import check_grads

from jarp.warp import Bvh, HashGrid, Mesh, Volume, jax_callable, jax_kernel
from jarp.warp._codegen import compile_aot
from jarp.warp._geometry import _builds as builds
from jarp.warp._geometry import _variants
from tests.support import kernels_geometry as kg
from tests.support.geometry import (
    FACES,
    ORIGINS,
    POINTS,
    heights,
    np_distances,
    np_ray_depths,
    with_heights,
)
from tests.support.gpu import cuda_device as cuda_device  # the fixture
from tests.support.gpu import requires_gpu
from tests.support.paths import REPO


def depths(kernel: wp.Kernel = kg.ray_depth, **options) -> eqx.Module:
    module = jax_kernel(kernel, **options)
    return jax.jit(lambda z, o: module(Mesh(points=with_heights(POINTS, z), indices=FACES), o)[0])


# -- values --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kernel", [kg.ray_depth, kg.ray_depth_builtin])
def test_ray_distances_match_a_brute_force_reference(kernel: wp.Kernel) -> None:
    z = heights(0)
    got = depths(kernel)(jnp.asarray(z), ORIGINS)
    want = np_ray_depths(with_heights(POINTS, z), FACES, ORIGINS)
    assert np.all(want > 0)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_closest_point_distances_match_a_brute_force_reference() -> None:
    x = np.random.default_rng(1).uniform(-0.5, 1.5, (64, 3)).astype(np.float32)
    z = heights(2)
    f = jax.jit(lambda p, x: jax_kernel(kg.closest_distance)(Mesh(points=p, indices=FACES), x)[0])
    got = f(with_heights(POINTS, z), x)
    np.testing.assert_allclose(got, np_distances(with_heights(POINTS, z), FACES, x), rtol=1e-4, atol=1e-5)


def test_a_closed_over_mesh_works_as_a_constant() -> None:
    mesh = Mesh(points=with_heights(POINTS, heights(3)), indices=FACES)
    got = jax.jit(lambda o: jax_kernel(kg.ray_depth)(mesh, o)[0])(ORIGINS)
    np.testing.assert_allclose(got, np_ray_depths(np.asarray(mesh.points), FACES, ORIGINS), rtol=1e-5, atol=1e-5)


def test_vmap_gives_each_element_its_own_mesh() -> None:
    zs = np.stack([heights(s) for s in range(3)])
    got = jax.vmap(depths(), in_axes=(0, None))(jnp.asarray(zs), ORIGINS)
    for k in range(3):
        np.testing.assert_allclose(got[k], np_ray_depths(with_heights(POINTS, zs[k]), FACES, ORIGINS), atol=1e-5)


def test_moved_points_are_refitted_and_new_triangles_rebuilt() -> None:
    f = jax.jit(lambda p, tri, o: jax_kernel(kg.ray_depth)(Mesh(points=p, indices=tri), o)[0])
    p1, p2 = with_heights(POINTS, heights(4)), with_heights(POINTS, heights(5))
    # A program's first call runs on the Python path, its later ones in the native handler (on the CPU, unless
    # JARP_LAUNCH=python): each builds the mesh once
    f(POINTS, FACES, ORIGINS)
    f(POINTS, FACES, ORIGINS)
    before = builds.totals()
    np.testing.assert_allclose(f(p1, FACES, ORIGINS), np_ray_depths(p1, FACES, ORIGINS), atol=1e-5)
    np.testing.assert_allclose(f(p2, FACES, ORIGINS), np_ray_depths(p2, FACES, ORIGINS), atol=1e-5)
    assert builds.totals()["build"] - before["build"] == 0
    assert builds.totals()["update"] - before["update"] == 2
    # the other diagonal of each cell: same shapes, new triangles
    flipped = np.concatenate([FACES[0::2][:, [0, 1, 2]], FACES[1::2]])[:, [0, 1, 2]]
    flipped = FACES[:, [1, 2, 0]][::-1].copy()
    np.testing.assert_allclose(f(p2, flipped, ORIGINS), np_ray_depths(p2, flipped, ORIGINS), atol=1e-5)
    assert builds.totals()["build"] - before["build"] == 1


# -- gradients -----------------------------------------------------------------------------------------------------


def test_vertex_gradients_match_finite_differences() -> None:
    f = depths(enable_backward=True)
    z = jnp.asarray(heights(6))
    check_grads(lambda z: f(z, ORIGINS), (z,), order=1, modes=["rev"], eps=1e-2, atol=2e-2, rtol=2e-2)
    g = jax.grad(lambda z: f(z, ORIGINS).sum())(z)
    # each ray's distance falls as its triangle's vertices rise: the gradient is not a silent zero
    assert float(jnp.sum(g)) == pytest.approx(-len(ORIGINS), rel=1e-3)


def test_a_query_s_own_distance_and_barycentrics_differentiate_through_the_vertices() -> None:
    # the query's smooth fields are recomputed from the vertices in the variant jarp differentiates: the same
    # gradient as the distance computed from the vertices in the kernel's own code
    f = depths(kg.ray_depth_builtin, enable_backward=True)
    z = jnp.asarray(heights(7))
    g = jax.grad(lambda z: f(z, ORIGINS).sum())(z)
    want = jax.grad(lambda z: depths(enable_backward=True)(z, ORIGINS).sum())(z)
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
    module = jax_kernel(kg.closest_distance, enable_backward=True)
    x = jnp.asarray(np.random.default_rng(8).uniform(0.1, 0.9, (8, 3)), jnp.float32)
    p = jnp.asarray(POINTS)
    gp = jax.jit(jax.grad(lambda p: module(Mesh(points=p, indices=FACES), x)[0].sum()))(p)
    # above a flat mesh the distance is |x_z - the plane's height there|: minus the closest point's weights
    np.testing.assert_allclose(float(gp[:, 2].sum()), -float(jnp.sum(jnp.sign(x[:, 2]))), rtol=1e-4)
    np.testing.assert_array_equal(gp, jax.grad(lambda p: module(Mesh(points=p, indices=FACES), x)[0].sum())(p))
    # the query points still differentiate, and stopping the points' gradient is the documented way out
    gx = jax.grad(lambda x: module(Mesh(points=p, indices=FACES), x)[0].sum())(x)
    np.testing.assert_allclose(np.abs(np.asarray(gx)[:, 2]), 1.0, atol=1e-4)  # above a flat mesh: d = |z|
    gp = jax.grad(lambda p: module(Mesh(points=jax.lax.stop_gradient(p), indices=FACES), x)[0].sum())(p)
    assert not np.any(gp)


def test_builtins_at_given_barycentrics_differentiate_through_the_vertices() -> None:
    rng = np.random.default_rng(17)
    faces = rng.integers(0, len(FACES), 6).astype(np.int32)
    bary = rng.dirichlet(np.ones(3), 6)[:, :2].astype(np.float32)
    module = jax_kernel(kg.markers, num_outputs=3, enable_backward=True)

    def f(p: jax.Array, v: jax.Array) -> tuple[jax.Array, ...]:
        return module(Mesh(points=p, indices=FACES, velocities=v), faces, bary)

    p = jnp.asarray(with_heights(POINTS, heights(18)))
    v = jnp.asarray(rng.normal(size=POINTS.shape), jnp.float32)
    x, vel, n = jax.jit(f)(p, v)
    a, b, c = (np.asarray(p)[FACES[faces, k]] for k in range(3))
    w = np.concatenate([bary, 1.0 - bary.sum(1, keepdims=True)], 1)
    np.testing.assert_allclose(x, w[:, :1] * a + w[:, 1:2] * b + w[:, 2:] * c, rtol=1e-5, atol=1e-6)
    va, vb, vc = (np.asarray(v)[FACES[faces, k]] for k in range(3))
    np.testing.assert_allclose(vel, w[:, :1] * va + w[:, 1:2] * vb + w[:, 2:] * vc, rtol=1e-5, atol=1e-6)
    normal = np.cross(b - a, c - a)
    np.testing.assert_allclose(n, normal / np.linalg.norm(normal, axis=1, keepdims=True) + b, rtol=1e-5, atol=1e-6)
    check_grads(jax.jit(f), (p, v), order=1, modes=["rev"], eps=1e-2, atol=2e-2, rtol=2e-2)
    gp = jax.grad(lambda p: f(p, v)[0].sum())(p)
    assert float(gp.sum()) == pytest.approx(3 * len(faces), rel=1e-4)  # each marker's coordinates sum to its weights
    # inside a @wp.func too (the variant calls a rewritten copy of the function)
    inner = jax_kernel(kg.markers_in_a_function, enable_backward=True)
    gi = jax.jit(jax.grad(lambda p: inner(Mesh(points=p, indices=FACES), faces, bary)[0].sum()))(p)
    np.testing.assert_allclose(gi, gp, rtol=1e-6)


def test_results_through_reference_arguments_refuse_to_differentiate() -> None:
    # Warp's older query overloads write the distance into the caller's variable: followed as the result struct is
    f = depths(kg.ray_depth_out_params, enable_backward=True)
    z = jnp.asarray(heights(25))
    np.testing.assert_allclose(
        f(z, ORIGINS), np_ray_depths(with_heights(POINTS, np.asarray(z)), FACES, ORIGINS), atol=1e-5
    )
    with pytest.raises(ValueError, match=r"mesh\.points.*wp\.mesh_query_ray"):
        jax.jit(jax.grad(lambda z: f(z, ORIGINS).sum()))(z)


def test_two_meshes_differentiate_each_through_its_own_vertices() -> None:
    module = jax_kernel(kg.two_meshes, enable_backward=True)
    a = Mesh(points=POINTS, indices=FACES)
    origins = ORIGINS[: len(FACES) // 2]
    # b's vertices are read as arrays: its gradient is exact even though a's distance is Warp's
    g = jax.jit(jax.grad(lambda p: module(a, Mesh(points=p, indices=FACES), origins)[0].sum()))(jnp.asarray(POINTS))
    want = np.zeros_like(POINTS)
    np.add.at(want[:, 2], FACES[: len(origins), 0], 1.0)
    np.testing.assert_array_equal(g, want)
    # a's distance is the query's, recomputed from a's vertices in the variant: minus each hit's weights
    g = jax.jit(jax.grad(lambda p: module(Mesh(points=p, indices=FACES), a, origins)[0].sum()))(jnp.asarray(POINTS))
    assert float(g[:, 2].sum()) == pytest.approx(-len(origins), rel=1e-4)


def test_a_kernel_with_structures_and_in_out_outputs_only() -> None:
    module = jax_kernel(kg.accumulate_depth, in_out_argnames=["acc"], enable_backward=True)
    acc = jnp.ones(len(ORIGINS), jnp.float32)
    f = jax.jit(lambda z: module(Mesh(points=with_heights(POINTS, z), indices=FACES), ORIGINS, acc)[0])
    z = heights(26)
    np.testing.assert_allclose(
        f(jnp.asarray(z)), 1.0 + np_ray_depths(with_heights(POINTS, z), FACES, ORIGINS), atol=1e-5
    )
    check_grads(f, (jnp.asarray(z),), order=1, modes=["rev"], eps=1e-2, atol=2e-2, rtol=2e-2)


def test_velocities_at_queried_barycentrics_differentiate() -> None:
    # the barycentrics depend on the points (recomputed from them in the variant), the velocities enter linearly
    module = jax_kernel(kg.vertex_velocity, enable_backward=True)
    x = jnp.asarray(np.random.default_rng(19).uniform(0.1, 0.9, (6, 3)), jnp.float32)
    p = jnp.asarray(with_heights(POINTS, heights(20)))
    v = jnp.asarray(np.random.default_rng(21).normal(size=POINTS.shape), jnp.float32)
    f = jax.jit(lambda p, v: module(Mesh(points=p, indices=FACES, velocities=v), x)[0])
    check_grads(lambda v: f(p, v), (v,), order=1, modes=["rev"], eps=1e-2, atol=1e-2, rtol=1e-2)
    assert np.any(jax.grad(lambda v: f(p, v).sum())(v))
    check_grads(lambda p: f(p, v), (p,), order=1, modes=["rev"], eps=1e-3, atol=2e-2, rtol=2e-2)


def test_a_piecewise_constant_query_differentiates_to_zero() -> None:
    module = jax_kernel(kg.ray_hits, enable_backward=True)
    g = jax.grad(lambda p: module(Mesh(points=p, indices=FACES), ORIGINS)[0].sum())(jnp.asarray(POINTS))
    assert not np.any(g)


@pytest.mark.x64
def test_float64_points_are_rounded_for_warp_and_differentiate_in_float64() -> None:
    assert jax.config.jax_enable_x64
    module = jax_kernel(kg.ray_depth, enable_backward=True)
    f = jax.jit(lambda z, o: module(Mesh(points=jnp.asarray(POINTS, jnp.float64).at[:, 2].set(z), indices=FACES), o)[0])
    z = jnp.asarray(heights(24), jnp.float64)
    t = f(z, ORIGINS)
    np.testing.assert_allclose(
        t, np_ray_depths(with_heights(POINTS, np.asarray(z, np.float32)), FACES, ORIGINS), atol=1e-5
    )
    g = jax.grad(lambda z: f(z, ORIGINS).sum())(z)
    assert g.dtype == jnp.float64
    assert float(g.sum()) == pytest.approx(-len(ORIGINS), rel=1e-3)


# -- jax_callable ---------------------------------------------------------------------------------------------------


def test_a_callable_receives_the_warp_mesh_and_differentiates() -> None:
    module = jax_callable(kg.depth_function, enable_backward=True)
    f = jax.jit(lambda z: module(Mesh(points=with_heights(POINTS, z), indices=FACES), ORIGINS)[0])
    z = heights(9)
    np.testing.assert_allclose(f(jnp.asarray(z)), np_ray_depths(with_heights(POINTS, z), FACES, ORIGINS), atol=1e-5)
    check_grads(f, (jnp.asarray(z),), order=1, modes=["rev"], eps=1e-2, atol=2e-2, rtol=2e-2)


def test_a_callable_whose_kernel_drops_the_vertex_gradient_refuses_to_differentiate() -> None:
    module = jax_callable(kg.builtin_depth_function, enable_backward=True)
    f = jax.jit(lambda z: module(Mesh(points=with_heights(POINTS, z), indices=FACES), ORIGINS)[0])
    z = jnp.asarray(heights(22))
    np.testing.assert_allclose(f(z), np_ray_depths(with_heights(POINTS, np.asarray(z)), FACES, ORIGINS), atol=1e-5)
    with pytest.raises(
        Exception, match=r"kernel 'ray_depth_builtin' reads a mesh's points through .*wp\.mesh_query_ray \(\.t\)"
    ):
        jax.block_until_ready(jax.grad(lambda z: f(z).sum())(z))
    # a mesh the function builds itself from a differentiated input: the same rule
    own = jax_callable(kg.mesh_distance, enable_backward=True)
    x = jnp.full((3, 3), 0.4, jnp.float32)
    with pytest.raises(
        Exception, match=r"kernel 'mesh_distance_kernel' reads a mesh's points through .*wp\.mesh_eval_position"
    ):
        jax.block_until_ready(jax.grad(lambda p: own(p, FACES.reshape(-1), x)[0].sum())(jnp.asarray(POINTS)))


def test_a_callable_passing_the_id_in_a_struct_is_checked_too() -> None:
    module = jax_callable(kg.depth_through_struct, enable_backward=True)
    f = jax.jit(lambda z: module(Mesh(points=with_heights(POINTS, z), indices=FACES), ORIGINS)[0])
    z = jnp.asarray(heights(27))
    np.testing.assert_allclose(f(z), np_ray_depths(with_heights(POINTS, np.asarray(z)), FACES, ORIGINS), atol=1e-5)
    with pytest.raises(Exception, match=r"kernel 'scene_depth' reads a mesh's points through .*\(\.t\)"):
        jax.block_until_ready(jax.grad(lambda z: f(z).sum())(z))
    # the gradient with respect to the rays alone is not refused (the mesh is not differentiated)
    g = jax.grad(lambda o: module(Mesh(points=POINTS, indices=FACES), o)[0].sum())(jnp.asarray(ORIGINS))
    np.testing.assert_allclose(np.asarray(g)[:, 2], 1.0, atol=1e-5)


def test_a_callable_refuses_to_differentiate_a_volumes_values() -> None:
    values = np.ones((4, 4, 4), np.float32)
    module = jax_callable(kg.volume_function, enable_backward=True)
    x = jnp.full((2, 3), 1.0, jnp.float32)
    with pytest.raises(ValueError, match=r"volume\.values.*volume samplers"):
        jax.grad(lambda v: module(Volume(values=v), x)[0].sum())(jnp.asarray(values))


def test_a_callable_parameter_for_a_structure_names_the_pytree() -> None:
    module = jax_callable(kg.depth_function)
    with pytest.raises(TypeError, match=r"argument 'mesh' takes a wp\.Mesh.*jarp\.warp\.Mesh\(\.\.\.\)"):
        module(np.zeros(3, np.float32), ORIGINS)


def test_derivative_rules_are_not_silently_skipped_for_a_call_with_structures() -> None:
    module = jax_kernel(kg.ray_depth, vjp=jax_kernel(kg.ray_depth))
    with pytest.raises(TypeError, match=r"jvp=/vjp= rules are not applied"):
        module(Mesh(points=POINTS, indices=FACES), ORIGINS)


def test_a_structure_for_a_function_parameter_of_another_type_names_the_annotation() -> None:
    module = jax_callable(kg.depth_function)
    mesh = Mesh(points=POINTS, indices=FACES)
    with pytest.raises(TypeError, match=r"argument 'origins' is a jarp\.warp\.Mesh.*annotate it wp\.Mesh"):
        module(mesh, mesh)


def test_a_structure_where_the_kernel_takes_no_id_names_the_parameter() -> None:
    mesh = Mesh(points=POINTS, indices=FACES)
    with pytest.raises(TypeError, match=r"argument 'origins' is a jarp\.warp\.Mesh.*annotate the parameter wp\.uint64"):
        jax_kernel(kg.ray_depth)(mesh, mesh)


def test_a_sharded_batch_builds_each_mesh_where_its_element_lives() -> None:
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.geometry_sharding_script"],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "geometry sharding ok" in proc.stdout


# -- hash grids, BVHs, volumes ------------------------------------------------------------------------------------


def np_neighbour_counts(x: np.ndarray, r: float) -> np.ndarray:
    d = np.linalg.norm(x[:, None] - x[None], axis=-1)
    return ((d < r) & ~np.eye(len(x), dtype=bool)).sum(1)


def test_hash_grid_neighbour_counts_match_brute_force() -> None:
    rng = np.random.default_rng(10)
    xs = rng.uniform(0.0, 1.0, (2, 300, 3)).astype(np.float32)
    r = 0.15
    module = jax_kernel(kg.neighbour_counts)
    f = jax.jit(lambda x: module(HashGrid(points=x, radius=r, dims=(16, 16, 16)), x, r)[0])
    np.testing.assert_array_equal(f(xs[0]), np_neighbour_counts(xs[0], r))
    got = jax.vmap(f)(jnp.asarray(xs))
    for k in range(2):
        np.testing.assert_array_equal(got[k], np_neighbour_counts(xs[k], r))


def test_a_hash_grid_energy_differentiates_through_the_points_array() -> None:
    x = jnp.asarray(np.random.default_rng(11).uniform(0.0, 1.0, (60, 3)), jnp.float32)
    r = 0.3
    module = jax_kernel(kg.neighbour_energy, enable_backward=True, output_dims=1)
    f = jax.jit(lambda x: module(HashGrid(points=x, radius=r, dims=(8, 8, 8)), x, r)[0][0])
    d = np.linalg.norm(np.asarray(x)[:, None] - np.asarray(x)[None], axis=-1)
    want = np.where((d < r) & ~np.eye(len(x), dtype=bool), (r - d) ** 2, 0.0).sum()
    np.testing.assert_allclose(f(x), want, rtol=1e-4)
    check_grads(f, (x,), order=1, modes=["rev"], eps=1e-3, atol=5e-2, rtol=5e-2)


def test_bvh_box_overlaps_match_brute_force() -> None:
    rng = np.random.default_rng(12)
    centres = rng.uniform(0.0, 1.0, (200, 3)).astype(np.float32)
    queries = rng.uniform(0.0, 1.0, (50, 3)).astype(np.float32)
    f = jax.jit(lambda c, q: jax_kernel(kg.box_overlaps)(Bvh(lowers=c - 0.05, uppers=c + 0.05), q - 0.1, q + 0.1)[0])
    want = (np.abs(queries[:, None] - centres[None]) <= 0.15).all(-1).sum(1)
    np.testing.assert_array_equal(f(centres, queries), want)
    moved = centres + 0.2
    want = (np.abs(queries[:, None] - moved[None]) <= 0.15).all(-1).sum(1)
    np.testing.assert_array_equal(f(moved, queries), want)


def test_a_volume_samples_its_voxels() -> None:
    values = np.random.default_rng(13).normal(size=(6, 5, 4)).astype(np.float32)
    idx = np.array([[1, 2, 3], [4, 0, 1], [2, 2, 2]])
    x = (idx * 0.5 + np.array([1.0, -1.0, 0.0])).astype(np.float32)
    volume = Volume(values=values, voxel_size=0.5, origin=(1.0, -1.0, 0.0))
    (phi,) = jax.jit(lambda v, x: jax_kernel(kg.volume_sample)(eqx.tree_at(lambda s: s.values, volume, v), x))(
        values, x
    )
    np.testing.assert_allclose(phi, values[idx[:, 0], idx[:, 1], idx[:, 2]], rtol=1e-6)
    module = jax_kernel(kg.volume_sample, enable_backward=True)
    with pytest.raises(ValueError, match=r"volume\.values.*wp\.volume_sample_f"):
        jax.grad(lambda v: module(eqx.tree_at(lambda s: s.values, volume, v), x)[0].sum())(jnp.asarray(values))


# -- lifetimes and memory -----------------------------------------------------------------------------------------


def test_two_hundred_steps_with_new_points_build_once() -> None:
    f = depths(enable_backward=True)
    loss = lambda z: jnp.sum((f(z, ORIGINS) - 9.9) ** 2)  # noqa: E731
    step = jax.jit(lambda z: z - 0.5 * jax.grad(loss)(z))
    z = jnp.asarray(heights(14))
    initial = float(loss(z))
    z = step(z)
    z = step(z)  # the forward's first call on the Python path, its second in the native handler (where it runs)
    before = builds.totals()
    for _ in range(198):
        z = step(z)
    jax.block_until_ready(z)
    # forward and taped replay refit theirs each step; nothing is built again (so nothing accumulates)
    assert builds.totals()["build"] == before["build"]
    assert builds.totals()["update"] - before["update"] == 2 * 198
    assert float(loss(z)) < 1e-4 * initial


@pytest.mark.parametrize("kind", ["mesh", "grid"])
def test_new_points_neither_retrace_nor_make_new_plans(kind: str) -> None:
    from jarp.warp import list_plans

    if kind == "mesh":
        module = jax_kernel(kg.ray_depth)
        call = lambda p: module(Mesh(points=p, indices=FACES), ORIGINS)[0]  # noqa: E731
    else:
        module = jax_kernel(kg.neighbour_counts)
        call = lambda p: module(HashGrid(points=p, radius=0.3, dims=(4, 4, 4)), p, 0.3)[0]  # noqa: E731
    f = eqx.filter_jit(eqx.debug.assert_max_traces(call, max_traces=1))
    f(jnp.asarray(POINTS))
    plans = len(list_plans())
    for s in range(3):
        jax.block_until_ready(f(jnp.asarray(with_heights(POINTS, heights(30 + s)))))
    # another trace of the same call rebuilds an equal launcher, so it shares the plan
    jax.block_until_ready(jax.jit(call)(jnp.asarray(POINTS)))
    assert len(list_plans()) == plans


def test_what_the_call_built_outlives_every_handle_the_user_had() -> None:
    f = depths()
    z = heights(15)
    want = np_ray_depths(with_heights(POINTS, z), FACES, ORIGINS)
    np.testing.assert_allclose(f(jnp.asarray(z), ORIGINS), want, atol=1e-5)
    gc.collect()  # no user object holds the Warp mesh: the call's store does
    np.testing.assert_allclose(f(jnp.asarray(z), ORIGINS), want, atol=1e-5)


def test_one_program_calling_a_module_on_two_topologies_refits_both() -> None:
    module = jax_kernel(kg.ray_depth)
    flipped = FACES[:, [1, 2, 0]][::-1].copy()
    f = jax.jit(
        lambda p: (
            module(Mesh(points=p, indices=FACES), ORIGINS)[0],
            module(Mesh(points=p, indices=flipped), ORIGINS)[0],
        )
    )
    f(jnp.asarray(POINTS))
    f(jnp.asarray(POINTS))  # the first call on the Python path, the second in the native handler (where it runs)
    before = builds.totals()
    for s in range(3):
        p = with_heights(POINTS, heights(40 + s))
        t1, t2 = f(jnp.asarray(p))
        np.testing.assert_allclose(t1, np_ray_depths(p, FACES, ORIGINS), atol=1e-5)
        np.testing.assert_allclose(t2, np_ray_depths(p, flipped, ORIGINS), atol=1e-5)
    assert builds.totals()["build"] == before["build"]


def test_empty_structures_are_refused_before_warp_sees_them() -> None:
    with pytest.raises(ValueError, match=r"jarp\.warp\.Mesh: indices is empty"):
        Mesh(points=POINTS, indices=np.zeros((0, 3), np.int32))
    with pytest.raises(ValueError, match=r"jarp\.warp\.Bvh: lowers is empty"):
        jax_kernel(kg.box_overlaps)(Bvh(lowers=np.zeros((0, 3)), uppers=np.zeros((0, 3))), POINTS, POINTS)


def test_without_enable_backward_the_message_names_the_kernel_module() -> None:
    module = jax_kernel(kg.ray_depth)
    with pytest.raises(
        Exception, match=r"jax_kernel\(ray_depth\) with Warp structures .*enable_backward=True to jax_kernel\(\)"
    ):
        jax.grad(lambda p: module(Mesh(points=p, indices=FACES), ORIGINS)[0].sum())(jnp.asarray(POINTS))


def test_a_model_holding_a_mesh_serialises_its_leaves() -> None:
    mesh = Mesh(points=with_heights(POINTS, heights(16)), indices=FACES, bvh_constructor="median")
    buffer = io.BytesIO()
    eqx.tree_serialise_leaves(buffer, mesh)
    buffer.seek(0)
    like = Mesh(points=np.zeros_like(POINTS), indices=np.zeros_like(FACES), bvh_constructor="median")
    back = eqx.tree_deserialise_leaves(buffer, like)
    np.testing.assert_array_equal(back.points, mesh.points)
    assert back.bvh_constructor == "median"
    assert hash(jax.tree_util.tree_structure(back)) == hash(jax.tree_util.tree_structure(mesh))


# -- CUDA ----------------------------------------------------------------------------------------------------------


def test_the_geometry_kernels_and_their_vertex_variants_compile_for_cuda() -> None:
    # NVRTC, no driver: the query kernels build for sm_90 and the variant the reverse pass launches for sm_80 (one
    # architecture each: what differs between them is Warp's, and every geometry build by NVRTC takes seconds; the
    # suite's other kernels build for both in tests/warp/cuda/test_gpu.py). Into Warp's kernel cache, by the
    # modules' hashes: a later run finds the binaries built from this code and skips NVRTC.
    paths = compile_aot(kg, arch=90)
    assert sorted(paths) == [90]
    assert all(p.exists() for p in paths.values())
    variant = _variants.vertex_reads(kg.markers)
    assert variant is not kg.markers
    paths = compile_aot(variant, arch=80)
    assert sorted(paths) == [80]
    assert all(p.exists() for p in paths.values())


@pytest.mark.gpu
@requires_gpu
def test_gpu_meshes_are_built_refitted_and_differentiated_on_the_device(cuda_device: object) -> None:
    f = depths(enable_backward=True)
    zs = np.stack([heights(s) for s in range(3)])
    on_gpu = jax.device_put(jnp.asarray(zs), cuda_device)
    out = jax.vmap(f, in_axes=(0, None))(on_gpu, jax.device_put(ORIGINS, cuda_device))
    assert out.devices() == {cuda_device}
    for k in range(3):
        np.testing.assert_allclose(out[k], np_ray_depths(with_heights(POINTS, zs[k]), FACES, ORIGINS), atol=1e-5)
    before = builds.totals()
    for k in range(3):  # moved points: refits on the call's stream, no build
        np.testing.assert_allclose(
            f(on_gpu[k], ORIGINS), np_ray_depths(with_heights(POINTS, zs[k]), FACES, ORIGINS), atol=1e-5
        )
    assert builds.totals()["build"] - before["build"] <= 1
    g = jax.jit(jax.grad(lambda z: f(z, ORIGINS).sum()))(on_gpu[0])
    assert float(g.sum()) == pytest.approx(-len(ORIGINS), rel=1e-3)


@pytest.mark.gpu
@requires_gpu
def test_gpu_hash_grid_counts_match_brute_force(cuda_device: object) -> None:
    x = np.random.default_rng(23).uniform(0.0, 1.0, (500, 3)).astype(np.float32)
    r = 0.15
    module = jax_kernel(kg.neighbour_counts)
    f = jax.jit(lambda x: module(HashGrid(points=x, radius=r, dims=(16, 16, 16)), x, r)[0])
    got = f(jax.device_put(x, cuda_device))
    assert got.devices() == {cuda_device}
    np.testing.assert_array_equal(got, np_neighbour_counts(x, r))
