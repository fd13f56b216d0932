"""Names in kernel code resolved as Warp resolves them, and the branches Warp folds.

Warp compiles a kernel by walking its Python syntax tree and looking each name up when it meets it: a local, then
the function's closure cells, its globals, the ``warp`` module (``wp.tid``), Python's builtins; a dotted name
(``helpers.bump``) through the attributes of what its root names. A branch whose condition is a Python constant
(``if FLAG:`` with ``FLAG`` a captured bool, ``if wp.static(...)``) is folded: only the taken side is compiled.
Every analysis of kernel code that looks beyond Warp's own read/write record (`_writes`, `_races`) uses this one
resolver, so that they all see the code Warp compiles, not the text.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import contextvars
import numbers
import types
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import warp as wp

from ..._upstream import _python_ast, _warp_codegen, _warp_kernels
from ._syntax import attribute_path

MISSING = object()
"""A name Python cannot resolve (Warp may still: ``wp.tid`` is a builtin, not a module attribute)."""
UNREADABLE = object()
"""A name whose resolution raised (a user object's attribute): no proof may rest on it."""
UNKNOWN = object()
"""A condition that is not a constant: both branches are compiled."""


def resolve(func: object, name: str) -> Any:
    """``name`` as Warp resolves the root of a path: closure, globals, the ``warp`` module, Python's builtins.

    Args:
        func: the Python function of a kernel or ``@wp.func`` (its ``func`` attribute).
        name: one name (no dots).

    Returns:
        The object, or `MISSING`.
    """
    code = getattr(func, "__code__", None)
    closure: tuple[Any, ...] = getattr(func, "__closure__", None) or ()
    if code is not None and name in code.co_freevars:
        try:
            return closure[code.co_freevars.index(name)].cell_contents
        except (ValueError, IndexError):
            return MISSING  # an empty cell
    scope = getattr(func, "__globals__", {})
    if name in scope:
        return scope[name]
    if hasattr(wp, name):
        return getattr(wp, name)
    return getattr(builtins, name, MISSING)


def resolve_path(func: object, name: str) -> Any:
    """The object a dotted name (``wp.sin``, ``helpers.f``) refers to, `MISSING`, or `UNREADABLE`."""
    head, *rest = name.split(".")
    try:
        obj = resolve(func, head)
        for attr in rest:
            obj = getattr(obj, attr, MISSING) if obj is not MISSING else MISSING
    except Exception:  # a user object's attribute that raises: the proof fails, never the trace
        return UNREADABLE
    return obj


def callee(func: object, node: ast.Call, local_names: frozenset[str]) -> tuple[str | None, Any]:
    """The dotted name and the object a call in ``func``'s code calls.

    A ``wp.static(f)`` callee that Warp has already evaluated is the function it evaluated to. A name bound
    in the function itself (a local or a parameter) is not resolved: the object is `MISSING`.

    Returns:
        ``(dotted name or None for a computed callee, object or MISSING/UNREADABLE)``.
    """
    warp_func = getattr(node.func, "warp_func", None)  # Warp's replacement of an evaluated wp.static(f)
    if warp_func is not None:
        return getattr(warp_func, "key", "wp.static"), warp_func
    path = (node.func.id,) if isinstance(node.func, ast.Name) else attribute_path(node.func)
    if path is None:
        return None, MISSING
    name = ".".join(path)
    if path[0] in local_names:
        return name, MISSING
    return name, resolve_path(func, name)


def builtin_key(name: str | None, obj: object, func: object) -> str | None:
    """The key of the Warp builtin a call reaches (``atomic_add`` for ``wp.atomic_add`` and its aliases), or None.

    A name Python cannot resolve but whose root is the ``warp`` module (``wp.tid``), or a bare name that is
    nothing in Python, is looked up by Warp among its builtins: its last part is the key, if Warp has such a
    builtin (otherwise the call is not a builtin's, and the caller treats it as one it cannot follow). So is a name
    that holds anything but a Warp function or a module: Warp calls the builtin its last part names before it
    tries the object as a type (Python's ``len``, ``abs``, ``print``, ``float``; ``math.sqrt``).
    """
    if isinstance(obj, wp.Function):
        return obj.key if obj.is_builtin() else None
    if name is None or obj is UNREADABLE or isinstance(obj, types.ModuleType):
        return None
    key = name.rsplit(".", 1)[-1]
    if not _warp_kernels.is_builtin_name(key):
        return None
    if obj is MISSING:
        root_is_warp = "." not in name or resolve_path(func, name.rsplit(".", 1)[0]) is wp
        return key if root_is_warp else None
    return key


def constructs_type(node: ast.Call) -> bool:
    """Whether ``node`` calls ``type(x)`` or a type attribute of it (``type(x).dtype``): Warp evaluates that callee
    to the Warp type of ``x`` (whatever ``type`` names in Python), so the call constructs a value of it."""
    callee = node.func
    while isinstance(callee, ast.Attribute):
        callee = callee.value
    return isinstance(callee, ast.Call) and isinstance(callee.func, ast.Name) and callee.func.id == "type"


def constant(func: object, expr: ast.expr, local_names: frozenset[str], bound: Mapping[str, Any] | None = None) -> Any:
    """The value of a condition Warp evaluates at code generation, or `UNKNOWN`.

    Constants are literals (and what Warp substituted for an evaluated ``wp.static(...)``), names of the closure,
    globals or modules that hold a Python or NumPy number or bool (``FLAG``, ``config.DUAL``), and ``not``,
    ``and``/``or`` and comparisons of constants. A name bound in the function is never a constant, except the
    parameters in ``bound``: a function's parameters that every call being followed passes a constant.

    Args:
        func: the Python function whose code ``expr`` is in.
        expr: the expression.
        local_names: the names the function binds itself (`local_names`).
        bound: parameters known constant at the call being followed (never reassigned in the body).

    Returns:
        The value, or `UNKNOWN`.
    """
    if bound and isinstance(expr, ast.Name) and expr.id in bound:
        return bound[expr.id]
    if isinstance(expr, ast.Constant):
        return expr.value if isinstance(expr.value, (bool, numbers.Number)) else UNKNOWN
    if isinstance(expr, (ast.Name, ast.Attribute)):
        path = (expr.id,) if isinstance(expr, ast.Name) else attribute_path(expr)
        if path is None or path[0] in local_names:
            return UNKNOWN
        value = resolve_path(func, ".".join(path))
        if isinstance(value, (bool, int, float, np.bool_, np.integer, np.floating)):
            seen = _constants_read.get()
            if seen is not None:
                seen.add((func, ".".join(path)))
            return value
        return UNKNOWN
    # Warp folds only a condition that is itself a constant (with Python's truth); an operation on constants runs
    # in Warp's types (float32, int32), so jarp folds one only over bools and int32 integers, where Python agrees
    if isinstance(expr, ast.UnaryOp) and isinstance(expr.op, ast.Not):
        value = constant(func, expr.operand, local_names, bound)
        return not value if exact_flag(value) else UNKNOWN
    if isinstance(expr, ast.BoolOp):
        values = [constant(func, v, local_names, bound) for v in expr.values]
        if not all(exact_flag(v) for v in values):
            return UNKNOWN
        return all(values) if isinstance(expr.op, ast.And) else any(values)
    if isinstance(expr, ast.Compare) and len(expr.ops) == 1:
        left = constant(func, expr.left, local_names, bound)
        right = constant(func, expr.comparators[0], local_names, bound)
        if not (exact_flag(left) and exact_flag(right)):
            return UNKNOWN
        compare = _COMPARE.get(type(expr.ops[0]))
        return UNKNOWN if compare is None else compare(left, right)
    return UNKNOWN


# The module-level and captured constants `constant` has read, while `reading_constants` records them.
_constants_read: contextvars.ContextVar[set[tuple[Any, str]] | None] = contextvars.ContextVar(
    "jarp_constants_read", default=None
)


@contextlib.contextmanager
def reading_constants() -> Iterator[set[tuple[Any, str]]]:
    """Record every ``(function, dotted name)`` whose constant value `constant` reads in the block.

    A verdict drawn from folded branches holds while those names keep their values (`constants_version`).
    """
    seen: set[tuple[Any, str]] = set()
    token = _constants_read.set(seen)
    try:
        yield seen
    finally:
        _constants_read.reset(token)


def constants_version(reads: set[tuple[Any, str]]) -> tuple[Any, ...]:
    """The current values of the constants in ``reads`` (`reading_constants`), as a hashable key."""
    values = []
    for func, name in reads:
        value = resolve_path(func, name)
        key = (type(value).__name__, value) if isinstance(value, (bool, int, float, np.generic)) else id(value)
        values.append((id(func), name, key))
    return tuple(sorted(values, key=lambda v: (v[0], v[1])))


def exact_flag(value: object) -> bool:
    """Whether ``value`` means the same in Python and in Warp's code: a bool, or an integer in int32's range."""
    if isinstance(value, (bool, np.bool_)):
        return True
    return isinstance(value, (int, np.integer)) and -(2**31) <= int(value) < 2**31


_COMPARE = {
    ast.Eq: lambda a, b: a == b,
    ast.NotEq: lambda a, b: a != b,
    ast.Lt: lambda a, b: a < b,
    ast.LtE: lambda a, b: a <= b,
    ast.Gt: lambda a, b: a > b,
    ast.GtE: lambda a, b: a >= b,
}


def function_tree(fn: object) -> ast.FunctionDef | None:
    """The syntax tree Warp compiles for a kernel or ``@wp.func`` (its ``wp.static`` expressions substituted)."""
    return _warp_codegen.function_tree(fn)


def assigned_names(tree: ast.FunctionDef) -> frozenset[str]:
    """The names a function's body assigns (parameters it reassigns included; parameters alone not)."""
    return frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))


def local_names(tree: ast.FunctionDef) -> frozenset[str]:
    """The names a function binds itself: its parameters and every name it assigns (never resolved globally)."""
    args = tree.args
    names = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
    return frozenset(names)


def live_nodes(func: object, tree: ast.FunctionDef, bound: Mapping[str, Any] | None = None) -> Iterator[ast.AST]:
    """Every node of the function body that Warp compiles: the untaken side of a constant condition is skipped.

    Warp folds ``if``/``elif`` statements and conditional expressions (``a if FLAG else b``) whose condition is
    a constant (`constant`); both sides of any other condition are compiled. With ``bound`` (parameters passed a
    constant at the call being followed) the branches those parameters decide are skipped too: Warp compiles
    them (``if (var_flag) ...``), but with the constant they never run.
    """
    names = local_names(tree)
    stack: list[ast.AST] = list(reversed(tree.body))
    while stack:
        node = stack.pop()
        if isinstance(node, (ast.If, ast.IfExp)):
            value = constant(func, node.test, names, bound)
            if value is not UNKNOWN:
                yield node.test
                taken = node.body if value else node.orelse
                stack.extend(reversed(taken if isinstance(taken, list) else [taken]))
                continue
        yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def compiled_source(fn: Any) -> str:
    """The source of what Warp compiles for a kernel or ``@wp.func``: its ``wp.static`` values substituted and its
    constant branches folded (`live_nodes`), as text for the analyses that read source (`_analysis`).

    The text is regenerated (``ast.unparse``), so its line numbers are not the user's. Where Warp's tree cannot be
    turned back into source (a ``wp.static`` value with no literal form), the user's own source: an analysis of it
    sees every branch, which only makes it more careful. Computed once per planning step
    (`_warp_kernels.one_code_version`): a plan's analyses each ask for it.
    """
    text, reads = _warp_kernels.per_code_version(("compiled_source", fn), lambda: _recorded_source(fn))
    seen = _constants_read.get()
    if seen is not None:  # a memoised text still reports the constants its folding read
        seen.update(reads)
    return text


def _recorded_source(fn: Any) -> tuple[str, frozenset[tuple[Any, str]]]:
    with reading_constants() as read:
        text = _compiled_source(fn)
    return text, frozenset(read)


def _compiled_source(fn: Any) -> str:
    source = _warp_kernels.kernel_source(fn)
    tree = function_tree(fn)
    if tree is None:
        return source
    try:
        fresh = _python_ast.parse(ast.unparse(tree)).body[0]  # a private copy: Warp's tree is never changed
    except (SyntaxError, ValueError, TypeError, RecursionError):
        return source
    if not isinstance(fresh, ast.FunctionDef):
        return source
    fresh = _Fold(getattr(fn, "func", None), local_names(fresh)).visit(fresh)
    return ast.unparse(ast.fix_missing_locations(fresh))


class _Fold(ast.NodeTransformer):
    """Replace each ``if``/conditional expression on a constant (`constant`) by the side that runs."""

    def __init__(self, func: Any, names: frozenset[str]):
        self.func = func
        self.names = names

    def visit_If(self, node: ast.If) -> Any:
        value = constant(self.func, node.test, self.names)
        if value is UNKNOWN:
            return self.generic_visit(node)
        taken = [self.visit(stmt) for stmt in (node.body if value else node.orelse)]
        flat = [s for stmt in taken for s in (stmt if isinstance(stmt, list) else [stmt]) if s is not None]
        return flat or ast.Pass()

    def visit_IfExp(self, node: ast.IfExp) -> Any:
        value = constant(self.func, node.test, self.names)
        if value is UNKNOWN:
            return self.generic_visit(node)
        return self.visit(node.body if value else node.orelse)
