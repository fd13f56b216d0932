"""Kernels over every Warp element type: one generic copy kernel per array dim count, specialised per type.

Each kernel copies ``a`` into the pure output ``b`` everywhere and into the in-out ``c`` at the elements whose index
sum is even (the others keep ``c``'s incoming values), so one launch checks an input, a pure output and an in-out
argument of the type, and the in-out's unwritten half proves that it is read in place.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import warp as wp

# Every element type Warp exports (scalars, vectors, matrices, quaternions, transforms, spatial vectors and
# matrices, in every precision) and user-made ones, by name.
# Aliases (``wp.quat`` is ``wp.quatf``) appear once, under their first name.
EXPORTED: dict[str, Any] = {}
for _name, _obj in sorted(vars(wp).items()):
    if (
        isinstance(_obj, type)
        and _obj not in (int, float, bool)
        and (wp.types.type_is_scalar(_obj) or wp.types.type_is_composite(_obj) or _obj is wp.bool)
        and all(_obj is not t for t in EXPORTED.values())
    ):
        EXPORTED[_name] = _obj
USER_MADE: dict[str, Any] = {
    "vector(5, float16)": wp.types.vector(length=5, dtype=wp.float16),
    "vector(2, int8)": wp.types.vector(length=2, dtype=wp.int8),
    "matrix((2, 5), float32)": wp.types.matrix(shape=(2, 5), dtype=wp.float32),
    "matrix((3, 1), float64)": wp.types.matrix(shape=(3, 1), dtype=wp.float64),
}
ALL_TYPES: dict[str, Any] = {**EXPORTED, **USER_MADE}


def is_64_bit(dtype: Any) -> bool:
    """Whether ``dtype``'s scalars are 64-bit (JAX carries them only with ``jax_enable_x64``)."""
    return np.dtype(wp.dtype_to_numpy(getattr(dtype, "_wp_scalar_type_", dtype))).itemsize == 8


@wp.kernel
def copy1(a: wp.array(dtype=Any), c: wp.array(dtype=Any), b: wp.array(dtype=Any)):
    i = wp.tid()
    b[i] = a[i]
    if i % 2 == 0:
        c[i] = a[i]


@wp.kernel
def copy2(a: wp.array2d(dtype=Any), c: wp.array2d(dtype=Any), b: wp.array2d(dtype=Any)):
    i, j = wp.tid()
    b[i, j] = a[i, j]
    if (i + j) % 2 == 0:
        c[i, j] = a[i, j]


@wp.kernel
def copy3(a: wp.array3d(dtype=Any), c: wp.array3d(dtype=Any), b: wp.array3d(dtype=Any)):
    i, j, k = wp.tid()
    b[i, j, k] = a[i, j, k]
    if (i + j + k) % 2 == 0:
        c[i, j, k] = a[i, j, k]


@wp.kernel
def copy4(a: wp.array4d(dtype=Any), c: wp.array4d(dtype=Any), b: wp.array4d(dtype=Any)):
    i, j, k, m = wp.tid()
    b[i, j, k, m] = a[i, j, k, m]
    if (i + j + k + m) % 2 == 0:
        c[i, j, k, m] = a[i, j, k, m]


COPIES = {1: copy1, 2: copy2, 3: copy3, 4: copy4}


@wp.kernel
def fill(a: wp.array(dtype=Any), v: Any, b: wp.array(dtype=Any)):
    # ``v`` by value: a scalar, vector, matrix, quaternion, transform...
    i = wp.tid()
    b[i] = v


# Every overload is declared here, at import, so that Warp builds this module once (an overload declared after a
# build makes Warp build the whole module again). The module has no adjoints: copies are not differentiated here.
wp.set_module_options({"enable_backward": False})
OVERLOADS: dict[tuple[str, int], wp.Kernel] = {
    (name, ndim): wp.overload(kernel, [wp.array(dtype=dtype, ndim=ndim)] * 3)
    for name, dtype in ALL_TYPES.items()
    for ndim, kernel in COPIES.items()
}
FILLS: dict[str, wp.Kernel] = {
    name: wp.overload(fill, [wp.array(dtype=dtype), dtype, wp.array(dtype=dtype)]) for name, dtype in ALL_TYPES.items()
}


def copy_overload(dtype: Any, ndim: int) -> wp.Kernel:
    """The copy kernel of ``ndim`` array dims specialised for ``dtype``."""
    name = next(n for n, t in ALL_TYPES.items() if t is dtype)
    return OVERLOADS[name, ndim]
