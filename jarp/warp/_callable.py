"""`JaxCallable`: a Python function that launches Warp kernels, as an immutable Equinox module."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable
from typing import Any, Literal, overload

import equinox as eqx
import jax
import warp as wp

from . import _annotations, _call, _rules
from ._options import GraphMode, ModulePreloadMode, ShapeLike, VmapMethod
from ._primitive import CallConfig
from ._signature import Signature, check_vmap_method, make_signature, normalize_output_dims, tuple_of_str

_WHAT = "jax_callable()"


@functools.lru_cache(maxsize=1024, typed=True)
def _signature(func: Callable[..., Any], num_outputs: int, in_out_argnames: tuple[str, ...]) -> Signature:
    return make_signature(_annotations.function_params(func, _WHAT), num_outputs, in_out_argnames, what=_WHAT)


@functools.lru_cache(maxsize=1024, typed=True)
def _specialise(factory: Callable[..., Any], dtypes: tuple[Any, ...]) -> Callable[..., Any]:
    func = _annotations.call_factory(factory, *dtypes)  # records its locals for string annotations
    if not callable(func):
        raise TypeError(
            f"{_WHAT}: the generic factory {_call.callable_name(factory)} returned {func!r} for dtypes "
            f"{[getattr(d, '__name__', d) for d in dtypes]}; it must return an annotated function."
        )
    return func


class JaxCallable(eqx.Module):
    """A Warp-launching Python function wrapped as a JAX-callable, immutable Equinox module.

    Build it with `jarp.warp.jax_callable`. The function is annotated like a Warp
    kernel (inputs, then outputs) and launches kernels with ``wp.launch`` on the
    Warp arrays it receives, which wrap XLA's buffers without copies. All fields
    are static, so the module has no array leaves and compares by value.
    """

    func: Callable[..., Any] = eqx.field(static=True)
    generic: bool = eqx.field(static=True, default=False, converter=bool)
    num_outputs: int = eqx.field(static=True, default=1)
    graph_mode: wp.JaxCallableGraphMode = eqx.field(
        static=True, default=wp.JaxCallableGraphMode.JAX, converter=wp.JaxCallableGraphMode
    )
    vmap_method: str = eqx.field(static=True, default="sequential")
    output_dims: Any = eqx.field(
        static=True, default=None, converter=lambda v: normalize_output_dims(v, f"{_WHAT}: output_dims")
    )
    in_out_argnames: tuple[str, ...] = eqx.field(static=True, default=(), converter=tuple_of_str)
    stage_in_argnames: tuple[str, ...] = eqx.field(static=True, default=(), converter=tuple_of_str)
    stage_out_argnames: tuple[str, ...] = eqx.field(static=True, default=(), converter=tuple_of_str)
    graph_cache_max: int | None = eqx.field(static=True, default=None)
    module_preload_mode: wp.JaxModulePreloadMode = eqx.field(
        static=True, default=wp.JaxModulePreloadMode.CURRENT_DEVICE, converter=wp.JaxModulePreloadMode
    )
    has_side_effect: bool = eqx.field(static=True, default=False, converter=bool)
    enable_backward: bool = eqx.field(static=True, default=False, converter=bool)
    protect_inputs: bool = eqx.field(static=True, default=True, converter=bool)
    jvp: Callable[..., Any] | None = eqx.field(static=True, default=None)
    vjp: Callable[..., Any] | None = eqx.field(static=True, default=None)

    def __check_init__(self) -> None:
        if not callable(self.func):
            raise TypeError(f"{_WHAT}: func must be a function, got {type(self.func).__name__}.")
        check_vmap_method(self.vmap_method, _WHAT)
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

    def __call__(
        self,
        *args: Any,
        output_dims: ShapeLike | dict[str, ShapeLike] | None = None,
        vmap_method: VmapMethod | None = None,
    ) -> tuple[jax.Array, ...]:
        """Call the function on JAX arrays.

        Args:
            *args: one value per input parameter (in-out included): arrays for array
                parameters, Python numbers for scalars.
            output_dims: dims of the pure outputs for this call; by default the first
                array input's Warp shape.
            vmap_method: how this call batches under `jax.vmap`.

        Returns:
            The outputs: in-out arguments first, then the pure outputs (zero-filled
            before the function runs).
        """
        options = {"output_dims": output_dims, "vmap_method": vmap_method}
        out = _call.try_eager(self, args, options)
        return out if out is not None else self.trace_call(*args, **options)

    def trace_call(self, *args: Any, output_dims: Any = None, vmap_method: str | None = None) -> tuple[jax.Array, ...]:
        """Bind the function's call into the current JAX trace (what `__call__` does under `jit`)."""
        if self.jvp is not None or self.vjp is not None:
            bare = dataclasses.replace(self, jvp=None, vjp=None)
            primal = functools.partial(bare.trace_call, output_dims=output_dims, vmap_method=vmap_method)
            return _rules.call_with_rules(primal, args, self.jvp, self.vjp, f"{_WHAT} {_call.callable_name(self.func)}")
        func = self.func
        if self.generic:
            func = _specialise(func, _call.warp_dtypes(args))
        sig = _signature(func, self.num_outputs, self.in_out_argnames)
        what = f"{_WHAT} {_call.callable_name(func)}"
        operands, statics = _call.check_args(sig, args, what)
        out_dims = (
            normalize_output_dims(output_dims, f"{what}: output_dims") if output_dims is not None else self.output_dims
        )
        results = _call.resolve_output_buffers(sig, operands, out_dims, _call.default_launch_dims(sig, operands), what)
        config = CallConfig(check_vmap_method(self.vmap_method if vmap_method is None else vmap_method, what))
        plan = _call.build_plan(
            "callable",
            func,
            sig,
            operands,
            statics,
            results,
            (),
            has_side_effect=self.has_side_effect,
            graph_compatible=self.graph_mode == wp.JaxCallableGraphMode.JAX,
            name=f"jax_callable({_call.callable_name(func)})",
        )
        if self.protect_inputs:
            plan = _call.protect_inputs(plan)
        return _call.launch(plan, config, operands, self.enable_backward)[: len(results)]


@overload
def jax_callable(
    func: None = None, *, generic: bool = False, **kwargs: Any
) -> Callable[[Callable[..., Any]], JaxCallable]: ...
@overload
def jax_callable(func: Callable[..., Any], *, generic: Literal[False] = False, **kwargs: Any) -> JaxCallable: ...
@overload
def jax_callable(func: Callable[..., Any], *, generic: Literal[True], **kwargs: Any) -> JaxCallable: ...
def jax_callable(
    func: Callable[..., Any] | None = None,
    *,
    generic: bool = False,
    num_outputs: int = 1,
    graph_mode: GraphMode = wp.JaxCallableGraphMode.JAX,
    vmap_method: VmapMethod = "sequential",
    output_dims: ShapeLike | dict[str, ShapeLike] | None = None,
    in_out_argnames: Iterable[str] = (),
    stage_in_argnames: Iterable[str] = (),
    stage_out_argnames: Iterable[str] = (),
    graph_cache_max: int | None = None,
    module_preload_mode: ModulePreloadMode = wp.JaxModulePreloadMode.CURRENT_DEVICE,
    has_side_effect: bool = False,
    enable_backward: bool = False,
    protect_inputs: bool = True,
    jvp: Callable[..., Any] | None = None,
    vjp: Callable[..., Any] | None = None,
) -> JaxCallable | Callable[[Callable[..., Any]], JaxCallable]:
    """Wrap a Warp-launching Python function as a `JaxCallable` module callable from JAX.

    Args:
        func: a function annotated like a Warp kernel (inputs, then outputs) that
            launches Warp kernels on its arguments. With ``generic=True``, a factory
            taking one Warp scalar dtype per runtime argument and returning such a
            function (resolved once per dtype signature). Omit it to get a decorator.
        generic: treat ``func`` as a dtype factory.
        num_outputs: how many trailing parameters are outputs, in-out ones included.
        graph_mode: CUDA graph capture. ``JAX`` (default) lets XLA capture the call
            in its command buffers; ``NONE`` keeps it out of graphs (use it when the
            function synchronises with the host). The Warp-side capture modes run
            like ``NONE`` in this version.
        vmap_method: ``"sequential"`` (default: one call per batch slice, all inside
            one FFI call) or ``"broadcast_all"``.
        output_dims: default dims of the pure outputs (int, tuple, or dict by name);
            otherwise the first array input's Warp shape.
        in_out_argnames: inputs updated in place and returned.
        stage_in_argnames: accepted for compatibility with Warp's staged graph modes.
        stage_out_argnames: accepted for compatibility with Warp's staged graph modes.
        graph_cache_max: accepted for compatibility with Warp's graph modes.
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
        jvp: forward-mode rule, as for `jarp.warp.jax_kernel`.
        vjp: reverse-mode rule, as for `jarp.warp.jax_kernel`.

    Returns:
        A `JaxCallable`, or a decorator producing one when ``func`` is omitted.

    Example:
        ```python
        def scale(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
            wp.launch(scale_kernel, dim=a.shape, inputs=[a, s], outputs=[out])

        (out,) = jarp.warp.jax_callable(scale)(jnp.ones(8), 2.0)
        ```
    """
    options = {
        "generic": generic,
        "num_outputs": num_outputs,
        "graph_mode": graph_mode,
        "vmap_method": vmap_method,
        # normalised here too: Equinox flattens constructor arguments before converters run
        "output_dims": normalize_output_dims(output_dims, f"{_WHAT}: output_dims"),
        "in_out_argnames": in_out_argnames,
        "stage_in_argnames": stage_in_argnames,
        "stage_out_argnames": stage_out_argnames,
        "graph_cache_max": graph_cache_max,
        "module_preload_mode": module_preload_mode,
        "has_side_effect": has_side_effect,
        "enable_backward": enable_backward,
        "protect_inputs": protect_inputs,
        "jvp": jvp,
        "vjp": vjp,
    }
    if func is None:
        return lambda f: JaxCallable(f, **options)
    return JaxCallable(func, **options)
