"""Private helpers shared by the leafwise pytree functions."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import equinox as eqx
import jax
import jax.tree_util as jtu
import numpy as np


def leaf_phrase(x: Any) -> str:
    """A short description of a leaf for error messages."""
    if eqx.is_array_like(x) and not isinstance(x, bool | int | float | complex):
        return f"array of shape {tuple(np.shape(x))} and dtype {x.dtype}"
    return f"{type(x).__name__} {x!r}" if len(repr(x)) <= 60 else type(x).__name__


def same_object(a: object, b: object) -> bool:
    """Whether two non-array leaves are interchangeable (identical or equal)."""
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # an arbitrary object's __eq__ may raise or return a non-bool
        return False


def check_same_structure(fn_name: str, names: Sequence[str], trees: Sequence[Any]) -> jtu.PyTreeDef:  # pyright: ignore[reportInvalidTypeForm]  # jaxlib ships no stubs: its types are unknown
    """Raise a `ValueError` naming the offending argument if the pytree structures differ."""
    reference = jax.tree.structure(trees[0])
    for name, tree in zip(names[1:], trees[1:], strict=True):
        structure = jax.tree.structure(tree)
        if structure != reference:
            raise ValueError(
                f"{fn_name}: `{name}` has pytree structure\n  {structure}\nwhich differs from the structure of "
                f"`{names[0]}`:\n  {reference}\nAll of them must have the same structure: the same containers, "
                "keys, Module types and static fields."
            )
    return reference


def map_leaves(
    fn_name: str,
    fn: Callable[..., Any],
    names: Sequence[str],
    trees: Sequence[Any],
) -> Any:
    """Apply `fn(path, *leaves)` to every position whose leaves are all array-like.

    Positions whose leaves are not array-like (functions, strings, other objects an Equinox
    Module may hold) are passed through unchanged, provided they are the same object in every
    tree; otherwise a `ValueError` names the position and argument.
    """
    treedef, out = flat_map_leaves(fn_name, fn, names, trees, passthrough=lambda leaf: leaf)
    return treedef.unflatten(out)


def flat_map_leaves(
    fn_name: str,
    fn: Callable[..., Any],
    names: Sequence[str],
    trees: Sequence[Any],
    passthrough: Callable[[Any], Any],
) -> tuple[jtu.PyTreeDef, list[Any]]:  # pyright: ignore[reportInvalidTypeForm]  # jaxlib ships no stubs: its types are unknown
    """Like `map_leaves`, but return the treedef and the flat results; non-array leaves become `passthrough(leaf)`."""
    treedef = check_same_structure(fn_name, names, trees)
    paths_and_leaves, _ = jtu.tree_flatten_with_path(trees[0])
    other_leaves = [treedef.flatten_up_to(tree) for tree in trees[1:]]
    out = []
    for i, (path, first) in enumerate(paths_and_leaves):
        leaves = [first, *(leaves[i] for leaves in other_leaves)]
        if all(eqx.is_array_like(leaf) for leaf in leaves):
            out.append(fn(path, *leaves))
            continue
        for name, leaf in zip(names[1:], leaves[1:], strict=True):
            if eqx.is_array_like(first) or not same_object(first, leaf):
                raise ValueError(
                    f"{fn_name}: the leaf at `{jtu.keystr(path)}` is {leaf_phrase(first)} in `{names[0]}` but "
                    f"{leaf_phrase(leaf)} in `{name}`. Leaves that are not arrays are passed through unchanged, so "
                    "they must be the same object in every tree; partition them out with `eqx.partition` first "
                    "if they legitimately differ."
                )
        out.append(passthrough(first))
    return treedef, out


def trees_names(fn_name: str, trees: Sequence[Any]) -> list[str]:
    """Names like `trees[0]`, `trees[1]`, ... for error messages about variadic arguments."""
    if len(trees) == 0:
        raise TypeError(f"{fn_name}: expected at least one pytree, got none.")
    return [f"trees[{i}]" for i in range(len(trees))]
