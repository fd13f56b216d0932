"""Fit the shape of an obstacle so that a cloth settled on it takes a target shape, through a Warp closest-point query.

A square cloth of ``cloth`` x ``cloth`` mass points (structural, shear and bending springs) lies flat on a floor. A
Gaussian bump rises out of the floor under it, ``z = height * exp(-r^2 / (2 width^2))`` scaled by a ramp from 0 to
1 over the first part of the settling, and the cloth settles over it under gravity: ``steps`` steps of a damped
gradient flow (heavy-ball momentum, `optax.sgd`) on the total energy, unrolled in `jax.lax.scan`. The floor and the
bump are one height-field `jarp.warp.Mesh` whose vertices follow the ramp, so the mesh deforms at every step.

The contact is a smooth penalty on the distance ``d`` from each cloth point to the obstacle, ``k * relu(r - d)^2``
with ``r`` the contact radius. A Warp kernel computes it with Warp's own closest-point query,
``q = wp.mesh_query_point_no_sign(mesh, x, max_dist)``: the closest point is
``wp.mesh_eval_position(mesh, q.face, q.u, q.v)``, from the query's barycentrics, and ``d`` is signed by the side of
the face's normal. The kernel writes each point's contact energy and its gradient with respect to the point (the
penalty's force, written out), and the script checks that gradient against `jax.grad` of the energy (Warp's adjoint
of the kernel, through the query's barycentrics). The springs and gravity are `jax.numpy`, differentiated by JAX.

Then the obstacle is fitted: a hidden bump (``--target-height``, ``--target-width``) gives a target settled cloth,
and `optax.adam` moves the bump's height and width from a wrong start until the settled cloth matches the target.
The loss's gradient runs back through every settling step, and so through the contact gradient the kernel wrote
with respect to the obstacle's vertices: how the closest point ``q.u a + q.v b + (1 - q.u - q.v) c`` moves when
the triangle moves, its barycentrics included. That is a second derivative of the penalty; it is taken as the first
derivative of the gradient the kernel writes, so Warp's first-order adjoint is enough (a jarp call has no second
derivatives: `jax.grad` of the kernel's energy inside the settling steps could not be differentiated again). The
script checks the loss's gradient against a central finite difference.

Run (needs the ``examples`` extra for optax, matplotlib for the PNG: ``pip install -e .[examples]``):

    python examples/cloth_contact.py                          # 16 x 16 cloth, 200 settling steps, 40 Adam steps
    python examples/cloth_contact.py --quick --out /tmp/cloth_contact
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

# ----------------------------------------------------------------------------------------------------------------------
# The Warp kernel: a closest-point query, the contact penalty and its gradient with respect to the cloth point
# ----------------------------------------------------------------------------------------------------------------------


@wp.kernel
def contact_kernel(
    mesh: wp.uint64,
    x: wp.array(dtype=wp.vec3),
    radius: float,
    stiffness: float,
    energy: wp.array(dtype=float),
    gradient: wp.array(dtype=wp.vec3),
):
    """``energy[i] = stiffness * relu(radius - d)^2`` (``d``: the signed distance of ``x[i]``) and its gradient."""
    i = wp.tid()
    p = x[i]
    # a point farther than radius above the obstacle feels nothing; the query looks farther (10 radii) so that a point
    # pushed below the surface is still found, and pushed back
    q = wp.mesh_query_point_no_sign(mesh, p, 10.0 * radius)
    if q.result:
        c = wp.mesh_eval_position(mesh, q.face, q.u, q.v)
        n = wp.mesh_eval_face_normal(mesh, q.face)
        delta = p - c
        d = wp.length(delta)
        # the outward direction of the distance: from the closest point to x, flipped below the surface (the
        # height field is open, so the side comes from the face's normal, which points up)
        direction = n
        if d > 1.0e-8:
            direction = delta / d
            if wp.dot(delta, n) < 0.0:
                d = -d
                direction = -direction
        gap = radius - d
        if gap > 0.0:
            energy[i] = stiffness * gap * gap
            gradient[i] = -2.0 * stiffness * gap * direction


# enable_backward: Warp's adjoint gives the gradients with respect to the cloth points and the mesh's vertices
contact = jarp.warp.jax_kernel(contact_kernel, num_outputs=2, enable_backward=True)

# ----------------------------------------------------------------------------------------------------------------------
# The obstacle and the cloth
# ----------------------------------------------------------------------------------------------------------------------


class Bump(eqx.Module):
    """The obstacle's parameters: the bump's height and width (the trained leaves)."""

    height: Float[Array, ""]
    width: Float[Array, ""]


class Scene(eqx.Module):
    """Everything fixed: the obstacle's triangulation, the cloth's springs and the physical constants."""

    ground_xy: Float[Array, "vertices 2"]
    ground_faces: Int[Array, "faces 3"]
    rest: Float[Array, "points 3"]
    edges: Int[Array, "springs 2"]
    rest_lengths: Float[Array, " springs"]
    spring_stiffness: Float[Array, " springs"]
    centre: tuple[float, float] = eqx.field(static=True)
    weight: float = eqx.field(static=True)
    radius: float = eqx.field(static=True)
    contact_stiffness: float = eqx.field(static=True)

    def obstacle(self, bump: Bump, ramp: Float[Array, ""]) -> jarp.warp.Mesh:
        """The floor with the bump scaled by ``ramp`` (0 to 1), as a mesh (built or refitted inside each call)."""
        r2 = jnp.sum((self.ground_xy - jnp.asarray(self.centre, self.ground_xy.dtype)) ** 2, axis=-1)
        z = ramp * bump.height * jnp.exp(-r2 / (2.0 * bump.width**2))
        return jarp.warp.Mesh(points=jnp.concatenate([self.ground_xy, z[:, None]], axis=-1), indices=self.ground_faces)

    def elastic_energy(self, x: Float[Array, "points 3"]) -> Float[Array, ""]:
        """Springs plus gravity, in `jax.numpy`."""
        length = jnp.linalg.norm(x[self.edges[:, 0]] - x[self.edges[:, 1]], axis=-1)
        springs = 0.5 * jnp.sum(self.spring_stiffness * (length - self.rest_lengths) ** 2)
        return springs + self.weight * jnp.sum(x[:, 2])

    def contact(self, x: Float[Array, "points 3"], mesh: jarp.warp.Mesh) -> tuple[Array, Array]:
        """Each point's contact energy and its gradient with respect to the point (from the Warp kernel)."""
        return contact(mesh, x, self.radius, self.contact_stiffness)

    def energy_gradient(self, x: Float[Array, "points 3"], mesh: jarp.warp.Mesh) -> Float[Array, "points 3"]:
        """The gradient of the total energy with respect to the cloth points."""
        return jax.grad(self.elastic_energy)(x) + self.contact(x, mesh)[1]


def make_ground(n: int, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """An ``n`` x ``n`` vertex grid on ``[lo, hi]^2``, two triangles per cell, alternating diagonals, wound upwards."""
    jj, ii = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    xy = lo + (hi - lo) * np.stack([ii.ravel(), jj.ravel()], axis=-1) / (n - 1)
    faces = []
    for j in range(n - 1):
        for i in range(n - 1):
            v00, v10, v01, v11 = j * n + i, j * n + i + 1, (j + 1) * n + i, (j + 1) * n + i + 1
            if (i + j) % 2 == 0:
                faces += [(v00, v10, v11), (v00, v11, v01)]
            else:
                faces += [(v00, v10, v01), (v10, v11, v01)]
    return xy.astype(np.float32), np.asarray(faces, np.int32)


def make_cloth(n: int, radius: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """An ``n`` x ``n`` cloth on the unit square at height ``radius``, with its springs and their stiffnesses.

    Structural springs join neighbours, shear springs the diagonals of each cell, bending springs every other
    point along the rows and columns (much softer: they keep the cloth from folding sharply, nothing more).
    """
    jj, ii = np.meshgrid(np.arange(n), np.arange(n), indexing="ij")
    xy = np.stack([ii.ravel(), jj.ravel()], axis=-1) / (n - 1)
    rest = np.concatenate([xy, np.full((n * n, 1), radius)], axis=-1)
    index = np.arange(n * n).reshape(n, n)
    pairs = [
        (index[:, :-1], index[:, 1:], 1.0),  # structural
        (index[:-1, :], index[1:, :], 1.0),
        (index[:-1, :-1], index[1:, 1:], 0.5),  # shear
        (index[:-1, 1:], index[1:, :-1], 0.5),
        (index[:, :-2], index[:, 2:], 0.05),  # bending
        (index[:-2, :], index[2:, :], 0.05),
    ]
    edges = np.concatenate([np.stack([a.ravel(), b.ravel()], axis=-1) for a, b, _ in pairs])
    stiffness = np.concatenate([np.full(a.size, k) for a, _, k in pairs])
    return rest.astype(np.float32), edges.astype(np.int32), stiffness.astype(np.float32)


def make_scene(args: argparse.Namespace) -> Scene:
    ground_xy, ground_faces = make_ground(args.ground, -0.3, 1.3)
    rest, edges, stiffness = make_cloth(args.cloth, args.radius)
    lengths = np.linalg.norm(rest[edges[:, 0]] - rest[edges[:, 1]], axis=-1)
    return Scene(
        ground_xy=jnp.asarray(ground_xy),
        ground_faces=jnp.asarray(ground_faces),
        rest=jnp.asarray(rest),
        edges=jnp.asarray(edges),
        rest_lengths=jnp.asarray(lengths),
        spring_stiffness=jnp.asarray(args.spring_stiffness * stiffness),
        centre=(0.5, 0.5),
        weight=args.weight,
        radius=args.radius,
        contact_stiffness=args.contact_stiffness,
    )


# ----------------------------------------------------------------------------------------------------------------------
# Settling: a damped gradient flow, unrolled
# ----------------------------------------------------------------------------------------------------------------------


class Flow(eqx.Module):
    """How the cloth settles: ``steps`` heavy-ball steps (`optax.sgd` with momentum), the bump rising first."""

    steps: int = eqx.field(static=True)
    rate: float = eqx.field(static=True)
    momentum: float = eqx.field(static=True)
    ramp_steps: int = eqx.field(static=True)  # the bump rises from the floor to full height over these steps


def settle(scene: Scene, bump: Bump, flow: Flow) -> Float[Array, "points 3"]:
    """The cloth after ``flow.steps`` steps of the damped gradient flow on the total energy.

    Differentiable with respect to ``bump``: `jax.grad` runs back through the scan, each step's reverse pass being
    JAX's for the springs and Warp's adjoint of the contact kernel's gradient output, with respect to the points
    and to the obstacle's vertices (which the bump and the ramp set).
    """
    optimiser = optax.sgd(flow.rate, momentum=flow.momentum)

    def step(carry, k):
        x, state = carry
        t = jnp.clip((k + 1) / flow.ramp_steps, 0.0, 1.0)
        ramp = t * t * (3.0 - 2.0 * t)  # smoothstep: the bump starts and stops rising gently
        updates, state = optimiser.update(scene.energy_gradient(x, scene.obstacle(bump, ramp)), state)
        return (optax.apply_updates(x, updates), state), None

    steps = jnp.arange(flow.steps, dtype=scene.rest.dtype)
    (x, _), _ = jax.lax.scan(step, (scene.rest, optimiser.init(scene.rest)), steps)
    return x


# ----------------------------------------------------------------------------------------------------------------------
# Checks and fitting
# ----------------------------------------------------------------------------------------------------------------------


@eqx.filter_jit
def loss_fn(bump: Bump, scene: Scene, flow: Flow, target: Float[Array, "points 3"]) -> Float[Array, ""]:
    """The mean squared distance of the settled cloth from the target cloth."""
    return jnp.mean(jnp.sum((settle(scene, bump, flow) - target) ** 2, axis=-1))


def check_contact_gradient(scene: Scene, x: Float[Array, "points 3"], mesh: jarp.warp.Mesh) -> tuple[float, int]:
    """The max relative difference between the kernel's written gradient and `jax.grad` of its energy at ``x``.

    `jax.grad` is Warp's adjoint of the kernel with respect to the points: through the query's barycentrics
    ``q.u``, ``q.v`` (Warp differentiates the closest point with respect to the query point) and the distance.
    Returns the difference and the number of points in contact.
    """
    written = eqx.filter_jit(Scene.contact)(scene, x, mesh)[1]
    traced = eqx.filter_jit(jax.grad(lambda x, scene, mesh: jnp.sum(scene.contact(x, mesh)[0])))(x, scene, mesh)
    in_contact = int(jnp.sum(jnp.any(written != 0, axis=-1)))
    return float(jnp.max(jnp.abs(written - traced)) / jnp.max(jnp.abs(traced))), in_contact


def check_obstacle_gradient(bump: Bump, *args, eps: float = 1e-3) -> tuple[list[float], list[float]]:
    """``d loss / d (height, width)`` by `jax.grad` through the settling, and by central differences of ``eps``."""
    grads = eqx.filter_jit(eqx.filter_grad(loss_fn))(bump, *args)
    fields = ("height", "width")

    def moved(name: str, by: float) -> float:
        return float(loss_fn(eqx.tree_at(lambda b: getattr(b, name), bump, getattr(bump, name) + by), *args))

    return [float(getattr(grads, n)) for n in fields], [(moved(n, eps) - moved(n, -eps)) / (2 * eps) for n in fields]


@eqx.filter_jit
def fit_step(
    bump: Bump, opt_state: optax.OptState, optimiser: optax.GradientTransformation, *args
) -> tuple[Bump, optax.OptState, Float[Array, ""]]:
    """One Adam step on the bump's parameters; returns them, the state, and the loss before the update."""
    value, grads = eqx.filter_value_and_grad(loss_fn)(bump, *args)
    updates, opt_state = optimiser.update(grads, opt_state, bump)
    return eqx.apply_updates(bump, updates), opt_state, value


def plot(path: Path, losses, history, scene: Scene, cloths: dict, bumps: dict, cloth: int):
    """Write the PNG: the loss, the bump's parameters, and a cut through the settled cloths and the obstacles."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 3.4), gridspec_kw={"width_ratios": [1, 1, 1.6]})
    ax = axes[0]
    ax.semilogy(np.arange(len(losses)), losses)
    ax.set_xlabel("Adam step")
    ax.set_ylabel("mean squared distance to target")
    ax.set_title("loss")
    ax.grid(True, which="both", alpha=0.3)

    ax = axes[1]
    history = np.asarray(history)
    for column, (name, colour) in enumerate((("height", "C0"), ("width", "C1"))):
        ax.plot(history[:, column], color=colour, label=name)
        ax.axhline(float(getattr(bumps["hidden"], name)), color=colour, linestyle=":")
    ax.set_xlabel("Adam step")
    ax.set_title("bump parameters (dotted: hidden)")
    ax.legend()
    ax.grid(True, alpha=0.3)

    ax = axes[2]
    row = cloth // 2  # the row of cloth points nearest the bump's centre line
    y = row / (cloth - 1)
    s = np.linspace(-0.1, 1.1, 300)
    r2 = (s - scene.centre[0]) ** 2 + (y - scene.centre[1]) ** 2
    styles = {"initial": ("C7", "o", 3), "hidden": ("C3", "s", 6), "fitted": ("C2", "o", 3)}
    for label, (colour, marker, size) in styles.items():
        h, w = float(bumps[label].height), float(bumps[label].width)
        ax.plot(s, h * np.exp(-r2 / (2 * w * w)), color=colour, linewidth=1, linestyle="--")
        points = np.asarray(cloths[label]).reshape(cloth, cloth, 3)[row]
        ax.plot(
            points[:, 0],
            points[:, 2],
            "-",
            marker=marker,
            markersize=size,
            color=colour,
            label=label,
            markerfacecolor="none" if label == "hidden" else colour,
        )
    ax.set_xlabel("x")
    ax.set_ylabel("z")
    ax.set_title(f"settled cloth, cut at y = {y:.2f} (dashed: obstacle)")
    ax.legend(loc="upper right", fontsize=8)
    ax.grid(True, alpha=0.3)
    fig.savefig(path, dpi=72, bbox_inches="tight")
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cloth", type=int, default=16, help="points per side of the cloth")
    parser.add_argument("--ground", type=int, default=33, help="vertices per side of the obstacle's height field")
    parser.add_argument("--steps", type=int, default=200, help="settling steps (unrolled)")
    parser.add_argument("--fit-steps", type=int, default=40, help="Adam steps on the bump's parameters")
    parser.add_argument("--quick", action="store_true", help="a small run for tests: 10 x 10 cloth, 100 steps")
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--rate", type=float, default=0.1, help="step size of the settling flow")
    parser.add_argument("--momentum", type=float, default=0.9, help="heavy-ball momentum of the settling flow")
    parser.add_argument("--radius", type=float, default=0.03, help="contact radius")
    parser.add_argument("--contact-stiffness", type=float, default=10.0)
    parser.add_argument("--spring-stiffness", type=float, default=1.0)
    parser.add_argument("--weight", type=float, default=0.01, help="gravity on each cloth point")
    parser.add_argument("--height", type=float, default=0.12, help="the bump's starting height")
    parser.add_argument("--width", type=float, default=0.28, help="the bump's starting width")
    parser.add_argument("--target-height", type=float, default=0.25)
    parser.add_argument("--target-width", type=float, default=0.18)
    parser.add_argument("--out", type=Path, default=None, help="a folder for cloth_contact.png (optional)")
    args = parser.parse_args()
    if args.quick:
        args.cloth, args.ground, args.steps = 10, 21, 100
        args.fit_steps = min(args.fit_steps, 20)

    scene = make_scene(args)
    flow = Flow(args.steps, args.rate, args.momentum, ramp_steps=max(args.steps // 2, 1))
    print(
        f"{args.cloth} x {args.cloth} cloth ({len(scene.edges)} springs), obstacle {args.ground} x {args.ground} "
        f"vertices ({len(scene.ground_faces)} triangles), {args.steps} settling steps"
    )
    hidden = Bump(jnp.float32(args.target_height), jnp.float32(args.target_width))
    target = eqx.filter_jit(settle)(scene, hidden, flow)

    # Near the settled cloth (points moved by up to 0.3 radii, so that the gaps vary), on the full-height obstacle.
    noise = np.random.default_rng(0).uniform(-0.3 * args.radius, 0.3 * args.radius, target.shape)
    error, in_contact = check_contact_gradient(scene, target + noise.astype(np.float32), scene.obstacle(hidden, 1.0))
    print(f"contact gradient vs jax.grad of the contact energy: max relative {error:.2e} ({in_contact} in contact)")

    bump = Bump(jnp.float32(args.height), jnp.float32(args.width))
    ad, fd = check_obstacle_gradient(bump, scene, flow, target)
    error = max(abs(a - f) for a, f in zip(ad, fd, strict=True)) / max(abs(f) for f in fd)
    print(f"d loss / d (height, width): jax.grad ({ad[0]:.4e}, {ad[1]:.4e}), central ({fd[0]:.4e}, {fd[1]:.4e})")
    print(f"obstacle gradient vs central difference: max relative {error:.2e}")

    schedule = optax.exponential_decay(args.lr, transition_steps=max(args.fit_steps - 1, 1), decay_rate=0.1)
    optimiser = optax.adam(schedule)
    opt_state = optimiser.init(bump)
    initial = bump
    losses, history = [], []
    start = time.perf_counter()
    for step in range(args.fit_steps):
        history.append((float(bump.height), float(bump.width)))
        bump, opt_state, value = fit_step(bump, opt_state, optimiser, scene, flow, target)
        losses.append(float(value))
        if step % max(args.fit_steps // 5, 1) == 0:
            print(f"step {step:3d}  loss {losses[-1]:.3e}  height {history[-1][0]:.4f}  width {history[-1][1]:.4f}")
    history.append((float(bump.height), float(bump.width)))
    final = float(loss_fn(bump, scene, flow, target))
    losses.append(final)
    elapsed = time.perf_counter() - start
    print(f"loss: initial {losses[0]:.4e} -> final {final:.4e} ({args.fit_steps} Adam steps, {elapsed:.1f} s)")
    print(
        f"bump: height {float(bump.height):.4f} (hidden {args.target_height}), "
        f"width {float(bump.width):.4f} (hidden {args.target_width})"
    )

    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        path = args.out / "cloth_contact.png"
        bumps = {"initial": initial, "hidden": hidden, "fitted": bump}
        cloths = {label: eqx.filter_jit(settle)(scene, b, flow) for label, b in bumps.items()}
        plot(path, losses, history, scene, cloths, bumps, args.cloth)
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
