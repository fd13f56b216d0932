"""Kernels and functions for corner cases of several stages.

No `from __future__ import annotations` here: the annotations are objects.

* `callable_of`: a ``jax_callable`` function whose dtype is a factory local used only in annotations
  (``tests/warp/modules/test_rebuilds.py``: rebuilt equal, compared by value).
* `alias_guarded_copy`: a store guarded through a local (``tests/warp/plan/test_launch_checks.py``: not refused).
* `half_square`: a ``wp.func`` (``tests/warp/plan/test_static_keys.py``: a key that must stay alive).
* `two_structs` (`Springs`, `Damping`): two structs with int and bool fields, scalars between them, a field read
  through a ``wp.func`` argument; `clash` (`Clash`): a field named like the flattened name of a nested field
  (``tests/warp/modules/test_struct_runtime.py``).
"""

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


@wp.struct
class Springs:
    k: wp.float32
    rest: wp.float32
    n: wp.int32
    on: wp.bool


@wp.struct
class Damping:
    c: wp.float32
    v: wp.vec2f


@wp.func
def half_square(k: wp.float32, d: wp.float32):
    return 0.5 * k * d * d


@wp.kernel
def two_structs(
    x: wp.array(dtype=wp.float32),
    s: Springs,
    scale: wp.float32,
    dmp: Damping,
    shift: wp.float32,
    out: wp.array(dtype=wp.float32),
):
    i = wp.tid()
    d = x[i] - s.rest + shift
    e = half_square(s.k, d) * scale + dmp.c * x[i] + dmp.v[1] * wp.float32(s.n)
    if s.on:
        e = e + 1000.0
    out[i] = e


@wp.struct
class Inner:
    b: wp.float32


@wp.struct
class Clash:
    a__b: wp.float32  # its variant parameter would be named like that of `a.b`
    a: Inner


@wp.kernel
def clash(x: wp.array(dtype=wp.float32), s: Clash, out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = x[i] * s.a__b + s.a.b
