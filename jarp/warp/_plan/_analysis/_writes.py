"""What a kernel writes, judged by the code Warp compiles: which array parameters and which struct array fields.

XLA owns a jarp call's inputs (it may share their buffers with the caller), so a kernel may not write one unless
it is declared in-out. Three sources judge (in doubt: write):

1. Warp's own record (`_warp_codegen.array_access`): the array parameters its code generator marked written
   while it generated the kernel, after resolving names (closures, globals, module attributes, keyword arguments,
   aliases of builtins, ``@wp.func`` calls) and folding branches on Python constants. A store Warp never emits
   is no write.
2. The resolver (`writes`): a walk of the syntax tree Warp compiles (`_names.live_nodes`: folded branches
   skipped), names resolved as Warp resolves them (`_names`), followed into every ``@wp.func`` overload a call
   reaches. It sees what Warp's record does not: stores through a struct's array field (``s.arr[i] = x``, a
   field handed to a ``@wp.func``), tile stores and tile atomics.
3. The generated code (`_generated`): the C++ Warp generates for the kernel and every function it calls, where an
   array parameter whose pointer reaches a store, or anything not known to only read, is written. It sees what
   neither source above does (``wp.store(wp.address(...))``, references, operator overloads, native snippets,
   pointer arithmetic), so no array parameter is judged unwritten where the generated code may write it.

For an array parameter the generated code decides wherever Warp generated it all (no native snippet reached): it
follows the overload each call resolves to and every use of the pointer, where the resolver, a walk of Python
syntax, counts as written whatever it cannot follow. Elsewhere, and for struct fields (which the generated code does
not judge), a write any source sees counts. Every judgement holds for one version of the kernel's code: Warp's hash of
it (`_warp_kernels.current_code_hash`), which changes when a name its code resolves is rebound to other code.
"""

from __future__ import annotations

import ast
import dataclasses
from typing import Any

import warp as wp

from ..._upstream import _warp_codegen, _warp_kernels, _warp_types
from .._struct_layout import passed_by_value
from .._weakcache import weak_cache
from . import _generated, _names
from ._builtins import DENSE_OUTPUTS
from ._syntax import attribute_path, binding_pairs, store_targets, stored_array

_MAX_DEPTH = 8  # deep enough for real code, bounded for recursive functions
# Builtins that write into their first argument (an array), besides every ``atomic_*``.
_WRITING_PREFIXES = ("atomic_", "tile_store", "tile_atomic", "tile_scatter")
_WRITING_BUILTINS = frozenset(
    {"array_store", "add_inplace", "sub_inplace", "assign_inplace", "bit_and_inplace", "bit_or_inplace"}
    | {"bit_xor_inplace"}
)
# Keyword names of the written array in those builtins (``wp.atomic_add(arr=x, ...)``, ``wp.tile_store(a=x, ...)``).
_WRITTEN_KEYWORDS = ("arr", "a")
# Builtins that may write into any of their array arguments: the dense ones other than `DENSE_OUTPUTS` (the batched
# ones, which have no native code in Warp).
_WRITING_ANY_PREFIXES = ("dense_",)
# An array's attributes that are values, not references to it.
_ARRAY_VALUES = frozenset({"shape", "ndim", "size", "strides", "dtype"})


def writes_first_argument(key: str) -> bool:
    """Whether the Warp builtin ``key`` writes into the array it is given first (atomics, tile stores)."""
    return key.startswith(_WRITING_PREFIXES) or key in _WRITING_BUILTINS


def written_inputs(kernel: wp.Kernel, names: tuple[str, ...]) -> tuple[str, ...]:
    """Which of the array parameters ``names`` ``kernel`` writes, as its code stands (`code_hash`).

    The generated code decides where Warp generated all of it (but for an array of structs); elsewhere a write that
    Warp's record, the resolver or the generated code sees counts. The resolver overrules the other two only where it
    proves a write dead for the constants the kernel passes.

    Args:
        kernel: a concrete kernel (an overload of a generic kernel).
        names: array parameter names.

    Returns:
        The written ones, in the order of ``names``.
    """
    # Judged on the code Warp's next build compiles: a name rebound since Warp hashed the module gets a new hash,
    # and with it new judgements (every cache below is keyed by it)
    code_hash(kernel)
    record = _record(kernel)

    def seen(found: tuple[str, ...]) -> set[str]:
        return {n for n in names if n in found or any(p.startswith(n + ".") for p in found)}

    # The resolver with call-site constants (``helper(x, i, False)`` skips the helper's ``if flag:``), and without
    general, specialised = seen(_writes_now(kernel, False)), seen(_writes_now(kernel, True))
    generated = seen(_generated_now(kernel))
    decides = _generated_decides(codegen_record(kernel))
    types = dict(_warp_kernels.kernel_params(kernel))
    written = set()
    for n in names:
        # Warp's record and the generated code are context-insensitive: a function's parameter is written if any
        # call could write it. Either is overruled only where the resolver agrees with it on that model and proves
        # the write dead for the constants this kernel passes; any other disagreement keeps the write.
        dead = n in general and n not in specialised
        in_code = n in generated or (record is not None and n in record and record[n].written)
        # Where the generated code decides, the resolver's write without it is one it could not rule out, no more.
        # Not for an array of structs: the generated code follows the array's own pointer, not the pointers its
        # elements' array fields hold (``args[0].arr[i] = ...``), which the resolver counts
        by_generated = decides and not _warp_types.is_struct_type(getattr(types.get(n), "dtype", None))
        if (in_code and not dead) or (n in specialised and not by_generated):
            written.add(n)
    return tuple(n for n in names if n in written)


def _generated_decides(record: _warp_codegen.CodegenRecord) -> bool:
    """Whether the generated code of ``record`` decides which array parameters are written: Warp generated the
    kernel and every function it calls, none of them native code (whose body nothing reads)."""
    return record.error is None and bool(record.functions) and not any(f.opaque for f in record.functions)


def written_struct_fields(kernel: wp.Kernel, structs: tuple[str, ...]) -> tuple[str, ...]:
    """The array fields of the struct parameters ``structs`` that ``kernel`` writes (``"mesh.verts"``).

    A write the resolver or the generated code sees counts (`_generated.write_sites`: an operator overload, a
    ``wp.store`` through an address, a native snippet given the struct). A struct handed whole to something jarp
    cannot follow counts as written whole (its name alone; a nested struct's path).

    Returns:
        The paths, sorted.
    """
    _record(kernel)  # Warp's hash pass substitutes the wp.static() expressions first
    found = {p for p in writes(kernel) if p.split(".", 1)[0] in structs}
    record = codegen_record(kernel)
    if record.error is None and structs:
        types: dict[str, Any] = {}
        for label, warp_type in _warp_kernels.kernel_params(kernel):
            if label in structs:
                _add_types(types, label, warp_type, 0)
        for write in _generated.write_sites(record.functions):
            if write.path.split(".", 1)[0] in structs:
                found.update(_struct_field(write.path, types))
    return tuple(sorted(found))


def _struct_field(path: str, types: dict[str, Any]) -> tuple[str, ...]:
    """The array field (``"s.arr"``) or struct (whole) that a write the generated code makes at ``path`` reaches; none
    for a value field (``"s.k"``: the kernel's copy of the struct) or a struct without array fields."""
    parts = path.split(".")
    for n in range(1, len(parts) + 1):
        prefix = ".".join(parts[:n])
        warp_type = types.get(prefix)
        if warp_type is None:  # past what the layout records: the struct above, whole, in doubt
            return (".".join(parts[: n - 1]),)
        if wp.types.is_array(warp_type):
            return (prefix,)
        if not _warp_types.is_struct_type(warp_type):
            return ()
    if any(p.startswith(path + ".") and wp.types.is_array(t) for p, t in types.items()):
        return (path,)
    return ()


# Verdicts hold for one version of the kernel's code: Warp's hash of it (which covers its source, the functions it
# calls and the constants it reads) and the values of the constants its folded branches read (a module-level flag may
# change after Warp hashed the module). Every cache below is keyed by both (`_version`).


@weak_cache
def _constants_read(kernel: wp.Kernel) -> set[tuple[Any, str]]:
    """The constants (function, dotted name) the analyses of ``kernel`` have read so far (grows)."""
    return set()


def _version(kernel: wp.Kernel) -> tuple[Any, ...]:
    return (_code_hash(kernel, check=False), *_names.constants_version(_constants_read(kernel)))


def code_hash(kernel: wp.Kernel) -> str | None:
    """Warp's hash of the code its next build of ``kernel`` compiles (`_warp_kernels.current_code_hash`), which
    the judgements here are drawn from and cached by; None where Warp cannot hash it (its code does not build)."""
    return _code_hash(kernel, check=True)


def _code_hash(kernel: wp.Kernel, check: bool) -> str | None:
    """Warp's hash of ``kernel``'s code (`_warp_kernels.current_code_hash`); None where Warp cannot hash it (its
    code does not build: the codegen record holds Warp's error)."""
    try:
        return _warp_kernels.current_code_hash(kernel, check=check)
    except Exception:
        return None


@weak_cache
def _codegen_at(kernel: wp.Kernel, version: tuple[Any, ...]) -> _warp_codegen.CodegenRecord:
    return _warp_codegen.codegen_record(kernel)


def codegen_record(kernel: wp.Kernel) -> _warp_codegen.CodegenRecord:
    """What Warp's code generator records of ``kernel`` (`_warp_codegen.codegen_record`), generated once per
    version of its code (`_version`: the hash Warp keeps, which the last `code_hash` brought up to date)."""
    return _codegen_at(kernel, _version(kernel))


def forward_code(kernel: wp.Kernel) -> tuple[tuple[str, tuple[str, ...], tuple[tuple[str, str], ...]], ...]:
    """The C++ forward code Warp generates for ``kernel`` and each ``@wp.func`` it calls (`CodegenRecord`)."""
    return codegen_record(kernel).forward_code


def generated_writes(kernel: wp.Kernel) -> tuple[str, ...]:
    """The array parameters ``kernel``'s generated C++ may write (`_generated.written_params`), as its code stands.

    None where Warp could not generate the code: such a kernel cannot be built either, and Warp's own error (raised
    when jarp builds it) says more than a refusal would.
    """
    code_hash(kernel)
    return _generated_now(kernel)


def structure_uses(kernel: wp.Kernel, ids: tuple[str, ...]) -> tuple[_generated.Write, ...]:
    """How ``kernel``'s generated code uses the structure ids ``ids`` other than to query them (`_generated`).

    A store or an atomic through a structure's arrays (``wp.mesh_get(id).points[i] = ...``: path ``"mesh.points"``),
    a ``wp.volume_store*`` (path ``"vol"``), and the id itself stored, returned, computed with or given to anything
    not known to only query it (path ``"mesh"``). Where Warp cannot generate the code, each id counts as misused:
    such a kernel does not build either.

    Args:
        kernel: a concrete kernel.
        ids: the names of its ``wp.uint64`` parameters that are given structures.

    Returns:
        The uses, sorted by path.
    """
    code_hash(kernel)
    record = codegen_record(kernel)
    if record.error is not None:
        return tuple(_generated.Write(name, "code Warp could not generate", None) for name in ids)
    return tuple(w for w in _generated.write_sites(record.functions) if w.path.split(".", 1)[0] in ids)


def _generated_now(kernel: wp.Kernel) -> tuple[str, ...]:
    """`generated_writes` of the code Warp's kept hash names (brought up to date by the caller: `code_hash`)."""
    record = codegen_record(kernel)
    if record.error is not None:
        return ()
    return _generated.written_params(record.functions)


def _record(kernel: wp.Kernel) -> dict[str, _warp_codegen.ArrayAccess] | None:
    """Warp's read/write record of ``kernel`` (`_warp_codegen.array_access`)."""
    return codegen_record(kernel).access


@weak_cache
def _kernel_writes(kernel: wp.Kernel, specialise: bool, version: tuple[Any, ...]) -> tuple[str, ...]:
    params = _warp_kernels.kernel_params(kernel)
    types: dict[str, Any] = {}
    for label, warp_type in params:
        _add_types(types, label, warp_type, 0)
    context = _Context(types, specialise, codegen_record(kernel).value_locals)
    with _names.reading_constants() as read:
        found = _function_writes(kernel, {label: {label} for label, _ in params}, {}, context, 0)
    _constants_read(kernel).update(read)
    return tuple(sorted(found))


@dataclasses.dataclass(frozen=True)
class _Context:
    """What every function of one kernel's walk shares."""

    types: dict[str, Any]  # the Warp type of each kernel parameter path (``"s.arr"``)
    specialise: bool  # follow constants a call passes into the callee's conditions
    value_locals: frozenset[str]  # the kernel's locals Warp typed as values: copies, never references


def _add_types(types: dict[str, Any], path: str, warp_type: object, depth: int) -> None:
    """The Warp type of a parameter path and, for a struct, of each field's path (``"s.arr"``)."""
    types[path] = warp_type
    if depth < _MAX_DEPTH and _warp_types.is_struct_type(warp_type):
        for field, field_type in _warp_types.struct_fields(warp_type):
            _add_types(types, f"{path}.{field}", field_type, depth + 1)


def writes(kernel: wp.Kernel, specialise: bool = True) -> tuple[str, ...]:
    """Every parameter path ``kernel``'s compiled code may write: ``"x"``, ``"s.arr"``, or ``"s"`` (whole).

    Args:
        kernel: a concrete kernel.
        specialise: skip a called function's branches that the constants the call passes decide
            (``bump_if(x, i, False)`` with ``if flag: a[i] = ...``): Warp compiles them, but they never run.

    Returns:
        The paths, sorted. Cached with the kernel, for its code as it stands (`code_hash`) and the values of the
        constants its folded branches read.
    """
    code_hash(kernel)
    return _writes_now(kernel, specialise)


def _writes_now(kernel: wp.Kernel, specialise: bool) -> tuple[str, ...]:
    """`writes` of the code Warp's kept hash names (brought up to date by the caller: `code_hash`)."""
    version = _version(kernel)
    found = _kernel_writes(kernel, specialise, version)
    if _version(kernel) != version:  # the first analysis has just recorded which constants it reads
        found = _kernel_writes(kernel, specialise, _version(kernel))
    return found


def _function_writes(
    fn: object, roots: dict[str, set[str]], consts: dict[str, Any], context: _Context, depth: int
) -> set[str]:
    """The caller's paths that ``fn`` writes, given which caller path each of its parameters names (``roots``)
    and which of its parameters the call passes a constant (``consts``)."""
    if not roots:
        return set()
    tree = _names.function_tree(fn)
    if tree is None or depth >= _MAX_DEPTH:
        return set().union(*roots.values())  # unreadable or too deep: everything handed to it counts as written
    reassigned = _names.assigned_names(tree)
    consts = {k: v for k, v in consts.items() if k not in reassigned} if context.specialise else {}
    return _Walk(fn, tree, roots, consts, context, depth).run()


class _Walk:
    """One function's stores, atomics and calls, on the branches Warp compiles.

    A may-reference analysis: every local (and every field of a local struct, ``h.arr``) holds the set of caller
    paths it may refer to, from whatever it was ever assigned (flow-insensitive, to a fixed point): a parameter, a
    struct's field, a view (``a[i]`` of a 2-d array, ``wp.view(a, i)``), what a function returns or a struct is
    built from (anything it was handed), either side of a conditional expression. A store, an atomic or a writing
    builtin into something that may refer to a path writes it; so does handing it to a function jarp cannot follow.
    """

    def __init__(
        self,
        fn: Any,
        tree: ast.FunctionDef,
        roots: dict[str, set[str]],
        consts: dict[str, Any],
        context: _Context,
        depth: int,
    ):
        self.fn = fn
        self.context = context
        self.types = context.types
        self.consts = consts
        self.func = getattr(fn, "func", None)
        self.tree = tree
        self.depth = depth
        self.locals = _names.local_names(tree)
        self.nodes = list(_names.live_nodes(self.func, tree, consts))
        # name or dotted local path (``h.arr``) -> the caller paths it may refer to
        self.paths: dict[str, set[str]] = {k: set(v) for k, v in roots.items()}
        self.written: set[str] = set()

    def run(self) -> set[str]:
        self._aliases()
        for node in self.nodes:
            if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in store_targets(list(targets)):
                    base = stored_array(target)
                    if base is not None:
                        self.written |= self.refs(base)
            elif isinstance(node, ast.Call):
                self._call(node)
        return self.written

    def refs(self, expr: ast.expr | None) -> set[str]:
        """The caller paths ``expr`` may refer to (an array, a struct, a struct's field, a view of an array)."""
        if expr is None:
            return set()
        if isinstance(expr, ast.Name):
            if self.depth == 0 and expr.id in self.context.value_locals and expr.id not in self.types:
                return set()  # Warp typed this local of the kernel as a value: a copy
            return set(self.paths.get(expr.id, ()))
        if isinstance(expr, ast.Attribute):
            path = attribute_path(expr)
            found = set(self.paths.get(".".join(path), ())) if path is not None else set()
            for base in self.refs(expr.value):
                found |= self._field(base, expr.attr)
            return found
        if isinstance(expr, ast.Subscript):
            found = set()
            for base in self.refs(expr.value):
                warp_type = self.types.get(base)
                if warp_type is not None and not wp.types.is_array(warp_type):
                    continue  # a component of a value (``s.v[0]``): the struct is passed by value
                if warp_type is not None and not isinstance(expr.slice, ast.Slice):
                    index = expr.slice.elts if isinstance(expr.slice, ast.Tuple) else [expr.slice]
                    # ``a[i]`` of a 2-d array is a view of ``a``, and a struct element a reference into it; a
                    # scalar, vector or matrix element is a value
                    full = len(index) >= warp_type.ndim and not any(isinstance(e, ast.Slice) for e in index)
                    if full and not _warp_types.is_struct_type(warp_type.dtype):
                        continue
                found.add(base)
            return found
        if isinstance(expr, ast.Call):
            # what a function returns, a view or a struct is built from: anything it is handed, in doubt; but a
            # user function's parameter of a value type (a scalar, vector, matrix) gets a copy
            _, obj = _names.callee(self.func, expr, self.locals)
            found = set()
            for param, arg in _bound_args(obj, expr):
                if param is None or not passed_by_value(param):
                    found |= self.refs(arg)
            return found
        if isinstance(expr, ast.IfExp):
            return self.refs(expr.body) | self.refs(expr.orelse)
        if isinstance(expr, (ast.Tuple, ast.List)):
            return set().union(*(self.refs(e) for e in expr.elts)) if expr.elts else set()
        if isinstance(expr, ast.Starred):
            return self.refs(expr.value)
        if isinstance(expr, ast.NamedExpr):
            return self.refs(expr.value)
        return set()  # arithmetic, comparisons, constants: values

    def _field(self, base: str, attr: str) -> set[str]:
        """The paths ``<base>.<attr>`` may refer to, by the Warp type of ``base`` where it is known."""
        warp_type = self.types.get(base)
        if warp_type is None:
            return {base}  # a path of unknown type: in doubt, the whole of it
        if _warp_types.is_struct_type(warp_type):
            return {f"{base}.{attr}"}  # a field, whatever its name (``s.x``, ``s.p``)
        if wp.types.is_array(warp_type):
            return set() if attr in _ARRAY_VALUES else {base}  # ``a.shape`` is a value; ``a.ptr`` refers to ``a``
        return set()  # a component of a value (``v.x``)

    def _aliases(self) -> None:
        """What each local may refer to: ``b = a``, ``h.arr = out``, ``r = a[i]``, ``a, b = s.arr, y``, ``for``."""
        bindings = binding_pairs(self.nodes)
        changed = True
        while changed:
            changed = False
            for target, value in bindings:
                found = self.refs(value)
                if not found:
                    continue
                keys = []
                if isinstance(target, ast.Name):
                    keys.append(target.id)
                elif isinstance(target, ast.Attribute):
                    path = attribute_path(target)
                    if path is not None:
                        # ``h.arr = out``: ``h.arr`` refers to ``out``, and so does ``h`` handed on whole
                        keys += [".".join(path), path[0]]
                for key in keys:
                    known = self.paths.setdefault(key, set())
                    if not found <= known:
                        known |= found
                        changed = True

    def _call(self, node: ast.Call) -> None:
        name, obj = _names.callee(self.func, node, self.locals)
        key = _names.builtin_key(name, obj, self.func)
        handed = [(i, self.refs(a)) for i, a in enumerate(node.args)]
        named = [(k.arg, self.refs(k.value)) for k in node.keywords]
        everything = set().union(*(p for _, p in (*handed, *named))) if (handed or named) else set()
        if key is not None:
            if key in DENSE_OUTPUTS:
                position, keyword = DENSE_OUTPUTS[key]
                out = node.args[position] if position < len(node.args) else None
                out = out or next((k.value for k in node.keywords if k.arg == keyword), None)
                self.written |= self.refs(out) if out is not None else everything
            elif key.startswith(_WRITING_ANY_PREFIXES):
                self.written |= everything  # a dense builtin with no native code: any of its arrays, in doubt
            elif writes_first_argument(key):
                first = node.args[0] if node.args else None
                if first is None:
                    first = next((k.value for k in node.keywords if k.arg in _WRITTEN_KEYWORDS), None)
                self.written |= self.refs(first)
            return
        if not everything or _names.constructs_type(node):
            return  # ``type(s)(...)`` constructs a value of a Warp type: its result is tracked (`refs`)
        if isinstance(obj, wp.Function) and not obj.is_builtin():
            for overload in _overloads(obj, node):
                typed = dict(_warp_kernels.kernel_params(overload))
                params = list(typed)
                roots: dict[str, set[str]] = {}
                bound = [(params[i] if i < len(params) else None, found) for i, found in handed]
                bound += [(k if k in typed else None, found) for k, found in named]
                for param, found in bound:
                    if not found or (param is not None and passed_by_value(typed[param])):
                        continue  # a value parameter gets a copy: nothing it does reaches the caller
                    if param is None:
                        self.written |= found  # *args, **kwargs: not followed
                    else:
                        roots.setdefault(param, set()).update(found)
                consts = self._constants(node, params)
                self.written |= _function_writes(overload, roots, consts, self.context, self.depth + 1)
            return
        if isinstance(obj, type) or _warp_types.is_struct_type(obj):
            return  # a constructor (a struct, a vector): what it is handed is not written (its result is tracked)
        # A callee jarp cannot follow (computed, a callable parameter): what it is handed counts as written
        self.written |= everything

    def _constants(self, node: ast.Call, params: list[str]) -> dict[str, Any]:
        """The callee's parameters that this call passes a constant flag (a literal, a captured flag, or a flag
        this function was itself passed): only bools and int32 integers, whose meaning Python and Warp share."""
        if not self.context.specialise:
            return {}
        consts: dict[str, Any] = {}
        pairs = [(params[i], a) for i, a in enumerate(node.args) if i < len(params)]
        pairs += [(k.arg, k.value) for k in node.keywords if k.arg is not None]
        for param, arg in pairs:
            value = _names.constant(self.func, arg, self.locals, self.consts)
            if _names.exact_flag(value):
                consts[param] = value
        return consts


def _overloads(fn: wp.Function, call: ast.Call) -> list[Any]:
    """The overloads of the user function ``fn`` that ``call`` may reach: those whose parameters its arguments can
    bind (Warp picks among them by argument types); all of them where none can (Warp's error is then the one to see).

    Following only those keeps a read-only overload that calls another of the same name (``bsr_row_index`` with
    ``row_counts`` calling the one without) from being followed into itself until the depth limit.
    """
    overloads = list(dict.fromkeys([fn, *getattr(fn, "user_overloads", {}).values()]))
    positional = len(call.args)
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        return overloads  # ``*args``, ``**kwargs``: how many bind is not known here
    keywords = {k.arg for k in call.keywords}

    def binds(overload: Any) -> bool:
        params = [name for name, _ in _warp_kernels.kernel_params(overload)]
        defaults = getattr(overload, "defaults", None) or {}
        if positional > len(params) or not keywords <= set(params[positional:]):
            return False
        return all(p in keywords or p in defaults for p in params[positional:])

    fitting = [o for o in overloads if binds(o)]
    return fitting or overloads


def _bound_args(obj: object, call: ast.Call) -> list[tuple[Any, ast.expr]]:
    """Each argument of ``call`` with the declared type of the parameter it binds (None where unknown: builtins,
    overloads that disagree, ``*args``)."""
    args = [*call.args, *(k.value for k in call.keywords)]
    if not (isinstance(obj, wp.Function) and not obj.is_builtin()):
        return [(None, a) for a in args]
    overloads = _overloads(obj, call)
    out = []
    for i, arg in enumerate(call.args):
        kinds = {_param_type(o, i, None) for o in overloads}
        out.append((kinds.pop() if len(kinds) == 1 else None, arg))
    for k in call.keywords:
        kinds = {_param_type(o, None, k.arg) for o in overloads}
        out.append((kinds.pop() if len(kinds) == 1 else None, k.value))
    return out


def _param_type(fn: Any, position: int | None, name: str | None) -> Any:
    params = _warp_kernels.kernel_params(fn)
    if position is not None:
        return params[position][1] if position < len(params) else None
    return dict(params).get(name)  # pyright: ignore[reportArgumentType]  # given a name where no position
