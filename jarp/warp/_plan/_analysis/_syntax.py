"""Syntax-tree helpers shared by the source analyses: parsing a function, its thread index, store targets,
bindings and dotted names."""

from __future__ import annotations

import ast
from collections.abc import Iterable

from ..._upstream import _python_ast


def parse_module(source: str) -> ast.Module | None:
    """``source`` parsed (dedented), or None where it does not parse."""
    try:
        return _python_ast.parse(source, dedent=True)
    except (TypeError, SyntaxError, ValueError):
        return None


def first_function(tree: ast.Module) -> ast.FunctionDef | None:
    """The first function the module defines (a kernel's or ``@wp.func``'s source defines one)."""
    return next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)


def parse_function(source: str) -> ast.FunctionDef | None:
    """The function ``source`` defines, parsed; None where it does not parse or defines none."""
    tree = parse_module(source)
    return first_function(tree) if tree is not None else None


def tid_assignment(stmt: ast.stmt) -> tuple[str, ...] | None:
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call)):
        return None
    call = stmt.value.func
    name = call.attr if isinstance(call, ast.Attribute) else call.id if isinstance(call, ast.Name) else None
    if name != "tid" or stmt.value.args:
        return None
    return index_names(stmt.targets[0])


def index_names(node: ast.expr) -> tuple[str, ...] | None:
    if isinstance(node, ast.Name):
        return (node.id,)
    if isinstance(node, ast.Tuple) and all(isinstance(e, ast.Name) for e in node.elts):
        return tuple(e.id for e in node.elts)  # type: ignore[union-attr]
    return None


def stored_array(target: ast.expr) -> ast.expr | None:
    """The array a store target writes: what its innermost subscript indexes (``a`` in ``a[i]``, ``a[i][j]`` and
    ``a[i].x``; ``s.f`` in ``s.f[i]``), or None for a target with no subscript (a local, ``v.x`` of a local).

    Only that array is written: the index expressions are reads (``out[index[i]] += x`` writes ``out``, not
    ``index``).
    """
    node, base = target, None
    while isinstance(node, (ast.Subscript, ast.Attribute)):
        if isinstance(node, ast.Subscript):
            base = node.value
        node = node.value
    return base


def store_targets(targets: list[ast.expr]) -> list[ast.expr]:
    """Assignment targets with tuples and starred names unpacked (``a[i], b[i] = ...``)."""
    out: list[ast.expr] = []
    for t in targets:
        if isinstance(t, (ast.Tuple, ast.List)):
            out.extend(store_targets(list(t.elts)))
        elif isinstance(t, ast.Starred):
            out.extend(store_targets([t.value]))
        else:
            out.append(t)
    return out


def binding_pairs(nodes: Iterable[ast.AST]) -> list[tuple[ast.expr, ast.expr | None]]:
    """Every ``(target, value)`` the statements among ``nodes`` bind, tuples unpacked: ``a, b = x, y`` binds ``a``
    to ``x`` and ``b`` to ``y``; a tuple target unpacked from one value binds each name to that value; ``for t in
    it`` binds ``t`` to ``it``. Targets are names, attributes or subscripts, in order of appearance."""
    out: list[tuple[ast.expr, ast.expr | None]] = []
    for node in nodes:
        pairs: list[tuple[ast.expr, ast.expr | None]] = []
        if isinstance(node, ast.Assign):
            pairs = [(t, node.value) for t in node.targets]
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign, ast.NamedExpr)):
            pairs = [(node.target, node.value)]
        elif isinstance(node, ast.For):
            pairs = [(node.target, node.iter)]
        pairs.reverse()
        while pairs:
            target, value = pairs.pop()
            if isinstance(target, (ast.Tuple, ast.List)):
                if isinstance(value, (ast.Tuple, ast.List)) and len(value.elts) == len(target.elts):
                    unpacked = list(zip(target.elts, value.elts, strict=True))
                else:
                    unpacked = [(t, value) for t in target.elts]  # unpacked from one value: as the value
                pairs.extend(reversed(unpacked))
            elif isinstance(target, ast.Starred):
                pairs.append((target.value, value))
            else:
                out.append((target, value))
    return out


def attribute_path(node: ast.expr) -> tuple[str, ...] | None:
    """``s.a.b`` as ``("s", "a", "b")``; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or not parts:
        return None
    return (node.id, *reversed(parts))


def tid_derived(fn: ast.FunctionDef, tid_names: tuple[str, ...]) -> set[str]:
    """The thread indices and every local assigned from an expression that reads one (or such a local).

    A guard may test the thread index through a local (``inside = i < n`` then ``if inside:``): to prove that no
    condition depends on the thread index, every such local counts as the thread index.
    """
    derived = set(tid_names)
    while True:
        before = len(derived)
        for node in ast.walk(fn):
            if not isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)) or node.value is None:
                continue
            if any(isinstance(n, ast.Name) and n.id in derived for n in ast.walk(node.value)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:  # locals only: a store into an array (``out[i] = ...``) taints nothing
                    names = t.elts if isinstance(t, ast.Tuple) else [t]
                    derived.update(n.id for n in names if isinstance(n, ast.Name))
        if len(derived) == before:
            return derived


def call_path(func: ast.expr) -> tuple[str, ...] | None:
    """A callee's dotted name (``("wp", "atomic_add")``); None for a computed one (``wp.static(f)``)."""
    if isinstance(func, ast.Name):
        return (func.id,)
    return attribute_path(func)
