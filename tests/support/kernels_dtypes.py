"""Kernels over every scalar type JAX has: half floats, every integer width, bool (``tests/warp/plan/test_dtypes.py``).

A module of its own: the generic kernels below get one overload per scalar type, and every overload the tests
resolve is declared here at import, so the Warp module is built once per process (see ``kernels64.py``).
"""

from typing import Any

import warp as wp

vec3bf = wp.types.vector(3, wp.bfloat16)
vec2bf = wp.types.vector(2, wp.bfloat16)
mat22bf = wp.types.matrix((2, 2), wp.bfloat16)

HALF_TYPES = (wp.float16, wp.bfloat16)
INT_TYPES_32 = (wp.int8, wp.uint8, wp.int16, wp.uint16, wp.int32, wp.uint32)
INT_TYPES_64 = (wp.int64, wp.uint64)
INT_TYPES = INT_TYPES_32 + INT_TYPES_64
VEC3 = {wp.float16: wp.vec3h, wp.bfloat16: vec3bf}
VEC2 = {wp.float16: wp.vec2h, wp.bfloat16: vec2bf}
MAT22 = {wp.float16: wp.mat22h, wp.bfloat16: mat22bf}


@wp.kernel
def poly_kernel(a: wp.array(dtype=Any), s: Any, out: wp.array(dtype=Any)):
    """out = a * a * s + a (differentiable: d/da = 2 a s + 1)."""
    i = wp.tid()
    out[i] = a[i] * a[i] * s + a[i]


@wp.kernel
def vec_kernel(a: wp.array(dtype=Any), norm2: wp.array(dtype=Any), scaled: wp.array(dtype=Any)):
    """norm2 = dot(a, a); scaled = a * norm2."""
    i = wp.tid()
    n = wp.dot(a[i], a[i])
    norm2[i] = n
    scaled[i] = a[i] * n


@wp.kernel
def matvec_kernel(m: wp.array(dtype=Any), v: wp.array(dtype=Any), out: wp.array(dtype=Any)):
    """out = m @ v, one matrix and vector per thread."""
    i = wp.tid()
    out[i] = m[i] * v[i]


@wp.kernel
def int_affine_kernel(a: wp.array(dtype=Any), b: wp.array(dtype=Any), k: Any, out: wp.array(dtype=Any)):
    """out = a * k + b."""
    i = wp.tid()
    out[i] = a[i] * k + b[i]


@wp.kernel
def fill_kernel(s: Any, out: wp.array(dtype=Any)):
    """out = s: shows the static value a kernel receives."""
    out[wp.tid()] = s


@wp.kernel
def bool_kernel(a: wp.array(dtype=wp.bool), b: wp.array(dtype=wp.bool), flip: wp.bool, out: wp.array(dtype=wp.bool)):
    """out = (a xor b), negated when flip."""
    i = wp.tid()
    x = a[i] != b[i]
    if flip:
        x = not x
    out[i] = x


def poly_arg_types(a_dtype: Any, s_dtype: Any) -> list[Any]:
    """arg_types_factory of poly_kernel: everything in the array's scalar type (the static scalar follows it)."""
    del s_dtype
    return [wp.array(dtype=a_dtype), a_dtype, wp.array(dtype=a_dtype)]


def int_affine_arg_types(a_dtype: Any, b_dtype: Any, k_dtype: Any) -> list[Any]:
    """arg_types_factory of int_affine_kernel."""
    del b_dtype, k_dtype
    return [wp.array(dtype=a_dtype), wp.array(dtype=a_dtype), a_dtype, wp.array(dtype=a_dtype)]


for _t in (*HALF_TYPES, wp.float32):
    wp.overload(poly_kernel, poly_arg_types(_t, _t))
for _t in HALF_TYPES:
    wp.overload(vec_kernel, [wp.array(dtype=VEC3[_t]), wp.array(dtype=_t), wp.array(dtype=VEC3[_t])])
    wp.overload(matvec_kernel, [wp.array(dtype=MAT22[_t]), wp.array(dtype=VEC2[_t]), wp.array(dtype=VEC2[_t])])
    wp.overload(fill_kernel, [_t, wp.array(dtype=_t)])
for _t in INT_TYPES:
    wp.overload(int_affine_kernel, int_affine_arg_types(_t, _t, _t))


def poly_callable_factory(a_dtype: Any, s_dtype: Any) -> Any:
    """generic=True factory of a callable launching poly_kernel for the array's scalar type."""
    del s_dtype
    kernel = wp.overload(poly_kernel, poly_arg_types(a_dtype, a_dtype))

    def poly_func(a: wp.array(dtype=a_dtype), s: a_dtype, out: wp.array(dtype=a_dtype)):
        wp.launch(kernel, dim=a.shape, inputs=[a, s], outputs=[out])

    return poly_func


def int_affine_callable_factory(a_dtype: Any, b_dtype: Any, k_dtype: Any) -> Any:
    """generic=True factory of a callable launching int_affine_kernel for the arrays' scalar type."""
    kernel = wp.overload(int_affine_kernel, int_affine_arg_types(a_dtype, b_dtype, k_dtype))

    def int_affine_func(
        a: wp.array(dtype=a_dtype), b: wp.array(dtype=a_dtype), k: a_dtype, out: wp.array(dtype=a_dtype)
    ):
        wp.launch(kernel, dim=a.shape, inputs=[a, b, k], outputs=[out])

    return int_affine_func


def bool_func(a: wp.array(dtype=wp.bool), b: wp.array(dtype=wp.bool), flip: wp.bool, out: wp.array(dtype=wp.bool)):
    """A callable launching bool_kernel."""
    wp.launch(bool_kernel, dim=a.shape, inputs=[a, b, flip], outputs=[out])


def vec_func(a: wp.array(dtype=wp.vec3h), norm2: wp.array(dtype=wp.float16), scaled: wp.array(dtype=wp.vec3h)):
    """A callable launching the float16 overload of vec_kernel."""
    wp.launch(vec_kernel, dim=a.shape, inputs=[a], outputs=[norm2, scaled])


def _fill_func(scalar: Any) -> Any:
    kernel = wp.overload(fill_kernel, [scalar, wp.array(dtype=scalar)])

    def fill_func(s: scalar, out: wp.array(dtype=scalar)):
        wp.launch(kernel, dim=out.shape, inputs=[s], outputs=[out])

    return fill_func


FILL_FUNCS = {t: _fill_func(t) for t in HALF_TYPES}
