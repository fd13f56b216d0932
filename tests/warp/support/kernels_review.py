"""Kernels and functions for the review tests (no `from __future__ import annotations`: annotations are objects)."""

import warp as wp

from .kernels import scale_kernel


def callable_of(dtype):
    """A `jax_callable` function whose parameter dtype comes from a factory local used only in annotations."""

    def f(x: wp.array(dtype=dtype), y: wp.array(dtype=dtype)):
        wp.launch(scale_kernel, dim=x.shape, inputs=[x, 2.0], outputs=[y])

    return f


@wp.kernel
def alias_guarded_copy(x: wp.array(dtype=wp.float32), n: int, y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    inside = i < n  # the guard, through a local
    if inside:
        y[i] = x[i]
