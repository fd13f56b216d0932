"""A kernel variant whose mesh builtins differentiate with respect to the vertices (and the query points).

Warp's mesh builtins read the vertices inside native code whose adjoint drops their gradient
(`_adjoints`). `vertex_reads` derives a variant of a kernel in which each such call (names resolved as
Warp resolves them) calls a jarp ``@wp.func`` instead, whose value is the builtin's and whose smooth part is
computed from the face's vertices read as arrays (``m = wp.mesh_get(id); m.points[m.indices[3 * f + k]]``), in
code Warp differentiates:

- ``wp.mesh_eval_position`` (and its velocity, normal and point siblings): a small function of the vertices at
  the given barycentrics.
- The queries returning a result struct (``wp.mesh_query_point`` and its ``_no_sign``, ``_sign_normal``,
  ``_sign_winding_number``, ``_sign_parity`` forms, ``wp.mesh_query_furthest_point_no_sign``,
  ``wp.mesh_query_ray``): Warp's query finds the face, the side (``sign``) and whether there is one (``result``),
  all piecewise constant; the barycentrics of the closest (furthest) point and a ray's distance, barycentrics,
  normal and ``sign`` (its orientation determinant) are recomputed from the face's vertices, the query point and
  the ray, as Warp computes them. The result is a jarp struct with Warp's field names (`funcs.MeshQueryPoint`,
  `funcs.MeshQueryRay`); in the variant, annotations naming Warp's result types name these instead.
- Inside the ``@wp.func``s the kernel calls (transitively, through names Warp resolves): each function that
  makes such a call, or takes or returns a query's result, is copied with the same rewrite (all its overloads,
  in a Warp module of its own), and the calls point at the copies.

What is not rewritten keeps Warp's builtin, and `_adjoints.dropped` still refuses its gradient: Warp's
older query overloads that write their results into the caller's variables, a function reached through
``wp.static(...)`` or passed as an argument, a function with a custom adjoint or native code.
"""

from __future__ import annotations

import ast
import inspect
import re
import types
from typing import Any

import warp as wp

from .._plan._analysis import _names
from .._plan._runtime_scalars import rebuild
from .._plan._weakcache import weak_cache
from .._upstream import _python_ast, _warp_kernels
from . import _funcs as funcs

_REPLACEMENTS = {
    "mesh_eval_position": funcs.jarp_mesh_eval_position,
    "mesh_eval_velocity": funcs.jarp_mesh_eval_velocity,
    "mesh_eval_face_normal": funcs.jarp_mesh_eval_face_normal,
    "mesh_get_point": funcs.jarp_mesh_get_point,
    "mesh_get_velocity": funcs.jarp_mesh_get_velocity,
}
# The queries, by builtin; a call is replaced where it binds to these parameters (Warp's overload returning the
# result struct, whose parameter names and defaults the replacements repeat), not to the older overload writing
# its results into the caller's variables.
_QUERIES = {
    "mesh_query_point": funcs.jarp_mesh_query_point,
    "mesh_query_point_no_sign": funcs.jarp_mesh_query_point_no_sign,
    "mesh_query_point_sign_normal": funcs.jarp_mesh_query_point_sign_normal,
    "mesh_query_point_sign_winding_number": funcs.jarp_mesh_query_point_sign_winding_number,
    "mesh_query_point_sign_parity": funcs.jarp_mesh_query_point_sign_parity,
    "mesh_query_furthest_point_no_sign": funcs.jarp_mesh_query_furthest_point_no_sign,
    "mesh_query_ray": funcs.jarp_mesh_query_ray,
}
_QUERY_SIGNATURES = {key: inspect.signature(f.func) for key, f in _QUERIES.items()}
# Warp's result types and the variant's: a copied function's parameters and result annotated with the former
# take the latter (Warp takes no annotation inside a function's body).
_RESULT_TYPES = {wp.MeshQueryPoint: funcs.MeshQueryPoint, wp.MeshQueryRay: funcs.MeshQueryRay}
_TAG = "__jarp_vertices"
_NOT_NAME = re.compile(r"\W")  # what may not appear in a Python name (a function registered under any key)


def _binds_result_overload(node: ast.Call, key: str) -> bool:
    """Whether a call of query ``key`` binds to the overload returning the result struct (jarp's replacement)."""
    if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
        return False  # an unpacked argument: which overload is not known here
    try:
        _QUERY_SIGNATURES[key].bind(*node.args, **{k.arg: k.value for k in node.keywords if k.arg is not None})
    except TypeError:
        return False
    return True


class _Rewrite(ast.NodeTransformer):
    """Point the calls of one function's code at the replacements and at the copies of the functions it calls."""

    def __init__(self, func: Any, local_names: frozenset[str]) -> None:
        self.func = func
        self.local_names = local_names
        self.names: dict[str, Any] = {}  # the names the rewritten code refers to: replacements and copies
        self.aliases: dict[int, str] = {}

    def _name(self, obj: object, hint: str, like: ast.AST) -> ast.Name:
        alias = self.aliases.get(id(obj))
        if alias is None:
            # a name no user code binds (a double underscore and jarp's tag), unique in this function's code
            alias = self.aliases[id(obj)] = f"{_NOT_NAME.sub('_', hint)}{_TAG}_{len(self.aliases)}"
            self.names[alias] = obj
        return ast.copy_location(ast.Name(id=alias, ctx=ast.Load()), like)

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        name, obj = _names.callee(self.func, node, self.local_names)
        key = _names.builtin_key(name, obj, self.func)
        target = None
        if key in _REPLACEMENTS:
            target = _REPLACEMENTS[key]
        elif key in _QUERIES and _binds_result_overload(node, key):
            target = _QUERIES[key]
        elif isinstance(obj, wp.Function) and not obj.is_builtin():
            target, key = _function_copy(obj), obj.key
        if target is not None:
            node.func = self._name(target, f"_{key}", node.func)
        return node


def _rewrite(func: object, source: str) -> tuple[str, dict[str, Any]]:
    """``source`` (a kernel's or a ``@wp.func``'s, whose Python function is ``func``) rewritten, without its
    decorators, and the names the rewritten code refers to (none where nothing changed)."""
    tree = _python_ast.parse(source, dedent=True)
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef))
    fn.decorator_list = []
    rewrite = _Rewrite(func, _names.local_names(fn))
    fn.body = [rewrite.visit(stmt) for stmt in fn.body]
    return ast.unparse(ast.fix_missing_locations(tree)), rewrite.names


@weak_cache(lock=_warp_kernels.warp_lock)
def vertex_reads(kernel: wp.Kernel) -> wp.Kernel:
    """``kernel`` (a concrete overload or variant), or its variant reading the vertices as arrays (see above)."""
    source, names = _rewrite(kernel.func, _warp_kernels.kernel_source(kernel))
    if not names:
        return kernel
    return rebuild(kernel, source, _warp_kernels.kernel_params(kernel), _TAG, extra_globals=names)


# -- copies of the user's functions ----------------------------------------------------------------------------------

_copying: set[int] = set()  # the functions being copied (a function never calls itself in Warp; this guards it)


def _function_copy(function: wp.Function) -> wp.Function | None:
    """The copy of user function ``function`` (its overload set) with the rewrite, or None where it needs none."""
    if id(function) in _copying:
        return None
    _copying.add(id(function))
    try:
        return _copy_cached(function.func, function)
    finally:
        _copying.discard(id(function))


@weak_cache(lock=_warp_kernels.warp_lock)
def _copy_cached(_func: Any, function: wp.Function) -> wp.Function | None:
    # kept on the head's Python function (the copy refers back to it through its globals; see `weak_cache`)
    overloads = _warp_kernels.copyable_overloads(function)
    base = function.func
    if overloads is None or base is None:
        return None
    plans = []
    for overload in overloads:
        arg_types = _warp_kernels.function_arg_types(overload)
        annotations = {name: _RESULT_TYPES.get(t, t) if isinstance(t, type) else t for name, t in arg_types.items()}
        rewritten = _rewrite(overload.func, _warp_kernels.kernel_source(overload))
        plans.append((overload, annotations, rewritten, annotations != arg_types))
    if not any(rewritten[1] or retyped for _, _, rewritten, retyped in plans):
        return None
    module = wp.get_module(f"{base.__module__}.{base.__qualname__}{_TAG}")
    key = f"{function.key}{_TAG}"
    head = None
    for overload, annotations, rewritten, _ in plans:
        source, names = rewritten
        func = overload.func
        scope = {**func.__globals__, **names}
        copy = types.FunctionType(func.__code__, scope, func.__name__, func.__defaults__, func.__closure__)
        copy.__kwdefaults__ = func.__kwdefaults__
        copy.__qualname__ = func.__qualname__
        copy.__module__ = func.__module__
        copy.__annotations__ = annotations
        # registered as Warp's @wp.func registers a function: each overload after the first joins the first's set
        wp.Function(
            func=copy,
            key=key,
            namespace="",
            module=module,
            source=source,
            scope_locals={} if head is None else {func.__name__: head},
            doc=overload.doc,
            inline_hint=overload.inline_hint,
        )
        head = module.functions[key]
    return head
