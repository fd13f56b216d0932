"""What a kernel's generated C++ may write: the array parameters whose pointer reaches a store, or anything not known
to only read.

Warp generates every kernel and ``@wp.func`` (`_warp_codegen.GeneratedFunction`) in a regular, single-assignment
form in which every array access goes through a few runtime functions: ``wp::address``/``wp::index``/``wp::view``
derive a reference or a view from an array, ``wp::load`` reads through one, ``wp::array_store``, ``wp::store`` and
the ``wp::atomic_*`` write. Whatever the Python spelling (operator overloading, references, ``wp.store``, a function
reached by any name), the generated code says which array a pointer comes from and where it goes. The rule here:

- an array parameter taints every variable of a reference or array type derived from it (``wp::address``,
  ``wp::index``, ``wp::view``, an alias, a user function's result);
- each use of a tainted variable is a read only where it is known to be (``wp::load``, ``wp::len``, a tile load,
  ``.shape``...), a write where it is a store, an atomic or an in-place update, and a write of the callee's parameter
  where a user function receives it, judged on the callee's own code (native snippets write everything they get);
- any other use (a runtime function not listed, pointer arithmetic on ``.data``, a condition) counts as a write.

So "no write" is only ever said where the generated code agrees. `write_sites` follows struct parameters too (the
fields Warp reaches as ``&((var_s).arr)``) and says where each write happens and how: the vetoes over the
source-level proofs that split a launch (`race_veto`, `private_veto`) and skip a zero-fill (`stored_only`) read it.
`backward_write_sites` walks the code of the kernel's backward entry point the same way: which primal inputs a
backward launch may write (the user's ``@wp.func_grad`` and ``@wp.func_replay`` code, replayed function calls).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Collection, Mapping, Sequence
from typing import NamedTuple

from ..._upstream._warp_codegen import GeneratedFunction
from .. import _cache_table
from ._builtins import (
    ACCUMULATING_ATOMICS,
    DENSE_OUTPUTS,
    STRUCTURE_GETS,
    STRUCTURE_IDS,
    STRUCTURE_READS,
    STRUCTURE_WRITES,
)

_TOKEN = re.compile(r"\bvar_\w+\b")
_ASSIGN = re.compile(r"^\s*(var_\w+)\s*=\s*(.*);\s*$")
_CALLEE = re.compile(r"([A-Za-z_][\w:]*)\s*(?:<[^()]*>)?\s*$")
_MEMBER = re.compile(r"^\s*\)*\s*\.\s*(\w+)")

# Runtime functions that derive a reference or view from an array (the use is decided by what consumes the result).
_DERIVES = frozenset({"wp::address", "wp::index", "wp::view", "wp::copy", "component_ref"})
# Runtime functions known to only read through what they are given.
_READS = frozenset({"wp::load", "wp::len", "wp::extract", "wp::lower_bound", "printf", "wp::print"})
_READ_PREFIXES = ("wp::tile_load",)
# Conditions (``if (var_x)``, the first argument of ``wp::where``): on an array, its truth test (is its pointer null).
_TRUTH_TESTS = frozenset({"if", "while", "wp::where"})
# An array's members that are values about it, not its memory.
_READ_MEMBERS = frozenset({"shape", "ndim", "size", "strides"})
# Variable types that carry a pointer into an array (everything else is a value: a copy).
_POINTER_TYPES = ("Reference", "array")

READ, WRITE, DERIVE, RESULT = "read", "write", "derive", "result"


def written_params(functions: Sequence[GeneratedFunction]) -> tuple[str, ...]:
    """The array parameters of the first function (the kernel) that its generated code may write.

    Args:
        functions: the kernel's generated function, then every ``@wp.func`` overload it calls
            (`_warp_codegen.CodegenRecord.functions`).

    Returns:
        The parameters' Warp names (``"x"`` for ``var_x``), in parameter order.
    """
    if not functions:
        return ()
    by_name = {f.name: f for f in functions[1:]}
    kernel = functions[0]
    written = _Analysis(by_name).written(kernel)
    return tuple(p.removeprefix("var_") for i, (p, _) in enumerate(kernel.params) if i in written)


def backward_written_params(
    functions: Sequence[GeneratedFunction], backward: Sequence[GeneratedFunction]
) -> tuple[str, ...]:
    """The primal array parameters of a kernel that its backward code may write (`backward_write_sites`).

    Args:
        functions: the kernel's forward functions (`_warp_codegen.CodegenRecord.functions`).
        backward: the kernel's backward code, then the reverse and replay functions of what it calls
            (`_warp_codegen.CodegenRecord.backward`).

    Returns:
        The parameters' Warp names (``"x"`` for ``var_x``), in parameter order; every array parameter where there is
        no backward code to judge.
    """
    kernel = backward[0] if backward else functions[0] if functions else None
    if kernel is None:
        return ()
    arrays = [p.removeprefix("var_") for p, is_array in kernel.params if is_array]
    if not backward:
        return tuple(arrays)
    hit = {a for write in backward_write_sites(tuple(functions), tuple(backward)) for a in reached(write.path, arrays)}
    return tuple(a for a in arrays if a in hit)


@_cache_table.register_function
@functools.lru_cache(maxsize=256)
def backward_write_sites(
    functions: tuple[GeneratedFunction, ...], backward: tuple[GeneratedFunction, ...]
) -> tuple[Write, ...]:
    """Every write a kernel's backward code may make through its primal parameters' pointers, callees followed.

    Warp's backward entry point replays the kernel's forward code (stores and atomics left out, but each ``@wp.func``
    call made again: the function's forward code runs), then runs its reverse code, which calls each function's
    reverse function: Warp's adjoint of it (its replay, then its reverse code), the user's ``@wp.func_grad`` body, or
    a native adjoint snippet (which writes everything it is given); and the user's ``@wp.func_replay`` runs in place
    of a replayed call. The adjoint arrays (``adj_x``) are the launch's outputs and meant to be written; the primal
    ones (array parameters, struct fields) are judged as `write_sites` judges forward code: a pointer into one that
    reaches a store, or anything not known to only read, is a write. Warp's adjoints of its array builtins
    (`_ADJOINT_READS`) only read the primal array (they accumulate into its adjoint, or through its ``grad``
    pointer, which the launch points at the adjoint).

    Args:
        functions: the kernel's forward functions (`_warp_codegen.CodegenRecord.functions`).
        backward: the kernel's backward code, then the reverse and replay functions of what it calls
            (`_warp_codegen.CodegenRecord.backward`).

    Returns:
        The writes, sorted (``via``: the key of the function the backward code calls in which it happens, which for
        a user's gradient or replay names it); empty for no code (the caller decides what no code means).
    """
    if not backward:
        return ()
    kernel = backward[0]
    walk = _BackwardSites({f.name: f for f in functions[1:]} | {f.name: f for f in backward[1:]})
    found = walk.walk(kernel, {p: p.removeprefix("var_") for p, _ in kernel.params}).writes
    return tuple(sorted(found, key=lambda w: (w.path, w.how, w.via or "")))


# Warp's adjoints of array builtins that only read the primal array they are given: they accumulate into the adjoint
# array, or through the primal array's ``grad`` pointer (the adjoint too), or do nothing (Warp's ``array.h``,
# ``tile.h``, ``builtin.h``: ``adj_address``, ``adj_array_store``, ``adj_atomic_*``, ``adj_tile_load``, ``adj_copy``...).
_ADJOINT_READS = frozenset(
    {"address", "view", "load", "store", "array_store", "copy"}
    | {"atomic_add", "atomic_sub", "atomic_min", "atomic_max", "atomic_cas", "atomic_exch"}
    | {"tile_load", "tile_load_indexed", "print"}
)
# A variable that is a whole argument: what follows it ends the argument.
_ARGUMENT_END = re.compile(r"\s*[,)]")


class _Analysis:
    """One kernel's analysis: each function's written parameters, computed once."""

    def __init__(self, functions: Mapping[str, GeneratedFunction]):
        self.functions = functions
        self.done: dict[str, frozenset[int]] = {}
        self.active: set[str] = set()

    def written(self, fn: GeneratedFunction) -> frozenset[int]:
        """The positions of ``fn``'s array parameters its code (or a function it calls) may write."""
        arrays = frozenset(i for i, (_, is_array) in enumerate(fn.params) if is_array)
        if fn.opaque or fn.name in self.active:  # native code, or recursion: anything it is given
            return arrays
        if fn.name in self.done:
            return self.done[fn.name]
        self.active.add(fn.name)
        try:
            result = self._walk(fn, arrays)
        finally:
            self.active.discard(fn.name)
        self.done[fn.name] = result
        return result

    def _walk(self, fn: GeneratedFunction, arrays: frozenset[int]) -> frozenset[int]:
        types = dict(fn.types)
        roots: dict[str, set[int]] = {fn.params[i][0]: {i} for i in arrays}
        written: set[int] = set()
        for _ in range(len(fn.lines) + 1):  # to a fixed point: loops assign a variable after its first use
            before = (len(written), sum(len(r) for r in roots.values()))
            for line in fn.lines:
                self._statement(line, roots, types, written)
            if (len(written), sum(len(r) for r in roots.values())) == before:
                break
        return frozenset(written)

    def _statement(self, line: str, roots: dict[str, set[int]], types: dict[str, str], written: set[int]) -> None:
        text = line.strip()
        if not text or text.startswith("//"):
            return
        assign = _ASSIGN.match(text)
        target = assign.group(1) if assign else None
        derived: set[int] = set()
        results: set[int] = set()
        for match in _TOKEN.finditer(text):
            name = match.group(0)
            if (name == target and match.start() == text.index(target)) or name not in roots:  # pyright: ignore[reportArgumentType]  # == name: a str
                continue
            use = self._use(text, match.start(), match.end())
            if use == WRITE:
                written.update(roots[name])
            elif use == DERIVE:
                derived.update(roots[name])
            elif use == RESULT:
                results.update(roots[name])
        pointer_target = target is not None and types.get(target, "").startswith(_POINTER_TYPES)
        if pointer_target:
            roots.setdefault(target, set()).update(derived | results)  # pyright: ignore[reportArgumentType]  # not None
        elif derived and not text.startswith("return ") and types.get(target or "") != "bool":
            # a pointer handed somewhere that is neither a reference nor a return value: cast to an address
            # (``(wp::uint64)(var_1)``, for a native snippet to store through), or a bare statement (a ``bool``
            # target is an array's truth test, ``if row_counts:``: whether its pointer is null)
            written.update(derived)

    def _use(self, text: str, start: int, end: int) -> str:
        """How the tainted variable at ``text[start:end]`` is used."""
        member = _MEMBER.match(text[end:])
        if member and not text[end:].lstrip().startswith(")"):
            return READ if member.group(1) in _READ_MEMBERS else WRITE
        pos = start
        while True:
            call = _enclosing_call(text, pos)
            if call is None:
                return DERIVE  # an alias or a return value: what uses it decides
            callee, position, open_at = call
            if callee is None or callee in _DERIVES:
                tail = _MEMBER.match(text[_closing(text, open_at) + 1 :])
                if tail and tail.group(1) in _READ_MEMBERS:
                    return READ
                pos = open_at - (len(callee) if callee else 0)
                continue
            if callee in _READS or callee.startswith(_READ_PREFIXES) or (callee in _TRUTH_TESTS and position == 0):
                return READ
            dense = DENSE_OUTPUTS.get(callee.removeprefix("wp::"))
            if dense is not None:
                return WRITE if position == dense[0] else READ  # the one array a dense builtin writes
            fn = self.functions.get(callee)
            if fn is None:
                return WRITE  # a store, an atomic, an in-place update, or a function not known to only read
            if position >= len(fn.params) or not fn.params[position][1] or position in self.written(fn):
                return WRITE  # written there, or a pointer given to a reference (``wp.ref[T]``) parameter
            return RESULT  # its result may be the array (a function returning what it was given), or a value


def _enclosing_call(text: str, pos: int) -> tuple[str | None, int, int] | None:
    """The call whose parentheses enclose ``text[pos]``: (its callee, or None for bare parentheses; the position of
    the argument ``pos`` is in; where its ``(`` is). None at the top level."""
    depth, commas = 0, 0
    for j in range(pos - 1, -1, -1):
        c = text[j]
        if c in ")]":
            depth += 1
        elif c in "([":
            if depth:
                depth -= 1
                continue
            if c == "[":
                continue
            found = _CALLEE.search(text[:j])
            callee = found.group(1) if found else None
            if callee is not None:
                callee = callee.rsplit(".", 1)[-1] if "." in callee else callee
            return callee, commas, j
        elif c == "," and depth == 0:
            commas += 1
    return None


def _closing(text: str, open_at: int) -> int:
    """Where the parenthesis opened at ``open_at`` closes (the end of ``text`` if it does not)."""
    depth = 0
    for j in range(open_at, len(text)):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return j
    return len(text) - 1


# -- Where each write happens: the race and fill vetoes, struct fields ------------------------------------------------
#
# `written_params` says whether an array parameter may be written at all. The proofs that split a launch and skip a
# zero-fill need more: where each write happens (in the kernel's own code, or in a function it calls: an operator
# overload, a reference parameter, a native snippet), and how (a plain store, an atomic, something unknown). The
# walk below follows every parameter, struct parameters too (Warp passes a struct by value, holding its arrays'
# pointers: ``&((var_s).arr)`` is a reference to the field, and what loads it is the array), each variable holding
# the set of parameter paths (``"s.arr"``) it may point into.


class Write(NamedTuple):
    """One write the generated code of a kernel may make through a pointer a parameter holds (`write_sites`).

    Attributes:
        path: where it writes, from the kernel's parameter: ``"x"``, a struct's field ``"s.arr"``, a struct whole
            (``"s"``: its array fields, in doubt). It may run past an array (``"x.shape"``: a member of ``x``) or
            name a struct's value field (``"s.k"``: the kernel's own copy); `reached` says which arrays it is.
        how: ``"store"`` (``wp::array_store``, ``wp::store``), an atomic or in-place builtin (``"atomic_add"``,
            ``"add_inplace"``), ``"native code"``, or what else the pointer reaches (a runtime function not known
            to only read, ``"a pointer cast"``...).
        via: the key of the function the kernel calls in which the write happens (a user function, an operator
            overload, a native snippet); None where it is the kernel's own code.
    """

    path: str
    how: str
    via: str | None


@_cache_table.register_function
@functools.lru_cache(maxsize=256)
def write_sites(functions: tuple[GeneratedFunction, ...]) -> tuple[Write, ...]:
    """Every write the kernel's generated code may make through its parameters' pointers, callees followed.

    Args:
        functions: the kernel's generated function, then every ``@wp.func`` overload it calls
            (`_warp_codegen.CodegenRecord.functions`).

    Returns:
        The writes, sorted; empty for no code (the caller decides what no code means).
    """
    if not functions:
        return ()
    kernel = functions[0]
    walk = _Sites({f.name: f for f in functions[1:]})
    found = walk.walk(kernel, {p: p.removeprefix("var_") for p, _ in kernel.params}).writes
    return tuple(sorted(found, key=lambda w: (w.path, w.how, w.via or "")))


def reached(path: str, arrays: Collection[str]) -> tuple[str, ...]:
    """The arrays among ``arrays`` (array parameters, struct array fields: ``"s.arr"``) a write of ``path`` reaches.

    The array it names or runs past (``"x"``, ``"x.shape"``), every array field of a struct it names whole, or
    none: a value field is the kernel's own copy, a scalar parameter no memory.
    """
    for array in arrays:
        if path == array or path.startswith(array + "."):
            return (array,)
    return tuple(a for a in arrays if a.startswith(path + "."))


def race_veto(functions: Sequence[GeneratedFunction], arrays: Collection[str]) -> str | None:
    """Why the generated code keeps a launch the source-level proof judged race-free whole, or None.

    Every write into ``arrays`` must be a plain store in the kernel's own code (which the source-level proof has
    judged: each at the thread's own index); a write in a function it calls (an operator overload, a reference
    parameter, a native snippet) or through anything else refuses, as does no code at all.
    """
    if not functions:
        return "no generated code to check"
    for write in write_sites(tuple(functions)):
        hit = reached(write.path, arrays)
        if hit and (write.via is not None or write.how != "store"):
            return _vetoed(hit[0], write)
    return None


def private_veto(
    functions: Sequence[GeneratedFunction], arrays: Collection[str], accumulated: Mapping[str, str]
) -> str | None:
    """Why the generated code keeps a launch the source-level proof would split with private copies whole, or None.

    An accumulated array (``accumulated``: each with its combination) may be written only by the atomics of its
    combination, wherever (the source-level proof followed them into the functions it calls); every other array
    only by plain stores in the kernel's own code, as for `race_veto`. ``a[j] += x`` that Warp resolves to a user
    ``add`` is a load and a store, not an accumulation, and refuses.
    """
    if not functions:
        return "no generated code to check"
    for write in write_sites(tuple(functions)):
        for array in reached(write.path, arrays):
            if array in accumulated:
                if ACCUMULATING_ATOMICS.get(write.how) != accumulated[array]:
                    return _vetoed(array, write, f"the accumulated array {array!r} ({accumulated[array]})")
            elif write.via is not None or write.how != "store":
                return _vetoed(array, write)
    return None


def _vetoed(array: str, write: Write, what: str | None = None) -> str:
    where = f" in {write.via}, a function it calls" if write.via is not None else ""
    return f"the generated code writes {what or repr(array)} by {write.how}{where}"


def stored_only(functions: Sequence[GeneratedFunction]) -> tuple[str, ...]:
    """The kernel's array parameters whose pointer its generated code uses only to store into, plainly, in its own
    code (``wp::array_store(var_out, ...)``; its shape may be read): what a skipped zero-fill needs.

    Any other use keeps the fill: a load, a reference taken, a call that receives it, a runtime function not known.
    A parameter with no store at all is not listed.

    Returns:
        The parameters' Warp names, in parameter order.
    """
    if not functions:
        return ()
    kernel = functions[0]
    arrays = {p for p, is_array in kernel.params if is_array}
    stored: set[str] = set()
    other: set[str] = set()
    for line in kernel.lines:
        text = line.strip()
        if not text or text.startswith("//"):
            continue
        for match in _TOKEN.finditer(text):
            name = match.group(0)
            if name not in arrays:
                continue
            if _PLAIN_STORE.fullmatch(text[: match.start()]) and text[match.end() :].lstrip().startswith(","):
                stored.add(name)
            elif not _SHAPE.match(text, match.end()):
                other.add(name)
    return tuple(p.removeprefix("var_") for p, _ in kernel.params if p in stored and p not in other)


# The id of a structure's own part, an integer that stands for the structure (``wp::mesh_get_bvh(var_mesh)``).
_STRUCTURE_ID = re.compile(rf"wp::(?:{'|'.join(sorted(STRUCTURE_IDS))})\(")
_PLAIN_STORE = re.compile(r"wp::array_store\(\s*")
_SHAPE = re.compile(r"\s*(?:\.|->)\s*shape\b")
# An assignment: to a local (``var_3 = ...``), through a pointer (``*var_r = ...``), to a member (``var_1.arr = ...``).
_LHS = re.compile(r"^(\*?)\s*(var_\w+)((?:\s*(?:\.|->)\s*\w+)*)\s*=(?!=)\s*(.*);$")
_MEMBER_STEP = re.compile(r"\s*(?:\.|->)\s*(\w+)")
# A pointer cast before a parenthesis: ``(wp::uint64*)&(var_x.data)``, an array's pointer as an integer.
_CAST = re.compile(r"\*\s*\)\s*&?\s*$")
_STORES = frozenset({"wp::array_store", "wp::store"})
# The methods that take a reference to a component, a row, an element of a vector or matrix in place (a store into an
# array element's component: ``&(wp::index(var_y, var_0).element_ref(var_1, var_2))``).
_SLOTS = frozenset({"component_ref", "row_ref", "element_ref"})
# A struct's constructor (``Model_1a2b3c4d(var_dt, var_g, var_m)``: its key and a hash): the struct holds what it is
# given, so what uses the struct decides.
_CONSTRUCTOR = re.compile(r"[A-Za-z_]\w*_[0-9a-f]{8}")
_IN_PLACE = re.compile(r"wp::(atomic_\w+|\w+_inplace)")
# Warp's value types (by the name `GeneratedFunction.types` gives): a variable of one holds no pointer. Any other
# (``Reference``, ``array``, a struct, a tuple) may.
_SCALARS = frozenset(
    {"bool", "int", "float", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"}
    | {"bfloat16", "float16", "float32", "float64", "shape_t", "range_t"}
)
_COMPOSITES = ("vec", "mat", "quat", "transform", "spatial_")
# Warp's deterministic-mode macros (``native/deterministic.h``) as its CPU build expands them: the position of their
# statement argument (the fallback the CPU runs; judged by what it calls), the others not evaluated...
_DETERMINISTIC_FALLBACKS = {"WP_DET_SCATTER_OR_FALLBACK": 4, "WP_DET_COUNTER_OR_FALLBACK": 5}
# ...and those that store (``wp::array_store(args[1:])``, ``wp::store(&args[1], args[2])``) or run their statements.
_DETERMINISTIC_STORES = frozenset({"WP_DET_STORE_IF_ACTIVE", "WP_DET_SLOT_STORE_IF_ACTIVE"})
_DETERMINISTIC_STATEMENTS = "WP_DET_SIDE_EFFECT_IF_ACTIVE"
LOAD, CALL = "load", "call"


def _holds_pointer(type_name: str | None) -> bool:
    """Whether a variable of this type (None: a parameter, untyped here) may hold a pointer into an array."""
    if type_name is None:
        return True
    return type_name not in _SCALARS and not type_name.startswith(_COMPOSITES)


class _Summary(NamedTuple):
    """What one function's generated code does with its parameters' pointers: paths from ``"@<position>"``."""

    writes: frozenset[Write]  # its writes (``via`` the function of its own it calls, if any)
    returns: frozenset[str]  # what its return value may point into


class _Sites:
    """One kernel's walk (`write_sites`): each called function's `_Summary`, computed once."""

    def __init__(self, functions: Mapping[str, GeneratedFunction]):
        self.functions = functions
        self.done: dict[str, _Summary] = {}
        self.active: set[str] = set()

    def summary(self, fn: GeneratedFunction) -> _Summary:
        """What ``fn`` does with each parameter (native code, or recursion: writes anything it is given)."""
        if fn.opaque or fn.name in self.active:
            how = "native code" if fn.opaque else "a recursive call"
            params = frozenset(f"@{i}" for i in range(len(fn.params)))
            return _Summary(frozenset(Write(p, how, None) for p in params), params)
        if fn.name not in self.done:
            self.active.add(fn.name)
            try:
                self.done[fn.name] = self.walk(fn, {p: f"@{i}" for i, (p, _) in enumerate(fn.params)})
            finally:
                self.active.discard(fn.name)
        return self.done[fn.name]

    def walk(self, fn: GeneratedFunction, roots: Mapping[str, str]) -> _Summary:
        """``fn``'s writes and return value, each parameter (``roots``) pointing into the path it is given."""
        types = dict(fn.types)
        arrays = {p for p, is_array in fn.params if is_array}
        points: dict[str, set[str]] = {var: {path} for var, path in roots.items()}
        writes: set[Write] = set()
        returns: set[str] = set()
        for _ in range(len(fn.lines) + 1):  # to a fixed point: loops assign a variable after its first use
            before = (len(writes), len(returns), sum(len(p) for p in points.values()))
            for line in fn.lines:
                self._statement(line.strip(), points, types, arrays, writes, returns)
            if (len(writes), len(returns), sum(len(p) for p in points.values())) == before:
                break
        return _Summary(frozenset(writes), frozenset(returns))

    def _statement(
        self,
        text: str,
        points: dict[str, set[str]],
        types: Mapping[str, str],
        arrays: Collection[str],
        writes: set[Write],
        returns: set[str],
    ) -> None:
        if not text or text.startswith("//"):
            return
        lhs = _LHS.match(text)
        flows: set[str] = set()  # what the statement's value may point into, as a pointer handed on
        results: set[str] = set()  # ...as a load's or a function's result (a value where a value is meant)
        handed_back: set[str] = set()  # ...as a function's result: a structure's id a function returns
        for match in _TOKEN.finditer(text):
            name = match.group(0)
            if (lhs is not None and match.start() == lhs.start(2)) or name not in points:
                continue
            paths = points[name]
            use = self._use(text, match.start(), match.end())
            if use[0] == WRITE:
                writes.update(Write(p + use[2], use[1], None) for p in paths)
            elif use[0] == DERIVE:
                flows.update(p + use[1] for p in paths)
            elif use[0] == LOAD:
                results.update(p + use[1] for p in paths)
            elif use[0] == CALL:
                callee, head, suffix = use[1], f"@{use[2]}", use[3]
                summary = self.summary(callee)
                for write in summary.writes:
                    rest = _rest(write.path, head)
                    if rest is not None:
                        writes.update(Write(p + suffix + rest, write.how, callee.key) for p in paths)
                for returned in summary.returns:
                    rest = _rest(returned, head)
                    if rest is not None:
                        results.update(p + suffix + rest for p in paths)
                        handed_back.update(p + suffix + rest for p in paths)
        if lhs is None:
            if text.startswith("return "):
                returns.update(flows | results)
            else:  # a pointer in a bare statement or a condition: in doubt, a write
                writes.update(Write(p, "a statement jarp does not know", None) for p in flows)
            return
        deref, target, chain = lhs.group(1), lhs.group(2), lhs.group(3)
        if deref or "->" in chain or (chain and (target in arrays or types.get(target) in _POINTER_TYPES)):
            # a store through a pointer (a reference parameter: ``*var_r = ...``): a write of what it points into,
            # and what it stores escapes into memory
            member = "".join("." + m.group(1) for m in _MEMBER_STEP.finditer(chain))
            writes.update(Write(p + member, "store", None) for p in points.get(target, ()))
            writes.update(Write(p, "a pointer stored into memory", None) for p in flows | results)
        elif (
            chain
            or _holds_pointer(types.get(target))
            or _STRUCTURE_ID.match(lhs.group(4))
            or (handed_back and types.get(target) == "uint64")
        ):
            # (a ``uint64`` a function returns may be the id it was given: ``def ident(id): return id``)
            # a local (or a field of a local struct, ``var_1.arr = var_c``: the copy now holds it) that may hold it
            if flows | results:
                points.setdefault(target, set()).update(flows | results)
        elif types.get(target) != "bool":
            # a pointer made a value: ``(wp::uint64)(var_1)``, for a native snippet to store through (a ``bool`` is an
            # array's truth test; a loaded or returned value is a value)
            writes.update(Write(p, "a pointer cast", None) for p in flows)

    def _use(self, text: str, start: int, end: int) -> tuple:
        """How the variable at ``text[start:end]`` is used: ``(READ,)``, ``(WRITE, how, suffix)``,
        ``(DERIVE, suffix)`` (handed on as it is), ``(LOAD, suffix)`` (loaded), ``(CALL, function, position,
        suffix)``; the suffix is the members taken on the way (``".arr"`` for ``&((var_s).arr)``)."""
        suffix, method = _members(text, end)
        if method is not None:
            return WRITE, f"its method {method}()", suffix
        pos = start
        while True:
            call = _enclosing_call(text, pos)
            if call is None:
                return DERIVE, suffix
            callee, position, open_at = call
            if callee is None:  # parentheses: a grouping, an address taken (``&(...)``), a cast
                if _CAST.search(text, 0, open_at):
                    return WRITE, "a pointer cast", suffix
                more, method = _members(text, _closing(text, open_at) + 1)
                if method is not None:
                    return WRITE, f"its method {method}()", suffix + more
                suffix, pos = suffix + more, open_at
                continue
            begin = _callee_start(text, open_at)
            if callee in _SLOTS or (callee in _TRUTH_TESTS and (callee != "wp::where" or position == 0)):
                return (READ,)  # the index of a component; a condition (an array's: whether its pointer is null)
            if callee in _DETERMINISTIC_FALLBACKS or callee == _DETERMINISTIC_STATEMENTS:
                statement = position == _DETERMINISTIC_FALLBACKS.get(callee, max(position, 1))
                return (WRITE, "a statement jarp does not know", suffix) if statement else (READ,)
            if callee in _DETERMINISTIC_STORES:
                if position == 0:
                    return (READ,)
                return (WRITE, "store" if position == 1 else "a pointer stored into memory", suffix)
            if callee in _DERIVES or callee == "wp::load":
                if position:
                    return (READ,)  # an index
                more, method = _members(text, _closing(text, open_at) + 1)
                if method is not None:
                    return WRITE, f"its method {method}()", suffix + more
                if callee == "wp::load" and not more and _enclosing_call(text, begin) is None:
                    return LOAD, suffix
                suffix, pos = suffix + more, begin  # what uses the reference (or a load inside) decides
                continue
            if callee in _READS or callee.startswith(_READ_PREFIXES):
                return (READ,)
            name = callee.removeprefix("wp::")
            dense = DENSE_OUTPUTS.get(name)
            if dense is not None:
                return (WRITE, name, suffix) if position == dense[0] else (READ,)
            if callee in _STORES or _IN_PLACE.fullmatch(callee):
                how = "store" if callee in _STORES else name
                return (WRITE, how, suffix) if position == 0 else (WRITE, "a pointer stored into memory", suffix)
            if position == 0 and callee.startswith("wp::"):
                # a structure's id (a parameter a jarp structure is given for): queried, written, or its arrays
                # (``wp.mesh_get(id).points``) or its tree's id handed on, for what uses them to decide
                if name in STRUCTURE_READS:
                    return (READ,)
                if name in STRUCTURE_WRITES:
                    return WRITE, name, suffix
                if name in STRUCTURE_GETS or name in STRUCTURE_IDS:
                    pos = begin
                    continue
            fn = self.functions.get(callee)
            if fn is not None:
                return CALL, fn, position, suffix
            if _CONSTRUCTOR.fullmatch(callee):
                pos = begin  # a struct built from it: what uses the struct decides
                continue
            return WRITE, callee, suffix  # a function not known to only read


def _members(text: str, pos: int) -> tuple[str, str | None]:
    """The members taken from ``pos`` on (``".arr"`` for ``).arr``, ``->shape``), and the name of a method called
    there (None: none; a component reference, ``.component_ref(i)`` and the like (`_SLOTS`), is stepped over)."""
    suffix = ""
    while True:
        match = _MEMBER_STEP.match(text, pos)
        if match is None:
            return suffix, None
        pos = match.end()
        if text[pos:].lstrip().startswith("("):
            if match.group(1) not in _SLOTS:
                return suffix, match.group(1)
            pos = _closing(text, text.index("(", pos)) + 1
            continue
        suffix += "." + match.group(1)


def _callee_start(text: str, open_at: int) -> int:
    """Where the name of the function whose ``(`` is at ``open_at`` starts."""
    found = _CALLEE.search(text, 0, open_at)
    return found.start() if found else open_at


def _rest(path: str, head: str) -> str | None:
    """What ``path`` adds to ``head`` (``".arr"`` for ``"@0.arr"`` and ``"@0"``), or None if it does not start so."""
    if path == head:
        return ""
    return path[len(head) :] if path.startswith(head + ".") else None


class _BackwardSites(_Sites):
    """`_Sites` over backward code: a variable given whole to one of Warp's adjoints in `_ADJOINT_READS` is read."""

    def _use(self, text: str, start: int, end: int) -> tuple:
        call = _enclosing_call(text, start)
        if call is not None and call[0] is not None and _ARGUMENT_END.match(text, end):
            callee = call[0]
            if callee.startswith("wp::adj_") and callee.removeprefix("wp::adj_") in _ADJOINT_READS:
                return (READ,)
        return super()._use(text, start, end)
