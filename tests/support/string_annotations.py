"""Kernels and callables written with ``from __future__ import annotations`` (every annotation is a string).

A helper module for ``tests/warp/plan/test_string_annotations.py`` (its name does not start with ``test_``, so pytest
does not collect it). The factories use local aliases (``vec3 = wp.types.vector(3, dtype)``) the way generic code is
written.
"""

from __future__ import annotations

from typing import Any

import warp as wp

FLOAT_TYPES = (wp.float16, wp.float32, wp.float64)


@wp.kernel
def scale_kernel(a: wp.array(dtype=Any), s: Any, out: wp.array(dtype=Any)):
    i = wp.tid()
    out[i] = a[i] * s


@wp.kernel
def norm_kernel(v: wp.array(dtype=Any), out: wp.array(dtype=Any)):
    i = wp.tid()
    out[i] = wp.length(v[i])


@wp.kernel
def scale32_kernel(a: wp.array(dtype=wp.float32), s: wp.float32, out: wp.array(dtype=wp.float32)):
    i = wp.tid()
    out[i] = a[i] * s


for _t in FLOAT_TYPES:
    wp.overload(scale_kernel, [wp.array(dtype=_t), _t, wp.array(dtype=_t)])
    wp.overload(norm_kernel, [wp.array(dtype=wp.types.vector(3, _t)), wp.array(dtype=_t)])

Scalar = wp.float32  # a module-level alias used in annotations


def scale_func(a: wp.array(dtype=Scalar), s: Scalar, out: wp.array(dtype=Scalar)):
    """A plain callable: its string annotations name globals."""
    wp.launch(scale32_kernel, dim=a.shape, inputs=[a, s], outputs=[out])


def norm_factory(v_dtype: Any) -> Any:
    """A generic factory whose aliases (`vec3`, `v_dtype`) appear only in the annotations, not the body."""
    vec3 = wp.types.vector(3, v_dtype)
    kernel = wp.overload(norm_kernel, [wp.array(dtype=vec3), wp.array(dtype=v_dtype)])

    def norm(v: wp.array(dtype=vec3), out: wp.array(dtype=v_dtype)):
        wp.launch(kernel, dim=v.shape, inputs=[v], outputs=[out])

    return norm


def scale_factory(a_dtype: Any, s_dtype: Any) -> Any:
    """A generic factory whose alias `scalar` is also used in the body, so it is a closure variable."""
    del s_dtype
    scalar = a_dtype
    kernel = wp.overload(scale_kernel, [wp.array(dtype=scalar), scalar, wp.array(dtype=scalar)])

    def scale(a: wp.array(dtype=scalar), s: scalar, out: wp.array(dtype=scalar)):
        wp.launch(kernel, dim=a.shape, inputs=[a, scalar(s)], outputs=[out])

    return scale


def typo_factory(v_dtype: Any) -> Any:
    """A generic factory whose annotation names an undefined alias (`vec4` instead of `vec3`)."""
    vec3 = wp.types.vector(3, v_dtype)
    del vec3

    def typo(v: wp.array(dtype=vec4), out: wp.array(dtype=v_dtype)):  # noqa: F821 - the name is undefined on purpose
        pass

    return typo


def make_nested_callable(dtype: Any) -> Any:
    """A non-generic nested function whose annotation names a local alias missing from its closure."""
    vec3 = wp.types.vector(3, dtype)
    del vec3

    def nested(v: wp.array(dtype=vec3), out: wp.array(dtype=dtype)):  # noqa: F821 - vec3 is gone by now
        pass

    return nested


def make_closure_callable(dtype: Any) -> Any:
    """A non-generic nested function whose annotations resolve through its closure (both names used in the body)."""
    vec3 = wp.types.vector(3, dtype)
    kernel = wp.overload(norm_kernel, [wp.array(dtype=vec3), wp.array(dtype=dtype)])

    def nested(v: wp.array(dtype=vec3), out: wp.array(dtype=dtype)):
        assert v.dtype is vec3
        assert out.dtype is dtype
        wp.launch(kernel, dim=v.shape, inputs=[v], outputs=[out])

    return nested


def broken_expression(a: wp.array(dtype=wp.float32, ndim=1 // 0), out: wp.array(dtype=float)):
    """An annotation that evaluates with an error other than a NameError."""


def scale_arg_types(a_dtype: Any, s_dtype: Any) -> list[Any]:
    """arg_types_factory of scale_kernel (a kernel whose annotations are strings)."""
    del s_dtype
    scalar = a_dtype
    return [wp.array(dtype=scalar), scalar, wp.array(dtype=scalar)]
