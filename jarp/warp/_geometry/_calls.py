"""A module call with Warp structures: the structures' arrays become operands, the structures are built inside.

A jarp structure (`Mesh`, `Bvh`, `HashGrid`, `Volume`) given to a `JaxKernel` (where the kernel takes the id) or
to a `JaxCallable` (where the function takes the Warp object) is replaced by its arrays, and the call goes to a
`JaxCallable` whose function (a launcher, compared by value) builds or refits each structure from those arrays
inside the call (`_builds.obtain`) and then launches the kernel with the ids, or calls the function with the
objects. That callable runs on jarp's Python path, one call per ``vmap`` slice (each slice its own structure),
and is differentiated like any callable: the reverse pass replays the launcher under a ``wp.Tape`` with each
array's gradient buffer attached, so a kernel reading ``wp.mesh_get(id).points`` accumulates the points'
gradient. Where the kernel reads the structure through a builtin whose adjoint drops that gradient
(`_adjoints`), differentiating with respect to the arrays raises instead of returning a zero.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import warp as wp

from .._ffi._callable_executor import plain_taped_run
from .._ffi._structure_launches import NativeLaunch, StructureOperands
from .._plan._analysis import _builtins, _writes
from .._plan._arg_spec import describe_type
from .._plan._values import Plan
from ._adjoints import Drop
from ._builds import obtain
from ._replays import taped_run
from ._structures import AbstractStructure, HashGrid, Recipe

if TYPE_CHECKING:
    from .._plan._arg_spec import ArgSpec
    from .._plan._values import Buffer


def is_structure(value: object) -> bool:
    """Whether ``value`` is a jarp structure (`jarp.warp.Mesh`...)."""
    return isinstance(value, AbstractStructure)


def has_structures(args: tuple[Any, ...]) -> bool:
    """Whether any argument is a jarp structure."""
    return any(isinstance(a, AbstractStructure) for a in args)


class Launcher(eqx.Module):
    """The function of the inner callable: builds the structures from their arrays, then runs the target.

    ``groups`` has one entry per parameter of the target: None for a parameter passed through, else the slot and
    recipe of a structure whose arrays take its place. ``params`` are the callable's (expanded) parameters.
    """

    target: Any = eqx.field(static=True)
    groups: tuple[tuple[int, Recipe] | None, ...] = eqx.field(static=True)
    params: tuple[tuple[str, Any], ...] = eqx.field(static=True)
    launch: tuple[tuple[int, ...], int, int | None] | None = eqx.field(static=True, default=None)
    # The checked plan of the kernel's launch, each structure's id a static placeholder: what the native handler
    # launches where it builds the structures itself (`jarp_native_launch`); None for a function.
    plan: Plan | None = eqx.field(static=True, default=None)

    @property
    def __signature__(self) -> inspect.Signature:
        kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
        return inspect.Signature([inspect.Parameter(n, kind, annotation=t) for n, t in self.params])

    @property
    def jarp_label(self) -> str:
        """How messages and plan listings name the call: the module the user called (`_callable.callable_name`)."""
        if self.launch is not None:
            return f"jax_kernel({self.target.key}) with Warp structures"
        name = getattr(self.target, "__qualname__", None) or type(self.target).__qualname__
        return f"jax_callable({name}) with Warp structures"

    @property
    def jarp_factory(self) -> str:
        """The factory of the module the user called, for messages (`_jax._primitive.forward_mode_error`)."""
        return "jax_kernel()" if self.launch is not None else "jax_callable()"

    # A call given structures takes no jvp=/vjp= rules (`_module._base.AbstractWarpModule.__call__` refuses them).
    jarp_takes_rules = False

    def jarp_taped_run(self, func: Callable[..., Any], args: list[Any], tape: wp.Tape, name: str) -> object:
        """The taped run of the reverse pass (`_ffi._callable_executor.TapedRun`): a kernel's structures live in the
        call's store and its dropped gradients were refused while tracing (`guard_gradients`), so it runs plainly; a
        function's kernels are seen only when they run, and it may build structures of its own (`_replays`)."""
        if self.launch is not None:
            return plain_taped_run(func, args, tape, name)
        return taped_run(func, args, tape, name)

    def jarp_native_launch(self) -> NativeLaunch | None:
        """The call as the native handler runs it on the CPU (`_ffi._structure_launches`): the kernel's plan and the
        structures to build before it; None where the call stays on the Python path (a function, or a structure
        Warp's classes build only: a hash grid, a volume, a tree with Warp's special constructors)."""
        if self.launch is None or self.plan is None:
            return None
        plan = self.plan
        dims, _, block_dim = self.launch
        if tuple(plan.launch_dims) != tuple(dims) or plan.block_dim != block_dim:
            return None
        if plan.target is not self.target:
            # the variant reading the vertices (for the reverse pass) is what the Python path launches forward too:
            # launch the same code, with verdicts that keep the launch whole on the calling thread
            plan = dataclasses.replace(
                plan,
                target=self.target,
                code_hash=_writes.code_hash(self.target),
                race_free=False,
                private=(),
                shares_cpu_state=True,
            )
        structures = []
        for i, group in enumerate(self.groups):
            if group is None:
                continue
            recipe = group[1]
            settings = recipe.kind.native_settings(recipe)
            if settings is None:
                return None
            kind, constructor, leaf_size, winding = settings
            name = plan.params[i].spec.name
            arrays = tuple(operand_name(name, f) if f in recipe.arrays else None for f in recipe.kind.array_fields())
            structures.append(StructureOperands(name, kind, arrays, winding, constructor, leaf_size))
        return NativeLaunch(plan, tuple(structures))

    def __call__(self, *args: Any) -> None:  # Warp arrays and scalars, in the launch's order
        values: list[Any] = []
        rest = iter(args)
        for group in self.groups:
            if group is None:
                values.append(next(rest))
                continue
            slot, recipe = group
            built = obtain(recipe, slot, {name: next(rest) for name in recipe.arrays})
            values.append(built.id if self.launch is not None else _warp_object(built))
        values.extend(rest)
        if self.launch is None:
            self.target(*values)
            return
        dims, num_inputs, block_dim = self.launch
        wp.launch(self.target, dim=dims, inputs=values[:num_inputs], outputs=values[num_inputs:], block_dim=block_dim)


def launch(
    make_callable: Callable[..., Callable[..., tuple[jax.Array, ...]]],
    target: wp.Kernel | Callable[..., object],
    params: tuple[tuple[str, Any], ...],
    args: tuple[Any, ...],
    what: str,
    *,
    launch: tuple[tuple[int, ...], int, int | None] | None,
    drops: tuple[Drop, ...] | None,
    plan: Plan | None = None,
    **options: object,
) -> tuple[jax.Array, ...]:
    """Run a module call given structures: the structures' arrays become operands of a callable whose function (a
    `Launcher`) builds them inside the call and runs the target. What both module kinds share, after each has
    resolved its target and checked where the structures go (`check_places`; a kernel also bound and checked its
    launch).

    Args:
        make_callable: makes the inner callable from the launcher and ``options`` (`_callable.structure_callable`).
        target: the kernel overload (or variant) or the function.
        params: the target's parameters ``(name, Warp type)``, inputs first.
        args: the call's arguments, one per input parameter.
        what: the module, for messages.
        launch: a kernel's ``(launch dims, number of inputs, block dim)``; None for a function.
        drops: where Warp's adjoint drops a structure array's gradient, when the module is differentiated
            (`_adjoints.dropped`, or `CALLABLE_DROPS`); None when it is not.
        plan: a kernel's checked plan, each structure's id a static placeholder (`Launcher.jarp_native_launch`).
        **options: the inner callable's options (``num_outputs``, ``output_dims``...).

    Returns:
        The call's outputs.
    """
    if drops is not None:
        names = tuple(name for name, _ in params[: len(args)])
        args = guard_gradients(args, names, drops, what)
    groups, xparams, xargs = expand(params, args, what)
    return make_callable(Launcher(target, groups, xparams, launch, plan), **options)(*xargs)


def _warp_object(built: object) -> object:
    """The Warp object behind what `obtain` keeps (a mesh with its private indices...)."""
    for name in ("mesh", "bvh"):
        if hasattr(built, name):
            return getattr(built, name)
    return built


def operand_name(param: str, field: str) -> str:
    """The inner callable's parameter that passes array ``field`` of the structure given for ``param`` (`expand`;
    the native launch finds the structure's buffers by it, `Launcher.jarp_native_launch`)."""
    return f"{param}__{field}"


def expand(
    params: tuple[tuple[str, Any], ...], args: tuple[Any, ...], what: str
) -> tuple[tuple[tuple[int, Recipe] | None, ...], tuple[tuple[str, Any], ...], tuple[Any, ...]]:
    """Replace each structure argument (and its parameter) by the structure's arrays (places checked: `check_places`).

    ``what`` names the module for messages from inside the call (an index out of range).

    Returns:
        ``(groups, params, args)`` for a `Launcher` and its call.
    """
    groups: list[tuple[int, Recipe] | None] = []
    new_params: list[tuple[str, Any]] = []
    new_args: list[Any] = []
    for i, (name, warp_type) in enumerate(params):
        value = args[i] if i < len(args) else None
        if not isinstance(value, AbstractStructure):
            groups.append(None)
            new_params.append((name, warp_type))
            if i < len(args):
                new_args.append(value)
            continue
        recipe = value.recipe(f"{what}: the jarp.warp.{type(value).__name__} given for {name!r}")
        groups.append((i, recipe))
        for field, array, field_type in value.operands():
            new_params.append((operand_name(name, field), field_type))
            new_args.append(array)
    return tuple(groups), tuple(new_params), tuple(new_args)


def check_places(params: tuple[tuple[str, Any], ...], args: tuple[Any, ...], what: str, *, kernel: bool) -> None:
    """Refuse a structure given for a parameter that does not take one: a kernel takes its id as ``wp.uint64``, a
    function the Warp object (annotated ``wp.Mesh``...)."""
    for (name, warp_type), value in zip(params, args, strict=False):
        if not isinstance(value, AbstractStructure):
            continue
        cls = type(value).__name__
        if kernel and warp_type is not wp.uint64:
            raise TypeError(
                f"{what}: argument {name!r} is a jarp.warp.{cls}, but the kernel takes "
                f"{describe_type(warp_type)} there; a structure goes where the kernel takes its "
                f"id: annotate the parameter wp.uint64 and query it with Warp's {cls.lower()} builtins."
            )
        if not kernel and warp_type is not value.warp_type:
            raise TypeError(
                f"{what}: argument {name!r} is a jarp.warp.{cls}, but the function's parameter is annotated "
                f"{describe_type(warp_type)}; annotate it wp.{cls} (the function then receives the "
                "Warp object built inside the call)."
            )


def check_structure_uses(target: wp.Kernel, args: tuple[Any, ...], names: tuple[str, ...], what: str) -> None:
    """Refuse a kernel that writes a structure's arrays or lets its id leave the call (`_writes.structure_uses`).

    A structure's arrays are the caller's immutable JAX arrays (the call's operands, not copies), so a store through
    ``wp.mesh_get(id).points`` is refused as a store into an input array is. The id names an object that lives in
    the call's store only as long as a compiled program can launch it (`_builds`): stored into an output,
    it would outlive it, so any use of the id but a query is refused too.

    Args:
        target: the kernel overload launched.
        args: the call's arguments (one per input parameter).
        names: the input parameters' names.
        what: the module, for messages.
    """
    ids = {n: a for n, a in zip(names, args, strict=False) if isinstance(a, AbstractStructure)}
    if not ids:
        return
    uses = _writes.structure_uses(target, tuple(ids))
    if not uses:
        return
    use = uses[0]
    name, _, field = use.path.partition(".")
    cls = type(ids[name]).__name__
    where = f" in {use.via}" if use.via is not None else ""
    # a builtin by its Python name (``wp.atomic_add``); "store", "a pointer cast"... as they are
    how = f"wp.{use.how.removeprefix('wp::')}" if " " not in use.how and use.how != "store" else use.how
    if field:
        raise ValueError(
            f"{what}: the kernel writes {use.path} (by {how}{where}), an array of the "
            f"jarp.warp.{cls} given for {name!r}: a structure's arrays are the caller's immutable JAX arrays, which a "
            f"kernel may only read. Write an output instead (to update the {field}, pass them as an array parameter "
            "declared in in_out_argnames=... and build the structure from the result)."
        )
    if use.how.removeprefix("wp::") in _builtins.STRUCTURE_WRITES:
        raise ValueError(
            f"{what}: the kernel writes the jarp.warp.{cls} given for {name!r} (by {how}{where}): "
            "its values are the caller's immutable JAX array, which a kernel may only read. Write an output array "
            "and build a new Volume from it."
        )
    raise ValueError(
        f"{what}: the kernel uses the id of the jarp.warp.{cls} given for {name!r} other than to query it "
        f"({how}{where}): the id names a structure that exists only inside the call, so it may not be stored, "
        f"computed with or handed to code jarp cannot follow. Pass it only to Warp's {cls.lower()} builtins (and "
        "to @wp.funcs that do so), and write what the queries return."
    )


# The precision of a hash-grid query by the Warp type of its result, as the generated code names it.
_QUERY_PRECISION = {
    wp.HashGridQuery[dtype].__name__: np.dtype(wp.dtype_to_numpy(dtype))
    for dtype in (wp.float16, wp.float32, wp.float64)
}


def match_query_precision(
    target: wp.Kernel, args: tuple[Any, ...], names: tuple[str, ...], what: str
) -> tuple[Any, ...]:
    """Give each `HashGrid` the precision of the kernel's ``wp.hash_grid_query`` calls.

    Warp's query reads the grid's points in the precision of the query point's type, whatever the grid was built
    with: a float64 grid queried with a ``wp.vec3`` finds wrong neighbours, without a word. The points are cast to
    the one precision the kernel's code queries in (their gradient through a query is zero, so the cast loses
    nothing); a kernel querying in several precisions is refused where a grid would not match them all.
    """
    grids = [i for i, a in enumerate(args) if isinstance(a, HashGrid)]
    if not grids:
        return args
    found = set()
    for _, lines, types in _writes.forward_code(target):
        kinds = dict(types)
        for line in lines:
            call = _QUERY_CALL.match(line)
            if call is not None and kinds.get(call.group(1)) in _QUERY_PRECISION:
                found.add(_QUERY_PRECISION[kinds[call.group(1)]])
    if not found:
        return args  # the kernel only maps indices (wp.hash_grid_point_id), which do not depend on the points
    out = list(args)
    for i in grids:
        dtype = np.dtype(jnp.result_type(args[i].points))
        if dtype in found:
            continue
        if len(found) > 1:
            raise TypeError(
                f"{what}: the jarp.warp.HashGrid given for {names[i]!r} has {dtype} points, and kernel "
                f"{target.key!r} queries grids in {sorted(str(d) for d in found)}: Warp reads a grid's points in the "
                "precision of the query point, so a grid of any one precision is read wrongly by some query. Query "
                "it in one precision, or build it with points of that dtype."
            )
        out[i] = eqx.tree_at(lambda g: g.points, args[i], jnp.asarray(args[i].points).astype(next(iter(found))))
    return tuple(out)


_QUERY_CALL = re.compile(r"^\s*(var_\w+)\s*=\s*wp::hash_grid_query\(")


def guard_gradients(
    args: tuple[Any, ...], names: tuple[str, ...], drops: tuple[Drop, ...], what: str
) -> tuple[Any, ...]:
    """Structures whose gradient Warp's adjoint would drop get arrays that refuse to be differentiated.

    Args:
        args: the call's arguments.
        names: the parameter name of each argument.
        drops: where the launch drops a structure field's gradient (`_adjoints.dropped`), each naming
            the parameter it reads, or None where it may read any.
        what: the module, for messages.
    """
    if not drops:
        return args
    out = list(args)
    for i, a in enumerate(args):
        if not isinstance(a, AbstractStructure):
            continue
        changes = {}
        for field in type(a)._differentiable:
            value = getattr(a, field)
            builtins = tuple(
                dict.fromkeys(d.builtin for d in drops if d.field == field and d.param in (None, names[i]))
            )
            if builtins and value is not None and jnp.issubdtype(jnp.result_type(value), jnp.inexact):
                changes[field] = _refuse_gradient(value, _message(what, names[i], field, builtins, a))
        if changes:
            out[i] = eqx.tree_at(
                lambda s, c=tuple(changes): tuple(getattr(s, f) for f in c), a, tuple(changes.values())
            )
    return tuple(out)


# A function's kernels are seen only when they run (the taped replay checks meshes); a volume's values never have a
# gradient in Warp (its samplers' adjoints reach the sample point only), whatever the function launches.
CALLABLE_DROPS = (Drop("values", "Warp's volume samplers (wp.volume_sample...)", None),)


def _message(what: str, name: str, field: str, builtins: tuple[str, ...], structure: AbstractStructure) -> str:
    cls = type(structure).__name__
    if field == "values":
        way_out = (
            "pass the voxel values as a wp.array as well and interpolate them in the kernel where you need their "
            "gradient, or stop it (jax.lax.stop_gradient) if the values are data"
        )
    else:
        way_out = (
            "call the query in the kernel's own code or in a plain @wp.func, in its form returning a result "
            "(q = wp.mesh_query_point(...), wp.mesh_query_ray(...)), whose smooth fields jarp recomputes from the "
            f"vertices; or read the vertices as arrays (m = wp.mesh_get({name}); m.points[m.indices[3 * f + k]]); "
            f"or stop the gradient of {name}.{field} (jax.lax.stop_gradient) if the dependence is to be ignored"
        )
    return (
        f"{what}: cannot differentiate with respect to {name}.{field} (a jarp.warp.{cls}): the kernel reads it "
        f"through {', '.join(builtins)}, whose adjoint in Warp drops the gradient with respect to the "
        f"{cls.lower()}'s {field} (it would be a silent zero); {way_out}."
    )


def _refuse_gradient(x: jax.Array, message: str) -> jax.Array:
    @jax.custom_vjp
    def identity(y: jax.Array) -> jax.Array:
        return y

    def fwd(y: jax.Array) -> tuple[jax.Array, None]:
        return y, None

    def bwd(_: None, g: jax.Array) -> tuple[jax.Array]:
        raise ValueError(message)

    identity.defvjp(fwd, bwd)
    return identity(x)


def output_dims(results: Sequence[Buffer], outputs: Sequence[ArgSpec]) -> Mapping[str, tuple[int, ...]] | None:
    """The inner callable's ``output_dims``: the pure outputs' shapes by name (None without pure outputs)."""
    if not outputs:
        return None  # in-out outputs only: shaped like their inputs
    return {spec.name: tuple(buf.shape) for spec, buf in zip(outputs, results[-len(outputs) :], strict=True)}
