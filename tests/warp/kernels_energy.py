"""A float64 mass-spring energy with hand-written gradient, Hessian-product and Hessian-diagonal kernels."""

import numpy as np
import warp as wp


@wp.kernel
def spring_energy(
    x: wp.array(dtype=wp.vec3d),
    edges: wp.array(dtype=wp.vec2i),
    k: wp.array(dtype=wp.float64),
    rest: wp.array(dtype=wp.float64),
    energy: wp.array(dtype=wp.float64),
):
    e = wp.tid()
    d = x[edges[e][0]] - x[edges[e][1]]
    s = wp.length(d) - rest[e]
    wp.atomic_add(energy, 0, wp.float64(0.5) * k[e] * s * s)


@wp.kernel
def spring_grad(
    x: wp.array(dtype=wp.vec3d),
    edges: wp.array(dtype=wp.vec2i),
    k: wp.array(dtype=wp.float64),
    rest: wp.array(dtype=wp.float64),
    g: wp.array(dtype=wp.vec3d),
):
    e = wp.tid()
    i = edges[e][0]
    j = edges[e][1]
    d = x[i] - x[j]
    length = wp.length(d)
    f = k[e] * (length - rest[e]) / length * d
    wp.atomic_add(g, i, f)
    wp.atomic_sub(g, j, f)


@wp.func
def spring_block(d: wp.vec3d, k: wp.float64, rest: wp.float64):
    length = wp.length(d)
    n = d / length
    one = wp.float64(1.0)
    return k * ((one - rest / length) * wp.identity(n=3, dtype=wp.float64) + (rest / length) * wp.outer(n, n))


@wp.kernel
def spring_hess_prod(
    x: wp.array(dtype=wp.vec3d),
    edges: wp.array(dtype=wp.vec2i),
    k: wp.array(dtype=wp.float64),
    rest: wp.array(dtype=wp.float64),
    v: wp.array(dtype=wp.vec3d),
    hv: wp.array(dtype=wp.vec3d),
):
    e = wp.tid()
    i = edges[e][0]
    j = edges[e][1]
    w = spring_block(x[i] - x[j], k[e], rest[e]) * (v[i] - v[j])
    wp.atomic_add(hv, i, w)
    wp.atomic_sub(hv, j, w)


@wp.kernel
def spring_hess_diag(
    x: wp.array(dtype=wp.vec3d),
    edges: wp.array(dtype=wp.vec2i),
    k: wp.array(dtype=wp.float64),
    rest: wp.array(dtype=wp.float64),
    diag: wp.array(dtype=wp.vec3d),
):
    e = wp.tid()
    i = edges[e][0]
    j = edges[e][1]
    block = spring_block(x[i] - x[j], k[e], rest[e])
    dd = wp.vec3d(block[0, 0], block[1, 1], block[2, 2])
    wp.atomic_add(diag, i, dd)
    wp.atomic_add(diag, j, dd)


def spring_problem(n: int = 5, seed: int = 0):
    """A small random spring net: positions (n, 3), edges (m, 2), stiffness (m,), rest lengths (m,)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 3))
    edges = np.array([(i, j) for i in range(n) for j in range(i + 1, n)], np.int32)
    k = 0.5 + rng.random(len(edges))
    rest = np.linalg.norm(x[edges[:, 0]] - x[edges[:, 1]], axis=-1) * (0.8 + 0.4 * rng.random(len(edges)))
    return x, edges, k, rest


def spring_energy_ref(x, edges, k, rest):
    import jax.numpy as jnp

    d = jnp.linalg.norm(x[edges[:, 0]] - x[edges[:, 1]], axis=-1) - rest
    return jnp.sum(0.5 * k * d * d)
