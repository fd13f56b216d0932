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
    it: the body has no ``return`` and no condition (``if``, ``while``, a conditional expression, ``assert``)
    reads a thread index, and the thread indices, all named differently, are assigned once, at the top of the
    body. Every thread then accesses ``a`` at its own index, so ``a`` must be at least as long as the launch along
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
    for node in ast.walk(fn):
        tests = []
        if isinstance(node, (ast.If, ast.While, ast.IfExp, ast.Assert)):
            tests.append(node.test)
        elif isinstance(node, ast.comprehension):
            tests.extend(node.ifs)
        elif isinstance(node, ast.For):
            tests.append(node.iter)  # ``for k in range(n - i)``: a loop a thread may skip
        if any(isinstance(n, ast.Name) and n.id in derived for t in tests for n in ast.walk(t)):
            return ()  # a thread may be kept from its access (``if i < n``, ``ok = i < n`` then ``if ok``)
    found: list[tuple[str, int, int]] = []
    for node in ast.walk(fn):
        if not isinstance(node, ast.Subscript):
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
