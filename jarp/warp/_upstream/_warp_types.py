"""Questions about Warp's types: array annotation kinds, vector and scalar types, structs and their ctypes layout, and
the spatial structures (mesh, BVH, hash grid, volume).

Part of the upstream stage (its ``__init__`` lists the modules): `check_internals`, run by
`tests/warp/compat/test_upstream_internals.py`, fails loudly when an internal this module reads changes shape.
"""

# pyright: reportAttributeAccessIssue=false
# (a module where jarp reads Warp's private internals, through ``wp._src`` and private attributes, which Warp's type
# stubs leave out; the checker still checks everything else here)

from __future__ import annotations

import ctypes
import inspect
from typing import Any, TypeGuard

import warp as wp
from warp._src.codegen import Struct as _Struct
from warp._src.types import array_t as ArrayStruct
from warp._src.types import array_types as _ARRAY_CLASSES
from warp._src.types import concrete_array_type as _concrete_array_type

# Warp's array classes (``warp._src.types.array_types``), by name: only ``"array"`` is an ``array_t`` argument.
ARRAY_KINDS = ("array", "indexedarray", "fabricarray", "indexedfabricarray", "fixedarray")


def array_kind(warp_type: object) -> str | None:
    """The name of the Warp array class an array annotation (or array) belongs to; None if it is no array.

    ``wp.types.is_array`` is true for every one of Warp's array classes, whose kernel arguments have
    different layouts: ``"array"`` (``array_t``), ``"indexedarray"`` (``indexedarray_t``: an ``array_t``
    and one index array per dim), ``"fabricarray"`` / ``"indexedfabricarray"`` (Omniverse Fabric
    buckets), ``"fixedarray"`` (a stack array local to Warp code, never a parameter). Annotations
    (``wp.indexedarray[float]``), annotation instances (``wp.indexedarray(dtype=float)``) and
    subclasses all resolve to their family.

    Example:
        >>> import warp as wp
        >>> array_kind(wp.indexedarray(dtype=float)), array_kind(wp.array2d[float]), array_kind(wp.float32)
        ('indexedarray', 'array', None)
    """
    if not wp.types.is_array(warp_type):
        return None
    return _concrete_array_type(warp_type).__name__


def vector_shape(dtype: type) -> tuple[int, ...]:
    """The shape of a Warp vector or matrix type: ``(3,)`` for ``wp.vec3``, ``(3, 3)`` for ``wp.mat33``."""
    return tuple(int(d) for d in dtype._shape_)


def scalar_type(dtype: type) -> Any:
    """The scalar type of a Warp vector or matrix type: ``wp.float64`` for ``wp.vec3d``."""
    return dtype._wp_scalar_type_


def is_struct_type(warp_type: object) -> TypeGuard[_Struct]:
    """Whether ``warp_type`` is a Warp struct type (what ``@wp.struct`` returns)."""
    return isinstance(warp_type, _Struct)


def struct_fields(struct_type: _Struct) -> tuple[tuple[str, Any], ...]:
    """Return ``(name, warp_type)`` for each field of a Warp struct type, in declaration (memory) order."""
    return tuple((name, var.type) for name, var in struct_type.vars.items())


def struct_name(struct_type: _Struct) -> str:
    """A Warp struct type's short name: its class's qualified name (``Mesh``, ``Material[float64]``)."""
    return struct_type.cls.__qualname__


def struct_ctype(struct_type: _Struct) -> type[ctypes.Structure]:
    """The ctypes layout Warp passes a struct type by value in (nested structs are inlined)."""
    return struct_type.ctype


def struct_instance_type(value: object) -> _Struct | None:
    """The Warp struct type of a struct instance, or None if ``value`` is not one."""
    if not wp.types.is_struct(value):
        return None
    return value._cls


def struct_instance_ctype(value: object) -> ctypes.Structure:
    """The ctypes struct a Warp struct instance passes to a kernel (shared with the instance, not a copy)."""
    return value.__ctype__()


# Warp structures that kernels query by id (a ``wp.uint64``): their native object lives as long as the Python one.
STRUCTURE_TYPES = ("Mesh", "Bvh", "HashGrid", "Volume", "MarchingCubes")


def is_structure(value: object) -> bool:
    """Whether ``value`` is a Warp structure a kernel takes by id (``wp.Mesh``, ``wp.Bvh``, ``wp.HashGrid``...)."""
    cls = type(value)
    return cls.__name__ in STRUCTURE_TYPES and (cls.__module__ or "").startswith("warp") and hasattr(value, "id")


def is_structure_type(warp_type: object) -> bool:
    """Whether an annotation is the class of a Warp structure jarp builds (``wp.Mesh``, ``wp.Bvh``...)."""
    return isinstance(warp_type, type) and any(warp_type is getattr(wp, n, None) for n in STRUCTURE_TYPES[:4])


# Warp's host functions for meshes and BVHs, in the order jarp's native handler takes them
# (``jarp_configure_structures`` in jarp/warp/_ffi/_native/_handler.cpp), with the parameter counts it calls them
# with: create a mesh from three array_t values and six ints; set its points or velocities (id, array_t); destroy
# (id); create a BVH from two bound pointers and four more; refit and destroy a BVH (id).
HOST_STRUCTURE_FUNCTIONS = (
    ("wp_mesh_create_host", 9),
    ("wp_mesh_set_points_host", 2),
    ("wp_mesh_set_velocities_host", 2),
    ("wp_mesh_destroy_host", 1),
    ("wp_bvh_create_host", 6),
    ("wp_bvh_refit_host", 1),
    ("wp_bvh_destroy_host", 1),
)


def host_structure_functions() -> tuple[int, ...]:
    """The addresses of Warp's host mesh and BVH functions (`HOST_STRUCTURE_FUNCTIONS`), for native callers."""
    core = wp._src.context.runtime.core
    return tuple(ctypes.cast(getattr(core, name), ctypes.c_void_p).value or 0 for name, _ in HOST_STRUCTURE_FUNCTIONS)


def host_bvh_settings(constructor: str | None, leaf_size: int | None, *, mesh: bool) -> tuple[int, int] | None:
    """The BVH constructor code and leaf size Warp's ``wp.Mesh``/``wp.Bvh`` pass to its host build for these options.

    None where Warp's Python class does more than pass them on (an ``"lbvh"`` tree on the CPU falls back to SAH with
    a warning; ``"cubql"`` has rules of its own): such a structure is built by Warp's class, not natively.

    Args:
        constructor: the ``bvh_constructor``/``constructor`` option (None: the CPU default, SAH).
        leaf_size: the leaf size option (None: the class's default: 4 for a mesh).
        mesh: whether the tree is a mesh's.
    """
    name = "sah" if constructor is None else constructor
    if name not in ("sah", "median"):
        return None
    if leaf_size is None:
        leaf_size = 4 if mesh else 1
    return int(wp._src.types.BvhConstructor.from_str(name)), int(leaf_size)


def check_internals() -> None:
    """Raise `AssertionError` if a Warp internal this module relies on has changed shape."""
    names = [f[0] for f in ArrayStruct._fields_]
    assert names[:2] == ["data", "grad"], f"warp array_t fields changed: {names}"
    assert ArrayStruct.data.offset == 0, "warp array_t.data is no longer the first field"
    probe = wp.struct(
        type("_JarpProbe", (), {"__annotations__": {"a": wp.array(dtype=float), "k": float}}), module="unique"
    )
    assert is_struct_type(probe), "wp.struct no longer returns a warp._src.codegen.Struct"
    assert [n for n, _ in struct_fields(probe)] == ["a", "k"], "Struct.vars changed"
    assert [f[0] for f in struct_ctype(probe)._fields_] == ["a", "k"], "Struct.ctype changed"
    assert struct_ctype(probe)._fields_[0][1] is ArrayStruct, "struct array fields are no longer array_t"
    assert struct_instance_type(probe()) is probe, "StructInstance._cls changed"
    assert struct_name(probe) == "_JarpProbe", "Struct.cls changed"
    # jarp passes the "array" kind only and refuses the others by name: a new array class must be looked at
    assert tuple(cls.__name__ for cls in _ARRAY_CLASSES) == ARRAY_KINDS, (
        f"Warp's array classes changed: {_ARRAY_CLASSES}"
    )
    for annotation, kind in (
        (wp.array(dtype=float), "array"),
        (wp.array2d[float], "array"),
        (wp.indexedarray(dtype=float), "indexedarray"),
        (wp.indexedarray[float], "indexedarray"),
        (wp.fabricarray(dtype=float), "fabricarray"),  # pyright: ignore[reportArgumentType]  # Warp's stub: dtype as a value
        (wp.indexedfabricarray[float], "indexedfabricarray"),
        (wp.fixedarray(dtype=float, shape=3), "fixedarray"),
    ):
        assert array_kind(annotation) == kind, f"array_kind({annotation!r}) is no longer {kind!r}"
    for name in STRUCTURE_TYPES:
        assert isinstance(getattr(wp, name, None), type), f"wp.{name} is gone (is_structure)"
    # jarp's native handler builds meshes and BVHs through these host functions (host_structure_functions)
    core = wp._src.context.runtime.core
    for name, count in HOST_STRUCTURE_FUNCTIONS:
        assert len(getattr(core, name).argtypes) == count, f"{name}'s parameters changed"
    assert core.wp_mesh_create_host.argtypes[0] is ArrayStruct, "wp_mesh_create_host no longer takes array_t values"
    assert [f[0] for f in ArrayStruct._fields_] == ["data", "grad", "shape", "strides", "ndim", "flags"], (
        "warp array_t fields changed (the handler's WarpArray mirrors them)"
    )
    assert ctypes.sizeof(ArrayStruct) == 56, "warp array_t changed size (the handler's WarpArray mirrors it)"
    assert (
        int(wp._src.types.BvhConstructor.from_str("sah")),
        int(wp._src.types.BvhConstructor.from_str("median")),
    ) == (
        0,
        1,
    ), "Warp's BVH constructor codes changed"
    defaults = inspect.signature(wp.Mesh.__init__).parameters
    assert defaults["bvh_leaf_size"].default is None, "wp.Mesh's bvh_leaf_size default changed (host_bvh_settings)"
    assert inspect.signature(wp.Bvh.__init__).parameters["leaf_size"].default == 1, "wp.Bvh's leaf_size default changed"
