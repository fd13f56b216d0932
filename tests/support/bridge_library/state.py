"""The simulation state, and its initial value from a Warp kernel wrapped with ``wp.jax_kernel`` at import time."""

from __future__ import annotations

from typing import NamedTuple

import jax
import warp as wp

from . import kernels


class State(NamedTuple):
    """Rigid bodies: poses ``x`` ``(n, 7)``, orientations ``q`` ``(n, 4)``, velocities ``v``, ``w`` ``(n, 3)``."""

    x: jax.Array
    q: jax.Array
    v: jax.Array
    w: jax.Array


# Built at import time, with Warp's positional parameters: num_outputs=4, then Warp's default vmap_method
_init = wp.jax_kernel(kernels.init_bodies, 4)


def init_state(seed: jax.Array) -> State:
    """The initial state of ``len(seed)`` bodies, each placed and spun by its float32 ``seed``."""
    x, q, v, w = _init(seed)
    return State(x, q, v, w)
