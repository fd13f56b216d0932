"""Naming a plan's target by content, and finding it among what this process has defined.

A kernel is named by its Warp module and key, Warp's per-kernel code hash and the recipe of jarp's derived kernel;
a ``jax_callable`` function by its Python module, ``__qualname__`` and `code_hash`. Finding one looks only in
Warp's module registry and ``sys.modules`` (an attribute walk): nothing is imported.
"""

from __future__ import annotations

import hashlib
import sys
import types
from typing import Any

import warp as wp

from ..._upstream import _warp_kernels
from .. import _annotations, _runtime_scalars
from .._signature import param_spec
from .._values import Runs
from ._fields import (
    CALLABLE_TARGET,
    KERNEL_TARGET,
    ContentError,
    check_keys,
    invalid,
    read_bool,
    read_hash,
    read_list,
    read_str,
    show,
)


def hash_block_dim(block_dim: int | None) -> int:
    """The block dim whose module build the code hash is taken from (the CUDA one a launch uses)."""
    return _warp_kernels.CUDA_BLOCK_DIM if block_dim is None else block_dim


def resolve_qualname(module: str, qualname: str) -> Any:
    """``sys.modules[module]``'s attribute path ``qualname``, or None; nothing is imported."""
    obj = sys.modules.get(module)
    for part in qualname.split("."):
        if obj is None or not part.isidentifier():
            return None
        obj = getattr(obj, part, None)
    return obj


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


def _hash_code(h: hashlib._Hash, code: types.CodeType) -> None:
    h.update(b"code")
    for n in (code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount):
        h.update(n.to_bytes(4, "little"))
    h.update(len(code.co_code).to_bytes(8, "little") + code.co_code)
    for names in (code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars):
        _hash_const(h, names)
    _hash_const(h, code.co_consts)


def _hash_const(h: hashlib._Hash, value: object) -> None:
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


def _const_digest(value: object) -> bytes:
    h = hashlib.sha256()
    _hash_const(h, value)
    return h.digest()


def find_target(runs: Runs, raw: dict[str, Any], block_dim: int | None) -> Any:
    if runs is Runs.CALLABLE:
        check_keys(raw, CALLABLE_TARGET, "target")
        if raw["kind"] != "callable":
            invalid(f"field 'target.kind' of a callable plan must be 'callable', got {show(raw['kind'])}")
        return _find_callable(raw)
    check_keys(raw, KERNEL_TARGET, "target")
    if raw["kind"] != "kernel":
        invalid(f"field 'target.kind' of a kernel plan must be 'kernel', got {show(raw['kind'])}")
    return _find_kernel(raw, block_dim)


def _find_callable(raw: dict[str, Any]) -> Any:
    module = read_str(raw["module"], "target.module")
    qualname = read_str(raw["qualname"], "target.qualname")
    digest = read_hash(raw["hash"], "target.hash")
    if "<locals>" in qualname or "<lambda>" in qualname:
        invalid(f"field 'target.qualname' {qualname!r} names a function that cannot be found by name")
    func = resolve_qualname(module, qualname)
    if func is None:
        raise ContentError(
            "not_found",
            f"the program calls jax_callable function {qualname!r} of Python module {module!r}, which this "
            f"process has not defined; import {module!r} before loading the program.",
        )
    if not isinstance(func, types.FunctionType):
        invalid(f"target {module}.{qualname} is a {type(func).__name__}, not a Python function")
    if code_hash(func.__code__) != digest:
        raise ContentError(
            "changed",
            f"jax_callable function {qualname!r} of Python module {module!r} has other code than the function the "
            "program was compiled with, and jarp never runs other code than what was compiled; compile the "
            "program again (or load it with the code it was compiled from).",
        )
    return func


def _find_kernel(raw: dict[str, Any], block_dim: int | None) -> wp.Kernel:
    module = read_str(raw["module"], "target.module")
    python_module = read_str(raw["python_module"], "target.python_module")
    key = read_str(raw["key"], "target.key")
    digest = read_hash(raw["hash"], "target.hash")
    checked = read_bool(raw["checked"], "target.checked")
    names = tuple(
        read_str(n, f"target.runtime[{i}]") for i, n in enumerate(read_list(raw["runtime"], "target.runtime"))
    )
    overload = raw["overload"]
    if overload is not None:
        overload = tuple(
            read_str(t, f"target.overload[{i}]") for i, t in enumerate(read_list(overload, "target.overload"))
        )
    kernel = _warp_kernels.registered_kernel(module, key)
    if kernel is None:
        raise ContentError(
            "not_found",
            f"the program launches Warp kernel {key!r} (Warp module {module!r}), which this process has not "
            f"defined; import the Python module that defines it, {python_module!r}, before loading the program.",
        )
    if kernel.func.__module__ != python_module:
        invalid(
            f"field 'target.python_module' is {python_module!r}, but kernel {key!r} is defined in "
            f"{kernel.func.__module__!r}"
        )
    what = f"Warp kernel {key!r} (Python module {python_module!r})"
    if overload is not None:
        if not kernel.is_generic:
            invalid(f"field 'target.overload' names argument types, but {what} is not generic")
        found = [
            ovl
            for ovl in list(kernel.overloads.values())
            if tuple(wp.types.type_repr(t) for _, t in _warp_kernels.kernel_params(ovl)) == overload
        ]
        if not found:
            raise ContentError(
                "not_found",
                f"the program launches the overload ({', '.join(overload)}) of generic {what}, which this process "
                "has not made; declare it when the module is imported (wp.overload(kernel, [...])), or call the "
                "kernel with those types once, before loading the program.",
            )
        kernel = found[0]
    elif kernel.is_generic:
        invalid(f"{what} is generic, and field 'target.overload' names no argument types")
    if _warp_kernels.current_code_hash(kernel, hash_block_dim(block_dim)) != digest:  # the code as it stands
        raise ContentError(
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
            invalid(f"field 'target.runtime' {list(names)}: {what} has no such runtime variant ({e})")
    if checked:
        if _warp_kernels.kernel_mode(kernel) == "debug":
            invalid(f"field 'target.checked' is true, but {what} is built in debug mode already")
        kernel = _runtime_scalars.bounds_checked(kernel)
    return kernel


def _check_runtime_names(kernel: wp.Kernel, names: tuple[str, ...], what: str) -> None:
    """Each name is a scalar parameter or a struct value field of ``kernel``, once."""
    if len(set(names)) != len(names):
        invalid(f"field 'target.runtime' names a value twice: {list(names)}")
    params = dict(_warp_kernels.kernel_params(kernel))
    for name in names:
        root, _, field = name.partition(".")
        warp_type = params.get(root)
        if warp_type is None:
            invalid(f"field 'target.runtime' names {name!r}, which is not a parameter of {what}")
        try:
            spec = param_spec(root, warp_type)
        except TypeError as e:
            invalid(f"field 'target.runtime' names {name!r}, a parameter jarp cannot pass ({e})")
        if field:
            ok = spec.is_struct and any(leaf.name == name for leaf in spec.struct.values)
        else:
            ok = not spec.is_array and not spec.is_struct
        if not ok:
            invalid(f"field 'target.runtime' names {name!r}, which is not a scalar parameter or struct value field")


def target_params(runs: Runs, target: Any) -> tuple[tuple[str, Any], ...]:
    if runs is Runs.KERNEL:
        return _warp_kernels.kernel_params(target)
    try:
        return _annotations.function_params(target, "jarp plan description")
    except TypeError as e:
        invalid(f"the target's parameters cannot be read ({e})")
