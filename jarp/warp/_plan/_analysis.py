"""Static analysis of kernel source: which outputs every launch thread overwrites, which arrays it writes, and
which arrays it indexes with its thread index.

jarp zero-fills pure outputs before a launch so that accumulating kernels are
correct. For the common elementwise kernel (``out[i] = ...`` with ``i = wp.tid()``)
that fill is a wasted pass over memory, which matters for large arrays. This
module proves, conservatively, that a kernel writes each element of an output
exactly where its thread index points, so the fill can be skipped. Anything it
does not recognise keeps the fill.
"""

from __future__ import annotations

import ast
import functools
import textwrap


@functools.lru_cache(maxsize=1024)
def overwritten_outputs(source: str, output_names: tuple[str, ...]) -> dict[str, int]:
    """Map each output that the kernel provably overwrites at its thread index to the tid rank.

    An output ``out`` qualifies when the kernel body, at top level and with no
    ``return`` anywhere, assigns ``i, j, ... = wp.tid()`` once and then
    ``out[i, j, ...] = <expr>`` once, and ``out`` is used nowhere else except
    through ``out.shape``. Launching it over exactly ``out``'s shape then writes
    every element.
    """
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (TypeError, SyntaxError, ValueError):
        return {}
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if fn is None or any(isinstance(n, (ast.Return, ast.Global, ast.Nonlocal)) for n in ast.walk(fn)):
        return {}
    tid_names: tuple[str, ...] | None = None
    result: dict[str, int] = {}
    for stmt in fn.body:
        if tid_names is None:
            tid_names = _tid_assignment(stmt)
            continue
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target = stmt.targets[0]
            if (
                isinstance(target, ast.Subscript)
                and isinstance(target.value, ast.Name)
                and target.value.id in output_names
                and _index_names(target.slice) == tid_names
            ):
                result.setdefault(target.value.id, 0)
                result[target.value.id] += 1
    if tid_names is None:
        return {}
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


def _tid_assignment(stmt: ast.stmt) -> tuple[str, ...] | None:
    if not (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.value, ast.Call)):
        return None
    call = stmt.value.func
    name = call.attr if isinstance(call, ast.Attribute) else call.id if isinstance(call, ast.Name) else None
    if name != "tid" or stmt.value.args:
        return None
    return _index_names(stmt.targets[0])


def _index_names(node: ast.expr) -> tuple[str, ...] | None:
    if isinstance(node, ast.Name):
        return (node.id,)
    if isinstance(node, ast.Tuple) and all(isinstance(e, ast.Name) for e in node.elts):
        return tuple(e.id for e in node.elts)  # type: ignore[union-attr]
    return None


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
            and _index_names(parent.slice) == tid_names
        ):
            continue
        uses += 1
    return uses


@functools.lru_cache(maxsize=1024)
def plainly_stored(source: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """Which of ``names`` the kernel assigns with a plain store (``a[i] = ...``), not only accumulates into.

    Warp's adjoint differentiates reads and accumulations (``a[i] += x``,
    ``wp.atomic_add``) of an in-out array correctly, but not overwrites: the
    overwritten value's adjoint is never cleared. Unparsable source counts as storing.
    """
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (TypeError, SyntaxError, ValueError):
        return names
    stored = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                for sub in ast.walk(target):
                    if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) and sub.value.id in names:
                        stored.add(sub.value.id)
    return tuple(n for n in names if n in stored)


_WRITING_CALLS = ("array_store",)


@functools.lru_cache(maxsize=1024)
def written_arrays(source: str, names: tuple[str, ...]) -> tuple[tuple[str, ...], tuple[tuple[str, int, str], ...]]:
    """Which of ``names`` the function body writes: ``a[i] = ...``, ``a[i] += ...``, ``wp.atomic_*(a, ...)``.

    Local aliases (``b = a``, then writes through ``b``) count as writes to ``a``.

    Returns:
        The names written directly, and the calls ``(callee name, argument position, name)``
        that pass one of ``names`` on, for the caller to follow into ``@wp.func`` bodies.
    """
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (TypeError, SyntaxError, ValueError):
        return (), ()
    # alias -> the parameter it refers to, to a fixed point (b = a; c = b)
    alias = {n: n for n in names}
    changed = True
    while changed:
        changed = False
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Name) and node.value.id in alias:
                for target in node.targets:
                    if isinstance(target, ast.Name) and target.id not in alias:
                        alias[target.id] = alias[node.value.id]
                        changed = True
    written = set()

    def mark(expr: ast.expr) -> None:
        for sub in ast.walk(expr):
            if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name) and sub.value.id in alias:
                written.add(alias[sub.value.id])
            elif isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Subscript):
                mark(sub.value)

    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
            for pos, arg in enumerate(node.args):
                if isinstance(arg, ast.Name) and arg.id in alias:
                    calls.append((node.func.id, pos, alias[arg.id]))
        if isinstance(node, ast.Assign):
            for target in node.targets:
                mark(target)
        elif isinstance(node, ast.AugAssign):
            mark(node.target)
        elif isinstance(node, ast.Call) and node.args:
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            first = node.args[0]
            if (
                (name.startswith("atomic_") or name in _WRITING_CALLS)
                and isinstance(first, ast.Name)
                and first.id in alias
            ):
                written.add(alias[first.id])
    return tuple(n for n in names if n in written), tuple(calls)


def attribute_path(node: ast.expr) -> tuple[str, ...] | None:
    """``s.a.b`` as ``("s", "a", "b")``; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or not parts:
        return None
    return (node.id, *reversed(parts))


@functools.lru_cache(maxsize=1024)
def written_struct_fields(source: str, names: tuple[str, ...]) -> tuple[str, ...]:
    """The array fields of struct parameters ``names`` that the kernel writes (``s.f[i] = ...``, ``+=``, atomics).

    Returns:
        Dotted paths (``"mesh.verts"``), in order of appearance. Unparsable source writes nothing
        that can be named (the caller cannot refuse what it cannot see).
    """
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (TypeError, SyntaxError, ValueError):
        return ()
    written: list[str] = []

    def mark(expr: ast.expr | None) -> None:
        path = attribute_path(expr) if expr is not None else None
        if path is not None and path[0] in names:
            name = ".".join(path)
            if name not in written:
                written.append(name)

    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, ast.AugAssign):
            targets = [node.target]
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Subscript):
                    mark(sub.value)
        if isinstance(node, ast.Call) and node.args:
            func = node.func
            fname = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
            if fname.startswith("atomic_") or fname in _WRITING_CALLS:
                mark(node.args[0])
    return tuple(written)


def _tid_derived(fn: ast.FunctionDef, tid_names: tuple[str, ...]) -> set[str]:
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


@functools.lru_cache(maxsize=1024)
def tid_indexed(source: str, roots: tuple[str, ...]) -> tuple[tuple[str, int, int], ...]:
    """The arrays the kernel indexes with its thread index, unguarded: ``(path, array dim, tid component)``.

    ``path`` is a parameter in ``roots`` (``"x"``) or a struct parameter's array field (``"mesh.cells"``). An
    access ``a[i]`` or ``a[i, j]`` with ``i, j = wp.tid()`` counts when nothing can keep a thread from reaching
    it: the body has no ``return`` and no condition (``if``, ``while``, a conditional expression, ``assert``)
    reads a thread index, and the thread indices are assigned once, at the top of the body. Every thread then
    accesses ``a`` at its own index, so ``a`` must be at least as long as the launch along that dim.

    Returns:
        The accesses, in order of appearance, without repeats; none for a kernel it cannot read or prove.
    """
    try:
        tree = ast.parse(textwrap.dedent(source))
    except (TypeError, SyntaxError, ValueError):
        return ()
    fn = next((n for n in tree.body if isinstance(n, ast.FunctionDef)), None)
    if fn is None or any(isinstance(n, (ast.Return, ast.Global, ast.Nonlocal)) for n in ast.walk(fn)):
        return ()
    tid_names = next((t for t in map(_tid_assignment, fn.body) if t is not None), None)
    if tid_names is None:
        return ()
    stores = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id in tid_names and isinstance(n.ctx, ast.Store)]
    if len(stores) != len(tid_names):
        return ()  # a thread index reassigned (or a loop variable of the same name): not provable
    derived = _tid_derived(fn, tid_names)
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
