from __future__ import annotations

from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.test_util import check_grads

from jarp.tree import SupportsTreeMatch, tree_map


def _merged(*vocabs: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(sorted(set().union(*vocabs)))


class Labels(eqx.Module):
    """Integer codes into a static vocabulary; aligns onto the union of vocabularies."""

    codes: jax.Array
    vocab: tuple[str, ...] = eqx.field(static=True)

    def __tree_match__(self, *others: Labels) -> tuple[Labels, ...]:
        vocab = _merged(self.vocab, *(o.vocab for o in others))
        return tuple(
            Labels(jnp.asarray(np.array([vocab.index(v) for v in x.vocab], np.int32))[x.codes], vocab)
            for x in (self, *others)
        )

    def decode(self) -> list[str]:
        return [self.vocab[int(i)] for i in self.codes]


class Weighted(eqx.Module):
    """One float per vocabulary entry; aligns by zero-padding onto the union of vocabularies."""

    values: jax.Array
    vocab: tuple[str, ...] = eqx.field(static=True)

    def __tree_match__(self, *others: Weighted) -> tuple[Weighted, ...]:
        vocab = _merged(self.vocab, *(o.vocab for o in others))
        out = []
        for x in (self, *others):
            where = np.array([vocab.index(v) for v in x.vocab], np.int32)
            out.append(Weighted(jnp.zeros(len(vocab), x.values.dtype).at[where].set(x.values), vocab))
        return tuple(out)


class Frame(eqx.Module):
    """A matchable node holding another matchable node; records how often it was aligned."""

    labels: Labels
    scale: jax.Array
    calls: list[int] = eqx.field(static=True)

    def __tree_match__(self, *others: Frame) -> tuple[Frame, ...]:
        self.calls.append(len(others))
        return (self, *others)


def test_protocol_is_runtime_checkable() -> None:
    assert isinstance(Labels(jnp.array([0]), ("a",)), SupportsTreeMatch)
    assert not isinstance(jnp.zeros(1), SupportsTreeMatch)


def test_plain_trees_behave_like_jax_tree_map() -> None:
    a = {"x": jnp.arange(3.0), "y": (jnp.float32(1.0), None, [jnp.ones(2)])}
    b = jax.tree.map(lambda v: v * 2, a)
    expected = jax.tree.map(lambda u, v: u + v, a, b)
    out = tree_map(lambda u, v: u + v, a, b)
    assert jax.tree.structure(out) == jax.tree.structure(expected)
    for o, e in zip(jax.tree.leaves(out), jax.tree.leaves(expected), strict=True):
        np.testing.assert_array_equal(o, e)
    counted = tree_map(lambda v: len(v), {"l": [1, 2, 3]}, is_leaf=lambda v: isinstance(v, list))
    assert counted == {"l": 3}


def test_labels_are_aligned_before_mapping() -> None:
    a = Labels(jnp.array([0, 1, 1], dtype=jnp.int32), ("b", "c"))  # b c c
    b = Labels(jnp.array([1, 0, 2], dtype=jnp.int32), ("a", "b", "c"))  # b a c
    # A plain map compares raw codes across different vocabularies, and refuses their structures.
    with pytest.raises(ValueError, match="pytree"):
        jax.tree.map(jnp.equal, a, b)
    same = tree_map(jnp.equal, a, b)
    assert same.codes.tolist() == [True, False, True]
    assert same.vocab == ("a", "b", "c")


def test_alignment_inside_larger_trees_with_three_inputs() -> None:
    trees = [
        {"labels": Labels(jnp.array([0], jnp.int32), vocab), "x": jnp.float32(i)}
        for i, vocab in enumerate([("x",), ("y",), ("x", "z")])
    ]
    seen: list[tuple[str, ...]] = []

    def fn(*leaves: Any) -> Any:
        return jnp.stack(leaves)

    out = tree_map(fn, *trees, is_leaf=lambda x: seen.append(x) or False)  # type: ignore[func-returns-value]
    assert out["labels"].vocab == ("x", "y", "z")
    assert out["labels"].codes[:, 0].tolist() == [0, 1, 0]
    assert out["x"].tolist() == [0.0, 1.0, 2.0]
    assert any(isinstance(node, Labels) for node in seen)  # is_leaf is consulted on the nodes too


def test_nested_matchable_nodes_are_aligned_recursively() -> None:
    calls: list[int] = []
    a = Frame(Labels(jnp.array([0], jnp.int32), ("p",)), jnp.float32(2.0), calls)
    b = Frame(Labels(jnp.array([0], jnp.int32), ("q",)), jnp.float32(3.0), calls)
    out = tree_map(lambda u, v: (u, v), a, b, is_leaf=lambda x: isinstance(x, tuple))
    assert calls == [1]
    codes_a, codes_b = out.labels.codes
    assert (codes_a.tolist(), codes_b.tolist()) == ([0], [1])
    assert out.labels.vocab == ("p", "q")
    assert out.scale == (2.0, 3.0)


def test_is_leaf_stops_recursion_but_not_alignment() -> None:
    a = Labels(jnp.array([0], jnp.int32), ("b",))
    b = Labels(jnp.array([0], jnp.int32), ("a",))
    out = tree_map(lambda u, v: (u.decode(), v.decode(), u.vocab), a, b, is_leaf=lambda x: isinstance(x, Labels))
    assert out == (["b"], ["a"], ("a", "b"))


def test_matchable_non_pytree_objects_are_leaves_after_alignment() -> None:
    class Unit:
        def __init__(self, scale: float) -> None:
            self.scale = scale

        def __tree_match__(self, *others: Unit) -> tuple[Unit, ...]:
            common = min(self.scale, *(o.scale for o in others))
            return tuple(Unit(common) for _ in (self, *others))

    out = tree_map(lambda u, v: (u.scale, v.scale), {"u": Unit(1.0)}, {"u": Unit(1e-3)})
    assert out == {"u": (1e-3, 1e-3)}


def test_only_the_first_trees_nodes_are_aligned() -> None:
    labels = Labels(jnp.array([0], jnp.int32), ("a",))
    out = tree_map(lambda u, v: v, {"k": jnp.zeros(1)}, {"k": labels})
    assert out["k"] is labels


def test_classes_are_not_matchable_nodes() -> None:
    out = tree_map(lambda x: x, {"cls": Labels})
    assert out["cls"] is Labels


def test_bad_tree_match_result() -> None:
    class Bad(eqx.Module):
        x: jax.Array

        def __tree_match__(self, *others: Bad) -> tuple[Bad, ...]:
            return (self,)

    with pytest.raises(TypeError, match=r"`Bad.__tree_match__` must return a tuple of 2 nodes.*length 1"):
        tree_map(jnp.add, Bad(jnp.zeros(1)), Bad(jnp.zeros(1)))


def test_aligned_nodes_with_different_structures() -> None:
    class Lazy(eqx.Module):
        vocab: tuple[str, ...] = eqx.field(static=True)

        def __tree_match__(self, *others: Lazy) -> tuple[Lazy, ...]:
            return (self, *others)  # does not actually align

    with pytest.raises(ValueError, match=r"`Lazy\.__tree_match__` do not share one pytree structure"):
        tree_map(lambda u, v: u, Lazy(("a",)), Lazy(("b",)))


def test_structure_mismatch_outside_matchable_nodes() -> None:
    with pytest.raises(ValueError, match="pytree"):
        tree_map(jnp.add, {"a": jnp.zeros(1)}, {"b": jnp.zeros(1)})


def test_under_jit_and_vmap() -> None:
    @jax.jit
    @eqx.debug.assert_max_traces(max_traces=1)
    def same(a: Labels, b: Labels) -> Labels:
        return tree_map(jnp.equal, a, b)

    for shift in (0, 1):
        a = Labels(jnp.array([0, 1], jnp.int32) + shift, ("b", "c", "d"))
        b = Labels(jnp.array([0, 1], jnp.int32), ("b", "c"))
        assert same(a, b).codes.tolist() == [not shift, not shift]

    batch_a = Labels(jnp.array([[0, 1], [1, 1]], jnp.int32), ("b", "c"))
    batch_b = Labels(jnp.array([[0, 0], [0, 1]], jnp.int32), ("c", "b"))
    out = jax.vmap(lambda a, b: tree_map(jnp.equal, a, b))(batch_a, batch_b)
    # (b, c) vs (c, c) and (c, c) vs (c, b)
    assert out.codes.tolist() == [[False, True], [True, False]]


def test_gradients_through_aligned_nodes() -> None:
    b = Weighted(jnp.array([10.0, 20.0]), ("y", "z"))

    @jax.jit
    def overlap(values: jax.Array) -> jax.Array:
        a = Weighted(values, ("x", "y"))
        product = tree_map(jnp.multiply, a, b)
        return jnp.sum(product.values**2)

    values = jnp.array([1.0, 2.0])
    assert overlap(values) == (2.0 * 10.0) ** 2
    np.testing.assert_allclose(jax.grad(overlap)(values), [0.0, 2 * 2.0 * 100.0])
    check_grads(overlap, (values,), order=1, modes=["fwd", "rev"])
