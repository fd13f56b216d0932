from __future__ import annotations

from typing import TypeVar

import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jaxtyping import Array, ArrayLike

from ._leaf_utils import map_leaves, trees_names

_T = TypeVar("_T")


def tree_stack(*trees: _T) -> _T:
    """Stack pytrees leafwise along a new leading axis.

    This is how an ensemble of Equinox Modules becomes one batched Module for `jax.vmap` /
    `eqx.filter_vmap`. Leaves that are not arrays (e.g. an activation function held by a Module)
    are kept as they are, and must be the same object in every tree.

    Args:
        *trees: One or more pytrees with the same structure, whose corresponding array leaves
            have the same shape.

    Returns:
        A pytree with the structure of `trees[0]` whose array leaves have shape
        `(len(trees), *leaf.shape)`.

    Raises:
        TypeError: If no tree is given.
        ValueError: If the structures differ, or corresponding leaves have different shapes.

    Example:
        ```python
        import jax.numpy as jnp
        from jarp.tree import tree_stack

        a = {"w": jnp.zeros(3), "b": jnp.float32(0.0)}
        b = {"w": jnp.ones(3), "b": jnp.float32(1.0)}
        batch = tree_stack(a, b)
        assert batch["w"].shape == (2, 3) and batch["b"].shape == (2,)
        ```
    """
    names = trees_names("tree_stack", trees)

    def stack(path: jtu.KeyPath, *leaves: ArrayLike) -> Array:
        shapes = [np.shape(leaf) for leaf in leaves]
        for name, shape in zip(names[1:], shapes[1:], strict=True):
            if shape != shapes[0]:
                raise ValueError(
                    f"tree_stack: the leaf at `{jtu.keystr(path)}` has shape {shapes[0]} in `{names[0]}` but "
                    f"{shape} in `{name}`. Stacking needs identical shapes; use `tree_concat` to join along an "
                    "existing axis of different lengths."
                )
        return jnp.stack(leaves)

    return map_leaves("tree_stack", stack, names, trees)


def tree_concat(*trees: _T) -> _T:
    """Concatenate pytrees leafwise along their existing leading axis (axis 0).

    Leaves that are not arrays are kept as they are, and must be the same object in every tree.

    Args:
        *trees: One or more pytrees with the same structure. Corresponding array leaves must have
            at least one dimension, and agree on every dimension but the first.

    Returns:
        A pytree with the structure of `trees[0]` whose array leaves have shape
        `(sum of leading sizes, *leaf.shape[1:])`.

    Raises:
        TypeError: If no tree is given.
        ValueError: If the structures differ, a leaf is a scalar, or trailing shapes differ.

    Example:
        ```python
        import jax.numpy as jnp
        from jarp.tree import tree_concat

        a = {"x": jnp.zeros((2, 3))}
        b = {"x": jnp.ones((5, 3))}
        assert tree_concat(a, b)["x"].shape == (7, 3)
        ```
    """
    names = trees_names("tree_concat", trees)

    def concat(path: jtu.KeyPath, *leaves: ArrayLike) -> Array:
        shapes = [np.shape(leaf) for leaf in leaves]
        for name, shape in zip(names, shapes, strict=True):
            if len(shape) == 0:
                raise ValueError(
                    f"tree_concat: the leaf at `{jtu.keystr(path)}` is a scalar in `{name}`, so it has no axis "
                    "to concatenate along. Use `tree_stack` to stack scalars along a new axis."
                )
            if shape[1:] != shapes[0][1:]:
                raise ValueError(
                    f"tree_concat: the leaf at `{jtu.keystr(path)}` has shape {shapes[0]} in `{names[0]}` but "
                    f"{shape} in `{name}`; all dimensions except the first must agree."
                )
        return jnp.concatenate(leaves, axis=0)

    return map_leaves("tree_concat", concat, names, trees)
