"""What a kernel's generated C++ may write: the array parameters whose pointer reaches a store, or anything not known
to only read.

Warp generates every kernel and ``@wp.func`` (`_warp_internals.GeneratedFunction`) in a regular, single-assignment
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

So "no write" is only ever said where the generated code agrees. Struct parameters are left to the source-level
analysis (`_writes`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from ..._upstream._warp_internals import GeneratedFunction

_TOKEN = re.compile(r"\bvar_\w+\b")
_ASSIGN = re.compile(r"^\s*(var_\w+)\s*=\s*(.*);\s*$")
_CALLEE = re.compile(r"([A-Za-z_][\w:]*)\s*(?:<[^()]*>)?\s*$")
_MEMBER = re.compile(r"^\s*\)*\s*\.\s*(\w+)")

# Runtime functions that derive a reference or view from an array (the use is decided by what consumes the result).
_DERIVES = frozenset({"wp::address", "wp::index", "wp::view", "wp::copy", "component_ref"})
# Runtime functions known to only read through what they are given.
_READS = frozenset({"wp::load", "wp::len", "wp::extract", "wp::lower_bound", "printf", "wp::print"})
_READ_PREFIXES = ("wp::tile_load",)
# An array's members that are values about it, not its memory.
_READ_MEMBERS = frozenset({"shape", "ndim", "size", "strides"})
# Variable types that carry a pointer into an array (everything else is a value: a copy).
_POINTER_TYPES = ("Reference", "array")

READ, WRITE, DERIVE, RESULT = "read", "write", "derive", "result"


def written_params(functions: Sequence[GeneratedFunction]) -> tuple[str, ...]:
    """The array parameters of the first function (the kernel) that its generated code may write.

    Args:
        functions: the kernel's generated function, then every ``@wp.func`` overload it calls
            (`_warp_internals.CodegenRecord.functions`).

    Returns:
        The parameters' Warp names (``"x"`` for ``var_x``), in parameter order.
    """
    if not functions:
        return ()
    by_name = {f.name: f for f in functions[1:]}
    kernel = functions[0]
    written = _Analysis(by_name).written(kernel)
    return tuple(p.removeprefix("var_") for i, (p, _) in enumerate(kernel.params) if i in written)


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
            if (name == target and match.start() == text.index(target)) or name not in roots:
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
            roots.setdefault(target, set()).update(derived | results)
        elif derived and not text.startswith("return "):
            # a pointer handed somewhere that is neither a reference nor a return value: cast to an address
            # (``(wp::uint64)(var_1)``, for a native snippet to store through), or a bare statement
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
            if callee in _READS or callee.startswith(_READ_PREFIXES):
                return READ
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
