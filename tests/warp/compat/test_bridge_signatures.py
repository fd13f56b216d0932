"""The adapters `jarp.warp.patch_warp` installs handle exactly the parameters of the installed Warp's bridge functions.

``jarp.warp._bridge.ENTRY_POINTS`` lists, for ``jax_kernel``, ``jax_callable`` and ``register_ffi_callback``, every
parameter of Warp's function with Warp's default and what the adapter does with it. A parameter that a Warp upgrade
adds, drops, reorders or gives another default fails here, before a library run through the switch meets it.
"""

from __future__ import annotations

import inspect
from typing import Any

import pytest
import warp as wp
import warp._src.jax.ffi as warp_bridge

import jarp.warp
from jarp.warp import _bridge
from jarp.warp._module._factory import option_names

NAMES = sorted(_bridge.ENTRY_POINTS)


def _warp_signature(name: str) -> inspect.Signature:
    return inspect.signature(getattr(warp_bridge, name))


def _jarp_options(name: str) -> set[str]:
    """The keywords jarp's function accepts (after the target, for the module factories)."""
    if name == "jax_kernel":
        return set(option_names(jarp.warp.JaxKernel))
    if name == "jax_callable":
        return set(option_names(jarp.warp.JaxCallable))
    return set(inspect.signature(jarp.warp.register_ffi_callback).parameters)


def test_warp_defines_the_three_entry_points_in_one_module() -> None:
    # the module the switch finds from wp.jax_kernel.__module__; Warp 1.19 re-exports two of them at top level
    assert wp.jax_kernel.__module__ == warp_bridge.__name__
    assert wp.jax_kernel is warp_bridge.jax_kernel
    assert wp.jax_callable is warp_bridge.jax_callable
    assert callable(warp_bridge.register_ffi_callback)


@pytest.mark.parametrize("name", NAMES)
def test_the_adapter_knows_every_parameter_of_warps_function(name: str) -> None:
    warp_params = list(_warp_signature(name).parameters)
    handled = list(_bridge.ENTRY_POINTS[name].params)
    assert set(warp_params) - set(handled) == set(), f"Warp's {name} has parameters jarp's adapter does not handle"
    assert set(handled) - set(warp_params) == set(), f"jarp's adapter handles parameters Warp's {name} dropped"
    assert warp_params == handled, f"Warp's {name} orders its (positional) parameters differently"


@pytest.mark.parametrize("name", NAMES)
def test_the_adapter_table_has_warps_defaults(name: str) -> None:
    signature = _warp_signature(name)
    differ: dict[str, tuple[Any, Any]] = {
        param: (signature.parameters[param].default, spec.warp_default)
        for param, spec in _bridge.ENTRY_POINTS[name].params.items()
        if param in signature.parameters and signature.parameters[param].default != spec.warp_default
    }
    assert differ == {}, f"Warp's defaults (left) differ from the table's (right): {differ}"


@pytest.mark.parametrize("name", NAMES)
def test_every_forwarded_parameter_is_a_jarp_option(name: str) -> None:
    forwarded = {
        param
        for param, spec in _bridge.ENTRY_POINTS[name].params.items()
        if spec.how in (_bridge._Pass.KEYWORD, _bridge._Pass.IF_SET)
    }
    assert forwarded - _jarp_options(name) == set()


@pytest.mark.parametrize("name", ["jax_kernel", "jax_callable"])
def test_exactly_one_target(name: str) -> None:
    params = _bridge.ENTRY_POINTS[name].params
    targets = [param for param, spec in params.items() if spec.how is _bridge._Pass.TARGET]
    assert targets == [next(iter(params))]
