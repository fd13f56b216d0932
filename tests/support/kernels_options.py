"""Kernels in a module with options of its own, and a kernel with kernel options (runtime-scalar variants keep them)."""

import warp as wp

wp.set_module_options({"fast_math": True, "max_unroll": 3})


@wp.kernel(enable_backward=False)
def scale(x: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] * s
