"""Which outputs every launch thread overwrites (the zero-fill a launch may skip), and which in-out arrays a kernel
stores into plainly rather than only accumulating (Warp's adjoint does not clear an overwritten value's adjoint).

jarp zero-fills pure outputs before a launch so that accumulating kernels are correct. For the common elementwise
kernel (``out[i] = ...`` with ``i = wp.tid()``) that fill is a wasted pass over memory, which matters for large
arrays. `overwritten_outputs` proves, conservatively, that a kernel writes each element of an output exactly where
its thread index points, so the fill can be skipped. Anything it does not recognise keeps the fill, and so does
anything the generated code does with the output other than store into it (`overwritten_in_code`).
"""

from __future__ import annotations

import ast
import functools

import warp as wp

from .. import _cache_table
from . import _generated, _names, _writes
from ._syntax import index_names, parse_function, parse_module, store_targets, stored_array, tid_assignment


def overwritten_in_code(kernel: wp.Kernel, output_names: tuple[str, ...]) -> dict[str, int]:
    """`overwritten_outputs` of the code Warp compiles for ``kernel``, where its generated code agrees.

    The source proof sees the kernel's text; the generated code (`_generated.stored_only`) must use each output's
    pointer only to store into it, in the kernel's own code: a load, a reference, a function or an operator
    overload handed the output keeps its fill.

    Returns:
        ``{output name: number of thread index names}`` as `overwritten_outputs`, less what the generated code
        does not confirm (all of it where Warp could not generate the code).
    """
    claims = overwritten_outputs(_names.compiled_source(kernel), output_names)
    if not claims:
        return claims
    record = _writes.codegen_record(kernel)
    stored = _generated.stored_only(record.functions) if record.error is None else ()
    return {name: rank for name, rank in claims.items() if name in stored}


@_cache_table.register_function
@functools.lru_cache(maxsize=1024)
def overwritten_outputs(source: str, output_names: tuple[str, ...]) -> dict[str, int]:
    """Map each output that the kernel provably overwrites at its thread index to the tid rank.

    An output ``out`` qualifies when the kernel body, at top level and with no
    ``return`` anywhere, assigns ``i, j, ... = wp.tid()`` once and then
    ``out[i, j, ...] = <expr>`` once, and ``out`` is used nowhere else except
    through ``out.shape``. Launching it over exactly ``out``'s shape then writes
    every element.

    The thread index names must all differ: ``i, i = wp.tid()`` in a 2-d launch
    writes ``out[i, i]``, the diagonal alone. The caller checks the rest of what
    the analysis cannot see: that the tid rank equals the launch's number of dims
    and ``out``'s, and that ``out``'s shape is the launch's.

    Args:
        source: the kernel's source.
        output_names: the pure outputs' parameter names.

    Returns:
        ``{output name: number of thread index names}`` for each provably overwritten
        output; empty for source it cannot parse or prove.
    """
    fn = parse_function(source)
    if fn is None or any(isinstance(n, (ast.Return, ast.Global, ast.Nonlocal)) for n in ast.walk(fn)):
        return {}
    tid_names: tuple[str, ...] | None = None
    result: dict[str, int] = {}
    for stmt in fn.body:
        if tid_names is None:
            tid_names = tid_assignment(stmt)
            continue
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if (
                isinstance(target, ast.Subscript)
                and isinstance(target.value, ast.Name)
                and target.value.id in output_names
                and index_names(target.slice) == tid_names
            ):
                result.setdefault(target.value.id, 0)
                result[target.value.id] += 1
    if tid_names is None or len(set(tid_names)) != len(tid_names):
        return {}  # no thread index, or a repeated name (``i, i = wp.tid()``: one element per row)
    assigned = [
        n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id in tid_names and isinstance(n.ctx, ast.Store)
    ]
    if len(assigned) != len(tid_names):
        return {}
    safe = {}
    for name, count in result.items():
        if count == 1 and _other_uses(fn, name, tid_names) == 0:
            safe[name] = len(tid_names)
    return safe


def _other_uses(fn: ast.FunctionDef, name: str, tid_names: tuple[str, ...]) -> int:
    """Uses of ``name`` other than plain ``name[tid] = ...`` stores and ``name.shape`` reads."""
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(fn):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    uses = 0
    for node in ast.walk(fn):
        if not (isinstance(node, ast.Name) and node.id == name):
            continue
        parent = parents.get(node)
        if isinstance(parent, (ast.arguments, ast.arg)):
            continue
        if isinstance(parent, ast.Attribute) and parent.attr == "shape":
            continue
        if (
            isinstance(parent, ast.Subscript)
            and parent.value is node
            and isinstance(parents.get(parent), ast.Assign)
            and parent in parents[parent].targets  # pyright: ignore[reportAttributeAccessIssue]  # an Assign (above); a store: ``v = name[i]`` reads the unfilled element
            and index_names(parent.slice) == tid_names
        ):
            continue
        uses += 1
    return uses


@_cache_table.register_function
@functools.lru_cache(maxsize=1024)
def plainly_stored(source: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """Which of ``names`` the kernel assigns with a plain store (``a[i] = ...``), not only accumulates into.

    Warp's adjoint differentiates reads and accumulations (``a[i] += x``,
    ``wp.atomic_add``) of an in-out array correctly, but not overwrites: the
    overwritten value's adjoint is never cleared. Unparsable source counts as storing.
    """
    tree = parse_module(source)
    if tree is None:
        return names
    stored = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in store_targets(node.targets):
                base = stored_array(target)
                if isinstance(base, ast.Name) and base.id in names:
                    stored.add(base.id)
    return tuple(n for n in names if n in stored)
