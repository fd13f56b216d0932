"""A user ``add`` for floats, which Warp calls for every ``+`` on floats in this module's kernels, for
``tests/warp/plan/test_races.py``: an operator overload on values writes no memory, so it vetoes no verdict.
"""

import warp as wp


@wp.func
def add(a: float, b: float):
    # what Warp calls for ``a + b`` on floats here: a value function
    return wp.max(a, b)


@wp.kernel
def elementwise_through_add(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    # race-free, and ``out`` overwritten on every thread
    i = wp.tid()
    out[i] = x[i] + 1.0
