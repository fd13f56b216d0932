"""Warp's geometry as pytrees: `Mesh`, `Bvh`, `HashGrid` and `Volume` own their data as JAX arrays.

Each class is an Equinox module whose arrays are leaves and whose build options are static fields, so it can be
a model's field, traced, batched, differentiated and serialised like any other. It knows two things: which arrays
it hands to the call (`AbstractStructure.operands`, cast to what Warp builds from) and how to make or update its
Warp object from the Warp arrays wrapping those buffers inside the call (`build`, `update`). When to build and how
long a built object lives is `_builds`' concern.
"""

# No `from __future__ import annotations`: Equinox refuses stringified `AbstractVar` annotations.

import abc
import dataclasses
from collections.abc import Iterable
from typing import Any, ClassVar

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import warp as wp
from jaxtyping import Array, ArrayLike, Float, Int

from .._upstream import _warp_types


@dataclasses.dataclass(frozen=True)
class Recipe:
    """How to build one structure inside the call: its class, which arrays it passes, its static options.

    Hashable (a field of the launcher, which is part of the plan). ``arrays`` names the arrays passed, in order.
    """

    kind: type["AbstractStructure"]
    arrays: tuple[str, ...]
    options: tuple[tuple[str, Any], ...]
    # How messages from inside the call name the structure (the module and the parameter it was given for).
    label: str = ""

    def option(self, name: str) -> Any:
        return dict(self.options)[name]


class AbstractStructure(eqx.Module):
    """A Warp structure (mesh, BVH, hash grid, volume) as a pytree owning its data.

    Pass one where a kernel takes the structure's id (a ``wp.uint64`` parameter) of a `jarp.warp.jax_kernel`, or
    where a `jarp.warp.jax_callable`'s function takes the Warp object (annotated ``wp.Mesh``, ``wp.Bvh``,
    ``wp.HashGrid`` or ``wp.Volume``): jarp builds the Warp object inside the call from the arrays, refits the one
    it built last where only the positions moved, and keeps it alive as long as a program can launch it.
    """

    # The Warp class built (wp.Mesh...), and the (field, Warp annotation) of each array it can be built from.
    warp_type: ClassVar[type]
    _array_fields: ClassVar[tuple[tuple[str, Any], ...]]
    # The fields whose gradients Warp's query builtins may drop (`_adjoints`).
    _differentiable: ClassVar[tuple[str, ...]]
    # Whether a built structure can be brought up to date (`update`); one that cannot is kept alone per slot.
    reusable: ClassVar[bool] = True

    def operands(self) -> tuple[tuple[str, Any, Any], ...]:
        """``(field, JAX array, Warp annotation)`` of each array passed to the call, cast to what Warp builds from."""
        out = []
        for name, warp_type in self._array_fields:
            value = getattr(self, name)
            if value is not None:
                out.append((name, self._cast(name, value), warp_type))
        return tuple(out)

    def recipe(self, label: str = "") -> Recipe:
        """The hashable description of how the call builds this structure (``label``: how messages name it)."""
        options = tuple(
            (f.name, getattr(self, f.name)) for f in dataclasses.fields(self) if f.metadata.get("static", False)
        )
        present = tuple(name for name, _ in self._array_fields if getattr(self, name) is not None)
        return Recipe(type(self), present, options, label)

    @classmethod
    def array_fields(cls) -> tuple[str, ...]:
        """The fields of the arrays it can be built from, in the order Warp's constructor takes them."""
        return tuple(name for name, _ in cls._array_fields)

    @classmethod
    def native_settings(cls, recipe: Recipe) -> tuple[str, int, int, bool] | None:
        """How jarp's native handler builds it on the CPU: ``(kind, BVH constructor code, leaf size, winding)``, or
        None where it is built by Warp's Python class only (the default; see `_ffi._structure_launches`)."""
        return None

    @abc.abstractmethod
    def _cast(self, name: str, value: ArrayLike) -> jax.Array:
        """Array ``name`` as Warp builds from it (dtype, shape)."""

    @classmethod
    @abc.abstractmethod
    def build(cls, recipe: Recipe, arrays: dict[str, wp.array], device: wp.Device) -> Any:
        """A new Warp object from the call's arrays (it may keep private copies of them)."""

    @classmethod
    @abc.abstractmethod
    def update(cls, recipe: Recipe, built: Any, arrays: dict[str, wp.array]) -> bool:  # built: what its `build` made
        """Bring ``built`` up to date with this call's arrays in place (refit); False where it must be rebuilt."""


def _float32_rows(value: ArrayLike, name: str, what: str) -> jax.Array:
    value = jnp.asarray(value)
    _one_structure(value, 2, name, what)
    if value.ndim != 2 or value.shape[-1] != 3:
        raise ValueError(f"jarp.warp.{what}: {name} must have shape (n, 3), got {value.shape}.")
    if value.shape[0] == 0:
        raise ValueError(f"jarp.warp.{what}: {name} is empty; Warp builds no structure over nothing.")
    return value.astype(jnp.float32)


def _one_structure(value: jax.Array, ndim: int, name: str, what: str) -> None:
    """Refuse, at the call, a stacked structure (leading batch dims) that no ``jax.vmap`` unstacked."""
    if value.ndim > ndim:
        raise ValueError(
            f"jarp.warp.{what}: {name} has shape {tuple(value.shape)}, a stack of {value.ndim - ndim} batch dim(s) "
            f"over one {what}'s; a call takes one {what}: map the call over the stack with jax.vmap "
            f"(jax.vmap(f)(structure) gives each element its own {what})."
        )


def _shape(value: object) -> tuple[int, ...] | None:
    """A leaf's shape, or None for what has none (a placeholder Equinox or a user put in its place)."""
    shape = getattr(value, "shape", None)
    return None if shape is None else tuple(shape)


def _check_rows(what: str, **arrays: object) -> tuple[int, ...] | None:
    """Check that each array is ``(*batch, n, 3)`` with the same batch and ``n``; return ``(*batch, n)``."""
    found: tuple[int, ...] | None = None
    first = None
    for name, value in arrays.items():
        shape = _shape(value)
        if shape is None:
            continue
        if len(shape) < 2 or shape[-1] != 3:
            raise ValueError(
                f"jarp.warp.{what}: {name} must have shape (n, 3) (or (*batch, n, 3) for a stack of {what}es "
                f"mapped with jax.vmap), got {shape}."
            )
        if found is not None and shape[:-1] != found:
            raise ValueError(
                f"jarp.warp.{what}: {name} has shape {shape} but {first} has {(*found, 3)}; they must have one row "
                "per item, with the same batch dims."
            )
        found, first = shape[:-1], name
    return found


def _check_constructor(value: str | None, name: str, what: str) -> None:
    if value is not None and value not in _CONSTRUCTORS:
        raise ValueError(
            f"jarp.warp.{what}: {name} must be one of {sorted(_CONSTRUCTORS)} or None (Warp's default for the "
            f"device), got {value!r}."
        )


def _check_leaf_size(value: int | None, name: str, what: str) -> None:
    if value is not None and (
        isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= _INT32_MAX
    ):
        raise ValueError(
            f"jarp.warp.{what}: {name} must be a positive int below 2**31 (items per BVH leaf), got {value!r}."
        )


_INT32_MAX = 2**31 - 1  # Warp passes counts and sizes to its native code as C ints


def _grid_dims(dims: object) -> tuple[int, int, int]:
    """A `HashGrid`'s ``dims`` as three positive ints whose product fits Warp's cell count (a C int)."""
    values: tuple[Any, ...] = tuple(dims) if isinstance(dims, (tuple, list)) else (dims,)
    ok = len(values) == 3 and all(
        not isinstance(d, bool) and isinstance(d, (int, np.integer, float)) and float(d).is_integer() and d >= 1
        for d in values
    )
    if not ok or int(np.prod([int(d) for d in values], dtype=object)) > _INT32_MAX:
        raise ValueError(
            f"jarp.warp.HashGrid: dims must be three positive ints (cells per axis) whose product is below 2**31, "
            f"got {dims!r}."
        )
    return (int(values[0]), int(values[1]), int(values[2]))


def _as_array(value: object) -> Any:  # an array where the field is one: its converter
    """Lists and tuples of numbers as arrays (so that their shape and dtype are checked); anything else as it is."""
    return jnp.asarray(value) if isinstance(value, (list, tuple)) else value


# Warp's BVH construction algorithms (``wp.Bvh(constructor=...)``, ``wp.Mesh(bvh_constructor=...)``).
_CONSTRUCTORS = frozenset({"sah", "median", "lbvh"})


def _floats(values: Iterable[float]) -> tuple[float, ...]:
    return tuple(map(float, values))


def _static(default: object = None) -> Any:
    return eqx.field(static=True, default=default)


def _same_shapes(arrays: dict[str, wp.array], kept: dict[str, wp.array]) -> bool:
    return all(arrays[k].shape == kept[k].shape for k in kept)


# One annotation object per index dtype: the launcher compares by value, and Warp's array annotations by identity.
_INDEX_ARRAYS = {
    np.dtype(np.int32): wp.array(dtype=wp.int32),
    np.dtype(np.int64): wp.array(dtype=wp.int64),
    np.dtype(np.uint32): wp.array(dtype=wp.uint32),
    np.dtype(np.uint64): wp.array(dtype=wp.uint64),
}


@wp.kernel
def _narrow_indices(
    src: wp.array(dtype=Any),  # pyright: ignore[reportInvalidTypeForm]  # Warp kernel annotations
    count: Any,
    dst: wp.array(dtype=wp.int32),  # pyright: ignore[reportInvalidTypeForm]
    first_bad: wp.array(dtype=wp.int64),  # pyright: ignore[reportInvalidTypeForm]
):
    # Each index in [0, count) is copied to Warp's int32; the position of the first one out of range is recorded
    # and a 0 stored in its place, so that nothing reads past the points even before the call raises.
    i = wp.tid()
    v = src[i]
    if v < type(count)(0) or v >= count:  # pyright: ignore[reportOperatorIssue]  # Warp code: v is an int
        wp.atomic_min(first_bad, 0, wp.int64(i))  # pyright: ignore[reportArgumentType]  # Warp code: i is an int
        dst[i] = 0
    else:
        dst[i] = wp.int32(v)  # pyright: ignore[reportArgumentType]  # Warp code: v is a scalar


for _dtype in (wp.int32, wp.int64, wp.uint32, wp.uint64):
    wp.overload(_narrow_indices, {"src": wp.array(dtype=_dtype), "count": _dtype})


def _checked_indices(src: wp.array, num_points: int, into: wp.array | None, label: str) -> wp.array:
    """The triangles as Warp's int32 indices, each checked to lie in ``[0, num_points)``.

    Args:
        src: the call's index buffer (flat int32, int64, uint32 or uint64).
        num_points: the mesh's point count.
        into: where to write them (a built mesh's own indices), or None for a new array.
        label: how the error names the mesh.

    Raises:
        IndexError: an index out of range, naming the first one (on a GPU, reading the verdict waits for the stream).
    """
    # (Warp's stub types dtype as a Python scalar type)
    dst = wp.empty(src.shape[0], dtype=wp.int32, device=src.device) if into is None else into  # pyright: ignore[reportArgumentType]
    first_bad = wp.full(1, src.shape[0], dtype=wp.int64, device=src.device)
    count = src.dtype(num_points)
    wp.launch(_narrow_indices, dim=src.shape[0], inputs=[src, count, dst, first_bad], device=src.device)
    bad = int(first_bad.numpy()[0])
    if bad < src.shape[0]:
        value = int(src[bad : bad + 1].numpy()[0])
        raise IndexError(
            f"{label or 'jarp.warp.Mesh'}: triangle {bad // 3} refers to vertex {value} (indices[{bad // 3}, "
            f"{bad % 3}]), but the mesh has {num_points} points (valid indices: 0 to {num_points - 1}); every vertex "
            "index must name one of the mesh's points."
        )
    return dst


class _BuiltMesh:
    """A ``wp.Mesh`` with the private copy of the indices it was built from (XLA's buffers last one call)."""

    def __init__(self, mesh: wp.Mesh, indices: wp.array, velocities: wp.array) -> None:
        self.mesh = mesh
        self.indices = indices
        self.velocities = velocities  # (zeros where the Mesh has none: kept alive with it)
        self.id = mesh.id


class Mesh(AbstractStructure):
    """A triangle mesh (``wp.Mesh``) as a pytree: closest-point, ray and box queries against its triangles.

    Warp meshes are single precision: ``points`` (and ``velocities``) are rounded to float32 for the call; the
    gradient with respect to them comes back in their own dtype.

    Attributes:
        points: vertex positions, shape ``(num_points, 3)``.
        indices: triangles as vertex indices, shape ``(num_faces, 3)`` (or flat ``(3 * num_faces,)``).
        velocities: optional vertex velocities, shape ``(num_points, 3)`` (``wp.mesh_eval_velocity``).
        support_winding_number: build what ``wp.mesh_query_point_sign_winding_number`` needs.
        bvh_constructor: Warp's BVH construction algorithm (``"sah"``, ``"median"``, ``"lbvh"``; None: Warp's
            default for the device).
        bvh_leaf_size: triangles per BVH leaf (None: Warp's default).

    Example:
        ```python
        @wp.kernel
        def distance(mesh: wp.uint64, x: wp.array(dtype=wp.vec3), d: wp.array(dtype=float)):
            i = wp.tid()
            q = wp.mesh_query_point_no_sign(mesh, x[i], 1.0e6)
            m = wp.mesh_get(mesh)
            f = q.face
            p = q.u * m.points[m.indices[3 * f]] + q.v * m.points[m.indices[3 * f + 1]] + (
                1.0 - q.u - q.v
            ) * m.points[m.indices[3 * f + 2]]
            d[i] = wp.length(p - x[i])

        mesh = jarp.warp.Mesh(points=vertices, indices=faces)
        (d,) = jarp.warp.jax_kernel(distance)(mesh, queries)
        ```
    """

    warp_type: ClassVar[type] = wp.Mesh
    _array_fields: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("points", wp.array(dtype=wp.vec3)),
        ("indices", wp.array(dtype=wp.int32)),
        ("velocities", wp.array(dtype=wp.vec3)),
    )
    _differentiable: ClassVar[tuple[str, ...]] = ("points", "velocities")

    points: Float[Array, "num_points 3"] = eqx.field(converter=_as_array)
    indices: Int[Array, "num_faces 3"] | Int[Array, " num_indices"] = eqx.field(converter=_as_array)
    velocities: Float[Array, "num_points 3"] | None = eqx.field(default=None, converter=_as_array)
    support_winding_number: bool = _static(False)
    bvh_constructor: str | None = _static(None)
    bvh_leaf_size: int | None = _static(None)

    def __check_init__(self) -> None:
        rows = _check_rows("Mesh", points=self.points, velocities=self.velocities)
        batch = None if rows is None else rows[:-1]
        shape = _shape(self.indices)
        dtype = getattr(self.indices, "dtype", None)
        if dtype is not None and not jnp.issubdtype(dtype, jnp.integer):
            raise TypeError(f"jarp.warp.Mesh: indices must be integers (vertex indices), got {dtype}.")
        if shape is not None:
            flat = len(shape) == (1 if batch is None else len(batch) + 1)
            if flat and shape[-1] % 3:
                raise ValueError(
                    f"jarp.warp.Mesh: flat indices must have three per triangle, got {shape[-1]} (not a multiple of "
                    "3); pass them as (num_faces, 3)."
                )
            if not flat and (shape[-1] != 3 or (batch is not None and shape[:-2] != batch) or len(shape) < 2):
                want = "(num_faces, 3)" if not batch else f"{(*batch, 'num_faces', 3)}"
                raise ValueError(f"jarp.warp.Mesh: indices must have shape {want} like the points, got {shape}.")
        for name in ("points", "indices"):
            if getattr(getattr(self, name), "size", 1) == 0:
                # Warp's queries crash on an empty mesh
                raise ValueError(f"jarp.warp.Mesh: {name} is empty; a mesh needs at least one triangle.")
        _check_constructor(self.bvh_constructor, "bvh_constructor", "Mesh")
        _check_leaf_size(self.bvh_leaf_size, "bvh_leaf_size", "Mesh")

    def operands(self) -> tuple[tuple[str, Any, Any], ...]:
        out = list(super().operands())
        k = next(k for k, (name, _, _) in enumerate(out) if name == "indices")
        indices = out[k][1]
        # int64 indices (x64's default) and unsigned ones go to the call as they are: the call checks them against
        # the point count before it narrows them to Warp's int32, so 2**31 is refused rather than wrapped
        out[k] = ("indices", indices, _INDEX_ARRAYS[np.dtype(indices.dtype)])
        return tuple(out)

    def _cast(self, name: str, value: ArrayLike) -> jax.Array:
        if name == "indices":
            # checked again at the call: a tree_map, tree_at or deserialisation builds no new Mesh
            value = jnp.asarray(value)
            if not jnp.issubdtype(value.dtype, jnp.integer):
                raise TypeError(f"jarp.warp.Mesh: indices must be integers (vertex indices), got {value.dtype}.")
            _one_structure(value, 2 if value.ndim >= 2 and value.shape[-1] == 3 else 1, "indices", "Mesh")
            if value.size % 3:
                raise ValueError(f"jarp.warp.Mesh: indices must come three per triangle, got {value.size} in all.")
            # 32- and 64-bit indices go as they are, checked in their own type before they are narrowed to Warp's
            # int32 (2**31 and above are refused, not wrapped); smaller ones are widened
            keep = np.dtype(value.dtype) in _INDEX_ARRAYS
            return value.reshape(-1) if keep else value.reshape(-1).astype(jnp.int32)
        return _float32_rows(value, name, "Mesh")

    @classmethod
    def native_settings(cls, recipe: Recipe) -> tuple[str, int, int, bool] | None:
        settings = _warp_types.host_bvh_settings(
            recipe.option("bvh_constructor"), recipe.option("bvh_leaf_size"), mesh=True
        )
        if settings is None:
            return None
        return "mesh", settings[0], settings[1], bool(recipe.option("support_winding_number"))

    @classmethod
    def build(cls, recipe: Recipe, arrays: dict[str, wp.array], device: wp.Device) -> _BuiltMesh:
        points = arrays["points"]
        indices = _checked_indices(arrays["indices"], points.shape[0], None, recipe.label)
        # Without velocities Warp's mesh holds a null array, which a kernel reading wp.mesh_get(id).velocities[i]
        # would dereference; zeros read as Warp's wp.mesh_eval_velocity answers for such a mesh
        velocities = arrays.get("velocities")
        if velocities is None:
            velocities = wp.zeros(points.shape[0], dtype=wp.vec3, device=points.device)
        mesh = wp.Mesh(
            points=arrays["points"],
            indices=indices,
            velocities=velocities,
            support_winding_number=recipe.option("support_winding_number"),
            bvh_constructor=recipe.option("bvh_constructor"),
            bvh_leaf_size=recipe.option("bvh_leaf_size"),
        )
        return _BuiltMesh(mesh, indices, velocities)

    @classmethod
    def update(cls, recipe: Recipe, built: _BuiltMesh, arrays: dict[str, wp.array]) -> bool:
        if arrays["points"].shape != built.mesh.points.shape or arrays["indices"].shape != built.indices.shape:
            return False
        if built.indices.device.is_cpu:  # pyright: ignore[reportOptionalMemberAccess]  # a built mesh's arrays have one
            # a changed topology gets a new tree (cheap to see on the host), built from checked indices
            if not np.array_equal(arrays["indices"].numpy(), built.indices.numpy()):
                return False
        else:
            # A refit after copying the new triangles (checked on the way) is exact all the same (it recomputes every
            # bound from the current triangles), only the tree may fit a changed topology less tightly.
            _checked_indices(arrays["indices"], arrays["points"].shape[0], built.indices, recipe.label)
        # Warp's setter points the mesh at this call's buffer (with its gradient, in the taped replay) and refits.
        built.mesh.points = arrays["points"]
        if "velocities" in arrays:
            built.mesh.velocities = arrays["velocities"]
        return True


class _BuiltBvh:
    """A ``wp.Bvh`` with the private bounds it reads when refitted."""

    def __init__(self, bvh: wp.Bvh, lowers: wp.array, uppers: wp.array) -> None:
        self.bvh = bvh
        self.lowers = lowers
        self.uppers = uppers
        self.id = bvh.id


class Bvh(AbstractStructure):
    """A bounding volume hierarchy over boxes (``wp.Bvh``) as a pytree: box and ray queries.

    Warp's BVH queries return item indices, which do not change under small moves of the boxes: the gradient with
    respect to ``lowers`` and ``uppers`` through a query is zero (exactly, almost everywhere).

    Attributes:
        lowers: lower corners of the boxes, shape ``(num_items, 3)`` (rounded to float32).
        uppers: upper corners, shape ``(num_items, 3)``.
        constructor: Warp's construction algorithm (``"sah"``, ``"median"``, ``"lbvh"``; None: Warp's default).
        leaf_size: items per leaf.

    Example:
        ```python
        bvh = jarp.warp.Bvh(lowers=centres - r, uppers=centres + r)
        (hits,) = jarp.warp.jax_kernel(count_overlaps)(bvh, query_lowers, query_uppers)
        ```
    """

    warp_type: ClassVar[type] = wp.Bvh
    _array_fields: ClassVar[tuple[tuple[str, Any], ...]] = (
        ("lowers", wp.array(dtype=wp.vec3)),
        ("uppers", wp.array(dtype=wp.vec3)),
    )
    _differentiable: ClassVar[tuple[str, ...]] = ()

    lowers: Float[Array, "num_items 3"] = eqx.field(converter=_as_array)
    uppers: Float[Array, "num_items 3"] = eqx.field(converter=_as_array)
    constructor: str | None = _static(None)
    leaf_size: int = _static(1)

    def __check_init__(self) -> None:
        _check_rows("Bvh", lowers=self.lowers, uppers=self.uppers)
        _check_constructor(self.constructor, "constructor", "Bvh")
        _check_leaf_size(self.leaf_size, "leaf_size", "Bvh")

    def _cast(self, name: str, value: ArrayLike) -> jax.Array:
        return _float32_rows(value, name, "Bvh")

    @classmethod
    def native_settings(cls, recipe: Recipe) -> tuple[str, int, int, bool] | None:
        settings = _warp_types.host_bvh_settings(recipe.option("constructor"), recipe.option("leaf_size"), mesh=False)
        return None if settings is None else ("bvh", settings[0], settings[1], False)

    @classmethod
    def build(cls, recipe: Recipe, arrays: dict[str, wp.array], device: wp.Device) -> _BuiltBvh:
        lowers, uppers = wp.clone(arrays["lowers"]), wp.clone(arrays["uppers"])
        bvh = wp.Bvh(lowers, uppers, constructor=recipe.option("constructor"), leaf_size=recipe.option("leaf_size"))
        return _BuiltBvh(bvh, lowers, uppers)

    @classmethod
    def update(cls, recipe: Recipe, built: _BuiltBvh, arrays: dict[str, wp.array]) -> bool:
        if arrays["lowers"].shape != built.lowers.shape:
            return False
        wp.copy(built.lowers, arrays["lowers"])
        wp.copy(built.uppers, arrays["uppers"])
        built.bvh.refit()
        return True


# One annotation object per dtype: the launcher compares by value, and Warp's array annotations by identity.
_GRID_ARRAYS = {
    np.dtype(np.float16): wp.array(dtype=wp.vec3h),
    np.dtype(np.float32): wp.array(dtype=wp.vec3f),
    np.dtype(np.float64): wp.array(dtype=wp.vec3d),
}


class HashGrid(AbstractStructure):
    """A hash grid over points (``wp.HashGrid``) as a pytree: neighbour queries (``wp.hash_grid_query``).

    The grid is rebuilt from the points at every call (Warp's grid has no refit; a build sorts the points). A
    query yields point indices, which do not change under small moves of the points: the gradient with respect to
    the grid's ``points`` through a query is zero (exactly, almost everywhere); pass the same points to the kernel
    as an array to differentiate what it computes from them.

    Attributes:
        points: the points, shape ``(num_points, 3)``, float16, float32 or float64 (others are cast to float32).
            Given to a `jarp.warp.jax_kernel`, the grid is built in the precision the kernel queries it in (Warp
            reads a grid's points in the query point's precision).
        radius: the cell width (static); best matched to the query radius.
        dims: cells per axis (static), as ``wp.HashGrid(dim_x, dim_y, dim_z)``.

    Example:
        ```python
        grid = jarp.warp.HashGrid(points=x, radius=0.1)
        (counts,) = jarp.warp.jax_kernel(count_neighbours)(grid, x, 0.1)
        ```
    """

    warp_type: ClassVar[type] = wp.HashGrid
    _array_fields: ClassVar[tuple[tuple[str, Any], ...]] = (("points", None),)
    _differentiable: ClassVar[tuple[str, ...]] = ()

    points: Float[Array, "num_points 3"] = eqx.field(converter=_as_array)
    radius: float = eqx.field(static=True, converter=float)
    dims: tuple[int, int, int] = eqx.field(static=True, default=(128, 128, 128), converter=_grid_dims)

    def __check_init__(self) -> None:
        _check_rows("HashGrid", points=self.points)
        if not self.radius > 0:
            raise ValueError(f"jarp.warp.HashGrid: radius must be positive, got {self.radius}.")

    def operands(self) -> tuple[tuple[str, Any, Any], ...]:
        points = jnp.asarray(self.points)
        if np.dtype(points.dtype) not in _GRID_ARRAYS:
            points = points.astype(jnp.float32)
        points = _float32_rows(points, "points", "HashGrid").astype(points.dtype)
        return (("points", points, _GRID_ARRAYS[np.dtype(points.dtype)]),)

    def _cast(self, name: str, value: ArrayLike) -> jax.Array:
        raise AssertionError("HashGrid.operands casts its points itself")

    @classmethod
    def build(cls, recipe: Recipe, arrays: dict[str, wp.array], device: wp.Device) -> wp.HashGrid:
        points = arrays["points"]
        grid = wp.HashGrid(*recipe.option("dims"), device=device, dtype=_warp_types.scalar_type(points.dtype))
        grid.build(points, recipe.option("radius"))
        return grid

    @classmethod
    def update(cls, recipe: Recipe, built: wp.HashGrid, arrays: dict[str, wp.array]) -> bool:
        points = arrays["points"]
        if _warp_types.scalar_type(points.dtype) is not built.dtype:
            return False
        built.build(points, recipe.option("radius"))
        return True


class Volume(AbstractStructure):
    """A sparse volume (``wp.Volume``, NanoVDB) built from a dense grid of values, as a pytree.

    The volume is built from ``values`` at every call, on the host (Warp builds volumes from NumPy): on a GPU
    the values are copied to the host first, which waits for the stream. Warp's volume samplers give no gradient
    with respect to the voxel values, so differentiating through ``values`` raises.

    Attributes:
        values: voxel values, shape ``(nx, ny, nz)`` (rounded to float32).
        voxel_size: the edge of a voxel in world units (static).
        origin: the world position of voxel ``(0, 0, 0)`` (static).
        background: the value outside the grid (static).

    Example:
        ```python
        sdf = jarp.warp.Volume(values=grid, voxel_size=0.05)
        (phi,) = jarp.warp.jax_kernel(sample)(sdf, points)
        ```
    """

    warp_type: ClassVar[type] = wp.Volume
    _array_fields: ClassVar[tuple[tuple[str, Any], ...]] = (("values", wp.array3d(dtype=wp.float32)),)
    _differentiable: ClassVar[tuple[str, ...]] = ("values",)
    reusable: ClassVar[bool] = False

    values: Float[Array, "nx ny nz"] = eqx.field(converter=_as_array)
    voxel_size: float = eqx.field(static=True, default=1.0, converter=float)
    # checked to hold three finite numbers in __check_init__ (the converter keeps any count, for that message)
    origin: tuple[float, ...] = eqx.field(static=True, default=(0.0, 0.0, 0.0), converter=_floats)
    background: float = eqx.field(static=True, default=0.0, converter=float)

    def __check_init__(self) -> None:
        shape = _shape(self.values)
        if shape is not None and len(shape) < 3:
            raise ValueError(f"jarp.warp.Volume: values must have shape (nx, ny, nz), got {shape}.")
        if not (self.voxel_size > 0 and np.isfinite(self.voxel_size)):
            raise ValueError(f"jarp.warp.Volume: voxel_size must be positive and finite, got {self.voxel_size}.")
        if len(self.origin) != 3 or not all(np.isfinite(self.origin)):
            raise ValueError(f"jarp.warp.Volume: origin must be three finite numbers (x, y, z), got {self.origin}.")

    def _cast(self, name: str, value: ArrayLike) -> jax.Array:
        value = jnp.asarray(value)
        _one_structure(value, 3, "values", "Volume")
        if value.ndim != 3 or value.size == 0:
            raise ValueError(f"jarp.warp.Volume: values must have a non-empty shape (nx, ny, nz), got {value.shape}.")
        return value.astype(jnp.float32)

    @classmethod
    def build(cls, recipe: Recipe, arrays: dict[str, wp.array], device: wp.Device) -> wp.Volume:
        return wp.Volume.load_from_numpy(
            arrays["values"].numpy(),
            min_world=recipe.option("origin"),
            voxel_size=recipe.option("voxel_size"),
            bg_value=recipe.option("background"),
            device=device,
        )

    @classmethod
    def update(cls, recipe: Recipe, built: wp.Volume, arrays: dict[str, wp.array]) -> bool:
        return False  # values are baked into the tree: a new volume each call
