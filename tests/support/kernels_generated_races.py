"""Kernels whose writes through a struct's array field only the generated code shows, for
``tests/warp/plan/test_races.py`` (the race veto: a launch judged race-free by the source stays whole) and
``tests/warp/plan/test_writes.py`` (the struct field counted written); and kernels that read their output through
an operator overload or a function, for the fill veto (``test_races.py``).

``Counter`` holds one array; ``mul`` is what Warp calls for ``counter * x`` here (a user function named as the
operator): a plain read-modify-write of ``arr[0]``, so the threads of a split launch lose each other's updates. The
field writers each set ``s.arr[i]`` to 100 and ``y[i]`` to 1, as those of ``kernels_generated_writes.py`` do.
"""

import warp as wp

# Native snippets without adjoints; none of these is differentiated.
wp.set_module_options({"enable_backward": False})


@wp.struct
class Counter:
    arr: wp.array(dtype=float)


@wp.func
def mul(a: Counter, b: float):
    # what Warp calls for ``counter * b``: no atomic, the new count returned
    count = wp.add(a.arr[0], b)
    a.arr[0] = count
    return count


@wp.kernel
def count_through_operator(s: Counter, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = s * 1.0


@wp.kernel
def store_address_writes_field(s: Counter, y: wp.array(dtype=float)):
    i = wp.tid()
    wp.store(wp.address(s.arr, i), 100.0)
    y[i] = 1.0


@wp.func_native("""
index(c.arr, i) = 100.0f;
""")
def native_field_store(c: Counter, i: int): ...


@wp.kernel
def native_writes_struct(s: Counter, y: wp.array(dtype=float)):
    i = wp.tid()
    native_field_store(s, i)  # the struct whole, to code jarp cannot read
    y[i] = 1.0


@wp.struct
class Slot:
    i: int


@wp.func
def sub(a: Counter, s: Slot):
    # what Warp calls for ``counter - slot``
    a.arr[s.i] = 100.0
    return 1.0


@wp.kernel
def operator_writes_field(s: Counter, y: wp.array(dtype=float)):
    i = wp.tid()
    slot = Slot()
    slot.i = i
    y[i] = s - slot


@wp.func
def field_sum(c: Counter, i: int):
    return c.arr[i] + float(c.arr.shape[0]) + float(len(c.arr))


@wp.kernel
def reads_field_many_ways(s: Counter, y: wp.array(dtype=float)):
    # a field read in place, through a function, its shape and length: reads only
    i = wp.tid()
    y[i] = s.arr[i] + field_sum(s, i) + wp.load(wp.address(s.arr, i))


@wp.func
def div(a: wp.array(dtype=float), s: Slot):
    # what Warp calls for ``array / slot``: a read of the element
    return a[s.i]


@wp.kernel
def output_read_through_operator(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    slot = Slot()
    slot.i = i
    out[i] = x[i] + out / slot  # reads its own, unfilled element first


@wp.func
def first(a: wp.array(dtype=float)):
    return a[0]


@wp.kernel
def output_read_in_a_function(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] + first(out)


@wp.kernel
def output_stored_with_its_shape(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] + float(out.shape[0])


@wp.kernel
def stores_into_components(m: wp.array(dtype=wp.mat22), v: wp.array(dtype=wp.vec3)):
    # stores into an element's entry, row and components, in place: plain stores at the thread's own index
    i = wp.tid()
    m[i][0, 1] = 1.0
    m[i][1] = wp.vec2(2.0, 3.0)
    v[i][2] = 4.0
    v[i].x = 5.0


FIELD_WRITERS = {
    count_through_operator: "s.arr",
    store_address_writes_field: "s.arr",
    native_writes_struct: "s",
    operator_writes_field: "s.arr",
}
