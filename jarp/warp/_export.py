"""Exporting programs with jarp calls: `export_checks`, the one line ``jax.export`` needs.

A jarp call lowers to a custom call of jarp's own FFI target, which names its plan by content (see
`jarp.warp._plan._content`), so an exported program means the same in the process that loads it. JAX
only exports custom calls on its own list of stable targets unless the caller disables that check for a
target; jarp's promise in return is its call ABI: a program records the version it was lowered with,
and a jarp that speaks another version refuses it with an error saying which versions met.
"""

from __future__ import annotations

import jax

from ._ffi import _target


def export_checks() -> list[jax.export.DisabledSafetyCheck]:
    """The safety checks ``jax.export.export`` must skip to export functions with jarp calls.

    Returns:
        One ``jax.export.DisabledSafetyCheck.custom_call`` for each of jarp's FFI targets.

    Example:
        ```python
        exported = jax.export.export(jax.jit(f), disabled_checks=jarp.warp.export_checks())(x)
        blob = exported.serialize()
        # in another process, after importing the module that defines the kernels:
        y = jax.export.deserialize(blob).call(x)
        ```
    """
    return [jax.export.DisabledSafetyCheck.custom_call(t) for t in (_target.TARGET, _target.TARGET_NO_GRAPH)]
