"""One time step: a kernel with in-out arguments, and Warp-launching functions wrapped with ``jax_callable``.

Everything is wrapped at import time, from ``from warp import jax_callable`` and ``wp.jax_kernel``, as a library
written for Warp's bridge does.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import warp as wp
from warp import jax_callable

from . import kernels
from .state import State

DT = 0.01
SUBSTEPS = 4
GROUND = 0.0

# Positional, as Warp's signature orders them: num_outputs, vmap_method, launch_dims, output_dims, in_out_argnames
_half_kick = wp.jax_kernel(kernels.apply_forces, 2, "broadcast_all", None, None, ["v", "w"])


def _substeps(
    substeps: int,
    dt: float,
    params: wp.array2d[wp.float32],
    x_in: wp.array(dtype=wp.transform),
    q_in: wp.array(dtype=wp.quat),
    v: wp.array(dtype=wp.vec3),
    w: wp.array(dtype=wp.vec3),
    x: wp.array(dtype=wp.transform),
    q: wp.array(dtype=wp.quat),
) -> None:
    # v, w: in-out; x, q: outputs (uninitialised in Warp's bridge: copied into first)
    wp.copy(x, x_in)
    wp.copy(q, q_in)
    h = float(dt) / int(substeps)
    for _ in range(int(substeps)):
        wp.launch(kernels.apply_forces, dim=v.shape, inputs=[x, params, h, v, w])
        wp.launch(kernels.integrate, dim=x.shape, inputs=[h, v, w, x, q])


_substeps_call = jax_callable(_substeps, num_outputs=4, in_out_argnames=["v", "w"])


def _ground(
    height: float,
    x: wp.array(dtype=wp.transform),
    v: wp.array(dtype=wp.vec3),
    x_out: wp.array(dtype=wp.transform),
    v_out: wp.array(dtype=wp.vec3),
) -> None:
    wp.launch(kernels.ground_contact, dim=x.shape, inputs=[height, x, v], outputs=[x_out, v_out])


# No batching rule of its own: `ground` below brings one (custom_vmap)
_ground_call = jax_callable(_ground, num_outputs=2, vmap_method=None)


@jax.custom_batching.custom_vmap
def ground(x: jax.Array, v: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Bodies below the ground are put on it, their vertical velocity reflected and halved."""
    x_out, v_out = _ground_call(GROUND, x, v)
    return x_out, v_out


@ground.def_vmap
def _ground_batched(
    axis_size: int, in_batched: list[bool], x: jax.Array, v: jax.Array
) -> tuple[tuple[jax.Array, jax.Array], tuple[bool, bool]]:
    # The bodies of all batch elements in one call: the batch folded into the body axis
    x_batched, v_batched = in_batched
    x = x if x_batched else jnp.broadcast_to(x, (axis_size, *x.shape))
    v = v if v_batched else jnp.broadcast_to(v, (axis_size, *v.shape))
    n = x.shape[1]
    x_out, v_out = _ground_call(GROUND, x.reshape(axis_size * n, 7), v.reshape(axis_size * n, 3))
    return (x_out.reshape(axis_size, n, 7), v_out.reshape(axis_size, n, 3)), (True, True)


def _energy(v: wp.array(dtype=wp.vec3), w: wp.array(dtype=wp.vec3), e: wp.array(dtype=wp.float32)) -> None:
    wp.launch(kernels.kinetic_energy, dim=v.shape, inputs=[v, w], outputs=[e])


_energy_call = jax_callable(_energy, has_side_effect=True)


@functools.partial(jax.jit, static_argnames=("dt", "substeps"))
def step_bodies(state: State, params: jax.Array, dt: float = DT, substeps: int = SUBSTEPS) -> tuple[State, jax.Array]:
    """Advance the bodies by ``dt``; returns the new state and each body's kinetic energy."""
    n = state.x.shape[0]
    v, w = _half_kick(state.x, params, 0.5 * dt, state.v, state.w)
    # output_dims names the in-out v too: Warp ignores entries for in-out arguments
    v, w, x, q = _substeps_call(substeps, dt, params, state.x, state.q, v, w, output_dims={"v": n, "x": n, "q": n})
    x, v = ground(x, v)
    (e,) = _energy_call(v, w)
    return State(x, q, v, w), e


def simulate(state: State, params: jax.Array, steps: int) -> tuple[State, jax.Array]:
    """``steps`` steps from ``state``; returns the last state and the energies, ``(steps, n)``."""
    energies = []
    for _ in range(steps):
        state, e = step_bodies(state, params)
        energies.append(e)
    return state, jnp.stack(energies)
