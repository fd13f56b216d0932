"""Compositions with JAX and Equinox transformations, for both module kinds.

Unit: how a module's primitive (``jarp/warp/_jax/_primitive.py``) composes: ``jax.jit`` and ``eqx.filter_jit`` (Python
floats stay static), ``lax.scan`` (and ``jax.grad`` through it), ``lax.while_loop``, ``lax.cond``,
``jax.checkpoint``, ahead-of-time lowering and ``jax.shard_map``. ``vmap`` has its own file (``test_batching.py``),
reverse mode too (``test_autodiff.py``).

Tests run over both kinds (``tests/support/kinds.py``); values are checked against NumPy.
"""

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import PartitionSpec as P

from tests.support.kinds import Kind, over_kinds


@over_kinds
def test_jax_jit_and_eqx_filter_jit(kind: Kind):
    x_np = np.arange(7, dtype=np.float32) - 3.0
    x = jnp.asarray(x_np)
    triple = kind("triple")
    scale = kind("scale")

    (a,) = jax.jit(lambda x: triple(x))(x)
    (b,) = eqx.filter_jit(triple)(x)
    (c,) = eqx.filter_jit(lambda m, x, s: m(x, s))(scale, x, -2.0)  # the Python float stays static
    (d,) = eqx.filter_jit(lambda m, x: m(x))(triple, x)
    np.testing.assert_array_equal(a, 3.0 * x_np)
    np.testing.assert_array_equal(b, 3.0 * x_np)
    np.testing.assert_array_equal(c, -2.0 * x_np)
    np.testing.assert_array_equal(d, 3.0 * x_np)


@over_kinds
def test_lax_scan_and_grad_through_scan(kind: Kind):
    m = kind("scale", enable_backward=True)
    x_np = np.arange(1, 7, dtype=np.float32)

    def run(x):
        def body(carry, _):
            (y,) = m(carry, 0.5)
            return y, jnp.sum(y)

        return lax.scan(body, x, None, length=3)

    final, sums = jax.jit(run)(jnp.asarray(x_np))
    np.testing.assert_allclose(final, 0.125 * x_np)
    np.testing.assert_allclose(sums, np.sum(x_np) * np.array([0.5, 0.25, 0.125], np.float32), rtol=1e-6)
    grad = jax.grad(lambda x: jnp.sum(run(x)[0]))(jnp.asarray(x_np))
    np.testing.assert_allclose(grad, np.full(6, 0.125, np.float32))


@over_kinds
def test_lax_while_loop_and_cond(kind: Kind):
    triple = kind("triple")
    scale = kind("scale")
    x_np = np.arange(5, dtype=np.float32) - 2.0

    @jax.jit
    def run(x):
        def cond(carry):
            i, _ = carry
            return i < 4

        def body(carry):
            i, y = carry
            (y,) = triple(y)
            return i + 1, y

        _, y = lax.while_loop(cond, body, (0, x))
        z = lax.cond(jnp.sum(y) > 0, lambda v: triple(v)[0], lambda v: -v, y)
        w = lax.while_loop(lambda c: c[0] < 3, lambda c: (c[0] + 1, scale(c[1], 2.0)[0]), (0, x))[1]
        return y, z, w

    y, z, w = run(jnp.asarray(x_np))
    np.testing.assert_array_equal(y, 81.0 * x_np)
    expected_z = 3.0 * 81.0 * x_np if np.sum(81.0 * x_np) > 0 else -81.0 * x_np
    np.testing.assert_array_equal(z, expected_z)
    np.testing.assert_array_equal(w, 8.0 * x_np)


@over_kinds
def test_checkpoint_aot_and_shard_map(kind: Kind):
    sss = kind("scale_sum_square", enable_backward=True)
    triple = kind("triple")
    x_np = np.arange(8, dtype=np.float32)
    x = jnp.asarray(x_np)

    grad = jax.grad(jax.checkpoint(lambda a: jnp.sum(sss(a, a, 2.0)[0])))(x)  # sum((2a + a)^2)
    np.testing.assert_allclose(grad, 18.0 * x_np, rtol=1e-6)

    compiled = jax.jit(lambda x: triple(x)[0]).lower(x).compile()
    np.testing.assert_array_equal(compiled(x), 3.0 * x_np)

    # the guide's shard_map example, on the CPU devices at hand
    mesh = jax.sharding.Mesh(np.array(jax.devices()), "x")
    f = jax.shard_map(lambda a: triple(a)[0], mesh=mesh, in_specs=(P("x"),), out_specs=P("x"))
    np.testing.assert_array_equal(jax.jit(f)(x), 3.0 * x_np)
