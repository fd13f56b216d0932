"""Eager dispatch: an un-traced module call runs through one cached executable per module and signature.

Part of the module layer: `AbstractWarpModule.__call__` hands an eager call here,
and the cached executable traces the module's own pipeline (`_trace`) once.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

import equinox as eqx
import jax
import jax.core  # `import jax` loads it, but only this import declares it to type checkers
import numpy as np
import warp as wp

from .._ffi import _errors
from .._plan import _cache_table
from .._plan._static_keys import Static
from .._upstream import _locks

if TYPE_CHECKING:

    class _Module(Protocol):
        """What eager dispatch needs of a module: an `AbstractWarpModule` (named by its shape here: its module
        imports this one), a dataclass with the module's own pipeline."""

        __dataclass_fields__: ClassVar[dict[str, Any]]

        def _trace(self, args: tuple[Any, ...], options: Mapping[str, Any]) -> tuple[jax.Array, ...]: ...


def _thaw(value: object) -> object:
    """Undo `_freeze`'s wrapping of numbers (the frozen form is only for the cache key)."""
    if isinstance(value, Static):
        return value.value
    if isinstance(value, tuple):
        return tuple(_thaw(v) for v in value)
    return value


def _eager_impl(
    module: _Module,
    treedef: jax.tree_util.PyTreeDef,  # pyright: ignore[reportInvalidTypeForm]  # jaxlib ships no stubs
    statics: tuple[object, ...],
    options: tuple[tuple[str, object], ...],
    arrays: list[jax.Array | None],
) -> tuple[jax.Array, ...]:
    # The argument leaves back from `eqx.partition`'s halves: the arrays (traced) and the static leaves (frozen, below).
    leaves = eqx.combine(arrays, [_thaw(v) for v in statics])
    args = jax.tree_util.tree_unflatten(treedef, leaves)
    return module._trace(tuple(args), {k: _thaw(v) for k, v in options if not k.startswith("wp.config.")})


class _Executables:
    """The jitted eager entry of each live module, owned by the module; the most recent ones kept a while.

    A global ``jax.jit`` with the module as a static argument would hold every module it ever
    saw (and so its kernel, its plans, and a kernel whose build failed) in JAX's caches for the
    life of the process. Instead each module gets its own jitted function, which reaches the
    module only through a weak reference and is dropped when the module is collected: JAX's
    caches keyed on that function go with it. A module built again equal to one that was
    collected shortly before (``jax_kernel(k)(x)`` in a loop) is recognised by its hash and its kernel
    (`_rebuilt`) and held among the last ``RECENT`` such modules, so that it does not retrace on every call;
    ``jax.clear_caches()`` releases them.
    """

    RECENT = 16
    DIED = 64  # how many hashes of collected modules are remembered

    def __init__(self) -> None:
        # id(module) -> (weak ref to it, jitted function, box); the box holds a weak reference
        # to a live module among those sharing the function (equal modules share one).
        self._by_id: dict[int, tuple[weakref.ref[Any], Any, list[weakref.ref[Any]]]] = {}
        self._by_value: weakref.WeakKeyDictionary[Any, tuple[Any, list[weakref.ref[Any]]]] = weakref.WeakKeyDictionary()
        self._recent: collections.OrderedDict[int, Any] = collections.OrderedDict()
        self._pinned: set[int] = set()  # ids of live modules rebuilt equal to a collected one
        # (hash, `_witness`) of recently collected modules
        self._died: collections.deque[tuple[int, tuple[weakref.ref[Any], ...] | None]] = collections.deque(
            maxlen=self.DIED
        )
        self._lock = _locks.make("eager")

    def get(self, module: _Module) -> Callable[..., tuple[jax.Array, ...]]:
        """The jitted eager entry of ``module``: ``fn(treedef, statics, options, *arrays)``."""
        entry = self._by_id.get(id(module))
        if entry is not None and entry[0]() is module:
            box = entry[2]
            if box[0]() is None:
                box[0] = entry[0]
            return entry[1]
        with self._lock:
            ref = weakref.ref(module)
            shared = self._by_value.get(module)  # a live module equal to this one: share its function
            if shared is None:
                box = [ref]
                shared = (jax.jit(functools.partial(_weak_impl, box), static_argnums=(0, 1, 2)), box)
                self._by_value[module] = shared
            fn, box = shared
            if box[0]() is None:
                box[0] = ref
            self._by_id[id(module)] = (ref, fn, box)
            digest, witness = hash(module), _witness(module)
            if self._rebuilt(module, digest):
                self._pinned.add(id(module))
            weakref.finalize(module, self._forget, id(module), ref, digest, witness)
        return fn

    def ran(self, module: _Module) -> None:
        """Hold ``module`` among the recent ones if it was rebuilt equal to a collected one (after a success)."""
        recent = self._recent
        if id(module) in recent or id(module) not in self._pinned:
            return
        with self._lock:
            recent[id(module)] = module
            while len(recent) > self.RECENT:
                recent.popitem(last=False)

    def _rebuilt(self, module: _Module, digest: int) -> bool:
        """Whether ``module`` equals one collected recently: the same hash, and the same objects where it
        compares by identity (its kernel).

        The hash alone is not enough: a kernel hashes by its address, which a new kernel often gets once the old
        one is collected (``jax_kernel(make_kernel(i))(x)`` in a loop), and pinning that unrelated module would
        keep it, its kernel and its plans until ``jax.clear_caches()``. An object a collected module compared by
        identity is the same object only if it is still alive (its weak reference resolves to it).
        """
        values = _identity_fields(module)
        return any(
            died == digest
            and witness is not None
            and len(witness) == len(values)
            and all(r() is v for r, v in zip(witness, values, strict=True))
            for died, witness in tuple(self._died)  # a copy: a finaliser may append on any thread
        )

    def _forget(
        self, key: int, ref: weakref.ref[Any], digest: int, witness: tuple[weakref.ref[Any], ...] | None
    ) -> None:
        entry = self._by_id.get(key)
        if entry is not None and entry[0] is ref:
            del self._by_id[key]
            self._pinned.discard(key)
        self._died.append((digest, witness))

    def cache_clear(self) -> None:
        """Forget the recent modules (``jax.clear_caches()`` calls this)."""
        with self._lock:
            for key in self._recent:
                self._pinned.discard(key)
            self._recent.clear()


def _identity_fields(module: _Module) -> tuple[object, ...]:
    """The field values of ``module`` that compare and hash by identity (a Warp kernel, a module-level function).

    None (an option left out) hashes by identity too, but is never collected.
    """
    values = (getattr(module, f.name) for f in dataclasses.fields(module))
    return tuple(v for v in values if v is not None and type(v).__hash__ is object.__hash__)


def _witness(module: _Module) -> tuple[weakref.ref[Any], ...] | None:
    """Weak references to `_identity_fields` (None if one cannot be weakly referenced: then no module matches)."""
    try:
        return tuple(weakref.ref(v) for v in _identity_fields(module))
    except TypeError:
        return None


def _weak_impl(box: list[weakref.ref[_Module]], *args: object) -> tuple[jax.Array, ...]:
    # A live module among those sharing this function (all equal): the caller re-pointed the
    # box to itself if the module it held was collected.
    return _eager_impl(box[0](), *args)  # pyright: ignore[reportArgumentType]  # alive: see above


_executables = _Executables()
_cache_table.register(_executables, "jarp.warp eager executables")


# The argument leaves an eager call may key its executable on: arrays, and values compared by value.
_EAGER_LEAVES = (jax.Array, bool, int, float, complex, str, bytes, np.generic, type(None))


def try_eager(module: _Module, args: Sequence[Any], options: dict[str, Any]) -> tuple[jax.Array, ...] | None:
    """Run an eager (un-traced) call through one cached executable per module and signature.

    Returns None when the call is not eligible (a tracer, a non-JAX array or an
    object that is not a pytree among the arguments, or an unhashable option), in
    which case the caller traces it directly. NumPy arrays take the direct path so
    that their dtype is checked before ``jax.jit`` would silently convert it.
    """
    # Struct arguments (dicts, NamedTuples, eqx.Modules of arrays) are pytrees: their arrays are
    # the executable's arguments, their structure and static values part of its key. A struct
    # given as an object that is not a pytree (a plain dataclass or object, a Warp struct instance)
    # is one opaque leaf: keyed by it, the executable would keep the arrays it held at the first
    # call and miss later changes to its fields, so such a call takes the direct path as well.
    # The tree is walked once (this is every eager call's overhead): its structure is part of the executable's key,
    # its leaves are split into the halves `eqx.partition` would give (None in place of the other half's leaves),
    # which `_eager_impl` joins with `eqx.combine`. Not `eqx.partition` itself here: on the flat leaves of a
    # three-argument call it took 17 us, as long as the rest of the call's dispatch (measured, jarp 0.2.0).
    leaves, treedef = jax.tree_util.tree_flatten(tuple(args))
    for a in leaves:
        if isinstance(a, (jax.core.Tracer, np.ndarray)) or not isinstance(a, _EAGER_LEAVES):
            return None
    arrays = [a if isinstance(a, jax.Array) else None for a in leaves]
    try:
        # keyed by identity of meaning (`Static`): 0 == 0.0 == 0j == False would otherwise share a cache
        # entry and skip validation, -0.0 would reuse 0.0's executable, and a NaN would never find its own
        statics = tuple(None if isinstance(a, jax.Array) else _freeze(a) for a in leaves)
        key = tuple(sorted((k, _freeze(v)) for k, v in options.items() if v is not None))
        # Warp settings read at trace time that pick another build of the kernel.
        key += (("wp.config.enable_cpu_blocks", bool(wp.config.enable_cpu_blocks)), ("wp.config.mode", wp.config.mode))
        hash((treedef, statics, key))
    except TypeError:
        return None
    # An exception raised inside the call (a callable's function, an executor) is raised as it was.
    out = _errors.call_reraising(_executables.get(module), treedef, statics, key, arrays)
    _executables.ran(module)
    return out


def _freeze(value: object) -> object:
    """A hashable, plain-Python form of an argument or option value, numbers keyed by `Static`.

    NumPy scalars become Python numbers; a number compares by type and bits (every NaN alike).
    """
    if isinstance(value, dict):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, int, float, complex)):
        return Static(value)
    if isinstance(value, (np.ndarray, jax.Array)):
        raise TypeError("array option")  # not eligible for the eager cache key; traced directly instead
    return value
