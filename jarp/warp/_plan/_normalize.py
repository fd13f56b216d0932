"""Normalising option values to hashable ones: dims, output dims, the vmap method, name tuples.

Shared by the modules' construction (their options), the binding of a call (per-call dims) and the launch
checks; every function names the option it checks in its message.
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ._arg_spec import ArgSpec

ShapeLike = int | Sequence[int]

# Warp stores array shapes and thread indices as 32-bit signed ints.
MAX_EXTENT = 2**31 - 1


def _dim(d: Any) -> int:
    if isinstance(d, bool):
        raise TypeError
    return operator.index(d)


def normalize_dims(value: ShapeLike, what: str, max_extent: int | None = MAX_EXTENT) -> tuple[int, ...]:
    """Turn an int or a sequence of ints into a tuple of ints in ``[0, max_extent]`` (no upper bound for None)."""
    try:
        if isinstance(value, (str, bytes, Mapping)) or (
            isinstance(value, Iterable) and not isinstance(value, Sequence)
        ):
            raise TypeError
        dims = tuple(_dim(d) for d in value) if isinstance(value, Iterable) else (_dim(value),)
    except TypeError:
        raise TypeError(f"{what} must be an int or a sequence (tuple, list) of ints, got {value!r}.") from None
    if any(d < 0 for d in dims):
        raise ValueError(f"{what} must be non-negative, got {dims}.")
    if max_extent is not None and any(d > max_extent for d in dims):
        raise ValueError(f"{what} has an extent above Warp's limit of 2**31 - 1: {dims}.")
    return dims


def normalize_output_dims(value: Any, what: str) -> Any:
    """Normalise ``output_dims`` into a hashable value: None, a tuple of ints, or a sorted tuple of pairs."""
    if value is None:
        return None
    if (
        isinstance(value, tuple)
        and value
        and all(isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], str) for v in value)
    ):
        value = dict(value)  # already normalised
    if isinstance(value, Mapping):
        bad = [k for k in value if not isinstance(k, str)]
        if bad:
            raise TypeError(f"{what} keys must be output names (str), got {bad!r}.")
        return tuple(sorted((k, normalize_dims(v, f"{what}[{k!r}]")) for k, v in value.items()))
    return normalize_dims(value, what)


def output_dims_for(spec: ArgSpec, dims: tuple[int, ...], what: str) -> tuple[int, ...]:
    """Accept Warp (without inner dims) or JAX (with them) convention; return Warp dims."""
    if len(dims) == spec.warp_ndim:
        return dims
    n_inner = len(spec.inner_shape)
    if n_inner and len(dims) == spec.jax_ndim and dims[spec.warp_ndim :] == spec.inner_shape:
        return dims[: spec.warp_ndim]
    expect = f"{spec.warp_ndim} dims"
    if n_inner:
        expect += f" (or {spec.jax_ndim} ending in {spec.inner_shape})"
    raise ValueError(f"{what} for output {spec.name!r} ({spec.phrase()}) must have {expect}, got {dims}.")


FOLD_METHODS = ("broadcast_all", "expand_dims")
# None: no batching rule, as in Warp's bridge (a library that batches the call itself, e.g. with
# jax.custom_batching.custom_vmap); vmap over such a call is a named error.
VMAP_METHODS = ("sequential", *FOLD_METHODS, None)


def check_vmap_method(value: object, what: str) -> str | None:
    if value not in VMAP_METHODS:
        raise ValueError(
            f"{what}: unknown vmap_method {value!r}; use 'sequential' (default, correct for any kernel), "
            "'broadcast_all' (fold the batch into the launch; only for elementwise kernels) or None (no batching "
            "rule: the caller batches the call itself, as with Warp's bridge)."
        )
    return value


def tuple_of_str(value: Iterable[str] | None) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    return tuple(value)
