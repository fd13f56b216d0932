"""Warp structures inside the call: built or refitted from the call's buffers, alive as long as a program may use them.

`obtain` runs inside a jarp call (the Python path of its executor, `_ffi._executors.current_call`), on the call's
device and stream. The structures live in the executor's store, per (parameter, batch slice, stream) and up to
`CAPACITY` there, the least recently used dropped first: a plan
keeps its structures exactly as long as a compiled program can launch it, each batch element of a ``vmap`` has its
own, and the taped replay of reverse mode (an executor of its own) builds its own from the same buffers, so no
launch, forward or backward, ever reads a structure that is gone. No user code sees a raw id.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from .._ffi import _executors, _native
from ._structures import Recipe

# How many structures the Python path built and refitted (for tests and benchmarks: a refit skipped when the points
# moved, or a build where a refit would do, shows here); `totals` adds the native handler's.
counts = {"build": 0, "update": 0}


def totals() -> dict[str, int]:
    """The structures built and refitted so far on both launch paths: ``{"build": n, "update": m}``.

    The Python path counts in `counts`; the native handler (which builds and refits a mesh's or BVH's structure in
    the calls it serves, `_ffi._structure_launches`) counts its own.
    """
    native = _native.active()
    built, refitted = native.structure_stats() if native is not None else (0, 0)
    return {"build": counts["build"] + built, "update": counts["update"] + refitted}


# Structures kept per (parameter, batch slice, stream): a program calling the same module twice with meshes of two
# shapes or topologies (one plan, so one store) refits each of them rather than rebuilding both on every call.
CAPACITY = 4


def obtain(recipe: Recipe, slot: int, arrays: dict[str, wp.array]) -> Any:
    """The Warp structure of ``recipe`` for this call's ``arrays``: refitted where it can be, built where not.

    Args:
        recipe: what to build (`AbstractStructure.recipe`).
        slot: which structure of the call (the parameter's position).
        arrays: the Warp arrays wrapping this call's buffers, by field name.

    Returns:
        An object with an ``id`` (the one to launch with) that stays alive in the call's store.
    """
    site = _executors.current_call()
    if site is None:
        raise RuntimeError(
            f"jarp.warp.{recipe.kind.__name__} builds its Warp structure inside a jarp call only; pass the pytree to "
            "a jarp.warp.jax_kernel or jax_callable module."
        )
    device = next(iter(arrays.values())).device
    assert device is not None  # the arrays wrap the call's buffers, on the call's device
    kept: list[tuple[Recipe, Any]] = site.store.setdefault(("jarp.warp.geometry", slot, site.slice, site.stream), [])
    for k, (made, built) in enumerate(kept):
        if made == recipe and recipe.kind.update(recipe, built, arrays):
            counts["update"] += 1
            kept.append(kept.pop(k))  # most recently used last
            return built
    if len(kept) >= (CAPACITY if recipe.kind.reusable else 1):
        if not device.is_cpu:
            # The oldest structure may still be read by launches queued on the stream: let them finish first (a
            # build follows a change of shape, topology or options, which is rare; a refit never gets here).
            wp.synchronize_stream(wp.get_stream(device))
        kept.pop(0)
    built = recipe.kind.build(recipe, arrays, device)
    kept.append((recipe, built))
    counts["build"] += 1
    return built
