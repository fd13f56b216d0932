"""`AbstractWarpModule`: what `JaxKernel` and `JaxCallable` share.

A call flows one way: ``__call__`` (eager dispatch or tracing) -> derivative
rules (``jvp=``/``vjp=``) -> target resolution for the argument dtypes (final
class) -> argument binding (`_plan/_binding.py`) -> launch plan (final class,
`_plan/_builder.py`) -> reverse mode (`_jax/_adjoint.py`) -> the primitive
(`_jax/_primitive.py`) -> lowering (`_jax/_lowering.py`) -> the FFI target and its
executors (`_ffi/_target.py`, `_ffi/_executors.py`). The final classes supply only
what differs: how the target is resolved and how its plan is built.
"""

# No `from __future__ import annotations`: Equinox refuses stringified `AbstractVar` annotations.

import abc
import dataclasses
import functools
import gc
import os
import sys
import threading
import types
import warnings
import weakref
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

import equinox as eqx
import jax
import numpy as np
import warp as wp

from . import _eager, _rules
from ._ffi._registry import registry
from ._jax import _adjoint
from ._jax._primitive import CallConfig
from ._plan._arg_spec import ArgSpec
from ._plan._binding import BoundCall, bind_arguments
from ._plan._normalize import check_vmap_method, normalize_output_dims, tuple_of_str
from ._plan._signature import Signature
from ._plan._static_keys import static_key
from ._plan._values import Plan
from ._upstream import _warp_internals


class AbstractWarpModule(eqx.Module):
    """The abstract base of jarp's modules: a Warp launch as an immutable, JAX-callable Equinox module.

    Subclasses are final (`JaxKernel`, `JaxCallable`); they declare the options as
    static fields and implement target resolution and plan building. Calling a
    module returns a tuple of output arrays: in-out arguments first, then the pure
    outputs (which start zero-filled).

    The options both kinds share are declared here as ``eqx.AbstractVar``s (which make no dataclass
    field, so each final class keeps its target as the first field), with their converters in
    the ``*_field`` helpers below and their checks in one `__check_init__`.
    """

    num_outputs: eqx.AbstractVar[int]
    vmap_method: eqx.AbstractVar[str]
    output_dims: eqx.AbstractVar[Any]
    in_out_argnames: eqx.AbstractVar[tuple[str, ...]]
    module_preload_mode: eqx.AbstractVar[wp.JaxModulePreloadMode]
    enable_backward: eqx.AbstractVar[bool]
    jvp: eqx.AbstractVar[Callable[..., Any] | None]
    vjp: eqx.AbstractVar[Callable[..., Any] | None]

    # The factory's name, for messages ("jax_kernel()").
    _what: ClassVar[str]
    # The per-call options `__call__` accepts.
    _call_options: ClassVar[tuple[str, ...]]
    # Whether scalar parameters may take JAX values (read at run time from one-element arrays).
    _runtime_scalars: ClassVar[bool]

    def __check_init__(self) -> None:
        # Equinox runs this after the final class's own checks (those of its target).
        check_vmap_method(self.vmap_method, self._what)
        for name in ("jvp", "vjp"):
            rule = getattr(self, name)
            if rule is not None and not callable(rule):
                raise TypeError(f"{self._what}: {name} must be a jarp module or a function, got {type(rule).__name__}.")

    def __call__(self, *args: Any, **options: Any) -> tuple[jax.Array, ...]:
        """Launch on ``args`` (one value per input parameter); return the outputs as a tuple."""
        unknown = sorted(set(options) - set(self._call_options))
        if unknown:
            raise TypeError(
                f"{self._what}: unknown call option(s) {unknown}; a {type(self).__name__} call takes "
                f"{list(self._call_options)}."
            )
        out = _eager.try_eager(self, args, options)
        return out if out is not None else self._trace(tuple(args), options)

    def _trace(self, args: tuple[Any, ...], options: Mapping[str, Any]) -> tuple[jax.Array, ...]:
        """Bind the launch into the current JAX trace (what `__call__` does under `jit`)."""
        if self.jvp is not None or self.vjp is not None:
            bare = dataclasses.replace(self, jvp=None, vjp=None)
            return _rules.call_with_rules(
                lambda *a: bare._trace(a, options),
                args,
                self.jvp,
                self.vjp,
                self._describe(self._unresolved_target()),
                primal_differentiable=self.enable_backward,
            )
        # Before building anything: a kernel whose plans are released leaves Warp's live set, so
        # the module build below does not include (and keep) it.
        registry.release_idle()
        if _warp_internals.take_build_failures():
            # A kernel whose build failed is often kept only by reference cycles (the traceback of
            # the error): collect them once, so that Warp's next build of that module leaves it out.
            gc.collect()
        target = self._resolve(args)
        what = self._describe(target)
        bound = bind_arguments(self._signature(target), args, what=what, runtime_scalars=self._runtime_scalars)
        plan = self._plan(target, bound, options, what)
        vmap_method = options.get("vmap_method")
        config = CallConfig(check_vmap_method(self.vmap_method if vmap_method is None else vmap_method, what))
        out = _adjoint.launch(plan, config, bound.operands, self.enable_backward)
        return out[: len(plan.results) - len(plan.protected)]

    def _output_dims(self, options: Mapping[str, Any], what: str) -> Any:
        """This call's (normalised) ``output_dims``: the per-call option, else the module's."""
        dims = options.get("output_dims")
        return self.output_dims if dims is None else normalize_output_dims(dims, f"{what}: output_dims")

    def input_specs(self) -> tuple[ArgSpec, ...] | None:
        """The module's input parameters (in-out ones included), in call order; None where they are only known per
        call (a ``jax_callable(generic=True)`` factory). Generic kernel parameters have no dtype (``generic``)."""
        target = self._annotated_target()
        return None if target is None else self._signature(target).inputs

    def _annotated_target(self) -> Any:
        """The target whose annotations give the parameters before any call; None if only a call resolves it."""
        return self._unresolved_target()

    @abc.abstractmethod
    def _unresolved_target(self) -> Any:
        """The wrapped kernel or function, before resolution for argument dtypes."""

    @abc.abstractmethod
    def _resolve(self, args: tuple[Any, ...]) -> Any:
        """The concrete target (kernel overload, specialised function) for the arguments' dtypes."""

    @abc.abstractmethod
    def _signature(self, target: Any) -> Signature:
        """The signature of a resolved target under this module's output options."""

    @abc.abstractmethod
    def _describe(self, target: Any) -> str:
        """How messages name this module and target (``"jax_kernel() kernel 'k'"``)."""

    @abc.abstractmethod
    def _plan(self, target: Any, bound: BoundCall, options: Mapping[str, Any], what: str) -> Plan:
        """The launch plan of one bound call."""


# -- user callables compared by value ------------------------------------------------------------
#
# Static fields compare with ``==``, and two function objects compare by identity. A model that builds its
# modules afresh (``eqx.filter_jit`` over a rebuilt model, a training loop that reconstructs it) would then
# retrace at every rebuild if it passed a closure or a partial built in place; these wrappers make equal
# constructions compare equal.


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

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
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


def _is_nested(func: Any) -> bool:
    """Whether ``func`` is a function made inside another function (a new object at every call of that one)."""
    return isinstance(func, types.FunctionType) and (func.__closure__ is not None or "<locals>" in func.__qualname__)


def value_callable(func: Any) -> Any:
    """``func``, compared by value where it can be: a partial by its function and arguments, a nested function
    (closure, lambda) by its code, defaults and captured values when all are hashable.

    Captured nested functions and partials are themselves compared by value (a closure over a closure made by
    the same factory), up to `_CAPTURE_DEPTH` levels deep. A module-level function, a jarp module or any object
    with its own ``__eq__`` is returned as it is.

    Args:
        func: a user callable given as a module option (``None`` included).

    Returns:
        A `_ValuePartial`, a `_ValueFunction`, or ``func`` itself (also when a captured value is unhashable: it
        then compares by identity, and a rebuild warns, see `_warn_if_rebuilt_closure`).
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


def _function_key(func: types.FunctionType, depth: int, active: tuple[Any, ...]) -> tuple[Any, ...]:
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


def _capture_key(value: Any, depth: int, active: tuple[Any, ...]) -> Any:
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


def _annotation_key(annotation: Any) -> Any:
    """An annotation by value: a Warp array type (a new object at each ``wp.array(dtype=...)``) by its kind,
    dtype and ndim; any other one as it is (types compare by identity, strings by value)."""
    if wp.types.is_array(annotation):
        return (type(annotation), annotation.dtype, annotation.ndim)
    return annotation


def value_callable_field(default: Any = None) -> Any:
    """A static field holding a user callable, compared by value where it can be (`value_callable`)."""
    return eqx.field(static=True, default=default, converter=value_callable)


# -- the shared options' fields ------------------------------------------------------------------


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


# -- factories -----------------------------------------------------------------------------------

_instances: weakref.WeakValueDictionary[Any, AbstractWarpModule] = weakref.WeakValueDictionary()
_instances_lock = threading.Lock()


def option_names(cls: type[AbstractWarpModule]) -> tuple[str, ...]:
    """The construction options of a module class: its fields after the first (the target)."""
    return tuple(f.name for f in dataclasses.fields(cls))[1:]


def make_module(cls: type[AbstractWarpModule], target: Any, options: dict[str, Any]) -> AbstractWarpModule:
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
    _warn_if_rebuilt_closure(cls, module)
    # Keyed by the normalised field values (the converters have run), so that `in_out_argnames=[]`
    # and no in_out_argnames give the same module, as in Warp; typed, so that True and 1 differ.
    key = (cls, *((type(v), v) for v in (getattr(module, f.name) for f in dataclasses.fields(cls))))
    try:
        hash(key)
    except TypeError:
        return module
    with _instances_lock:
        return _instances.setdefault(key, module)


# (class, field, origin) -> the first nested function or partial seen there, weakly: a second one is a rebuild. The
# origin is what every build shares: a nested function's code, or what a partial wraps.
_nested_seen: dict[tuple[Any, str, Any], weakref.ref[Any]] = {}
_nested_lock = threading.Lock()


def _warn_if_rebuilt_closure(cls: type[AbstractWarpModule], module: AbstractWarpModule) -> None:
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
        if not (_is_nested(func) or isinstance(func, functools.partial)) or (cls._what, field.name) in _warned:
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


def _rebuild_origin(func: Any) -> Any:
    """What every build of ``func`` shares: a nested function's code; for a partial, the origin of its function."""
    if _is_nested(func):
        return func.__code__
    if isinstance(func, functools.partial):
        return (functools.partial, _rebuild_origin(func.func))
    return func


# An unassigned captured variable (an empty cell), in `_parts`.
_UNASSIGNED = object()


def _parts(value: Any, depth: int) -> list[tuple[str, Any]] | None:
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


def _cell_value(cell: Any) -> Any:
    """A closure cell's value, or `_UNASSIGNED` for an empty cell."""
    try:
        return cell.cell_contents
    except ValueError:
        return _UNASSIGNED


_Culprit = tuple[tuple[str, ...], str]  # the path of a captured value (names, outermost first), and what it is


def _identity_differences(old: Any, new: Any, path: tuple[str, ...] = (), depth: int = 0) -> list[_Culprit]:
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


def _differences(old: Any, new: Any, path: tuple[str, ...], depth: int, active: frozenset[Any]) -> list[_Culprit]:
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


def _compared_by_identity(old: Any, new: Any) -> str | None:
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
    value: Any, path: tuple[str, ...] = (), depth: int = 0, active: frozenset[int] = frozenset()
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


_warned: set[tuple[str, str]] = set()


def warn_unused_option(what: str, option: str, message: str) -> None:
    """Warn (once per process, module kind and option) about an option: ``"{what}: {option} {message}"``."""
    if (what, option) in _warned:
        return
    _warned.add((what, option))
    warnings.warn(f"{what}: {option} {message}", UserWarning, stacklevel=_user_stacklevel())


def _user_stacklevel() -> int:
    """The ``stacklevel`` of the first frame outside jarp, Equinox and dataclasses (the user's call)."""
    jarp_dir = os.path.dirname(sys.modules[__name__.partition(".")[0]].__file__ or "")  # the top-level package
    internal = (jarp_dir, os.path.dirname(eqx.__file__), "<string>")
    frame, level = sys._getframe(1), 1
    while frame is not None and (
        frame.f_code.co_filename.startswith(internal) or frame.f_code.co_filename.endswith("dataclasses.py")
    ):
        frame, level = frame.f_back, level + 1
    return level
