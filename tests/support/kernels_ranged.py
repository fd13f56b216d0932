"""Warp kernels for ``tests/warp/ffi/test_ranged_entry.py`` (jarp's ranged CPU entry points; not collected by pytest).

All but ``tiled`` share one Warp module (so one companion object serves them):

* ``scale_sin``: 1-D, float32, ``b[i] = a[i] * s + sin(a[i])`` (a product feeding a sum: a contraction candidate);
  with contiguous arrays Warp takes its ``wp_linear_contiguous`` specialisation, with strided ones the general one.
* ``poly64``: 1-D, float64.
* ``grid2d``: a 2-D launch (``i, j = wp.tid()``).
* ``with_struct``: a struct parameter holding a value, a vector and an array.
* ``generic_axpy``: a ``typing.Any`` kernel with float32 and float64 overloads.

``tiled`` uses tiles, in a module of its own: its kernels get no ranged entry.
"""

from __future__ import annotations

from typing import Any

import warp as wp


@wp.kernel
def scale_sin(a: wp.array(dtype=wp.float32), b: wp.array(dtype=wp.float32), s: wp.float32):
    i = wp.tid()
    b[i] = a[i] * s + wp.sin(a[i])


@wp.kernel
def poly64(a: wp.array(dtype=wp.float64), b: wp.array(dtype=wp.float64)):
    i = wp.tid()
    x = a[i]
    b[i] = x * x * wp.float64(0.3) + wp.sqrt(wp.abs(x)) / wp.float64(7.0) - wp.exp(x * wp.float64(0.01))


@wp.kernel
def grid2d(a: wp.array2d(dtype=wp.float32), b: wp.array2d(dtype=wp.float32)):
    i, j = wp.tid()
    b[i, j] = a[i, j] * float(i) + float(j) * 0.25 + wp.cos(a[i, j])


@wp.struct
class Params:
    scale: wp.float32
    offset: wp.vec3
    data: wp.array(dtype=wp.float32)


@wp.kernel
def with_struct(p: Params, out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    out[i] = p.offset * p.data[i] + wp.vec3(p.scale, p.scale * p.data[i], 1.0)


@wp.kernel
def generic_axpy(x: wp.array(dtype=Any), y: wp.array(dtype=Any), alpha: Any):
    i = wp.tid()
    y[i] = alpha * x[i] + y[i] * y[i]


axpy32 = wp.overload(generic_axpy, {"x": wp.array(dtype=wp.float32), "y": wp.array(dtype=wp.float32), "alpha": float})
axpy64 = wp.overload(
    generic_axpy, {"x": wp.array(dtype=wp.float64), "y": wp.array(dtype=wp.float64), "alpha": wp.float64}
)


@wp.kernel(module="unique")
def tiled(a: wp.array(dtype=wp.float32), b: wp.array(dtype=wp.float32)):
    i = wp.tid()
    t = wp.tile_load(a, shape=4, offset=i * 4)
    wp.tile_store(b, t * 2.0, offset=i * 4)
