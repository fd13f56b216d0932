"""Float64 kernels for the autodiff tests (one Warp module, compiled once per process)."""

from typing import Any

import numpy as np
import warp as wp


@wp.kernel
def scale_square64(a: wp.array(dtype=wp.float64), s: wp.float64, out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    out[i] = a[i] * s * s


@wp.kernel
def spring_energy64(
    x: wp.array(dtype=wp.vec3d),
    edges: wp.array(dtype=wp.vec2i),
    stiffness: wp.array(dtype=wp.float64),
    rest: wp.float64,
    energy: wp.array(dtype=wp.float64),
):
    # a gather through an index array and an atomic reduction into a fixed-size output
    e = wp.tid()
    i = edges[e][0]
    j = edges[e][1]
    d = wp.length(x[i] - x[j]) - rest
    wp.atomic_add(energy, 0, wp.float64(0.5) * stiffness[e] * d * d)


@wp.kernel
def matmul64(a: wp.array2d(dtype=wp.float64), b: wp.array2d(dtype=wp.float64), c: wp.array2d(dtype=wp.float64)):
    i, j = wp.tid()
    acc = wp.float64(0.0)
    for k in range(a.shape[1]):
        acc += a[i, k] * b[k, j]
    c[i, j] = acc


@wp.kernel
def rowsum_sq64(m: wp.array2d(dtype=wp.float64), sums: wp.array(dtype=wp.float64)):
    i, j = wp.tid()
    wp.atomic_add(sums, i, m[i, j] * m[i, j])


@wp.kernel
def two_outputs64(
    a: wp.array(dtype=wp.float64),
    b: wp.array(dtype=wp.vec2d),
    c: wp.array(dtype=wp.float64),
    d: wp.array(dtype=wp.vec2d),
):
    i = wp.tid()
    c[i] = wp.sin(a[i]) * b[i][0]
    d[i] = b[i] * a[i] * a[i]


@wp.kernel
def generic_mul(a: wp.array(dtype=Any), b: wp.array(dtype=Any), out: wp.array(dtype=Any)):
    i = wp.tid()
    out[i] = a[i] * b[i] * b[i]


def generic_mul_types(a_dtype, b_dtype):
    return [wp.array(dtype=a_dtype), wp.array(dtype=b_dtype), wp.array(dtype=a_dtype)]


# declared up front, so that no overload rebuilds this module in the middle of a run
wp.overload(generic_mul, generic_mul_types(wp.float64, wp.float64))


@wp.kernel
def square64(a: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    out[i] = a[i] * a[i]


@wp.kernel
def affine_sin64(
    a: wp.array(dtype=wp.float64), b: wp.array(dtype=wp.float64), s: wp.float64, out: wp.array(dtype=wp.float64)
):
    i = wp.tid()
    out[i] = s * a[i] + wp.sin(b[i])


def chain64(
    a: wp.array(dtype=wp.float64), b: wp.array(dtype=wp.float64), s: wp.float64, out: wp.array(dtype=wp.float64)
):
    """Two launches with an intermediate array: out = s * a**2 + sin(b)."""
    tmp = wp.zeros_like(a, requires_grad=True)
    wp.launch(square64, dim=a.shape, inputs=[a], outputs=[tmp], device=a.device)
    wp.launch(affine_sin64, dim=a.shape, inputs=[tmp, b, s], outputs=[out], device=a.device)


def spring_net(n: int = 6, seed: int = 0):
    """A small random spring network: positions (n, 3), edges (m, 2), per-edge stiffness (m,)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    edges = np.array([(i, j) for i in range(n) for j in range(i + 1, n) if (i + j) % 2 == 1], np.int32)
    stiffness = 0.5 + rng.random(len(edges))
    return x, edges, stiffness


def spring_energy_ref(x, edges, stiffness, rest):
    import jax.numpy as jnp

    d = jnp.linalg.norm(x[edges[:, 0]] - x[edges[:, 1]], axis=-1) - rest
    return jnp.sum(0.5 * stiffness * d * d)


@wp.kernel
def cube64(x: wp.array(dtype=wp.float64), y: wp.array(dtype=wp.float64)):
    i = wp.tid()
    y[i] = x[i] * x[i] * x[i]


@wp.kernel
def cube64_jvp(x: wp.array(dtype=wp.float64), dx: wp.array(dtype=wp.float64), dy: wp.array(dtype=wp.float64)):
    i = wp.tid()
    dy[i] = wp.float64(3.0) * x[i] * x[i] * dx[i]


@wp.kernel
def prod_sum64(
    a: wp.array(dtype=wp.float64), b: wp.array(dtype=wp.float64), s: wp.float64, out: wp.array(dtype=wp.float64)
):
    # out = s * a * b
    i = wp.tid()
    out[i] = s * a[i] * b[i]


@wp.kernel
def prod_sum64_jvp(
    a: wp.array(dtype=wp.float64),
    b: wp.array(dtype=wp.float64),
    s: wp.float64,
    da: wp.array(dtype=wp.float64),
    db: wp.array(dtype=wp.float64),
    dout: wp.array(dtype=wp.float64),
):
    i = wp.tid()
    dout[i] = s * (da[i] * b[i] + a[i] * db[i])


@wp.kernel
def prod_sum64_vjp(
    a: wp.array(dtype=wp.float64),
    b: wp.array(dtype=wp.float64),
    s: wp.float64,
    ct: wp.array(dtype=wp.float64),
    ga: wp.array(dtype=wp.float64),
    gb: wp.array(dtype=wp.float64),
):
    i = wp.tid()
    ga[i] = s * b[i] * ct[i]
    gb[i] = s * a[i] * ct[i]
