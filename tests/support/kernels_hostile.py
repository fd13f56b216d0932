"""Warp kernels and annotated functions for ``tests/warp/hostile/test_*.py`` (float32, one Warp module).

Every kernel lives at module level so that Warp builds this module once per process. The kernels are small and
representative: elementwise, vec3 arrays, 2-D, a gather through indices, scalar parameters of each kind, an in-out
accumulator, and kernels that write into an input that is *not* declared in-out (which jarp must refuse or
otherwise keep from changing the caller's array).
"""

import warp as wp

# ----------------------------------------------------------------------------------------------------------------------
# Representative kernels
# ----------------------------------------------------------------------------------------------------------------------


@wp.kernel
def affine_kernel(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    # elementwise: out = 2 a + 1
    i = wp.tid()
    out[i] = 2.0 * a[i] + 1.0


@wp.kernel
def weigh_vec3_kernel(p: wp.array(dtype=wp.vec3), w: wp.array(dtype=float), out: wp.array(dtype=wp.vec3)):
    # vec3 in and out: out = w p
    i = wp.tid()
    out[i] = w[i] * p[i]


@wp.kernel
def grid_kernel(g: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    # 2-D: out[i, j] = g[i, j] + 10 i - j
    i, j = wp.tid()
    out[i, j] = g[i, j] + 10.0 * float(i) - float(j)


@wp.kernel
def pick_kernel(idx: wp.array(dtype=wp.int32), table: wp.array(dtype=float), out: wp.array(dtype=float)):
    # gather through indices: launch dims follow `idx`
    i = wp.tid()
    out[i] = table[idx[i]]


@wp.kernel
def knobs_kernel(a: wp.array(dtype=float), gain: float, shift: int, flip: wp.bool, out: wp.array(dtype=float)):
    # scalar parameters of the three kinds: out = +-(gain a + shift)
    i = wp.tid()
    v = gain * a[i] + float(shift)
    if flip:
        v = -v
    out[i] = v


@wp.kernel
def accumulate_kernel(a: wp.array(dtype=float), acc: wp.array(dtype=float)):
    # meant with in_out_argnames=["acc"]: acc += a
    i = wp.tid()
    acc[i] = acc[i] + a[i]


@wp.kernel
def mat22_4d_kernel(m: wp.array4d(dtype=wp.mat22), out: wp.array4d(dtype=wp.mat22)):
    # the largest Warp array (4 dims) of matrices: 6 dims in JAX; out = m^T
    i, j, k, q = wp.tid()
    out[i, j, k, q] = wp.transpose(m[i, j, k, q])


# ----------------------------------------------------------------------------------------------------------------------
# Kernels that write into an input (not declared in-out)
# ----------------------------------------------------------------------------------------------------------------------


@wp.kernel
def overwrite_input_kernel(victim: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = victim[i]
    victim[i] = -1.0


@wp.kernel
def augassign_input_kernel(victim: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    victim[i] += 1.0
    out[i] = 0.0


@wp.kernel
def atomic_input_kernel(victim: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(victim, i, 1.0)
    out[i] = 1.0


@wp.kernel
def vec_component_input_kernel(victim: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    victim[i][0] = 5.0
    out[i] = 1.0


@wp.kernel
def atomic_or_input_kernel(victim: wp.array(dtype=wp.int32), out: wp.array(dtype=wp.int32)):
    # wp.atomic_or / atomic_and / atomic_xor write too
    i = wp.tid()
    wp.atomic_or(victim, i, 8)
    out[i] = 1


@wp.kernel
def alias_input_kernel(victim: wp.array(dtype=float), out: wp.array(dtype=float)):
    # writes the input through a local alias
    i = wp.tid()
    alias = victim
    alias[i] = -1.0
    out[i] = 1.0


@wp.func
def _poke(arr: wp.array(dtype=float), i: int):
    arr[i] = -1.0


@wp.kernel
def func_input_kernel(victim: wp.array(dtype=float), out: wp.array(dtype=float)):
    # writes the input through a @wp.func
    i = wp.tid()
    _poke(victim, i)
    out[i] = 1.0


# ----------------------------------------------------------------------------------------------------------------------
# Annotated functions for jax_callable
# ----------------------------------------------------------------------------------------------------------------------


def affine_func(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    wp.launch(affine_kernel, dim=a.shape, inputs=[a], outputs=[out])


def weigh_vec3_func(p: wp.array(dtype=wp.vec3), w: wp.array(dtype=float), out: wp.array(dtype=wp.vec3)):
    wp.launch(weigh_vec3_kernel, dim=p.shape, inputs=[p, w], outputs=[out])


def grid_func(g: wp.array2d(dtype=float), out: wp.array2d(dtype=float)):
    wp.launch(grid_kernel, dim=g.shape, inputs=[g], outputs=[out])


def pick_func(idx: wp.array(dtype=wp.int32), table: wp.array(dtype=float), out: wp.array(dtype=float)):
    wp.launch(pick_kernel, dim=idx.shape, inputs=[idx, table], outputs=[out])


def knobs_func(a: wp.array(dtype=float), gain: float, shift: int, flip: wp.bool, out: wp.array(dtype=float)):
    wp.launch(knobs_kernel, dim=a.shape, inputs=[a, gain, shift, flip], outputs=[out])


def accumulate_func(a: wp.array(dtype=float), acc: wp.array(dtype=float)):
    wp.launch(accumulate_kernel, dim=a.shape, inputs=[a, acc])


def overwrite_input_func(victim: wp.array(dtype=float), out: wp.array(dtype=float)):
    # launches a kernel that writes into the (pure) input `victim`
    wp.launch(overwrite_input_kernel, dim=victim.shape, inputs=[victim], outputs=[out])


# ----------------------------------------------------------------------------------------------------------------------
# More array dims than Warp arrays have (4): Warp accepts the annotation, and the kernel compiles as long as it only
# reads the shape
# ----------------------------------------------------------------------------------------------------------------------


@wp.kernel
def five_d_kernel(a: wp.array(dtype=float, ndim=5), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = float(a.shape[0])


def five_d_func(a: wp.array(dtype=float, ndim=5), out: wp.array(dtype=float, ndim=5)):
    out.fill_(1.0)
