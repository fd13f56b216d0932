"""Kernels shared by the benchmark scripts (one Warp module, compiled once)."""

import warp as wp


@wp.kernel
def axpy(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    y[i] = 1.0001 * x[i] + 0.5


@wp.kernel
def square(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    y[i] = x[i] * x[i]
