from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jarp.tree import non_differentiable


def _f(x: jax.Array) -> jax.Array:
    return jnp.sum(non_differentiable(x, name="positions") ** 2)


def test_identity_under_jit_and_vmap() -> None:
    x = jnp.arange(3.0)
    assert non_differentiable(x) is not None
    np.testing.assert_array_equal(non_differentiable(x), x)
    np.testing.assert_array_equal(jax.jit(non_differentiable)(x), x)
    np.testing.assert_array_equal(jax.vmap(non_differentiable)(x), x)
    assert _f(x) == 5.0


def test_pytrees_and_non_array_leaves() -> None:
    tree = {"x": jnp.ones(2), "n": jnp.arange(2, dtype=jnp.int32), "f": jnp.sin, "s": 1.5}
    out = non_differentiable(tree)
    assert out["f"] is jnp.sin
    assert out["s"] == 1.5
    assert out["n"].dtype == jnp.int32
    np.testing.assert_array_equal(out["x"], tree["x"])


@pytest.mark.parametrize(
    "differentiate",
    [
        pytest.param(lambda: jax.grad(_f)(jnp.ones(2)), id="grad"),
        pytest.param(lambda: jax.vjp(_f, jnp.ones(2)), id="vjp"),
        pytest.param(lambda: jax.jacrev(_f)(jnp.ones(2)), id="jacrev"),
        pytest.param(lambda: jax.jvp(_f, (jnp.ones(2),), (jnp.ones(2),)), id="jvp"),
        pytest.param(lambda: jax.jacfwd(_f)(jnp.ones(2)), id="jacfwd"),
        pytest.param(lambda: jax.linearize(_f, jnp.ones(2)), id="linearize"),
        pytest.param(lambda: jax.jit(jax.grad(_f))(jnp.ones(2)), id="jit-grad"),
        pytest.param(lambda: jax.vmap(jax.grad(_f))(jnp.ones((3, 2))), id="vmap-grad"),
        pytest.param(lambda: jax.grad(lambda x: _f({"a": x}["a"] * 2))(jnp.ones(2)), id="upstream-ops"),
    ],
)
def test_differentiation_raises(differentiate: Callable[[], object]) -> None:
    with pytest.raises(NotImplementedError, match=r"differentiate through `positions`.*stop_gradient"):
        differentiate()


def test_default_message_without_name() -> None:
    with pytest.raises(NotImplementedError, match="through this value"):
        jax.grad(lambda x: non_differentiable(x) * 2)(jnp.float32(1.0))


def test_values_independent_of_the_inputs_pass() -> None:
    constant = jnp.float32(3.0)
    assert jax.grad(lambda x: x * non_differentiable(constant))(jnp.float32(2.0)) == 3.0
    # Differentiating with respect to another argument is fine.
    assert jax.grad(lambda x, y: x * non_differentiable(y), argnums=0)(jnp.float32(2.0), jnp.float32(5.0)) == 5.0
    # Cut the tangent upstream and the guard is satisfied.
    assert jax.grad(lambda x: x + non_differentiable(jax.lax.stop_gradient(x)))(jnp.float32(1.0)) == 1.0
    # Integer inputs carry no tangent.
    out, tangent = jax.jvp(
        lambda n: non_differentiable(n) * 2, (jnp.int32(3),), (np.zeros((), dtype=jax.dtypes.float0),)
    )
    assert out == 6
    assert tangent.dtype == jax.dtypes.float0
