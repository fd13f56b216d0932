"""A batch of meshes sharded over two CPU devices: each device builds the meshes of its own batch elements.

Run as a module from the repository root with ``XLA_FLAGS=--xla_force_host_platform_device_count=2``
(``tests/warp/modules/test_geometry.py`` does). Checks values against the brute-force reference, that the output keeps
the batch sharding and the compiled program gathers nothing, and reverse mode; prints ``geometry sharding ok``.
"""

import jax
import jax.numpy as jnp
import numpy as np
import warp as wp
from jax.sharding import AxisType, NamedSharding
from jax.sharding import PartitionSpec as P

from jarp.warp import Mesh, jax_kernel
from tests.support import kernels_geometry as kg
from tests.support.geometry import FACES, ORIGINS, POINTS, heights, np_ray_depths, with_heights

wp.config.quiet = True


def main() -> None:
    assert jax.device_count() == 2, jax.devices()
    mesh = jax.make_mesh((2,), ("b",), axis_types=(AxisType.Auto,))
    zs = np.stack([heights(s) for s in range(4)])
    module = jax_kernel(kg.ray_depth, enable_backward=True)
    xy = jnp.asarray(POINTS[:, :2])
    f = jax.jit(
        jax.vmap(lambda z: module(Mesh(points=jnp.concatenate([xy, z[:, None]], -1), indices=FACES), ORIGINS)[0])
    )
    sharded = jax.device_put(jnp.asarray(zs), NamedSharding(mesh, P("b")))
    out = f(sharded)
    assert out.sharding.spec == P("b"), out.sharding
    assert "all-gather" not in f.lower(sharded).compile().as_text()
    for k in range(4):
        np.testing.assert_allclose(out[k], np_ray_depths(with_heights(POINTS, zs[k]), FACES, ORIGINS), atol=1e-5)
    g = jax.jit(jax.grad(lambda z: f(z).sum()))(sharded)
    want = jax.grad(lambda z: f(z).sum())(jnp.asarray(zs))
    np.testing.assert_allclose(g, want, rtol=1e-6)
    np.testing.assert_allclose(float(g.sum()), -4.0 * len(ORIGINS), rtol=1e-4)  # each ray: minus its weights
    print("geometry sharding ok")


if __name__ == "__main__":
    main()
