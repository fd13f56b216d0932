"""Option types and call protocols for type checkers."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any, Literal, Protocol, TypedDict, Unpack

import jax
import warp as wp

ShapeLike = int | Sequence[int]
VmapMethod = Literal["sequential", "broadcast_all", "expand_dims"]
GraphMode = wp.JaxCallableGraphMode
ModulePreloadMode = wp.JaxModulePreloadMode


class JaxKernelOptions(TypedDict, total=False):
    """Construction options of `jarp.warp.jax_kernel` (the fields of `jarp.warp.JaxKernel` after ``kernel``)."""

    arg_types_factory: Callable[..., Any] | None
    num_outputs: int
    vmap_method: VmapMethod | None
    launch_dims: ShapeLike | None
    output_dims: ShapeLike | dict[str, ShapeLike] | None
    in_out_argnames: Iterable[str]
    module_preload_mode: ModulePreloadMode
    enable_backward: bool
    jvp: Callable[..., Any] | None
    vjp: Callable[..., Any] | None
    block_dim: int | None
    has_side_effect: bool
    bounds_check: bool


class JaxKernelCallOptions(TypedDict, total=False):
    """Per-call options of a `jarp.warp.JaxKernel`."""

    output_dims: ShapeLike | dict[str, ShapeLike] | None
    launch_dims: ShapeLike | None
    vmap_method: VmapMethod | None
    block_dim: int | None


class JaxCallableOptions(TypedDict, total=False):
    """Construction options of `jarp.warp.jax_callable` (the fields of `jarp.warp.JaxCallable` after ``func``)."""

    generic: bool
    num_outputs: int
    graph_mode: GraphMode
    vmap_method: VmapMethod | None
    output_dims: ShapeLike | dict[str, ShapeLike] | None
    in_out_argnames: Iterable[str]
    stage_in_argnames: Iterable[str]
    stage_out_argnames: Iterable[str]
    graph_cache_max: int | None
    module_preload_mode: ModulePreloadMode
    has_side_effect: bool
    enable_backward: bool
    protect_inputs: bool
    jvp: Callable[..., Any] | None
    vjp: Callable[..., Any] | None


class JaxCallableCallOptions(TypedDict, total=False):
    """Per-call options of a `jarp.warp.JaxCallable`."""

    output_dims: ShapeLike | dict[str, ShapeLike] | None
    vmap_method: VmapMethod | None


class FfiKernelProtocol(Protocol):
    """What a wrapped kernel looks like to callers: arrays in, a tuple of arrays out."""

    def __call__(self, *args: jax.Array, **kwargs: Unpack[JaxKernelCallOptions]) -> Sequence[jax.Array]: ...


class FfiCallableProtocol(Protocol):
    """What a wrapped Warp-launching function looks like to callers."""

    def __call__(self, *args: jax.Array, **kwargs: Unpack[JaxCallableCallOptions]) -> Sequence[jax.Array]: ...
