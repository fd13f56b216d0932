"""What a kernel writes, judged by the code Warp compiles: which array parameters and which struct array fields.

XLA owns a jarp call's inputs (it may share their buffers with the caller), so a kernel may not write one unless
it is declared in-out. Two sources decide, and a write either one sees counts (in doubt: write):

1. Warp's own record (`_warp_internals.array_access`): the array parameters its code generator marked written
   while it generated the kernel, after resolving names (closures, globals, module attributes, keyword arguments,
   aliases of builtins, ``@wp.func`` calls) and folding branches on Python constants. A store Warp never emits
   is no write.
2. The resolver (`writes`): a walk of the syntax tree Warp compiles (`_names.live_nodes`: folded branches
   skipped), names resolved as Warp resolves them (`_names`), followed into every ``@wp.func`` overload a call
   reaches. It sees what Warp's record does not: stores through a struct's array field (``s.arr[i] = x``, a
   field handed to a ``@wp.func``), tile stores and tile atomics.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

import warp as wp

from .._upstream import _warp_internals
from . import _names
from ._analysis import _store_targets, stored_array
from ._weakcache import weak_cache

_MAX_DEPTH = 8  # deep enough for real code, bounded for recursive functions
# Builtins that write into their first argument (an array), besides every ``atomic_*``.
_WRITING_PREFIXES = ("atomic_", "tile_store", "tile_atomic", "tile_scatter")
_WRITING_BUILTINS = frozenset(
    {"array_store", "add_inplace", "sub_inplace", "assign_inplace", "bit_and_inplace", "bit_or_inplace"}
    | {"bit_xor_inplace"}
)
# Keyword names of the written array in those builtins (``wp.atomic_add(arr=x, ...)``, ``wp.tile_store(a=x, ...)``).
_WRITTEN_KEYWORDS = ("arr", "a")
_COMPONENTS = frozenset({"x", "y", "z", "w", "p", "q"})


def writes_first_argument(key: str) -> bool:
    """Whether the Warp builtin ``key`` writes into the array it is given first (atomics, tile stores)."""
    return key.startswith(_WRITING_PREFIXES) or key in _WRITING_BUILTINS


def written_inputs(kernel: wp.Kernel, names: tuple[str, ...]) -> tuple[str, ...]:
    """Which of the array parameters ``names`` ``kernel`` writes, by Warp's record or the resolver.

    Args:
        kernel: a concrete kernel (an overload of a generic kernel).
        names: array parameter names.

    Returns:
        The written ones, in the order of ``names``.
    """
    record = _record(kernel)

    def seen(found: tuple[str, ...]) -> set[str]:
        return {n for n in names if n in found or any(p.startswith(n + ".") for p in found)}

    # The resolver with call-site constants (``helper(x, i, False)`` skips the helper's ``if flag:``), and without
    general, specialised = seen(writes(kernel, specialise=False)), seen(writes(kernel))
    written = set(specialised)
    if record is not None:
        for n in names:
            # Warp's record is context-insensitive: a function's parameter is written if any call could write it.
            # It is overruled only where the resolver agrees with it on that model and proves the write dead for
            # the constants this kernel passes; any other disagreement keeps the write.
            if n in record and record[n].written and not (n in general and n not in specialised):
                written.add(n)
    return tuple(n for n in names if n in written)


def written_struct_fields(kernel: wp.Kernel, structs: tuple[str, ...]) -> tuple[str, ...]:
    """The array fields of the struct parameters ``structs`` that ``kernel`` writes (``"mesh.verts"``).

    A struct handed whole to something jarp cannot follow counts as written whole (its name alone).
    """
    _record(kernel)  # Warp's hash pass substitutes the wp.static() expressions first
    found = writes(kernel)
    return tuple(p for p in found if p.split(".", 1)[0] in structs)


@weak_cache
def _record(kernel: wp.Kernel) -> dict[str, _warp_internals.ArrayAccess] | None:
    """Warp's read/write record of ``kernel`` (`_warp_internals.array_access`), generated once per kernel."""
    return _warp_internals.array_access(kernel)


@weak_cache
def _kernel_writes(kernel: wp.Kernel, specialise: bool) -> tuple[str, ...]:
    params = _warp_internals.kernel_params(kernel)
    types: dict[str, Any] = {}
    for label, warp_type in params:
        _add_types(types, label, warp_type, 0)
    context = _Context(types, specialise)
    return tuple(sorted(_function_writes(kernel, {label: label for label, _ in params}, {}, context, 0)))


@dataclasses.dataclass(frozen=True)
class _Context:
    """What every function of one kernel's walk shares."""

    types: dict[str, Any]  # the Warp type of each kernel parameter path (``"s.arr"``)
    specialise: bool  # follow constants a call passes into the callee's conditions


def _add_types(types: dict[str, Any], path: str, warp_type: Any, depth: int) -> None:
    """The Warp type of a parameter path and, for a struct, of each field's path (``"s.arr"``)."""
    types[path] = warp_type
    if depth < _MAX_DEPTH and _warp_internals.is_struct_type(warp_type):
        for field, field_type in _warp_internals.struct_fields(warp_type):
            _add_types(types, f"{path}.{field}", field_type, depth + 1)


def writes(kernel: wp.Kernel, specialise: bool = True) -> tuple[str, ...]:
    """Every parameter path ``kernel``'s compiled code may write: ``"x"``, ``"s.arr"``, or ``"s"`` (whole).

    Args:
        kernel: a concrete kernel.
        specialise: skip a called function's branches that the constants the call passes decide
            (``bump_if(x, i, False)`` with ``if flag: a[i] = ...``): Warp compiles them, but they never run.

    Returns:
        The paths, sorted. Cached with the kernel.
    """
    return _kernel_writes(kernel, specialise)


def _function_writes(fn: Any, roots: dict[str, str], consts: dict[str, Any], context: _Context, depth: int) -> set[str]:
    """The caller's paths that ``fn`` writes, given which caller path each of its parameters names (``roots``)
    and which of its parameters the call passes a constant (``consts``)."""
    if not roots:
        return set()
    tree = _names.function_tree(fn)
    if tree is None or depth >= _MAX_DEPTH:
        return set(roots.values())  # unreadable or too deep: every array handed to it counts as written
    reassigned = _names.assigned_names(tree)
    consts = {k: v for k, v in consts.items() if k not in reassigned} if context.specialise else {}
    return _Walk(fn, tree, roots, consts, context, depth).run()


class _Walk:
    """One function's stores, atomics and calls, on the branches Warp compiles."""

    def __init__(
        self,
        fn: Any,
        tree: ast.FunctionDef,
        roots: dict[str, str],
        consts: dict[str, Any],
        context: _Context,
        depth: int,
    ):
        self.fn = fn
        self.context = context
        self.types = context.types
        self.consts = consts
        self.func = getattr(fn, "func", None)
        self.tree = tree
        self.depth = depth
        self.locals = _names.local_names(tree)
        self.nodes = list(_names.live_nodes(self.func, tree, consts))
        self.paths: dict[str, str] = dict(roots)  # name or dotted local path -> caller path
        self.written: set[str] = set()

    def run(self) -> set[str]:
        self._aliases()
        for node in self.nodes:
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in _store_targets(list(targets)):
                    base = stored_array(target)
                    path = self.path(base) if base is not None else None
                    if path is not None:
                        self.written.add(path)
            elif isinstance(node, ast.Call):
                self._call(node)
        return self.written

    def path(self, expr: ast.expr | None) -> str | None:
        """The caller path ``expr`` names (an array, a struct, a struct's field, or a view of an array)."""
        if isinstance(expr, ast.Name):
            return self.paths.get(expr.id)
        if isinstance(expr, ast.Attribute):
            if expr.attr == "shape" or expr.attr in _COMPONENTS:
                return None
            dotted = _dotted(expr)
            if dotted is not None and dotted in self.paths:
                return self.paths[dotted]
            base = self.path(expr.value)
            return None if base is None else f"{base}.{expr.attr}"
        if isinstance(expr, ast.Subscript):
            base = self.path(expr.value)
            if base is None:
                return None
            warp_type = self.types.get(base)
            if warp_type is None:
                return base  # a path of unknown type (a local struct's field): in doubt, the array itself
            if not wp.types.is_array(warp_type):
                return None  # a component of a value (``s.v[0]``): the struct is passed by value
            index = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
            # ``a[i]`` of a 2-d array is a view of ``a``, and a struct element a reference into it; a scalar,
            # vector or matrix element is a value
            if len(index) < warp_type.ndim or _warp_internals.is_struct_type(warp_type.dtype):
                return base
            return None
        return None

    def _aliases(self) -> None:
        """Locals (and local struct fields) bound to a path: ``b = a``, ``h.arr = out``, ``r = a[i]``."""
        changed = True
        while changed:
            changed = False
            for node in self.nodes:
                if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                    continue
                path = self.path(node.value)
                if path is None:
                    continue
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    key = target.id if isinstance(target, ast.Name) else _dotted(target)
                    if key is not None and key not in self.paths:
                        self.paths[key] = path
                        changed = True

    def _call(self, node: ast.Call) -> None:
        name, obj = _names.callee(self.func, node, self.locals)
        key = _names.builtin_key(name, obj, self.func)
        if key is not None:
            if writes_first_argument(key):
                first = node.args[0] if node.args else None
                if first is None:
                    first = next((k.value for k in node.keywords if k.arg in _WRITTEN_KEYWORDS), None)
                path = self.path(first)
                if path is not None:
                    self.written.add(path)
            return
        handed = [(i, self.path(a)) for i, a in enumerate(node.args)]
        named = [(k.arg, self.path(k.value)) for k in node.keywords]
        if not any(p for _, p in (*handed, *named)):
            return
        if isinstance(obj, wp.Function) and not obj.is_builtin():
            for overload in dict.fromkeys([obj, *getattr(obj, "user_overloads", {}).values()]):
                params = [label for label, _ in _warp_internals.kernel_params(overload)]
                roots = {params[i]: p for i, p in handed if p is not None and i < len(params)}
                roots |= {k: p for k, p in named if p is not None and k is not None}
                if len(roots) < sum(1 for _, p in (*handed, *named) if p is not None):
                    self.written.update(p for _, p in (*handed, *named) if p is not None)  # *args, **kwargs
                self.written |= _function_writes(
                    overload, roots, self._constants(node, params), self.context, self.depth + 1
                )
            return
        if isinstance(obj, type) or _warp_internals.is_struct_type(obj):
            return  # a constructor (a struct, a vector): it copies what it is given
        # A callee jarp cannot follow (computed, a callable parameter): what it is handed counts as written
        self.written.update(p for _, p in (*handed, *named) if p is not None)

    def _constants(self, node: ast.Call, params: list[str]) -> dict[str, Any]:
        """The callee's parameters that this call passes a constant (a literal, a captured flag, or a constant
        this function was itself passed)."""
        if not self.context.specialise:
            return {}
        consts: dict[str, Any] = {}
        pairs = [(params[i], a) for i, a in enumerate(node.args) if i < len(params)]
        pairs += [(k.arg, k.value) for k in node.keywords if k.arg is not None]
        for param, arg in pairs:
            value = _names.constant(self.func, arg, self.locals, self.consts)
            if value is not _names.UNKNOWN:
                consts[param] = value
        return consts


def _dotted(expr: ast.expr) -> str | None:
    parts = []
    while isinstance(expr, ast.Attribute):
        parts.append(expr.attr)
        expr = expr.value
    if not isinstance(expr, ast.Name):
        return None
    return ".".join([expr.id, *reversed(parts)])
