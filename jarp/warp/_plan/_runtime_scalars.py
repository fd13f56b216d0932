"""Runtime (traced, differentiable) scalar parameters and struct value fields through a rewritten kernel variant.

Warp bakes scalar kernel parameters into the launch, so JAX must know them at
trace time. To let a stiffness or time step be a JAX array (a learnable model
leaf, a ``lax.scan`` carry) jarp derives a variant of the kernel whose scalar
parameter ``s`` becomes a one-element array ``s__jarp_rt`` read once at entry::

    def k(a: wp.array(dtype=float), s__jarp_rt: wp.array(dtype=float), out: ...):
        s = s__jarp_rt[0]
        ...

A struct value field given a JAX value (``mat.E``) gets a one-element array parameter of its own right after
its struct (``mat__E__jarp_rt``), and each read of ``mat.E`` in the kernel body reads its element instead.

Warp generates the variant's adjoint like any other kernel, so the gradient with
respect to the scalar is the sum of every thread's contribution. Variants live in
their own Warp module, so building one never rebuilds the user's module.
"""

from __future__ import annotations

import ast
import inspect
import types
import weakref
from typing import Any

import warp as wp

from .._upstream import _python_ast, _warp_kernels
from ._analysis import attribute_path
from ._struct_layout import struct_layout
from ._weakcache import weak_cache

SUFFIX = "__jarp_rt"

# derived kernel -> (a weak reference to the kernel it was derived from, the runtime names of a `variant`, or
# None for `bounds_checked`). Weak both ways: the derived kernel lives in its parent's cache (`weak_cache`).
_ORIGINS: weakref.WeakKeyDictionary[wp.Kernel, tuple[weakref.ref[wp.Kernel], tuple[str, ...] | None]] = (
    weakref.WeakKeyDictionary()
)


def origin(kernel: wp.Kernel) -> tuple[wp.Kernel, tuple[str, ...], bool]:
    """How ``kernel`` was derived: ``(base, names, checked)`` such that the recipe gives ``kernel`` back.

    ``kernel`` is ``bounds_checked(variant(base, names))`` when ``checked`` and ``names`` are set,
    ``bounds_checked(base)`` without names, ``variant(base, names)`` without ``checked``, and ``base``
    itself (``((), False)``) when it was derived by neither.

    Example:
        ```python
        assert origin(bounds_checked(variant(k, ("s",)))) == (k, ("s",), True)
        ```
    """
    names: tuple[str, ...] = ()
    checked = False
    entry = _ORIGINS.get(kernel)
    if entry is not None and entry[1] is None:
        parent = entry[0]()
        if parent is not None:
            kernel, checked = parent, True
            entry = _ORIGINS.get(kernel)
    if entry is not None and entry[1] is not None:
        parent = entry[0]()
        if parent is not None:
            kernel, names = parent, entry[1]
    return kernel, names, checked


def field_param(path: str) -> str:
    """The variant's parameter name for the runtime value of struct field ``path`` (``"mat.E"``: ``mat__E__jarp_rt``).

    Underscores inside a name are escaped (``_`` -> ``_u``), so ``__`` only ever separates names: the field
    ``s.a__b`` and the nested field ``s.a.b`` get different parameters.
    """
    return "__".join(part.replace("_", "_u") for part in path.split(".")) + SUFFIX


class _FieldReads(ast.NodeTransformer):
    """Replace each read of a runtime struct field (``mat.E``) by its variant parameter's element (``mat__E__jarp_rt[0]``)."""

    def __init__(self, fields: tuple[str, ...]) -> None:
        self.fields = {tuple(f.split(".")): f for f in fields}

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        path = attribute_path(node)
        field = self.fields.get(path) if path is not None else None
        if field is None:
            return self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            raise _Unsupported(f"the kernel assigns to {field}")
        return ast.copy_location(
            ast.Subscript(value=ast.Name(id=field_param(field), ctx=ast.Load()), slice=ast.Constant(0), ctx=ast.Load()),
            node,
        )


class _Unsupported(Exception):
    """A kernel jarp cannot give a runtime struct field value (the message says where)."""


def _check_whole_uses(fn: ast.FunctionDef | ast.AsyncFunctionDef, fields: tuple[str, ...]) -> None:
    """Refuse a kernel that uses a struct holding a runtime field other than through field reads.

    A struct passed whole (to a ``@wp.func``, or aliased) carries the field's placeholder value, which the
    rewrite of the kernel body cannot reach.
    """
    roots = {f.split(".")[0] for f in fields}
    parents: dict[ast.AST, ast.AST] = {}
    for node in ast.walk(fn):
        for child in ast.iter_child_nodes(node):
            parents[child] = node
    for node in ast.walk(fn):
        # A Name node of the struct anywhere but as the base of an attribute access (``mat.E``) uses it whole.
        if isinstance(node, ast.Name) and node.id in roots and not isinstance(parents.get(node), ast.Attribute):
            raise _Unsupported(f"the kernel uses the struct {node.id!r} whole (not only its fields)")
        # Likewise a nested struct on the way to a runtime field (``mat.inner`` for ``mat.inner.E``).
        path = attribute_path(node) if isinstance(node, ast.Attribute) else None
        if (
            path is not None
            and any(f.startswith(".".join(path) + ".") for f in fields)
            and not isinstance(parents.get(node), ast.Attribute)
        ):
            raise _Unsupported(f"the kernel uses the struct {'.'.join(path)!r} whole (not only its fields)")


@weak_cache(lock=_warp_kernels.warp_lock)
def variant(kernel: wp.Kernel, names: tuple[str, ...]) -> wp.Kernel:
    """The variant of ``kernel`` (a concrete overload) reading runtime values from one-element arrays.

    ``names`` holds scalar parameters (``"dt"``: the parameter becomes ``dt__jarp_rt``, read at entry) and
    struct value fields (``"mat.E"``: a parameter ``mat__E__jarp_rt`` follows the struct parameter, and every
    read of ``mat.E`` in the kernel body reads its element instead).

    Raises:
        TypeError: if a struct field cannot be given a runtime value in this kernel (naming the field and the
            alternatives).
    """
    scalars = tuple(n for n in names if "." not in n)
    fields = tuple(n for n in names if "." in n)
    params = _warp_kernels.kernel_params(kernel)
    tree = _python_ast.parse(_warp_kernels.kernel_source(kernel), dedent=True)
    fn = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    fn.decorator_list = []
    if fields:
        try:
            _check_whole_uses(fn, fields)
            fn.body = [_FieldReads(fields).visit(stmt) for stmt in fn.body]
        except _Unsupported as e:
            raise TypeError(
                f"jax_kernel({kernel.key}): struct field(s) {list(fields)} got JAX values (traced or differentiated), "
                f"but {e}, where jarp cannot substitute a runtime value. Pass the field as a Python number (static), "
                "or make it a separate scalar parameter of the kernel (scalar parameters take JAX values)."
            ) from None
    for arg in fn.args.args:
        if arg.arg in scalars:
            arg.arg += SUFFIX
            arg.annotation = None  # annotations come from the function object below
    field_types = {f: _field_type(params, f) for f in fields}
    new_args = []
    for arg in fn.args.args:
        new_args.append(arg)
        for f in fields:
            if f.split(".")[0] == arg.arg:
                new_args.append(ast.arg(arg=field_param(f)))
    fn.args.args = new_args
    body = fn.body
    start = (
        1 if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) else 0
    )
    reads = [
        ast.Assign(
            targets=[ast.Name(id=name, ctx=ast.Store())],
            value=ast.Subscript(
                value=ast.Name(id=name + SUFFIX, ctx=ast.Load()), slice=ast.Constant(value=0), ctx=ast.Load()
            ),
            lineno=0,
        )
        for name in scalars
    ]
    fn.body = body[:start] + reads + body[start:]
    source = ast.unparse(ast.fix_missing_locations(tree))
    new_params: list[tuple[str, Any]] = []
    for name, warp_type in params:
        new_params.append((name + SUFFIX, wp.array(dtype=warp_type)) if name in scalars else (name, warp_type))
        new_params.extend((field_param(f), wp.array(dtype=field_types[f])) for f in fields if f.split(".")[0] == name)
    tag = "_".join(n.replace(".", "__") for n in names)
    derived = rebuild(kernel, source, tuple(new_params), f"{SUFFIX}_{tag}")
    _ORIGINS[derived] = (weakref.ref(kernel), names)
    return derived


def rebuild(
    kernel: wp.Kernel,
    source: str,
    params: tuple[tuple[str, Any], ...],
    tag: str,
    options: dict[str, Any] | None = None,
    extra_globals: dict[str, Any] | None = None,
) -> wp.Kernel:
    """A new kernel from ``source`` with parameters ``params`` (concrete Warp types), in a module of its own.

    Its name and module name are ``kernel``'s with ``tag`` appended; the new module has ``kernel``'s module options
    with ``options`` over them, and the new kernel ``kernel``'s kernel options (it builds as ``kernel`` does). The
    function object carries ``kernel``'s code, globals and closure (what the source's names resolve against) and
    the given parameters as its signature, so a concrete overload of a generic kernel stays concrete.
    ``extra_globals`` adds names the source refers to (over a copy of ``kernel``'s globals).
    """
    annotations = dict(params)
    sig_params = [inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=t) for n, t in params]
    base = kernel.func
    scope = base.__globals__ if not extra_globals else {**base.__globals__, **extra_globals}
    func = types.FunctionType(base.__code__, scope, base.__name__, base.__defaults__, base.__closure__)
    func.__qualname__ = base.__qualname__
    func.__module__ = base.__module__
    func.__signature__ = inspect.Signature(sig_params)  # type: ignore[attr-defined]
    func.__annotations__ = annotations
    key = f"{kernel.key}{tag}"
    module_name = f"{base.__module__}.{base.__qualname__}.{kernel.sig or 'k'}{tag}"
    return _warp_kernels.make_kernel(func, source, key, module_name, options, like=kernel)


@weak_cache(lock=_warp_kernels.warp_lock)
def bounds_checked(kernel: wp.Kernel) -> wp.Kernel:
    """``kernel`` (a concrete overload, or a runtime variant) built in Warp's debug mode: every index is checked."""
    source = _warp_kernels.kernel_source(kernel)
    derived = rebuild(kernel, source, _warp_kernels.kernel_params(kernel), "__jarp_checked", {"mode": "debug"})
    _ORIGINS[derived] = (weakref.ref(kernel), None)
    return derived


def _field_type(params: Any, path: str) -> Any:
    """The Warp type of struct value field ``path`` (``"mat.E"``, ``"mat.inner.E"``) of the kernel's parameters."""
    root = path.split(".")[0]
    layout = struct_layout(dict(params)[root], root)
    return next(leaf.warp_type for leaf in layout.leaves if leaf.name == path)
