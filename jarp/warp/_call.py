"""Turn a module call into a launch plan: check arguments, resolve dims, bind the primitive."""

from __future__ import annotations

import dataclasses
import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import warp as wp

from . import _analysis, _internals, _launch, _runtime_scalars
from ._plans import Binding, Buffer, Param, Plan
from ._primitive import CallConfig, bind
from ._signature import ArgSpec, Signature, check_launch_dims, output_dims_for


def warp_dtypes(args: Sequence[Any]) -> tuple[Any, ...]:
    """The Warp scalar dtype of each runtime argument (Python scalars follow JAX's precision)."""
    out = []
    for a in args:
        try:
            out.append(wp.dtype_from_jax(jax.dtypes.result_type(a)))
        except Exception as e:
            raise TypeError(f"cannot infer a Warp dtype from argument {a!r}: {e}") from None
    return tuple(out)


def _is_tracer(x: Any) -> bool:
    return isinstance(x, jax.core.Tracer)


def runtime_scalar_names(sig: Signature, args: Sequence[Any]) -> tuple[str, ...]:
    """Names of scalar parameters given a JAX array or tracer (runtime values), in order."""
    return tuple(
        spec.name
        for spec, value in zip(sig.inputs, args, strict=False)
        if not spec.is_array and isinstance(value, jax.Array)
    )


def runtime_scalar_operands(sig: Signature, args: Sequence[Any], names: tuple[str, ...], what: str) -> list[Any]:
    """Replace runtime scalar arguments by the one-element arrays the kernel variant reads."""
    if len(args) != len(sig.inputs):
        return list(args)  # check_args reports the count
    out = list(args)
    for i, spec in enumerate(sig.inputs):
        if spec.name not in names:
            continue
        value = args[i]
        expected = spec.np_dtype
        if np.shape(value) not in ((), (1,)):
            raise TypeError(f"{what}: scalar argument {spec.name!r} got an array of shape {np.shape(value)}.")
        if np.dtype(value.dtype) != expected:
            raise TypeError(
                f"{what}: scalar argument {spec.name!r} got a {np.dtype(value.dtype)} array, but the kernel parameter "
                f"is {expected}; cast it with .astype(jnp.{expected.name}) or pass a Python number (static)."
            )
        out[i] = jnp.reshape(value, (1,))
    return out


def check_args(sig: Signature, args: Sequence[Any], what: str) -> tuple[list[Any], dict[str, Any]]:
    """Check call arguments against the inputs of ``sig``.

    Returns:
        The array operands (as JAX arrays, in order) and the static scalar values by name.
    """
    inputs = sig.inputs
    if len(args) != len(inputs):
        names = ", ".join(p.name for p in inputs) or "none"
        raise TypeError(f"{what} takes {len(inputs)} input(s) ({names}), got {len(args)}.")
    operands, statics = [], {}
    for spec, value in zip(inputs, args, strict=True):
        if spec.is_array:
            operands.append(_check_array(spec, value, what))
        else:
            statics[spec.name] = _check_scalar(spec, value, what)
    return operands, statics


def _check_array(spec: ArgSpec, value: Any, what: str) -> Any:
    if not isinstance(value, (jax.Array, np.ndarray)):
        if isinstance(value, (int, float, bool, list, tuple)):
            value = np.asarray(value)
        else:
            raise TypeError(
                f"{what}: argument {spec.name!r} expects a {spec.describe()} as a JAX or NumPy array, "
                f"got {type(value).__name__}."
            )
    dtype = np.dtype(value.dtype)
    if dtype != spec.np_dtype:
        raise TypeError(
            f"{what}: argument {spec.name!r} has dtype {dtype}, but the kernel expects {spec.np_dtype} "
            f"({spec.describe()}); cast it with .astype(jnp.{spec.np_dtype.name})"
            + (" or enable jax_enable_x64" if spec.np_dtype.itemsize == 8 and dtype.itemsize == 4 else "")
            + "."
        )
    shape = tuple(value.shape)
    if len(shape) != spec.jax_ndim:
        inner = f" ({spec.warp_ndim} array dims + {spec.inner_shape} element dims)" if spec.inner_shape else ""
        raise TypeError(
            f"{what}: argument {spec.name!r} must have {spec.jax_ndim} dims{inner}, got shape {shape}. "
            "To run over a batch, use jax.vmap instead of adding leading dims."
        )
    if spec.inner_shape and shape[spec.warp_ndim :] != spec.inner_shape:
        raise TypeError(
            f"{what}: argument {spec.name!r} holds {wp.types.type_repr(spec.dtype)} elements, so its trailing "
            f"dims must be {spec.inner_shape}, got shape {shape}."
        )
    if not isinstance(value, jax.Array):
        value = jnp.asarray(value)
    return value


def _check_scalar(spec: ArgSpec, value: Any, what: str) -> Any:
    if _is_tracer(value):
        raise TypeError(
            f"{what}: scalar argument {spec.name!r} got a traced value ({value.aval.str_short()}); scalar "
            "parameters of a jax_callable are static. Pass a Python number (e.g. mark it static with "
            "jax.jit(..., static_argnames=...)) or make it a one-element array parameter."
        )
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        if np.ndim(value) != 0:
            raise TypeError(f"{what}: scalar argument {spec.name!r} got an array of shape {np.shape(value)}.")
        value = np.asarray(value).item()
    if isinstance(value, complex) or not isinstance(value, (bool, int, float)):
        raise TypeError(f"{what}: scalar argument {spec.name!r} expects a number, got {type(value).__name__}.")
    scalar = spec.dtype
    if wp.types.type_is_float(scalar):
        return float(value)
    if scalar is wp.bool:
        return bool(value)
    if isinstance(value, float) and not value.is_integer():
        raise TypeError(f"{what}: scalar argument {spec.name!r} is an integer parameter, got {value!r}.")
    info = np.iinfo(spec.np_dtype)
    if not info.min <= int(value) <= info.max:
        raise ValueError(
            f"{what}: scalar argument {spec.name!r} = {value} does not fit the parameter's {spec.np_dtype} "
            f"range [{info.min}, {info.max}]."
        )
    return int(value)


def warp_shape(spec: ArgSpec, shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(shape[: spec.warp_ndim])


def resolve_output_buffers(
    sig: Signature,
    operands: Sequence[Any],
    output_dims: Any,
    default_dims: tuple[int, ...] | None,
    what: str,
) -> list[Buffer]:
    """Buffers of all results: in-out first (shaped like their inputs), then pure outputs."""
    array_inputs = [p for p in sig.inputs if p.is_array]
    buffers = [
        Buffer(tuple(op.shape), np.dtype(op.dtype))
        for spec, op in zip(array_inputs, operands, strict=True)
        if spec.in_out
    ]
    if output_dims is not None and not sig.outputs:
        raise ValueError(
            f"{what}: output_dims was given, but the kernel has no pure outputs (its outputs are the in-out "
            "arguments, shaped like their inputs); drop output_dims."
        )
    named = (
        dict(output_dims)
        if isinstance(output_dims, tuple) and output_dims and isinstance(output_dims[0], tuple)
        else None
    )
    for spec in sig.outputs:
        if named is not None:
            if spec.name not in named:
                raise ValueError(
                    f"{what}: output_dims has no entry for output {spec.name!r} (got {sorted(named)}); "
                    "give every pure output's dims."
                )
            dims = output_dims_for(spec, named[spec.name], f"{what}: output_dims[{spec.name!r}]")
        elif output_dims is not None:
            dims = output_dims_for(spec, output_dims, f"{what}: output_dims")
        elif default_dims is not None:
            dims = output_dims_for(spec, default_dims, f"{what}: output dims (defaulting to the launch dims)")
        else:
            raise ValueError(f"{what}: cannot infer the dims of output {spec.name!r}; pass output_dims=...")
        buffer = Buffer(dims + spec.inner_shape, spec.np_dtype)
        if buffer.nbytes >= 2**62:
            raise ValueError(f"{what}: output {spec.name!r} of shape {buffer.shape} is too large to allocate.")
        buffers.append(buffer)
    if named is not None:
        unknown = set(named) - {s.name for s in sig.outputs}
        if unknown:
            raise ValueError(
                f"{what}: output_dims names {sorted(unknown)}, which are not pure outputs "
                f"({[s.name for s in sig.outputs]})."
            )
    return buffers


def default_launch_dims(sig: Signature, operands: Sequence[Any]) -> tuple[int, ...] | None:
    """The first array input's Warp shape (runtime scalars aside), or None if there is no array input."""
    for spec, op in zip([p for p in sig.inputs if p.is_array], operands, strict=True):
        if not spec.name.endswith(_runtime_scalars.SUFFIX):
            return warp_shape(spec, op.shape)
    return None


def build_plan(
    kind: str,
    target: Any,
    sig: Signature,
    operands: Sequence[Any],
    statics: dict[str, Any],
    results: Sequence[Buffer],
    launch_dims: tuple[int, ...],
    *,
    has_side_effect: bool,
    graph_compatible: bool,
    name: str,
    block_dim: int | None = None,
) -> Plan:
    """Bind each parameter to an operand, a result or a static value."""
    if kind == "kernel":
        _launch.check_launch(target, launch_dims, block_dim, name)
    params = []
    op_index = 0
    in_out_index = 0
    pure_index = sig.num_in_out
    aliases = []
    scalar_operands: list[int] = []
    for spec in sig.params:
        if not spec.is_array:
            params.append(Param(spec, Binding("static", value=statics[spec.name])))
        elif spec in sig.outputs:
            params.append(Param(spec, Binding("result", pure_index)))
            pure_index += 1
        elif spec.in_out:
            params.append(Param(spec, Binding("result", in_out_index)))
            aliases.append((op_index, in_out_index))
            in_out_index += 1
            op_index += 1
        else:
            params.append(Param(spec, Binding("operand", op_index)))
            if spec.name.endswith(_runtime_scalars.SUFFIX):
                scalar_operands.append(op_index)
            op_index += 1
    zero = []
    if kind == "kernel":
        overwritten = _analysis.overwritten_outputs(
            _internals.kernel_source(target), tuple(s.name for s in sig.outputs)
        )
    else:
        overwritten = {}
    for j, spec in enumerate(sig.outputs, start=sig.num_in_out):
        rank = overwritten.get(spec.name)
        shape = results[j].shape[: spec.warp_ndim]
        if rank == len(launch_dims) == len(shape) and any(s < n for s, n in zip(shape, launch_dims, strict=True)):
            # Every thread writes out[tid]: an output smaller than the launch would be written out of bounds.
            raise ValueError(
                f"{name}: output {spec.name!r} has dims {shape}, smaller than the launch dims {launch_dims}, but the "
                f"kernel writes {spec.name}[tid] on every thread; pass output_dims covering the launch "
                "(or smaller launch_dims)."
            )
        if rank == len(launch_dims) and shape == launch_dims:
            continue  # every thread overwrites its own element: the fill would be wasted
        zero.append(j)
    operand_buffers = tuple(Buffer(tuple(op.shape), np.dtype(op.dtype)) for op in operands)
    _launch.check_array_extents(params, operand_buffers, results, name)
    return Plan(
        kind=kind,
        target=target,
        params=tuple(params),
        launch_dims=launch_dims,
        operands=operand_buffers,
        results=tuple(results),
        zero_results=tuple(zero),
        aliases=tuple(aliases),
        scalar_operands=tuple(scalar_operands),
        has_side_effect=has_side_effect,
        graph_compatible=graph_compatible,
        name=name,
        block_dim=block_dim,
    )


def resolve_launch_dims(launch_dims: Any, sig: Signature, operands: Sequence[Any], what: str) -> tuple[int, ...]:
    if launch_dims is None:
        dims = default_launch_dims(sig, operands)
        if dims is None:
            raise ValueError(f"{what}: the kernel has no array inputs, so pass launch_dims=... to size the launch.")
        return dims
    return check_launch_dims(_launch.normalize_launch_dims(launch_dims, f"{what}: launch_dims"), f"{what}: launch_dims")


def protect_inputs(plan: Plan) -> Plan:
    """Alias every pure array input of a callable plan to an extra, discarded result.

    XLA then hands the function its own copy of each input buffer (or the buffer itself
    when the caller's value is dead after the call), so writes cannot reach the caller.
    """
    in_out = {op for op, _ in plan.in_out_aliases}
    extra = [i for i in range(len(plan.operands)) if i not in in_out and i not in plan.scalar_operands]
    if not extra:
        return plan
    n_res = len(plan.results)
    return dataclasses.replace(
        plan,
        results=plan.results + tuple(plan.operands[i] for i in extra),
        aliases=plan.aliases + tuple((i, n_res + k) for k, i in enumerate(extra)),
        protected=tuple(n_res + k for k in range(len(extra))),
    )


# -- reverse mode through Warp's adjoint ---------------------------------------------------------


@functools.lru_cache(maxsize=4096)
def adjoint_plan(plan: Plan) -> Plan:
    """The plan of the backward launch of a forward kernel plan.

    Operands: the forward array operands, then one cotangent per forward result.
    Results: one cotangent per forward operand (zero-filled), a zero-filled stand-in
    for each forward result (the adjoint replays the forward pass as it was before
    the launch, when pure outputs were zero), and a writable copy of each incoming
    cotangent (Warp's adjoint may accumulate into the adjoints of arrays it reads).
    """
    n_ops, n_res = len(plan.operands), len(plan.results)
    in_out = {res: op for op, res in plan.in_out_aliases}
    params = []
    for p in plan.params:
        b = p.primal
        if b.source == "operand":
            params.append(Param(p.spec, b, Binding("result", b.index)))
        elif b.source == "result" and b.index in in_out:
            # In-out: replay from the value before the launch; the incoming cotangent buffer
            # accumulates the adjoint of the reads and becomes the input's cotangent.
            params.append(
                Param(p.spec, Binding("operand", in_out[b.index]), Binding("result", n_ops + n_res + b.index))
            )
        elif b.source == "result":
            params.append(Param(p.spec, Binding("result", n_ops + b.index), Binding("result", n_ops + n_res + b.index)))
        else:
            zero = 0.0 if wp.types.type_is_float(p.spec.dtype) else 0
            params.append(Param(p.spec, b, Binding("static", value=zero)))
    cotangents = tuple(Buffer(r.shape, r.dtype) for r in plan.results)
    return dataclasses.replace(
        plan,
        kind="adjoint" if plan.kind == "kernel" else "callable_adjoint",
        params=tuple(params),
        operands=plan.operands + cotangents,
        results=plan.operands + plan.results + cotangents,
        zero_results=tuple(range(n_ops + n_res)),
        aliases=tuple((n_ops + j, n_ops + n_res + j) for j in range(n_res)),
        batch_shape=(),
        operand_batch=(),
        protected=(),
        name=plan.name + " (adjoint)",
    )


def _is_float(dtype: Any) -> bool:
    return jnp.issubdtype(dtype, jnp.inexact)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0, 1))
def _differentiable(plan: Plan, config: CallConfig, *operands: Any) -> tuple[jax.Array, ...]:
    return bind(plan, config, operands)


def _fwd(plan: Plan, config: CallConfig, *operands: Any) -> Any:
    return bind(plan, config, operands), operands


def _bwd(plan: Plan, config: CallConfig, operands: Any, cts: Any) -> Any:
    cts = [
        ct if ct is not None and ct.dtype == r.dtype else jnp.zeros(plan.result_shape(j), r.dtype)
        for j, (ct, r) in enumerate(zip(cts, plan.results, strict=True))
    ]
    outs = bind(adjoint_plan(plan), config, (*operands, *cts))
    n_ops, n_res = len(plan.operands), len(plan.results)
    source = dict(enumerate(range(n_ops))) | {op: n_ops + n_res + res for op, res in plan.in_out_aliases}
    return tuple(_reduce_varying(outs[source[i]], op) if _is_float(op.dtype) else None for i, op in enumerate(operands))


def _varying(x: Any) -> frozenset[Any]:
    return frozenset(getattr(getattr(jax.typeof(x), "mat", None), "varying", frozenset()))


def _reduce_varying(ct: jax.Array, primal: Any) -> jax.Array:
    """Inside ``shard_map``, sum a cotangent over the mesh axes along which its primal is replicated.

    The adjoint launch varies over every axis any of its operands varies over; an input that was
    the same on every device (a shared stiffness, say) collects one contribution per device.
    """
    extra = tuple(sorted(_varying(ct) - _varying(primal), key=str))
    return jax.lax.psum(ct, extra) if extra else ct


_differentiable.defvjp(_fwd, _bwd)


def launch(plan: Plan, config: CallConfig, operands: Sequence[Any], differentiable: bool) -> tuple[jax.Array, ...]:
    """Bind ``plan`` (through Warp's adjoint when ``differentiable``)."""
    if differentiable:
        return tuple(_differentiable(plan, config, *operands))
    return bind(plan, config, operands)


# -- module preloading ---------------------------------------------------------------------------

_preloaded: set[tuple[Any, str]] = set()
_preload_lock = threading.Lock()


def preload(kernel: Any, mode: Any, block_dim: int | None = None) -> None:
    """Compile and load ``kernel``'s module (its variant for ``block_dim``) at trace time, per ``wp.JaxModulePreloadMode``."""
    mode = wp.JaxModulePreloadMode(mode)
    if mode == wp.JaxModulePreloadMode.NONE:
        return
    if mode == wp.JaxModulePreloadMode.CURRENT_DEVICE:
        platforms = [jax.default_backend()]
    else:
        platforms = ["cpu", "gpu"]
    devices = []
    for platform in platforms:
        if platform == "cpu":
            devices.append(wp.get_device("cpu"))
        elif platform in ("gpu", "cuda"):
            devices.extend(wp.get_cuda_devices())
    for device in devices:
        key = (kernel, str(device), block_dim)
        if key in _preloaded:
            continue
        with _preload_lock:
            _internals.load_entry_points(kernel, device, block_dim)
            _preloaded.add(key)


def callable_name(func: Callable[..., Any]) -> str:
    return getattr(func, "__qualname__", repr(func))


# -- eager dispatch ------------------------------------------------------------------------------


_TYPED = object()  # marks a (tag, type name, number) triple in a frozen cache key


def _thaw(value: Any) -> Any:
    """Undo `_freeze`'s type tags (the frozen form is only for the cache key)."""
    if isinstance(value, tuple):
        if len(value) == 3 and value[0] is _TYPED:
            return value[2]
        return tuple(_thaw(v) for v in value)
    return value


def _eager_impl(module: Any, statics: tuple[tuple[int, Any], ...], options: tuple[Any, ...], *arrays: Any) -> Any:
    args: list[Any] = list(arrays)
    for i, value in statics:
        args.insert(i, _thaw(value))
    return module.trace_call(*args, **{k: _thaw(v) for k, v in options})


_eager_jit = jax.jit(_eager_impl, static_argnums=(0, 1, 2))


def try_eager(module: Any, args: Sequence[Any], options: dict[str, Any]) -> tuple[jax.Array, ...] | None:
    """Run an eager (un-traced) call through one cached executable per module and signature.

    Returns None when the call is not eligible (a tracer or a non-JAX array among
    the arguments, or an unhashable option), in which case the caller traces it
    directly. NumPy arrays take the direct path so that their dtype is checked
    before ``jax.jit`` would silently convert it.
    """
    arrays, statics = [], []
    for i, a in enumerate(args):
        if isinstance(a, (jax.core.Tracer, np.ndarray)):
            return None
        if isinstance(a, jax.Array):
            arrays.append(a)
        else:
            # typed: 0 == 0.0 == 0j == False would otherwise share a cache entry and skip validation
            statics.append((i, a))
    try:
        statics = [(i, _freeze(a)) for i, a in statics]
        key = tuple(sorted((k, _freeze(v)) for k, v in options.items() if v is not None))
        hash((tuple(statics), key))
    except TypeError:
        return None
    return _eager_jit(module, tuple(statics), key, *arrays)


def _freeze(value: Any) -> Any:
    """A hashable, plain-Python form of an option value (NumPy scalars become Python numbers)."""
    if isinstance(value, dict):
        return tuple(sorted((str(k), _freeze(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, (bool, int, float, complex)):
        return (_TYPED, type(value).__name__, value)
    if isinstance(value, (np.ndarray, jax.Array)):
        raise TypeError("array option")  # not eligible for the eager cache key; traced directly instead
    return value
