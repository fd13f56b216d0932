"""Reading jarp's custom calls out of lowered program text (``jax.jit(f).trace(...).lower().as_text()``).

A jarp call lowers to ``stablehlo.custom_call @jarp_warp_call(...)`` (or ``@jarp_warp_call_no_graph``) whose
``mhlo.backend_config`` holds ``abi`` (jarp's call-ABI version) and ``desc`` (the plan's description, JSON, as an
MLIR string with ``\\XX`` escapes). `custom_calls` decodes them and finds each call's plan handle in this process.
"""

from __future__ import annotations

import json
import re
from typing import Any

from jarp.warp._ffi._registry import registry

_CUSTOM_CALL = re.compile(r"stablehlo\.custom_call @(\w+)\((.*?)\) \{(.*)\} : ")
_DESC = re.compile(r'desc = "((?:[^"\\]|\\.)*)"')
_ABI = re.compile(r"abi = (\d+) : i64")
_ALIAS = re.compile(r"output_tuple_indices = \[([\d, ]*)\], operand_index = (\d+)")


def unescape(text: str) -> str:
    """An MLIR string literal's contents as the string it denotes (``\\22`` is ``"``, ``\\\\`` a backslash)."""
    out = re.sub(r"\\([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), text.replace("\\\\", "\\5C"))
    return out.encode("latin-1").decode("utf-8")


def custom_calls(text: str) -> list[dict[str, Any]]:
    """Each custom call in ``text``: target, operands, abi, desc, description (parsed), plan handle, aliases, side effect."""
    calls = []
    for match in _CUSTOM_CALL.finditer(text):
        target, attrs = match.group(1), match.group(3)
        desc = _DESC.search(attrs)
        abi = _ABI.search(attrs)
        decoded = None if desc is None else unescape(desc.group(1))
        aliases = [
            (tuple(int(i) for i in outs.replace(" ", "").split(",") if i), int(operand))
            for outs, operand in _ALIAS.findall(attrs)
        ]
        calls.append(
            {
                "target": target,
                "operands": [o for o in match.group(2).split(", ") if o],
                "abi": None if abi is None else int(abi.group(1)),
                "desc": decoded,
                "description": None if decoded is None else json.loads(decoded),
                "plan": None if decoded is None else registry.lookup(decoded),
                "aliases": aliases,
                "side_effect": "has_side_effect = true" in attrs,
            }
        )
    return calls


_JARP_TARGET = re.compile(r'(?:stablehlo\.custom_call @|custom_call_target=")jarp_warp_call\w*\b')


def plan_handles(text: str) -> list[int | None]:
    """The plan handle of each jarp call in ``text``, in order (None where this process has no plan for it).

    ``text`` is StableHLO (``Lowered.as_text()``) or HLO (``Compiled.as_text()``, ``as_text(dialect="hlo")``):
    either prints each custom call, with its ``desc``, on one line.
    """
    handles = []
    for line in text.splitlines():
        if _JARP_TARGET.search(line):
            desc = _DESC.search(line)
            handles.append(None if desc is None else registry.lookup(unescape(desc.group(1))))
    return handles
