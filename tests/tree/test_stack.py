from __future__ import annotations

from collections.abc import Callable

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from jax.test_util import check_grads

from jarp.tree import tree_concat, tree_stack


def _tree(value: float, n: int = 3) -> dict[str, object]:
    return {
        "w": jnp.full((n, 2), value, dtype=jnp.float32),
        "b": (jnp.float32(value), jnp.arange(n, dtype=jnp.int32)),
        "none": None,
    }


def test_stack_adds_leading_axis() -> None:
    out = tree_stack(_tree(1.0), _tree(2.0), _tree(3.0))
    assert out["w"].shape == (3, 3, 2)
    assert out["b"][0].tolist() == [1.0, 2.0, 3.0]
    assert out["b"][1].dtype == jnp.int32
    assert out["b"][1].shape == (3, 3)
    assert out["none"] is None


def test_stack_single_tree() -> None:
    out = tree_stack({"x": jnp.arange(3.0)})
    assert out["x"].shape == (1, 3)


def _rows(value: float, n: int = 3) -> dict[str, object]:
    return {"w": jnp.full((n, 2), value, dtype=jnp.float32), "i": [jnp.arange(n, dtype=jnp.int32)], "none": None}


def test_concat_joins_leading_axis() -> None:
    out = tree_concat(_rows(1.0, n=2), _rows(2.0, n=3))
    assert out["w"].shape == (5, 2)
    assert out["w"][:, 0].tolist() == [1.0, 1.0, 2.0, 2.0, 2.0]
    assert out["i"][0].tolist() == [0, 1, 0, 1, 2]
    assert out["i"][0].dtype == jnp.int32


class _Dense(eqx.Module):
    weight: jax.Array
    bias: jax.Array
    activation: Callable[[jax.Array], jax.Array]  # a non-array leaf, shared by the ensemble

    def __call__(self, x: jax.Array) -> jax.Array:
        return self.activation(self.weight @ x + self.bias)


def test_stacked_modules_vmap_like_the_originals() -> None:
    # Non-array leaves (the activation function) are shared, array leaves are stacked.
    weights = np.random.default_rng(0).normal(size=(3, 4, 2)).astype(np.float32)
    members = [_Dense(jnp.asarray(w), jnp.full(4, 0.1 * i, jnp.float32), jax.nn.tanh) for i, w in enumerate(weights)]
    stacked = tree_stack(*members)
    assert isinstance(stacked, _Dense)
    assert stacked.weight.shape == (3, 4, 2)
    assert stacked.activation is jax.nn.tanh
    x = jnp.array([0.3, -0.7])
    batched = eqx.filter_jit(eqx.filter_vmap(lambda m: m(x)))(stacked)
    expected = jnp.stack([m(x) for m in members])
    np.testing.assert_allclose(batched, expected, rtol=1e-6)


def test_different_non_array_leaves_are_rejected() -> None:
    a = {"f": jnp.sin, "x": jnp.zeros(2)}
    b = {"f": jnp.cos, "x": jnp.zeros(2)}
    with pytest.raises(ValueError, match=r"\['f'\].*trees\[1\]"):
        tree_stack(a, b)
    with pytest.raises(ValueError, match=r"\['f'\]"):
        tree_concat(a, b)


def test_structure_mismatch_names_argument() -> None:
    with pytest.raises(ValueError, match=r"`trees\[2\]` has pytree structure"):
        tree_stack({"a": jnp.zeros(1)}, {"a": jnp.zeros(1)}, {"b": jnp.zeros(1)})


def test_shape_mismatch_names_leaf() -> None:
    with pytest.raises(ValueError, match=r"leaf at `\['a'\]\[1\]` has shape \(2,\) in `trees\[0\]` but \(3,\)"):
        tree_stack({"a": (0.0, jnp.zeros(2))}, {"a": (0.0, jnp.zeros(3))})
    with pytest.raises(ValueError, match=r"all dimensions except the first"):
        tree_concat(jnp.zeros((2, 3)), jnp.zeros((2, 4)))
    with pytest.raises(ValueError, match=r"is a scalar in `trees\[1\]`"):
        tree_concat(jnp.zeros(1), jnp.float32(0.0))


def test_no_trees() -> None:
    with pytest.raises(TypeError, match="at least one pytree"):
        tree_stack()
    with pytest.raises(TypeError, match="at least one pytree"):
        tree_concat()


def test_under_jit_traces_once() -> None:
    @jax.jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def f(a: dict, b: dict) -> tuple[dict, dict]:
        return tree_stack(a, b), tree_concat(a, b)

    for value in (1.0, 2.0):
        stacked, concatenated = f(_rows(value), _rows(-value))
        assert stacked["w"].shape == (2, 3, 2)
        assert concatenated["w"].shape == (6, 2)
        assert stacked["w"][1, 0, 0] == -value


def test_under_vmap() -> None:
    xs = jnp.arange(6.0).reshape(3, 2)
    ys = -xs
    stacked = jax.vmap(lambda x, y: tree_stack({"v": x}, {"v": y}))(xs, ys)
    np.testing.assert_array_equal(stacked["v"], jnp.stack([xs, ys], axis=1))
    concatenated = jax.vmap(tree_concat)(xs, ys)
    np.testing.assert_array_equal(concatenated, jnp.concatenate([xs, ys], axis=1))


def test_gradients() -> None:
    weights = jnp.arange(12.0).reshape(2, 3, 2)

    @jax.jit
    def stacked(x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.sum(tree_stack({"v": x}, {"v": y})["v"] ** 2 * weights)

    @jax.jit
    def concatenated(x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.sum(tree_concat(x, y) ** 2 * weights.reshape(6, 2))

    x, y = jnp.ones((3, 2)), jnp.full((3, 2), 2.0)
    check_grads(stacked, (x, y), order=1, modes=["rev"])
    check_grads(concatenated, (x, y), order=1, modes=["rev"])
    gx, gy = jax.grad(stacked, argnums=(0, 1))(x, y)
    np.testing.assert_allclose(gx, 2 * x * weights[0])
    np.testing.assert_allclose(gy, 2 * y * weights[1])


@pytest.mark.x64
def test_gradients_second_order_x64() -> None:
    @jax.jit
    def f(x: jax.Array, y: jax.Array) -> jax.Array:
        return jnp.sum(jnp.sin(tree_stack(x, y)) * tree_concat(x[None], y[None]))

    check_grads(f, (jnp.linspace(0.0, 1.0, 4), jnp.linspace(1.0, 2.0, 4)), order=2, modes=["fwd", "rev"])


@settings(max_examples=10, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 3), min_size=1, max_size=4),
    trailing=st.lists(st.integers(1, 3), max_size=2),
)
def test_stack_and_concat_match_numpy(lengths: list[int], trailing: list[int]) -> None:
    rng = np.random.default_rng(len(lengths))
    rows = [
        {"a": rng.normal(size=(n, *trailing)).astype(np.float32), "k": [np.int32(i)]} for i, n in enumerate(lengths)
    ]
    concatenated = tree_concat(*({"a": r["a"]} for r in rows))
    np.testing.assert_array_equal(concatenated["a"], np.concatenate([r["a"] for r in rows]))
    same = [{"a": rows[0]["a"] * i, "k": r["k"]} for i, r in enumerate(rows)]
    stacked = tree_stack(*same)
    np.testing.assert_array_equal(stacked["a"], np.stack([t["a"] for t in same]))
    assert stacked["k"][0].tolist() == list(range(len(rows)))
