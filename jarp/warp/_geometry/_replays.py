"""The taped run of a callable's reverse pass, for functions that build Warp structures themselves.

A ``jax_callable``'s function may build a ``wp.Mesh`` from its input arrays. Its reverse pass runs the function
under a ``wp.Tape`` and plays the tape back after the function returned, but a structure the function built is one
of its locals, freed when it returns, and the tape's launches take it by id: the playback would read a freed id.
`taped_run` keeps every Warp structure the function's frames held until the playback (a profile function on this
thread, for the taped run only), and refuses the gradients Warp's adjoint of a query would drop for a structure
built from a differentiated input (`_adjoints`): a function's kernels are seen only when they run.

The FFI stage reaches this through its hook (`_ffi._callable_executor.set_taped_run`, installed by the package's
``__init__``); a call given jarp's structures brings its own (`_calls.Launcher.jarp_taped_run`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import warp as wp

from .._ffi import _errors
from .._upstream import _warp_kernels, _warp_types
from ._adjoints import dropped


def taped_run(func: Callable[..., Any], args: list[Any], tape: wp.Tape, name: str) -> object:
    """Run ``func(*args)`` under ``tape``, keeping the structures its frames held; returns them.

    Raises:
        ValueError: a structure was built from a differentiated input and a taped kernel drops its gradient.
    """
    kept = _StructuresKept()
    previous = sys.getprofile()
    sys.setprofile(kept)
    try:
        with tape:
            func(*args)
    finally:
        sys.setprofile(previous)
    _refuse_dropped_gradients(tape, kept.objects, name)
    return kept.objects


def _refuse_dropped_gradients(tape: wp.Tape, structures: list[Any], plan_name: str) -> None:
    """Raise where the function built a mesh from a differentiated input and a taped kernel drops a mesh's gradient.

    A mesh built from an array with a gradient buffer (an input JAX differentiates) would get a silent zero from
    Warp's adjoint of such a builtin (`_adjoints`). Which mesh a kernel queries is not always visible (an id in a
    struct or an array), so any such kernel counts.
    """
    differentiated = {
        f
        for s in structures
        for f in ("points", "velocities")
        if getattr(getattr(s, f, None), "grad", None) is not None
    }
    if not differentiated:
        return
    for kernel, _ in _warp_kernels.tape_launches(tape):
        drops = [d for d in dropped(kernel) if d.field in differentiated]
        if drops:
            field = drops[0].field
            builtins = ", ".join(dict.fromkeys(d.builtin for d in drops if d.field == field))
            raise ValueError(
                f"{plan_name}: the function built a wp.Mesh from a differentiated input, and kernel {kernel.key!r} "
                f"reads a mesh's {field} through {builtins}, whose adjoint in Warp drops the gradient with respect "
                "to them (it would be a silent zero); read the vertices as arrays instead (m = wp.mesh_get(id); "
                "m.points[m.indices[3 * face + k]]), or stop the input's gradient (jax.lax.stop_gradient) if the "
                "dependence is to be ignored."
            )


class _StructuresKept:
    """A profile function (``sys.setprofile``, this thread only) keeping the Warp structures of returning frames."""

    def __init__(self) -> None:
        self.objects: list[Any] = []

    def __call__(self, frame: Any, event: str, arg: Any) -> None:
        if event != "return":
            return
        for value in (*frame.f_locals.values(), arg):
            if _warp_types.is_structure(value):
                self.objects.append(value)


_errors.own_frames(__file__)
