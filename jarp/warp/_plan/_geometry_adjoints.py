"""Which geometry gradients Warp's builtins drop, judged on the code Warp generates for a kernel.

Warp's mesh builtins return values that depend on the vertices (the closest point's barycentrics, a ray's
distance and normal, an interpolated position), but their adjoints reach only their other arguments: the
vertices' share is dropped, without a word. Reading the vertices as arrays (``wp.mesh_get(id).points[...]``)
differentiates exactly. So a derivative with respect to a structure's arrays is right only where the kernel
reads them through arrays or through values that do not depend on them smoothly (a face index, a sign, a hit
count). `dropped` finds the rest in the C++ Warp generates (after names are resolved and constant branches
folded), for the kernel and every ``@wp.func`` it calls.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import warp as wp

from . import _writes

# Builtins whose value depends smoothly on a structure's arrays but whose adjoint drops that dependence, by the
# structure field they read; the queries are handled by the fields read from their result (`_QUERY_SMOOTH`).
_DIRECT = {
    "mesh_eval_position": "points",
    "mesh_eval_face_normal": "points",
    "mesh_get_point": "points",
    "mesh_eval_velocity": "velocities",
    "mesh_get_velocity": "velocities",
}
_QUERIES = (
    "mesh_query_point",
    "mesh_query_point_no_sign",
    "mesh_query_point_sign_normal",
    "mesh_query_point_sign_winding_number",
    "mesh_query_point_sign_parity",
    "mesh_query_furthest_point_no_sign",
    "mesh_query_ray",
)
# The fields of a query's result that do not change under small moves of the vertices.
_DISCRETE_FIELDS = frozenset({"face", "sign", "result"})
# Volume builtins that only transform coordinates (no voxel value is read).
_VOLUME_TRANSFORMS = frozenset(
    {"volume_index_to_world", "volume_world_to_index", "volume_index_to_world_dir", "volume_world_to_index_dir"}
)

_CALL = re.compile(r"^\s*(var_\w+)\s*=\s*wp::(\w+)\(")
_ANY_CALL = re.compile(r"wp::(\w+)\(")


def dropped(kernel: wp.Kernel) -> dict[str, tuple[str, ...]]:
    """Where Warp's adjoint of ``kernel`` drops a structure array's gradient, by field.

    Returns:
        ``{field: (builtin, ...)}``, ``field`` being ``"points"``, ``"velocities"`` (meshes) or ``"values"``
        (volumes), each builtin named as in Python, with the result field read for a query
        (``"wp.mesh_query_ray (.t)"``). Empty where every read differentiates exactly.
    """
    found: dict[str, list[str]] = {}
    for _, lines in _writes.forward_code(kernel):
        _scan(lines, found)
    return {field: tuple(dict.fromkeys(names)) for field, names in found.items()}


def _scan(lines: Iterable[str], found: dict[str, list[str]]) -> None:
    lines = list(lines)
    queries: dict[str, str] = {}
    for line in lines:
        call = _CALL.match(line)
        names = [call.group(2)] if call else []
        names += [n for n in _ANY_CALL.findall(line) if not call or n != call.group(2)]
        for name in names:
            if name in _DIRECT:
                found.setdefault(_DIRECT[name], []).append(f"wp.{name}")
            elif name.startswith("volume_") and name not in _VOLUME_TRANSFORMS:
                found.setdefault("values", []).append(f"wp.{name}")
        if call and call.group(2) in _QUERIES:
            queries[call.group(1)] = call.group(2)
        elif any(n in _QUERIES for n in names):
            # a query whose result is not kept in a variable of its own (passed on directly): judged unsafe
            found.setdefault("points", []).append(f"wp.{next(n for n in names if n in _QUERIES)}")
    for var, name in queries.items():
        use = re.compile(rf"\b{var}\b(?!\s*=\s*wp::)")
        field = re.compile(rf"\(\({var}\)\.(\w+)\)")
        for line in lines:
            if _CALL.match(line) and _CALL.match(line).group(1) == var:
                continue
            if not use.search(line):
                continue
            fields = field.findall(line)
            smooth = [f for f in fields if f not in _DISCRETE_FIELDS]
            if smooth:
                found.setdefault("points", []).extend(f"wp.{name} (.{f})" for f in smooth)
            elif not fields or len(fields) < len(use.findall(line)):
                # the whole result goes somewhere (copied, passed to a function): its smooth fields may be read there
                found.setdefault("points", []).append(f"wp.{name}")
