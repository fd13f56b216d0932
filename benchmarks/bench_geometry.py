"""Geometry benchmark: queries against a `jarp.warp.Mesh` / `jarp.warp.HashGrid` built inside the call vs plain Warp.

Three queries, each 1e5 threads: the closest point of a mesh of ~1e4 triangles (``wp.mesh_query_point_no_sign`` ->
distance), a downward ray against the same mesh (``wp.mesh_query_ray`` -> t), and the neighbour count within a
radius of 1e5 points (``wp.hash_grid_query``). For each, a jitted `jarp.warp.jax_kernel` call given the pytree (the
structure is built on the first call and refitted, or for the grid rebuilt, on every later one) is timed against
a plain Warp loop over a structure built once (``wp.launch`` + ``wp.synchronize``), and against a Warp loop that
does what the jarp call does (refit / rebuild + launch). Then the cost of a build vs a refit: ``wp.Mesh(...)`` vs
``mesh.refit()`` on the same data, and jarp calls whose points are the same every call vs change every call.

Variants compared in one table are timed interleaved (one call of each, in a fresh random order, per repeat;
medians per variant), so load changes on a shared machine hit them alike. Every jarp result is checked against
Warp's before timing. Run: ``python benchmarks/bench_geometry.py`` (``--quick`` for small sizes and few repeats).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import warp as wp

import jarp.warp
from jarp.warp._geometry import _builds as _geometry_builds

sys.path.insert(0, str(Path(__file__).parent))
import _timing

wp.config.log_level = wp.LOG_WARNING  # no banner, no per-module load lines

# ----------------------------------------------------------------------------------------------------------------------
# Kernels
# ----------------------------------------------------------------------------------------------------------------------


@wp.kernel
def closest_distance(mesh: wp.uint64, x: wp.array(dtype=wp.vec3), dist: wp.array(dtype=float)):
    i = wp.tid()
    q = wp.mesh_query_point_no_sign(mesh, x[i], 1.0e6)
    if q.result:
        dist[i] = wp.length(wp.mesh_eval_position(mesh, q.face, q.u, q.v) - x[i])


@wp.kernel
def ray_distance(
    mesh: wp.uint64, origins: wp.array(dtype=wp.vec3), directions: wp.array(dtype=wp.vec3), t: wp.array(dtype=float)
):
    i = wp.tid()
    q = wp.mesh_query_ray(mesh, origins[i], directions[i], 1.0e6)
    if q.result:
        t[i] = q.t
    else:
        t[i] = -1.0


@wp.kernel
def neighbour_count(grid: wp.uint64, x: wp.array(dtype=wp.vec3), radius: float, count: wp.array(dtype=wp.int32)):
    i = wp.tid()
    p = x[i]
    n = wp.int32(0)  # a typed constructor: a variable the loop may change
    for j in wp.hash_grid_query(grid, p, radius):
        if wp.length(x[j] - p) <= radius:
            n += 1
    count[i] = n


# ----------------------------------------------------------------------------------------------------------------------
# Timing
# ----------------------------------------------------------------------------------------------------------------------


def interleaved(variants: dict, repeat: int) -> dict[str, float]:
    """Median seconds per call of each ``name: fn`` (no arguments), one call of each per repeat in a random order."""
    return _timing.interleaved({name: (fn, ()) for name, fn in variants.items()}, repeat)


def wait(out):
    """Block until a jarp call's result is computed."""
    return jax.block_until_ready(out)


# ----------------------------------------------------------------------------------------------------------------------
# Problems
# ----------------------------------------------------------------------------------------------------------------------


def wavy_surface(side: int) -> tuple[np.ndarray, np.ndarray]:
    """A ``side`` x ``side`` vertex height field over the unit square, ``2 (side - 1)^2`` triangles."""
    jj, ii = np.meshgrid(np.arange(side), np.arange(side), indexing="ij")
    x, y = ii.ravel() / (side - 1), jj.ravel() / (side - 1)
    z = 0.1 * np.sin(6 * x) * np.cos(5 * y)
    points = np.stack([x, y, z], axis=-1).astype(np.float32)
    v = (jj[:-1, :-1] * side + ii[:-1, :-1]).ravel()
    faces = np.concatenate([np.stack([v, v + 1, v + side + 1], -1), np.stack([v, v + side + 1, v + side], -1)])
    return points, faces.astype(np.int32)


def mesh_problem(side: int, n: int, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    points, faces = wavy_surface(side)
    queries = rng.uniform([0, 0, -0.5], [1, 1, 0.5], size=(n, 3)).astype(np.float32)
    origins = np.concatenate([rng.uniform(0.0, 1.0, size=(n, 2)), np.full((n, 1), 1.0)], -1).astype(np.float32)
    directions = np.tile(np.array([0.0, 0.0, -1.0], np.float32), (n, 1))
    return {"points": points, "faces": faces, "queries": queries, "origins": origins, "directions": directions}


def row(name: str, t: dict[str, float]) -> str:
    """A table row: Warp over a prebuilt structure, Warp doing what the jarp call does, jarp, and the ratios."""
    warp, upkeep, jarp_t = t["warp"], next(v for k, v in t.items() if k.startswith("warp ")), t["jarp"]
    return (
        f"| {name} | {warp * 1e3:.2f} | {upkeep * 1e3:.2f} | {jarp_t * 1e3:.2f} | {jarp_t / warp:.3f} | "
        f"{jarp_t / upkeep:.3f} |"
    )


def bench_mesh_queries(p: dict, repeat: int) -> list[tuple[str, dict[str, float], str]]:
    """Closest point and ray query: jarp (refit per call) vs Warp over a prebuilt mesh, and Warp refit + launch."""
    n = len(p["queries"])
    wp_points = wp.array(p["points"], dtype=wp.vec3)
    wp_indices = wp.array(p["faces"].ravel(), dtype=wp.int32)
    mesh = wp.Mesh(points=wp_points, indices=wp_indices)
    points, faces = jnp.asarray(p["points"]), jnp.asarray(p["faces"])
    rows = []

    # closest point
    wq = wp.array(p["queries"], dtype=wp.vec3)
    wd = wp.zeros(n, dtype=float)
    k = jarp.warp.jax_kernel(closest_distance)
    f = jax.jit(lambda pts, x: k(jarp.warp.Mesh(points=pts, indices=faces), x)[0])
    xq = jnp.asarray(p["queries"])

    def warp_closest(refit: bool = False):
        if refit:
            mesh.refit()
        wp.launch(closest_distance, dim=n, inputs=[mesh.id, wq], outputs=[wd])
        wp.synchronize()

    warp_closest()
    np.testing.assert_allclose(np.asarray(f(points, xq)), wd.numpy(), rtol=1e-5, atol=1e-6)
    t = interleaved(
        {
            "warp": warp_closest,
            "warp refit+launch": lambda: warp_closest(True),
            "jarp": lambda: wait(f(points, xq)),
        },
        repeat,
    )
    rows.append(("closest point (mesh_query_point_no_sign)", t, "warp"))

    # ray
    wo, wdir = wp.array(p["origins"], dtype=wp.vec3), wp.array(p["directions"], dtype=wp.vec3)
    wt = wp.zeros(n, dtype=float)
    kr = jarp.warp.jax_kernel(ray_distance)
    g = jax.jit(lambda pts, o, d: kr(jarp.warp.Mesh(points=pts, indices=faces), o, d)[0])
    jo, jd = jnp.asarray(p["origins"]), jnp.asarray(p["directions"])

    def warp_ray(refit: bool = False):
        if refit:
            mesh.refit()
        wp.launch(ray_distance, dim=n, inputs=[mesh.id, wo, wdir], outputs=[wt])
        wp.synchronize()

    warp_ray()
    np.testing.assert_allclose(np.asarray(g(points, jo, jd)), wt.numpy(), rtol=1e-5, atol=1e-6)
    t = interleaved(
        {"warp": warp_ray, "warp refit+launch": lambda: warp_ray(True), "jarp": lambda: wait(g(points, jo, jd))},
        repeat,
    )
    rows.append(("ray (mesh_query_ray)", t, "warp"))
    return rows


def bench_hash_grid(n: int, repeat: int, seed: int = 0) -> tuple[str, dict[str, float], str]:
    """Neighbour counts: jarp (grid rebuilt inside every call) vs Warp over a prebuilt grid, and Warp build + launch."""
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.0, 1.0, size=(n, 3)).astype(np.float32)
    radius = float((20.0 / n / (4.0 / 3.0 * np.pi)) ** (1 / 3))  # ~20 neighbours a point
    wx = wp.array(x, dtype=wp.vec3)
    wc = wp.zeros(n, dtype=wp.int32)
    grid = wp.HashGrid(128, 128, 128)
    grid.build(wx, radius)
    k = jarp.warp.jax_kernel(neighbour_count)
    f = jax.jit(lambda x: k(jarp.warp.HashGrid(points=x, radius=radius), x, radius)[0])
    jx = jnp.asarray(x)

    def warp_counts(rebuild: bool = False):
        if rebuild:
            grid.build(wx, radius)
        wp.launch(neighbour_count, dim=n, inputs=[grid.id, wx, radius], outputs=[wc])
        wp.synchronize()

    warp_counts()
    np.testing.assert_array_equal(np.asarray(f(jx)), wc.numpy())
    t = interleaved(
        {"warp": warp_counts, "warp build+launch": lambda: warp_counts(True), "jarp": lambda: wait(f(jx))}, repeat
    )
    return (f"hash-grid neighbour count (~{wc.numpy().mean():.0f} a point)", t, "warp")


def bench_build_vs_refit(p: dict, repeat: int) -> tuple[dict[str, float], dict[str, float], dict[str, int]]:
    """``wp.Mesh(...)`` vs ``mesh.refit()``; jarp calls with the same points every call vs new points every call."""
    wp_points = wp.array(p["points"], dtype=wp.vec3)
    wp_indices = wp.array(p["faces"].ravel(), dtype=wp.int32)
    mesh = wp.Mesh(points=wp_points, indices=wp_indices)
    warp_t = interleaved(
        {
            "wp.Mesh build": lambda: (wp.Mesh(points=wp_points, indices=wp_indices), wp.synchronize()),
            "mesh.refit": lambda: (mesh.refit(), wp.synchronize()),
        },
        repeat,
    )

    # One query point: the call is the structure's upkeep, the launch is negligible.
    faces = jnp.asarray(p["faces"])
    k = jarp.warp.jax_kernel(closest_distance)
    f = jax.jit(lambda pts, x: k(jarp.warp.Mesh(points=pts, indices=faces), x)[0])
    # A second function with a wider tree: an other compiled program, so an other store and its own mesh.
    h = jax.jit(lambda pts, x: k(jarp.warp.Mesh(points=pts, indices=faces, bvh_leaf_size=2), x)[0])
    x1 = jnp.zeros((1, 3), jnp.float32)
    same = jnp.asarray(p["points"])
    moving = [same + jnp.asarray([0.0, 0.0, 0.01 * i], jnp.float32) for i in range(2)]
    state = {"i": 0}

    def moved():
        state["i"] ^= 1
        return wait(h(moving[state["i"]], x1))

    # The same upkeep and launch in a Warp loop: the fixed cost of a jarp call is the difference.
    wx1 = wp.array(np.zeros((1, 3), np.float32), dtype=wp.vec3)
    wd1 = wp.zeros(1, dtype=float)

    def warp_one():
        mesh.refit()
        wp.launch(closest_distance, dim=1, inputs=[mesh.id, wx1], outputs=[wd1])
        wp.synchronize()

    # A program's first call runs on jarp's Python path, its later ones (on the CPU) in the native handler: each
    # builds the mesh once, before the timed calls
    for _ in range(2):
        wait(f(same, x1))
        moved()
    warp_one()
    before = _geometry_builds.totals()
    jarp_t = interleaved(
        {
            "Warp refit + 1-point launch": warp_one,
            "jarp, same points": lambda: wait(f(same, x1)),
            "jarp, points move": moved,
        },
        repeat,
    )
    after = _geometry_builds.totals()
    counts = {k: after[k] - before[k] for k in before}
    return warp_t, jarp_t, counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="1e4 queries, ~2e3 triangles, 5 repeats")
    parser.add_argument("--repeat", type=int, default=None)
    parser.add_argument(
        "--upkeep-only", action="store_true", help="only the structure upkeep and the fixed cost of a call (seconds)"
    )
    args = parser.parse_args()
    side, n, repeat = (33, 10_000, 5) if args.quick else (72, 100_000, 21)
    repeat = args.repeat or repeat
    load = os.getloadavg()
    print(
        f"load (uptime): {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} CPUs; device "
        f"{wp.get_device()}; jax {jax.default_backend()}; medians of {repeat} interleaved calls"
    )
    p = mesh_problem(side, n)
    print(f"mesh: {len(p['points'])} vertices, {len(p['faces'])} triangles; {n} queries\n")

    rows = []
    if not args.upkeep_only:
        print(
            "| query | Warp, prebuilt (ms) | Warp, refit or rebuild + launch (ms) | jarp (ms) | jarp / Warp prebuilt | "
            "jarp / Warp same work |"
        )
        print("|---|---:|---:|---:|---:|---:|")
        rows = bench_mesh_queries(p, repeat)
        for name, t, _ in rows:  # each row as soon as it is measured
            print(row(name, t), flush=True)
        name, t, _ = bench_hash_grid(n, repeat)
        print(row(name, t), flush=True)

    warp_t, jarp_t, counts = bench_build_vs_refit(p, max(repeat, 21))
    print("\n| structure upkeep | median |")
    print("|---|---|")
    for name, v in {**warp_t, **jarp_t}.items():
        print(f"| {name} | {v * 1e3:.3f} ms |")
    print(
        f"build / refit (Warp): {warp_t['wp.Mesh build'] / warp_t['mesh.refit']:.1f}x; jarp calls timed: "
        f"{counts['build']} builds, {counts['update']} refits"
    )
    fixed = (jarp_t["jarp, same points"] - jarp_t["Warp refit + 1-point launch"]) * 1e6
    print(f"fixed cost of a jarp call with a mesh: {fixed:.0f} us over Warp's refit + launch (target <= 20 us)")
    for name, t, base in rows[:2]:
        ratio = t["jarp"] / t[base]
        # the target is for the full sizes: with --quick's small launches the ~0.1 ms of a call shows
        verdict = "quick" if args.quick else ("PASS" if ratio <= 1.1 else "FAIL")
        print(f"{verdict} {name}: jarp / warp (static mesh) {ratio:.3f} (target <= 1.1 at 1e5 queries)")


if __name__ == "__main__":
    main()
