"""Which geometry gradients Warp's builtins drop, judged on the code Warp generates for a kernel.

Warp's mesh builtins return values that depend on the vertices (the closest point's barycentrics, a ray's
distance, normal and sign, an interpolated position), but their adjoints reach only their other arguments: the
vertices' share is dropped, without a word. Reading the vertices as arrays (``wp.mesh_get(id).points[...]``)
differentiates exactly. So a derivative with respect to a structure's arrays is right only where the kernel
reads them through arrays or through values that do not depend on them smoothly (a face index, a point query's
sign, a hit count). `dropped` finds the rest in the C++ Warp generates (after names are resolved and constant
branches folded), for the kernel and every ``@wp.func`` it calls.

jarp differentiates the variant `_variants.vertex_reads` derives, in which every call it can rewrite
reads the vertices as arrays (a query's replacement reads only the face, the sign of a point query and the
result from Warp's query, and recomputes the rest): what `dropped` finds there is what could not be rewritten
(Warp's older query overloads, functions reached through ``wp.static`` or a parameter, functions with a custom
adjoint), or a kernel a `jax_callable` launches itself (not rewritten).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import NamedTuple

import warp as wp

from .._plan._analysis import _writes
from .._upstream import _warp_kernels

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
# The fields of a query's result that do not change under small moves of the vertices: a point query's sign is
# the side (+-1, or 0 without one); a ray's is the determinant of Warp's intersection test, smooth in the vertices.
_DISCRETE_FIELDS = frozenset({"face", "sign", "result"})
_RAY_DISCRETE_FIELDS = frozenset({"face", "result"})
# Volume builtins that only transform coordinates (no voxel value is read).
_VOLUME_TRANSFORMS = frozenset(
    {"volume_index_to_world", "volume_world_to_index", "volume_index_to_world_dir", "volume_world_to_index_dir"}
)

_CALL = re.compile(r"^\s*(var_\w+)\s*=\s*wp::(\w+)\((.*)\);\s*$")
_ANY_CALL = re.compile(r"wp::(\w+)\(([^()]*)")


class Drop(NamedTuple):
    """One read whose gradient Warp's adjoint drops.

    Attributes:
        field: the structure array whose gradient is dropped (``"points"``, ``"velocities"``, ``"values"``).
        builtin: the builtin, as named in Python, with the result field read for a query (``"wp.mesh_query_ray
            (.t)"``).
        param: the kernel parameter the structure's id comes from, or None where it may be any (an id computed,
            read from a struct or an array, or used inside a ``@wp.func``).
    """

    field: str
    builtin: str
    param: str | None


def dropped(kernel: wp.Kernel) -> tuple[Drop, ...]:
    """Where Warp's adjoint of ``kernel`` drops a structure array's gradient (empty where every read is exact)."""
    found: list[Drop] = []
    params = {f"var_{name}": name for name, _ in _warp_kernels.kernel_params(kernel)}
    for i, (_, lines, types) in enumerate(_writes.forward_code(kernel)):
        _scan(lines, dict(types), params if i == 0 else {}, found)  # the kernel's own code first, then its functions'
    return tuple(dict.fromkeys(found))


def _args(text: str) -> list[str]:
    return [a.strip() for a in text.split(",") if a.strip()]


def _scan(lines: Iterable[str], types: dict[str, str], params: dict[str, str], found: list[Drop]) -> None:
    lines = list(lines)
    matches = [_CALL.match(line) for line in lines]  # the assignment of a call's result, per line
    queries: dict[str, tuple[str, str | None]] = {}

    def source(args: list[str]) -> str | None:
        return params.get(args[0]) if args else None

    for line, call in zip(lines, matches, strict=True):
        calls = [(call.group(2), _args(call.group(3)))] if call else []
        calls += [(n, _args(a)) for n, a in _ANY_CALL.findall(line) if not call or n != call.group(2)]
        for name, args in calls:
            if name in _DIRECT:
                found.append(Drop(_DIRECT[name], f"wp.{name}", source(args)))
            elif name.startswith("volume_") and name not in _VOLUME_TRANSFORMS:
                found.append(Drop("values", f"wp.{name}", source(args)))
            elif name in _QUERIES:
                # The form returning a result struct is followed through the fields read from it. Warp's older
                # overloads return a bool and write the results into the caller's variables (face, u, v, t...),
                # which jarp does not follow: refused, as is a result passed on without a variable of its own.
                if call and call.group(2) == name and types.get(call.group(1), "").startswith("MeshQuery"):
                    queries[call.group(1)] = (name, source(args))
                else:
                    found.append(Drop("points", f"wp.{name}", source(args)))
    for var, (name, param) in queries.items():
        use = re.compile(rf"\b{var}\b")
        field = re.compile(rf"\(\({var}\)\.(\w+)\)")
        for line, call in zip(lines, matches, strict=True):
            if call and call.group(1) == var:
                continue
            uses = len(use.findall(line))
            if not uses:
                continue
            fields = field.findall(line)
            discrete = _RAY_DISCRETE_FIELDS if name == "mesh_query_ray" else _DISCRETE_FIELDS
            smooth = [f for f in fields if f not in discrete]
            found.extend(Drop("points", f"wp.{name} (.{f})", param) for f in smooth)
            if len(fields) < uses:
                # the whole result goes somewhere (copied, passed to a function): its smooth fields may be read there
                found.append(Drop("points", f"wp.{name}", param))
