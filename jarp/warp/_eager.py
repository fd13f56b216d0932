"""Eager dispatch: an un-traced module call runs through one cached executable per module and signature.

Part of the module layer: `AbstractWarpModule.__call__` hands an eager call here,
and the cached executable traces the module's own pipeline (`_trace`) once.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
import warp as wp

from . import _errors
from ._static_keys import Static


def _thaw(value: Any) -> Any:
    """Undo `_freeze`'s wrapping of numbers (the frozen form is only for the cache key)."""
    if isinstance(value, Static):
        return value.value
    if isinstance(value, tuple):
        return tuple(_thaw(v) for v in value)
    return value


def _eager_impl(
    module: Any, treedef: Any, statics: tuple[tuple[int, Any], ...], options: tuple[Any, ...], *arrays: Any
) -> Any:
    leaves: list[Any] = list(arrays)
    for i, value in statics:
        leaves.insert(i, _thaw(value))
    args = jax.tree_util.tree_unflatten(treedef, leaves)
    return module._trace(tuple(args), {k: _thaw(v) for k, v in options if not k.startswith("wp.config.")})


_eager_jit = jax.jit(_eager_impl, static_argnums=(0, 1, 2, 3))


def try_eager(module: Any, args: Sequence[Any], options: dict[str, Any]) -> tuple[jax.Array, ...] | None:
    """Run an eager (un-traced) call through one cached executable per module and signature.

    Returns None when the call is not eligible (a tracer or a non-JAX array among
    the arguments, or an unhashable option), in which case the caller traces it
    directly. NumPy arrays take the direct path so that their dtype is checked
    before ``jax.jit`` would silently convert it.
    """
    # Struct arguments (dicts, NamedTuples, eqx.Modules of arrays) are pytrees: their arrays are
    # the executable's arguments, their structure and static values part of its key.
    leaves, treedef = jax.tree_util.tree_flatten(tuple(args))
    arrays, statics = [], []
    for i, a in enumerate(leaves):
        if isinstance(a, (jax.core.Tracer, np.ndarray)):
            return None
        if isinstance(a, jax.Array):
            arrays.append(a)
        else:
            # keyed by identity of meaning (`Static`): 0 == 0.0 == 0j == False would otherwise share a cache
            # entry and skip validation, -0.0 would reuse 0.0's executable, and a NaN would never find its own
            statics.append((i, a))
    try:
        statics = [(i, _freeze(a)) for i, a in statics]
        key = tuple(sorted((k, _freeze(v)) for k, v in options.items() if v is not None))
        # Warp settings read at trace time that pick another build of the kernel.
        key += (("wp.config.enable_cpu_blocks", bool(wp.config.enable_cpu_blocks)),)
        hash((treedef, tuple(statics), key))
    except TypeError:
        return None
    try:
        return _eager_jit(module, treedef, tuple(statics), key, *arrays)
    except Exception as e:  # JaxRuntimeError, or ValueError from jaxlib's C++ fast path
        # An exception raised inside the call (a callable's function, an executor): raise it as it was.
        original = _errors.original(e)
        if original is None:
            raise
    raise original


_errors.reraising_codes.add(try_eager.__code__)


def _freeze(value: Any) -> Any:
    """A hashable, plain-Python form of an argument or option value, numbers keyed by `Static`.

    NumPy scalars become Python numbers; a number compares by type and bits (every NaN alike).
    """
    if isinstance(value, dict):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, int, float, complex)):
        return Static(value)
    if isinstance(value, (np.ndarray, jax.Array)):
        raise TypeError("array option")  # not eligible for the eager cache key; traced directly instead
    return value
