"""Caches keyed on user kernels and functions that live exactly as long as those objects.

A ``functools.lru_cache`` keyed on a kernel keeps it alive for the life of the process:
a dropped kernel then stays in its Warp module's live set (Warp rebuilds every live
kernel of a module, so each new kernel's first call gets slower), and a kernel whose
build failed keeps failing its module after the user redefines it. `weak_cache`
instead stores each result with the object it was computed from:

- on a ``wp.Kernel``, a function or a ``functools.partial``, in the object's own
  ``__dict__``: results may then refer back to it (an overload refers to its generic
  parent, an eager executable to its module and so to its kernel) and still be
  collected with it;
- on any other weakly referenceable object, in a ``WeakKeyDictionary``;
- otherwise in a small bounded strong cache (objects that cannot be referenced weakly).

A call that raises caches nothing, so a failed build is retried on the next call.
"""

from __future__ import annotations

import functools
import types
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, ParamSpec, TypeVar

import warp as wp

from .._upstream import _locks
from . import _cache_table

_ATTR = "_jarp_caches"
# Types whose instances keep their caches in their own __dict__ (which their equality ignores).
_ATTRIBUTE_TYPES = (wp.Kernel, types.FunctionType, functools.partial)
_STRONG_MAX = 256

_P = ParamSpec("_P")
_R = TypeVar("_R")


def cache_for(obj: object, name: str) -> dict[Hashable, Any]:
    """The cache dict ``name`` that lives as long as ``obj`` (a kernel, function or other object).

    Args:
        obj: the object the cached values were computed from.
        name: which cache (one dict per name and object).

    Returns:
        A dict, created on first use; it is dropped with ``obj``. For an object that
        can be neither given an attribute nor referenced weakly, a shared bounded dict.
    """
    if isinstance(obj, _ATTRIBUTE_TYPES):
        # Warp copies a kernel's __dict__ into each overload it makes (shallowcopy), so the
        # stored caches carry a weak reference to their owner and are replaced on a copy;
        # and the generation they were made in, so that `_WeakCaches.cache_clear` empties them all.
        entry = obj.__dict__.get(_ATTR)
        if entry is None or entry[0]() is not obj or entry[2] != _generation[0]:
            entry = obj.__dict__[_ATTR] = (weakref.ref(obj), {}, _generation[0])
        return entry[1].setdefault(name, {})
    store = _WEAK.setdefault(name, weakref.WeakKeyDictionary())
    try:
        caches = store.get(obj)
        if caches is None:
            caches = store.setdefault(obj, {})
        return caches
    except TypeError:  # not weakly referenceable (or unhashable): bounded strong cache
        return _strong(name, obj)


_WEAK: dict[str, weakref.WeakKeyDictionary[Any, dict[Hashable, Any]]] = {}
_STRONG: OrderedDict[tuple[str, type, Any], dict[Hashable, Any]] = OrderedDict()
_strong_lock = _locks.make("weak_cache")
_generation = [0]


class _WeakCaches:
    """All weak caches, as one entry of the cache table."""

    @staticmethod
    def cache_clear() -> None:
        with _strong_lock:
            _generation[0] += 1  # the caches kept on kernels and functions are dropped when next looked up
            _WEAK.clear()
            _STRONG.clear()


_cache_table.register(_WeakCaches, "jarp.warp weak caches (per kernel and function)")


def _strong(name: str, obj: object) -> dict[Hashable, Any]:
    key = (name, type(obj), obj)
    try:
        hash(key)
    except TypeError:
        return {}  # unhashable: nothing to key on, computed afresh each time
    with _strong_lock:
        caches = _STRONG.get(key)
        if caches is None:
            caches = _STRONG[key] = {}
            if len(_STRONG) > _STRONG_MAX:
                _STRONG.popitem(last=False)
        else:
            _STRONG.move_to_end(key)
        return caches


def weak_cache(fn: Callable[_P, _R] | None = None, *, lock: Callable[[], Any] | None = None) -> Any:
    """Cache ``fn(obj, *args)`` with ``obj`` (see `cache_for`); ``args`` must be hashable.

    Arguments are keyed with their types, as ``functools.lru_cache(typed=True)`` does.
    Exceptions are not cached.

    Args:
        fn: the function to cache (omit it to get a decorator).
        lock: returns a lock to compute a missing value under (checked again once held),
            so that two threads never build the same value twice.

    Example:
        ```python
        @weak_cache(lock=_internals.warp_lock)
        def variant(kernel, names):
            return build_variant(kernel, names)
        ```
    """
    if fn is None:
        return functools.partial(weak_cache, lock=lock)
    name = f"{fn.__module__}.{fn.__qualname__}"

    @functools.wraps(fn)
    def wrapper(obj: object, *args: object) -> Any:
        cache = cache_for(obj, name)
        key = (*args, *(type(a) for a in args))
        try:
            return cache[key]
        except KeyError:
            pass
        if lock is None:
            return cache.setdefault(key, fn(obj, *args))  # type: ignore[call-arg]
        with lock():
            try:
                return cache[key]
            except KeyError:
                return cache.setdefault(key, fn(obj, *args))  # type: ignore[call-arg]

    return wrapper
