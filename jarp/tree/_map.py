from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, runtime_checkable

import jax

_T = TypeVar("_T")


@runtime_checkable
class SupportsTreeMatch(Protocol):
    """Protocol for pytree nodes that align themselves with their counterparts before a map.

    When [`jarp.tree.tree_map`][] meets a node of the first tree that has a `__tree_match__`
    method, it calls `node.__tree_match__(*others)`, where `others` are the nodes at the same
    position in the other trees. The method returns one node per tree, `self`'s aligned version
    first; these replace the originals for the rest of the map. Typical use: nodes that carry a
    static vocabulary (labels, species, atom types) as an `eqx.field(static=True)` and encode data
    as integer indices into it. Two such nodes with different vocabularies have different
    treedefs, so a plain `jax.tree.map` refuses them; `__tree_match__` rewrites both onto a merged
    vocabulary, after which their indices are comparable.

    Example:
        ```python
        import equinox as eqx
        import jax
        import jax.numpy as jnp
        import numpy as np
        from jarp.tree import SupportsTreeMatch, tree_map


        class Labels(eqx.Module):
            codes: jax.Array  # indices into `vocab`
            vocab: tuple[str, ...] = eqx.field(static=True)

            def __tree_match__(self, *others: "Labels") -> tuple["Labels", ...]:
                vocab = tuple(sorted(set(self.vocab).union(*(o.vocab for o in others))))
                return tuple(
                    Labels(jnp.asarray(np.array([vocab.index(v) for v in x.vocab]))[x.codes], vocab)
                    for x in (self, *others)
                )


        a = Labels(jnp.array([0, 1]), ("b", "c"))  # b, c
        b = Labels(jnp.array([1, 0]), ("a", "b"))  # b, a
        assert isinstance(a, SupportsTreeMatch)
        assert tree_map(jnp.equal, a, b).codes.tolist() == [True, False]
        ```
    """

    def __tree_match__(self, *others: object) -> tuple[Any, ...]:
        """Return `(aligned_self, *aligned_others)`, one node per input tree."""
        ...


def _is_match_node(x: object) -> bool:
    # A class that defines `__tree_match__` satisfies the protocol check as well, but only its
    # instances are nodes to align.
    return isinstance(x, SupportsTreeMatch) and not isinstance(x, type)


def tree_map(
    fn: Callable[..., Any],
    tree: _T,
    *trees: object,
    is_leaf: Callable[[Any], bool] | None = None,
) -> _T:
    """Map `fn` over the leaves of one or more pytrees, aligning `SupportsTreeMatch` nodes first.

    Behaves like `jax.tree.map(fn, tree, *trees, is_leaf=is_leaf)`, except at nodes of `tree`
    that implement [`jarp.tree.SupportsTreeMatch`][]: there `node.__tree_match__(*others)` is
    called with the nodes at the same position in `trees`, and the map continues on the aligned
    nodes it returns. If an aligned node is itself a pytree and `is_leaf` does not claim it, its
    children are mapped recursively, so nested matchable nodes are aligned too; otherwise `fn` is
    applied to the aligned nodes directly. (Matchable nodes claimed by `is_leaf` are therefore
    still aligned before `fn` sees them.) Without matchable nodes this is exactly
    `jax.tree.map`.

    Args:
        fn: Function called as `fn(leaf, *other_leaves)`.
        tree: The primary pytree; it determines the output structure and which nodes are aligned.
        *trees: Further pytrees with the same structure as `tree` (after alignment).
        is_leaf: Optional predicate marking additional subtrees of `tree` as leaves.

    Returns:
        A pytree with the structure of (the aligned) `tree` holding the results of `fn`.

    Raises:
        TypeError: If a `__tree_match__` method does not return a tuple with one node per tree.
        ValueError: If the trees do not have the same structure after alignment.

    Example:
        ```python
        import jax.numpy as jnp
        from jarp.tree import tree_map

        out = tree_map(lambda x, y: x + y, {"a": jnp.ones(2)}, {"a": jnp.ones(2)})
        assert out["a"].tolist() == [2.0, 2.0]
        ```
        See [`jarp.tree.SupportsTreeMatch`][] for an example with nodes that align themselves.
    """

    def is_leaf_or_match(x: object) -> bool:
        return _is_match_node(x) or (is_leaf is not None and is_leaf(x))

    def visit(node: Any, *others: Any) -> Any:
        if _is_match_node(node):
            return _map_matched(fn, node, others, is_leaf)
        return fn(node, *others)

    return jax.tree.map(visit, tree, *trees, is_leaf=is_leaf_or_match)


def _map_matched(
    fn: Callable[..., Any],
    node: SupportsTreeMatch,
    others: tuple[Any, ...],
    is_leaf: Callable[[Any], bool] | None,
) -> Any:
    matched = node.__tree_match__(*others)
    if not isinstance(matched, tuple) or len(matched) != 1 + len(others):
        got = f"a tuple of length {len(matched)}" if isinstance(matched, tuple) else type(matched).__name__
        raise TypeError(
            f"tree_map: `{type(node).__name__}.__tree_match__` must return a tuple of {1 + len(others)} nodes "
            f"(the aligned `self` first, then one per other tree), but returned {got}."
        )
    node, *others_list = matched
    if is_leaf is not None and is_leaf(node):
        return fn(node, *others_list)
    # Flatten one level only: every child is treated as a leaf here and mapped recursively below,
    # so that matchable nodes nested inside are aligned too.
    children, treedef = jax.tree.flatten(node, is_leaf=lambda x: x is not node)
    if len(children) == 1 and children[0] is node:  # `node` is not a pytree node, so it is a leaf.
        return fn(node, *others_list)
    try:
        other_children = [treedef.flatten_up_to(other) for other in others_list]
    except ValueError as e:
        raise ValueError(
            f"tree_map: the nodes returned by `{type(node).__name__}.__tree_match__` do not share one pytree "
            f"structure, so their children cannot be mapped together: {e}"
        ) from e
    mapped = [
        tree_map(fn, child, *(oc[i] for oc in other_children), is_leaf=is_leaf) for i, child in enumerate(children)
    ]
    return treedef.unflatten(mapped)
