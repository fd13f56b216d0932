"""Calls given a `jarp.warp.Mesh` or `Bvh` on the native path: the handler builds and refits the structure itself.

The first call of a compiled program runs on the Python path (it prepares the launch descriptor); every later CPU
call is served by the native handler, which checks the indices, builds the structure through Warp's host functions
on the first call or a new topology, refits it when only the points moved, and launches. Values are compared with
Warp's own launch on a ``wp.Mesh``/``wp.Bvh`` built from the same arrays; `_builds.counts` counts the Python path's
builds and refits, which must stay still once the handler serves the calls.
"""

from __future__ import annotations

import gc
import sys
import threading

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from hypothesis import given, settings
from hypothesis import strategies as st

from jarp.warp import Bvh, HashGrid, Mesh, jax_kernel
from jarp.warp._ffi import _native
from jarp.warp._ffi._registry import registry
from jarp.warp._geometry import _builds
from tests.support import forked
from tests.support import kernels_geometry as kg
from tests.support import kernels_geometry_inputs as kgi
from tests.support.paths import child_environment

pytestmark = pytest.mark.native_launches

RNG = np.random.default_rng(7)
POINTS = RNG.normal(size=(30, 3)).astype(np.float32)
FACES = RNG.integers(0, 30, size=(24, 3)).astype(np.int32)
QUERIES = RNG.normal(size=(20, 3)).astype(np.float32)


@pytest.fixture
def native() -> _native.NativeHandler:
    handler = _native.active()
    if handler is None:
        pytest.skip("the native handler is not the launch path of this run (JARP_LAUNCH=python or checking mode)")
    return handler


def _descriptors(handler: _native.NativeHandler) -> list[_native.LaunchDescriptor]:
    return [d for d in handler._published.values() if d.structures]


def warp_mesh_launch(
    kernel: wp.Kernel, points: np.ndarray, faces: np.ndarray, x: np.ndarray, out_dtype: type
) -> np.ndarray:
    """Warp's own launch of ``kernel`` on a ``wp.Mesh`` of these arrays (the reference)."""
    mesh = wp.Mesh(points=wp.array(points, dtype=wp.vec3), indices=wp.array(faces.reshape(-1), dtype=wp.int32))
    out = wp.zeros(len(x), dtype=out_dtype)
    wp.launch(kernel, len(x), inputs=[mesh.id, wp.array(x, dtype=wp.vec3)], outputs=[out])
    return out.numpy()


def test_later_calls_build_and_refit_in_the_handler_and_equal_warps_launch(native: _native.NativeHandler) -> None:
    f = jax.jit(lambda p, t, x: jax_kernel(kg.closest_distance)(Mesh(points=p, indices=t), x)[0])
    first = f(POINTS, FACES, QUERIES)  # the Python path: prepares the descriptor
    counts = dict(_builds.counts)
    built, refitted = native.structure_stats()
    for step in range(1, 5):
        moved = POINTS + 0.05 * step * np.sin(POINTS)
        got = np.asarray(f(moved, FACES, QUERIES))
        np.testing.assert_array_equal(got, warp_mesh_launch(kg.closest_distance, moved, FACES, QUERIES, float))
    np.testing.assert_array_equal(first, warp_mesh_launch(kg.closest_distance, POINTS, FACES, QUERIES, float))
    assert _builds.counts == counts, "a later call went to the Python path"
    # the handler built the mesh at its first call and refitted it at each later one
    assert native.structure_stats() == (built + 1, refitted + 3)
    (descriptor,) = [d for d in _descriptors(native) if d.structures[0].count == len(POINTS)]
    assert len(descriptor.structure_ids()[0]) == 1


def test_a_new_topology_is_built_anew_and_its_indices_checked(native: _native.NativeHandler) -> None:
    f = jax.jit(lambda t: jax_kernel(kgi.closest_face)(Mesh(points=POINTS, indices=t), QUERIES)[0])
    f(FACES).block_until_ready()
    counts = dict(_builds.counts)
    for seed in range(3):
        faces = np.random.default_rng(seed).permutation(FACES)  # same shape, other triangles in each place
        np.testing.assert_array_equal(f(faces), warp_mesh_launch(kgi.closest_face, POINTS, faces, QUERIES, int))
    assert _builds.counts == counts


@pytest.mark.parametrize("dtype", ["int32", "uint32", "int64", "uint64"])
def test_an_index_out_of_range_reaching_the_handler_is_refused_by_name(
    native: _native.NativeHandler, dtype: str
) -> None:
    # The handler scans the indices in their own type; one out of range leaves the call to the Python path, which
    # names it. In a child: were the scan skipped, Warp would read past the points (and may crash).
    big = {"int32": 2**31 - 1, "uint32": 2**32 - 1, "int64": 2**40, "uint64": 2**64 - 1}[dtype]
    bad = [30, big] + ([-1] if dtype.startswith("int") else [])
    code = f"""
import jax, numpy as np, warp as wp
wp.config.quiet = True; wp.config.log_level = wp.LOG_WARNING
jax.config.update("jax_enable_x64", True)  # 64-bit indices stay 64-bit
from jarp.warp import Mesh, jax_kernel
from jarp.warp._geometry import _builds
from tests.support import kernels_geometry_inputs as kgi
rng = np.random.default_rng(7)
points = rng.normal(size=(30, 3)).astype(np.float32)
faces = rng.integers(0, 30, size=(24, 3)).astype(np.{dtype})
x = rng.normal(size=(20, 3)).astype(np.float32)
f = jax.jit(lambda t: jax_kernel(kgi.closest_face)(Mesh(points=points, indices=t), x)[0])
first = f(faces).tolist()
f(faces[::-1].copy()).block_until_ready()
counts = dict(_builds.counts)
for value in {bad}:
    t = faces.copy()
    t[3, 1] = np.{dtype}(value) if value >= 0 else value
    try:
        f(t).block_until_ready()
        print("accepted", value)
    except Exception as e:
        print("refused", value, f"triangle 3 refers to vertex {{value}} (indices[3, 1]), but the mesh has 30" in str(e))
print("native", counts == {{"build": 1, "update": 0}} or counts)
print("fine", f(faces).tolist() == first)
"""
    proc = forked.run([sys.executable, "-c", code], env=child_environment(), timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().splitlines()
    assert lines[: len(bad)] == [f"refused {v} True" for v in bad], proc.stdout
    assert lines[len(bad) :] == ["native True", "fine True"], proc.stdout


def test_velocities_are_read_and_a_mesh_without_them_reads_zeros(native: _native.NativeHandler) -> None:
    velocities = RNG.normal(size=POINTS.shape).astype(np.float32)
    with_v = jax.jit(
        lambda v: jax_kernel(kg.vertex_velocity)(Mesh(points=POINTS, indices=FACES, velocities=v), QUERIES)[0]
    )
    without = jax.jit(lambda p: jax_kernel(kg.vertex_velocity)(Mesh(points=p, indices=FACES), QUERIES)[0])
    for k in range(3):
        v = velocities * (k + 1)
        mesh = wp.Mesh(
            points=wp.array(POINTS, dtype=wp.vec3),
            indices=wp.array(FACES.reshape(-1), dtype=wp.int32),
            velocities=wp.array(v, dtype=wp.vec3),
        )
        want = wp.zeros(len(QUERIES), dtype=wp.vec3)
        wp.launch(kg.vertex_velocity, len(QUERIES), inputs=[mesh.id, wp.array(QUERIES, dtype=wp.vec3)], outputs=[want])
        np.testing.assert_array_equal(with_v(v), want.numpy())
        np.testing.assert_array_equal(without(POINTS + k), np.zeros((len(QUERIES), 3), np.float32))


def test_a_bvh_is_refitted_from_its_own_copy_of_the_bounds(native: _native.NativeHandler) -> None:
    centres = RNG.uniform(0, 4, size=(40, 3)).astype(np.float32)
    q_lo = RNG.uniform(0, 4, size=(25, 3)).astype(np.float32)
    q_hi = q_lo + 0.8
    f = jax.jit(lambda c: jax_kernel(kg.box_overlaps)(Bvh(lowers=c - 0.3, uppers=c + 0.3), q_lo, q_hi)[0])
    f(centres).block_until_ready()
    counts = dict(_builds.counts)
    for step in range(4):
        c = centres + 0.2 * step
        lo, hi = c - 0.3, c + 0.3
        brute = ((lo[None] <= q_hi[:, None]) & (hi[None] >= q_lo[:, None])).all(-1).sum(1)
        np.testing.assert_array_equal(f(c), brute)
    assert _builds.counts == counts


def test_the_reverse_pass_variant_launches_forward_as_the_python_path_does(native: _native.NativeHandler) -> None:
    # differentiable modules launch the variant that reads the vertices (its forward is Warp's query): the handler
    # launches that same code, so the value is the Python path's bit for bit
    module = jax_kernel(kg.closest_distance, enable_backward=True)
    f = jax.jit(lambda p: module(Mesh(points=p, indices=FACES), QUERIES)[0])
    f(POINTS).block_until_ready()
    counts = dict(_builds.counts)
    native_value = np.asarray(f(POINTS + 0.1))
    assert _builds.counts == counts
    python_value = np.asarray(module(Mesh(points=jnp.asarray(POINTS + 0.1), indices=jnp.asarray(FACES)), QUERIES)[0])
    np.testing.assert_array_equal(native_value, python_value)
    grad = jax.jit(jax.grad(lambda p: module(Mesh(points=p, indices=FACES), QUERIES)[0].sum()))
    assert np.isfinite(np.asarray(grad(POINTS))).all()


def test_a_hash_grid_stays_on_the_python_path(native: _native.NativeHandler) -> None:
    x = RNG.uniform(0, 1, size=(50, 3)).astype(np.float32)
    f = jax.jit(lambda x: jax_kernel(kg.neighbour_counts)(HashGrid(points=x, radius=0.3, dims=(4, 4, 4)), x, 0.3)[0])
    f(x).block_until_ready()
    before = _builds.counts["update"] + _builds.counts["build"]
    f(x + 0.01).block_until_ready()
    assert _builds.counts["update"] + _builds.counts["build"] == before + 1


def test_calls_from_many_threads_each_get_a_structure(native: _native.NativeHandler) -> None:
    # one call at a time uses the handler's structure; another meanwhile takes the Python path with its own
    f = jax.jit(lambda p: jax_kernel(kg.closest_distance)(Mesh(points=p, indices=FACES), QUERIES)[0])
    f(POINTS).block_until_ready()
    steps = [POINTS + 0.01 * k for k in range(24)]
    want = [warp_mesh_launch(kg.closest_distance, p, FACES, QUERIES, float) for p in steps]
    got: dict[int, np.ndarray] = {}

    def run(k: int) -> None:
        got[k] = np.asarray(f(steps[k]))

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(steps))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(len(steps)):
        np.testing.assert_array_equal(got[k], want[k])


def test_a_released_plan_destroys_the_structures_its_descriptor_kept(
    native: _native.NativeHandler, monkeypatch: pytest.MonkeyPatch
) -> None:
    destroyed: list[tuple[int, int]] = []
    original = native._destroy_structure

    def record(kind: int, ident: int) -> None:
        destroyed.append((kind, ident))
        original(kind, ident)

    monkeypatch.setattr(native, "_destroy_structure", record)
    points = RNG.normal(size=(17, 3)).astype(np.float32)  # a shape no other test's descriptor has
    f = jax.jit(lambda p: jax_kernel(kg.closest_distance)(Mesh(points=p, indices=FACES % 17), QUERIES)[0])
    f(points).block_until_ready()
    f(points + 1).block_until_ready()
    (descriptor,) = [d for d in _descriptors(native) if d.structures[0].count == 17]
    ((ident,),) = descriptor.structure_ids()
    del f
    jax.clear_caches()
    gc.collect()
    registry.release_idle()
    native.withdraw([])  # a withdrawn descriptor's memory goes at the next withdrawal, with its structures
    assert (0, ident) in destroyed
    assert descriptor.structure_ids() == [()]


_TOPOLOGIES = [np.random.default_rng(s).integers(0, 30, size=(24, 3)).astype(np.int32) for s in range(6)]
_STEPS = st.lists(st.tuples(st.integers(0, 5), st.floats(-1.0, 1.0, width=32)), min_size=2, max_size=12)


@settings(max_examples=10, deadline=None)
@given(steps=_STEPS)
def test_any_sequence_of_moves_and_topologies_equals_warps_launch(steps: list[tuple[int, float]]) -> None:
    # six topologies cycle through four kept meshes: refits, rebuilds and evictions in any order
    if _native.active() is None:
        pytest.skip("the native handler is not the launch path of this run")
    f = _FUZZED
    for topology, shift in steps:
        points = POINTS + np.float32(shift) * np.cos(POINTS)
        faces = _TOPOLOGIES[topology]
        np.testing.assert_array_equal(
            f(points, faces), warp_mesh_launch(kg.closest_distance, points, faces, QUERIES, float)
        )


# one compiled program for every example (its descriptor keeps its meshes across them)
_FUZZED = jax.jit(lambda p, t: jax_kernel(kg.closest_distance)(Mesh(points=p, indices=t), QUERIES)[0])


def test_each_batch_slice_builds_and_refits_its_own_mesh(native: _native.NativeHandler) -> None:
    # under vmap the handler walks the slices, each with its own meshes (points batched; indices batched or shared)
    pts = np.stack([POINTS, POINTS * 2, POINTS + 1])
    faces = np.stack(_TOPOLOGIES[:3])
    module = jax_kernel(kg.closest_distance)
    batched = jax.jit(jax.vmap(lambda p, t: module(Mesh(points=p, indices=t), QUERIES)[0]))
    shared = jax.jit(jax.vmap(lambda p: module(Mesh(points=p, indices=FACES), QUERIES)[0]))
    batched(pts, faces).block_until_ready()
    shared(pts).block_until_ready()
    counts = dict(_builds.counts)
    for step in range(3):
        moved = pts + np.float32(0.1 * step)
        want = [
            warp_mesh_launch(kg.closest_distance, moved[k], faces[(k + step) % 3], QUERIES, float) for k in range(3)
        ]
        np.testing.assert_array_equal(batched(moved, np.roll(faces, -step, axis=0)), np.stack(want))
        want = [warp_mesh_launch(kg.closest_distance, moved[k], FACES, QUERIES, float) for k in range(3)]
        np.testing.assert_array_equal(shared(moved), np.stack(want))
    assert _builds.counts == counts
    # an index out of range in any slice: nothing is launched, the Python path names it
    bad = faces.copy()
    bad[2, 5, 1] = 99
    with pytest.raises(Exception, match=r"triangle 5 refers to vertex 99 \(indices\[5, 1\]\)"):
        batched(pts, bad).block_until_ready()
