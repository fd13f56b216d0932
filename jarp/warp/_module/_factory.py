"""The factories' module cache: `jax_kernel(k)` twice gives the same live module, as Warp's wrappers do."""

import dataclasses
import weakref
from typing import Any, TypeVar

from .._plan._normalize import normalize_output_dims
from .._upstream import _locks
from ._base import AbstractWarpModule
from ._value_callables import warn_if_rebuilt_closure

_M = TypeVar("_M", bound=AbstractWarpModule)

_instances: weakref.WeakValueDictionary[Any, AbstractWarpModule] = weakref.WeakValueDictionary()
_instances_lock = _locks.make("module_instances")


def option_names(cls: type[AbstractWarpModule]) -> tuple[str, ...]:
    """The construction options of a module class: its fields after the first (the target)."""
    return tuple(f.name for f in dataclasses.fields(cls))[1:]


def make_module(cls: type[_M], target: Any, options: dict[str, Any]) -> _M:
    """Build ``cls(target, **options)``, returning the live module built from equal arguments if there is one.

    Modules are immutable and compare by value, so sharing one is safe; it is what
    Warp's ``jax_kernel``/``jax_callable`` do (they cache their wrappers), and saves
    re-validating the target. The cache holds modules weakly.
    """
    names = option_names(cls)
    unknown = sorted(set(options) - set(names))
    if unknown:
        raise TypeError(f"{cls._what}: unknown option(s) {unknown}; the options are {list(names)}.")
    if "output_dims" in options:
        # normalised before construction: Equinox flattens constructor arguments before converters run
        options["output_dims"] = normalize_output_dims(options["output_dims"], f"{cls._what}: output_dims")
    module = cls(target, **options)
    warn_if_rebuilt_closure(cls, module)
    # Keyed by the normalised field values (the converters have run), so that `in_out_argnames=[]`
    # and no in_out_argnames give the same module, as in Warp; typed, so that True and 1 differ.
    key = (cls, *((type(v), v) for v in (getattr(module, f.name) for f in dataclasses.fields(cls))))
    try:
        hash(key)
    except TypeError:
        return module
    with _instances_lock:
        shared = _instances.setdefault(key, module)
    assert isinstance(shared, cls)  # keyed by the class first
    return shared
