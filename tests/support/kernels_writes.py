"""Kernels for the write check (`jarp.warp._plan._analysis._writes`): every spelling Warp compiles into a store or atomic on
an input, and kernel factories whose writing branches Warp folds away.

Each ``*_writes_x`` kernel takes ``x`` (an input unless declared in-out) and ``y`` (an output); called with
``x`` of zeros, it adds 100 to ``x[i]`` and sets ``y[i] = 1``.
"""

import warp as wp

from tests.support import kernels_writes_helpers as helpers


@wp.func
def bump(a: wp.array(dtype=float), i: int):
    a[i] = a[i] + 100.0


@wp.func
def bump_if(a: wp.array(dtype=float), i: int, flag: bool):
    if flag:
        a[i] = a[i] + 100.0


@wp.kernel
def dotted_writes_x(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    helpers.bump(x, i)
    y[i] = 1.0


@wp.kernel
def keyword_writes_x(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    bump(a=x, i=i)
    y[i] = 1.0


def make_closure_writer():
    f = bump

    @wp.kernel
    def closure_writes_x(x: wp.array(dtype=float), y: wp.array(dtype=float)):
        i = wp.tid()
        f(x, i)
        y[i] = 1.0

    return closure_writes_x


closure_writes_x = make_closure_writer()

aadd = wp.atomic_add


@wp.kernel
def aliased_atomic_writes_x(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    aadd(x, i, 100.0)
    y[i] = 1.0


@wp.kernel
def view_writes_x(x: wp.array2d(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    row = x[i]
    row[0] = row[0] + 100.0
    y[i] = 1.0


@wp.struct
class Holder:
    arr: wp.array(dtype=float)


@wp.kernel
def struct_field_to_func(s: Holder, y: wp.array(dtype=float)):
    i = wp.tid()
    bump(s.arr, i)
    y[i] = 1.0


@wp.kernel
def struct_field_store(s: Holder, y: wp.array(dtype=float)):
    i = wp.tid()
    s.arr[i] = s.arr[i] + 100.0
    y[i] = 1.0


@wp.func
def bump_holder(h: Holder, i: int):
    h.arr[i] = h.arr[i] + 100.0


@wp.kernel
def struct_to_func(s: Holder, y: wp.array(dtype=float)):
    i = wp.tid()
    bump_holder(s, i)
    y[i] = 1.0


def make_struct_writer():
    g = bump_holder

    @wp.kernel
    def struct_to_closure_func(s: Holder, y: wp.array(dtype=float)):
        i = wp.tid()
        g(s, i)
        y[i] = 1.0

    return struct_to_closure_func


struct_to_closure_func = make_struct_writer()


@wp.kernel
def tile_store_writes_x(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    t = wp.tile_load(y, shape=4)
    wp.tile_store(x, t)


# -- kernel factories: one signature for every variant, the unused arrays passed as (empty) inputs --------------


def make_variant(return_vectors: bool):
    """A factory in the style of neighbour-list libraries: a captured flag picks which arrays are written."""

    @wp.kernel
    def variant(x: wp.array(dtype=float), vectors: wp.array(dtype=float), y: wp.array(dtype=float)):
        i = wp.tid()
        if return_vectors:
            vectors[i] = 2.0 * x[i]
        y[i] = x[i] + 1.0

    return variant


def make_static_variant(return_vectors: bool):
    """As `make_variant`, the branch spelled with ``wp.static``."""

    @wp.kernel
    def static_variant(x: wp.array(dtype=float), vectors: wp.array(dtype=float), y: wp.array(dtype=float)):
        i = wp.tid()
        if wp.static(return_vectors):
            vectors[i] = 2.0 * x[i]
        y[i] = x[i] + 1.0

    return static_variant


def make_struct_variant(write: bool):
    """A struct variant: only the resolver judges struct fields, so this fails if it stops folding branches."""

    @wp.kernel
    def struct_variant(s: Holder, y: wp.array(dtype=float)):
        i = wp.tid()
        if write:
            s.arr[i] = 0.0
        y[i] = s.arr[i] + 1.0

    return struct_variant


@wp.kernel
def literal_false_into_func(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    bump_if(x, i, False)
    y[i] = x[i] + 1.0


@wp.kernel
def literal_true_into_func(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    bump_if(x, i, True)
    y[i] = 1.0


@wp.func
def relay_flag(a: wp.array(dtype=float), i: int, flag: bool):
    bump_if(a, i, flag)


@wp.kernel
def literal_false_through_two_funcs(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    relay_flag(x, i, False)
    y[i] = x[i] + 1.0


@wp.func
def flips_flag(a: wp.array(dtype=float), i: int, flag: bool):
    flag = not flag  # the parameter is reassigned: the constant passed in no longer decides the branch
    if flag:
        a[i] = a[i] + 100.0


@wp.kernel
def literal_false_flipped(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    flips_flag(x, i, False)
    y[i] = 1.0


@wp.kernel
def runtime_flag_into_func(x: wp.array(dtype=float), flags: wp.array(dtype=int), y: wp.array(dtype=float)):
    i = wp.tid()
    bump_if(x, i, flags[i] != 0)
    y[i] = 1.0


WRITERS = (dotted_writes_x, keyword_writes_x, closure_writes_x, aliased_atomic_writes_x)
STRUCT_WRITERS = (struct_field_to_func, struct_field_store, struct_to_func, struct_to_closure_func)


def make_extent_variant(use_weights: bool):
    """A factory whose folded branch indexes ``w`` by the thread index: only the taken branch bounds the launch."""

    @wp.kernel
    def extent_variant(x: wp.array(dtype=float), w: wp.array(dtype=float), y: wp.array(dtype=float)):
        i = wp.tid()
        if use_weights:
            y[i] = w[i] * x[i]
        else:
            y[i] = x[i]

    return extent_variant


def make_accumulator(overwrite: bool):
    """An in-out accumulator whose overwriting branch only one variant compiles (Warp cannot differentiate it)."""

    @wp.kernel
    def accumulate(x: wp.array(dtype=float), acc: wp.array(dtype=float)):
        i = wp.tid()
        if overwrite:
            acc[i] = x[i]
        else:
            acc[i] += x[i]

    return accumulate


WRITE_FLAG = False


@wp.kernel
def flag_writer(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    if WRITE_FLAG:  # folded by Warp with the value the flag has when the module builds
        x[i] = x[i] + 100.0
    y[i] = 1.0
