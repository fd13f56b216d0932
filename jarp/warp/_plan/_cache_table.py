"""Every cache jarp keeps, in one table: cleared together by `clear` (`jarp.warp.clear_caches`) and by JAX's own
``jax.clear_caches()``.

A cache is anything with a ``cache_clear()`` method: a ``functools.lru_cache``, jarp's weak caches (`_weakcache`,
whose entries live on the kernels and functions they were computed from), the eager executables, the plan registry.
Each module registers its caches where it defines them (`register`); `tests/warp/test_caches.py` checks that every
``functools.lru_cache`` in jarp is here. Warp's vector and matrix types that `jarp.warp.types` interns are not a cache:
clearing them would make ``vec(3, float32)`` a different type from one made before.
"""

from __future__ import annotations

from typing import Any, Protocol

from .._upstream import _jax_internals, _locks


class Clearable(Protocol):
    """What the table holds: something that can be emptied."""

    def cache_clear(self) -> None: ...


_TABLE: dict[str, Clearable] = {}
_lock = _locks.make("cache_table")


def register(cache: Clearable, name: str) -> None:
    """Add ``cache`` to the table under ``name`` (one per name), and have ``jax.clear_caches()`` clear it too.

    Args:
        cache: an object with ``cache_clear()``, kept alive by the table.
        name: how `names` lists it (``"jarp.warp._plan._analysis._generated.write_sites"``).
    """
    with _lock:
        if name in _TABLE and _TABLE[name] is not cache:
            raise ValueError(f"jarp: a cache named {name!r} is registered already")
        _TABLE[name] = cache
    _jax_internals.clear_with_jax(cache, name)


def register_function(fn: Any) -> Any:
    """Register a ``functools.lru_cache``-wrapped function under its qualified name; return it (a decorator)."""
    register(fn, f"{fn.__module__}.{fn.__qualname__}")
    return fn


def names() -> tuple[str, ...]:
    """The registered caches' names, sorted."""
    with _lock:
        return tuple(sorted(_TABLE))


def clear() -> None:
    """Empty every registered cache."""
    with _lock:
        caches = list(_TABLE.values())
    for cache in caches:
        cache.cache_clear()
