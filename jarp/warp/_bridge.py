"""`patch_warp`: Warp's JAX bridge entry points pointed at jarp's, for libraries written against Warp's bridge.

A library that does ``from warp import jax_callable`` or ``wp.jax_kernel(kernel, 2)`` calls Warp's functions, with
Warp's positional parameters. `patch_warp` replaces those functions, in every module of the ``warp`` package that
holds them, by adapters: each binds a call against the signature of the Warp function it replaces and forwards every
argument by keyword, with Warp's meaning and Warp's defaults, to `jarp.warp.jax_kernel`, `jarp.warp.jax_callable` or
`jarp.warp.register_ffi_callback`. An option that jarp does not implement raises `UnsupportedWarpOptionError`
instead of being dropped. The tables below name every parameter of Warp's functions and what becomes of it;
``tests/warp/compat/test_bridge_signatures.py`` compares them with the installed Warp, so that a parameter a Warp
upgrade adds fails there first.

Warp's bridge is found as the module that defines ``wp.jax_kernel`` (its ``__module__``), so no private module name
is spelled here; ``register_ffi_callback`` is taken from that module.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
import sys
import types
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import warp as wp

from ._callable import jax_callable as _jarp_jax_callable
from ._ffi._user_callback import register_ffi_callback as _jarp_register_ffi_callback
from ._kernel import jax_kernel as _jarp_jax_kernel
from ._upstream import _locks

_EMPTY = inspect.Parameter.empty


class UnsupportedWarpOptionError(TypeError):
    """A Warp bridge option that jarp does not implement, passed to an entry point that `patch_warp` installed.

    Raised when the call is made (the module is built), naming the option, the value and what to do instead. Only
    values other than Warp's default are refused: at its default such an option means what jarp does anyway.

    Example:
        ```python
        with jarp.warp.patch_warp():
            try:
                wp.jax_kernel(kernel, some_future_option=1)  # a parameter of a newer Warp
            except jarp.warp.UnsupportedWarpOptionError as e:
                print(e)
        ```
    """


class _Pass(enum.Enum):
    """What an adapter does with one parameter of Warp's function."""

    TARGET = "the kernel or function: jarp's first positional parameter"
    KEYWORD = "forwarded by keyword, under the same name and with the same meaning"
    IF_SET = (
        "forwarded only when it differs from Warp's default (an option jarp accepts for compatibility, stores and "
        "does not act on; forwarding Warp's default would only make jarp warn)"
    )


@dataclasses.dataclass(frozen=True)
class _Param:
    """One parameter of Warp's function: how it is passed, and Warp's default the table was written against."""

    how: _Pass
    warp_default: Any = _EMPTY  # as in Warp's signature; inspect.Parameter.empty: required


@dataclasses.dataclass(frozen=True)
class _EntryPoint:
    """One of Warp's bridge functions and the jarp function its adapter calls."""

    name: str
    jarp: Callable[..., Any]
    params: Mapping[str, _Param]


_PRELOAD = wp.JaxModulePreloadMode.CURRENT_DEVICE

#: Every parameter of Warp's bridge functions (Warp 1.19) and what the adapters do with it.
ENTRY_POINTS: dict[str, _EntryPoint] = {
    "jax_kernel": _EntryPoint(
        "jax_kernel",
        _jarp_jax_kernel,
        {
            "kernel": _Param(_Pass.TARGET),
            "num_outputs": _Param(_Pass.KEYWORD, 1),
            "vmap_method": _Param(_Pass.KEYWORD, "broadcast_all"),
            "launch_dims": _Param(_Pass.KEYWORD, None),
            "output_dims": _Param(_Pass.KEYWORD, None),
            "in_out_argnames": _Param(_Pass.KEYWORD, None),
            "module_preload_mode": _Param(_Pass.KEYWORD, _PRELOAD),
            "enable_backward": _Param(_Pass.KEYWORD, False),
            "has_side_effect": _Param(_Pass.KEYWORD, False),
            "block_dim": _Param(_Pass.KEYWORD, None),
        },
    ),
    "jax_callable": _EntryPoint(
        "jax_callable",
        _jarp_jax_callable,
        {
            "func": _Param(_Pass.TARGET),
            "num_outputs": _Param(_Pass.KEYWORD, 1),
            "graph_mode": _Param(_Pass.KEYWORD, wp.JaxCallableGraphMode.JAX),
            "vmap_method": _Param(_Pass.KEYWORD, "broadcast_all"),
            "output_dims": _Param(_Pass.KEYWORD, None),
            "in_out_argnames": _Param(_Pass.KEYWORD, None),
            "stage_in_argnames": _Param(_Pass.IF_SET, None),
            "stage_out_argnames": _Param(_Pass.IF_SET, None),
            "graph_cache_max": _Param(_Pass.IF_SET, 32),
            "module_preload_mode": _Param(_Pass.KEYWORD, _PRELOAD),
            "has_side_effect": _Param(_Pass.KEYWORD, False),
        },
    ),
    "register_ffi_callback": _EntryPoint(
        "register_ffi_callback",
        _jarp_register_ffi_callback,
        {
            "name": _Param(_Pass.KEYWORD),
            "func": _Param(_Pass.KEYWORD),
            "graph_compatible": _Param(_Pass.KEYWORD, True),
        },
    ),
}

_MARK = "__jarp_bridge_adapter__"  # set on the adapters: the name of the entry point


def _is_default(value: object, default: object) -> bool:
    if value is default:
        return True
    try:
        return bool(value == default)
    except Exception:  # an array or an object whose == does not give a truth value
        return False


def _forward(entry: _EntryPoint, signature: inspect.Signature, arguments: Mapping[str, Any]) -> Any:
    """Call jarp's function with the arguments of one call bound against Warp's ``signature`` (defaults applied)."""
    target: tuple[Any, ...] = ()
    keywords: dict[str, Any] = {}
    for name, value in arguments.items():
        param = entry.params.get(name)
        default = signature.parameters[name].default
        if param is None:
            if _is_default(value, default):
                continue  # a parameter of a newer Warp, left at its default: Warp's behaviour before it existed
            raise UnsupportedWarpOptionError(
                f"wp.{entry.name}({name}={value!r}): {name} is a parameter of the installed Warp's {entry.name} that "
                f"jarp's adapter (jarp.warp.patch_warp) does not know, so jarp cannot give it Warp's meaning. Leave it "
                "at its default, or call jarp.warp.unpatch_warp() to use Warp's bridge."
            )
        if param.how is _Pass.TARGET:
            target = (value,)
        elif param.how is _Pass.KEYWORD or not _is_default(value, default):
            keywords[name] = value
    return entry.jarp(*target, **keywords)


def _make_adapter(entry: _EntryPoint, original: Callable[..., Any]) -> Callable[..., Any]:
    """A function with ``original``'s signature that runs jarp's ``entry.jarp``."""
    signature = inspect.signature(original)

    @functools.wraps(original)  # Warp's name and signature (``__wrapped__``), for introspection
    def adapter(*args: object, **kwargs: object) -> Any:
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError as exc:
            names = ", ".join(signature.parameters)
            raise TypeError(f"wp.{entry.name}(): {exc} (Warp's parameters: {names}).") from None
        bound.apply_defaults()
        return _forward(entry, signature, bound.arguments)

    adapter.__module__ = __name__
    adapter.__doc__ = (
        f"Warp's ``{entry.name}`` signature, run by `jarp.warp.{entry.name}` (installed by `jarp.warp.patch_warp`)."
    )
    setattr(adapter, _MARK, entry.name)
    return adapter


def is_adapter(value: object) -> bool:
    """Whether ``value`` is one of the functions `patch_warp` installs in place of Warp's."""
    return isinstance(getattr(value, _MARK, None), str)


# ----------------------------------------------------------------------------------------------------------------------
# The switch
# ----------------------------------------------------------------------------------------------------------------------

_lock = _locks.make("bridge")
_adapters: dict[str, Callable[..., Any]] = {}  # by entry point name; built from Warp's functions once per process
_originals: dict[str, Callable[..., Any]] = {}
_patched: dict[tuple[int, str], tuple[types.ModuleType, str, Callable[..., Any]]] = {}  # (module, attribute, original)
_holders: set[WarpPatch] = set()


def _warp_originals() -> dict[str, Callable[..., Any]]:
    """Warp's own bridge functions, by name: those of the module that defines ``wp.jax_kernel``."""
    kernel = wp.jax_kernel
    bridge = sys.modules.get(getattr(kernel, "__module__", None) or "")
    if is_adapter(kernel) or bridge is None or not (bridge.__name__ == "warp" or bridge.__name__.startswith("warp.")):
        raise RuntimeError(
            f"jarp.warp.patch_warp: wp.jax_kernel is {kernel!r}, not Warp's own function (something else replaced "
            "it); restore Warp's before patching."
        )
    found = {name: getattr(bridge, name, None) for name in ENTRY_POINTS}
    if found["jax_callable"] is not wp.jax_callable:
        raise RuntimeError(
            f"jarp.warp.patch_warp: {bridge.__name__}, which defines wp.jax_kernel, does not define wp.jax_callable; "
            "this Warp's bridge is laid out differently from the ones jarp knows."
        )
    return {name: fn for name, fn in found.items() if callable(fn)}


def _warp_modules() -> list[types.ModuleType]:
    return [
        module
        for name, module in list(sys.modules.items())
        if (name == "warp" or name.startswith("warp.")) and isinstance(module, types.ModuleType)
    ]


def _as_module(module: types.ModuleType | str) -> types.ModuleType:
    if isinstance(module, types.ModuleType):
        return module
    found = sys.modules.get(module)
    if not isinstance(found, types.ModuleType):
        raise ValueError(f"jarp.warp.patch_warp: modules names {module!r}, which is not imported.")
    return found


def _install(modules: Iterable[types.ModuleType]) -> None:
    """Point every attribute of ``modules`` that is one of Warp's originals at its adapter (under `_lock`)."""
    by_id = {id(fn): (fn, _adapters[name]) for name, fn in _originals.items()}
    for module in modules:
        for attribute, value in list(vars(module).items()):
            pair = by_id.get(id(value))
            if pair is None or pair[0] is not value:
                continue
            setattr(module, attribute, pair[1])
            _patched[(id(module), attribute)] = (module, attribute, value)


def _restore() -> None:
    """Give every patched attribute back its original, also in Warp modules imported meanwhile (under `_lock`)."""
    originals = {id(_adapters[name]): fn for name, fn in _originals.items()}
    for module, attribute, original in list(_patched.values()):
        if originals.get(id(getattr(module, attribute, None))) is original:  # not rebound by someone else since
            setattr(module, attribute, original)
    for module in _warp_modules():
        for attribute, value in list(vars(module).items()):
            if is_adapter(value) and id(value) in originals:
                setattr(module, attribute, originals[id(value)])
    _patched.clear()


def _patched_names() -> tuple[str, ...]:
    return tuple(sorted(f"{module.__name__}.{attribute}" for module, attribute, _ in _patched.values()))


class WarpPatch:
    """What `patch_warp` returns: a hold on the switch, usable as a context manager.

    Warp's entry points stay jarp's while any hold is active; `undo` (or leaving the ``with`` block) releases this
    one, and the last release restores Warp's functions. `unpatch_warp` restores them at once and releases every hold.

    Example:
        ```python
        with jarp.warp.patch_warp() as patch:
            import some_warp_library  # its `from warp import jax_callable` gets jarp's

            print(patch.replaced)  # ('warp._src.jax.ffi.jax_callable', ..., 'warp.jax_kernel')
        ```
    """

    def __init__(self) -> None:
        self._active = True

    @property
    def active(self) -> bool:
        """Whether this hold is still in effect (not undone, and no `unpatch_warp` since)."""
        return self._active

    @property
    def replaced(self) -> tuple[str, ...]:
        """The attributes that hold jarp's adapters now, as ``"module.attribute"`` (empty once restored)."""
        with _lock:
            return _patched_names()

    def undo(self) -> None:
        """Release this hold; when it was the last, restore Warp's functions. Idempotent."""
        with _lock:
            if not self._active:
                return
            self._active = False
            _holders.discard(self)
            if not _holders:
                _restore()

    def __enter__(self) -> WarpPatch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.undo()

    def __repr__(self) -> str:
        return f"WarpPatch(active={self._active})"


def patch_warp(*, modules: Iterable[types.ModuleType | str] = ()) -> WarpPatch:
    """Point Warp's JAX bridge entry points at jarp's, for libraries written against Warp's bridge.

    ``wp.jax_kernel``, ``wp.jax_callable`` and ``register_ffi_callback``, in the module of Warp that defines them and in
    every other module of the ``warp`` package that holds them, become adapters that take Warp's parameters
    (positional ones included, with Warp's defaults, such as ``vmap_method="broadcast_all"``) and build jarp's
    modules (`jarp.warp.JaxKernel`, `jarp.warp.JaxCallable`) or register through `jarp.warp.register_ffi_callback`.
    A Warp option jarp does not implement raises `UnsupportedWarpOptionError` when given a value other than Warp's
    default.

    Apply it **before** importing a library that does ``from warp import jax_callable`` or builds its wrappers at
    import time: a name bound, or a wrapper built, before the switch stays Warp's. For a library imported already,
    pass it in ``modules``: its module-level names bound to Warp's functions are repointed too (wrappers it built
    already stay Warp's). A library imported while the switch is on keeps jarp's adapters after it is undone.

    Idempotent: while the switch is on, another call only repoints what is new (Warp modules imported since, and
    ``modules``) and returns another hold on it. Thread-safe (one lock).

    Args:
        modules: modules (or names of imported modules) outside Warp whose attributes bound to Warp's bridge
            functions are to be repointed as well; restored with the rest.

    Returns:
        A `WarpPatch`: its `WarpPatch.undo` (or the end of a ``with`` block) releases this hold, and the last hold
        released restores Warp's functions.

    Raises:
        RuntimeError: If ``wp.jax_kernel`` is not Warp's own function (something else replaced it).
        ValueError: If a name in ``modules`` is not an imported module.

    Example:
        ```python
        import jarp.warp

        jarp.warp.patch_warp()
        import warp_physics_library  # written for wp.jax_kernel / wp.jax_callable; now runs on jarp

        state = warp_physics_library.step(state)
        ```
    """
    extra = [_as_module(m) for m in modules]
    with _lock:
        if not _originals:
            _originals.update(_warp_originals())
            for name, fn in _originals.items():
                _adapters.setdefault(name, _make_adapter(ENTRY_POINTS[name], fn))
        elif not _patched and not is_adapter(wp.jax_kernel) and wp.jax_kernel is not _originals["jax_kernel"]:
            raise RuntimeError(
                f"jarp.warp.patch_warp: wp.jax_kernel is {wp.jax_kernel!r}, not Warp's own function (something "
                "else replaced it); restore Warp's before patching."
            )
        _install([*_warp_modules(), *extra])
        hold = WarpPatch()
        _holders.add(hold)
        return hold


def unpatch_warp() -> bool:
    """Restore Warp's own bridge functions wherever `patch_warp` replaced them, and release every hold.

    Attributes that something else rebound in the meantime are left alone. Idempotent.

    Returns:
        Whether the switch was on.

    Example:
        ```python
        jarp.warp.patch_warp()
        ...
        jarp.warp.unpatch_warp()
        assert wp.jax_kernel is warp._src.jax.ffi.jax_kernel
        ```
    """
    with _lock:
        was_on = bool(_holders) or bool(_patched)
        for hold in list(_holders):
            hold._active = False
        _holders.clear()
        _restore()
        return was_on
