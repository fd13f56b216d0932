from __future__ import annotations

import equinox as eqx
import hypothesis.strategies as st
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from jax.test_util import check_grads

from jarp.tree import tree_scatter_set, tree_structure, tree_where_broadcast_last, tree_zeros_like


class _Layer(eqx.Module):
    weight: jax.Array
    count: jax.Array
    mask: jax.Array
    activation: object
    name: str = eqx.field(static=True)


def _layer() -> _Layer:
    return _Layer(
        weight=jnp.ones((2, 3)),
        count=jnp.array([1, 2], dtype=jnp.int32),
        mask=jnp.array([True, False]),
        activation=jax.nn.relu,
        name="layer",
    )


# tree_zeros_like


def test_zeros_like_keeps_dtypes_and_non_arrays() -> None:
    zeros = tree_zeros_like(_layer())
    assert isinstance(zeros, _Layer)
    assert zeros.weight.shape == (2, 3)
    assert not zeros.weight.any()
    assert zeros.count.dtype == jnp.int32
    assert zeros.count.tolist() == [0, 0]
    assert zeros.mask.dtype == jnp.bool_
    assert not zeros.mask.any()
    assert zeros.activation is jax.nn.relu
    assert zeros.name == "layer"
    python = tree_zeros_like({"f": 1.5, "i": 3, "np": np.ones(2, np.float32)})
    assert python["f"] == 0.0
    assert python["i"] == 0
    assert python["np"].tolist() == [0.0, 0.0]
    assert python["np"].dtype == jnp.float32


def test_zeros_like_from_shapes() -> None:
    shapes = eqx.filter_eval_shape(_layer)
    assert isinstance(shapes.weight, jax.ShapeDtypeStruct)
    zeros = tree_zeros_like(shapes)
    assert isinstance(zeros.weight, jax.Array)
    assert zeros.weight.shape == (2, 3)
    assert zeros.count.dtype == jnp.int32
    assert zeros.activation is jax.nn.relu


def test_zeros_like_under_jit_and_vmap() -> None:
    tree = {"a": jnp.arange(6.0).reshape(3, 2), "b": jnp.arange(3, dtype=jnp.int32)}
    jitted = jax.jit(tree_zeros_like)(tree)
    vmapped = jax.vmap(tree_zeros_like)(tree)
    for out in (jitted, vmapped):
        assert out["a"].shape == (3, 2)
        assert not out["a"].any()
        assert out["b"].dtype == jnp.int32
    # The result does not depend on the input values, so its gradient is zero.
    grad = jax.grad(lambda x: jnp.sum(tree_zeros_like(x) + x))(jnp.ones(3))
    assert grad.tolist() == [1.0, 1.0, 1.0]


# tree_structure


def test_tree_structure_matches_jax() -> None:
    tree = {"a": jnp.zeros(2), "b": (1.0, None, [2.0])}
    assert tree_structure(tree) == jax.tree.structure(tree)
    assert tree_structure(tree).num_leaves == 3
    is_list = lambda x: isinstance(x, list)  # noqa: E731
    assert tree_structure(tree, is_leaf=is_list) == jax.tree.structure(tree, is_leaf=is_list)
    assert tree_structure(tree, is_leaf=is_list).num_leaves == 3
    assert tree_structure(tree, is_leaf=lambda x: isinstance(x, tuple)).num_leaves == 2
    renamed = _Layer(jnp.ones((2, 3)), jnp.zeros(2, jnp.int32), jnp.zeros(2, bool), jax.nn.relu, name="other")
    assert tree_structure(_layer()) != tree_structure(renamed)  # static fields are part of the structure


def test_tree_structure_under_jit() -> None:
    @jax.jit
    def f(tree: dict) -> jax.Array:
        treedef = tree_structure(tree)
        return treedef.unflatten([leaf * 2 for leaf in jax.tree.leaves(tree)])

    assert f({"a": jnp.float32(1.0), "b": jnp.float32(2.0)}) == {"a": 2.0, "b": 4.0}


# tree_where_broadcast_last


def _walkers(value: float) -> dict[str, jax.Array]:
    return {
        "energy": jnp.full((3,), value),
        "pos": jnp.full((3, 4, 2), value),
        "count": jnp.full((3, 1), value).astype(jnp.int32),
    }


def test_where_broadcast_last_selects_per_walker() -> None:
    accept = jnp.array([True, False, True])
    out = tree_where_broadcast_last(accept, _walkers(1.0), _walkers(0.0))
    assert out["energy"].tolist() == [1.0, 0.0, 1.0]
    assert out["pos"].shape == (3, 4, 2)
    np.testing.assert_array_equal(out["pos"][:, 0, 0], [1.0, 0.0, 1.0])
    assert (out["pos"][1] == 0).all()
    assert (out["pos"][2] == 1).all()
    assert out["count"].dtype == jnp.int32
    assert out["count"][:, 0].tolist() == [1, 0, 1]


def test_where_broadcast_last_scalar_and_size_one_accept() -> None:
    out = tree_where_broadcast_last(jnp.array(False), _walkers(1.0), _walkers(0.0))
    assert not out["pos"].any()
    out = tree_where_broadcast_last(jnp.array([True]), _walkers(1.0), _walkers(0.0))
    assert out["pos"].all()


def test_where_broadcast_last_errors() -> None:
    with pytest.raises(ValueError, match=r"shape \(2,\).*`\['count'\]` in `tree1`"):
        tree_where_broadcast_last(jnp.array([True, False]), _walkers(1.0), _walkers(0.0))
    with pytest.raises(ValueError, match=r"not a prefix of the shape \(3,\)"):
        tree_where_broadcast_last(jnp.ones((3, 4), bool), _walkers(1.0), _walkers(0.0))
    with pytest.raises(ValueError, match="`tree2` has pytree structure"):
        tree_where_broadcast_last(jnp.array(True), {"a": jnp.zeros(1)}, {"b": jnp.zeros(1)})


def test_where_broadcast_last_under_vmap_and_jit() -> None:
    accept = jnp.array([True, False, True])

    def per_walker(a: jax.Array, new: dict, old: dict) -> dict:
        return tree_where_broadcast_last(a, new, old)

    expected = tree_where_broadcast_last(accept, _walkers(1.0), _walkers(0.0))
    vmapped = jax.vmap(per_walker)(accept, _walkers(1.0), _walkers(0.0))
    jitted = jax.jit(tree_where_broadcast_last)(accept, _walkers(1.0), _walkers(0.0))
    for out in (vmapped, jitted):
        for key in expected:
            np.testing.assert_array_equal(out[key], expected[key])


def test_where_broadcast_last_gradients() -> None:
    accept = jnp.array([True, False, True])

    @jax.jit
    def f(new: jax.Array, old: jax.Array) -> jax.Array:
        return jnp.sum(tree_where_broadcast_last(accept, {"p": new}, {"p": old})["p"] ** 2)

    new, old = jnp.ones((3, 2)), jnp.full((3, 2), 2.0)
    check_grads(f, (new, old), order=1, modes=["fwd", "rev"])
    g_new, g_old = jax.grad(f, argnums=(0, 1))(new, old)
    np.testing.assert_array_equal(g_new[:, 0], [2.0, 0.0, 2.0])
    np.testing.assert_array_equal(g_old[:, 0], [0.0, 4.0, 0.0])


@settings(max_examples=10, deadline=None)
@given(
    batch=st.lists(st.integers(1, 3), max_size=2),
    trailing=st.lists(st.lists(st.integers(1, 3), max_size=2), min_size=1, max_size=3),
    seed=st.integers(0, 2**16),
)
def test_where_broadcast_last_matches_numpy(batch: list[int], trailing: list[list[int]], seed: int) -> None:
    rng = np.random.default_rng(seed)
    accept = rng.random(batch) < 0.5
    tree1 = [rng.normal(size=(*batch, *t)).astype(np.float32) for t in trailing]
    tree2 = [rng.normal(size=(*batch, *t)).astype(np.float32) for t in trailing]
    out = tree_where_broadcast_last(accept, tree1, tree2)
    for o, a, b, t in zip(out, tree1, tree2, trailing, strict=True):
        np.testing.assert_array_equal(o, np.where(accept.reshape(accept.shape + (1,) * len(t)), a, b))


# tree_scatter_set


def test_scatter_set_leafwise() -> None:
    state = {"x": jnp.zeros((4, 2)), "n": jnp.zeros(4, dtype=jnp.int32), "tag": "walkers"}
    update = {"x": jnp.ones((2, 2)), "n": jnp.array([7, 8], dtype=jnp.int32), "tag": "walkers"}
    new = tree_scatter_set(state, update, jnp.array([3, 0]), {})
    assert new["n"].tolist() == [8, 0, 0, 7]
    assert new["x"][:, 0].tolist() == [1.0, 0.0, 0.0, 1.0]
    assert new["tag"] == "walkers"
    assert tree_scatter_set(state, update, jnp.array([3, 0]))["n"].tolist() == [8, 0, 0, 7]


def test_scatter_set_forwards_args() -> None:
    item = jnp.zeros(3, dtype=jnp.int32)
    value = jnp.array([1, 2], dtype=jnp.int32)
    idxs = jnp.array([1, 5])
    assert tree_scatter_set(item, value, idxs, {"mode": "drop"}).tolist() == [0, 1, 0]
    # Negative indices wrap around as in NumPy unless `wrap_negative_indices=False` makes them out of bounds.
    negative = jnp.array([-1, 0])
    assert tree_scatter_set(item, value, negative, {"mode": "drop"}).tolist() == [2, 0, 1]
    assert tree_scatter_set(item, value, negative, {"mode": "drop", "wrap_negative_indices": False}).tolist() == [
        2,
        0,
        0,
    ]


def test_scatter_set_errors() -> None:
    with pytest.raises(TypeError, match=r"unknown key\(s\) \['fill_value'\]"):
        tree_scatter_set(jnp.zeros(2), jnp.ones(1), jnp.array([0]), {"fill_value": 0})  # type: ignore[typeddict-unknown-key]
    with pytest.raises(ValueError, match="`value` has pytree structure"):
        tree_scatter_set({"a": jnp.zeros(2)}, {"b": jnp.zeros(1)}, jnp.array([0]), {})
    with pytest.raises(ValueError, match=r"leaf at `\['f'\]`"):
        tree_scatter_set({"f": jnp.sin}, {"f": jnp.cos}, jnp.array([0]), {})


def test_scatter_set_under_jit_vmap_grad() -> None:
    idxs = jnp.array([0, 2])

    @jax.jit
    def f(item: jax.Array, value: jax.Array) -> jax.Array:
        return jnp.sum(tree_scatter_set({"a": item}, {"a": value}, idxs, {"unique_indices": True})["a"] ** 2)

    item, value = jnp.arange(1.0, 4.0), jnp.array([5.0, 6.0])
    assert f(item, value) == 25.0 + 4.0 + 36.0
    check_grads(f, (item, value), order=1, modes=["fwd", "rev"])
    g_item, g_value = jax.grad(f, argnums=(0, 1))(item, value)
    assert g_item.tolist() == [0.0, 4.0, 0.0]
    assert g_value.tolist() == [10.0, 12.0]
    batched = jax.vmap(lambda i, v, k: tree_scatter_set(i, v, k, {}))(
        jnp.zeros((2, 3)), jnp.array([1.0, 2.0]), jnp.array([2, 0])
    )
    assert batched.tolist() == [[0.0, 0.0, 1.0], [2.0, 0.0, 0.0]]


@pytest.mark.x64
def test_second_order_gradients_x64() -> None:
    accept = jnp.array([True, False, True])
    idxs = jnp.array([2, 0])

    @jax.jit
    def f(new: jax.Array, old: jax.Array) -> jax.Array:
        selected = tree_where_broadcast_last(accept, {"p": new}, {"p": old})["p"]
        updated = tree_scatter_set({"p": selected}, {"p": jnp.sin(new[:2])}, idxs, {})["p"]
        return jnp.sum(jnp.sin(updated) * updated) + jnp.sum(tree_zeros_like(old) * old)

    new = jnp.linspace(0.1, 0.6, 6).reshape(3, 2)
    old = jnp.linspace(1.0, 2.0, 6).reshape(3, 2)
    assert new.dtype == jnp.float64
    check_grads(f, (new, old), order=2, modes=["rev"])
