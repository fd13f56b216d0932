"""Writing a plan's content text (`content_text`), and saying why a plan has none (`not_portable`)."""

from __future__ import annotations

import json
import types
from typing import Any

import numpy as np
import warp as wp

from ..._upstream import _warp_kernels
from .. import _runtime_scalars
from .._values import Binding, Buffer, Plan, Runs
from ._fields import ABI_VERSION, DTYPES
from ._targets import code_hash, hash_block_dim, resolve_qualname


def content_text(plan: Plan) -> str:
    """The canonical text of everything ``plan`` holds (JSON, sorted keys, no whitespace).

    Args:
        plan: a kernel or callable plan (forward or adjoint, batched or not).

    Returns:
        The text; equal plans traced in any two processes running the same code give the same text.

    Raises:
        ValueError: if the plan's target cannot be described at all (a callable that is not a Python
            function), or a static value is not a number, bool or tuple of them. A described target may
            still be impossible to find in another process: see `not_portable`.

    Example:
        ```python
        text = content_text(plan)
        assert json.loads(text)["abi"] == ABI_VERSION
        ```
    """
    doc = {
        "abi": ABI_VERSION,
        "runs": plan.runs.value,
        "adjoint": plan.adjoint,
        "target": _encode_target(plan),
        "params": [
            {
                "name": p.spec.name,
                "in_out": p.spec.in_out,
                "primal": _encode_binding(p.primal, p.spec.name),
                "adjoint": _encode_binding(p.adjoint, p.spec.name),
            }
            for p in plan.params
        ],
        "launch_dims": list(plan.launch_dims),
        "operands": [_encode_buffer(b) for b in plan.operands],
        "results": [_encode_buffer(b) for b in plan.results],
        "zero_results": list(plan.zero_results),
        "aliases": [list(pair) for pair in plan.aliases],
        "batch_shape": list(plan.batch_shape),
        "operand_batch": [list(b) for b in plan.operand_batch],
        "has_side_effect": plan.has_side_effect,
        "graph_compatible": plan.graph_compatible,
        "scalar_operands": list(plan.scalar_operands),
        "protected": list(plan.protected),
        "name": plan.name,
        "block_dim": plan.block_dim,
        "cpu_blocks": plan.cpu_blocks,
        "bounds_checked": plan.bounds_checked,
    }
    if plan.partitioned:  # only where set: a call lowered as before describes its plan as before
        doc["partitioned"] = True
    return json.dumps(doc, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def not_portable(plan: Plan) -> str | None:
    """None if another process can find ``plan``'s target again from its description; else why not.

    A kernel is found through Warp's module registry, so it must be the kernel that registry holds under its
    module and key (not one redefined since under the same key). A function is found as an attribute of its
    Python module, so it must be a plain function defined at a module's top level (or as a class attribute),
    not a lambda, a closure, a ``functools.partial`` or another callable object. Static values must be numbers,
    bools or tuples of them.

    Args:
        plan: the plan.

    Returns:
        None, or a sentence naming the target (or value) and what makes it impossible to find again.

    Example:
        ```python
        reason = not_portable(plan)
        text = content_text(plan) if reason is None else None
        ```
    """
    if plan.runs is Runs.KERNEL:
        reason = _kernel_not_portable(plan)
    else:
        # A nested function reaches the plan wrapped to compare by value (`_value_callables._ValueFunction`); judge the
        # function itself, so that a lambda or closure is refused as one (and named by its qualified name).
        reason = _callable_not_portable(getattr(plan.target, "__wrapped__", plan.target))
    if reason is not None:
        return reason
    for p in plan.params:
        for b in (p.primal, p.adjoint):
            try:
                _encode_value(b.value, p.spec.name)
            except ValueError as e:
                return str(e)
    return None


def _kernel_not_portable(plan: Plan) -> str | None:
    target = plan.target
    if not isinstance(target, wp.Kernel):
        return f"{plan.name}: its target {target!r} is not a Warp kernel."
    base, _, _ = _runtime_scalars.origin(target)
    lookup = base.generic_parent if base.generic_parent is not None else base
    module = getattr(base.module, "name", None)
    if not isinstance(module, str) or _warp_kernels.registered_kernel(module, lookup.key) is not lookup:
        return (
            f"kernel {base.key!r} is not the kernel Warp's module registry holds under its key in Warp module "
            f"{module!r} (redefined since under the same key, or built outside a registered module), so another "
            "process cannot find it by name."
        )
    if base.generic_parent is not None and base not in base.generic_parent.overloads.values():
        return f"kernel {base.key!r}: this overload is not registered with its generic kernel."
    if _warp_kernels.kernel_code_hash(base, hash_block_dim(plan.block_dim)) is None:
        return f"kernel {base.key!r} is not among the live kernels of its Warp module {module!r}."
    return None


def _callable_not_portable(func: object) -> str | None:
    # A nested function reaches the plan wrapped for comparison by value (`_value_callables._ValueFunction`): name
    # the function.
    wrapped = getattr(func, "__wrapped__", None)
    if isinstance(wrapped, types.FunctionType) and not isinstance(func, types.FunctionType):
        reason = _callable_not_portable(wrapped)
        return reason or (
            f"jax_callable function {wrapped.__qualname__!r} (module {wrapped.__module__!r}) is compared by its "
            "captured values, so another process cannot find it by name; define it at the top level of a module"
        )
    if not isinstance(func, types.FunctionType):
        return (
            f"jax_callable target {func!r} is not a plain Python function (a functools.partial, a closure or "
            "another callable object), so another process cannot find it by name; pass a function defined at "
            "the top level of a module"
        )
    qualname = func.__qualname__
    if "<locals>" in qualname or "<lambda>" in qualname:
        return (
            f"jax_callable function {qualname!r} (module {func.__module__!r}) is a lambda or is defined inside "
            "another function, so another process cannot find it by name; define it at the top level of a module"
        )
    if resolve_qualname(func.__module__, qualname) is not func:
        return (
            f"jax_callable function {qualname!r} is not the attribute {qualname!r} of its module "
            f"{func.__module__!r} (redefined, or renamed since), so another process cannot find it by name"
        )
    return None


def _encode_target(plan: Plan) -> dict[str, Any]:
    target = plan.target
    if plan.runs is Runs.CALLABLE:
        func = getattr(target, "__wrapped__", target)  # a nested function compared by value
        if not isinstance(func, types.FunctionType):
            raise ValueError(_callable_not_portable(target))
        return {
            "kind": "callable",
            "module": func.__module__,
            "qualname": func.__qualname__,
            "hash": code_hash(func.__code__),
        }
    if not isinstance(target, wp.Kernel):
        raise ValueError(f"{plan.name}: its target {target!r} is not a Warp kernel.")
    base, names, checked = _runtime_scalars.origin(target)
    digest = _warp_kernels.current_code_hash(base, hash_block_dim(plan.block_dim))  # the code as it stands
    if digest is None:
        raise ValueError(_kernel_not_portable(plan) or f"kernel {base.key!r} has no code hash.")
    overload = None
    if base.generic_parent is not None:
        overload = [wp.types.type_repr(t) for _, t in _warp_kernels.kernel_params(base)]
    return {
        "kind": "kernel",
        "module": base.module.name,
        "python_module": base.func.__module__,
        "key": base.key,
        "overload": overload,
        "hash": digest,
        "runtime": list(names),
        "checked": checked,
    }


def _encode_buffer(buf: Buffer) -> dict[str, Any]:
    return {"shape": list(buf.shape), "dtype": str(buf.dtype)}


def _encode_binding(b: Binding, where: str) -> dict[str, Any]:
    return {"source": b.source, "index": b.index, "value": _encode_value(b.value, where), "fields": list(b.fields)}


def _encode_value(value: object, where: str) -> Any:
    """A static value as JSON: null, bools, ints as they are; floats by their hex; tuples and NumPy scalars tagged."""
    if isinstance(value, np.generic):
        dtype = np.dtype(type(value))
        if str(dtype) not in DTYPES:
            raise ValueError(
                f"parameter {where!r}: the static value {value!r} has dtype {dtype}, which jarp has no Warp type for."
            )
        return {"numpy": str(dtype), "value": _encode_value(value.item(), where)}
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        return {"float": value.hex()}
    if isinstance(value, tuple):
        return {"tuple": [_encode_value(v, where) for v in value]}
    raise ValueError(
        f"parameter {where!r}: the static value {value!r} ({type(value).__name__}) cannot be described; jarp "
        "describes numbers, bools and tuples of them."
    )


def local_text(process: str, handle: int, name: str, why: str) -> str:
    """The description of a plan only its own process resolves (a lambda's, a closure's): it names the plan's handle.

    Args:
        process: a token of the process (the registry's), so that another process refuses the text.
        handle: the plan's handle in that process.
        name: the plan's name, for messages.
        why: why the plan has no portable description (`not_portable`).

    Returns:
        Canonical JSON that `_decode.read_text` reads back as a `LocalName`.
    """
    local = {"handle": handle, "name": name, "process": process, "why": why}
    return json.dumps({"abi": ABI_VERSION, "local": local}, sort_keys=True, separators=(",", ":"))
