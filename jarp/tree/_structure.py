from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.tree_util as jtu


def tree_structure(x: object, is_leaf: Callable[[Any], bool] | None = None) -> jtu.PyTreeDef:  # pyright: ignore[reportInvalidTypeForm]  # jaxlib ships no stubs: its types are unknown
    """Return the pytree structure (treedef) of `x`.

    Equivalent to `jax.tree.structure`; kept so code written against kups' name keeps working.
    Compare structures with `==`, and rebuild trees with `treedef.unflatten(leaves)`.

    Args:
        x: Any pytree.
        is_leaf: Optional predicate; subtrees for which it returns `True` are treated as leaves.

    Returns:
        The `jax.tree_util.PyTreeDef` of `x`.

    Example:
        ```python
        import jax.numpy as jnp
        from jarp.tree import tree_structure

        treedef = tree_structure({"a": jnp.zeros(2), "b": (1.0, 2.0)})
        assert treedef.num_leaves == 3
        assert treedef.unflatten([0, 1, 2]) == {"a": 0, "b": (1, 2)}
        ```
    """
    return jax.tree.structure(x, is_leaf=is_leaf)
