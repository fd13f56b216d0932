"""Warp kernels and functions for ``tests/warp/plan/test_static_keys.py`` (one Warp module, built once per process)."""

import warp as wp


@wp.kernel
def divide_kernel(x: wp.array(dtype=wp.float32), s: wp.float32, out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = x[i] / s


@wp.kernel
def write_f32_kernel(x: wp.array(dtype=wp.float32), s: wp.float32, out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = s


@wp.kernel
def write_f16_kernel(x: wp.array(dtype=wp.float16), s: wp.float16, out: wp.array(dtype=wp.float16)):
    i = wp.tid()
    out[i] = s


@wp.kernel
def mixed_kernel(
    x: wp.array(dtype=wp.float32), n: wp.int32, f: wp.float32, b: wp.bool, out: wp.array(dtype=wp.float32)
):
    i = wp.tid()
    out[i] = x[i] + wp.float32(n) + f + wp.where(b, 100.0, 0.0)


@wp.struct
class Divisors:
    scale: wp.float32
    v: wp.vec2


@wp.kernel
def struct_divide_kernel(
    x: wp.array(dtype=wp.float32),
    p: Divisors,
    by_scale: wp.array(dtype=wp.float32),
    by_v: wp.array(dtype=wp.float32),
):
    i = wp.tid()
    by_scale[i] = x[i] / p.scale
    by_v[i] = x[i] / p.v[1]


SEEN: list = []
"""What `record_statics` received, one ``(n, f, b)`` per call (the tests clear it)."""


def record_statics(
    x: wp.array(dtype=wp.float32), n: wp.int32, f: wp.float32, b: wp.bool, out: wp.array(dtype=wp.float32)
):
    """A ``jax_callable`` body that records the static values it receives, then runs `mixed_kernel`."""
    SEEN.append((n, f, b))
    wp.launch(mixed_kernel, dim=x.shape, inputs=[x, n, f, b], outputs=[out], device=x.device)
