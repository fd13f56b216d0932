"""Kernels that write an input by an indirect route (a returned array, a nested call, a local struct, an alias, a
view): each writes ``x`` (or the struct field ``s.arr`` / ``s.x``) by 100 at every thread, and sets ``y[i] = 1``.

`tests/warp/plan/test_writes.py` checks that each is refused without in-out, and that the caller's array is unchanged.
"""

import warp as wp


@wp.struct
class H:
    arr: wp.array(dtype=float)


@wp.struct
class Particles:
    x: wp.array(dtype=float)  # a field named like a vector component


@wp.func
def ident(a: wp.array(dtype=float)) -> wp.array(dtype=float):
    return a


@wp.func
def bump(a: wp.array(dtype=float), i: int):
    a[i] = a[i] + 100.0


@wp.func
def bump_h(h: H, i: int):
    h.arr[i] = h.arr[i] + 100.0


@wp.func
def get(h: H) -> wp.array(dtype=float):
    return h.arr


@wp.func
def bump_if_eq(a: wp.array(dtype=float), i: int, v: float):
    if v == 0.1:
        a[i] = a[i] + 100.0


@wp.func
def bump_if_zero(a: wp.array(dtype=float), i: int, v: int):
    if v == 0:
        a[i] = a[i] + 100.0


# -- array parameters ---------------------------------------------------------------------------------------------


@wp.kernel
def returned_array(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    a = ident(x)
    a[i] = a[i] + 100.0
    y[i] = 1.0


@wp.kernel
def nested_call(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    bump(ident(x), i)
    y[i] = 1.0


@wp.kernel
def local_struct_to_func(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    h = H()
    h.arr = x
    bump_h(h, i)
    y[i] = 1.0


@wp.kernel
def struct_ctor(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    h = H(arr=x)
    h.arr[i] = h.arr[i] + 100.0
    y[i] = 1.0


@wp.kernel
def ptr_array(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):
    i = wp.tid()
    v = wp.array(ptr=x.ptr, shape=(x.shape[0],), dtype=wp.float32)
    v[i] = v[i] + 100.0
    y[i] = 1.0


@wp.kernel
def float_callsite(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    bump_if_eq(x, i, 0.1000000001)  # != 0.1 in float64, == 0.1 in float32
    y[i] = 1.0


@wp.kernel
def int_callsite(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    bump_if_zero(x, i, 4294967296)  # 0 in int32
    y[i] = 1.0


@wp.kernel
def view_call(x: wp.array2d(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    v = wp.view(x, i)
    v[0] = v[0] + 100.0
    y[i] = 1.0


# -- struct fields ------------------------------------------------------------------------------------------------


@wp.kernel
def component_named_field(s: Particles, y: wp.array(dtype=float)):
    i = wp.tid()
    s.x[i] = s.x[i] + 100.0
    y[i] = 1.0


@wp.kernel
def tuple_alias(s: H, y: wp.array(dtype=float)):
    i = wp.tid()
    a, b = s.arr, y
    a[i] = a[i] + 100.0
    b[i] = 1.0


@wp.kernel
def rebound_alias(s: H, y: wp.array(dtype=float)):
    i = wp.tid()
    a = y
    a = s.arr
    a[i] = a[i] + 100.0
    y[i] = 1.0


@wp.kernel
def ifexp_alias(s: H, y: wp.array(dtype=float)):
    i = wp.tid()
    a = s.arr if i >= 0 else s.arr  # noqa: RUF034
    a[i] = a[i] + 100.0
    y[i] = 1.0


@wp.kernel
def returned_field(s: H, y: wp.array(dtype=float)):
    i = wp.tid()
    a = get(s)
    a[i] = a[i] + 100.0
    y[i] = 1.0


EPS = 0.1000000001


@wp.kernel
def global_compare_struct(s: H, y: wp.array(dtype=float)):
    i = wp.tid()
    if EPS == 0.1:  # False in float64; Warp compares in float32: True
        s.arr[i] = s.arr[i] + 100.0
    y[i] = 1.0


ARRAY_ESCAPES = (
    returned_array,
    nested_call,
    local_struct_to_func,
    struct_ctor,
    ptr_array,
    float_callsite,
    int_callsite,
)
STRUCT_ESCAPES = (tuple_alias, rebound_alias, ifexp_alias, returned_field, global_compare_struct)
