"""Plain JAX (no jarp): tests/warp/support/unawaited_at_exit_script.py, jax.pure_callback in place of the jarp call."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

assert jax.device_count() == 4
mesh = jax.make_mesh((4,), ("d",), axis_types=(jax.sharding.AxisType.Explicit,))


def host(a):
    return np.asarray(a) * 3


def late(a, w):
    for _ in range(4):
        w = jnp.tanh(w @ w)
    b = a + 0 * w[0, :64].sum()
    return jax.pure_callback(host, jax.ShapeDtypeStruct(b.shape, b.dtype), b)


w = jnp.eye(600, dtype=jnp.float32)
a = jax.device_put(jnp.arange(64, dtype=jnp.float32), NamedSharding(mesh, P("d")))
jax.jit(late)(a, w)  # never awaited
print("dispatched", flush=True)
