"""Warp builtins judged by name: those that make concurrent launches share state (tiles, printing), those that may
race across threads (atomics, pointer stores), the atomics a privatised launch accumulates with; and the calls a
source makes."""

from __future__ import annotations

import ast
import functools

from .. import _cache_table
from ._syntax import attribute_path, parse_module

# Builtins that make concurrent launches of a kernel share state (`sharing_call`): tiles and block_dim (Warp's CPU
# tile scratch storage is one global of the module; threads of a block cooperate) and printing (it interleaves).
_SHARING_CALLS = frozenset({"print", "printf", "breakpoint", "block_dim", "untile", "func_native"})
_SHARING_PREFIXES = ("tile", "expect_")
_SHARING_SUFFIXES = ("_tiled",)
# And the builtins a race-free kernel may not call on top of those (`racy_call`): Warp's CPU atomics are plain
# read-modify-writes, so two threads of a split launch can lose an update; the rest write memory through something
# other than an indexed store (pointers, raw array stores, views made from pointers, volume stores, in-place array
# updates, dense solves into output arrays).
_WRITING_BUILTINS = frozenset({"array", "array_store", "store", "address", "address_of", "view", "indexref"})
_WRITING_PREFIXES = ("atomic_", "volume_store", "dense_", "assign")
_WRITING_SUFFIXES = ("_inplace",)


def sharing_call(name: str) -> bool:
    """Whether calling the builtin (or function) named ``name`` makes concurrent launches of a kernel share state.

    Tiles (``tile*``, ``*_tiled``, ``block_dim``): Warp's CPU code keeps their scratch storage in one global of the
    module, which two launches at once would share. Printing (``print``, ``printf``, the ``expect_*`` checks): the
    output of concurrent launches would interleave. Atomics and stores are not listed: each launch of a batch
    slice writes only its own slice's buffers.
    """
    name = name.rsplit(".", 1)[-1]
    return name in _SHARING_CALLS or name.startswith(_SHARING_PREFIXES) or name.endswith(_SHARING_SUFFIXES)


def racy_call(name: str) -> bool:
    """Whether calling the builtin (or function) named ``name`` may race or cooperate across threads.

    Everything `sharing_call` names (tiles, printing), atomics (``atomic_*``), and the builtins that write memory
    other than through ``a[i] = ...``.
    """
    name = name.rsplit(".", 1)[-1]
    return sharing_call(name) or (
        name in _WRITING_BUILTINS or name.startswith(_WRITING_PREFIXES) or name.endswith(_WRITING_SUFFIXES)
    )


@_cache_table.register_function
@functools.lru_cache(maxsize=1024)
def called_names(source: str) -> tuple[tuple[str | None, int], ...] | None:
    """Every call in ``source``: ``(dotted name, line)``, the name None for a computed callee (``wp.static(f)(x)``).

    Returns:
        The calls in order of appearance; None for a source that does not parse.
    """
    tree = parse_module(source)
    if tree is None:
        return None
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            path = attribute_path(node.func) if isinstance(node.func, ast.Attribute) else None
            name = node.func.id if isinstance(node.func, ast.Name) else ".".join(path) if path else None
            calls.append((name, node.lineno))
    return tuple(calls)


# The atomics a privatised launch accumulates with, and how the per-range copies combine: a sum (``atomic_sub``
# accumulates negated values, so its copies add up too), a minimum or a maximum.
ACCUMULATING_ATOMICS = {"atomic_add": "add", "atomic_sub": "add", "atomic_min": "min", "atomic_max": "max"}


# The dense linear-algebra builtins and the one array each writes: its position and keyword (Warp's native
# ``matnn.h`` takes the others as ``const``). The batched ones have no native code: any of their arrays counts.
DENSE_OUTPUTS = {"dense_gemm": (7, "C"), "dense_chol": (3, "L"), "dense_subs": (3, "x"), "dense_solve": (4, "x")}


# Warp's builtins taking a structure's id (a mesh, BVH, hash grid or volume: ``uint64 id``, their first parameter),
# by what they do with the structure. Each reads it (a query, a lookup, a sample, a coordinate transform), but for
# ``mesh_get``, which hands out the mesh's arrays (``m.points``: what a kernel does with them decides), the
# ``volume_store*`` family, which writes the volume, and ``mesh_get_bvh``, which returns the id of the mesh's own
# tree (its uses are the mesh's). `tests/warp/plan/test_writes.py` checks that every such builtin of the installed
# Warp is listed here, so a new one is classified before jarp trusts a kernel calling it.
STRUCTURE_GETS = frozenset({"mesh_get"})
STRUCTURE_IDS = frozenset({"mesh_get_bvh"})
STRUCTURE_WRITES = frozenset({"volume_store", "volume_store_f", "volume_store_i", "volume_store_v"})
STRUCTURE_READS = frozenset(
    {"bvh_get_group_root", "bvh_query_aabb", "bvh_query_aabb_tiled", "bvh_query_capsule", "bvh_query_ray"}
    | {"bvh_query_ray_tiled", "bvh_query_sphere", "hash_grid_point_id", "hash_grid_query"}
    | {"mesh_eval_face_normal", "mesh_eval_position", "mesh_eval_velocity", "mesh_get_group_root"}
    | {"mesh_get_index", "mesh_get_point", "mesh_get_velocity", "mesh_query_aabb", "mesh_query_aabb_tiled"}
    | {"mesh_query_furthest_point_no_sign", "mesh_query_point", "mesh_query_point_no_sign"}
    | {"mesh_query_point_sign_normal", "mesh_query_point_sign_parity", "mesh_query_point_sign_winding_number"}
    | {"mesh_query_ray", "mesh_query_ray_anyhit", "mesh_query_ray_count_intersections", "mesh_query_sphere"}
    | {"volume_index_to_world", "volume_index_to_world_dir", "volume_lookup", "volume_lookup_f", "volume_lookup_i"}
    | {"volume_lookup_index", "volume_lookup_v", "volume_sample", "volume_sample_f", "volume_sample_grad"}
    | {"volume_sample_grad_f", "volume_sample_grad_index", "volume_sample_i", "volume_sample_index"}
    | {"volume_sample_v", "volume_voxel_count", "volume_world_to_index", "volume_world_to_index_dir"}
    | {"tile_bvh_query_aabb", "tile_bvh_query_ray", "tile_mesh_query_aabb"}
)
