"""A Warp layer across devices: ``shard_map``, sharded ``jit`` and ``pmap``, forward and gradient.

Runs on one machine with several CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=4``, set below
before JAX starts); the same code runs on several GPUs.

    python examples/multi_device.py
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_force_host_platform_device_count=4")

import jax
import jax.numpy as jnp
import numpy as np
import warp as wp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

import jarp.warp

wp.config.log_level = wp.LOG_WARNING  # no banner, no per-module load lines


@wp.kernel
def softplus_energy(x: wp.array(dtype=wp.float32), k: wp.float32, e: wp.array(dtype=wp.float32)):
    i = wp.tid()
    e[i] = k * wp.log(1.0 + wp.exp(x[i]))


def main() -> None:
    layer = jarp.warp.jax_kernel(softplus_energy, enable_backward=True)
    n_dev = jax.device_count()
    mesh = jax.make_mesh((n_dev,), ("d",))
    x = jax.device_put(jnp.linspace(-2.0, 2.0, 8 * n_dev, dtype=jnp.float32), NamedSharding(mesh, P("d")))
    k = jnp.float32(0.5)  # a runtime scalar: differentiable, not baked into the launch

    # Each device launches the kernel on its own shard.
    def per_shard(x: jax.Array, k: jax.Array) -> jax.Array:
        return layer(x, k)[0]

    sharded = jax.shard_map(per_shard, mesh=mesh, in_specs=(P("d"), P()), out_specs=P("d"))

    def loss(x: jax.Array, k: jax.Array) -> jax.Array:
        return jnp.sum(sharded(x, k))

    value, (gx, gk) = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))(x, k)
    expected_gx = 0.5 / (1.0 + np.exp(-np.asarray(x)))
    np.testing.assert_allclose(gx, expected_gx, rtol=1e-5)
    np.testing.assert_allclose(gk, np.sum(np.log1p(np.exp(np.asarray(x)))), rtol=1e-5)
    print(f"{n_dev} devices, shard_map: loss {float(value):.4f}, grad sharding {gx.sharding.spec}")

    # jit with sharded inputs and no shard_map: XLA gathers the operand for the call.
    gx_jit = jax.jit(jax.grad(lambda x: jnp.sum(layer(x, k)[0])))(x)
    np.testing.assert_allclose(gx_jit, expected_gx, rtol=1e-5)

    # pmap over a leading device axis.
    xs = np.reshape(np.asarray(x), (n_dev, -1))
    out = jax.pmap(lambda x: layer(x, 0.5)[0])(xs)
    np.testing.assert_allclose(out, 0.5 * np.log1p(np.exp(xs)), rtol=1e-5)
    print("sharded jit and pmap agree")


if __name__ == "__main__":
    main()
