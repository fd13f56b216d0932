"""`JaxCallable`: a Python function that launches Warp kernels, as an immutable Equinox module."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Unpack, overload

import equinox as eqx
import numpy as np
import warp as wp

from . import _geometry
from ._ffi import _executors
from ._module._base import AbstractWarpModule
from ._module._factory import make_module
from ._module._option_fields import (
    enable_backward_field,
    in_out_argnames_field,
    module_preload_mode_field,
    output_dims_field,
    value_callable_field,
)
from ._module._option_warnings import warn_unused_option
from ._module._value_callables import value_callable
from ._options import JaxCallableOptions
from ._plan import _annotations, _dims
from ._plan._binding import BoundCall, warp_dtypes
from ._plan._builder import build_plan, protect_inputs
from ._plan._normalize import tuple_of_str
from ._plan._signature import Signature, make_signature
from ._plan._values import Plan, Runs
from ._plan._weakcache import weak_cache

_WHAT = "jax_callable()"


@weak_cache
def _signature(func: Callable[..., Any], num_outputs: int, in_out_argnames: tuple[str, ...]) -> Signature:
    params = _annotations.function_params(func, _WHAT)
    return make_signature(params, num_outputs, in_out_argnames, what=_WHAT, structures=True)


# Under Warp's lock: factories typically define kernels and Warp functions. The executors' lock first (the lock
# order of `_ffi._locks`): a factory may call a jarp module, whose executor is prepared under that lock.
@weak_cache(lock=_executors.build_lock)
def _specialise(factory: Callable[..., Any], dtypes: tuple[Any, ...]) -> Callable[..., Any]:
    func = _annotations.call_factory(factory, *dtypes)  # records its locals for string annotations
    if not callable(func):
        raise TypeError(
            f"{_WHAT}: the generic factory {callable_name(factory)} returned {func!r} for dtypes "
            f"{[getattr(d, '__name__', d) for d in dtypes]}; it must return an annotated function."
        )
    return func


def _set_of_str(value: Any) -> frozenset[str]:
    return frozenset(tuple_of_str(value))


class JaxCallable(AbstractWarpModule):
    """A Warp-launching Python function wrapped as a JAX-callable, immutable Equinox module.

    Build it with `jarp.warp.jax_callable`. The function is annotated like a Warp
    kernel (inputs, then outputs) and launches kernels with ``wp.launch`` on the
    Warp arrays it receives, which wrap XLA's buffers without copies. All fields
    are static, so the module has no array leaves and compares by value. Calling it
    returns the outputs (in-out arguments first, then the pure outputs, zero-filled
    before the function runs)::

        module(*args, output_dims=None, vmap_method=None)

    ``args`` has one value per input parameter (in-out included): arrays for array
    parameters, Python numbers for scalars (static). ``output_dims`` defaults to the
    first array input's Warp shape.

    Attributes:
        func: a function annotated like a Warp kernel (inputs, then outputs) that
            launches Warp kernels on its arguments. With ``generic=True``, a factory
            taking one Warp scalar dtype per argument and returning such a function
            (resolved once per dtype signature). Any hashable callable works: a
            function, or a callable object compared by value (an ``eqx.Module`` with
            static fields, a ``functools.partial`` over hashable values), so a model
            that builds its function per instance rebuilds equal and does not retrace.
        generic: treat ``func`` as a dtype factory.
        num_outputs: how many trailing parameters are outputs, in-out ones included.
        graph_mode: CUDA graph capture. ``JAX`` (default) lets XLA capture the call
            in its command buffers (the function then runs inside
            ``wp.ScopedCapture(external=True)``, as in Warp's bridge); ``NONE`` keeps it out of graphs (use it when the
            function synchronises with the host). Warp's own capture modes (``WARP``,
            ``WARP_STAGED``, ``WARP_STAGED_EX``: Warp captures the function's launches into
            a CUDA graph and replays it) are captured by XLA instead, like ``JAX``: the
            function's launches are recorded once into XLA's command buffer and replayed,
            never launched from Python on every call; a warning at construction says so.
        vmap_method: ``"sequential"`` (default: one call per batch slice, all inside
            one FFI call), ``"broadcast_all"``, or None: no batching rule, as in Warp's
            bridge (the caller batches the call itself; ``jax.vmap`` over it is an error).
        output_dims: default dims of the pure outputs (int, tuple, or dict by name);
            otherwise the first array input's Warp shape.
        in_out_argnames: inputs updated in place and returned.
        stage_in_argnames: accepted for compatibility with Warp's staged graph modes
            (warns once when set; jarp does not stage).
        stage_out_argnames: as ``stage_in_argnames``.
        graph_cache_max: accepted for compatibility with Warp's graph modes (warns
            once when set).
        module_preload_mode: accepted for compatibility; kernels the function
            launches load on first use.
        has_side_effect: keep the call even when its outputs are unused.
        enable_backward: make the module differentiable in reverse mode: the backward
            pass runs ``func`` again under a ``wp.Tape`` (each array's ``.grad`` wrapping
            jarp's cotangent buffers) and plays the tape back. Intermediate arrays that
            ``func`` allocates need ``requires_grad=True``.
        protect_inputs: give ``func`` private copies of its (non in-out) array inputs, so
            that a function writing into an input cannot change the caller's array. jarp
            cannot see inside a Python function (for kernels it proves the absence of such
            writes instead), so this is on by default; XLA skips the copy where the input
            is dead after the call. Turn it off for functions known not to write inputs.
        jvp: forward-mode rule, as for `jarp.warp.JaxKernel`.
        vjp: reverse-mode rule, as for `jarp.warp.JaxKernel`.
    """

    _what: ClassVar[str] = _WHAT
    _call_options: ClassVar[tuple[str, ...]] = ("output_dims", "vmap_method")
    _runtime_scalars: ClassVar[bool] = False

    func: Callable[..., Any] = eqx.field(static=True, converter=value_callable)
    generic: bool = eqx.field(static=True, default=False, converter=bool)
    num_outputs: int = eqx.field(static=True, default=1)
    graph_mode: wp.JaxCallableGraphMode = eqx.field(
        static=True, default=wp.JaxCallableGraphMode.JAX, converter=wp.JaxCallableGraphMode
    )
    vmap_method: str | None = eqx.field(static=True, default="sequential")
    output_dims: Any = output_dims_field(_WHAT)
    in_out_argnames: tuple[str, ...] = in_out_argnames_field()
    # sets, as Warp stores them (its tests compare them with sets)
    stage_in_argnames: frozenset[str] = eqx.field(static=True, default=frozenset(), converter=_set_of_str)
    stage_out_argnames: frozenset[str] = eqx.field(static=True, default=frozenset(), converter=_set_of_str)
    graph_cache_max: int | None = eqx.field(static=True, default=None)
    module_preload_mode: wp.JaxModulePreloadMode = module_preload_mode_field()
    has_side_effect: bool = eqx.field(static=True, default=False, converter=bool)
    enable_backward: bool = enable_backward_field()
    protect_inputs: bool = eqx.field(static=True, default=True, converter=bool)
    jvp: Callable[..., Any] | None = value_callable_field()
    vjp: Callable[..., Any] | None = value_callable_field()

    def __check_init__(self) -> None:
        if not callable(self.func):
            raise TypeError(f"{_WHAT}: func must be a function, got {type(self.func).__name__}.")
        if self.graph_cache_max is not None and (
            isinstance(self.graph_cache_max, bool)
            or not isinstance(self.graph_cache_max, int)
            or self.graph_cache_max < 1
        ):
            raise ValueError(f"{_WHAT}: graph_cache_max must be a positive int or None, got {self.graph_cache_max!r}.")
        if not self.generic:
            sig = _signature(self.func, self.num_outputs, self.in_out_argnames)
            names = {p.name for p in sig.params}
            for option in ("stage_in_argnames", "stage_out_argnames"):
                unknown = [n for n in getattr(self, option) if n not in names]
                if unknown:
                    raise ValueError(f"{_WHAT}: {option} names {unknown}, which are not parameters ({sorted(names)}).")
        if self.graph_mode not in (wp.JaxCallableGraphMode.JAX, wp.JaxCallableGraphMode.NONE):
            warn_unused_option(
                _WHAT,
                f"graph_mode={self.graph_mode.name}",
                "is accepted for compatibility with Warp's bridge, but jarp does no Warp-side graph capture: on CUDA "
                "the call is captured by XLA's command buffers instead, like graph_mode=JAX (its launches are "
                "recorded once and replayed, not launched from Python on every call). Use graph_mode=NONE if the "
                "function must run on the host at every call.",
            )
        for option in ("stage_in_argnames", "stage_out_argnames", "graph_cache_max"):
            if getattr(self, option):
                warn_unused_option(
                    _WHAT,
                    option,
                    "is accepted for compatibility with Warp's staged graph modes, but jarp does not act on it.",
                )

    def _unresolved_target(self) -> Any:
        return self.func

    def _annotated_target(self) -> Any:
        return None if self.generic else self.func  # a generic factory's functions exist per dtype signature

    def _target_for(self, args: tuple[Any, ...]) -> Callable[..., Any]:
        return _specialise(self.func, warp_dtypes(args)) if self.generic else self.func

    def _signature(self, target: Callable[..., Any]) -> Signature:
        return _signature(target, self.num_outputs, self.in_out_argnames)

    def _label(self, target: Callable[..., Any]) -> str:
        return _label(target) or f"{_WHAT} {callable_name(target)}"

    def _call_with_structures(self, args: tuple[Any, ...], options: Mapping[str, Any]) -> tuple[Any, ...]:
        target = self._target_for(args)
        what = self._label(target)
        params = _annotations.function_params(target, _WHAT)
        sig = self._signature(target)
        if len(args) != sig.num_inputs:
            names = ", ".join(p.name for p in sig.inputs) or "none"
            raise TypeError(f"{what} takes {sig.num_inputs} input(s) ({names}), got {len(args)}.")
        _geometry.check_places(params, args, what, kernel=False)
        dims = self._output_dims(options, what)
        if dims is None and sig.outputs:
            # the default stays the first array input's Warp shape among the caller's arguments, not a structure's
            first = next((a for spec, a in zip(sig.inputs, args, strict=True) if spec.is_array), None)
            if first is None:
                raise ValueError(f"{what}: no array input to take the outputs' dims from; pass output_dims=...")
            spec = next(spec for spec in sig.inputs if spec.is_array)
            dims = tuple(np.shape(first)[: spec.warp_ndim])
        return _geometry.launch(
            structure_callable,
            target,
            params,
            args,
            what,
            launch=None,
            drops=_geometry.CALLABLE_DROPS if self.enable_backward else None,
            num_outputs=self.num_outputs,
            in_out_argnames=self.in_out_argnames,
            output_dims=dims,
            enable_backward=self.enable_backward,
            protect_inputs=self.protect_inputs,
            has_side_effect=self.has_side_effect,
        )

    def _plan(self, target: Callable[..., Any], bound: BoundCall, options: Mapping[str, Any], what: str) -> Plan:
        results = _dims.result_buffers(bound, self._output_dims(options, what), _dims.default_launch_dims(bound), what)
        plan = build_plan(
            Runs.CALLABLE,
            target,
            bound.sig,
            bound,
            results,
            (),
            has_side_effect=self.has_side_effect,
            # Warp's own capture modes are captured by XLA (see the warning at construction)
            graph_compatible=self.graph_mode != wp.JaxCallableGraphMode.NONE,
            name=_label(target) or f"jax_callable({callable_name(target)})",
        )
        return protect_inputs(plan) if self.protect_inputs else plan


def structure_callable(func: Callable[..., Any], **options: Any) -> JaxCallable:
    """The callable that runs a module call given Warp structures (`_geometry.launch`).

    jarp's Python path, one call per ``vmap`` slice (each slice builds its own structure), and outside CUDA graphs
    (a build allocates).
    """
    # by keyword: type checkers place Equinox's AbstractVar fields of the base first in the constructor
    return JaxCallable(func=func, graph_mode=wp.JaxCallableGraphMode.NONE, vmap_method="sequential", **options)


def _label(target: object) -> str | None:
    """The name of the module the user called, for the launcher of a call given Warp structures (`_geometry`)."""
    label = getattr(target, "jarp_label", None)
    return label if isinstance(label, str) else None


def callable_name(func: Callable[..., Any]) -> str:
    """A readable name of a function or callable object, for messages and inspection."""
    name = getattr(func, "__qualname__", None)
    if name is None and isinstance(func, functools.partial):
        return f"partial({callable_name(func.func)})"
    return name if name is not None else type(func).__qualname__


@overload
def jax_callable(
    func: None = None, **options: Unpack[JaxCallableOptions]
) -> Callable[[Callable[..., Any]], JaxCallable]: ...
@overload
def jax_callable(func: Callable[..., Any], **options: Unpack[JaxCallableOptions]) -> JaxCallable: ...
def jax_callable(
    func: Callable[..., Any] | None = None, **options: Unpack[JaxCallableOptions]
) -> JaxCallable | Callable[[Callable[..., Any]], JaxCallable]:
    """Wrap a Warp-launching Python function as a `JaxCallable` module callable from JAX.

    Calling it again with equal arguments returns the same module while that one is
    alive.

    Args:
        func: a function annotated like a Warp kernel (inputs, then outputs) that
            launches Warp kernels on its arguments (see `JaxCallable.func`). Omit it
            to get a decorator.
        **options: the module's options (keyword only), described under `JaxCallable`:
            ``generic``, ``num_outputs``, ``graph_mode``, ``vmap_method``,
            ``output_dims``, ``in_out_argnames``, ``stage_in_argnames``,
            ``stage_out_argnames``, ``graph_cache_max``, ``module_preload_mode``,
            ``has_side_effect``, ``enable_backward``, ``protect_inputs``, ``jvp``, ``vjp``.

    Returns:
        A `JaxCallable`, or a decorator producing one when ``func`` is omitted.

    Example:
        ```python
        def scale(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
            wp.launch(scale_kernel, dim=a.shape, inputs=[a, s], outputs=[out])

        (out,) = jarp.warp.jax_callable(scale)(jnp.ones(8), 2.0)
        ```
    """
    if func is None:
        return lambda f: make_module(JaxCallable, f, dict(options))
    return make_module(JaxCallable, func, dict(options))
