from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P
from jax.test_util import check_grads

from jarp.tree import jit, linearize, shard_map, vectorize

# jit


def test_jit_bare_and_with_options() -> None:
    def scaled(x: jax.Array, power: int = 2) -> jax.Array:
        """Docstring kept."""
        return jnp.sum(x**power)

    compiled = jit(scaled)
    assert compiled.__name__ == "scaled"
    assert compiled.__doc__ == "Docstring kept."
    assert compiled(jnp.array([1.0, 2.0])) == 5.0
    static = jit(static_argnames="power")(scaled)
    assert static(jnp.array([1.0, 2.0]), power=3) == 9.0
    with pytest.raises(jax.errors.ConcretizationTypeError):
        # Without static_argnames, `power` is traced and cannot drive Python control flow.
        jit(lambda x, n: x if n > 0 else -x)(jnp.float32(1.0), 1)
    assert jit(lambda x, n: x if n > 0 else -x, static_argnums=1)(jnp.float32(1.0), -1) == -1.0


def test_jit_is_really_jax_jit() -> None:
    @jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def f(x: jax.Array) -> jax.Array:
        return x * 2

    for value in (1.0, 2.0, 3.0):
        assert f(jnp.float32(value)) == 2 * value
    assert "mul" in f.lower(jnp.float32(1.0)).as_text()  # type: ignore[attr-defined]
    donated = jit(lambda x: x + 1, donate_argnums=0, keep_unused=True, inline=True)
    assert donated(jnp.ones(2)).tolist() == [2.0, 2.0]


def test_jit_composes_with_vmap_and_grad() -> None:
    f = jit(lambda x: jnp.sin(x) * x)
    xs = jnp.linspace(0.0, 1.0, 4)
    np.testing.assert_allclose(jax.vmap(f)(xs), jnp.sin(xs) * xs, rtol=1e-6)
    np.testing.assert_allclose(jax.vmap(jax.grad(f))(xs), jnp.cos(xs) * xs + jnp.sin(xs), rtol=1e-6)
    check_grads(f, (jnp.float32(0.3),), order=1, modes=["fwd", "rev"])


# vectorize


def test_vectorize_forms() -> None:
    def dot(a: jax.Array, b: jax.Array) -> jax.Array:
        assert a.ndim == 1
        assert b.ndim == 1
        return jnp.sum(a * b)

    bare = vectorize(lambda a, b: a * b)
    assert bare(jnp.ones((2, 3)), jnp.full((2, 3), 2.0)).tolist() == [[2.0] * 3] * 2
    with_signature = vectorize(signature="(n),(n)->()")(dot)
    assert with_signature(jnp.ones((4, 3)), jnp.ones((1, 3))).tolist() == [3.0] * 4
    direct = vectorize(dot, signature="(n),(n)->()")
    assert direct(jnp.ones((2, 5, 3)), jnp.ones((1, 1, 3))).shape == (2, 5)


def test_vectorize_excluded() -> None:
    def pick(x: jax.Array, i: int) -> jax.Array:
        assert x.ndim == 1
        return x[i]

    vectorized = vectorize(pick, excluded=frozenset({1}), signature="(n)->()")
    assert vectorized(jnp.arange(6.0).reshape(2, 3), 2).tolist() == [2.0, 5.0]


def test_vectorize_under_jit_vmap_grad() -> None:
    norm = vectorize(lambda v: jnp.sqrt(jnp.sum(v**2)), signature="(n)->()")
    vs = jnp.array([[3.0, 4.0], [6.0, 8.0]])
    assert jax.jit(norm)(vs).tolist() == [5.0, 10.0]
    assert jax.vmap(norm)(vs).tolist() == [5.0, 10.0]
    np.testing.assert_allclose(jax.grad(lambda v: jnp.sum(norm(v)))(vs), vs / jnp.array([[5.0], [10.0]]))
    check_grads(lambda v: jnp.sum(norm(v)), (vs,), order=1, modes=["rev"])


# linearize


def test_linearize_matches_jvp() -> None:
    def f(x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.sin(x) * y

    x, y = jnp.array([0.1, 0.2]), jnp.array([1.0, 3.0])
    tx, ty = jnp.array([1.0, 0.5]), jnp.array([0.0, 2.0])
    out, jvp_fn = linearize(f, x, y)
    expected_out, expected_tangent = jax.jvp(f, (x, y), (tx, ty))
    np.testing.assert_allclose(out, expected_out)
    np.testing.assert_allclose(jvp_fn(tx, ty), expected_tangent, rtol=1e-6)
    # The JVP function is linear and batches over tangents.
    batched = jax.vmap(jvp_fn)(jnp.stack([tx, 2 * tx]), jnp.stack([ty, 2 * ty]))
    np.testing.assert_allclose(batched[1], 2 * batched[0], rtol=1e-6)


def test_linearize_has_aux() -> None:
    def f(x: jax.Array) -> tuple[jax.Array, dict[str, jax.Array]]:
        return x**2, {"x": x}

    out, jvp_fn, aux = linearize(f, jnp.float32(3.0), has_aux=True)
    assert out == 9.0
    assert aux["x"] == 3.0
    assert jvp_fn(jnp.float32(1.0)) == 6.0


def test_linearize_under_jit_and_grad() -> None:
    @jax.jit
    def directional(x: jax.Array, t: jax.Array) -> jax.Array:
        _, jvp_fn = linearize(lambda z: jnp.sum(jnp.sin(z)), x)
        return jvp_fn(t)

    x, t = jnp.array([0.0, 1.0]), jnp.array([1.0, 1.0])
    np.testing.assert_allclose(directional(x, t), jnp.sum(jnp.cos(x)), rtol=1e-6)
    # d/dx of (cos(x) . t) = -sin(x) * t
    np.testing.assert_allclose(jax.grad(directional)(x, t), -jnp.sin(x) * t, rtol=1e-6)


# shard_map


def _mesh() -> jax.sharding.Mesh:
    return jax.make_mesh((jax.device_count(),), ("i",), axis_types=(jax.sharding.AxisType.Auto,))


def test_shard_map_forms() -> None:
    mesh = _mesh()

    def total(x: jax.Array) -> jax.Array:
        return jax.lax.psum(jnp.sum(x), "i")

    direct = shard_map(total, mesh=mesh, in_specs=P("i"), out_specs=P())
    decorated = shard_map(mesh=mesh, in_specs=P("i"), out_specs=P())(total)
    x = jnp.arange(4.0 * jax.device_count())
    assert direct(x) == decorated(x) == jnp.sum(x)
    assert direct.__name__ == "total"  # type: ignore[attr-defined]


def test_shard_map_infers_in_specs_with_explicit_axes() -> None:
    mesh = jax.make_mesh((jax.device_count(),), ("i",), axis_types=(jax.sharding.AxisType.Explicit,))
    x = jax.device_put(jnp.arange(2.0 * jax.device_count()), jax.sharding.NamedSharding(mesh, P("i")))
    doubled = shard_map(lambda s: s * 2, mesh=mesh, out_specs=P("i"))(x)
    np.testing.assert_array_equal(doubled, 2 * np.arange(2.0 * jax.device_count()))


def test_shard_map_under_jit_and_grad() -> None:
    mesh = _mesh()
    energy = shard_map(lambda x: jax.lax.psum(jnp.sum(x**2), "i"), mesh=mesh, in_specs=P("i"), out_specs=P())
    x = jnp.arange(2.0 * jax.device_count())
    assert jax.jit(energy)(x) == jnp.sum(x**2)
    np.testing.assert_allclose(jax.jit(jax.grad(energy))(x), 2 * x)
    check_grads(energy, (x,), order=1, modes=["rev"])


def test_shard_map_splits_across_devices() -> None:
    # Several CPU devices need a fresh process: the device count is fixed when JAX initialises.
    script = textwrap.dedent(
        """
        import jax
        import jax.numpy as jnp
        from jax.sharding import PartitionSpec as P
        from jarp.tree import shard_map

        assert jax.device_count() == 2
        mesh = jax.make_mesh((2,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))

        @shard_map(mesh=mesh, in_specs=P("i"), out_specs=P("i"))
        def local_sum(x):
            assert x.shape == (3,)  # each device sees half
            return jnp.sum(x, keepdims=True)

        print(local_sum(jnp.arange(6.0)).tolist())
        """
    )
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=2", JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[3.0, 12.0]"


@pytest.mark.x64
def test_float64_gradients_x64() -> None:
    x = jnp.linspace(0.1, 0.9, 4)
    assert x.dtype == jnp.float64
    check_grads(jit(lambda v: jnp.sum(jnp.sin(v) ** 2)), (x,), order=2, modes=["rev"])
    norm = vectorize(lambda v: jnp.sqrt(jnp.sum(v**2)), signature="(n)->()")
    check_grads(jit(lambda v: jnp.sum(norm(v))), (x.reshape(2, 2),), order=1, modes=["fwd", "rev"])
    out, jvp_fn = linearize(lambda v: jnp.sin(v) * v, x)
    _, expected = jax.jvp(lambda v: jnp.sin(v) * v, (x,), (jnp.ones_like(x),))
    assert out.dtype == jnp.float64
    np.testing.assert_allclose(jvp_fn(jnp.ones_like(x)), expected, rtol=1e-12)
