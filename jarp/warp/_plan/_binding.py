"""Argument binding: one pass over a signature turns a call's arguments into what a plan needs.

A module call passes JAX/NumPy arrays and Python numbers positionally, one per
input parameter. `bind_arguments` checks each against its parameter (dtype,
dims, vector/matrix element dims, integer ranges) and sorts it into the array
operands XLA passes to the FFI call, the static values baked into the plan, and
the runtime (traced) scalars that a kernel reads from one-element arrays. Every
error names the parameter and says what to pass instead.
"""

from __future__ import annotations

import ctypes
import dataclasses
import types
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.core  # `import jax` loads it, but only this import declares it to type checkers
import jax.numpy as jnp
import numpy as np
import warp as wp

from .._upstream import _warp_types
from . import _dtypes
from ._arg_checks import (
    LONG_DOUBLE_HINT,
    cast_hint,
    check_array_value,
    check_struct_array,
    kind_of,
    normalize_value,
    runtime_value,
    short_repr,
    structure_hint,
)
from ._arg_spec import ArgSpec
from ._signature import Signature
from ._struct_layout import StructLayout, StructLeaf, is_warp_scalar


def warp_dtypes(args: Sequence[Any], names: Sequence[str] = ()) -> tuple[Any, ...]:
    """The Warp scalar dtype of each argument (Python scalars follow JAX's precision), for generic targets.

    A struct argument (a dict, NamedTuple, dataclass, ``eqx.Module``, Warp struct instance or any object
    carrying the fields as attributes) gives the dtype of its first floating-point array field, else of
    its first array field, else of its first value field (depth first, in field order). Arrays (JAX
    arrays and tracers, NumPy arrays, ``wp.array``) and numbers are leaves, recognised before any
    attribute is looked at.

    Args:
        args: the call's positional arguments.
        names: the parameter names of the arguments, in order, where known (for messages).

    Raises:
        TypeError: naming the argument (and the field a dtype was taken from), for an argument without
            an array or number in it, or a dtype Warp has no scalar type for.
    """
    names = tuple(names)
    return tuple(_argument_dtype(i, a, names[i] if i < len(names) else None) for i, a in enumerate(args))


def _argument_dtype(i: int, a: object, name: str | None) -> Any:
    leaves: list[_DtypeLeaf] = []
    _collect_dtype_leaves(a, "", 0, set(), leaves)
    floating = [x for x in leaves if x.is_array and jnp.issubdtype(x.dtype, jnp.inexact)]
    arrays = [x for x in leaves if x.is_array]
    chosen = next((group[0] for group in (floating, arrays, leaves) if group), None)
    which = f"{name!r}, {kind_of(a)}" if name else kind_of(a)
    prefix = f"cannot infer a Warp dtype from argument {i} ({which}) for the generic target"
    if chosen is None:
        raise TypeError(
            f"{prefix}: it holds no array or number (a struct argument is a dict, NamedTuple, dataclass, "
            "eqx.Module, Warp struct instance or other object with the struct's fields as attributes)."
        )
    try:
        return _dtypes.from_jax(chosen.dtype)
    except TypeError as e:
        where = f"field {((name or '') + chosen.path).lstrip('.')!r}: " if chosen.path else ""
        raise TypeError(f"{prefix}: {where}{e}") from None


class _DtypeLeaf(NamedTuple):
    path: str  # ".field.sub" inside the argument; "" for the argument itself
    dtype: np.dtype  # as JAX holds it (canonicalised for jax_enable_x64)
    is_array: bool


# How deep, and up to how many leaves, the dtype inference of a generic target walks a struct argument.
_MAX_DEPTH = 16
_MAX_LEAVES = 4096


def _leaf_dtype(value: object) -> tuple[np.dtype, bool] | None:
    """The dtype of an array or number and whether it is an array; None for anything else.

    Checked before any attribute walk: a concrete ``jax.Array`` has an (empty) ``__dict__`` and a
    ``wp.array`` many attributes, and neither is a struct's fields.
    """
    if isinstance(value, (jax.Array, np.ndarray)):
        return np.dtype(jax.dtypes.canonicalize_dtype(value.dtype)), True
    if isinstance(value, (np.generic, bool, int, float, complex)):
        return np.dtype(jax.dtypes.result_type(value)), False
    if isinstance(value, wp.array):
        return np.dtype(jax.dtypes.canonicalize_dtype(_dtypes.to_numpy(value.dtype))), True
    if is_warp_scalar(type(value)) or (isinstance(value, ctypes.Array) and hasattr(type(value), "_wp_scalar_type_")):
        return np.dtype(jax.dtypes.canonicalize_dtype(_dtypes.to_numpy(type(value)))), False  # a Warp value
    return None


def _collect_dtype_leaves(value: object, path: str, depth: int, active: set[int], out: list[_DtypeLeaf]) -> None:
    if len(out) >= _MAX_LEAVES:
        return
    try:
        leaf = _leaf_dtype(value)
    except TypeError:  # a wp.array of structs: no scalar dtype to take
        return
    if leaf is not None:
        out.append(_DtypeLeaf(path, *leaf))
        return
    if depth >= _MAX_DEPTH or id(value) in active:
        return
    fields = struct_like_fields(value)
    if not fields:
        return
    active.add(id(value))
    try:
        for name, item in fields:
            _collect_dtype_leaves(item, f"{path}.{name}", depth + 1, active, out)
    finally:
        active.discard(id(value))


def _slot_names(cls: type) -> tuple[str, ...]:
    slots = cls.__dict__.get("__slots__", ())
    return (slots,) if isinstance(slots, str) else tuple(n for n in slots if isinstance(n, str))


# Values never walked for fields: arrays, numbers, strings, and Warp vectors and matrices (ctypes arrays).
_NOT_STRUCT_LIKE = (jax.Array, np.ndarray, np.generic, wp.array, bool, int, float, complex, str, bytes, ctypes.Array)


def struct_like_fields(value: object) -> list[tuple[str, Any]] | None:
    """The ``(name, value)`` fields of a struct-like value, in field order; None for a value that is not one.

    A ``Mapping`` gives its items, a Warp struct instance its struct's fields, a tuple or list its
    elements (a NamedTuple by field name), a dataclass (``eqx.Module``) its fields, and any other
    object its public instance attributes (``__dict__``, then ``__slots__``). Arrays (JAX, NumPy,
    ``wp.array``), numbers, strings, ``None``, classes, modules and other callables are not struct-like.
    """
    if value is None or isinstance(value, _NOT_STRUCT_LIKE) or is_warp_scalar(type(value)):
        return None
    if isinstance(value, Mapping):
        return [(str(k), v) for k, v in value.items()]
    inst_type = _warp_types.struct_instance_type(value)
    if inst_type is not None:
        return [(f, getattr(value, f, None)) for f, _ in _warp_types.struct_fields(inst_type)]
    if isinstance(value, (tuple, list)):
        names = getattr(value, "_fields", None)
        if isinstance(value, tuple) and isinstance(names, tuple) and len(names) == len(value):
            return [(str(n), v) for n, v in zip(names, value, strict=True)]
        return [(str(k), v) for k, v in enumerate(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return [(f.name, getattr(value, f.name, None)) for f in dataclasses.fields(value)]
    if isinstance(value, (type, types.ModuleType)) or callable(value):
        return None
    attrs = getattr(value, "__dict__", None)
    slots = [name for cls in type(value).__mro__ for name in _slot_names(cls)]
    if not isinstance(attrs, Mapping) and not slots:
        return None
    fields = {k: v for k, v in (attrs or {}).items() if isinstance(k, str) and not k.startswith("_")}
    for name in slots:
        if not name.startswith("_") and name not in fields and hasattr(value, name):
            fields[name] = getattr(value, name)
    return list(fields.items())


@dataclasses.dataclass(frozen=True)
class BoundCall:
    """A call's arguments bound to the inputs of a signature.

    Attributes:
        sig: the signature the arguments were bound to.
        operands: the array operands in input order, as JAX arrays; a runtime scalar is a
            one-element array in its parameter's place, and a struct's array fields follow
            each other in its place (in layout order).
        operand_specs: the spec behind each operand: the array parameter, the scalar parameter
            of a runtime scalar, or the struct field (named ``s.field``).
        statics: the static values by parameter name: a number for a scalar, the tuple of its
            value fields (in layout order) for a struct.
        runtime_scalars: the names of scalar parameters given JAX values (runtime scalars), and the
            paths of struct value fields given JAX values (``"mat.k"``), in operand order.
    """

    sig: Signature
    operands: tuple[jax.Array, ...]
    operand_specs: tuple[ArgSpec, ...]
    statics: Mapping[str, Any]
    runtime_scalars: tuple[str, ...] = ()

    @property
    def scalar_operands(self) -> tuple[int, ...]:
        """Indices of the operands that carry a runtime scalar."""
        return tuple(i for i, p in enumerate(self.operand_specs) if not p.is_array)


def bind_arguments(sig: Signature, args: Sequence[Any], *, what: str, runtime_scalars: bool) -> BoundCall:
    """Check ``args`` against the inputs of ``sig`` and bind them, in one pass.

    Args:
        sig: the target's signature.
        args: the call's positional arguments, one per input (in-out ones included).
        what: the module's name, for error messages.
        runtime_scalars: whether scalar parameters may take JAX arrays (kernels read them
            from one-element arrays); otherwise a traced scalar is an error and a concrete
            one is taken as static.

    Returns:
        The `BoundCall`.

    Raises:
        TypeError / ValueError naming the offending argument.
    """
    inputs = sig.inputs
    if len(args) != len(inputs):
        names = ", ".join(p.name for p in inputs) or "none"
        raise TypeError(f"{what} takes {len(inputs)} input(s) ({names}), got {len(args)}.")
    operands, specs, statics, runtime = [], [], {}, []
    for spec, value in zip(inputs, args, strict=True):
        if spec.structure:
            name = spec.dtype.__name__
            raise TypeError(
                f"{what}: argument {spec.name!r} takes a wp.{name}, got {kind_of(value)}; pass a "
                f"jarp.warp.{name}(...) pytree: jarp builds the wp.{name} inside the call from its arrays."
            )
        if spec.is_array:
            operands.append(_check_array(spec, value, what))
            specs.append(spec)
        elif spec.is_struct:
            flat = flatten_struct_value(spec.struct, value, what, runtime=runtime_scalars)
            operands.extend(flat.arrays)
            specs.extend(spec.struct.array_specs)
            statics[spec.name] = flat.statics
            for leaf, operand in flat.runtime:  # the kernel variant takes them right after the struct
                operands.append(operand)
                specs.append(ArgSpec(leaf.name, False, leaf.warp_type, 0, ()))
                runtime.append(leaf.name)
        elif runtime_scalars and isinstance(value, jax.Array):
            operands.append(_runtime_scalar(spec, value, what))
            specs.append(spec)
            runtime.append(spec.name)
        else:
            statics[spec.name] = _check_scalar(spec, value, what)
    return BoundCall(sig, tuple(operands), tuple(specs), statics, tuple(runtime))


def _runtime_scalar(spec: ArgSpec, value: jax.Array, what: str) -> jax.Array:
    shape = _dtypes.element_shape(spec.dtype)  # () for a scalar; (3,) for a wp.vec3 parameter, (4,) for a wp.quat...
    if np.shape(value) not in (shape, (1, *shape)):
        raise TypeError(
            f"{what}: {'scalar' if not shape else wp.types.type_repr(spec.dtype)} argument {spec.name!r} takes a "
            f"value of shape {shape}, got an array of shape {np.shape(value)}."
        )
    expected = spec.np_dtype
    if np.dtype(value.dtype) != expected:
        raise TypeError(
            f"{what}: scalar argument {spec.name!r} got a {np.dtype(value.dtype)} array, but the kernel parameter "
            f"is {expected}; {cast_hint(expected)}."
        )
    return jnp.reshape(value, (1, *shape))


def _check_array(spec: ArgSpec, value: object, what: str) -> jax.Array:
    if not isinstance(value, (jax.Array, np.ndarray)):
        if isinstance(value, (int, float, bool, list, tuple)):
            value = np.asarray(value)
        else:
            raise TypeError(
                f"{what}: argument {spec.name!r} expects a {spec.phrase()} as a JAX or NumPy array, "
                f"got {type(value).__name__}."
            )
    return check_array_value(spec, value, what)


def _check_scalar(spec: ArgSpec, value: object, what: str) -> Any:
    if isinstance(value, jax.core.Tracer):
        raise TypeError(
            f"{what}: scalar argument {spec.name!r} got a traced value ({value.aval.str_short()}); scalar "
            "parameters of a jax_callable are static. Pass a Python number (e.g. mark it static with "
            "jax.jit(..., static_argnames=...)) or make it a one-element array parameter."
        )
    if _dtypes.is_composite(spec.dtype):
        # A vector, matrix, quaternion, transform... by value: checked and normalised (to nested tuples) as a
        # struct's value field is; packed as the Warp value `spec.dtype(value)`.
        value = np.asarray(value) if isinstance(value, jax.Array) else value
        return normalize_value(StructLeaf((spec.name,), 0, spec.dtype, None), value, what, subject="argument")
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        if np.ndim(value) != 0:
            raise TypeError(f"{what}: scalar argument {spec.name!r} got an array of shape {np.shape(value)}.")
        if np.asarray(value).dtype.type in (np.longdouble, np.clongdouble):
            raise TypeError(f"{what}: scalar argument {spec.name!r} got {short_repr(value)}; {LONG_DOUBLE_HINT}")
        value = np.asarray(value).item()
    if isinstance(value, complex) or not isinstance(value, (bool, int, float)):
        hint = structure_hint(value)
        if hint is not None:
            raise TypeError(f"{what}: scalar argument {spec.name!r} {hint}")
        raise TypeError(f"{what}: scalar argument {spec.name!r} expects a number, got {type(value).__name__}.")
    scalar = spec.dtype
    if wp.types.type_is_float(scalar):
        if _dtypes.overflows(scalar, float(value)):
            raise ValueError(
                f"{what}: scalar argument {spec.name!r} = {value} overflows the parameter's {spec.np_dtype} range; "
                "pass a smaller value or use a wider float type."
            )
        return _dtypes.static_float(scalar, value)
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


# -- struct arguments --


class FlatStruct(NamedTuple):
    """A struct argument flattened along a `StructLayout`.

    Attributes:
        arrays: one JAX array per array leaf, in layout order (with the element's trailing dims).
        statics: one normalised value per value leaf, in layout order: a Python ``float``/``int``/``bool``
            for a scalar, a tuple for a vector, a tuple of row tuples for a matrix (hashable); a zero for a
            field given a runtime value.
        runtime: with ``runtime=True``, each value field given a JAX value, with its one-element operand
            (``(1, *value_shape)``), in layout order.
    """

    arrays: tuple[jax.Array, ...]
    statics: tuple[Any, ...]
    runtime: tuple[tuple[StructLeaf, jax.Array], ...] = ()


def flatten_struct_value(layout: StructLayout, value: object, what: str = "jarp", runtime: bool = False) -> FlatStruct:
    """Check a JAX-side struct argument against its layout and split it into array and value leaves.

    A struct is given as a ``dict`` keyed by field name, or any object carrying the
    fields as attributes (a NamedTuple, a dataclass, an ``eqx.Module``, a Warp struct
    instance of the same type); nested structs as nested such objects. Array fields
    take JAX or NumPy arrays (JAX layout: the element's vector/matrix dims trailing)
    or ``wp.array`` (converted with ``wp.to_jax``, which shares memory where DLPack
    allows). Value fields take Python numbers, NumPy scalars or (nested) sequences
    for vectors and matrices, baked into the launch; with ``runtime``, also JAX
    arrays (traced or not), which the kernel then reads at run time.

    Args:
        layout: the parameter's `struct_layout`.
        value: the argument.
        what: the caller, prefixed to error messages (e.g. ``"Kernel(energy)"``).
        runtime: whether value fields may take JAX values (kernels read them from one-element arrays).

    Returns:
        The `FlatStruct` of array leaves (as JAX arrays), normalised value leaves and runtime values.

    Raises:
        TypeError / ValueError: naming the leaf (``mesh.verts``) and what to pass instead:
            a missing or (for dicts) unknown field, a wrong struct type, an array of the
            wrong dtype, number of dims or trailing (element) dims, a JAX array or traced
            value for a value field, an integer field given a non-integer or out of range.

    Example:
        >>> import warp as wp, jax.numpy as jnp
        >>> @wp.struct
        ... class Spring:
        ...     ends: wp.array(dtype=wp.vec2i)
        ...     stiffness: wp.float32
        >>> flat = flatten_struct_value(struct_layout(Spring, "s"), {"ends": jnp.zeros((4, 2), jnp.int32), "stiffness": 2})
        >>> flat.arrays[0].shape, flat.statics
        ((4, 2), (2.0,))
    """
    arrays: list[jax.Array] = []
    statics: list[Any] = []
    runtimes: list[tuple[StructLeaf, jax.Array]] | None = [] if runtime else None
    leaves = iter(layout.leaves)
    _flatten(layout.struct_type, (layout.param,), value, leaves, arrays, statics, what, runtimes)
    return FlatStruct(tuple(arrays), tuple(statics), tuple(runtimes or ()))


def _flatten(
    struct_type: Any,
    path: tuple[str, ...],
    value: Any,
    leaves: Any,
    arrays: list[jax.Array],
    statics: list[Any],
    what: str,
    runtimes: list[tuple[StructLeaf, jax.Array]] | None = None,
) -> None:
    name = ".".join(path)
    fields = _warp_types.struct_fields(struct_type)
    names = [f for f, _ in fields]
    key = _warp_types.struct_name(struct_type)
    if value is None or isinstance(value, _NOT_STRUCT_LIKE) or is_warp_scalar(type(value)):
        raise TypeError(
            f"{what}: argument {name!r} is a struct {key} and got {kind_of(value)}; pass a dict keyed by field name "
            f"({', '.join(names) or 'no fields'}) or an object with those attributes (a NamedTuple, dataclass, "
            "eqx.Module or Warp struct instance)."
        )
    inst_type = _warp_types.struct_instance_type(value)
    if inst_type is not None and inst_type is not struct_type:
        raise TypeError(
            f"{what}: argument {name!r} is a struct {key} and got a Warp struct instance of another type, "
            f"{_warp_types.struct_name(inst_type)}."
        )
    if isinstance(value, Mapping):
        unknown = [k for k in value if k not in names]
        if unknown:
            shown = ", ".join(short_repr(f"{name}.{k}", 40) for k in unknown[:3])
            shown += f" and {len(unknown) - 3} more" if len(unknown) > 3 else ""
            raise TypeError(
                f"{what}: argument {name!r} has unknown field(s) {shown}; the fields of {key} are "
                f"{', '.join(names) or 'none'}."
            )
    for field, warp_type in fields:
        fpath = (*path, field)
        fname = ".".join(fpath)
        try:
            item = value[field] if isinstance(value, Mapping) else getattr(value, field)
        except (KeyError, AttributeError):
            how = "key" if isinstance(value, Mapping) else "attribute"
            raise TypeError(
                f"{what}: argument {name!r} is missing field {fname!r} (no {how} {field!r} on the "
                f"{type(value).__name__} given); a {key} needs {', '.join(names)}."
            ) from None
        if _warp_types.is_struct_type(warp_type):
            _flatten(warp_type, fpath, item, leaves, arrays, statics, what, runtimes)
            continue
        leaf = next(leaves)
        assert leaf.path == fpath, (leaf.path, fpath)
        if leaf.spec is not None:
            arrays.append(check_struct_array(leaf, leaf.spec, item, what))
        elif runtimes is not None and isinstance(item, jax.Array):
            runtimes.append((leaf, runtime_value(leaf, item, what)))
            statics.append(
                normalize_value(leaf, np.zeros(leaf.value_shape), what)
            )  # a placeholder the kernel never reads
        else:
            statics.append(normalize_value(leaf, item, what))
