"""Warp code for ``tests/warp/ffi/test_buffer_sizes.py`` (one Warp module; not collected by pytest).

* ``narrow``: float arrays everywhere (an input ``a``, a struct ``s`` of type ``Floats`` with a float array field
  ``x``, an in-out ``b``, a pure output ``out``); the test traces it, so its plan's buffers hold floats.
* ``wide_a``, ``wide_s``, ``wide_b``, ``wide_out``: the same parameters, one of them with vec3 elements (12 bytes
  instead of 4). Planted as a ``narrow`` plan's kernel, each would make Warp read or write three times past the
  float buffer XLA allocated for that parameter.
* ``vectors``: a kernel with vec3 arrays of every kind (input, struct field, in-out, output), run for real.
* ``copy`` / ``copy_func``: a function for ``jax_callable`` launching a float copy.
"""

from __future__ import annotations

import warp as wp


@wp.struct
class Floats:
    x: wp.array(dtype=wp.float32)
    k: wp.float32


@wp.struct
class Vectors:
    x: wp.array(dtype=wp.vec3)
    k: wp.float32


@wp.kernel
def narrow(
    a: wp.array(dtype=wp.float32), s: Floats, b: wp.array(dtype=wp.float32), out: wp.array(dtype=wp.float32)
) -> None:
    i = wp.tid()
    b[i] = b[i] + a[i] * s.k + s.x[i]
    out[i] = a[i]


@wp.kernel
def wide_a(
    a: wp.array(dtype=wp.vec3), s: Floats, b: wp.array(dtype=wp.float32), out: wp.array(dtype=wp.float32)
) -> None:
    i = wp.tid()
    b[i] = b[i] + a[i][2] * s.k + s.x[i]
    out[i] = a[i][0]


@wp.kernel
def wide_s(
    a: wp.array(dtype=wp.float32), s: Vectors, b: wp.array(dtype=wp.float32), out: wp.array(dtype=wp.float32)
) -> None:
    i = wp.tid()
    b[i] = b[i] + a[i] * s.k + s.x[i][2]
    out[i] = a[i]


@wp.kernel
def wide_b(
    a: wp.array(dtype=wp.float32), s: Floats, b: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.float32)
) -> None:
    i = wp.tid()
    b[i] = b[i] + wp.vec3(a[i] * s.k + s.x[i])
    out[i] = a[i]


@wp.kernel
def wide_out(
    a: wp.array(dtype=wp.float32), s: Floats, b: wp.array(dtype=wp.float32), out: wp.array(dtype=wp.vec3)
) -> None:
    i = wp.tid()
    b[i] = b[i] + a[i] * s.k + s.x[i]
    out[i] = wp.vec3(a[i])


@wp.kernel
def vectors(
    a: wp.array(dtype=wp.vec3), s: Vectors, b: wp.array(dtype=wp.vec3), out: wp.array(dtype=wp.float32)
) -> None:
    i = wp.tid()
    b[i] += a[i] * s.k  # accumulated: Warp's adjoint differentiates no overwrite of an in-out array
    out[i] = wp.dot(a[i], s.x[i])


@wp.kernel
def copy(a: wp.array(dtype=wp.float32), out: wp.array(dtype=wp.float32)) -> None:
    i = wp.tid()
    out[i] = a[i]


def copy_func(a: wp.array(dtype=wp.float32), out: wp.array(dtype=wp.float32)) -> None:
    wp.launch(copy, dim=a.shape, inputs=[a], outputs=[out])
