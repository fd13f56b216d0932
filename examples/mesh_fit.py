"""Fit the heights of a triangle mesh to ray-hit depths, differentiating through a Warp ray query.

A square height field of ``grid`` x ``grid`` vertices (two triangles per cell) starts flat. Downward rays from a
plane above it hit a hidden target surface (a smooth bump plus a ripple, on the same triangulation) at "observed"
depths; training moves the vertex heights so that the same rays hit the fitted mesh at the same depths.

Every step builds a `jarp.warp.Mesh` from the traced vertices and passes it to a `jarp.warp.jax_kernel` where the
Warp kernel takes the mesh's id (``mesh: wp.uint64``): jarp builds the ``wp.Mesh`` inside the call the first time
and refits it on later calls (the triangles never change), and the reverse pass replays the kernel under Warp's tape
with the vertices' gradient buffer attached.

The kernel takes only the *face index* from ``wp.mesh_query_ray`` (``q.result``, ``q.face``: these do not change
under small moves of the vertices) and recomputes the hit distance from the face's vertices read as arrays,
``m = wp.mesh_get(mesh); m.points[m.indices[3 * f + k]]``: the ray-plane distance ``t = <a - o, n> / <d, n>`` with
``n = (b - a) x (c - a)``. Warp's adjoint of the query's own ``q.t`` drops the gradient with respect to the vertices,
so jarp refuses to differentiate a kernel that reads it (a ``ValueError`` naming the builtin) rather than return a
silent zero.

The optimiser is `optax.adam`, the whole step (mesh build, forward, Warp's adjoint, update) runs under
`eqx.filter_jit`. A PNG shows the loss curve and the initial, target and fitted heights.

Run (needs the ``examples`` extra for optax, matplotlib for the PNG: ``pip install -e .[examples]``):

    python examples/mesh_fit.py                     # 12 x 12 vertices, 400 rays, 300 steps
    python examples/mesh_fit.py --steps 60 --out /tmp/mesh_fit
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import warp as wp
from jaxtyping import Array, Float, Int

import jarp.warp

wp.config.log_level = wp.LOG_WARNING  # no banner, no per-module load lines

TOP = 2.0  # the height of the plane the rays start from
MISS = 0.0  # the depth a ray that hits nothing reports (none do here: every ray starts above the square)

# ----------------------------------------------------------------------------------------------------------------------
# The Warp kernel: a ray query for the face, the hit distance recomputed from the face's vertices
# ----------------------------------------------------------------------------------------------------------------------


@wp.func
def ray_plane_distance(o: wp.vec3, d: wp.vec3, a: wp.vec3, b: wp.vec3, c: wp.vec3):
    """The distance along ``d`` from ``o`` to the plane of triangle ``abc`` (differentiable in the vertices)."""
    n = wp.cross(b - a, c - a)
    return wp.dot(a - o, n) / wp.dot(d, n)


@wp.kernel
def ray_depth_kernel(
    mesh: wp.uint64,
    origins: wp.array(dtype=wp.vec3),
    directions: wp.array(dtype=wp.vec3),
    depth: wp.array(dtype=float),
):
    """``depth[i]``: how far ray ``i`` travels to the mesh (``MISS`` where it hits nothing)."""
    i = wp.tid()
    o = origins[i]
    d = directions[i]
    q = wp.mesh_query_ray(mesh, o, d, 1.0e6)
    if q.result:
        m = wp.mesh_get(mesh)
        f = q.face
        a = m.points[m.indices[3 * f]]
        b = m.points[m.indices[3 * f + 1]]
        c = m.points[m.indices[3 * f + 2]]
        depth[i] = ray_plane_distance(o, d, a, b, c)
    else:
        depth[i] = wp.float32(MISS)


# enable_backward: Warp's adjoint of the kernel gives the gradient with respect to the mesh's points
ray_depth = jarp.warp.jax_kernel(ray_depth_kernel, enable_backward=True)

# ----------------------------------------------------------------------------------------------------------------------
# The height field and the rays
# ----------------------------------------------------------------------------------------------------------------------


class HeightField(eqx.Module):
    """A ``grid`` x ``grid`` height field over the unit square: the heights are the trained leaf."""

    heights: Float[Array, " vertices"]
    xy: Float[Array, "vertices 2"]
    faces: Int[Array, "faces 3"]

    def vertices(self) -> Float[Array, "vertices 3"]:
        return jnp.concatenate([self.xy, self.heights[:, None]], axis=-1)

    def mesh(self) -> jarp.warp.Mesh:
        """The Warp mesh of the current heights (built or refitted inside the kernel's call)."""
        return jarp.warp.Mesh(points=self.vertices(), indices=self.faces)


def make_grid(grid: int) -> tuple[np.ndarray, np.ndarray]:
    """Vertex ``(x, y)`` on the unit square and two triangles per cell, alternating diagonals, wound upwards."""
    jj, ii = np.meshgrid(np.arange(grid), np.arange(grid), indexing="ij")
    xy = np.stack([ii.ravel(), jj.ravel()], axis=-1) / (grid - 1)
    faces = []
    for j in range(grid - 1):
        for i in range(grid - 1):
            v00, v10, v01, v11 = j * grid + i, j * grid + i + 1, (j + 1) * grid + i, (j + 1) * grid + i + 1
            if (i + j) % 2 == 0:
                faces += [(v00, v10, v11), (v00, v11, v01)]
            else:
                faces += [(v00, v10, v01), (v10, v11, v01)]
    return xy.astype(np.float32), np.asarray(faces, np.int32)


def target_heights(xy: np.ndarray) -> np.ndarray:
    """The hidden surface: a Gaussian bump off the centre plus a gentle ripple."""
    x, y = xy[:, 0], xy[:, 1]
    bump = 0.35 * np.exp(-((x - 0.55) ** 2 + (y - 0.45) ** 2) / 0.06)
    ripple = 0.05 * np.sin(2 * np.pi * x) * np.cos(np.pi * y)
    return (bump + ripple).astype(np.float32)


def make_rays(n_rays: int, seed: int) -> tuple[jax.Array, jax.Array]:
    """``n_rays`` vertical rays from random points of the plane ``z = TOP`` above the square, pointing down."""
    rng = np.random.default_rng(seed)
    xy = rng.uniform(0.01, 0.99, size=(n_rays, 2))
    origins = np.concatenate([xy, np.full((n_rays, 1), TOP)], axis=-1).astype(np.float32)
    directions = np.tile(np.array([0.0, 0.0, -1.0], np.float32), (n_rays, 1))
    return jnp.asarray(origins), jnp.asarray(directions)


def depths(field: HeightField, origins: jax.Array, directions: jax.Array) -> jax.Array:
    (d,) = ray_depth(field.mesh(), origins, directions)
    return d


def loss_fn(field: HeightField, origins: jax.Array, directions: jax.Array, observed: jax.Array) -> jax.Array:
    """The mean squared misfit of the ray depths."""
    return jnp.mean((depths(field, origins, directions) - observed) ** 2)


# ----------------------------------------------------------------------------------------------------------------------
# Training
# ----------------------------------------------------------------------------------------------------------------------


def trainable(field: HeightField) -> HeightField:
    """Filter spec selecting the heights, the only trained leaf."""
    spec = jax.tree_util.tree_map(lambda _: False, field)
    return eqx.tree_at(lambda f: f.heights, spec, replace=True)


@eqx.filter_jit
def train_step(
    params: HeightField,
    static: HeightField,
    optimiser: optax.GradientTransformation,
    opt_state: optax.OptState,
    origins: jax.Array,
    directions: jax.Array,
    observed: jax.Array,
) -> tuple[HeightField, optax.OptState, jax.Array]:
    """One Adam step; returns the new parameters and state, and the loss before the update."""

    def loss(p: HeightField) -> jax.Array:
        return loss_fn(eqx.combine(p, static), origins, directions, observed)

    value, grads = eqx.filter_value_and_grad(loss)(params)
    updates, opt_state = optimiser.update(grads, opt_state, params)
    return eqx.apply_updates(params, updates), opt_state, value


def plot(path: Path, losses: list[float], grid: int, initial: np.ndarray, target: np.ndarray, fitted: np.ndarray):
    """Write the PNG: the loss curve and the initial, target and fitted heights."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(13, 3.0), gridspec_kw={"width_ratios": [1.2, 1, 1, 1]})
    ax = axes[0]
    ax.semilogy(np.arange(1, len(losses) + 1), losses)
    ax.set_xlabel("Adam step")
    ax.set_ylabel("mean squared depth misfit")
    ax.set_title("loss")
    ax.grid(True, which="both", alpha=0.3)
    lo, hi = float(min(target.min(), fitted.min(), initial.min())), float(max(target.max(), fitted.max()))
    for ax, heights, title in zip(
        axes[1:], (initial, target, fitted), ("initial heights", "target (hidden)", "fitted heights"), strict=True
    ):
        image = ax.imshow(
            heights.reshape(grid, grid), origin="lower", extent=(0, 1, 0, 1), vmin=lo, vmax=hi, cmap="viridis"
        )
        ax.set_title(title)
        ax.set_xticks([0, 1])
        ax.set_yticks([0, 1])
    fig.colorbar(image, ax=axes[1:].tolist(), fraction=0.02, pad=0.02, label="height")
    fig.savefig(path, dpi=72, bbox_inches="tight")
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", type=int, default=12, help="vertices per side of the height field")
    parser.add_argument("--rays", type=int, default=400)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=None, help="a folder for mesh_fit.png (optional)")
    args = parser.parse_args()

    xy, faces = make_grid(args.grid)
    origins, directions = make_rays(args.rays, args.seed)
    target = HeightField(jnp.asarray(target_heights(xy)), jnp.asarray(xy), jnp.asarray(faces))
    observed = jax.jit(depths)(target, origins, directions)
    field = HeightField(jnp.zeros(args.grid * args.grid, jnp.float32), jnp.asarray(xy), jnp.asarray(faces))
    print(f"{args.grid} x {args.grid} vertices, {len(faces)} triangles, {args.rays} downward rays")

    params, static = eqx.partition(field, trainable(field))
    schedule = optax.exponential_decay(args.lr, transition_steps=max(args.steps - 1, 1), decay_rate=0.1)
    optimiser = optax.adam(schedule)
    opt_state = optimiser.init(params)
    losses = []
    start = time.perf_counter()
    for step in range(args.steps):
        params, opt_state, loss = train_step(params, static, optimiser, opt_state, origins, directions, observed)
        losses.append(float(loss))
        if step % max(args.steps // 5, 1) == 0:
            print(f"step {step:4d}  loss {losses[-1]:.3e}")
    fitted = eqx.combine(params, static)
    final = float(jax.jit(loss_fn)(fitted, origins, directions, observed))
    elapsed = time.perf_counter() - start
    print(f"loss: initial {losses[0]:.4e} -> final {final:.4e} ({args.steps} steps, {elapsed:.1f} s)")
    print(f"height error (rms over vertices): {float(jnp.sqrt(jnp.mean((fitted.heights - target.heights) ** 2))):.3e}")

    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "mesh_fit.png"
        plot(
            path,
            [*losses, final],
            args.grid,
            np.asarray(field.heights),
            np.asarray(target.heights),
            np.asarray(fitted.heights),
        )
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
