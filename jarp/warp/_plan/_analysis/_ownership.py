"""Whether each thread of a kernel (or of a ``@wp.func`` it calls) touches only its own elements of the arrays it
writes (`race_free_blocker`), or shares them only by accumulating (`accumulation_blocker`): one function's source;
`_races` follows the calls into the functions they reach."""

from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from typing import NamedTuple, NoReturn

from .. import _cache_table
from ._builtins import ACCUMULATING_ATOMICS, racy_call
from ._syntax import (
    attribute_path,
    binding_pairs,
    call_path,
    first_function,
    index_names,
    parse_module,
    tid_assignment,
)

# The attributes of Warp's value types (vector components; a transform's translation and rotation), never arrays.
_COMPONENTS = frozenset({"x", "y", "z", "w", "p", "q"})


def _field_then_index(layers: list[ast.expr]) -> bool:
    """Whether a store target's layers (outermost first) index something reached through a field (``h.arr[k]``).

    A local's field other than a value component may be an array held by a local struct, so indexing it stores
    into that array (``h.arr[k] = v``); ``v.x = ...`` and ``m[0].x = ...`` store into the local's own value.
    """
    for k, layer in enumerate(layers):
        if isinstance(layer, ast.Attribute) and layer.attr not in _COMPONENTS:
            return any(isinstance(outer, ast.Subscript) for outer in layers[:k])
    return False


class _Refused(Exception):
    """Ends the race analysis at the first construct it cannot prove safe (the message names it and its line)."""


@_cache_table.register_function
@functools.lru_cache(maxsize=1024)
def race_free_blocker(
    source: str,
    arrays: tuple[tuple[str, int], ...],
    structs: tuple[str, ...],
    *,
    in_function: bool = False,
    launch_ndim: int | None = None,
    written: tuple[str, ...] = (),
) -> tuple[str | None, tuple[tuple[str, int], ...]]:
    """Why the kernel (or ``@wp.func``) in ``source`` may not be split across threads, or None if it may.

    A kernel qualifies when every thread touches only its own elements of the arrays it writes: it assigns its
    thread index once (``i = wp.tid()``, ``i, j = wp.tid()``) and never reassigns it; it calls no atomic, tile,
    print or pointer builtin (`racy_call`) and accumulates into no array element (``a[i] += x`` compiles to an
    atomic); it stores only into ``a[i, j]`` (or a component of it: ``a[i][k]``, ``a[i].x``) with exactly its
    thread indices in order, and only into arrays whose dims match them; and it reads a written array only at
    the same index (or its ``shape``), never passing it on. Arrays it does not write may be read anywhere. Conditions
    and early returns do not matter: a thread that skips a store touches nothing another thread touches.

    With ``in_function`` the source is a ``@wp.func`` a race-free kernel calls: it must write no array at all
    (it cannot know which index is its caller's thread index) and needs no thread index.

    A kernel must name one thread index per launch dim (``launch_ndim``): ``i = wp.tid()`` in a 2-d launch is
    the row, which every thread of the row shares.

    Anything the analysis does not recognise refuses: an unparsable source, nested definitions, a store through
    a local that may hold an array view (``row = a[i]`` of a 2-d ``a``), a call of a computed function.

    Args:
        source: the function's Python source (``_warp_kernels.kernel_source``).
        arrays: ``(path, ndim)`` of each array parameter (``"x"``) and struct array field (``"mesh.verts"``);
            ndim -1 when unknown.
        structs: the struct parameters (and, in a function, every parameter whose type may hold arrays).
        in_function: whether ``source`` is a called ``@wp.func`` rather than the kernel.
        launch_ndim: the number of launch dims (a kernel; None: not checked).
        written: arrays known written from elsewhere (Warp's record, `_writes`): their uses are checked as those
            of the arrays this source stores into, so a write this analysis does not see cannot split a launch.

    Returns:
        The reason (``"line 5: wp.atomic_add"``, lines of ``source``), or None; and, when None, the calls the
        caller must resolve and follow: ``(dotted name, line)`` in order of appearance, without repeats.
    """
    reason, _, calls = _checked(source, arrays, structs, in_function, launch_ndim, frozenset(), written)
    return reason, calls


def _checked(
    source: str,
    arrays: tuple[tuple[str, int], ...],
    structs: tuple[str, ...],
    in_function: bool,
    launch_ndim: int | None,
    accumulators: frozenset[str],
    written: Iterable[str],
) -> tuple[str | None, _RaceCheck | None, tuple[tuple[str, int], ...]]:
    """One `_RaceCheck` run over ``source`` (`race_free_blocker`, `accumulation_blocker`): the reason it refused,
    or None with the check and the calls to follow."""
    tree = parse_module(source)
    if tree is None:
        return "the source does not parse", None, ()
    fn = first_function(tree)
    if fn is None:
        return "the source defines no function", None, ()
    try:
        check = _RaceCheck(fn, dict(arrays), frozenset(structs), in_function, launch_ndim, accumulators)
        check.written.update(written)
        return None, check, check.run()
    except _Refused as e:
        return str(e), None, ()


class Accumulation(NamedTuple):
    """What `accumulation_blocker` finds in one function's source.

    Attributes:
        calls: the calls to follow, as `race_free_blocker` returns them.
        accumulated: each candidate accumulated here (atomics, ``+=``/``-=``) with its combination (``"add"``,
            ``"min"``, ``"max"``).
        passes: ``(dotted callee, argument position, candidate, line)`` of each candidate passed to a function (which
            the caller must follow: it may accumulate into it, only read it, or refuse).
        other_uses: the candidates used otherwise (read, say), each with the first such use; fine for an array that
            turns out not accumulated anywhere, a refusal for one that is.
    """

    calls: tuple[tuple[str, int], ...]
    accumulated: dict[str, str]
    passes: tuple[tuple[str, int, str, int], ...]
    other_uses: dict[str, str]


def accumulation_blocker(
    source: str,
    arrays: tuple[tuple[str, int], ...],
    structs: tuple[str, ...],
    accumulators: tuple[str, ...],
    *,
    in_function: bool = False,
    launch_ndim: int | None = None,
    written: tuple[str, ...] = (),
) -> tuple[str | None, Accumulation | None]:
    """`race_free_blocker` for a kernel (or ``@wp.func``) whose only shared writes are accumulations into arrays.

    The source qualifies when it would be race-free but for accumulations (``wp.atomic_add``/``atomic_sub``/
    ``atomic_min``/``atomic_max`` at any index, their old value unused, ``a[...] += x``, ``a[...] -= x``) into
    arrays among ``accumulators``, or passes of those arrays to functions (which the caller follows). An array
    accumulated into must be used for nothing else (not read, stored, aliased; its ``shape`` may be read) and with
    one kind of combination, sum, min or max: each index range of a split launch may then accumulate into its own
    copy of it, the copies combined afterwards.

    Args:
        source, arrays, structs, in_function, launch_ndim: as for `race_free_blocker`.
        accumulators: the arrays that may be accumulated into: a kernel's output and in-out arrays, a function's
            parameters its caller accumulates through.
        written: arrays Warp's record sees written (`_writes`); one among the accumulators must be accumulated,
            stored at the thread index or passed on here, or it refuses.

    Returns:
        The reason it does not qualify, or None and what it found (`Accumulation`).
    """
    others = tuple(w for w in written if w not in accumulators)
    reason, check, calls = _checked(source, arrays, structs, in_function, launch_ndim, frozenset(accumulators), others)
    if reason is not None or check is None:
        return reason, None
    passed = {path for _, _, path, _ in check.passes}
    for w in written:
        if w in accumulators and w not in check.accumulated and w not in check.written and w not in passed:
            # Warp's record sees a write of a candidate that is neither an accumulation nor a store seen here
            return f"array {w!r} is written in a way jarp cannot follow", None
    return None, Accumulation(calls, dict(check.accumulated), tuple(check.passes), dict(check.other_uses))


class _RaceCheck:
    """One run of `race_free_blocker` over a parsed function (raises `_Refused`)."""

    def __init__(
        self,
        fn: ast.FunctionDef,
        arrays: dict[str, int],
        structs: frozenset[str],
        in_function: bool,
        launch_ndim: int | None = None,
        accumulators: frozenset[str] = frozenset(),
    ):
        self.fn = fn
        self.launch_ndim = launch_ndim
        self.accumulators = accumulators
        self.accumulated: dict[str, str] = {}  # accumulator path -> its combination ("add", "min", "max")
        self.atomics: list[ast.Call] = []  # atomics into a candidate accumulator, checked once aliases are known
        self.accepted: set[int] = set()  # ids of the nodes naming an accumulator in an accepted accumulation
        self.passes: list[tuple[str, int, str, int]] = []  # accumulator candidates passed to a function
        self.other_uses: dict[str, str] = {}  # accumulator candidates used otherwise: the first such use
        self.arrays = arrays
        self.structs = structs
        self.in_function = in_function
        args = fn.args
        self.params = {a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)}
        # the body only: annotations (``wp.array(dtype=float)``) and decorators are evaluated once, by Python
        self.nodes = [node for stmt in fn.body for node in ast.walk(stmt)]
        self.parents: dict[ast.AST, ast.AST] = {}
        for node in self.nodes:
            for child in ast.iter_child_nodes(node):
                self.parents[child] = node
        self.aliases: dict[str, str] = {}  # local -> the array path it names (``b = a``)
        self.refs: set[str] = set()  # locals that may hold an array or a struct of arrays, but not one known array
        self.tid: tuple[str, ...] = ()
        self.written: set[str] = set()

    def refuse(self, node: ast.AST, what: str) -> NoReturn:
        raise _Refused(f"line {getattr(node, 'lineno', '?')}: {what}")

    def run(self) -> tuple[tuple[str, int], ...]:
        calls = self._calls()
        if not self.in_function:
            self._thread_index()
        self._locals()
        for call in self.atomics:
            self._atomic(call)
        for node in self.nodes:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    self._store(target, node, accumulate=False)
            elif isinstance(node, ast.AugAssign):
                self._store(node.target, node, accumulate=True)
            elif isinstance(node, ast.For) and not all(
                isinstance(n, (ast.Name, ast.Tuple, ast.Store)) for n in ast.walk(node.target)
            ):
                self.refuse(node, "a loop target that is not a plain name")
        if not self.in_function:
            self._uses_of_written()
        if self.accumulators:
            self._uses_of_candidates()
        return calls

    def _calls(self) -> tuple[tuple[str, int], ...]:
        """Refuse racy and unfollowable constructs; the calls to follow."""
        assigned = {n.id for n in self.nodes if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
        calls: list[tuple[str, int]] = []
        for node in self.nodes:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                self.refuse(node, "a nested function")
            if isinstance(node, (ast.Global, ast.Nonlocal, ast.Delete, ast.NamedExpr, ast.With, ast.Try)):
                self.refuse(node, f"a {type(node).__name__.lower()} statement or expression")
            if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp, ast.Yield, ast.Await)):
                self.refuse(node, "a comprehension, generator or await")
            if isinstance(node, ast.Attribute) and node.attr == "adjoint":
                self.refuse(node, "wp.adjoint (a function's adjoint, called by hand)")
            if not isinstance(node, ast.Call):
                continue
            path = call_path(node.func)
            if path is None:
                self.refuse(node, f"a call of a computed function ({ast.unparse(node.func)})")
            name = ".".join(path)
            if path[-1] in ACCUMULATING_ATOMICS and self.accumulators:
                self.atomics.append(node)  # judged by `_atomic` once the locals are known
                continue
            if racy_call(path[-1]):
                self.refuse(node, name)
            if len(path) == 2 and path[1] == "dtype":
                continue  # ``F.dtype(1.0)``: the scalar type of a value, as a constructor (generic code)
            if path[0] in self.params or path[0] in assigned:
                # a method of an array (``a.fill_()``) or a function held in a local: nothing to resolve
                self.refuse(node, f"a call through the local or parameter {path[0]!r} ({name})")
            if all(c[0] != name for c in calls):
                calls.append((name, node.lineno))
        return tuple(calls)

    def _thread_index(self) -> None:
        """The thread index names, assigned once at the top level of the body and never again."""
        tid_calls = [n for n in self.nodes if isinstance(n, ast.Call) and (call_path(n.func) or ())[-1:] == ("tid",)]
        stmts = [s for s in self.fn.body if tid_assignment(s) is not None]
        if len(tid_calls) != 1 or len(stmts) != 1:
            self.refuse(self.fn, "the thread index is not assigned exactly once, at the top level (i = wp.tid())")
        self.tid = tid_assignment(stmts[0]) or ()
        if len(set(self.tid)) != len(self.tid):
            self.refuse(stmts[0], "a thread index name repeats")
        if self.launch_ndim is not None and len(self.tid) != self.launch_ndim:
            # ``i = wp.tid()`` in a 2-d launch is the row index: the threads of a row share it (and its elements)
            self.refuse(
                stmts[0],
                f"{len(self.tid)} thread index name(s) for a launch of {self.launch_ndim} dims: threads share one",
            )
        own = set(ast.walk(stmts[0]))
        for node in self.nodes:
            if (
                isinstance(node, ast.Name)
                and node.id in self.tid
                and isinstance(node.ctx, ast.Store)
                and node not in own
            ):
                self.refuse(node, f"the thread index {node.id!r} is reassigned")

    # -- locals -------------------------------------------------------------------------------------------------

    def _array_path(self, expr: ast.expr) -> str | None:
        """The array ``expr`` names: a parameter, a struct's array field, or a local alias of one."""
        if isinstance(expr, ast.Name):
            if expr.id in self.aliases:
                return self.aliases[expr.id]
            return expr.id if expr.id in self.arrays and expr.id in self.params else None
        path = attribute_path(expr) if isinstance(expr, ast.Attribute) else None
        if path is not None and path[0] in self.structs and path[0] in self.params and ".".join(path) in self.arrays:
            return ".".join(path)
        return None

    def _element(self, node: ast.Subscript, path: str) -> bool:
        """Whether ``node`` (``a[...]`` of the array ``path``) indexes one element: as many plain indices as dims."""
        index = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        ndim = self.arrays.get(path, -1)
        return ndim == len(index) and not any(isinstance(e, (ast.Slice, ast.Starred)) for e in index)

    def _may_be_ref(self, expr: ast.expr | None) -> bool:
        """Whether ``expr`` may evaluate to an array (a view too) or a struct holding arrays, not a plain value."""
        if expr is None:
            return False
        if self._array_path(expr) is not None:
            return True
        if isinstance(expr, ast.Name):
            return expr.id in self.refs or (
                expr.id in self.params and (expr.id in self.structs or expr.id in self.arrays)
            )
        if isinstance(expr, ast.Attribute):
            if expr.attr == "shape":
                return False
            path = attribute_path(expr)
            if path is not None and path[0] in self.params and path[0] in self.structs:
                prefix = ".".join(path) + "."
                # a nested struct holding arrays; in a function, any field (its layout is not known here)
                return self.in_function or any(a.startswith(prefix) for a in self.arrays)
            if path is not None and path[0] not in self.params and expr.attr not in _COMPONENTS:
                # a field of a local: the local may be a struct (``h = Holder()``, ``m = wp.mesh_get(id)``) whose
                # field holds an array (``h.arr = out``)
                return True
            return self._may_be_ref(expr.value)
        if isinstance(expr, ast.Subscript):
            if not self._may_be_ref(expr.value):
                return False  # a component of a value (``v[0]``, ``m[i, j]``, ``a.shape[0]``)
            path = self._array_path(expr.value)
            return path is None or not self._element(expr, path)
        if isinstance(expr, ast.Call):
            return any(self._may_be_ref(a) for a in (*expr.args, *(k.value for k in expr.keywords)))
        if isinstance(expr, ast.IfExp):
            return self._may_be_ref(expr.body) or self._may_be_ref(expr.orelse)
        if isinstance(expr, (ast.Tuple, ast.List)):
            return any(self._may_be_ref(e) for e in expr.elts)
        if isinstance(expr, ast.Starred):
            return self._may_be_ref(expr.value)
        return False  # arithmetic, comparisons, constants: values

    def _locals(self) -> None:
        """Find the locals naming an array (``b = a``) and those that may hold one some other way."""
        bindings = [(t, v) for t, v in binding_pairs(self.nodes) if isinstance(t, ast.Name)]
        for target, _ in bindings:
            if target.id in self.params and (target.id in self.arrays or target.id in self.structs):
                self.refuse(target, f"the array or struct parameter {target.id!r} is reassigned")
        changed = True
        while changed:  # to a fixed point: ``b = a`` then ``c = b``
            changed = False
            for target, value in bindings:
                name = target.id
                path = self._array_path(value) if value is not None and name not in self.refs else None
                if path is not None and self.aliases.get(name, path) == path:
                    changed |= name not in self.aliases
                    self.aliases[name] = path
                elif (path is not None or self._may_be_ref(value)) and name not in self.refs:
                    self.refs.add(name)  # two arrays, or an array view: stores through it are refused
                    self.aliases.pop(name, None)
                    changed = True
        for name in self.aliases:
            stores = [n for n, _ in bindings if n.id == name]
            if len(stores) != 1:
                self.refuse(stores[1], f"the local {name!r}, which names array {self.aliases[name]!r}, is reassigned")

    # -- stores and uses -------------------------------------------------------------------------------------

    def _store(self, target: ast.expr, stmt: ast.stmt, *, accumulate: bool) -> None:
        """Check one assignment target: a local, or an element (or element component) of an array."""
        if isinstance(target, (ast.Tuple, ast.List)):
            for elt in target.elts:
                self._store(elt, stmt, accumulate=accumulate)
            return
        if isinstance(target, ast.Starred):
            self._store(target.value, stmt, accumulate=accumulate)
            return
        if isinstance(target, ast.Name):
            return  # a local (array parameters and aliases reassigned were refused in `_locals`)
        node: ast.expr = target
        layers: list[ast.expr] = []
        while isinstance(node, (ast.Subscript, ast.Attribute)) and self._array_path(node) is None:
            layers.append(node)
            node = node.value
        text = ast.unparse(target)
        path = self._array_path(node)
        if path is None:
            if isinstance(node, ast.Name) and not self._may_be_ref(node) and not _field_then_index(layers):
                return  # a component of a local or a value parameter, each thread's own copy (``v[0] = ...``)
            self.refuse(stmt, f"a store into {text}, which may not be a local value")
        if accumulate:
            op = type(stmt.op)  # type: ignore[attr-defined]
            if path in self.accumulators and op in (ast.Add, ast.Sub) and layers and layers[-1] is target:
                self._accumulate(path, "add", stmt)
                self.accepted.add(id(node))
                return
            self.refuse(stmt, f"{text} {_AUG_OPS.get(op, '?')}= ... (Warp compiles it to an atomic)")
        if self.in_function:
            self.refuse(stmt, f"a store into array {path!r} ({text})")
        inner = layers[-1] if layers else None
        if not isinstance(inner, ast.Subscript):
            self.refuse(stmt, f"a store into {text}")
        if index_names(inner.slice) != self.tid:
            self.refuse(stmt, f"a store into {text}, not at the thread index {', '.join(self.tid)}")
        if self.arrays.get(path) != len(self.tid):
            self.refuse(stmt, f"a store into {text}: {path!r} has {self.arrays.get(path)} dims, not {len(self.tid)}")
        self.written.add(path)

    def _accumulate(self, path: str, how: str, node: ast.AST) -> None:
        previous = self.accumulated.setdefault(path, how)
        if previous != how:
            self.refuse(node, f"array {path!r} is accumulated both as a {previous} and as a {how}")

    def _atomic(self, call: ast.Call) -> None:
        """Accept an atomic into an accumulator, as the statement it is (its old value unused); refuse any other."""
        name = ".".join(call_path(call.func) or ("?",))
        key = name.rsplit(".", 1)[-1]
        target = call.args[0] if call.args else None
        path = self._array_path(target) if target is not None else None
        if path not in self.accumulators or (isinstance(target, ast.Name) and target.id in self.aliases):
            self.refuse(call, name)
        if not isinstance(self.parents.get(call), ast.Expr):
            self.refuse(call, f"{name} whose result (the old value) is used")
        self._accumulate(path, ACCUMULATING_ATOMICS[key], call)
        self.accepted.add(id(target))

    def _uses_of_candidates(self) -> None:
        """Sort the uses of each accumulator candidate: accumulations (accepted), ``shape``, passes to a function
        (``passes``), and the rest (``other_uses``: a refusal only for an array found accumulated)."""
        for path in self.accumulated:
            if path in self.written:
                self.refuse(self.fn, f"array {path!r} is both accumulated into and stored into")
        for node in self.nodes:
            if not isinstance(node, (ast.Name, ast.Attribute)) or id(node) in self.accepted:
                continue
            path = self._array_path(node)
            if path is None or path not in self.accumulators:
                continue
            if isinstance(node, ast.Name) and node.id in self.aliases:
                self.other_uses.setdefault(path, f"line {node.lineno}: through the alias {node.id!r}")
                continue
            parent = self.parents.get(node)
            if isinstance(parent, ast.Attribute) and parent.attr == "shape":
                continue
            if isinstance(parent, ast.Call) and node in parent.args:
                callee = call_path(parent.func)
                if callee is not None and callee[-1] not in ACCUMULATING_ATOMICS:
                    self.passes.append((".".join(callee), parent.args.index(node), path, parent.lineno))
                    continue
            self.other_uses.setdefault(path, f"line {getattr(node, 'lineno', '?')}: {ast.unparse(parent or node)}")

    def _uses_of_written(self) -> None:
        """Every use of a written array reads or writes its element at the thread index (or reads its shape)."""
        prefixes = {w.rsplit(".", i)[0] for w in self.written for i in range(1, w.count(".") + 1)}
        for node in self.nodes:
            if not isinstance(node, (ast.Name, ast.Attribute)) or isinstance(node.ctx, ast.Store):
                continue
            parent = self.parents.get(node)
            path = self._array_path(node)
            if path is None:
                whole = node.id if isinstance(node, ast.Name) else ".".join(attribute_path(node) or ())
                if whole in prefixes and whole.split(".")[0] in self.params and not isinstance(parent, ast.Attribute):
                    self.refuse(node, f"the struct {whole!r}, whose array fields are written, is used whole")
                continue
            if path not in self.written:
                continue
            if isinstance(parent, ast.Attribute) and parent.attr == "shape":
                continue
            if (
                isinstance(parent, ast.Subscript)
                and parent.value is node
                and index_names(parent.slice) == self.tid
                and self._element(parent, path)
            ):
                continue
            if (
                isinstance(parent, ast.Assign)
                and parent.value is node
                and all(isinstance(t, ast.Name) and self.aliases.get(t.id) == path for t in parent.targets)
            ):
                continue  # ``b = a``: uses of ``b`` are checked as uses of ``a``
            self.refuse(
                node,
                f"the written array {path!r} is used other than at the thread index ({ast.unparse(parent or node)})",
            )


_AUG_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.Mod: "%", ast.Pow: "**"} | {
    ast.BitAnd: "&",
    ast.BitOr: "|",
    ast.BitXor: "^",
    ast.LShift: "<<",
    ast.RShift: ">>",
    ast.FloorDiv: "//",
}
