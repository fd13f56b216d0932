"""User callables stored in a module (``arg_types_factory``, ``jvp``, ``vjp``, a ``jax_callable``'s function),
compared by value, and the warning when a rebuilt closure cannot be.

Static fields compare with ``==``, and two function objects compare by identity. A model that builds its modules
afresh (``eqx.filter_jit`` over a rebuilt model, a training loop that reconstructs it) would then retrace at every
rebuild if it passed a closure or a partial built in place; `value_callable` makes equal constructions compare
equal, and `warn_if_rebuilt_closure` names what keeps a rebuilt one from it.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import weakref
from collections.abc import Callable
from typing import Any, TypeGuard

import numpy as np
import warp as wp

from .._plan._static_keys import static_key
from .._upstream import _locks
from ._option_warnings import warn_unused_option, warned


class _ValuePartial(functools.partial):  # type: ignore[type-arg]
    """A ``functools.partial`` that compares and hashes by value (a plain partial compares by identity).

    A model that builds its function as ``functools.partial(f, constants)`` then rebuilds equal,
    so ``eqx.filter_jit`` does not retrace.
    """

    def _key(self) -> tuple[Any, ...]:
        # Parts keyed as a closure's captured values are (`_capture_key`): a nested function by value, a number by
        # its type and bits (``partial(f, 1)`` and ``partial(f, True)`` differ).
        try:
            return (
                _capture_key(self.func, 0, ()),
                tuple(_capture_key(v, 0, ()) for v in self.args),
                tuple(sorted((k, _capture_key(v, 0, ())) for k, v in self.keywords.items())),
            )
        except ValueError:  # a nested function with a variable not assigned yet: compared by identity
            return (self.func, self.args, tuple(sorted(self.keywords.items())))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ValuePartial) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


class _ValueFunction:
    """A nested function (a closure, a lambda) compared by value: its code, defaults and captured values.

    Two functions made by the same ``def`` or ``lambda`` with equal captured values behave alike, so they
    compare equal. Attributes (``__name__``, ``__code__``...), calls and ``inspect.signature`` reach the
    function itself.
    """

    __slots__ = ("__weakref__", "__wrapped__", "_key")

    def __init__(self, func: types.FunctionType, key: tuple[Any, ...]) -> None:
        self.__wrapped__ = func
        self._key = key

    def __call__(self, *args: object, **kwargs: object) -> Any:
        return self.__wrapped__(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name in _ValueFunction.__slots__:
            # An unset slot (``copy``/``pickle`` build the object empty, then probe ``__setstate__``):
            # delegating would look up ``__wrapped__`` here again, recursing without end.
            raise AttributeError(name)
        return getattr(self.__wrapped__, name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _ValueFunction) and self._key == other._key

    def __hash__(self) -> int:
        return hash(self._key)

    def __repr__(self) -> str:
        return repr(self.__wrapped__)


def _is_nested(func: object) -> TypeGuard[types.FunctionType]:
    """Whether ``func`` is a function made inside another function (a new object at every call of that one)."""
    return isinstance(func, types.FunctionType) and (func.__closure__ is not None or "<locals>" in func.__qualname__)


def value_callable(func: Callable[..., object] | None) -> Any:
    """``func``, compared by value where it can be: a partial by its function and arguments, a nested function
    (closure, lambda) by its code, defaults and captured values when all are hashable.

    Captured nested functions and partials are themselves compared by value (a closure over a closure made by
    the same factory), up to `_CAPTURE_DEPTH` levels deep. A module-level function, a jarp module or any object
    with its own ``__eq__`` is returned as it is.

    Args:
        func: a user callable given as a module option (``None`` included).

    Returns:
        A `_ValuePartial`, a `_ValueFunction`, or ``func`` itself (also when a captured value is unhashable: it
        then compares by identity, and a rebuild warns, see `warn_if_rebuilt_closure`).
    """
    if isinstance(func, functools.partial) and not isinstance(func, _ValuePartial):
        return _ValuePartial(func.func, *func.args, **func.keywords)
    if not _is_nested(func):
        return func
    try:
        key = _function_key(func, 0, ())
        hash(key)
    except (TypeError, ValueError):  # a captured value that is unhashable (an array, a list) or not yet set
        return func
    return _ValueFunction(func, key)


# How many closures deep `value_callable` compares captured nested functions by value (a closure over a
# closure over ...); deeper ones compare by identity, and a rebuild warns.
_CAPTURE_DEPTH = 8


def _function_key(func: types.FunctionType, depth: int, active: tuple[types.FunctionType, ...]) -> tuple[object, ...]:
    """The key of a nested function: its code, globals, defaults, captured values and annotations.

    Args:
        func: the nested function.
        depth: how many closures deep ``func`` is captured (0: the option itself).
        active: the functions whose keys are being built, outermost first (a recursive function captures itself).

    Returns:
        The key; it raises ``TypeError`` when hashed if a captured value is unhashable.

    Raises:
        ValueError: a captured variable is not assigned yet (an empty cell).
    """
    active = (*active, func)
    # Values keyed by type and bits (`static_key`), not ``==``: a closure over ``1`` and one over ``1.0``
    # or ``True`` (or ``0.0`` and ``-0.0``) behave differently, yet compare and hash equal.
    cells = tuple(_capture_key(cell.cell_contents, depth, active) for cell in func.__closure__ or ())
    defaults = tuple(_capture_key(v, depth, active) for v in func.__defaults__ or ())
    kwdefaults = tuple(sorted((k, _capture_key(v, depth, active)) for k, v in (func.__kwdefaults__ or {}).items()))
    # Annotations are evaluated where the function is defined and need not be captured (a factory's
    # ``dtype`` used only in ``x: wp.array(dtype=dtype)``), yet they make a `jax_callable` function's types.
    annotations = tuple((k, _annotation_key(v)) for k, v in func.__annotations__.items())
    return (func.__code__, id(func.__globals__), defaults, kwdefaults, cells, annotations)


def _capture_key(value: object, depth: int, active: tuple[types.FunctionType, ...]) -> object:
    """A captured value keyed by value: a nested function or a partial by its parts (`_CAPTURE_DEPTH` levels
    deep), a number by its exact type and bits (`static_key`), a tuple element by element.

    Anything else is keyed as it is, so that a list or an array stays unhashable (it may change later).

    Args:
        value: the captured value (or default, or partial argument).
        depth: how many closures deep the function capturing it is.
        active: the functions whose keys are being built (`_function_key`).

    Returns:
        The key.
    """
    if _is_nested(value):
        for i, outer in enumerate(active):
            if outer is value:  # a recursive function captures itself: keyed by where it is, not by itself
                return ("recursion", i)
        if depth < _CAPTURE_DEPTH:
            return (types.FunctionType, _function_key(value, depth + 1, active))
    elif isinstance(value, functools.partial) and depth < _CAPTURE_DEPTH:
        return (
            functools.partial,
            _capture_key(value.func, depth + 1, active),
            tuple(_capture_key(v, depth + 1, active) for v in value.args),
            tuple(sorted((k, _capture_key(v, depth + 1, active)) for k, v in value.keywords.items())),
        )
    elif isinstance(value, (float, complex, np.generic)):
        return (type(value), static_key(value))
    elif isinstance(value, tuple):
        return (type(value), tuple(_capture_key(v, depth, active) for v in value))
    return (type(value), value)


def _annotation_key(annotation: Any) -> object:  # any annotation a user wrote
    """An annotation by value: a Warp array type (a new object at each ``wp.array(dtype=...)``) by its kind,
    dtype and ndim; any other one as it is (types compare by identity, strings by value)."""
    if wp.types.is_array(annotation):
        return (type(annotation), annotation.dtype, annotation.ndim)
    return annotation


# (class, field, origin) -> the first nested function or partial seen there, weakly: a second one is a rebuild. The
# origin is what every build shares: a nested function's code, or what a partial wraps.
_nested_seen: dict[tuple[Any, str, Any], weakref.ref[Any]] = {}
_nested_lock = _locks.make("closure_depth")


def warn_if_rebuilt_closure(cls: type, module: object) -> None:
    """Warn (once per field) when a module is rebuilt with a new closure or partial that differs by identity.

    Such a closure makes every rebuilt module unequal to the last, so ``jax.jit``/``eqx.filter_jit`` retrace at
    every rebuild: one capturing an unhashable value (which `value_callable` cannot compare: any two builds
    differ), or one capturing an object compared by identity (a new ``object()``, an instance of a class without
    ``__eq__``, a method bound to a new instance) that differs from the one the last build captured. Captured
    closures and partials are followed `_CAPTURE_DEPTH` levels deep; the warning names each such captured value.

    Args:
        cls: the module's class.
        module: the module just built.
    """
    for field in dataclasses.fields(cls):
        value = getattr(module, field.name)
        func = value.__wrapped__ if isinstance(value, _ValueFunction) else value
        if not (_is_nested(func) or isinstance(func, functools.partial)) or warned(cls._what, field.name):
            continue
        key = (cls, field.name, _rebuild_origin(func))
        try:
            hash(key)
        except TypeError:  # a partial of an unhashable callable object: the module is not hashable either
            continue
        with _nested_lock:
            seen = _nested_seen.get(key)
            first = None if seen is None else seen()
            if first is None:
                _nested_seen[key] = weakref.ref(func)
        if first is func:
            continue
        if value is func and _is_nested(func):  # left unwrapped: not comparable, so any two builds differ
            if seen is None:
                continue  # the first build
            culprits, by_identity = _uncomparable_captures(func), False
        elif first is None:
            continue  # the first build, or the last one is gone (nothing holds it, so nothing retraces for it)
        else:
            culprits, by_identity = _identity_differences(first, func), True
            if not culprits:
                continue
        warn_unused_option(cls._what, field.name, _rebuild_message(func, culprits, by_identity))


def _rebuild_origin(func: object) -> object:
    """What every build of ``func`` shares: a nested function's code; for a partial, the origin of its function."""
    if _is_nested(func):
        return func.__code__
    if isinstance(func, functools.partial):
        return (functools.partial, _rebuild_origin(func.func))
    return func


# An unassigned captured variable (an empty cell), in `_parts`.
_UNASSIGNED = object()


def _parts(value: object, depth: int) -> list[tuple[str, object]] | None:
    """The parts `value_callable` compares ``value`` by, named; None for a value it compares as a whole.

    Args:
        value: a captured value, or the option itself (at depth 0).
        depth: how many closures or partials deep ``value`` is.

    Returns:
        A nested function's captured variables and defaults, a partial's function and arguments (both only
        `_CAPTURE_DEPTH` levels deep), or a tuple's items; None for anything else.
    """
    if isinstance(value, tuple):
        return [(f"[{i}]", v) for i, v in enumerate(value)]
    if depth > _CAPTURE_DEPTH:
        return None
    if _is_nested(value):
        code = value.__code__
        parts = [
            (name, _cell_value(cell)) for name, cell in zip(code.co_freevars, value.__closure__ or (), strict=True)
        ]
        defaults = value.__defaults__ or ()
        params = code.co_varnames[code.co_argcount - len(defaults) : code.co_argcount]
        parts += [(f"{name} (default)", v) for name, v in zip(params, defaults, strict=True)]
        parts += [(f"{name} (default)", v) for name, v in (value.__kwdefaults__ or {}).items()]
        return parts
    if isinstance(value, functools.partial):
        args = [(f".args[{i}]", v) for i, v in enumerate(value.args)]
        return [(".func", value.func), *args, *((f".keywords[{k!r}]", v) for k, v in value.keywords.items())]
    return None


def _cell_value(cell: types.CellType) -> object:
    """A closure cell's value, or `_UNASSIGNED` for an empty cell."""
    try:
        return cell.cell_contents
    except ValueError:
        return _UNASSIGNED


_Culprit = tuple[tuple[str, ...], str]  # the path of a captured value (names, outermost first), and what it is


def _identity_differences(old: object, new: object, path: tuple[str, ...] = (), depth: int = 0) -> list[_Culprit]:
    """The captured values of ``new`` that differ from those of ``old`` (an earlier build) only by identity.

    Args:
        old: the nested function (or partial) of an earlier build, or a part of it.
        new: the one just built from the same code, or the same part of it.
        path: the names leading to ``old`` and ``new``.
        depth: how many closures or partials deep they are.

    Returns:
        Each differing value's path and what it is; values that differ by value (another number, another
        module-level function) are a legitimate difference and not listed.
    """
    return _differences(old, new, path, depth, frozenset())


def _differences(
    old: object, new: object, path: tuple[str, ...], depth: int, active: frozenset[tuple[int, int]]
) -> list[_Culprit]:
    """`_identity_differences`, with ``active`` the pairs of functions being compared (recursion met again)."""
    if old is new or (id(old), id(new)) in active:  # the same object, or a recursive function met again
        return []
    old_parts, new_parts = _parts(old, depth), _parts(new, depth)
    if old_parts is not None and new_parts is not None:
        same_code = getattr(old, "__code__", None) is getattr(new, "__code__", None)
        if type(old) is not type(new) or not same_code or [n for n, _ in old_parts] != [n for n, _ in new_parts]:
            return []  # another function, or other arguments: a difference by value
        active = active | {(id(old), id(new))}
        inner = depth if isinstance(new, tuple) else depth + 1
        return [
            culprit
            for (name, a), (_, b) in zip(old_parts, new_parts, strict=True)
            for culprit in _differences(a, b, (*path, name), inner, active)
        ]
    what = _compared_by_identity(old, new)
    return [] if what is None else [(path, what)]


def _compared_by_identity(old: Any, new: Any) -> str | None:  # two objects of any one type (checked first)
    """What ``new`` is, when it differs from ``old`` only by being another object; None for a difference by value.

    Long-lived objects compared by identity (module-level functions, classes, modules, Warp kernels and
    functions, builtins) are the same object at every build: two different ones are a choice, not a rebuild.
    """
    if type(old) is not type(new):
        return None
    if isinstance(new, types.FunctionType):
        if _is_nested(new) and new.__code__ is old.__code__:
            return f"a function more than {_CAPTURE_DEPTH} closures deep, compared by identity"
        return None
    if isinstance(new, (types.MethodType, types.BuiltinMethodType)):
        owner = getattr(new, "__self__", None)
        if owner is None or isinstance(owner, (type, types.ModuleType)) or owner is old.__self__:
            return None
        if getattr(new, "__func__", new.__name__) != getattr(old, "__func__", old.__name__):
            return None  # another method
        return f"a method bound to a {type(owner).__qualname__} object, which compares that object by identity"
    if isinstance(new, (type, types.ModuleType, wp.Kernel, wp.Function)):
        return None
    if type(new).__eq__ is object.__eq__:
        return f"an instance of {type(new).__qualname__}, compared by identity"
    return None


def _uncomparable_captures(
    value: object, path: tuple[str, ...] = (), depth: int = 0, active: frozenset[int] = frozenset()
) -> list[_Culprit]:
    """The captured values that keep `value_callable` from comparing ``value`` (a nested function) by value.

    Args:
        value: the nested function, or a part of it.
        path: the names leading to ``value``.
        depth: how many closures or partials deep ``value`` is.
        active: the ids of the functions being looked into (a recursive function captures itself).

    Returns:
        Each unhashable or unassigned captured value's path and what it is.
    """
    if id(value) in active:
        return []
    parts = _parts(value, depth)
    if parts is not None:
        inner = depth if isinstance(value, tuple) else depth + 1
        active = active | {id(value)}
        return [culprit for name, v in parts for culprit in _uncomparable_captures(v, (*path, name), inner, active)]
    if value is _UNASSIGNED:
        return [(path, "a variable not yet assigned when the module was built")]
    try:
        hash(value)
    except TypeError:
        return [(path, f"an unhashable {type(value).__qualname__}")]
    return []


def _rebuild_message(func: Any, culprits: list[_Culprit], by_identity: bool) -> str:
    """The rebuild warning's text (after ``"{what}: {option} "``), naming the closure and its culprit values."""
    if _is_nested(func):
        subject = f"a new closure ({func.__qualname__})"
    else:
        subject = f"a new functools.partial of {getattr(func.func, '__qualname__', type(func.func).__qualname__)}"
    named = [f"{_path_text(path)} ({what})" for path, what in culprits[:3]]
    if len(culprits) > 3:
        named.append(f"{len(culprits) - 3} more")
    if not named:
        captured = "values jarp cannot compare (e.g. arrays or lists)"
    else:
        captured = named[0] if len(named) == 1 else f"{', '.join(named[:-1])} and {named[-1]}"
    fix = (
        "Create that object once and reuse it at every build, or give its class value-based __eq__ and __hash__ "
        "(e.g. a frozen dataclass), or define the function at module level and pass numbers, strings or tuples "
        "of them as arguments (functools.partial with hashable arguments compares by value)."
        if by_identity
        else "Define the function at module level and pass what it captures as arguments, or use "
        "functools.partial with hashable arguments (compared by value)."
    )
    return (
        f"is {subject} capturing {captured}, which jarp cannot compare by value, so a module built again with it "
        f"differs from the last one and jax.jit / eqx.filter_jit retrace at every rebuild. {fix}"
    )


def _path_text(path: tuple[str, ...]) -> str:
    """A captured value's path for messages: ``'g' -> 'o'``, ``'pair'[0]``, ``'p'.args[1]``."""
    text = ""
    for name in path:
        if name.startswith(("[", ".")):
            text += name if text else name.lstrip(".")
        else:
            text += f"{' -> ' if text else ''}'{name}'"
    return text
