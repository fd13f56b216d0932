"""Which arrays a kernel indexes with its thread index, unguarded (`tid_indexed`): every thread then reaches its own
element, so such an array must be at least as long as the launch along that dim (`_launch_checks`)."""

from __future__ import annotations

import ast
import functools

from .. import _cache_table
from ._syntax import attribute_path, parse_function, tid_assignment, tid_derived


@_cache_table.register_function
@functools.lru_cache(maxsize=1024)
def tid_indexed(source: str, roots: tuple[str, ...]) -> tuple[tuple[str, int, int], ...]:
    """The arrays the kernel indexes with its thread index, unguarded: ``(path, array dim, tid component)``.

    ``path`` is a parameter in ``roots`` (``"x"``) or a struct parameter's array field (``"mesh.cells"``). An
    access ``a[i]`` or ``a[i, j]`` with ``i, j = wp.tid()`` counts when nothing can keep a thread from reaching
    it: the body has no ``return``, the access is in no branch of a condition (``if``, ``while``, a conditional
    expression) and no loop body whose header reads a thread index (an ``assert`` or a ``break``/``continue`` under
    such a condition leaves nothing proven), and the thread indices, all named differently, are assigned once, at
    the top of the body. Every thread then accesses ``a`` at its own index, so ``a`` must be at least as long as the launch along
    that dim.

    Returns:
        The accesses, in order of appearance, without repeats; none for a kernel it cannot read or prove.
    """
    fn = parse_function(source)
    if fn is None or any(isinstance(n, (ast.Return, ast.Global, ast.Nonlocal)) for n in ast.walk(fn)):
        return ()
    tid_names = next((t for t in map(tid_assignment, fn.body) if t is not None), None)
    if tid_names is None or len(set(tid_names)) != len(tid_names):
        return ()  # no thread index, or a repeated name (``i, i = wp.tid()``): which component it holds is unclear
    stores = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id in tid_names and isinstance(n.ctx, ast.Store)]
    if len(stores) != len(tid_names):
        return ()  # a thread index reassigned (or a loop variable of the same name): not provable
    derived = tid_derived(fn, tid_names)

    def reads_tid(*tests: ast.AST) -> bool:
        return any(isinstance(n, ast.Name) and n.id in derived for t in tests for n in ast.walk(t))

    # What a thread may not reach: the branches of a condition, and the body of a loop, that read a thread index
    # (``if i < n``, ``ok = i < n`` then ``if ok``, ``for k in range(n - i)``, a hash-grid query at ``x[i]``). The
    # condition or loop header itself, and the code before and after, every thread runs.
    guarded: set[int] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.Assert) and reads_tid(node.test):
            return ()  # a failed assert stops the thread: what follows may not be reached
        if isinstance(node, ast.comprehension) and reads_tid(*node.ifs):
            return ()
        if isinstance(node, (ast.If, ast.While)) and reads_tid(node.test):
            parts = [*node.body, *node.orelse]
        elif isinstance(node, ast.IfExp) and reads_tid(node.test):
            parts = [node.body, node.orelse]
        elif isinstance(node, ast.For) and reads_tid(node.iter):
            parts = [*node.body, *node.orelse]
        else:
            continue
        for sub in (n for part in parts for n in ast.walk(part)):
            if isinstance(sub, (ast.Break, ast.Continue)):
                return ()  # it may skip the rest of an enclosing loop too
            guarded.add(id(sub))
    found: list[tuple[str, int, int]] = []
    for node in ast.walk(fn):
        if not isinstance(node, ast.Subscript) or id(node) in guarded:
            continue
        base = node.value
        path = (base.id,) if isinstance(base, ast.Name) else attribute_path(base)
        if path is None or path[0] not in roots:
            continue
        index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        for dim, entry in enumerate(index):
            if isinstance(entry, ast.Name) and entry.id in tid_names:
                access = (".".join(path), dim, tid_names.index(entry.id))
                if access not in found:
                    found.append(access)
    return tuple(found)
