"""Module options are declared once (the fields); factories, TypedDicts and call options agree with them."""

import dataclasses
import typing
import warnings

import numpy as np
import pytest
import warp as wp

from jarp.warp import (
    JaxCallable,
    JaxCallableCallOptions,
    JaxCallableOptions,
    JaxKernel,
    JaxKernelCallOptions,
    JaxKernelOptions,
    jax_callable,
    jax_kernel,
)
from jarp.warp._module import _factory, _option_warnings
from tests.support import kernels as k

CASES = [
    pytest.param(JaxKernel, JaxKernelOptions, JaxKernelCallOptions, id="kernel"),
    pytest.param(JaxCallable, JaxCallableOptions, JaxCallableCallOptions, id="callable"),
]


@pytest.mark.parametrize(("cls", "options", "call_options"), CASES)
def test_typed_dicts_list_exactly_the_fields(cls, options, call_options):
    fields = [f.name for f in dataclasses.fields(cls)]
    assert _factory.option_names(cls) == tuple(fields[1:])
    assert set(typing.get_type_hints(options)) == set(fields[1:])
    assert set(typing.get_type_hints(call_options)) == set(cls._call_options)


@pytest.mark.parametrize(("cls", "options", "call_options"), CASES)
def test_every_field_is_static(cls, options, call_options):
    del options, call_options
    assert all(f.metadata.get("static", False) for f in dataclasses.fields(cls))


def _func(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    wp.launch(k.triple_kernel, dim=a.shape, inputs=[a], outputs=[out], device=a.device)


@pytest.mark.parametrize(("factory", "target"), [(jax_kernel, k.triple_kernel), (jax_callable, _func)])
def test_factories_refuse_unknown_options_by_name(factory, target):
    with pytest.raises(TypeError, match=r"unknown option\(s\) \['num_output'\]"):
        factory(target, num_output=1)


@pytest.mark.parametrize(("factory", "target"), [(jax_kernel, k.triple_kernel), (jax_callable, _func)])
def test_equal_arguments_give_the_same_live_module(factory, target):
    a = factory(target, num_outputs=1, vmap_method="sequential")
    assert factory(target, num_outputs=1, vmap_method="sequential") is a
    assert factory(num_outputs=1, vmap_method="sequential")(target) is a
    assert factory(target, vmap_method="broadcast_all") is not a
    # values compare by type too: True == 1 must not hand back the num_outputs=1 module
    with pytest.raises(TypeError, match="num_outputs"):
        factory(target, num_outputs=True)


def test_modules_are_not_kept_alive_by_the_factory_cache():
    import gc
    import weakref

    ref = weakref.ref(jax_kernel(k.triple_kernel, launch_dims=(7,)))
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize(
    "option",
    [
        {"graph_mode": wp.JaxCallableGraphMode.WARP},
        {"stage_in_argnames": ("a",)},
        {"stage_out_argnames": ("out",)},
        {"graph_cache_max": 4},
    ],
)
def test_warp_compatibility_options_warn_once(option, monkeypatch):
    monkeypatch.setattr(_option_warnings, "_warned", set())
    with pytest.warns(UserWarning, match="jarp does"):
        jax_callable(_func, **option)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        jax_callable(_func, has_side_effect=True, **option)  # a second module: no second warning


def test_unknown_call_options_are_named():
    with pytest.raises(TypeError, match=r"unknown call option\(s\) \['launch_dims'\]"):
        jax_callable(_func)(np.ones(3, np.float32), launch_dims=3)
