from __future__ import annotations

from typing import Any, TypedDict, TypeVar

import equinox as eqx
import jax
import jax.numpy as jnp
import jax.tree_util as jtu
import numpy as np
from jax.lax import GatherScatterMode
from jaxtyping import Array, ArrayLike, Bool

from ._leaf_utils import map_leaves

_T = TypeVar("_T")


class ScatterArgs(TypedDict, total=False):
    """Keyword arguments forwarded to `x.at[idxs].set(...)` by [`jarp.tree.tree_scatter_set`][].

    All keys are optional; see `jax.numpy.ndarray.at` for their meaning.
    """

    indices_are_sorted: bool
    unique_indices: bool
    mode: str | GatherScatterMode | None
    wrap_negative_indices: bool


def tree_zeros_like(tree: _T) -> _T:
    """Replace every array leaf of a pytree by zeros of the same shape and dtype.

    Leaves that are not arrays (functions, strings, other objects an Equinox Module may hold) are
    returned unchanged, so this works on whole Modules, e.g. to build a zero gradient accumulator.
    `jax.ShapeDtypeStruct` leaves become zero arrays too, so the output of `jax.eval_shape` or
    `eqx.filter_eval_shape` can be turned into zero-filled buffers directly.

    Args:
        tree: Any pytree.

    Returns:
        A pytree with the structure of `tree`, where every array-like leaf (JAX or NumPy array, or
        Python scalar) is replaced by `jnp.zeros_like(leaf)`, and every `jax.ShapeDtypeStruct` by
        `jnp.zeros(leaf.shape, leaf.dtype)`.

    Example:
        ```python
        import jax.numpy as jnp
        from jarp.tree import tree_zeros_like

        zeros = tree_zeros_like({"w": jnp.ones((2, 2)), "name": "layer"})
        assert (zeros["w"] == 0).all() and zeros["name"] == "layer"
        ```
    """

    def zeros(x: Any) -> Any:  # a leaf of any kind
        if isinstance(x, jax.ShapeDtypeStruct):
            return jnp.zeros(x.shape, x.dtype)
        return jnp.zeros_like(x) if eqx.is_array_like(x) else x

    return jax.tree.map(zeros, tree)


def tree_where_broadcast_last(accept: Bool[ArrayLike, "*batch"], tree1: _T, tree2: _T) -> _T:
    """Select leafwise between two pytrees, broadcasting `accept` over each leaf's trailing axes.

    `accept` describes the leading (batch) axes that all leaves share; for a leaf of shape
    `(*batch, *rest)` it is reshaped to `(*batch, 1, ..., 1)` before `jnp.where`. A typical use is
    accepting or rejecting a Monte Carlo proposal per walker, where each walker's state has
    leaves of different trailing shapes.

    Args:
        accept: Boolean array whose shape is a prefix of every leaf's shape (up to broadcasting
            of size-1 axes). A scalar selects whole trees.
        tree1: Pytree whose leaves are taken where `accept` is `True`.
        tree2: Pytree with the same structure as `tree1`, taken where `accept` is `False`.

    Returns:
        A pytree with the structure of `tree1`, each leaf `jnp.where(accept[..., None, ...], leaf1, leaf2)`.

    Raises:
        ValueError: If the structures differ, or `accept` has more axes than a leaf, or its shape
            does not match a leaf's leading axes.

    Example:
        ```python
        import jax.numpy as jnp
        from jarp.tree import tree_where_broadcast_last

        old = {"pos": jnp.zeros((3, 2)), "energy": jnp.zeros(3)}
        new = {"pos": jnp.ones((3, 2)), "energy": jnp.ones(3)}
        accept = jnp.array([True, False, True])
        out = tree_where_broadcast_last(accept, new, old)
        assert out["pos"][:, 0].tolist() == [1.0, 0.0, 1.0]
        ```
    """
    accept = jnp.asarray(accept)
    batch = accept.shape

    def where(path: jtu.KeyPath, leaf1: ArrayLike, leaf2: ArrayLike) -> Array:
        for name, leaf in (("tree1", leaf1), ("tree2", leaf2)):
            shape = np.shape(leaf)
            if len(shape) < len(batch) or not all(
                a == b or a == 1 or b == 1 for a, b in zip(batch, shape[: len(batch)], strict=True)
            ):
                raise ValueError(
                    f"tree_where_broadcast_last: `accept` has shape {batch}, which is not a prefix of the shape "
                    f"{shape} of the leaf at `{jtu.keystr(path)}` in `{name}`. `accept` must describe the leading "
                    "axes shared by every leaf."
                )
        ndim = max(np.ndim(leaf1), np.ndim(leaf2))
        condition = jnp.reshape(accept, batch + (1,) * (ndim - len(batch)))
        return jnp.where(condition, leaf1, leaf2)

    return map_leaves("tree_where_broadcast_last", where, ["tree1", "tree2"], [tree1, tree2])


def tree_scatter_set(
    item: _T,
    value: _T,
    idxs: ArrayLike | slice | tuple[ArrayLike | slice, ...],
    args: ScatterArgs | None = None,
) -> _T:
    """Set `value` at `idxs` in every array leaf of `item`: `leaf.at[idxs].set(val, **args)`.

    Args:
        item: Pytree to update.
        value: Pytree of replacement values with the same structure as `item`; each leaf must
            broadcast to `leaf[idxs]`.
        idxs: Index expression applied to every leaf, usually an integer array selecting rows.
        args: Keyword arguments for `.at[idxs].set`, e.g. `{"mode": "drop"}` to ignore
            out-of-bounds indices (a common way to pad index arrays). `None` means no extra options.

    Returns:
        A pytree with the structure of `item` holding the updated leaves. Leaves that are not
        arrays are passed through and must be the same object in `item` and `value`.

    Raises:
        TypeError: If `args` holds a key that `.at[...].set` does not take.
        ValueError: If `item` and `value` have different structures.

    Example:
        ```python
        import jax.numpy as jnp
        from jarp.tree import tree_scatter_set

        state = {"x": jnp.zeros((4, 2)), "n": jnp.zeros(4, dtype=jnp.int32)}
        update = {"x": jnp.ones((2, 2)), "n": jnp.array([7, 8], dtype=jnp.int32)}
        idxs = jnp.array([1, 9])  # 9 is out of bounds and dropped
        new = tree_scatter_set(state, update, idxs, {"mode": "drop"})
        assert new["n"].tolist() == [0, 7, 0, 0]
        ```
    """
    kwargs: dict[str, Any] = dict(args or {})
    unknown = set(kwargs) - ScatterArgs.__optional_keys__
    if unknown:
        raise TypeError(
            f"tree_scatter_set: `args` has unknown key(s) {sorted(unknown)}; the accepted keys are "
            f"{sorted(ScatterArgs.__optional_keys__)} (see `jax.numpy.ndarray.at`)."
        )

    def scatter(path: object, leaf: object, val: object) -> Any:
        del path
        return jnp.asarray(leaf).at[idxs].set(val, **kwargs)

    return map_leaves("tree_scatter_set", scatter, ["item", "value"], [item, value])
