"""A module of ``@wp.func`` helpers reached by a dotted name (``helpers.bump(x, i)``) from `kernels_writes`."""

import warp as wp


@wp.func
def bump(a: wp.array(dtype=float), i: int):
    a[i] = a[i] + 100.0
