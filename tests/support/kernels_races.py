"""Kernels and ``@wp.func`` helpers for the race-freedom proof (`jarp/warp/_plan/_analysis/_races.py`; not collected by pytest).

Each kernel is written so that exactly one construct decides whether its threads may run concurrently. None of them
is launched by the tests that use this module (plans are only built and lowered), so its Warp module is never built.
The FEM kernels at the end follow the generic, struct-based style of ``kernels_fem.py`` (liblaf/apple's energies).
"""

from __future__ import annotations

from typing import Any

import warp as wp
from warp import atomic_add as accumulate  # an atomic under another name: only its resolution gives it away

from tests.support import kernels_fake_tid as fake
from tests.support import kernels_fem as kf


@wp.struct
class Fields:
    a: wp.array(dtype=float)
    b: wp.array(dtype=float)
    k: float


# -- helpers --------------------------------------------------------------------------------------------------------


@wp.func
def squared(x: float):
    return x * x


@wp.func
def weighted(values: wp.array(dtype=float), i: int, w: float):
    """Reads an array it is passed, at any index: writes nothing."""
    return squared(values[i]) * w + values[0]


@wp.func
def store_into(values: wp.array(dtype=float), i: int, v: float):
    values[i] = v
    return v


@wp.func
def count_into(counter: wp.array(dtype=int)):
    wp.atomic_add(counter, 0, 1)
    return 0


@wp.func
def calls_a_writer(values: wp.array(dtype=float), i: int):
    return store_into(values, i, 1.0)


@wp.func
def local_vector(x: float):
    v = wp.vec3()
    v[0] = x
    v[1] = squared(x)
    return v


@wp.func
def shout(x: float):
    wp.printf("%f\n", x)
    return x


# -- kernels --------------------------------------------------------------------------------------------------------


@wp.kernel
def elementwise(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = x[i] * 2.0


@wp.kernel
def with_pure_helper(x: wp.array(dtype=float), out: wp.array(dtype=wp.vec3)):
    i = wp.tid()
    out[i] = local_vector(weighted(x, i, 0.5))


@wp.kernel
def with_writing_helper(x: wp.array(dtype=float), scratch: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = store_into(scratch, i, x[i])


@wp.kernel
def with_nested_writer(x: wp.array(dtype=float), scratch: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = calls_a_writer(scratch, i) + x[i]


@wp.kernel
def with_counting_helper(x: wp.array(dtype=float), counter: wp.array(dtype=int), out: wp.array(dtype=float)):
    # the kernel never writes ``counter`` itself: the helper's atomic is what races
    i = wp.tid()
    out[i] = x[i] + float(count_into(counter))


@wp.kernel
def with_printing_helper(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = shout(x[i])


@wp.kernel
def with_renamed_atomic(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    accumulate(out, 0, x[i])


@wp.kernel
def struct_store(s: Fields, out: wp.array(dtype=float)):
    i = wp.tid()
    s.a[i] = s.b[i] * s.k
    out[i] = s.a[i]


@wp.kernel
def struct_atomic(s: Fields, out: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(s.a, 0, s.b[i])
    out[i] = s.b[i]


@wp.kernel
def guarded(x: wp.array(dtype=float), n: int, out: wp.array(dtype=float)):
    i = wp.tid()
    if i >= n:
        return
    out[i] = wp.sin(x[i])


# -- FEM, in the style of liblaf/apple (generic over the float type; structs of arrays) -------------------------------

floating = Any
vec3 = Any


@wp.kernel
def cell_energy_kernel(
    u: wp.array1d(dtype=vec3),  # (points,)
    region: Any,
    materials: Any,
    output: wp.array2d(dtype=floating),  # (cells, quadrature)
):
    """Per (cell, quadrature point) energy, stored at the thread's own element: no scatter."""
    cid, qid = wp.tid()
    cell = region.cells[cid]
    dhdX = region.dhdX[cid, qid]
    F = kf.deformation_gradient(kf.get_cell_points(u, cell), dhdX)
    output[cid, qid] = kf.energy_density(F, materials, cid) * region.dV[cid, qid]


def cell_energy_arg_types(u: Any, region: Any, materials: Any) -> list[Any]:
    return [
        wp.array1d(dtype=wp.types.vector(3, u)),
        kf.RegionStruct[region],
        kf.MaterialsStruct[materials],
        wp.array2d(dtype=u),
    ]


FEM_OVERLOADS = {
    "fun_kernel": wp.overload(kf.fun_kernel, kf.fun_arg_types(wp.float32, wp.float32, wp.float32)),
    "grad_kernel": wp.overload(kf.grad_kernel, kf.grad_arg_types(wp.float32, wp.float32, wp.float32)),
    "cell_energy_kernel": wp.overload(cell_energy_kernel, cell_energy_arg_types(wp.float32, wp.float32, wp.float32)),
}


# -- races through indirect routes: local structs, aliases, functions, launch dims, a fake tid -------------------------


@wp.struct
class Holder:
    arr: wp.array(dtype=float)


@wp.kernel
def shift_through_local_struct(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    # thread i writes out[i + 1] and reads out[i], through an array held by a local struct
    i = wp.tid()
    h = Holder()
    h.arr = out
    h.arr[(i + 1) % out.shape[0]] = h.arr[i] + x[i]


@wp.kernel
def alias_of_local_struct_field(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    h = Holder()
    h.arr = out
    b = h.arr
    b[(i + 1) % out.shape[0]] = x[i]


@wp.func
def put(a: wp.array(dtype=float), j: int, v: float):
    h = Holder()
    h.arr = a
    h.arr[j] = v


@wp.kernel
def shift_through_a_function(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    put(out, (i + 1) % out.shape[0], out[i] + x[i])


@wp.kernel
def row_count(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    # launched over 2 dims, ``i`` is the row: every thread of a row adds to the same element
    i = wp.tid()
    out[i] = out[i] + 1.0


@wp.kernel
def fake_tid_count(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = fake.tid()  # a user function named tid, always 0
    out[i] = out[i] + 1.0


@wp.kernel
def fake_tid_store(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = fake.tid()
    out[i] = 1.0


@wp.func
def sq(x: float):
    return x * x


@wp.func_grad(sq)
def adj_sq(x: float, adj_ret: float):
    if x > 1.0e30:
        wp.printf("adj %f\n", x)
    wp.adjoint[x] += 2.0 * x * adj_ret


@wp.kernel
def printing_gradient(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = sq(x[i])
