"""Learn the stiffness of every spring in a 2D mass-spring chain from measured nodal forces.

A Warp kernel computes the force of each spring, gathering the positions of its two end nodes through an edge index
array. `jarp.warp.jax_kernel(..., enable_backward=True)` turns it into an immutable Equinox module that sits as a
field of an ordinary `eqx.Module` model, next to the trainable parameters. The model is trained with
`eqx.filter_jit` and `optax.adam`, vmapped over several observed configurations of the chain, then saved and reloaded
with `eqx.tree_serialise_leaves`.

The kernel gathers through indices, so batching it by folding the batch into the launch (Warp's `broadcast_all`)
would read the wrong frame's positions. jarp's default vmap launches every slice on its own and is correct; the script
checks the batched Warp forces against a pure-JAX reference before training.

Run (needs the `examples` extra for optax; tqdm gives a progress bar when installed):

    python examples/spring_layer.py                 # 48 masses, 8 frames, 300 steps
    python examples/spring_layer.py --n 8 --steps 20
    python examples/spring_layer.py --plot stiffness.png   # needs matplotlib (the `examples` extra)
"""

import argparse
import math
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax
import warp as wp

import jarp.warp


@wp.kernel
def spring_force_kernel(
    stiffness: wp.array(dtype=wp.float32),
    rest_length: wp.array(dtype=wp.float32),
    edges: wp.array2d(dtype=wp.int32),
    x: wp.array(dtype=wp.vec2),
    force: wp.array(dtype=wp.vec2),
):
    """Hooke force of spring `e` on its first node: k (|x_j - x_i| - L) (x_j - x_i) / |x_j - x_i|."""
    e = wp.tid()
    i = edges[e, 0]
    j = edges[e, 1]
    d = x[j] - x[i]
    length = wp.length(d)
    force[e] = stiffness[e] * (length - rest_length[e]) / length * d


class SpringChain(eqx.Module):
    """Nodal forces of a mass-spring network; the stiffness of each spring is the trainable parameter."""

    log_stiffness: jax.Array  # (E,) trained; the stiffness is exp(log_stiffness) > 0
    rest_length: jax.Array  # (E,) known
    edges: jax.Array  # (E, 2) int32 node indices, known
    spring_force: jarp.warp.JaxKernel  # the Warp layer: no array leaves, only static fields

    def __init__(self, log_stiffness: jax.Array, rest_length: jax.Array, edges: jax.Array) -> None:
        self.log_stiffness = log_stiffness
        self.rest_length = rest_length
        self.edges = edges
        # Built once here; rebuilding it elsewhere would give an equal (==, same hash) module, so no retrace.
        self.spring_force = jarp.warp.jax_kernel(spring_force_kernel, enable_backward=True)

    def __call__(self, x: jax.Array) -> jax.Array:
        """Forces (N, 2) on the N nodes at positions `x` (N, 2)."""
        (f,) = self.spring_force(jnp.exp(self.log_stiffness), self.rest_length, self.edges, x)
        # Each spring pulls its first node by f and its second node by -f.
        return jnp.zeros_like(x).at[self.edges[:, 0]].add(f).at[self.edges[:, 1]].add(-f)


def reference_forces(stiffness: jax.Array, rest_length: jax.Array, edges: jax.Array, x: jax.Array) -> jax.Array:
    """The same physics in pure JAX, used to make the data and to check the Warp layer."""
    d = x[edges[:, 1]] - x[edges[:, 0]]
    length = jnp.linalg.norm(d, axis=-1, keepdims=True)
    f = (stiffness * (length[:, 0] - rest_length))[:, None] / length * d
    return jnp.zeros_like(x).at[edges[:, 0]].add(f).at[edges[:, 1]].add(-f)


def make_problem(n: int, frames: int, seed: int, noise: float) -> tuple[SpringChain, jax.Array, jax.Array, jax.Array]:
    """A chain of `n` masses with nearest-neighbour and next-nearest-neighbour springs.

    Returns the initial model (all stiffnesses 1), the true stiffness, `frames` perturbed configurations and the
    nodal forces measured on them, with Gaussian noise of `noise` times their standard deviation.
    """
    rng = np.random.default_rng(seed)
    spacing = 1.0
    x0 = np.stack([np.arange(n) * spacing, np.zeros(n)], axis=-1)
    edges = np.array([(i, i + 1) for i in range(n - 1)] + [(i, i + 2) for i in range(n - 2)], dtype=np.int32)
    rest = np.linalg.norm(x0[edges[:, 1]] - x0[edges[:, 0]], axis=-1)
    # A smooth stiffness profile along the chain plus some spring-to-spring variation, between about 0.5 and 3.
    s = edges.mean(axis=-1) / max(n - 1, 1)
    k_true = np.exp(0.6 * np.sin(2.0 * math.pi * s) + 0.3 * rng.standard_normal(len(edges)))
    xs = x0[None] + 0.15 * spacing * rng.standard_normal((frames, n, 2))

    f32 = jnp.float32
    edges_j, rest_j, k_true_j = jnp.asarray(edges), jnp.asarray(rest, f32), jnp.asarray(k_true, f32)
    xs_j = jnp.asarray(xs, f32)
    forces = np.asarray(jax.vmap(reference_forces, in_axes=(None, None, None, 0))(k_true_j, rest_j, edges_j, xs_j))
    forces = jnp.asarray(forces + noise * forces.std() * rng.standard_normal(forces.shape), f32)
    model = SpringChain(jnp.zeros(len(edges), f32), rest_j, edges_j)
    return model, k_true_j, xs_j, forces


@eqx.filter_jit
def batched_forces(model: SpringChain, xs: jax.Array) -> jax.Array:
    """Nodal forces for a batch of configurations (B, N, 2)."""
    return jax.vmap(model)(xs)


def trainable(model: SpringChain) -> SpringChain:
    """Filter spec: only `log_stiffness` is trained; the rest lengths and the edges stay fixed."""
    spec = jax.tree_util.tree_map(lambda _: False, model)
    return eqx.tree_at(lambda m: m.log_stiffness, spec, replace=True)


def loss_fn(params: SpringChain, static: SpringChain, xs: jax.Array, forces: jax.Array) -> jax.Array:
    model = eqx.combine(params, static)
    predicted = jax.vmap(model)(xs)  # batched Warp launches: the kernel gathers through `edges`
    return jnp.mean((predicted - forces) ** 2)


@eqx.filter_jit
@eqx.debug.assert_max_traces(max_traces=1)  # the Warp layer is static and hashable: one trace for the whole run
def train_step(
    params: SpringChain,
    static: SpringChain,
    optimiser: optax.GradientTransformation,
    opt_state: optax.OptState,
    xs: jax.Array,
    forces: jax.Array,
) -> tuple[SpringChain, optax.OptState, jax.Array]:
    """One optax step on `params` (the trainable part of the model); returns the loss before the update."""
    loss, grads = jax.value_and_grad(loss_fn)(params, static, xs, forces)
    updates, opt_state = optimiser.update(grads, opt_state, params)
    return eqx.apply_updates(params, updates), opt_state, loss


def progress(steps: int) -> tuple[Iterable[int], Callable[[str], None]]:
    """A tqdm bar on a terminal when tqdm is installed, plain lines otherwise."""
    try:
        from tqdm.auto import tqdm
    except ImportError:
        return range(steps), print
    bar = tqdm(range(steps), desc="training", disable=None)
    return bar, tqdm.write


def stiffness_error(model: SpringChain, k_true: jax.Array) -> float:
    return float(jnp.max(jnp.abs(jnp.exp(model.log_stiffness) - k_true) / k_true))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=48, help="number of masses in the chain (>= 3)")
    parser.add_argument("--frames", type=int, default=8, help="number of observed configurations")
    parser.add_argument("--steps", type=int, default=300, help="number of Adam steps")
    parser.add_argument("--lr", type=float, default=0.05, help="Adam learning rate")
    parser.add_argument("--noise", type=float, default=0.01, help="relative noise on the measured forces")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--plot", type=Path, default=None, help="save true vs learned stiffness here (matplotlib)")
    args = parser.parse_args(argv)
    if args.n < 3:
        parser.error("--n must be at least 3")

    model, k_true, xs, forces = make_problem(args.n, args.frames, args.seed, args.noise)
    n_springs = model.log_stiffness.shape[0]
    print(f"mass-spring chain: {args.n} masses, {n_springs} springs, {args.frames} observed frames")

    # The batched Warp layer must agree with the reference; a batch folded into the launch would not.
    true_model = eqx.tree_at(lambda m: m.log_stiffness, model, jnp.log(k_true))
    exact = jax.vmap(reference_forces, in_axes=(None, None, None, 0))(k_true, model.rest_length, model.edges, xs)
    err = float(jnp.max(jnp.abs(batched_forces(true_model, xs) - exact)))
    print(f"vmapped Warp layer vs pure-JAX reference: max |difference| = {err:.2e}")
    if not err <= 1e-4 * float(jnp.max(jnp.abs(exact))):
        raise SystemExit("the Warp layer disagrees with the reference")

    params, static = eqx.partition(model, trainable(model))
    optimiser = optax.adam(args.lr)
    opt_state = optimiser.init(params)
    steps, log = progress(args.steps)
    every = max(args.steps // 10, 1)
    start = time.perf_counter()
    first = last = None
    for step in steps:
        params, opt_state, loss = train_step(params, static, optimiser, opt_state, xs, forces)
        if step == 0 or (step + 1) % every == 0 or step + 1 == args.steps:
            last = float(loss)
            first = last if first is None else first
            err = stiffness_error(eqx.combine(params, static), k_true)
            log(f"step {step + 1:5d}  loss {last:.3e}  max relative stiffness error {err:.3f}")
    elapsed = time.perf_counter() - start
    trained = eqx.combine(params, static)
    print(f"loss: initial {first:.3e} -> final {last:.3e} in {args.steps} steps ({elapsed:.1f} s, incl. compile)")
    floor = float(jnp.mean((forces - exact) ** 2))
    print(f"(the measurement noise alone gives a loss of {floor:.3e})")
    print(f"max relative stiffness error: {stiffness_error(trained, k_true):.3f}")

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spring_chain.eqx"
        eqx.tree_serialise_leaves(path, trained)
        reloaded = eqx.tree_deserialise_leaves(path, model)  # `model`, the untrained one, gives the structure
    same = bool(eqx.tree_equal(reloaded, trained))
    same = same and bool(jnp.array_equal(batched_forces(reloaded, xs), batched_forces(trained, xs)))
    print(f"saved and reloaded with eqx.tree_serialise_leaves: {'round-tripped' if same else 'MISMATCH'}")

    if args.plot is not None:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(7, 3.5))
        ax.plot(np.asarray(k_true), "o", label="true")
        ax.plot(np.exp(np.asarray(trained.log_stiffness)), "x", label="learned")
        ax.set_title(f"springs 0-{args.n - 2}: nearest neighbours; {args.n - 1}-{n_springs - 1}: next-nearest")
        ax.set_xlabel("spring")
        ax.set_ylabel("stiffness")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=120)
        print(f"plot saved to {args.plot}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
