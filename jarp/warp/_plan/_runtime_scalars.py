"""Runtime (traced, differentiable) scalar parameters through a rewritten kernel variant.

Warp bakes scalar kernel parameters into the launch, so JAX must know them at
trace time. To let a stiffness or time step be a JAX array (a learnable model
leaf, a ``lax.scan`` carry) jarp derives a variant of the kernel whose scalar
parameter ``s`` becomes a one-element array ``s__jarp_rt`` read once at entry::

    def k(a: wp.array(dtype=float), s__jarp_rt: wp.array(dtype=float), out: ...):
        s = s__jarp_rt[0]
        ...

Warp generates the variant's adjoint like any other kernel, so the gradient with
respect to the scalar is the sum of every thread's contribution. Variants live in
their own Warp module, so building one never rebuilds the user's module.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types

import warp as wp

from .._upstream import _warp_internals
from ._weakcache import weak_cache

SUFFIX = "__jarp_rt"


@weak_cache(lock=_warp_internals.warp_lock)
def variant(kernel: wp.Kernel, names: tuple[str, ...]) -> wp.Kernel:
    """The variant of ``kernel`` (a concrete overload) whose scalar parameters ``names`` are one-element arrays."""
    params = dict(_warp_internals.kernel_params(kernel))
    tree = ast.parse(textwrap.dedent(_warp_internals.kernel_source(kernel)))
    fn = next(n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))
    fn.decorator_list = []
    for arg in fn.args.args:
        if arg.arg in names:
            arg.arg += SUFFIX
            arg.annotation = None  # annotations come from the function object below
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
        for name in names
    ]
    fn.body = body[:start] + reads + body[start:]
    source = ast.unparse(ast.fix_missing_locations(tree))

    annotations = {}
    sig_params = []
    for name, warp_type in params.items():
        new_name, new_type = (name + SUFFIX, wp.array(dtype=warp_type)) if name in names else (name, warp_type)
        annotations[new_name] = new_type
        sig_params.append(inspect.Parameter(new_name, inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=new_type))
    base = kernel.func
    func = types.FunctionType(base.__code__, base.__globals__, base.__name__, base.__defaults__, base.__closure__)
    func.__qualname__ = base.__qualname__
    func.__module__ = base.__module__
    func.__signature__ = inspect.Signature(sig_params)  # type: ignore[attr-defined]
    func.__annotations__ = annotations
    key = f"{kernel.key}{SUFFIX}_{'_'.join(names)}"
    module_name = f"{base.__module__}.{base.__qualname__}.{kernel.sig or 'k'}{SUFFIX}_{'_'.join(names)}"
    return _warp_internals.make_kernel(func, source, key, module_name)
