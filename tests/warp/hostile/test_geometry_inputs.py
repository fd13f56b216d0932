"""Hostile input to calls with Warp structures: every input checked before a structure is built or a kernel launched.

A call given a `jarp.warp.Mesh` (or `Bvh`, `HashGrid`, `Volume`) goes through the checks every call gets (launch
dims against the arrays the kernel indexes, outputs covering the launch, writes); triangle indices are checked in
range inside the call, before Warp reads the points through them; a structure's arrays are inputs no kernel may
write; a structure's id never leaves the call; a hash grid is queried in the precision it was built in; static
options and shapes are refused at construction with jarp's own words. Where the old behaviour crashed the process,
the call runs in a child (`tests.support.forked`), so that a regression fails the test instead of the run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import Bvh, HashGrid, Mesh, Volume, jax_kernel
from jarp.warp._plan._analysis import _builtins
from tests.support import forked
from tests.support import kernels_geometry_inputs as kgi
from tests.support.paths import REPO

POINTS = np.array([[0.0, 0.0, 0.0], [1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [1.0, 1.0, 0.0]], np.float32)
FACES = np.array([[0, 1, 3], [0, 3, 2]], np.int32)
QUERIES = np.random.default_rng(0).uniform(-0.2, 1.2, (8, 3)).astype(np.float32)


def mesh(faces: object = FACES, points: object = POINTS, **kw: object) -> Mesh:
    return Mesh(points=jnp.asarray(points), indices=jnp.asarray(faces), **kw)


def np_closest_faces(points: np.ndarray, faces: np.ndarray, queries: np.ndarray) -> np.ndarray:
    """The face nearest each query (the two triangles of the unit square: x >= y picks face 0)."""
    assert faces.tolist() == FACES.tolist()
    assert np.allclose(points[:, 2], 0)
    return np.where(np.clip(queries[:, 0], 0, 1) >= np.clip(queries[:, 1], 0, 1), 0, 1)


def run_child(body: str) -> subprocess.CompletedProcess[str]:
    """Run ``body`` (which may crash the process) in a child with the mesh above; return its result."""
    code = "\n".join(
        [
            "import jax, jax.numpy as jnp, numpy as np, warp as wp",
            "wp.config.quiet = True; wp.config.log_level = wp.LOG_WARNING",
            "from jarp.warp import Mesh, jax_kernel",
            "from tests.support import kernels_geometry_inputs as kgi",
            f"POINTS = np.array({POINTS.tolist()}, np.float32); FACES = np.array({FACES.tolist()}, np.int32)",
            f"QUERIES = np.array({QUERIES.tolist()}, np.float32)",
            textwrap.dedent(body),
        ]
    )
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return forked.run([sys.executable, "-c", code], env=env, timeout=300, cwd=REPO)


# -- the launch checks every call gets ---------------------------------------------------------------------------------


def test_outputs_smaller_than_the_launch_are_refused_as_without_a_structure() -> None:
    # the same call with the mesh's id as a plain integer is refused with the same words; before, the call with the
    # mesh wrote past the output (the process died or its heap was corrupted)
    proc = run_child(
        """
        for mesh in (Mesh(points=POINTS, indices=FACES), np.uint64(1)):
            try:
                jax_kernel(kgi.closest_face, output_dims={"face": (2,)}, launch_dims=(8,))(mesh, QUERIES)
            except ValueError as e:
                print("refused:", e)
        """
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [line for line in proc.stdout.splitlines() if line.startswith("refused:")]
    assert len(lines) == 2, proc.stdout
    assert lines[0] == lines[1]
    assert "'face' has dims (2,), smaller than the launch dims (8,)" in lines[0]


def test_an_inferred_launch_over_a_shorter_input_is_refused() -> None:
    # the launch is inferred from `p` (8 points); `w` has 3 elements and is read at wp.tid()
    proc = run_child(
        """
        try:
            jax_kernel(kgi.weighted_face)(Mesh(points=POINTS, indices=FACES), QUERIES, jnp.ones(3))
        except ValueError as e:
            print("refused:", e)
        """
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "refused:" in proc.stdout
    assert "indexes w with wp.tid() on every thread" in proc.stdout
    assert "w has 3 elements" in proc.stdout


# -- triangle indices --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [4, -1, 2**28, -(2**28)])
def test_a_triangle_index_out_of_range_is_refused_inside_the_call(bad: int) -> None:
    # traced indices under jit: only the call can see the values; before the check, Warp read past the points
    proc = run_child(
        f"""
        f = jax.jit(lambda t: jax_kernel(kgi.closest_face)(Mesh(points=POINTS, indices=t), QUERIES)[0])
        try:
            f(jnp.asarray(FACES).at[1, 2].set({bad})).block_until_ready()
        except Exception as e:
            print("refused:", type(e).__name__, e)
        print("fine:", f(jnp.asarray(FACES)).tolist())
        """
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"triangle 1 refers to vertex {bad} (indices[1, 2]), but the mesh has 4 points" in proc.stdout
    assert "the jarp.warp.Mesh given for 'mesh'" in proc.stdout
    # a later call with good indices runs (the error left nothing behind)
    assert proc.stdout.strip().splitlines()[-1] == "fine: " + str(np_closest_faces(POINTS, FACES, QUERIES).tolist())


def test_each_batch_element_s_indices_are_checked_under_vmap() -> None:
    f = jax.jit(jax.vmap(lambda t: jax_kernel(kgi.closest_face)(mesh(t), QUERIES)[0]))
    good = jnp.stack([jnp.asarray(FACES)] * 3)
    np.testing.assert_array_equal(f(good), np.stack([np_closest_faces(POINTS, FACES, QUERIES)] * 3))
    with pytest.raises(Exception, match=r"refers to vertex 9 \(indices\[0, 1\]\)"):
        f(good.at[2, 0, 1].set(9)).block_until_ready()


def test_indices_changed_in_place_are_checked_before_the_refit() -> None:
    # same shapes, new topology: the refit path sees new triangles and rebuilds from checked ones
    f = jax.jit(lambda t: jax_kernel(kgi.closest_face)(mesh(t), QUERIES)[0])
    f(jnp.asarray(FACES)).block_until_ready()
    with pytest.raises(Exception, match=r"refers to vertex 5"):
        f(jnp.asarray(FACES).at[0, 0].set(5)).block_until_ready()


@pytest.mark.x64
def test_int64_indices_of_two_to_the_31_are_refused_not_wrapped() -> None:
    # 2**31 + 1 narrowed to int32 would be -2**31 + 1; the call checks the int64 values before narrowing
    faces = jnp.asarray(FACES, jnp.int64)
    f = jax.jit(lambda t: jax_kernel(kgi.closest_face)(mesh(t), QUERIES)[0])
    np.testing.assert_array_equal(f(faces), np_closest_faces(POINTS, FACES, QUERIES))
    with pytest.raises(Exception, match=r"refers to vertex 2147483649"):
        f(faces.at[1, 0].set(2**31 + 1)).block_until_ready()


def test_flat_indices_must_come_three_per_triangle() -> None:
    with pytest.raises(ValueError, match=r"three per triangle, got 5"):
        mesh(FACES.reshape(-1)[:5])
    np.testing.assert_array_equal(
        jax_kernel(kgi.closest_face)(mesh(FACES.reshape(-1)), QUERIES)[0], np_closest_faces(POINTS, FACES, QUERIES)
    )


def test_velocities_need_one_row_per_point() -> None:
    with pytest.raises(ValueError, match=r"velocities has shape \(2, 3\) but points has \(4, 3\)"):
        mesh(velocities=jnp.zeros((2, 3)))


def test_float_indices_are_refused_at_construction() -> None:
    with pytest.raises(TypeError, match=r"indices must be integers"):
        mesh(FACES.astype(np.float32))


# -- a structure's arrays are inputs; its id stays inside the call ---------------------------------------------------


@pytest.mark.parametrize(
    ("kernel", "path"),
    [
        (kgi.store_into_points, "mesh.points"),
        (kgi.add_into_velocities, "mesh.velocities"),
        (kgi.store_through_a_function, "mesh.points"),
    ],
)
@pytest.mark.parametrize("jit", [False, True])
def test_a_store_into_a_structure_s_arrays_is_refused(kernel: wp.Kernel, path: str, jit: bool) -> None:
    m = mesh(velocities=jnp.zeros((4, 3)))
    before = np.asarray(m.points).copy()
    call = jax_kernel(kernel)
    with pytest.raises(ValueError, match=rf"writes {path} .*an array of the jarp.warp.Mesh given for 'mesh'"):
        (jax.jit(call) if jit else call)(m, QUERIES)
    np.testing.assert_array_equal(np.asarray(m.points), before)


def test_a_store_into_a_volume_is_refused() -> None:
    with pytest.raises(ValueError, match=r"writes the jarp.warp.Volume given for 'vol' \(by wp.volume_store_f\)"):
        jax_kernel(kgi.store_into_a_volume)(Volume(values=jnp.ones((4, 4, 4))), QUERIES)


@pytest.mark.parametrize("kernel", [kgi.store_the_id, kgi.store_a_derived_id])
def test_an_id_stored_into_an_output_is_refused(kernel: wp.Kernel) -> None:
    # before, the id outlived its structure (which leaves the call's store after four others): reading it later
    # through a query crashed the process
    with pytest.raises(ValueError, match=r"uses the id of the jarp.warp.Mesh given for 'mesh' other than to query"):
        jax_kernel(kernel)(mesh(), QUERIES)


@pytest.mark.parametrize("kernel", [kgi.query_in_a_function, kgi.closest_face])
def test_queries_in_the_kernel_or_its_functions_are_accepted(kernel: wp.Kernel) -> None:
    (face,) = jax.jit(jax_kernel(kernel))(mesh(), QUERIES)
    np.testing.assert_array_equal(face, np_closest_faces(POINTS, FACES, QUERIES))


def test_reading_a_structure_s_arrays_is_accepted() -> None:
    (out,) = jax_kernel(kgi.read_vertices)(mesh(), QUERIES)
    assert out.shape == (8,)
    assert np.all(np.asarray(out) >= 4.0)


def test_every_warp_builtin_taking_a_structure_id_is_classified() -> None:
    # a builtin Warp adds (a new query, a new store) must be judged before a kernel calling it is trusted
    from warp._src import context  # a test may read Warp's registry directly

    taking_ids = set()
    for key, f in context.builtin_functions.items():
        for overload in getattr(f, "overloads", [f]):
            types = getattr(overload, "input_types", None) or {}
            first = next(iter(types.items()), None)
            if first is not None and first[0] == "id" and first[1] is wp.uint64:
                taking_ids.add(key)
    known = _builtins.STRUCTURE_READS | _builtins.STRUCTURE_WRITES | _builtins.STRUCTURE_GETS | _builtins.STRUCTURE_IDS
    assert taking_ids == known


# -- hash-grid precision -----------------------------------------------------------------------------------------------


def np_neighbour_counts(x: np.ndarray, r: float) -> np.ndarray:
    x = np.asarray(x, np.float64)
    return (np.linalg.norm(x[:, None] - x[None], axis=-1) <= r).sum(1)


@pytest.mark.parametrize("grid_dtype", ["float16", "float32", pytest.param("float64", marks=pytest.mark.x64)])
def test_a_hash_grid_of_any_precision_gives_a_float32_query_the_right_counts(grid_dtype: str) -> None:
    # points exactly representable in float16, so every precision counts the same neighbours
    x = np.round(np.random.default_rng(1).uniform(0, 1, (300, 3)) * 64) / 64
    r = 0.2
    grid = HashGrid(points=jnp.asarray(x, grid_dtype), radius=r, dims=(8, 8, 8))
    call = jax_kernel(kgi.count_neighbours)
    (c,) = jax.jit(lambda g, p: call(g, p, r))(grid, jnp.asarray(x, jnp.float32))
    np.testing.assert_array_equal(c, np_neighbour_counts(x.astype(np.float32), r))


@pytest.mark.x64
def test_a_float32_hash_grid_gives_a_float64_query_the_right_counts() -> None:
    x = np.round(np.random.default_rng(2).uniform(0, 1, (300, 3)) * 64) / 64
    grid = HashGrid(points=jnp.asarray(x, jnp.float32), radius=0.2, dims=(8, 8, 8))
    (c,) = jax_kernel(kgi.count_neighbours_f64)(grid, jnp.asarray(x), 0.2)
    np.testing.assert_array_equal(c, np_neighbour_counts(x, 0.2))


# -- static options and shapes at construction -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: Volume(values=jnp.ones((2, 2, 2)), voxel_size=0.0), r"voxel_size must be positive"),
        (lambda: Volume(values=jnp.ones((2, 2, 2)), voxel_size=-1.0), r"voxel_size must be positive"),
        (lambda: Volume(values=jnp.ones((2, 2)), voxel_size=1.0), r"values must have shape \(nx, ny, nz\)"),
        (lambda: Bvh(lowers=jnp.zeros((3, 3)), uppers=jnp.ones((4, 3))), r"uppers has shape \(4, 3\) but lowers"),
        (lambda: Bvh(lowers=jnp.zeros((3, 3)), uppers=jnp.ones((3, 3)), leaf_size=0), r"leaf_size must be a positive"),
        (
            lambda: Bvh(lowers=jnp.zeros((3, 3)), uppers=jnp.ones((3, 3)), constructor="fast"),
            r"constructor must be one",
        ),
        (lambda: mesh(bvh_leaf_size=0), r"bvh_leaf_size must be a positive int"),
        (lambda: mesh(bvh_constructor="quick"), r"bvh_constructor must be one of"),
        (lambda: HashGrid(points=jnp.zeros((3, 2)), radius=1.0), r"points must have shape \(n, 3\)"),
        (lambda: HashGrid(points=jnp.zeros((3, 3)), radius=float("nan")), r"radius must be positive"),
        (lambda: HashGrid(points=jnp.zeros((3, 3)), radius=1.0, dims=(2.7, 2, 2)), r"dims must be three positive"),
        (lambda: HashGrid(points=jnp.zeros((3, 3)), radius=1.0, dims=(True, 2, 2)), r"dims must be three positive"),
        (lambda: HashGrid(points=jnp.zeros((3, 3)), radius=1.0, dims=(65536, 65536, 1)), r"product is below 2\*\*31"),
        (lambda: Bvh(lowers=jnp.zeros((3, 3)), uppers=jnp.ones((3, 3)), leaf_size=2**31), r"below 2\*\*31"),
        (lambda: mesh(bvh_leaf_size=2**32), r"bvh_leaf_size must be a positive int below 2\*\*31"),
        (lambda: Volume(values=jnp.ones((2, 2, 2)), origin=(0.0, float("nan"), 0.0)), r"origin must be three finite"),
        (lambda: Mesh(points=POINTS.tolist(), indices=[[0.0, 1.2, 3.7]]), r"indices must be integers"),
    ],
)
def test_bad_static_options_and_shapes_are_refused_at_construction(build: object, message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=rf"jarp\.warp\.\w+: .*{message}"):
        build()  # type: ignore[operator]


def test_a_stacked_mesh_is_built_directly_and_mapped_with_vmap() -> None:
    shifted = POINTS + np.array([0.0, 0.0, 1.0], np.float32)
    stack = Mesh(points=jnp.stack([POINTS, shifted]), indices=jnp.stack([FACES, FACES]))
    call = jax_kernel(kgi.closest_face)
    (faces,) = jax.jit(jax.vmap(lambda m: call(m, QUERIES)))(stack)
    np.testing.assert_array_equal(faces, np.stack([np_closest_faces(POINTS, FACES, QUERIES)] * 2))
    with pytest.raises(ValueError, match=r"a stack of 1 batch dim\(s\) .* map the call over the stack with jax.vmap"):
        call(stack, QUERIES)


def test_a_stacked_mesh_round_trips_through_serialisation(tmp_path: object) -> None:
    stack = Mesh(points=jnp.stack([POINTS, POINTS]), indices=jnp.stack([FACES, FACES]))
    path = os.path.join(str(tmp_path), "mesh.eqx")
    eqx.tree_serialise_leaves(path, stack)
    back = eqx.tree_deserialise_leaves(path, Mesh(points=jnp.zeros((2, 4, 3)), indices=jnp.zeros((2, 2, 3), jnp.int32)))
    np.testing.assert_array_equal(back.points, stack.points)


# -- messages ----------------------------------------------------------------------------------------------------------


def test_a_second_derivative_through_a_structure_call_says_what_to_do() -> None:
    call = jax_kernel(kgi.read_vertices, enable_backward=True)
    with pytest.raises(TypeError) as info:
        jax.hessian(lambda p: call(mesh(points=p), QUERIES)[0].sum())(jnp.asarray(POINTS))
    message = str(info.value)
    assert "reverse mode only" in message
    assert "enable_backward=True" not in message
    assert "which a call given Warp structures does not take" in message


def test_a_structure_in_the_wrong_place_names_the_annotation_in_warp_s_words() -> None:
    @wp.kernel
    def takes_an_array(mesh: wp.array(dtype=float), out: wp.array(dtype=float)):
        out[wp.tid()] = mesh[wp.tid()]

    with pytest.raises(TypeError) as info:
        jax_kernel(takes_an_array)(mesh(), jnp.ones(3))
    assert "the kernel takes a 1-d wp.array of float32 there" in str(info.value)
    assert "_src" not in str(info.value)
    assert "<class" not in str(info.value)


def test_the_index_check_compiles_for_cuda() -> None:
    # NVRTC, no driver: the check a GPU runs before every refit (and build) builds for the device
    from jarp.warp._codegen import compile_aot
    from jarp.warp._geometry import _structures

    paths = compile_aot(_structures, arch=90)
    assert sorted(paths) == [90]
    assert all(p.exists() for p in paths.values())


def test_bounds_check_with_a_structure_is_refused_rather_than_a_trap() -> None:
    # Warp's checked build traps on an out-of-bounds index; launched through wp.launch that killed the process
    proc = run_child(
        """
        call = jax_kernel(kgi.read_past_the_queries, bounds_check=True, launch_dims=(4,), output_dims={"out": (4,)})
        try:
            call(Mesh(points=POINTS, indices=FACES), QUERIES[:4])
        except ValueError as e:
            print("refused:", e)
        """
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "bounds_check=True is not available for a call given Warp structures" in proc.stdout


def test_an_id_a_function_returns_is_refused() -> None:
    with pytest.raises(ValueError, match=r"uses the id of the jarp.warp.Mesh given for 'mesh'"):
        jax_kernel(kgi.store_an_id_a_function_returns)(mesh(), QUERIES)


def test_velocities_of_a_mesh_built_without_them_read_as_zeros() -> None:
    # before, Warp's mesh held a null velocities array and the read crashed the process
    proc = run_child(
        """
        (v,) = jax_kernel(kgi.read_velocities)(Mesh(points=POINTS, indices=FACES), QUERIES)
        print("values:", np.abs(np.asarray(v)).max())
        """
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "values: 0.0" in proc.stdout


def test_a_hash_grid_loop_over_a_launch_longer_than_its_query_points_is_refused() -> None:
    # the query point is read by every thread before the loop: the launch check sees it (it used to give up on any
    # loop whose header reads the thread index, and the launch read past `q`)
    proc = run_child(
        """
        from jarp.warp import HashGrid
        x = jnp.asarray(QUERIES)
        try:
            jax_kernel(kgi.weighted_neighbours)(HashGrid(points=x, radius=0.3, dims=(4, 4, 4)), jnp.ones(100), x, 0.3)
        except ValueError as e:
            print("refused:", e)
        """
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "indexes q with wp.tid() on every thread" in proc.stdout


def test_indices_turned_to_floats_after_construction_are_refused_at_the_call() -> None:
    m = jax.tree.map(lambda a: a.astype(jnp.float16), mesh())  # a tree_map builds no new Mesh: no __check_init__
    with pytest.raises(TypeError, match=r"indices must be integers"):
        jax_kernel(kgi.closest_face)(m, QUERIES)


def test_lists_are_taken_as_arrays() -> None:
    (face,) = jax_kernel(kgi.closest_face)(Mesh(points=POINTS.tolist(), indices=FACES.tolist()), QUERIES)
    np.testing.assert_array_equal(face, np_closest_faces(POINTS, FACES, QUERIES))


def test_unsigned_indices_of_two_to_the_31_are_refused_with_their_value() -> None:
    faces = jnp.asarray(FACES.astype(np.uint32)).at[0, 1].set(2**31 + 5)
    with pytest.raises(Exception, match=r"refers to vertex 2147483653"):
        jax_kernel(kgi.closest_face)(mesh(faces), QUERIES)[0].block_until_ready()
