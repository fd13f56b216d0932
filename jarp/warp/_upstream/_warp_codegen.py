"""Warp's code generation, read: the C++ Warp generates for a kernel and every function it calls, forward and
adjoint, with Warp's own record of each array access (`codegen_record`, `array_access`); every assumption jarp
makes about Warp's generated code lives here.

Part of the upstream stage (its ``__init__`` lists the modules): `check_internals`, run by
`tests/warp/compat/test_upstream_internals.py`, fails loudly when an internal this module reads changes shape.
"""

# pyright: reportAttributeAccessIssue=false
# (a module where jarp reads Warp's private internals, through ``wp._src`` and private attributes, which Warp's type
# stubs leave out; the checker still checks everything else here)

from __future__ import annotations

import ast
import inspect
from typing import Any, NamedTuple

import warp as wp

from . import _warp_kernels


class ArrayAccess(NamedTuple):
    """Whether a kernel's generated code reads and writes one array parameter (Warp's own record)."""

    read: bool
    written: bool


def array_access(kernel: wp.Kernel, block_dim: int | None = None) -> dict[str, ArrayAccess] | None:
    """Which array parameters ``kernel``'s code reads and writes, as Warp's code generator records them.

    Warp marks an array parameter written when the code it generates stores into it: a subscript store or
    augmented assignment (``a[i] = x``, ``a[i] += x``, a component ``a[i].x = v``, through a view ``r = a[i]``),
    an atomic builtin (under any name it is reached by), or a call of a ``@wp.func`` that writes the parameter
    it was given (positional or keyword, reached through a closure, a global or a module attribute). The record
    is made after Warp has resolved every name and folded the branches on Python constants (closure values,
    globals, ``wp.static``): a store Warp never emits is no write. This is the record behind Warp's
    ``verify_autograd_array_access``; jarp builds the kernel's code once with it switched on (no compilation).

    It does not see stores through a struct's array field (``s.arr[i] = x``), tile stores (``wp.tile_store``)
    or volumes: the caller completes it (`jarp.warp._plan._analysis._writes`).

    Args:
        kernel: a concrete kernel (a generic kernel's overload, not the generic kernel itself).
        block_dim: the block dim Warp generates the code for (tile shapes depend on it); None: the CPU's.

    Returns:
        ``{parameter: ArrayAccess}`` for the array parameters, or None when Warp cannot generate the kernel's
        code (the launch then reports Warp's own error) or the kernel is generic.
    """
    return _generate(kernel, block_dim)[0]


def codegen_error(kernel: wp.Kernel) -> str | None:
    """Warp's error when it cannot generate ``kernel``'s code (a generic overload whose types do not fit), or None."""
    return None if kernel.is_generic else _generate(kernel, None).error


class GeneratedFunction(NamedTuple):
    """One function of a kernel's generated C++ forward code: the kernel itself, or a ``@wp.func`` overload it calls.

    Attributes:
        key: the Warp key (``"put"``).
        name: its C++ name, as call sites spell it (``"put_0"``; the kernel's key for the kernel).
        params: each parameter's C++ name (``"var_a"``) and whether it is an array.
        lines: the forward code, one statement (or ``//`` comment) a line.
        types: each variable's Warp type name (``("var_3", "Reference")``).
        opaque: its body is not Warp-generated code (a ``@wp.func_native`` snippet): nothing is known of it.
    """

    key: str
    name: str
    params: tuple[tuple[str, bool], ...]
    lines: tuple[str, ...]
    types: tuple[tuple[str, str], ...]
    opaque: bool


class CodegenRecord(NamedTuple):
    """What Warp's code generator recorded of one kernel (`codegen_record`)."""

    access: dict[str, ArrayAccess] | None  # `array_access`; None where Warp could not generate the code
    error: str | None  # Warp's error where it could not
    value_locals: frozenset[str]  # the kernel's locals whose Warp type is a value (scalar, vector, matrix...)
    # The C++ forward code Warp generated, one (function key, lines, variable types) per adjoint: the kernel's, then
    # each @wp.func it calls (each overload), for what no Python-level record says (which builtins run, on what);
    # the types name each variable's Warp type (``("var_3", "MeshQueryPoint")``)
    forward_code: tuple[tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]], ...] = ()
    # The @wp.func overloads the kernel calls whose adjoint is the user's (``@wp.func_grad``, ``@wp.func_replay``)
    # or native code (``@wp.func_native``): what they write in a backward pass no record says
    custom_adjoints: tuple[str, ...] = ()
    # The same functions with their C++ names and parameters, for the analysis of the generated code itself (a
    # custom gradient, which shares its function's C++ name, is in ``backward`` only)
    functions: tuple[GeneratedFunction, ...] = ()
    # What the kernel's backward entry point runs besides those forward functions: its own backward code first (the
    # replay of its forward code, then its reverse code; parameters: the primal ones, as in ``functions[0]``), then
    # the reverse function (``adj_<name>``) of each function of ``functions`` (Warp's adjoint: the function's replay
    # and reverse code; or the user's ``@wp.func_grad`` body; a native adjoint snippet opaque) and its replay
    # function (``replay_<name>``) where the user gave one (``@wp.func_replay``; a native replay snippet opaque).
    # Each lists its primal parameters only (the adjoint ones, ``adj_x``, follow them in C++); the key of the user's
    # code names it for messages (``"scaled_grad, the @wp.func_grad of scaled"``)
    backward: tuple[GeneratedFunction, ...] = ()


def codegen_record(kernel: wp.Kernel, block_dim: int | None = None) -> CodegenRecord:
    """Generate ``kernel``'s code (no compilation) with Warp's read/write record on, and read what Warp recorded.

    Returns:
        The array parameters' read/write marks (`array_access`), Warp's error if it could not generate the code,
        and the names of the kernel's locals that Warp typed as values (a copy, never a reference to an array).
    """
    return _generate(kernel, block_dim)


def _is_value_type(warp_type: object) -> bool:
    if warp_type in (int, float, bool):
        return True
    return isinstance(warp_type, type) and (wp.types.type_is_scalar(warp_type) or wp.types.type_is_composite(warp_type))


def _generate(kernel: wp.Kernel, block_dim: int | None) -> CodegenRecord:
    """Generate ``kernel``'s code with Warp's read/write record on (see `codegen_record`)."""
    if kernel.is_generic:
        return CodegenRecord(None, None, frozenset())
    _warp_kernels.runtime_core()
    block_dim = _warp_kernels.resolve_block_dim(wp.get_device("cpu"), block_dim)
    module = kernel.module
    with _warp_kernels.warp_lock(), _warp_kernels.codegen_lock():
        level = wp.config.log_level
        # Warp warns about writes after reads (a gradient hazard for its tape, not a jarp concern)
        wp.config.log_level = max(level, wp.LOG_ERROR)
        try:
            had_hasher = block_dim in module.hashers
            module.get_module_hash(block_dim)  # resolves the module's wp.static() expressions
            if not had_hasher:
                # the hasher holds every live kernel of the module: one left behind would keep a kernel the user
                # dropped (and its plans) alive until the module changes
                module.hashers.pop(block_dim, None)
            options = module.resolve_options(wp.config, block_dim=block_dim)
            options = options | {"output_arch": None, "verify_autograd_array_access": True}
            # A builder of this one kernel: Warp's ModuleBuilder builds the kernels its hasher lists
            only = _OneKernel(kernel)
            builder = wp._src.context.ModuleBuilder(module, options, hasher=only, target="cpu")
            code = [(kernel.key, *_forward_lines(kernel.adj))]
            functions = [_generated_function(kernel.key, kernel.key, kernel.adj, False)]
            backward = [_backward_function(kernel.key, kernel.key, kernel.adj, False)]
            seen = {id(kernel.adj)}
            custom: list[str] = []
            # The user's gradient and replay functions: built by the builder as functions of their own, the
            # gradient under its function's C++ name; their code runs in the backward pass only
            extras = {
                id(e)
                for fn in builder.functions
                for f in (fn, *getattr(fn, "user_overloads", {}).values())
                for e in (getattr(f, "custom_grad_func", None), getattr(f, "custom_replay_func", None))
                if e is not None
            }
            for fn in builder.functions:
                for f in (fn, *getattr(fn, "user_overloads", {}).values()):
                    adj = getattr(f, "adj", None)
                    if adj is not None and id(adj) not in seen:
                        seen.add(id(adj))
                        code.append((fn.key, *_forward_lines(adj)))
                        if id(f) not in extras and not getattr(adj, "custom_reverse_mode", False):
                            opaque = bool(getattr(f, "native_snippet", None))
                            name = getattr(f, "native_func", None) or fn.key
                            functions.append(_generated_function(fn.key, name, adj, opaque))
                            backward.extend(_backward_functions(fn.key, name, f, opaque))
                    if any(
                        getattr(f, a, None)
                        for a in ("custom_grad_func", "custom_replay_func", "native_snippet", "adj_native_snippet")
                    ):
                        custom.append(fn.key)
            # Warp leaves each built adjoint pointing at its builder, which lists the kernel: a long-lived
            # @wp.func would keep this kernel (and its plans) alive
            for fn in (kernel, *builder.functions):
                if getattr(fn, "adj", None) is not None and fn.adj.builder is builder:
                    fn.adj.builder = None
            builder.kernels = []
            only.forget()
            access = {
                arg.label: ArrayAccess(bool(arg.is_read), bool(arg.is_write))
                for arg in kernel.adj.args
                if wp.types.is_array(arg.type)
            }
            values = frozenset(
                name
                for name, var in kernel.adj.symbols.items()
                if isinstance(var, wp._src.codegen.Var) and _is_value_type(var.type)
            )
            return CodegenRecord(
                access,
                None,
                values,
                tuple(code),
                tuple(dict.fromkeys(custom)),
                tuple(functions),
                tuple(backward),
            )
        except Exception as e:
            return CodegenRecord(None, f"{type(e).__name__}: {e}", frozenset())
        finally:
            wp.config.log_level = level


def _generated_function(key: str, name: str, adj: object, opaque: bool) -> GeneratedFunction:
    return GeneratedFunction(key, name, _params(adj), *_forward_lines(adj), opaque)


def _params(adj: object, count: int | None = None) -> tuple[tuple[str, bool], ...]:
    """The C++ parameters of a function's code: each argument but a function-valued one (a ``wp.Function``
    annotation, which Warp resolves when it generates the code and passes no value for); the first ``count``."""
    args = [a for a in getattr(adj, "args", ())[:count] if not wp._src.types.is_warp_function_annotation(a.type)]
    return tuple((f"var_{a.label}", bool(wp.types.is_array(a.type))) for a in args)


def _backward_function(key: str, name: str, adj: object, opaque: bool) -> GeneratedFunction:
    """A function's reverse code as Warp generates it (`codegen_func_reverse`): the replay of its forward code, then
    its reverse statements, last first; its primal parameters (the adjoint ones follow them in C++)."""
    blocks = getattr(adj, "blocks", ())
    replay = [line for block in blocks for line in block.body_replay]
    reverse = [line for block in blocks for line in reversed(block.body_reverse)]
    _, types = _forward_lines(adj)
    return GeneratedFunction(key, name, _params(adj), (*replay, *reverse), types, opaque or not blocks)


def _backward_functions(key: str, name: str, f: object, opaque: bool) -> list[GeneratedFunction]:
    """The functions a backward pass may call for the ``@wp.func`` overload ``f`` (Warp key ``key``, C++ name
    ``name``) besides its forward code: its reverse function and its replay function (`CodegenRecord.backward`)."""
    grad = getattr(f, "custom_grad_func", None)
    replay = getattr(f, "custom_replay_func", None)
    if opaque:
        # a native snippet: its adjoint and replay are the user's native code (or nothing), opaque either way
        found = [GeneratedFunction(f"the native adjoint of {key}", f"adj_{name}", _params(f.adj), (), (), True)]
        if getattr(f, "replay_snippet", None):
            label = f"the native replay of {key}"
            found.append(GeneratedFunction(label, f"replay_{name}", _params(f.adj), (), (), True))
        return found
    if grad is not None:
        # the user's gradient: its body, generated as forward code, is the reverse function; its first arguments
        # are the function's (the adjoints of the return values follow)
        label = f"{_user_name(grad, key)}, the @wp.func_grad of {key}"
        count = grad.adj.custom_reverse_num_input_args
        lines, types = _forward_lines(grad.adj)
        built = bool(getattr(grad.adj, "blocks", ()))
        found = [GeneratedFunction(label, f"adj_{name}", _params(grad.adj, count), lines, types, not built)]
    else:
        found = [_backward_function(key, f"adj_{name}", f.adj, False)]
    if replay is not None:
        label = f"{_user_name(replay, key)}, the @wp.func_replay of {key}"
        lines, types = _forward_lines(replay.adj)
        built = bool(getattr(replay.adj, "blocks", ()))
        found.append(GeneratedFunction(label, f"replay_{name}", _params(replay.adj), lines, types, not built))
    return found


def _user_name(fn: object, key: str) -> str:
    """The Python name of the user's function behind a Warp function (``scaled_grad``), else ``key``."""
    return getattr(getattr(fn, "func", None), "__qualname__", None) or key


def _forward_lines(adj: object) -> tuple[tuple[str, ...], tuple[tuple[str, str], ...]]:
    lines = tuple(line for block in getattr(adj, "blocks", ()) for line in block.body_forward)
    types = tuple(
        (f"var_{v.label}", getattr(v.type, "__name__", type(v.type).__name__)) for v in getattr(adj, "variables", ())
    )
    return lines, types


def function_tree(fn: object) -> ast.FunctionDef | None:
    """The syntax tree Warp compiles for a kernel or ``@wp.func``: ``adj.tree``, with Warp's substitutions.

    Once Warp has hashed the kernel's module (`array_access` does), each evaluated ``wp.static(...)`` in it is
    replaced by its value (an ``ast.Constant``, or a name carrying the function in ``warp_func``). None for a
    function without Python source (a builtin, a native snippet).
    """
    adj = getattr(fn, "adj", None)
    tree = getattr(adj, "tree", None)
    body = getattr(tree, "body", None)
    if not body or not isinstance(body[0], ast.FunctionDef):
        return None
    return body[0]


class _OneKernel:
    """The part of Warp's ``ModuleHasher`` a ``ModuleBuilder`` reads, listing one kernel (its hash untouched)."""

    def __init__(self, kernel: wp.Kernel):
        self.unique_kernels: dict[str, wp.Kernel] = {}
        self._kernel: wp.Kernel | None = kernel

    def get_unique_kernels(self) -> list[wp.Kernel]:
        return [] if self._kernel is None else [self._kernel]

    def forget(self) -> None:
        self._kernel = None


def check_internals() -> None:
    """Raise `AssertionError` if Warp's read/write record (`array_access`) no longer says what jarp relies on."""
    sig = inspect.signature(wp._src.context.ModuleBuilder)
    assert {"module", "options", "hasher", "target"} <= set(sig.parameters), "ModuleBuilder's parameters changed"
    from . import _warp_codegen_probes as probe_code  # Warp code defined only when the check runs

    with _warp_kernels.warp_lock():
        module = wp.get_module("jarp._probe_access")
        probes = {
            name: wp.Kernel(fn, key=f"_jarp_access_{name}", module=module)
            for name, fn in (
                ("store", probe_code.access_store),
                ("atomic", probe_code.access_atomic),
                ("func", probe_code.access_func),
                ("folded", probe_code.access_folded),
                ("custom", probe_code.access_custom),
            )
        }
    expected = {
        "store": {"a": (True, False), "b": (False, True)},
        "atomic": {"a": (False, True), "b": (True, False)},
        "func": {"a": (False, True), "b": (False, False)},
        "folded": {"a": (True, False), "b": (False, True)},
        "custom": {"a": (True, False), "b": (False, True)},
    }
    assert _warp_kernels.is_builtin_name("atomic_add"), "Warp's builtin registry moved (is_builtin_name)"
    assert not _warp_kernels.is_builtin_name("_jarp_no_such_builtin"), (
        "Warp's builtin registry changed (is_builtin_name)"
    )
    assert codegen_record(probes["store"]).value_locals == frozenset({"i"}), "Warp's adj.symbols changed"
    code = codegen_record(probes["func"]).forward_code
    assert any("wp::array_store(" in line for line in code[-1][1]), "Warp's adj.blocks changed (forward_code)"
    assert ("var_0", "int32") in code[0][2], "Warp's adj.variables changed (forward_code)"
    assert len(code) == 2, "Warp's ModuleBuilder.functions changed (codegen_record.forward_code)"
    kernel_fn, callee = codegen_record(probes["func"]).functions
    assert ("var_a", True) in kernel_fn.params, "Warp's adj.args changed (GeneratedFunction.params)"
    assert any(callee.name + "(" in line for line in kernel_fn.lines), "Warp's Function.native_func changed"
    assert codegen_record(probes["func"]).custom_adjoints == (), "codegen_record.custom_adjoints sees a plain func"
    custom = codegen_record(probes["custom"]).custom_adjoints
    scaled: Any = probe_code.access_scaled  # a wp.Function (the checker sees the decorated Python function)
    assert custom == (scaled.key,), f"Warp's Function.custom_grad_func changed (custom_adjoints): {custom}"
    # the backward code (`CodegenRecord.backward`): the kernel's replay calls the function, its reverse code the
    # function's adjoint; a custom gradient's body is that adjoint, under its function's C++ name
    kernel_bw, callee_bw = codegen_record(probes["func"]).backward
    assert any(line.startswith(callee.name + "(") for line in kernel_bw.lines), "Warp's Block.body_replay changed"
    assert any(callee_bw.name + "(" in line for line in kernel_bw.lines), "Warp's Block.body_reverse changed"
    assert callee_bw.name == "adj_" + callee.name, "Warp's reverse function names changed (CodegenRecord.backward)"
    assert any("wp::adj_array_store(var_x" in line for line in callee_bw.lines), "Warp's reverse code changed"
    record = codegen_record(probes["custom"])
    assert getattr(scaled.custom_grad_func.adj, "custom_reverse_mode", False), (
        "Warp's custom gradient is no longer a function in custom reverse mode (CodegenRecord.backward)"
    )
    assert [f.key for f in record.functions] == [probes["custom"].key, scaled.key], (
        "CodegenRecord.functions lists a custom gradient as forward code (Warp's ModuleBuilder.functions changed)"
    )
    grad = record.backward[-1]
    assert grad.name == "adj_" + record.functions[-1].name, "Warp's Function.custom_grad_func changed (backward)"
    assert grad.params == (("var_x", False),), "Warp's custom_reverse_num_input_args changed (backward)"
    assert any(line.startswith("adj_x = ") for line in grad.lines), "Warp's custom gradient code changed (backward)"
    a = wp.zeros(1, dtype=float, device="cpu", requires_grad=True)
    tape = wp.Tape()
    tape.record_launch(probes["store"], 1, 0, [a], [a], "cpu")
    assert _warp_kernels.tape_launches(tape) == [(probes["store"], [a, a])], (
        "Warp's Tape.launches changed (tape_launches)"
    )
    for name, kernel in probes.items():
        got = array_access(kernel)
        assert got is not None, f"Warp could not generate the probe kernel {name!r} (array_access)"
        got = {label: tuple(access) for label, access in got.items()}
        assert got == expected[name], f"Warp's read/write record changed for the {name!r} probe: {got}"
