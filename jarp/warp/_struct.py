"""Warp structs, optionally generic over a scalar dtype."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, TypeVar, cast

import warp as wp

from . import types as _types
from ._upstream import _warp_kernels

_T = TypeVar("_T", bound=type)


def _scalar_names() -> str:
    return ", ".join(f"wp.{t.__name__}" for t in _types._SCALAR_TYPES)


class _GenericStructMeta(type):
    """Metaclass of the generic classes `struct` returns for classes with `__annotations_factory__`.

    `Cls[dtype]` builds (once per dtype) a Warp struct from a subclass of the
    decorated class whose annotations come from the factory; `Cls(**fields)`
    instantiates `Cls[jarp.warp.types.floating]`; `isinstance(x, Cls)` is true for
    instances of every specialisation.
    """

    _jarp_template: type
    _jarp_cache: dict[Any, Any]
    _jarp_fields: dict[Any, tuple[str, ...]]

    def __getitem__(cls, dtype: object) -> Any:
        """Return the Warp struct specialised for the Warp scalar type `dtype`, building it on first use."""
        if not any(dtype is t for t in _types._SCALAR_TYPES):
            msg = f"{cls.__qualname__}[...] takes a Warp scalar dtype ({_scalar_names()}), got {dtype!r}"
            raise TypeError(msg)
        cached = cls._jarp_cache.get(dtype)
        if cached is not None:
            return cached
        # Warp's lock, not one of the class's own: a generic callable's factory (run under Warp's
        # lock) may specialise a struct, and two locks taken in both orders could deadlock.
        with _warp_kernels.warp_lock():
            cached = cls._jarp_cache.get(dtype)
            if cached is None:
                cached = cls._jarp_cache[dtype] = cls._jarp_specialise(dtype)
        return cached

    def _jarp_specialise(cls, dtype: Any) -> Any:
        """Build the Warp struct of `cls` for `dtype` (uncached)."""
        template = cls._jarp_template
        name = f"{template.__qualname__}[{dtype.__name__}]"
        annotations = template.__annotations_factory__(dtype)  # type: ignore[attr-defined]
        if not isinstance(annotations, Mapping) or not all(isinstance(k, str) for k in annotations):
            msg = (
                f"{template.__qualname__}.__annotations_factory__({dtype.__name__}) must return a dict mapping "
                f"field names (str) to Warp types, got {annotations!r}"
            )
            raise TypeError(msg)
        namespace = {
            "__module__": template.__module__,
            "__qualname__": name,
            "__doc__": template.__doc__,
            "__annotations__": dict(annotations),
        }
        specialised_cls = type(template)(template.__name__, (template,), namespace)
        try:
            # A module of its own: adding a struct to an existing Warp module would force it to rebuild.
            result = wp.struct(specialised_cls, module="unique")  # under Warp's lock (__getitem__)
        except Exception as err:
            err.add_note(f"while building the Warp struct {name} from {template.__qualname__}.__annotations_factory__")
            raise
        cls._jarp_fields[dtype] = tuple(annotations)
        return result

    def __call__(cls, *args: object, **fields: object) -> Any:
        """Instantiate `cls[jarp.warp.types.floating]`, setting the given fields."""
        dtype = _types.floating
        if args:
            msg = (
                f"{cls.__qualname__}() takes fields by keyword only, got {len(args)} positional argument(s); "
                f"e.g. {cls.__qualname__}(field=value)"
            )
            raise TypeError(msg)
        specialised = cls[dtype]
        known = cls._jarp_fields[dtype]
        unknown = [k for k in fields if k not in known]
        if unknown:
            msg = (
                f"{cls.__qualname__}() got unknown field(s) {', '.join(map(repr, unknown))}; "
                f"the fields of {cls.__qualname__}[{dtype.__name__}] are {', '.join(map(repr, known)) or 'none'}"
            )
            raise TypeError(msg)
        instance = specialised()
        for key, value in fields.items():
            setattr(instance, key, value)
        return instance

    def __instancecheck__(cls, instance: object) -> bool:
        """Return whether `instance` is an instance of one of the specialisations of `cls`."""
        return isinstance(instance, cls._jarp_template)


def struct(cls: _T) -> _T:
    """Declare a Warp struct, optionally generic over a Warp scalar dtype.

    A plain class becomes `wp.struct(cls)`. A class that defines
    `__annotations_factory__(dtype)` (a staticmethod or classmethod returning
    the field annotations for a Warp scalar dtype) stays generic instead, and
    `struct` returns a class standing for all its specialisations:

    - `Cls[wp.float64]` is the Warp struct whose fields are
      `Cls.__annotations_factory__(wp.float64)`, built on first use and cached
      per dtype. Use it in kernel signatures and to build instances of a given
      precision.
    - `Cls(**fields)` instantiates `Cls[jarp.warp.types.floating]`, the
      precision JAX computes in (float64 with `jax_enable_x64`, else float32),
      and sets the given fields.
    - `isinstance(x, Cls)` holds for instances of every specialisation.

    Each specialisation lives in a Warp module of its own, so building one never
    forces a rebuild of the module that defines `Cls`. Specialisations subclass
    `cls`, so its methods and class attributes are available on instances.

    Args:
        cls: The class to declare, with field annotations or an
            `__annotations_factory__`.

    Returns:
        The Warp struct for a plain class; for a generic class, a subclass of
        `cls` supporting `Cls[dtype]` and `Cls(**fields)` as above.

    Raises:
        TypeError: `cls` is not a class or its `__annotations_factory__` is not
            callable. (`Cls[dtype]` raises `TypeError` for a `dtype` that is not
            a Warp scalar type or a factory result that is not a dict of field
            annotations; `Cls(...)` for positional arguments or unknown fields.)

    Example:
        >>> import warp as wp
        >>> @struct
        ... class Spring:
        ...     @staticmethod
        ...     def __annotations_factory__(dtype):
        ...         return {"stiffness": dtype, "rest": wp.types.vector(3, dtype)}
        >>> s = Spring(stiffness=2.0)  # Spring[wp.float32] with jax_enable_x64 off
        >>> s.stiffness, isinstance(s, Spring)
        (2.0, True)
        >>> Spring[wp.float64] is Spring[wp.float64]
        True
    """
    if not isinstance(cls, type):
        msg = f"struct() takes a class, got {cls!r} of type {type(cls).__name__}; apply it as a class decorator"
        raise TypeError(msg)
    factory = getattr(cls, "__annotations_factory__", None)
    if factory is None:
        with _warp_kernels.warp_lock():
            return cast("_T", wp.struct(cls))
    if not callable(factory):
        msg = (
            f"{cls.__qualname__}.__annotations_factory__ must be a staticmethod or classmethod taking a Warp "
            f"scalar dtype and returning a dict of field annotations, got {factory!r}"
        )
        raise TypeError(msg)
    meta: type = _GenericStructMeta
    if type(cls) is not type:
        meta = type(f"_Generic{type(cls).__name__}", (_GenericStructMeta, type(cls)), {})
    generic = meta(
        cls.__name__,
        (cls,),
        {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__},
    )
    generic._jarp_template = cls
    generic._jarp_cache = {}
    generic._jarp_fields = {}
    return cast("_T", generic)
