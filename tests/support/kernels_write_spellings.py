"""One kernel per store spelling, for `tests/warp/plan/test_writes.py`: which parameter (or struct field) each writes.

``index`` and ``a`` are inputs, ``out`` an output; ``s`` a struct with array fields ``a``, ``idx`` and a nested
``inner.b``.
"""

import warp as wp


@wp.struct
class Inner:
    b: wp.array(dtype=float)


@wp.struct
class S:
    a: wp.array(dtype=float)
    idx: wp.array(dtype=int)
    inner: Inner
    k: float


@wp.struct
class Holder:
    arr: wp.array(dtype=float)


@wp.kernel
def plain(index: wp.array(dtype=int), a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i]


@wp.kernel
def scatter(index: wp.array(dtype=int), a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[index[i]] += a[i]  # index is only read


@wp.kernel
def double_gather(index: wp.array(dtype=int), a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[index[index[i]]] = a[i]


@wp.kernel
def through_alias(index: wp.array(dtype=int), a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    b = a
    b[index[i]] = 1.0
    out[i] = 0.0


@wp.kernel
def local_vector(index: wp.array(dtype=int), a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    v = wp.vec3()
    v[0] = a[i]
    out[i] = v[0]


@wp.kernel
def element_copy(index: wp.array(dtype=int), a: wp.array(dtype=wp.vec3), out: wp.array(dtype=float)):
    i = wp.tid()
    p = a[i]  # a copy of the element: storing into it writes nothing
    p[0] = 2.0
    out[i] = p[0]


@wp.kernel
def through_local_struct(index: wp.array(dtype=int), a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    h = Holder()
    h.arr = a
    h.arr[0] = 1.0
    out[i] = 0.0


@wp.kernel
def struct_field(s: S, out: wp.array(dtype=float)):
    i = wp.tid()
    s.a[i] = 1.0
    out[i] = 0.0


@wp.kernel
def nested_struct_field(s: S, out: wp.array(dtype=float)):
    i = wp.tid()
    s.inner.b[i] += 1.0
    out[i] = 0.0


@wp.kernel
def struct_field_atomic(s: S, out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(s.a, i, 1.0)
    out[i] = 0.0


@wp.kernel
def struct_field_read(s: S, out: wp.array(dtype=float)):
    i = wp.tid()
    t = s.a[i]
    out[i] = t * s.k


@wp.kernel
def struct_field_scatter(s: S, out: wp.array(dtype=float)):
    i = wp.tid()
    s.a[s.idx[i]] += 1.0  # the index field is read, not written
    out[i] = 0.0


@wp.kernel
def struct_value_component(s: S, out: wp.array(dtype=float)):
    i = wp.tid()
    c = s
    c.k = 2.0  # a struct is passed by value: this changes the local copy
    out[i] = c.k


WRITES = {
    plain: ("out",),
    scatter: ("out",),
    double_gather: ("out",),
    through_alias: ("a", "out"),
    local_vector: ("out",),
    element_copy: ("out",),
    through_local_struct: ("a", "out"),
    struct_field: ("s.a", "out"),
    nested_struct_field: ("s.inner.b", "out"),
    struct_field_atomic: ("s.a", "out"),
    struct_field_read: ("out",),
    struct_field_scatter: ("s.a", "out"),
    struct_value_component: ("out",),
}
