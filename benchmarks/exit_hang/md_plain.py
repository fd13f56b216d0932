"""The multi-device exit-hang script with the jarp kernels replaced by jnp equivalents (plain JAX)."""

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P


def m(x):
    return (3 * x,)


def g(a, b, s):
    return ((s * a + b) ** 2,)


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


np.testing.assert_allclose(jax.jit(jax.grad(loss))(xs), 18 * np.arange(32), rtol=1e-6)
np.testing.assert_allclose(jax.jit(jax.grad(lambda a: jnp.sum(g(a, a, 2.0)[0])))(xs), 18 * np.arange(32), rtol=1e-6)
print("multi-device ok", flush=True)
