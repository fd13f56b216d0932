from __future__ import annotations

import operator
from typing import Any, TypeVar

import jax
import jax.core  # `import jax` loads it, but only this import declares it to type checkers
import jax.numpy as jnp
from jaxtyping import Array, ArrayLike, Bool, Int

from ._leaf_utils import flat_map_leaves
from ._leafwise import tree_zeros_like

_T = TypeVar("_T")


def kahan_summation(*summands: _T, compensate: _T | None = None) -> tuple[_T, _T]:
    """Add pytrees leafwise with Kahan's compensated summation.

    Adding many small increments to a large running total (energies along a trajectory, time in
    a long integration) loses the low-order bits of every increment in floating point. Kahan
    summation carries those lost bits in a separate compensation term and feeds them back in, so
    the error stays at a few units in the last place instead of growing with the number of
    additions. Pass the returned compensation back in on the next call to keep a running total.

    Args:
        *summands: One or more pytrees with the same structure, added left to right. The first is
            the running total.
        compensate: The compensation returned by a previous call (same structure), or `None` to
            start from zero.

    Returns:
        `(total, compensation)`: the compensated sum, and the term to pass as `compensate` next
        time. `compensation` holds the negated error still outstanding, so `total - compensation`
        is an even closer estimate.

    Raises:
        TypeError: If no summand is given.
        ValueError: If the summands (and `compensate`) have different structures.

    Reference:
        W. Kahan, "Further remarks on reducing truncation errors", Communications of the ACM 8(1),
        1965.

    Example:
        ```python
        import jax
        import jax.numpy as jnp
        from jarp.tree import kahan_summation


        def step(carry, increment):
            total, compensation = kahan_summation(carry[0], increment, compensate=carry[1])
            return (total, compensation), None


        increments = jnp.full(100_000, 0.1, dtype=jnp.float32)
        start = (jnp.float32(1e4), jnp.float32(0.0))
        (total, _), _ = jax.lax.scan(step, start, increments)
        assert abs(float(total) - 20_000.0) < 1e-2  # naive float32 summation is off by ~30
        ```
    """
    if len(summands) == 0:
        raise TypeError("kahan_summation: expected at least one summand, got none.")
    names = [f"summands[{i}]" for i in range(len(summands))]
    if compensate is None:
        compensate = tree_zeros_like(summands[0])

    def add(path: Any, *leaves: Any) -> tuple[Any, Any]:
        del path
        *xs, compensation = leaves
        total = xs[0]
        for x in xs[1:]:
            corrected = x - compensation
            new_total = total + corrected
            # Algebraically zero; in floating point it is the (negated) part of `corrected` that
            # did not make it into `new_total`.
            compensation = (new_total - total) - corrected
            total = new_total
        return jnp.asarray(total), jnp.asarray(compensation)

    treedef, pairs = flat_map_leaves(
        "kahan_summation", add, [*names, "compensate"], [*summands, compensate], passthrough=lambda x: (x, x)
    )
    totals, compensations = zip(*pairs, strict=True) if pairs else ((), ())
    return treedef.unflatten(totals), treedef.unflatten(compensations)


def isin(a: Int[ArrayLike, "*shape"], b: Int[ArrayLike, "*items"], max_item: int) -> Bool[Array, "*shape"]:
    """Test which elements of integer array `a` occur in integer array `b`, by table lookup.

    A faster alternative to `jnp.isin` when values are known to lie in `range(max_item)`: it
    scatters `b` into a boolean table of size `max_item` and gathers `a` from it, costing
    `O(len(a) + len(b) + max_item)` instead of `O(len(a) * len(b))`.

    Values outside `[0, max_item)` never match: in `a` they give `False`, in `b` they are ignored.
    This makes negative or `max_item`-valued sentinels convenient for padding fixed-size arrays.

    Args:
        a: Integer array of query values, of any shape.
        b: Integer array of reference values, of any shape.
        max_item: Exclusive upper bound of the values of interest; a static Python `int`, since it
            sets the size of the lookup table.

    Returns:
        Boolean array of the shape of `a`, `True` where the element of `a` occurs in `b`.

    Raises:
        TypeError: If `a` or `b` is not of integer dtype, or `max_item` is not a concrete integer.
        ValueError: If `max_item` is negative.

    Example:
        ```python
        import jax.numpy as jnp
        from jarp.tree import isin

        neighbours = jnp.array([2, 5, -1, -1])  # padded with -1
        atoms = jnp.array([0, 1, 2, 3, 4, 5])
        assert isin(atoms, neighbours, max_item=6).tolist() == [False, False, True, False, False, True]
        ```
    """
    a = jnp.asarray(a)
    b = jnp.asarray(b)
    for name, x in (("a", a), ("b", b)):
        if not jnp.issubdtype(x.dtype, jnp.integer):
            raise TypeError(
                f"isin: `{name}` must be an integer array, got dtype {x.dtype}. Use `jnp.isin` for other "
                "dtypes, or convert indices with `.astype(jnp.int32)`."
            )
    try:
        size = operator.index(max_item)
    except TypeError:
        if isinstance(max_item, jax.core.Tracer):
            reason = "a traced value; it sets the size of the lookup table, so it must be known at trace time"
        else:
            reason = f"of type {type(max_item).__name__}"
        raise TypeError(
            f"isin: `max_item` must be a concrete Python int, but got {reason}. Pass a Python int, "
            "e.g. as a static argument of `jax.jit`."
        ) from None
    if size < 0:
        raise ValueError(f"isin: `max_item` must be non-negative, got {size}.")
    if size == 0:
        return jnp.zeros(a.shape, dtype=bool)
    table = jnp.zeros(size, dtype=bool).at[b.ravel()].set(True, mode="drop", wrap_negative_indices=False)
    return table.at[a].get(mode="fill", fill_value=False, wrap_negative_indices=False)
