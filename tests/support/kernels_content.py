"""Kernels and functions for ``tests/warp/plan/test_content.py`` (plans' content text; not collected by pytest).

* ``flags_kernel``: bool and int scalar parameters next to a float one (static values of each kind).
* ``row_sum_tile``: a tile kernel in a Warp module of its own (``module="unique"``: the module's name is a hash).
* ``make_offset_kernel``: a factory of closure kernels; each call registers a kernel under the same key, so only the
  latest one can be found by name.
* ``scale_twice``: a module-level ``jax_callable`` function; ``scale_lambda``: the same as a lambda (annotated after
  the fact), which another process cannot find by name.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from . import kernels as k

TILE = 8


@wp.kernel
def flags_kernel(
    a: wp.array(dtype=float), s: float, n: wp.int32, big: wp.uint64, flip: wp.bool, out: wp.array(dtype=float)
):
    i = wp.tid()
    v = a[i] * s + float(n) + float(big % wp.uint64(7))
    if flip:
        v = -v
    out[i] = v


@wp.kernel(module="unique")
def row_sum_tile(a: wp.array2d(dtype=float), out: wp.array(dtype=float)):
    i, _ = wp.tid()
    t = wp.tile_load(a[i], shape=TILE)
    wp.tile_store(out, wp.tile_sum(t), offset=i)


def make_offset_kernel(c: float) -> Any:
    """A kernel adding the constant ``c``; every call defines it again under the same key."""
    offset = wp.constant(c)

    @wp.kernel
    def offset_kernel(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = a[i] + offset

    return offset_kernel


def scale_twice(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    wp.launch(k.scale_kernel, dim=a.shape, inputs=[a, 2.0 * s], outputs=[out])


scale_lambda = lambda a, s, out: wp.launch(k.scale_kernel, dim=a.shape, inputs=[a, s], outputs=[out])  # noqa: E731
scale_lambda.__annotations__ = {"a": wp.array(dtype=float), "s": float, "out": wp.array(dtype=float)}
