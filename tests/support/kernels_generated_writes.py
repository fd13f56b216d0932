"""Kernels that write their input ``x`` through spellings only the generated code shows, for
``tests/warp/plan/test_writes.py``.

Each sets ``x[i]`` to 100 (from zero) through one construct and ``y[i]`` to 1, as the writers of ``kernels_writes.py``
do: a store through an address, a reference parameter, a native snippet, an array made from ``x``'s pointer, and an
operator Warp resolves to a user function.
"""

import warp as wp

# Warp refuses reference parameters in kernels built with adjoints; none of these is differentiated.
wp.set_module_options({"enable_backward": False})


@wp.kernel
def store_address_writes_x(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    wp.store(wp.address(x, i), 100.0)
    y[i] = 1.0


@wp.func
def add_through_ref(r: wp.ref[float], v: float):
    r += v


@wp.kernel
def reference_writes_x(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    add_through_ref(x[i], 100.0)
    y[i] = 1.0


@wp.func_native("""
index(a, i) = 100.0f;
""")
def native_store(a: wp.array(dtype=float), i: int): ...


@wp.kernel
def native_writes_x(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    native_store(x, i)
    y[i] = 1.0


@wp.func_native("""
*((float*)ptr) = 100.0f;
""")
def store_at_address(ptr: wp.uint64): ...


@wp.kernel
def address_of_writes_x(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    store_at_address(wp.address_of(x[i]))  # an element's address, as an integer, to a native snippet
    y[i] = 1.0


@wp.kernel
def pointer_writes_x(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    alias = wp.array(ptr=x.ptr, shape=(x.shape[0],), dtype=float)
    alias[i] = 100.0
    y[i] = 1.0


@wp.struct
class Slot:
    i: int


@wp.func
def mul(a: wp.array(dtype=float), s: Slot):
    # what Warp calls for ``x * slot``: a user function named as the operator
    a[s.i] = 100.0
    return 1.0


@wp.kernel
def operator_writes_x(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    s = Slot()
    s.i = i
    y[i] = x * s


GENERATED_WRITERS = [
    store_address_writes_x,
    reference_writes_x,
    native_writes_x,
    address_of_writes_x,
    pointer_writes_x,
    operator_writes_x,
]


@wp.func
def same_array(a: wp.array(dtype=float)):
    return a


@wp.kernel
def reads_x_many_ways(x: wp.array2d(dtype=float), y: wp.array(dtype=float)):
    # views, lengths, shapes, addresses loaded, a function returning its array, a tile load: reads only
    i = wp.tid()
    row = x[i]
    y[i] = same_array(row)[0] + float(x.shape[0]) + float(len(row)) + wp.load(wp.address(row, 1))
    t = wp.tile_load(row, shape=2)
    y[i] += wp.tile_sum(t)[0]
