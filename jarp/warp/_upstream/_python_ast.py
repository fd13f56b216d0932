"""Python's parser, behind one entry that works around a CPython 3.11 defect with threads.

In CPython 3.11 the counter that guards the recursion depth of the AST constructor (which turns the parser's C
tree into ``ast`` objects) lives in the interpreter, not the thread. Building those objects can run Python code
(the garbage collector) and so switch threads, and two threads parsing at once then see each other's depth:
``ast.parse`` raises ``SystemError: AST constructor recursion depth mismatch`` for valid source
(python/cpython#106905, fixed in 3.12). jarp parses kernel sources while tracing, so any program whose threads
trace jarp modules while Warp defines kernels (Warp parses each kernel's source too) can meet it.

`parse` is the only place jarp calls ``ast.parse``: jarp's own parses are serialised by one lock (so they never
disturb each other), and the spurious error (which a parse running in a thread outside jarp, such as Warp's,
can still provoke) is retried: it depends on timing, never on the source.
"""

from __future__ import annotations

import ast
import sys
import textwrap
import time

from . import _locks

# jarp's parses, one at a time (a parse takes micro- to milliseconds; the lock is never held across anything else).
_PARSE_LOCK = _locks.make("parse")
# Enough for a storm of concurrent parses in other threads; a genuine error (never this message) is not retried.
_RETRIES = 20
_MISMATCH = "recursion depth mismatch"
AFFECTED = sys.version_info < (3, 12)
"""Whether this interpreter has the shared AST-constructor counter (CPython 3.11)."""


def parse(source: str, *, dedent: bool = False) -> ast.Module:
    """``ast.parse(source)``, serialised with jarp's other parses and retried on the spurious
    ``SystemError`` of CPython 3.11's shared AST-constructor counter.

    Args:
        source: Python source text.
        dedent: dedent ``source`` first (a method's or nested function's source).

    Returns:
        The syntax tree.

    Raises:
        SyntaxError, ValueError: as ``ast.parse`` does, for source that does not parse.

    Example:
        >>> parse("def f(x):\\n    return x").body[0].name
        'f'
    """
    text = textwrap.dedent(source) if dedent else source
    for attempt in range(_RETRIES + 1):
        try:
            with _PARSE_LOCK:
                return ast.parse(text)
        except SystemError as e:
            if _MISMATCH not in str(e) or attempt == _RETRIES:
                raise
            time.sleep(0)  # let the other thread's parse finish before trying again
    raise AssertionError("unreachable")
