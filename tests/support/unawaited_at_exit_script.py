"""Kernel calls dispatched on all 4 devices, never awaited, that reach jarp's Python callback after the script ends.

Run as a module from the repository root with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
(``tests/warp/ffi/test_native.py`` does; ``tools/check_exit.py`` runs it many times):

    python -m tests.support.unawaited_at_exit_script [matrix size, default 600]

Each device first runs a slow matmul chain (a few hundred ms), then a jarp call of a fresh plan (so it takes
jarp's Python callback path on an XLA worker thread). The main thread does not wait: it is inside interpreter
finalization by the time the callbacks run. Without a guard, the worker that takes the GIL then is ended by
CPython (pthread_exit) and the process hangs destroying XLA's CPU client.
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jarp.warp import jax_kernel
from tests.support import kernels as k

g = jax_kernel(k.scale_sum_square, enable_backward=True)
assert jax.device_count() == 4
mesh = jax.make_mesh((4,), ("d",), axis_types=(jax.sharding.AxisType.Explicit,))
xs = jax.device_put(jnp.arange(32, dtype=jnp.float32), NamedSharding(mesh, P("d")))
np.testing.assert_allclose(jax.jit(lambda a: g(a, a, 2.0)[0])(xs), 9 * np.arange(32) ** 2, rtol=1e-6)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 600


def late(a, w):
    for _ in range(4):
        w = jnp.tanh(w @ w)
    return g(a + 0 * w[0, :64].sum(), a, 2.0)[0]  # the jarp call waits for the matmul chain


w = jnp.eye(n, dtype=jnp.float32)
a = jax.device_put(jnp.arange(64, dtype=jnp.float32), NamedSharding(mesh, P("d")))
jax.jit(late)(a, w)  # never awaited
print("dispatched", flush=True)
