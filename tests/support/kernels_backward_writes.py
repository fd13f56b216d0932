"""Kernels whose backward code stores into a primal input, and one whose backward code only reads
(`tests/warp/transforms/test_backward_writes.py`).

Warp's backward entry point replays a kernel's forward code, calling each ``@wp.func`` again (a function that stores
stores again), and runs the user's ``@wp.func_grad`` and ``@wp.func_replay`` functions: none of it is forward code,
yet each may store into the arrays the kernel only reads forward.
"""

import warp as wp

N = 6


@wp.func
def scaled(a: wp.array(dtype=float), i: int) -> float:
    return 2.0 * a[i]


@wp.func_grad(scaled)
def scaled_grad(a: wp.array(dtype=float), i: int, adj_ret: float):
    # a gradient of its own (3 a[i], where the function's is 2), then a store into the primal array
    wp.adjoint[a][i] += 3.0 * a[i] * adj_ret
    a[i] = 0.0


@wp.kernel
def storing_gradient(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """A custom gradient that stores into ``a`` (forward: reads it)."""
    i = wp.tid()
    out[i] = scaled(a, i)


@wp.func
def squared(a: wp.array(dtype=float), i: int) -> float:
    return a[i] * a[i]


@wp.func_grad(squared)
def squared_grad(a: wp.array(dtype=float), i: int, adj_ret: float):
    wp.adjoint[a][i] += 2.0 * a[i] * adj_ret
    wp.atomic_add(a, i, adj_ret)  # accumulates into the primal array instead of (besides) its adjoint


@wp.kernel
def accumulating_gradient(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """A custom gradient that accumulates into ``a`` with an atomic."""
    i = wp.tid()
    out[i] = squared(a, i)


@wp.func
def peek(a: wp.array(dtype=float), i: int) -> float:
    return a[i]


@wp.func_replay(peek)
def peek_replay(a: wp.array(dtype=float), i: int):
    v = a[i]
    a[i] = -1.0
    return v


@wp.kernel
def storing_replay(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """A custom replay (run by the backward pass in place of the forward call) that stores into ``a``."""
    i = wp.tid()
    out[i] = 3.0 * peek(a, i)


@wp.func
def bump(a: wp.array(dtype=float), i: int):
    a[i] = a[i] + 1.0


@wp.kernel
def bump_in_out(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """An in-out array stored into by a ``@wp.func``, which the backward pass's replay calls again."""
    i = wp.tid()
    bump(a, i)
    out[i] = a[i] * a[i]


@wp.func
def cubed(a: wp.array(dtype=float), i: int) -> float:
    return a[i] * a[i] * a[i]


@wp.func_grad(cubed)
def cubed_grad(a: wp.array(dtype=float), i: int, adj_ret: float):
    wp.adjoint[a][i] += 3.0 * a[i] * a[i] * adj_ret  # reads the primal array only


@wp.kernel
def reading_gradient(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """A custom gradient that only reads ``a``."""
    i = wp.tid()
    out[i] = cubed(a, i)


@wp.kernel
def storing_kernel(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """Forward code that stores into ``a`` (for a callable, which gets a private copy of it)."""
    i = wp.tid()
    out[i] = a[i] * a[i]
    a[i] = 0.0


def storing_callable(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    wp.launch(storing_kernel, dim=a.shape, inputs=[a], outputs=[out])


@wp.struct
class Scaled:
    arr: wp.array(dtype=float)
    k: float


@wp.func
def field_scaled(s: Scaled, i: int) -> float:
    return s.k * s.arr[i]


@wp.func_grad(field_scaled)
def field_scaled_grad(s: Scaled, i: int, adj_ret: float):
    s.arr[i] = 0.0  # a store into the struct's array field


@wp.kernel
def storing_field_gradient(s: Scaled, out: wp.array(dtype=float)):
    """A custom gradient that stores into a struct parameter's array field."""
    i = wp.tid()
    out[i] = field_scaled(s, i) + s.arr[i]


@wp.func
def field_read(s: Scaled, i: int) -> float:
    return s.k * s.arr[i]


@wp.kernel
def reading_field(s: Scaled, out: wp.array(dtype=float)):
    """Warp's own adjoint of a function reading a struct's array field: reads only."""
    i = wp.tid()
    out[i] = field_read(s, i) + s.arr[i]
