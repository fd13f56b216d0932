"""Kernels that index arrays with their thread index, as FEM code does: over cells, with mesh and material structs.

Launched over the wrong extent (the default launch follows the first array argument, here the points) they would
read and write out of bounds; jarp refuses such launches before they run (`tests/warp/plan/test_launch_checks.py`).
"""

import jax.numpy as jnp
import numpy as np
import warp as wp


@wp.struct
class Region:
    cells: wp.array(dtype=wp.vec2i)
    rest: wp.array(dtype=wp.float32)


@wp.struct
class Materials:
    mu: wp.array(dtype=wp.float32)


@wp.kernel
def edge_energy(
    points: wp.array(dtype=wp.float32),
    region: Region,
    materials: Materials,
    energy: wp.array(dtype=wp.float32),
):
    tid = wp.tid()
    cell = region.cells[tid]
    d = points[cell[1]] - points[cell[0]] - region.rest[tid]
    wp.atomic_add(energy, 0, 0.5 * materials.mu[tid] * d * d)


@wp.kernel
def guarded_copy(x: wp.array(dtype=wp.float32), n: int, y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    if i < n:
        y[i] = x[i]


@wp.kernel
def grid_sum(a: wp.array2d(dtype=wp.float32), out: wp.array(dtype=wp.float32)):
    i, j = wp.tid()
    wp.atomic_add(out, 0, a[i, j])


@wp.kernel
def gather(x: wp.array(dtype=wp.float32), idx: wp.array(dtype=wp.int32), y: wp.array(dtype=wp.float32)):
    # A data-dependent index (connectivity, a lookup table): only a check at run time can catch a bad one.
    i = wp.tid()
    y[i] = 2.0 * x[idx[i]]


@wp.kernel
def add_row(a: wp.array2d(dtype=wp.float32), row: wp.array(dtype=wp.float32), out: wp.array2d(dtype=wp.float32)):
    # ``row`` is indexed by the second thread index: its length must match a's second dim
    i, j = wp.tid()
    out[i, j] = a[i, j] + row[j]


def edge_mesh(n_points: int, n_cells: int, n_mu: int) -> tuple:
    """``edge_energy``'s arguments: ``n_points`` points, ``n_cells`` edges joining consecutive points (a region
    struct given as a dict) and ``n_mu`` materials; and the edges as a NumPy array."""
    cells = np.stack([np.arange(n_cells), np.arange(1, n_cells + 1) % n_points], axis=1).astype(np.int32)
    region = {"cells": jnp.asarray(cells), "rest": jnp.full(n_cells, 0.5, jnp.float32)}
    materials = {"mu": jnp.full(n_mu, 2.0, jnp.float32)}
    points = jnp.linspace(0.0, 1.0, n_points, dtype=jnp.float32) ** 2
    return points, region, materials, cells
