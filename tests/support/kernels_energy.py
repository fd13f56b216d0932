"""A float64 mass-spring energy with hand-written gradient, Hessian-product, Hessian-diagonal and
Hessian-quadratic-form kernels, and projected (clamped, positive semi-definite) Hessian kernels."""

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
def spring_hess_prod_v_second(
    x: wp.array(dtype=wp.vec3d),
    v: wp.array(dtype=wp.vec3d),
    edges: wp.array(dtype=wp.vec2i),
    k: wp.array(dtype=wp.float64),
    rest: wp.array(dtype=wp.float64),
    hv: wp.array(dtype=wp.vec3d),
):
    """`spring_hess_prod` with the direction second, as FEM libraries write it (``(u, v, region, materials)``)."""
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


@wp.kernel
def spring_hess_quad(
    x: wp.array(dtype=wp.vec3d),
    edges: wp.array(dtype=wp.vec2i),
    k: wp.array(dtype=wp.float64),
    rest: wp.array(dtype=wp.float64),
    v: wp.array(dtype=wp.vec3d),
    quad: wp.array(dtype=wp.float64),
):
    e = wp.tid()
    dv = v[edges[e][0]] - v[edges[e][1]]
    wp.atomic_add(quad, 0, wp.dot(dv, spring_block(x[edges[e][0]] - x[edges[e][1]], k[e], rest[e]) * dv))


@wp.func
def spring_block_projected(d: wp.vec3d, k: wp.float64, rest: wp.float64):
    # The exact block is k (nn^T + (1 - L/l)(I - nn^T)): eigenvalue k along the spring, k (1 - L/l) across
    # it, negative when the spring is compressed (l < L). Clamp that one to zero, as FEM codes project to PSD.
    length = wp.length(d)
    n = d / length
    nn = wp.outer(n, n)
    across = wp.max(wp.float64(1.0) - rest / length, wp.float64(0.0))
    return k * (nn + across * (wp.identity(n=3, dtype=wp.float64) - nn))


@wp.kernel
def spring_hess_prod_projected(
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
    w = spring_block_projected(x[i] - x[j], k[e], rest[e]) * (v[i] - v[j])
    wp.atomic_add(hv, i, w)
    wp.atomic_sub(hv, j, w)


@wp.kernel
def spring_hess_diag_projected(
    x: wp.array(dtype=wp.vec3d),
    edges: wp.array(dtype=wp.vec2i),
    k: wp.array(dtype=wp.float64),
    rest: wp.array(dtype=wp.float64),
    diag: wp.array(dtype=wp.vec3d),
):
    e = wp.tid()
    i = edges[e][0]
    j = edges[e][1]
    block = spring_block_projected(x[i] - x[j], k[e], rest[e])
    dd = wp.vec3d(block[0, 0], block[1, 1], block[2, 2])
    wp.atomic_add(diag, i, dd)
    wp.atomic_add(diag, j, dd)


@wp.kernel
def spring_hess_quad_projected(
    x: wp.array(dtype=wp.vec3d),
    edges: wp.array(dtype=wp.vec2i),
    k: wp.array(dtype=wp.float64),
    rest: wp.array(dtype=wp.float64),
    v: wp.array(dtype=wp.vec3d),
    quad: wp.array(dtype=wp.float64),
):
    e = wp.tid()
    dv = v[edges[e][0]] - v[edges[e][1]]
    block = spring_block_projected(x[edges[e][0]] - x[edges[e][1]], k[e], rest[e])
    wp.atomic_add(quad, 0, wp.dot(dv, block * dv))


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


def spring_projected_hessian_ref(x, edges, k, rest):
    """The projected Hessian, dense (n*3, n*3), from each spring's jnp Hessian with its negative eigenvalues
    set to zero (independent of the kernels' closed form)."""
    import jax
    import jax.numpy as jnp

    def one(d, k, rest):
        return 0.5 * k * (jnp.linalg.norm(d) - rest) ** 2

    d = x[edges[:, 0]] - x[edges[:, 1]]
    blocks = jax.vmap(jax.hessian(one))(d, k, rest)  # (m, 3, 3)
    w, q = jnp.linalg.eigh(blocks)
    blocks = jnp.einsum("mab,mb,mcb->mac", q, jnp.maximum(w, 0.0), q)
    n = x.shape[0]
    h = jnp.zeros((n, 3, n, 3), x.dtype)
    i, j = edges[:, 0], edges[:, 1]
    h = h.at[i, :, i, :].add(blocks).at[j, :, j, :].add(blocks)
    h = h.at[i, :, j, :].add(-blocks).at[j, :, i, :].add(-blocks)
    return h.reshape(3 * n, 3 * n)
