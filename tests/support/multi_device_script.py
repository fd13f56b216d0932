"""A jarp kernel under ``pmap``, ``shard_map`` and sharded ``jit`` on four CPU devices, ending normally.

Run as a module from the repository root with ``XLA_FLAGS=--xla_force_host_platform_device_count=4``
(``tests/warp/ffi/test_launch_path.py`` does; ``tools/check_exit.py`` runs it hundreds of times to count exits):

    python -m tests.support.multi_device_script

The last result is replicated and ``np.asarray`` reads one replica, so XLA may still run the kernel call on the
other devices (each the plan's first call there) while the interpreter exits. On the native launch path jarp's
exit hook keeps such a call out of Python (see docs/multi-device.md); the Python launch path has no such guard,
so there the script waits for every replica first, as that page tells users to.
"""

import os

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from jarp.warp import jax_kernel
from tests.support import kernels as k

m = jax_kernel(k.triple_kernel)
g = jax_kernel(k.scale_sum_square, enable_backward=True)
assert jax.device_count() == 4
x = jnp.arange(32, dtype=jnp.float32).reshape(4, 8)
np.testing.assert_array_equal(jax.pmap(lambda x: m(x)[0])(x), 3 * np.asarray(x))
mesh = jax.make_mesh((4,), ("d",), axis_types=(jax.sharding.AxisType.Explicit,))
xs = jax.device_put(jnp.arange(32, dtype=jnp.float32), NamedSharding(mesh, P("d")))
f = jax.jit(jax.shard_map(lambda x: m(x)[0], mesh=mesh, in_specs=P("d"), out_specs=P("d")))
np.testing.assert_array_equal(f(xs), 3 * np.arange(32))


def loss(a):
    per_shard = jax.shard_map(lambda a: g(a, a, 2.0)[0], mesh=mesh, in_specs=P("d"), out_specs=P("d"))
    return jnp.sum(per_shard(a))


# d/da sum((2a + a)^2) = 18 a
np.testing.assert_allclose(jax.jit(jax.grad(loss))(xs), 18 * np.arange(32), rtol=1e-6)
# plain jit with sharded inputs (no shard_map): XLA runs the call on the gathered operand (replicated result)
last = jax.jit(jax.grad(lambda a: jnp.sum(g(a, a, 2.0)[0])))(xs)
np.testing.assert_allclose(last, 18 * np.arange(32), rtol=1e-6)
if os.environ.get("JARP_LAUNCH", "").strip().lower() == "python":
    last.block_until_ready()  # every replica: no kernel call may reach the Python callback during finalization
print("multi-device ok", flush=True)
