"""Warp structs and kernels for ``tests/warp/modules/test_struct_spellings.py`` (one Warp module).

A spring energy over a struct of springs, ``E = sum_e k[e] * (|x[j] - x[i]| - rest)**2`` for ``(i, j) = ends[e]``, in
three versions: a plain kernel over a plain struct for each of float32 (``Springs32``) and float64 (``Springs64``), and
a generic kernel (``Any``-typed parameters) over the generic struct ``Springs`` (``jarp.warp.struct``), resolved by
``springs_arg_types``. The struct's first field is an integer array, so the generic target's dtype has to come from a
later field (``k``, the first floating-point array).
"""

from __future__ import annotations

from typing import Any

import warp as wp

import jarp


@wp.struct
class Springs32:
    ends: wp.array(dtype=wp.vec2i)
    k: wp.array(dtype=wp.float32)
    rest: wp.float32


@wp.struct
class Springs64:
    ends: wp.array(dtype=wp.vec2i)
    k: wp.array(dtype=wp.float64)
    rest: wp.float64


@wp.kernel
def springs32_energy(x: wp.array(dtype=wp.vec2f), springs: Springs32, energy: wp.array(dtype=wp.float32)):
    e = wp.tid()
    ends = springs.ends[e]
    d = wp.length(x[ends[1]] - x[ends[0]]) - springs.rest
    wp.atomic_add(energy, 0, springs.k[e] * d * d)


@wp.kernel
def springs64_energy(x: wp.array(dtype=wp.vec2d), springs: Springs64, energy: wp.array(dtype=wp.float64)):
    e = wp.tid()
    ends = springs.ends[e]
    d = wp.length(x[ends[1]] - x[ends[0]]) - springs.rest
    wp.atomic_add(energy, 0, springs.k[e] * d * d)


@jarp.warp.struct
class Springs:
    """Generic over the float type: the springs' ends, stiffnesses and common rest length."""

    @staticmethod
    def __annotations_factory__(dtype: Any) -> dict[str, Any]:
        return {"ends": wp.array(dtype=wp.vec2i), "k": wp.array(dtype=dtype), "rest": dtype}


@wp.kernel
def springs_energy(x: wp.array(dtype=Any), springs: Any, energy: wp.array(dtype=Any)):
    e = wp.tid()
    ends = springs.ends[e]
    d = wp.length(x[ends[1]] - x[ends[0]]) - springs.rest
    wp.atomic_add(energy, 0, springs.k[e] * d * d)


def springs_arg_types(x_dtype: Any, springs_dtype: Any) -> list[Any]:
    """``arg_types_factory`` of ``springs_energy``: one scalar dtype per input (``x``, ``springs``)."""
    return [wp.array(dtype=wp.types.vector(2, x_dtype)), Springs[springs_dtype], wp.array(dtype=x_dtype)]


# Every overload the suite resolves, declared at import (a later overload would rebuild this Warp module).
for _dtype in (wp.float32, wp.float64):
    wp.overload(springs_energy, springs_arg_types(_dtype, _dtype))
