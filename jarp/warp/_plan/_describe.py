"""A plan's content description: canonical text that another process turns back into the equal `Plan`.

A compiled program that outlives its process (JAX's persistent compilation cache, ``jax.export``) cannot carry
a process-local plan handle; its custom call carries `describe`'s text instead, and the process that loads it
calls `rebuild`. The text holds nothing process-local: two processes that trace the same function write the
same text. It names the plan's target by content:

- a kernel by its Warp module and key (for an overload of a generic kernel, also its argument types), its
  code hash (Warp's per-kernel content hash: source, argument types, constants, the ``wp.func`` it calls) and
  the recipe of jarp's derived kernel it runs (the runtime-value names of `_runtime_scalars.variant`, and
  whether it is the `_runtime_scalars.bounds_checked` build), not the derived kernel itself;
- a ``jax_callable`` function by its Python module, ``__qualname__`` and a hash of its code object;

and holds every other field of the plan (bindings with exact static values, buffers, aliases, batching,
options). The argument specs are not in it: `rebuild` derives them again from the target's parameters.

`rebuild` treats its text as untrusted (a loaded program may be crafted): it checks the type and range of
every field, never imports a module, evaluates or unpickles anything, and finds targets only among those this
process has defined (Warp's module registry; ``sys.modules`` and an attribute walk). It then runs the checks
`_builder.build_plan` runs, and checks every buffer a binding names against its parameter, so a crafted text
cannot make a launch read or write outside its buffers. Every failure is a `DescriptionError`.

Example:
    ```python
    text = describe(plan)  # '{"abi":1,"adjoint":false,...}'
    assert rebuild(text) == plan
    ```
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import math
import re
import sys
import types
from collections.abc import Sequence
from typing import Any, Literal, NoReturn

import numpy as np
import warp as wp

from .._upstream import _warp_internals
from . import _analysis, _annotations, _dtypes, _launch_checks, _names, _races, _runtime_scalars
from ._arg_spec import MAX_WARP_NDIM, ArgSpec
from ._signature import param_spec
from ._values import Binding, Buffer, Param, Plan, Runs

ABI_VERSION: int = 1
"""jarp's call ABI: what a description means. Bump it when the description's meaning changes."""

Reason = Literal["invalid", "abi", "not_found", "changed"]

MAX_TEXT = 1 << 20  # bytes of description text `rebuild` reads at most
_MAX_ITEMS = 4096  # parameters, buffers, indices, ... in one list
_MAX_STR = 4096
_MAX_BATCH_DIMS = 32
_MAX_SIZE = 2**63 - 1  # XLA sizes buffers with int64
_MAX_BUFFER_NDIM = MAX_WARP_NDIM + 2  # Warp dims and a matrix element's two
_MAX_VALUE_DEPTH = 3  # a struct's tuple of matrix rows
_HASH = re.compile(r"[0-9a-f]{64}")
_SOURCES = ("operand", "result", "static", "struct", "none")
_DTYPES: dict[str, np.dtype] = {str(_dtypes.to_numpy(t)): _dtypes.to_numpy(t) for t in _dtypes.SCALAR_TYPES}
_KERNEL_TARGET = ("checked", "hash", "key", "kind", "module", "overload", "python_module", "runtime")
_CALLABLE_TARGET = ("hash", "kind", "module", "qualname")
_PLAN_FIELDS = (
    "abi",
    "adjoint",
    "aliases",
    "batch_shape",
    "block_dim",
    "bounds_checked",
    "cpu_blocks",
    "graph_compatible",
    "has_side_effect",
    "launch_dims",
    "name",
    "operand_batch",
    "operands",
    "params",
    "protected",
    "results",
    "runs",
    "scalar_operands",
    "target",
    "zero_results",
)


class DescriptionError(ValueError):
    """A plan description that this process cannot turn back into a plan.

    Attributes:
        reason: ``"invalid"`` (not a well-formed, consistent description), ``"abi"`` (written for another
            jarp call ABI), ``"not_found"`` (its kernel or function is not defined in this process) or
            ``"changed"`` (found, but its code differs from the code the description was made from).
    """

    def __init__(self, reason: Reason, message: str) -> None:
        super().__init__(message)
        self.reason = reason


# -- describe ----------------------------------------------------------------------------------------------------


def describe(plan: Plan) -> str:
    """The canonical text of everything ``plan`` holds (JSON, sorted keys, no whitespace).

    Args:
        plan: a kernel or callable plan (forward or adjoint, batched or not).

    Returns:
        The text; equal plans traced in any two processes running the same code give the same text.

    Raises:
        ValueError: if the plan's target cannot be described at all (a callable that is not a Python
            function), or a static value is not a number, bool or tuple of them. A described target may
            still be impossible to find in another process: see `not_describable`.

    Example:
        ```python
        text = describe(plan)
        assert json.loads(text)["abi"] == ABI_VERSION
        ```
    """
    doc = {
        "abi": ABI_VERSION,
        "runs": plan.runs.value,
        "adjoint": plan.adjoint,
        "target": _describe_target(plan),
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


def not_describable(plan: Plan) -> str | None:
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
        reason = not_describable(plan)
        text = describe(plan) if reason is None else None
        ```
    """
    if plan.runs is Runs.KERNEL:
        reason = _kernel_not_describable(plan)
    else:
        # A nested function reaches the plan wrapped to compare by value (`_value_callables._ValueFunction`); judge the
        # function itself, so that a lambda or closure is refused as one (and named by its qualified name).
        reason = _callable_not_describable(getattr(plan.target, "__wrapped__", plan.target))
    if reason is not None:
        return reason
    for p in plan.params:
        for b in (p.primal, p.adjoint):
            try:
                _encode_value(b.value, p.spec.name)
            except ValueError as e:
                return str(e)
    return None


def _hash_block_dim(block_dim: int | None) -> int:
    """The block dim whose module build the code hash is taken from (the CUDA one a launch uses)."""
    return _warp_internals.CUDA_BLOCK_DIM if block_dim is None else block_dim


def _kernel_not_describable(plan: Plan) -> str | None:
    target = plan.target
    if not isinstance(target, wp.Kernel):
        return f"{plan.name}: its target {target!r} is not a Warp kernel."
    base, _, _ = _runtime_scalars.origin(target)
    lookup = base.generic_parent if base.generic_parent is not None else base
    module = getattr(base.module, "name", None)
    if not isinstance(module, str) or _warp_internals.registered_kernel(module, lookup.key) is not lookup:
        return (
            f"kernel {base.key!r} is not the kernel Warp's module registry holds under its key in Warp module "
            f"{module!r} (redefined since under the same key, or built outside a registered module), so another "
            "process cannot find it by name."
        )
    if base.generic_parent is not None and base not in base.generic_parent.overloads.values():
        return f"kernel {base.key!r}: this overload is not registered with its generic kernel."
    if _warp_internals.kernel_code_hash(base, _hash_block_dim(plan.block_dim)) is None:
        return f"kernel {base.key!r} is not among the live kernels of its Warp module {module!r}."
    return None


def _callable_not_describable(func: Any) -> str | None:
    # A nested function reaches the plan wrapped for comparison by value (`_value_callables._ValueFunction`): name
    # the function.
    wrapped = getattr(func, "__wrapped__", None)
    if isinstance(wrapped, types.FunctionType) and not isinstance(func, types.FunctionType):
        reason = _callable_not_describable(wrapped)
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
    if _walk(func.__module__, qualname) is not func:
        return (
            f"jax_callable function {qualname!r} is not the attribute {qualname!r} of its module "
            f"{func.__module__!r} (redefined, or renamed since), so another process cannot find it by name"
        )
    return None


def _walk(module: str, qualname: str) -> Any:
    """``sys.modules[module]``'s attribute path ``qualname``, or None; nothing is imported."""
    obj = sys.modules.get(module)
    for part in qualname.split("."):
        if obj is None or not part.isidentifier():
            return None
        obj = getattr(obj, part, None)
    return obj


def _describe_target(plan: Plan) -> dict[str, Any]:
    target = plan.target
    if plan.runs is Runs.CALLABLE:
        func = getattr(target, "__wrapped__", target)  # a nested function compared by value
        if not isinstance(func, types.FunctionType):
            raise ValueError(_callable_not_describable(target))
        return {
            "kind": "callable",
            "module": func.__module__,
            "qualname": func.__qualname__,
            "hash": code_hash(func.__code__),
        }
    if not isinstance(target, wp.Kernel):
        raise ValueError(f"{plan.name}: its target {target!r} is not a Warp kernel.")
    base, names, checked = _runtime_scalars.origin(target)
    digest = _warp_internals.kernel_code_hash(base, _hash_block_dim(plan.block_dim))
    if digest is None:
        raise ValueError(_kernel_not_describable(plan) or f"kernel {base.key!r} has no code hash.")
    overload = None
    if base.generic_parent is not None:
        overload = [wp.types.type_repr(t) for _, t in _warp_internals.kernel_params(base)]
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


def code_hash(code: types.CodeType) -> str:
    """A hash of a function's code (bytecode, constants, names), the same in every process running the same source.

    File names and line numbers are left out (moving a function does not change it); frozenset constants are
    hashed in a canonical order (their iteration order depends on the process's string hash seed).

    Example:
        ```python
        assert code_hash(f.__code__) == code_hash(f.__code__)
        ```
    """
    h = hashlib.sha256()
    _hash_code(h, code)
    return h.hexdigest()


def _hash_code(h: Any, code: types.CodeType) -> None:
    h.update(b"code")
    for n in (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount):
        h.update(n.to_bytes(4, "little"))
    h.update(len(code.co_code).to_bytes(8, "little") + code.co_code)
    for names in (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars):
        _hash_const(h, names)
    _hash_const(h, code.co_consts)


def _hash_const(h: Any, value: Any) -> None:
    if isinstance(value, types.CodeType):
        _hash_code(h, value)
    elif isinstance(value, (tuple, frozenset)):
        items = list(value)
        if isinstance(value, frozenset):
            items.sort(key=lambda v: _const_digest(v))
        h.update(f"{type(value).__name__}:{len(items)}(".encode())
        for v in items:
            _hash_const(h, v)
        h.update(b")")
    elif isinstance(value, float):
        h.update(b"float:" + value.hex().encode())
    elif isinstance(value, complex):
        h.update(b"complex:" + value.real.hex().encode() + b"," + value.imag.hex().encode())
    elif isinstance(value, (str, bytes)):
        data = value.encode("utf-8", "surrogatepass") if isinstance(value, str) else value
        h.update(f"{type(value).__name__}:{len(data)}:".encode() + data)
    else:  # None, bool, int, Ellipsis
        h.update(f"{type(value).__name__}:{value!r}".encode())


def _const_digest(value: Any) -> bytes:
    h = hashlib.sha256()
    _hash_const(h, value)
    return h.digest()


def _encode_buffer(buf: Buffer) -> dict[str, Any]:
    return {"shape": list(buf.shape), "dtype": str(buf.dtype)}


def _encode_binding(b: Binding, where: str) -> dict[str, Any]:
    return {"source": b.source, "index": b.index, "value": _encode_value(b.value, where), "fields": list(b.fields)}


def _encode_value(value: Any, where: str) -> Any:
    """A static value as JSON: null, bools, ints as they are; floats by their hex; tuples and NumPy scalars tagged."""
    if isinstance(value, np.generic):
        dtype = np.dtype(type(value))
        if str(dtype) not in _DTYPES:
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


# -- rebuild -----------------------------------------------------------------------------------------------------


def rebuild(text: str) -> Plan:
    """The plan ``text`` describes, with its target found (and jarp's derived kernel rebuilt) in this process.

    Args:
        text: a description from `describe`, possibly from another process, possibly crafted.

    Returns:
        The plan, equal to the one described (its target the same kernel or function object).

    Raises:
        DescriptionError: ``reason="invalid"`` for text that is not a well-formed description (the message names
            the field) or that describes an inconsistent launch; ``"abi"`` for a description of another jarp
            call ABI; ``"not_found"`` when its kernel or function is not defined in this process (the message
            names the module to import); ``"changed"`` when the one found has other code.

    Example:
        ```python
        assert rebuild(describe(plan)) == plan
        ```
    """
    if not isinstance(text, str):
        _invalid(f"a plan description is text, got {type(text).__name__}")
    if len(text) > MAX_TEXT:
        _invalid(f"the plan description is {len(text)} characters long, more than the {MAX_TEXT} jarp reads")
    try:
        doc = json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except (ValueError, RecursionError) as e:
        _invalid(f"the plan description is not JSON ({type(e).__name__}: {str(e)[:200]})")
    if not isinstance(doc, dict):
        _invalid(f"the plan description is a JSON {type(doc).__name__}, not an object")
    abi = doc.get("abi")
    if type(abi) is not int:
        _invalid(f"field 'abi' must be an int, got {_show(abi)}")
    if abi != ABI_VERSION:
        raise DescriptionError(
            "abi",
            f"the program's Warp call was described for jarp call ABI {abi}, and this jarp reads ABI {ABI_VERSION}; "
            "load the program with the jarp version that compiled it, or compile it again with this one.",
        )
    _keys(doc, _PLAN_FIELDS + (("partitioned",) if isinstance(doc, dict) and "partitioned" in doc else ()), "the plan")
    return _Reader(doc).plan()


class _Reader:
    """Reads one parsed description into a `Plan`, checking each field as it goes."""

    def __init__(self, doc: dict[str, Any]) -> None:
        self.doc = doc

    def plan(self) -> Plan:
        doc = self.doc
        runs = {"kernel": Runs.KERNEL, "callable": Runs.CALLABLE}.get(_str(doc["runs"], "runs"))
        if runs is None:
            _invalid(f"field 'runs' must be 'kernel' or 'callable', got {_show(doc['runs'])}")
        adjoint = _bool(doc["adjoint"], "adjoint")
        name = _str(doc["name"], "name")
        block_dim = doc["block_dim"]
        if block_dim is not None:
            block_dim = _int(block_dim, "block_dim", 1, _launch_checks.MAX_BLOCK_DIM)
        target = _find_target(runs, doc["target"], block_dim)
        operands = _buffers(doc["operands"], "operands")
        results = _buffers(doc["results"], "results")
        n_ops, n_res = len(operands), len(results)
        launch_dims = _ints(doc["launch_dims"], "launch_dims", 0, _MAX_SIZE, max_len=MAX_WARP_NDIM)
        if runs is Runs.KERNEL and not launch_dims:
            _invalid("field 'launch_dims' of a kernel plan must have 1 to 4 dims, got []")
        if runs is Runs.CALLABLE and launch_dims:
            _invalid(f"field 'launch_dims' of a callable plan must be [], got {list(launch_dims)}")
        if math.prod(launch_dims) > _MAX_SIZE:
            _invalid(f"field 'launch_dims' {list(launch_dims)} launches more than 2**63 - 1 threads")
        batch_shape = _ints(doc["batch_shape"], "batch_shape", 0, _MAX_SIZE, max_len=_MAX_BATCH_DIMS)
        operand_batch = _operand_batch(doc["operand_batch"], n_ops, len(batch_shape))
        for what, bufs in (("operands", operands), ("results", results)):
            for i, buf in enumerate(bufs):
                if math.prod(batch_shape) * buf.nbytes > _MAX_SIZE:
                    _invalid(
                        f"field '{what}[{i}]' with batch shape {list(batch_shape)} holds more than 2**63 - 1 bytes"
                    )
        params = self._params(runs, target, operands, results)
        plan = Plan(
            runs=runs,
            adjoint=adjoint,
            target=target,
            params=params,
            launch_dims=launch_dims,
            operands=operands,
            results=results,
            zero_results=_indices(doc["zero_results"], "zero_results", n_res, increasing=True),
            aliases=_aliases(doc["aliases"], n_ops, n_res),
            batch_shape=batch_shape,
            operand_batch=operand_batch,
            has_side_effect=_bool(doc["has_side_effect"], "has_side_effect"),
            graph_compatible=_bool(doc["graph_compatible"], "graph_compatible"),
            scalar_operands=_indices(doc["scalar_operands"], "scalar_operands", n_ops, increasing=True),
            protected=_indices(doc["protected"], "protected", n_res, increasing=True),
            name=name,
            block_dim=block_dim,
            cpu_blocks=_bool(doc["cpu_blocks"], "cpu_blocks"),
            bounds_checked=_bool(doc["bounds_checked"], "bounds_checked"),
            partitioned=self._partitioned(batch_shape, operand_batch),
        )
        _check_plan(plan)
        # derived, not described: recomputed from the target found here, as `build_plan` computed them (an adjoint
        # plan keeps its forward plan's `shares_cpu_state`, which the forward race proof decides)
        forward = _races.split_proofs(
            runs, target, tuple(p.spec for p in params), block_dim, plan.bounds_checked, plan.launch_dims
        )
        shares = _races.plan_shares_cpu_state(runs, target, block_dim, plan.bounds_checked, forward.race_free)
        if adjoint:
            race_free, private = _races.adjoint_split_proofs(
                runs, target, params, results, block_dim, plan.bounds_checked, plan.launch_dims
            )
        else:
            race_free, private = forward.race_free, _races.private_results(params, forward.private)
        return dataclasses.replace(plan, race_free=race_free, private=private, shares_cpu_state=shares)

    def _partitioned(self, batch_shape: tuple[int, ...], operand_batch: tuple[tuple[bool, ...], ...]) -> bool:
        if "partitioned" not in self.doc:
            return False
        if self.doc["partitioned"] is not True:
            _invalid(f"field 'partitioned' must be true where present, got {_show(self.doc['partitioned'])}")
        if not batch_shape:
            _invalid("field 'partitioned' needs batch dims (field 'batch_shape' is [])")
        for i, flags in enumerate(operand_batch):
            if any(flags) and not all(flags):
                _invalid(f"field 'operand_batch[{i}]' of a partitioned plan must carry every batch dim or none")
        return True

    def _params(
        self, runs: Runs, target: Any, operands: tuple[Buffer, ...], results: tuple[Buffer, ...]
    ) -> tuple[Param, ...]:
        raw = _list(self.doc["params"], "params")
        declared = _target_params(runs, target)
        if len(raw) != len(declared):
            _invalid(f"field 'params' has {len(raw)} parameters, but the target has {len(declared)}")
        params = []
        for i, (item, (name, warp_type)) in enumerate(zip(raw, declared, strict=True)):
            where = f"params[{i}]"
            _keys(item, ("adjoint", "in_out", "name", "primal"), where)
            if _str(item["name"], f"{where}.name") != name:
                _invalid(f"field '{where}.name' is {_show(item['name'])}, but the target's parameter {i} is {name!r}")
            in_out = _bool(item["in_out"], f"{where}.in_out")
            try:
                spec = param_spec(name, warp_type, in_out=in_out, what="jarp plan description")
            except TypeError as e:
                _invalid(f"parameter {name!r} of the target has no argument spec ({e})")
            if in_out and not spec.is_array:
                _invalid(f"field '{where}.in_out' is true, but parameter {name!r} is a {spec.describe()}")
            primal = _binding(item["primal"], f"{where}.primal")
            adjoint = _binding(item["adjoint"], f"{where}.adjoint")
            _check_binding(spec, primal, adjoint, operands, results, where)
            params.append(Param(spec, primal, adjoint))
        return tuple(params)


# -- target lookup -----------------------------------------------------------------------------------------------


def _find_target(runs: Runs, raw: Any, block_dim: int | None) -> Any:
    if runs is Runs.CALLABLE:
        _keys(raw, _CALLABLE_TARGET, "target")
        if raw["kind"] != "callable":
            _invalid(f"field 'target.kind' of a callable plan must be 'callable', got {_show(raw['kind'])}")
        return _find_callable(raw)
    _keys(raw, _KERNEL_TARGET, "target")
    if raw["kind"] != "kernel":
        _invalid(f"field 'target.kind' of a kernel plan must be 'kernel', got {_show(raw['kind'])}")
    return _find_kernel(raw, block_dim)


def _find_callable(raw: dict[str, Any]) -> Any:
    module = _str(raw["module"], "target.module")
    qualname = _str(raw["qualname"], "target.qualname")
    digest = _hash(raw["hash"], "target.hash")
    if "<locals>" in qualname or "<lambda>" in qualname:
        _invalid(f"field 'target.qualname' {qualname!r} names a function that cannot be found by name")
    func = _walk(module, qualname)
    if func is None:
        raise DescriptionError(
            "not_found",
            f"the program calls jax_callable function {qualname!r} of Python module {module!r}, which this "
            f"process has not defined; import {module!r} before loading the program.",
        )
    if not isinstance(func, types.FunctionType):
        _invalid(f"target {module}.{qualname} is a {type(func).__name__}, not a Python function")
    if code_hash(func.__code__) != digest:
        raise DescriptionError(
            "changed",
            f"jax_callable function {qualname!r} of Python module {module!r} has other code than the function the "
            "program was compiled with, and jarp never runs other code than what was compiled; compile the "
            "program again (or load it with the code it was compiled from).",
        )
    return func


def _find_kernel(raw: dict[str, Any], block_dim: int | None) -> wp.Kernel:
    module = _str(raw["module"], "target.module")
    python_module = _str(raw["python_module"], "target.python_module")
    key = _str(raw["key"], "target.key")
    digest = _hash(raw["hash"], "target.hash")
    checked = _bool(raw["checked"], "target.checked")
    names = tuple(_str(n, f"target.runtime[{i}]") for i, n in enumerate(_list(raw["runtime"], "target.runtime")))
    overload = raw["overload"]
    if overload is not None:
        overload = tuple(_str(t, f"target.overload[{i}]") for i, t in enumerate(_list(overload, "target.overload")))
    kernel = _warp_internals.registered_kernel(module, key)
    if kernel is None:
        raise DescriptionError(
            "not_found",
            f"the program launches Warp kernel {key!r} (Warp module {module!r}), which this process has not "
            f"defined; import the Python module that defines it, {python_module!r}, before loading the program.",
        )
    if kernel.func.__module__ != python_module:
        _invalid(
            f"field 'target.python_module' is {python_module!r}, but kernel {key!r} is defined in "
            f"{kernel.func.__module__!r}"
        )
    what = f"Warp kernel {key!r} (Python module {python_module!r})"
    if overload is not None:
        if not kernel.is_generic:
            _invalid(f"field 'target.overload' names argument types, but {what} is not generic")
        found = [
            ovl
            for ovl in list(kernel.overloads.values())
            if tuple(wp.types.type_repr(t) for _, t in _warp_internals.kernel_params(ovl)) == overload
        ]
        if not found:
            raise DescriptionError(
                "not_found",
                f"the program launches the overload ({', '.join(overload)}) of generic {what}, which this process "
                "has not made; declare it when the module is imported (wp.overload(kernel, [...])), or call the "
                "kernel with those types once, before loading the program.",
            )
        kernel = found[0]
    elif kernel.is_generic:
        _invalid(f"{what} is generic, and field 'target.overload' names no argument types")
    if _warp_internals.kernel_code_hash(kernel, _hash_block_dim(block_dim)) != digest:
        raise DescriptionError(
            "changed",
            f"{what} has other code than the kernel the program was compiled with (its Warp code hash differs: "
            "the kernel, or a wp.func, constant or struct it uses, changed), and jarp never runs other code than "
            "what was compiled; compile the program again (or load it with the code it was compiled from).",
        )
    if names:
        _check_runtime_names(kernel, names, what)
        try:
            kernel = _runtime_scalars.variant(kernel, names)
        except (TypeError, ValueError, SyntaxError) as e:
            _invalid(f"field 'target.runtime' {list(names)}: {what} has no such runtime variant ({e})")
    if checked:
        if _warp_internals.kernel_mode(kernel) == "debug":
            _invalid(f"field 'target.checked' is true, but {what} is built in debug mode already")
        kernel = _runtime_scalars.bounds_checked(kernel)
    return kernel


def _check_runtime_names(kernel: wp.Kernel, names: tuple[str, ...], what: str) -> None:
    """Each name is a scalar parameter or a struct value field of ``kernel``, once."""
    if len(set(names)) != len(names):
        _invalid(f"field 'target.runtime' names a value twice: {list(names)}")
    params = dict(_warp_internals.kernel_params(kernel))
    for name in names:
        root, _, field = name.partition(".")
        warp_type = params.get(root)
        if warp_type is None:
            _invalid(f"field 'target.runtime' names {name!r}, which is not a parameter of {what}")
        try:
            spec = param_spec(root, warp_type)
        except TypeError as e:
            _invalid(f"field 'target.runtime' names {name!r}, a parameter jarp cannot pass ({e})")
        if field:
            ok = spec.is_struct and any(leaf.name == name for leaf in spec.struct.values)
        else:
            ok = not spec.is_array and not spec.is_struct
        if not ok:
            _invalid(f"field 'target.runtime' names {name!r}, which is not a scalar parameter or struct value field")


def _target_params(runs: Runs, target: Any) -> tuple[tuple[str, Any], ...]:
    if runs is Runs.KERNEL:
        return _warp_internals.kernel_params(target)
    try:
        return _annotations.function_params(target, "jarp plan description")
    except TypeError as e:
        _invalid(f"the target's parameters cannot be read ({e})")


# -- field readers -----------------------------------------------------------------------------------------------


def _invalid(message: str) -> NoReturn:
    raise DescriptionError("invalid", f"invalid jarp plan description: {message}.")


def _show(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")
    return out


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not a JSON value")


def _keys(value: Any, keys: Sequence[str], where: str) -> None:
    if not isinstance(value, dict):
        _invalid(f"field '{where}' must be an object, got {_show(value)}")
    if set(value) != set(keys):
        missing = sorted(set(keys) - set(value))
        extra = sorted(set(value) - set(keys))
        _invalid(f"field '{where}' must have the keys {list(keys)} (missing {missing}, unknown {extra[:5]})")


def _bool(value: Any, where: str) -> bool:
    if type(value) is not bool:
        _invalid(f"field '{where}' must be a bool, got {_show(value)}")
    return value


def _int(value: Any, where: str, lo: int, hi: int) -> int:
    if type(value) is not int:
        _invalid(f"field '{where}' must be an int, got {_show(value)}")
    if not lo <= value <= hi:
        _invalid(f"field '{where}' must be in [{lo}, {hi}], got {value}")
    return value


def _str(value: Any, where: str) -> str:
    if type(value) is not str:
        _invalid(f"field '{where}' must be a string, got {_show(value)}")
    if len(value) > _MAX_STR:
        _invalid(f"field '{where}' is longer than {_MAX_STR} characters")
    return value


def _hash(value: Any, where: str) -> str:
    if type(value) is not str or not _HASH.fullmatch(value):
        _invalid(f"field '{where}' must be 64 lowercase hex digits, got {_show(value)}")
    return value


def _list(value: Any, where: str, max_len: int = _MAX_ITEMS) -> list[Any]:
    if type(value) is not list:
        _invalid(f"field '{where}' must be a list, got {_show(value)}")
    if len(value) > max_len:
        _invalid(f"field '{where}' has {len(value)} items, more than {max_len}")
    return value


def _ints(value: Any, where: str, lo: int, hi: int, max_len: int = _MAX_ITEMS) -> tuple[int, ...]:
    return tuple(_int(v, f"{where}[{i}]", lo, hi) for i, v in enumerate(_list(value, where, max_len)))


def _indices(value: Any, where: str, n: int, increasing: bool = False) -> tuple[int, ...]:
    out = _ints(value, where, 0, n - 1)
    if increasing and any(a >= b for a, b in itertools.pairwise(out)):
        _invalid(f"field '{where}' must be strictly increasing, got {list(out)}")
    return out


def _buffers(value: Any, where: str) -> tuple[Buffer, ...]:
    out = []
    for i, item in enumerate(_list(value, where)):
        here = f"{where}[{i}]"
        _keys(item, ("dtype", "shape"), here)
        dtype = _DTYPES.get(item["dtype"]) if type(item["dtype"]) is str else None
        if dtype is None:
            _invalid(f"field '{here}.dtype' must be one of {sorted(_DTYPES)}, got {_show(item['dtype'])}")
        shape = _ints(item["shape"], f"{here}.shape", 0, _MAX_SIZE, max_len=_MAX_BUFFER_NDIM)
        if math.prod(shape) * dtype.itemsize > _MAX_SIZE:
            _invalid(f"field '{here}' {list(shape)} holds more than 2**63 - 1 bytes")
        out.append(Buffer(shape, dtype))
    return tuple(out)


def _operand_batch(value: Any, n_ops: int, n_batch: int) -> tuple[tuple[bool, ...], ...]:
    rows = _list(value, "operand_batch")
    if len(rows) != n_ops:
        _invalid(f"field 'operand_batch' must have one entry per operand ({n_ops}), got {len(rows)}")
    out = []
    for i, row in enumerate(rows):
        flags = tuple(_bool(v, f"operand_batch[{i}][{j}]") for j, v in enumerate(_list(row, f"operand_batch[{i}]")))
        if len(flags) != n_batch:
            _invalid(f"field 'operand_batch[{i}]' must have one flag per batch dim ({n_batch}), got {len(flags)}")
        out.append(flags)
    return tuple(out)


def _aliases(value: Any, n_ops: int, n_res: int) -> tuple[tuple[int, int], ...]:
    out = []
    for i, pair in enumerate(_list(value, "aliases")):
        pair = _list(pair, f"aliases[{i}]")
        if len(pair) != 2:
            _invalid(f"field 'aliases[{i}]' must be an [operand, result] pair, got {_show(pair)}")
        op = _int(pair[0], f"aliases[{i}][0]", 0, n_ops - 1)
        res = _int(pair[1], f"aliases[{i}][1]", 0, n_res - 1)
        out.append((op, res))
    if len({op for op, _ in out}) != len(out) or len({res for _, res in out}) != len(out):
        _invalid(f"field 'aliases' names an operand or a result twice: {[list(p) for p in out]}")
    return tuple(out)


def _binding(value: Any, where: str) -> Binding:
    _keys(value, ("fields", "index", "source", "value"), where)
    source = value["source"]
    if type(source) is not str or source not in _SOURCES:
        _invalid(f"field '{where}.source' must be one of {list(_SOURCES)}, got {_show(source)}")
    index = _int(value["index"], f"{where}.index", -1, _MAX_ITEMS)
    fields = _ints(value["fields"], f"{where}.fields", 0, _MAX_ITEMS)
    return Binding(source, index, _decode_value(value["value"], f"{where}.value", 0), fields)


def _decode_value(value: Any, where: str, depth: int) -> Any:
    if value is None or type(value) in (bool, int):
        if type(value) is int and not -(2**63) <= value < 2**64:
            _invalid(f"field '{where}' {value} is outside the 64-bit integer range")
        return value
    if type(value) is dict and set(value) == {"float"}:
        text = value["float"]
        try:
            if type(text) is not str or len(text) > 64:
                raise ValueError
            return float.fromhex(text)
        except (ValueError, OverflowError):
            _invalid(f"field '{where}.float' must be a float in hex (float.hex()), got {_show(text)}")
    if type(value) is dict and set(value) == {"tuple"}:
        if depth >= _MAX_VALUE_DEPTH:
            _invalid(f"field '{where}' nests tuples deeper than {_MAX_VALUE_DEPTH}")
        items = _list(value["tuple"], f"{where}.tuple", max_len=256)
        return tuple(_decode_value(v, f"{where}.tuple[{i}]", depth + 1) for i, v in enumerate(items))
    if type(value) is dict and set(value) == {"numpy", "value"}:
        dtype = _DTYPES.get(value["numpy"]) if type(value["numpy"]) is str else None
        if dtype is None:
            _invalid(f"field '{where}.numpy' must be one of {sorted(_DTYPES)}, got {_show(value['numpy'])}")
        item = _decode_value(value["value"], f"{where}.value", _MAX_VALUE_DEPTH)
        if not _fits(dtype, item):
            _invalid(f"field '{where}.value' {_show(item)} is not a {dtype} value")
        return dtype.type(item)
    _invalid(
        f"field '{where}' must be null, a bool, an int, or an object tagged float, tuple or numpy; got {_show(value)}"
    )


def _fits(dtype: np.dtype, item: Any) -> bool:
    """Whether the Python value ``item`` is a value of the NumPy scalar type ``dtype`` (exactly, for floats)."""
    if dtype.kind == "b":
        return type(item) is bool
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return type(item) is int and info.min <= item <= info.max
    if type(item) is not float:
        return False
    with np.errstate(over="ignore"):
        back = float(dtype.type(item))
    return back == item or (math.isnan(back) and math.isnan(item))


# -- consistency -------------------------------------------------------------------------------------------------


def _buffer_of(b: Binding, operands: Sequence[Buffer], results: Sequence[Buffer], where: str) -> Buffer:
    bufs = operands if b.source == "operand" else results
    if not 0 <= b.index < len(bufs):
        _invalid(f"field '{where}.index' {b.index} is not one of the plan's {len(bufs)} {b.source}s")
    return bufs[b.index]


def _check_array(spec: ArgSpec, buf: Buffer, where: str) -> None:
    """The buffer bound to an array parameter (or struct field) has its dims and (for a concrete one) dtype."""
    if len(buf.shape) != spec.jax_ndim or buf.shape[spec.warp_ndim :] != spec.inner_shape:
        _invalid(
            f"{where}: the buffer of {spec.name!r} has shape {buf.shape}, but a {spec.describe()} has "
            f"{spec.warp_ndim} dims followed by {spec.inner_shape}"
        )
    if not spec.generic and buf.dtype != spec.np_dtype:
        _invalid(
            f"{where}: the buffer of {spec.name!r} has dtype {buf.dtype}, but a {spec.describe()} has {spec.np_dtype}"
        )


def _check_binding(
    spec: ArgSpec, primal: Binding, adjoint: Binding, operands: Sequence[Buffer], results: Sequence[Buffer], where: str
) -> None:
    p_where, a_where = f"{where}.primal", f"{where}.adjoint"
    if spec.is_array:
        if primal.source not in ("operand", "result") or primal.fields or primal.value is not None or primal.index < 0:
            _invalid(f"field '{p_where}' of array parameter {spec.name!r} must bind an operand or a result")
        buf = _buffer_of(primal, operands, results, p_where)
        _check_array(spec, buf, p_where)
        if adjoint.source == "none":
            _check_none(adjoint, a_where)
            return
        if adjoint.source not in ("operand", "result") or adjoint.fields or adjoint.value is not None:
            _invalid(f"field '{a_where}' of array parameter {spec.name!r} must bind an operand, a result or none")
        adj = _buffer_of(adjoint, operands, results, a_where)
        if adj != buf:
            _invalid(f"field '{a_where}': the adjoint buffer of {spec.name!r} is {adj}, its primal buffer {buf}")
        return
    if spec.is_struct:
        layout = spec.struct
        n_arrays, values = len(layout.arrays), layout.values
        if primal.source != "struct" or primal.index != -1 or len(primal.fields) != n_arrays:
            _invalid(f"field '{p_where}' of struct parameter {spec.name!r} must bind its {n_arrays} array field(s)")
        if type(primal.value) is not tuple or len(primal.value) != len(values):
            _invalid(
                f"field '{p_where}.value' of struct parameter {spec.name!r} must hold its {len(values)} value field(s)"
            )
        for leaf, i in zip(layout.array_specs, primal.fields, strict=True):
            _check_array(leaf, _buffer_of(Binding("operand", i), operands, results, f"{p_where}.fields"), p_where)
        for leaf, v in zip(values, primal.value, strict=True):
            _check_value(leaf.scalar_type, leaf.value_shape, v, f"{p_where}.value ({leaf.name})")
        if adjoint.source == "none":
            _check_none(adjoint, a_where)
            return
        if (
            adjoint.source != "struct"
            or adjoint.index != -1
            or adjoint.value is not None
            or len(adjoint.fields) != n_arrays
        ):
            _invalid(f"field '{a_where}' of struct parameter {spec.name!r} must bind its {n_arrays} array field(s)")
        for leaf, i, j in zip(layout.array_specs, primal.fields, adjoint.fields, strict=True):
            buf = _buffer_of(Binding("result", j), operands, results, f"{a_where}.fields")
            if buf != operands[i]:
                _invalid(
                    f"field '{a_where}.fields': the adjoint buffer of {leaf.name!r} is {buf}, its primal "
                    f"buffer {operands[i]}"
                )
        return
    if primal.source != "static" or primal.index != -1 or primal.fields:
        _invalid(f"field '{p_where}' of scalar parameter {spec.name!r} must be a static value")
    _check_value(spec.dtype, (), primal.value, f"{p_where}.value")
    if adjoint.source == "none":
        _check_none(adjoint, a_where)
        return
    zero = 0.0 if spec.dtype is not None and wp.types.type_is_float(spec.dtype) else 0
    if adjoint.source != "static" or adjoint.index != -1 or adjoint.fields or adjoint != Binding("static", value=zero):
        _invalid(f"field '{a_where}' of scalar parameter {spec.name!r} must be none or the static {zero!r}")


def _check_none(b: Binding, where: str) -> None:
    if b != Binding("none"):
        _invalid(f"field '{where}' with source 'none' must have index -1, no value and no fields")


def _check_value(scalar: Any, shape: tuple[int, ...], value: Any, where: str) -> None:
    """A static value is a ``scalar`` value (a Python number of its kind, in range), nested as ``shape``."""
    if shape:
        if type(value) is not tuple or len(value) != shape[0]:
            _invalid(f"field '{where}' must be a tuple of {shape[0]}, got {_show(value)}")
        for i, v in enumerate(value):
            _check_value(scalar, shape[1:], v, f"{where}[{i}]")
        return
    if isinstance(value, np.generic):
        value = value.item()
    if scalar is None:  # a generic (``Any``) scalar of a function
        ok = type(value) in (bool, int, float)
    elif scalar is wp.bool:
        ok = type(value) is bool
    elif wp.types.type_is_float(scalar):
        ok = type(value) is float
    elif wp.types.type_is_int(scalar):
        info = np.iinfo(_dtypes.to_numpy(scalar))
        ok = type(value) is int and info.min <= value <= info.max
    else:
        ok = False
    if not ok:
        _invalid(f"field '{where}' must be a {getattr(scalar, '__name__', scalar)} value, got {_show(value)}")


def _check_plan(plan: Plan) -> None:
    """The checks `_builder.build_plan` runs, and those a crafted plan could break that a built one cannot."""
    for op, res in plan.aliases:
        if plan.operands[op].dtype != plan.results[res].dtype or plan.operand_shape(op) != plan.result_shape(res):
            _invalid(
                f"field 'aliases' pairs operand {op} ({plan.operand_shape(op)}, {plan.operands[op].dtype}) with "
                f"result {res} ({plan.result_shape(res)}, {plan.results[res].dtype}), which differ"
            )
    aliased = {res for _, res in plan.aliases}
    if not set(plan.protected) <= aliased:
        _invalid(f"field 'protected' {list(plan.protected)} names results that alias no operand")
    if plan.runs is Runs.CALLABLE and (plan.bounds_checked or plan.cpu_blocks or plan.block_dim is not None):
        _invalid("a callable plan has no block_dim, cpu_blocks or bounds_checked")
    if plan.runs is Runs.KERNEL:
        abi = _warp_internals.entry_point_abi(plan.target)
        if abi != "warp":
            _invalid(f"the kernel uses Warp's entry_point_abi={abi!r}, which jarp does not launch")
        if plan.cpu_blocks and plan.block_dim is None:
            _invalid("field 'cpu_blocks' is true without a block_dim")
        if plan.bounds_checked != (_warp_internals.kernel_mode(plan.target) == "debug"):
            _invalid(
                f"field 'bounds_checked' is {plan.bounds_checked}, but the kernel is built in "
                f"{_warp_internals.kernel_mode(plan.target)!r} mode"
            )
    try:
        _launch_checks.check_array_extents(plan.params, plan.operands, plan.results, plan.name)
        if plan.runs is Runs.KERNEL:
            _launch_checks.check_launch(plan.target, plan.launch_dims, plan.block_dim, plan.name)
            names = tuple(p.spec.name for p in plan.params if p.spec.is_array or p.spec.is_struct)
            accesses = (
                _analysis.tid_indexed(_names.compiled_source(plan.target), names)
                if _races.warps_thread_index(plan.target)
                else ()
            )
            _launch_checks.check_tid_indexed(
                accesses, plan.params, plan.operands, plan.results, plan.launch_dims, plan.name
            )
    except ValueError as e:
        _invalid(f"the described launch is refused: {str(e).rstrip('.')}")  # `_invalid` ends the sentence
