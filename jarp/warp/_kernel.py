"""`JaxKernel`: a Warp kernel as an immutable Equinox module."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Unpack, overload

import equinox as eqx
import numpy as np
import warp as wp

from . import _geometry
from ._callable import structure_callable
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
from ._options import JaxKernelOptions
from ._plan import (
    _analysis,
    _dims,
    _launch_checks,
    _preload,
    _runtime_scalars,
)
from ._plan._analysis import _names, _writes
from ._plan._binding import BoundCall, bind_arguments, warp_dtypes
from ._plan._builder import build_plan
from ._plan._signature import Signature, make_signature
from ._plan._values import Plan, Runs
from ._plan._weakcache import weak_cache
from ._upstream import _warp_codegen, _warp_kernels

_WHAT = "jax_kernel()"


def _optional_dims(value: object) -> tuple[int, ...] | None:
    return None if value is None else _launch_checks.normalize_launch_dims(value, f"{_WHAT}: launch_dims")


def _block_dim(value: object) -> int | None:
    return _launch_checks.check_block_dim(value, _WHAT)


def _check_writes(kernel: wp.Kernel, sig: Signature, what: str) -> None:
    """Refuse a kernel whose compiled code writes an input that is not declared in-out (`_writes`)."""
    pure_inputs = tuple(p.name for p in sig.inputs if p.is_array and not p.in_out)
    written = _writes.written_inputs(kernel, pure_inputs)
    if written:
        raise ValueError(
            f"{what}: kernel {kernel.key!r} writes to input(s) {list(written)}, which XLA owns and may "
            "share with the caller; declare them in in_out_argnames=... (they are then returned), or raise "
            "num_outputs if they are outputs."
        )
    structs = tuple(p.name for p in sig.inputs if p.is_struct)
    written_fields = _writes.written_struct_fields(kernel, structs)
    if written_fields:
        raise ValueError(
            f"{what}: kernel {kernel.key!r} writes to struct field(s) {list(written_fields)}; a struct's "
            "arrays are inputs, which XLA owns and may share with the caller. Pass the written array as a "
            "separate output parameter (or in_out_argnames) instead of through the struct."
        )


@weak_cache
def _signature(kernel: wp.Kernel, num_outputs: int, in_out_argnames: tuple[str, ...]) -> Signature:
    return make_signature(_warp_kernels.kernel_params(kernel), num_outputs, in_out_argnames, what=_WHAT)


# Under Warp's lock: a new overload changes the module Warp may be building in another thread. The executors' lock
# first (the lock order: `_upstream._locks.ORDER`): the user's factory may call a jarp module.
@weak_cache(lock=_executors.build_lock)
def _overload(kernel: wp.Kernel, factory: Callable[..., Any], dtypes: tuple[Any, ...]) -> wp.Kernel:
    arg_types = factory(*dtypes)
    names = tuple(getattr(d, "__name__", d) for d in dtypes)
    try:
        overload = wp.overload(kernel, arg_types)
    except Exception as e:
        raise TypeError(
            f"{_WHAT}: arg_types_factory{names} returned {arg_types!r}, "
            f"which is not a valid overload of kernel {kernel.key!r}: {e}"
        ) from e
    error = _warp_codegen.codegen_error(overload)
    if error is not None:
        # Warp builds all overloads of a module together: a registered overload that does not compile would fail
        # every later build of the module, other kernels included
        _warp_kernels.drop_overload(kernel, overload)
        raise TypeError(
            f"{_WHAT}: the overload of kernel {kernel.key!r} that arg_types_factory{names} gives ({arg_types!r}) "
            f"does not compile, so it was not kept: {error}"
        )
    return overload


class JaxKernel(AbstractWarpModule):
    """A Warp kernel wrapped as a JAX-callable, immutable Equinox module.

    Build it with `jarp.warp.jax_kernel`. All fields are static, so the module has
    no array leaves; two modules built from the same kernel with equal options
    compare equal and hash alike, which keeps `eqx.filter_jit` from retracing when
    a model is rebuilt.

    Calling it launches the kernel and returns a tuple of output arrays (in-out
    arguments first, then pure outputs, which start zero-filled)::

        kernel(*args, output_dims=None, launch_dims=None, vmap_method=None, block_dim=None)

    ``args`` has one value per kernel input (in-out arguments included), in order:
    JAX or NumPy arrays for array parameters (vector/matrix elements as trailing
    dims), Python numbers (static) or JAX scalars (runtime, differentiable) for
    scalar parameters. The keyword options override the module's for this call.

    Attributes:
        kernel: the ``@wp.kernel``.
        arg_types_factory: for generic kernels, maps the Warp scalar dtype of each
            argument to the argument types of the overload to launch (as accepted by
            ``wp.overload``). Resolved once per dtype signature.
        num_outputs: how many trailing parameters are outputs, in-out ones included.
        vmap_method: ``"sequential"`` (default: every batch slice gets its own launch,
            all inside one FFI call; correct for any kernel) or ``"broadcast_all"``
            (fold the batch into the first launch dim, as Warp does; only correct for
            elementwise kernels), or None: no batching rule, as in Warp's bridge (the
            caller batches the call itself, e.g. with ``jax.custom_batching.custom_vmap``;
            ``jax.vmap`` over the call is an error).
        launch_dims: default launch dims; otherwise the first array input's Warp shape.
        output_dims: default dims of the pure outputs: an int, a tuple, or a dict by
            output name, with or without vector/matrix element dims. Otherwise the
            launch dims.
        in_out_argnames: inputs that the kernel updates in place and that are returned.
        module_preload_mode: where to compile and load the kernel's module at trace time:
            ``CURRENT_DEVICE`` (default) on JAX's current device (``jax.default_device``, else the first
            local device), ``ALL_DEVICES`` on every local CPU and CUDA device, ``NONE`` at the first call.
            Inside XLA's command buffers on a CUDA driver older than 12.3 the module must be preloaded on the
            device the call runs on.
        enable_backward: make the module differentiable in reverse mode (``jax.grad``,
            ``jax.vjp``) through Warp's generated adjoint kernel.
        jvp: a jarp module (or any JAX-traceable function) giving forward-mode
            derivatives: ``jvp(*inputs, *tangents)`` returns one tangent per output,
            with one tangent per floating-point array input. It makes ``jax.jvp``,
            ``jax.jacfwd`` and ``jax.linearize`` work. Reverse mode then uses ``vjp``
            if given, else Warp's adjoint of the kernel itself when
            ``enable_backward=True`` (one adjoint launch), else Warp's adjoint of the
            ``jvp`` module, transposed.
        vjp: a jarp module giving reverse-mode derivatives: ``vjp(*inputs,
            *cotangents)`` returns one cotangent per floating-point array input,
            given one cotangent per output. Replaces Warp's adjoint.
        bounds_check: build the kernel in Warp's debug mode, which checks every array index, so an
            out-of-bounds index raises an error naming the kernel instead of reading or writing past
            the array (on the CPU jarp guards the launch; on CUDA Warp's device-side check fails the
            launch). Slower; for finding bugs. ``wp.config.mode = "debug"`` (or the module option
            ``"mode": "debug"``) gives the same for every kernel.
        block_dim: threads per block (as in ``wp.jax_kernel(..., block_dim=...)``; None:
            Warp's default, 256 on CUDA and 1 on the CPU). Tile kernels need it to match
            their tile sizes; launch them over ``(*grid, block_dim)`` as ``wp.launch_tiled``
            does. On the CPU a block dim above 1 takes effect only with
            ``wp.config.enable_cpu_blocks = True``; otherwise each thread runs the whole
            tile alone. Each block dim is its own build of the kernel's module.
        has_side_effect: keep the call even when its outputs are unused (as in Warp's
            bridge: for a kernel that writes somewhere JAX does not see, or prints).
    """

    _what: ClassVar[str] = _WHAT
    _call_options: ClassVar[tuple[str, ...]] = ("output_dims", "launch_dims", "vmap_method", "block_dim")
    _runtime_scalars: ClassVar[bool] = True

    kernel: wp.Kernel = eqx.field(static=True)
    arg_types_factory: Callable[..., Any] | None = value_callable_field()
    num_outputs: int = eqx.field(static=True, default=1)
    vmap_method: str | None = eqx.field(static=True, default="sequential")
    launch_dims: tuple[int, ...] | None = eqx.field(static=True, default=None, converter=_optional_dims)
    output_dims: Any = output_dims_field(_WHAT)
    in_out_argnames: tuple[str, ...] = in_out_argnames_field()
    module_preload_mode: wp.JaxModulePreloadMode = module_preload_mode_field()
    enable_backward: bool = enable_backward_field()
    jvp: Callable[..., Any] | None = value_callable_field()
    vjp: Callable[..., Any] | None = value_callable_field()
    block_dim: int | None = eqx.field(static=True, default=None, converter=_block_dim)
    has_side_effect: bool = eqx.field(static=True, default=False, converter=bool)
    bounds_check: bool = eqx.field(static=True, default=False, converter=bool)

    def __check_init__(self) -> None:
        if not isinstance(self.kernel, wp.Kernel):
            raise TypeError(
                f"{_WHAT}: kernel must be a Warp kernel (decorate it with @wp.kernel), got {type(self.kernel).__name__}."
            )
        abi = _warp_kernels.entry_point_abi(self.kernel)
        if abi != "warp":
            raise ValueError(
                f"{_WHAT}: kernel {self.kernel.key!r} uses Warp's entry_point_abi={abi!r}, whose entry point takes "
                "its parameters in another form than wp.launch passes them (Warp itself cannot wp.launch it); jarp "
                "launches only kernels with Warp's own ABI. Define the kernel without entry_point_abi to call it "
                "from JAX."
            )
        if self.arg_types_factory is not None and not callable(self.arg_types_factory):
            raise TypeError(f"{_WHAT}: arg_types_factory must be callable, got {self.arg_types_factory!r}.")
        with _warp_kernels.one_code_version():  # the checks below judge one version of the code
            sig = _signature(self.kernel, self.num_outputs, self.in_out_argnames)
            # A generic kernel is judged per overload, on the code Warp generates for it (`_target_for`)
            concrete = [self.kernel] if not self.kernel.is_generic else _warp_kernels.overloads(self.kernel)
            for target in concrete:
                _check_writes(target, _signature(target, self.num_outputs, self.in_out_argnames), _WHAT)
            if self.enable_backward and sig.num_in_out:
                # what Warp compiles: an overwrite in a branch it folds away is none
                stored = _analysis.plainly_stored(
                    _names.compiled_source(self.kernel), tuple(p.name for p in sig.in_out)
                )
                if stored:
                    raise ValueError(
                        f"{_WHAT}: in_out_argnames {list(stored)} are overwritten (`a[i] = ...`) by kernel "
                        f"{self.kernel.key!r}, and Warp's adjoint cannot differentiate overwrites "
                        "(enable_backward=True). Accumulate into them instead (`a[i] += ...`, wp.atomic_add), make them "
                        "pure outputs, or drop enable_backward."
                    )
        if self.kernel.is_generic and self.arg_types_factory is None:
            raise TypeError(
                f"{_WHAT}: kernel {self.kernel.key!r} is generic (has Any-typed parameters); pass "
                "arg_types_factory=... to pick an overload from the argument dtypes, or wrap a concrete overload "
                "(wp.overload(kernel, [...]))."
            )

    def _unresolved_target(self) -> Any:
        return self.kernel

    def _annotated_target(self) -> Any:
        return self.kernel

    def _target_for(self, args: tuple[Any, ...]) -> wp.Kernel:
        if self.arg_types_factory is None:
            return self.kernel
        names = [name for name, _ in _warp_kernels.kernel_params(self.kernel)]
        return _overload(self.kernel, self.arg_types_factory, warp_dtypes(args, names))

    def _signature(self, target: wp.Kernel) -> Signature:
        return _signature(target, self.num_outputs, self.in_out_argnames)

    def _label(self, target: wp.Kernel) -> str:
        return f"{_WHAT} kernel {target.key!r}"

    def _shapes(self, bound: BoundCall, options: Mapping[str, Any], what: str) -> tuple[Any, list[Any], int | None]:
        """The launch dims, the result buffers and the block dim of one bound call under its options."""
        requested = options.get("launch_dims")
        dims = _dims.launch_dims(self.launch_dims if requested is None else requested, bound, what)
        results = _dims.result_buffers(bound, self._output_dims(options, what), dims, what)
        block_dim = options.get("block_dim")
        block_dim = self.block_dim if block_dim is None else _launch_checks.check_block_dim(block_dim, what)
        return dims, results, block_dim

    def _call_with_structures(self, args: tuple[Any, ...], options: Mapping[str, Any]) -> tuple[Any, ...]:
        # The kernel's own binding (each structure a static id) gives the overload, launch dims and outputs, and the
        # plan a call without structures would launch runs every check a plain call gets (the writes, launch dims
        # against the arrays the kernel indexes, outputs covering the launch); the launch itself goes to a callable
        # that builds the structures inside the call (`_geometry.launch`).
        placeholders = tuple(np.uint64(0) if _geometry.is_structure(a) else a for a in args)
        target = self._target_for(placeholders)
        what = self._label(target)
        sig = self._signature(target)
        _geometry.check_places(_warp_kernels.kernel_params(target), args, what, kernel=True)
        bound = bind_arguments(sig, placeholders, what=what, runtime_scalars=True)
        names = tuple(spec.name for spec in sig.inputs)
        _geometry.check_structure_uses(target, args, names, what)
        fields = [n for n in bound.runtime_scalars if "." in n]
        if fields:
            raise TypeError(
                f"{what}: struct field(s) {fields} got JAX values in a call with a Warp structure; pass them as "
                "Python numbers (static), or make them scalar parameters of the kernel (those take JAX values)."
            )
        plan = self._plan(target, bound, options, what)
        if bound.runtime_scalars:
            target = _runtime_scalars.variant(target, bound.runtime_scalars)
            args = tuple(
                a.reshape(1) if spec.name in bound.runtime_scalars else a
                for spec, a in zip(sig.inputs, args, strict=True)
            )
        if self.bounds_check:
            # Warp's checked build traps on an index out of bounds; jarp turns that trap into an error only on its
            # kernel launch paths, and a call with structures launches through wp.launch (it would kill the process)
            raise ValueError(
                f"{what}: bounds_check=True is not available for a call given Warp structures yet: such a call "
                "launches the kernel through Warp's wp.launch, where an out-of-bounds index stops the process "
                "instead of raising. Drop bounds_check for this call, or check the kernel with its arrays alone."
            )
        dims, results, block_dim = self._shapes(bound, options, what)
        args = _geometry.match_query_precision(target, args, names, what)
        drops = None
        if self.enable_backward:
            # Warp's mesh builtins drop the vertex gradient: the variant reads the vertices as arrays instead
            target = _geometry.vertex_reads(target)
            drops = _geometry.dropped(target)
        params = _warp_kernels.kernel_params(target)
        return _geometry.launch(
            structure_callable,
            target,
            params,
            args,
            what,
            launch=(tuple(dims), len(params) - sig.num_pure_outputs, block_dim),
            drops=drops,
            plan=plan,
            num_outputs=sig.num_outputs,
            in_out_argnames=self.in_out_argnames,
            output_dims=_geometry.output_dims(results, sig.outputs),
            enable_backward=self.enable_backward,
            protect_inputs=False,  # the kernel writes no input (`_check_writes`, `check_structure_uses`)
        )

    def _plan(self, target: wp.Kernel, bound: BoundCall, options: Mapping[str, Any], what: str) -> Plan:
        # Judged again for each plan (cached while nothing changed): a generic kernel's overload is first seen here,
        # and a module-level flag a kernel folds on may have changed since the module was built
        _check_writes(target, self._signature(target), _WHAT)
        if bound.runtime_scalars:
            target = _runtime_scalars.variant(target, bound.runtime_scalars)
        if self.bounds_check and _warp_kernels.kernel_mode(target) != "debug":
            target = _runtime_scalars.bounds_checked(target)
        dims, results, block_dim = self._shapes(bound, options, what)
        _preload.preload(target, self.module_preload_mode, block_dim)
        return build_plan(
            Runs.KERNEL,
            target,
            self._signature(target),
            bound,
            results,
            dims,
            has_side_effect=self.has_side_effect,
            graph_compatible=True,
            name=f"jax_kernel({target.key})",
            block_dim=block_dim,
            bounds_checked=_warp_kernels.kernel_mode(target) == "debug",
        )


@overload
def jax_kernel(kernel: None = None, **options: Unpack[JaxKernelOptions]) -> Callable[[wp.Kernel], JaxKernel]: ...
@overload
def jax_kernel(kernel: wp.Kernel, **options: Unpack[JaxKernelOptions]) -> JaxKernel: ...
def jax_kernel(
    kernel: wp.Kernel | None = None, **options: Unpack[JaxKernelOptions]
) -> JaxKernel | Callable[[wp.Kernel], JaxKernel]:
    """Wrap a Warp kernel as a `JaxKernel` module callable from JAX.

    Kernel parameters are inputs first, then outputs; the last ``num_outputs``
    parameters (plus any ``in_out_argnames``) are returned. Pure outputs start
    zero-filled, so kernels may accumulate into them with ``wp.atomic_add``.
    Calling it again with equal arguments returns the same module while that one
    is alive (modules are immutable, so sharing them is safe).

    Args:
        kernel: a ``@wp.kernel``. Omit it to get a decorator.
        **options: the module's options (keyword only), described under `JaxKernel`:
            ``arg_types_factory``, ``num_outputs``, ``vmap_method``, ``launch_dims``,
            ``output_dims``, ``in_out_argnames``, ``module_preload_mode``,
            ``enable_backward``, ``jvp``, ``vjp``, ``block_dim``, ``has_side_effect``, ``bounds_check``.

    Returns:
        A `JaxKernel`, or a decorator producing one when ``kernel`` is omitted.

    Example:
        ```python
        @wp.kernel
        def triple(x: wp.array(dtype=float), y: wp.array(dtype=float)):
            i = wp.tid()
            y[i] = 3.0 * x[i]

        (y,) = jarp.warp.jax_kernel(triple)(jnp.arange(4.0))
        ```
    """
    if kernel is None:
        return lambda k: make_module(JaxKernel, k, dict(options))
    return make_module(JaxKernel, kernel, dict(options))
