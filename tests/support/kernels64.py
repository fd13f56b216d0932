"""Float64 and generic Warp kernels for the ``jarp.warp`` tests.

Kept apart from ``kernels.py``: every new overload of a generic kernel changes its Warp module's hash and rebuilds
the whole module, so the generic kernels share this small module with the float64 kernels rather than the large
float32 one. Every overload the suite resolves is also declared up front (``_PREDECLARED`` below), so this module
never changes hash in the middle of a test run: a rebuild mid-run is exercised on purpose, in a subprocess, by
``tests/warp/modules/test_generic.py::test_new_overload_rebuilding_the_warp_module_keeps_earlier_launches_valid``.
"""

from typing import Any

import warp as wp

# ----------------------------------------------------------------------------------------------------------------------
# Generic kernels (resolved through arg_types_factory / generic=True)
# ----------------------------------------------------------------------------------------------------------------------


@wp.kernel
def generic_add_kernel(a: wp.array(dtype=Any), b: wp.array(dtype=Any), out: wp.array(dtype=Any)):
    i = wp.tid()
    out[i] = a[i] + b[i]


@wp.kernel
def generic_scale_kernel(a: wp.array(dtype=Any), s: Any, out: wp.array(dtype=Any)):
    i = wp.tid()
    out[i] = a[i] * s


# Every (kernel, dtypes) overload the suite resolves through arg_types_factory / generic=True, declared at import.
_PREDECLARED = {
    "generic_add_kernel": [(wp.float32, wp.float32), (wp.int32, wp.int32), (wp.float64, wp.float64)],
    "generic_scale_kernel": [(wp.float32, wp.float32), (wp.float64, wp.float64)],
}
for _dtypes in _PREDECLARED["generic_add_kernel"]:
    wp.overload(
        generic_add_kernel, [wp.array(dtype=_dtypes[0]), wp.array(dtype=_dtypes[1]), wp.array(dtype=_dtypes[0])]
    )
for _dtypes in _PREDECLARED["generic_scale_kernel"]:
    wp.overload(generic_scale_kernel, [wp.array(dtype=_dtypes[0]), _dtypes[1], wp.array(dtype=_dtypes[0])])


def generic_add_arg_types_list(a_dtype, b_dtype):
    """arg_types_factory returning a list (one type per kernel argument)."""
    return [wp.array(dtype=a_dtype), wp.array(dtype=b_dtype), wp.array(dtype=a_dtype)]


def generic_add_arg_types_dict(a_dtype, b_dtype):
    """arg_types_factory returning a dict keyed by kernel argument name."""
    return {"a": wp.array(dtype=a_dtype), "b": wp.array(dtype=b_dtype), "out": wp.array(dtype=a_dtype)}


def generic_scale_arg_types(a_dtype, s_dtype):
    """arg_types_factory for generic_scale_kernel: the scalar's dtype comes from the runtime scalar."""
    return [wp.array(dtype=a_dtype), a_dtype, wp.array(dtype=a_dtype)]


def generic_scale_func_factory(a_dtype, s_dtype):
    """generic=True factory for jax_callable: one Warp scalar dtype per runtime positional argument."""
    kernel = wp.overload(generic_scale_kernel, [wp.array(dtype=a_dtype), a_dtype, wp.array(dtype=a_dtype)])

    def generic_scale_func(a: wp.array(dtype=a_dtype), s: a_dtype, out: wp.array(dtype=a_dtype)):
        wp.launch(kernel, dim=a.shape, inputs=[a, s], outputs=[out])

    return generic_scale_func


def generic_add_func_factory(a_dtype, b_dtype):
    """generic=True factory for jax_callable with two array inputs."""
    kernel = wp.overload(
        generic_add_kernel, [wp.array(dtype=a_dtype), wp.array(dtype=b_dtype), wp.array(dtype=a_dtype)]
    )

    def generic_add_func(a: wp.array(dtype=a_dtype), b: wp.array(dtype=b_dtype), out: wp.array(dtype=a_dtype)):
        wp.launch(kernel, dim=a.shape, inputs=[a, b], outputs=[out])

    return generic_add_func


# ----------------------------------------------------------------------------------------------------------------------
# Float64 kernels (used only in the JAX_ENABLE_X64=1 process)
# ----------------------------------------------------------------------------------------------------------------------


@wp.kernel
def triple64_kernel(input: wp.array(dtype=wp.float64), output: wp.array(dtype=wp.float64)):
    tid = wp.tid()
    output[tid] = wp.float64(3.0) * input[tid]


@wp.kernel
def scale_sum_square64(
    a: wp.array(dtype=wp.float64),
    b: wp.array(dtype=wp.float64),
    s: wp.float64,
    out: wp.array(dtype=wp.float64),
):
    tid = wp.tid()
    x = a[tid] * s + b[tid]
    out[tid] = x * x


@wp.kernel
def multi_output64(
    a: wp.array(dtype=wp.float64),
    b: wp.array(dtype=wp.float64),
    s: wp.float64,
    c: wp.array(dtype=wp.float64),
    d: wp.array(dtype=wp.float64),
):
    tid = wp.tid()
    c[tid] = a[tid] * a[tid]
    d[tid] = a[tid] * b[tid] * s


@wp.kernel
def scale_vec2d(a: wp.array(dtype=wp.vec2d), s: wp.float64, out: wp.array(dtype=wp.vec2d)):
    tid = wp.tid()
    out[tid] = a[tid] * s


@wp.kernel
def sin_mul64(a: wp.array(dtype=wp.float64), b: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    # nonlinear in both inputs, for tight float64 gradient checks
    tid = wp.tid()
    out[tid] = wp.sin(a[tid]) * b[tid]


@wp.kernel
def spring64_kernel(
    positions: wp.array(dtype=wp.vec3d),
    weights: wp.array(dtype=wp.float64),
    stiffness: wp.float64,
    energies: wp.array(dtype=wp.float64),
    forces: wp.array(dtype=wp.vec3d),
):
    i = wp.tid()
    p = positions[i]
    w = weights[i]
    energies[i] = wp.float64(0.5) * stiffness * w * wp.dot(p, p)
    forces[i] = -stiffness * w * p


@wp.kernel
def gather64_kernel(indices: wp.array(dtype=int), table: wp.array(dtype=wp.float64), out: wp.array(dtype=wp.float64)):
    i = wp.tid()
    out[i] = table[indices[i]]


def scale64_func(a: wp.array(dtype=wp.float64), s: wp.float64, out: wp.array(dtype=wp.float64)):
    wp.launch(scale_sum_square64, dim=a.shape, inputs=[a, a, s], outputs=[out])
