"""The dataclass fields of the options `JaxKernel` and `JaxCallable` share: static, normalised by converters."""

from typing import Any

import equinox as eqx
import warp as wp

from .._plan._normalize import normalize_output_dims, tuple_of_str
from ._value_callables import value_callable


def value_callable_field(default: object = None) -> Any:
    """A static field holding a user callable, compared by value where it can be (`value_callable`)."""
    return eqx.field(static=True, default=default, converter=value_callable)


def output_dims_field(what: str) -> Any:
    """The ``output_dims`` field: an int, a tuple or a dict by output name, normalised to a hashable value."""
    return eqx.field(static=True, default=None, converter=lambda v: normalize_output_dims(v, f"{what}: output_dims"))


def in_out_argnames_field() -> Any:
    """The ``in_out_argnames`` field: a name or names, as a tuple."""
    return eqx.field(static=True, default=(), converter=tuple_of_str)


def module_preload_mode_field() -> Any:
    """The ``module_preload_mode`` field, as Warp's enum."""
    return eqx.field(static=True, default=wp.JaxModulePreloadMode.CURRENT_DEVICE, converter=wp.JaxModulePreloadMode)


def enable_backward_field() -> Any:
    """The ``enable_backward`` field, as a bool."""
    return eqx.field(static=True, default=False, converter=bool)
