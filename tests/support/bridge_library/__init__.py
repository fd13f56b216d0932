"""A small rigid-body library written against Warp's JAX bridge, as a third-party library writes one.

It imports Warp's bridge functions at import time (``from warp import jax_callable``, ``wp.jax_kernel(...)``) and
builds its wrappers then, so what it runs on is decided by what ``warp`` held when it was imported: Warp's own bridge,
or jarp's after `jarp.warp.patch_warp` (``tests/warp/compat/test_bridge_switch.py`` runs it both ways). Not collected
by pytest. What it uses of the bridge:

* ``wp.array(dtype=wp.quat)`` and ``wp.array(dtype=wp.transform)`` state (JAX shapes ``(n, 4)`` and ``(n, 7)``) and a
  ``wp.array2d[wp.float32]`` parameter (``kernels.py``);
* ``wp.jax_kernel`` with Warp's positional parameters, with and without in-out arguments (``state.py``, ``step.py``);
* ``jax_callable`` over a function whose first parameter is a Python ``int``, with in-out arguments and per-call
  ``output_dims`` naming an in-out argument (which Warp ignores);
* ``jax_callable(..., vmap_method=None)`` under the library's own ``jax.custom_batching.custom_vmap`` (``ground``);
* ``jax_callable(..., has_side_effect=True)``.
"""

from . import kernels as kernels
from .state import State as State
from .state import init_state as init_state
from .step import ground as ground
from .step import simulate as simulate
from .step import step_bodies as step_bodies
