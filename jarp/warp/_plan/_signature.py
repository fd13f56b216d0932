"""Parse a Warp kernel's (or annotated function's) parameters into JAX-facing argument specs."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from .._upstream import _warp_types
from ._arg_spec import ArgSpec, arg_spec
from ._struct_layout import struct_layout


def param_spec(
    name: str, warp_type: object, *, in_out: bool = False, what: str = "kernel", structures: bool = False
) -> ArgSpec:
    """Build the `ArgSpec` of a parameter from its Warp annotation: an array, a scalar or a ``wp.struct``.

    With ``structures`` (a function's parameters), also a Warp structure (``wp.Mesh``...), which the call gives as a
    jarp pytree; a kernel takes a structure by its id instead.
    """
    if _warp_types.is_struct_type(warp_type):
        return ArgSpec(name, False, warp_type, 0, (), in_out, struct=struct_layout(warp_type, name))
    if structures and _warp_types.is_structure_type(warp_type):
        return ArgSpec(name, False, warp_type, 0, (), in_out, structure=True)
    return arg_spec(name, warp_type, in_out=in_out, what=what)


@dataclasses.dataclass(frozen=True)
class Signature:
    """The parameters of a kernel split into inputs (including in-out) and pure outputs."""

    params: tuple[ArgSpec, ...]
    num_outputs: int

    @property
    def num_inputs(self) -> int:
        return len(self.params) - self.num_pure_outputs

    @property
    def num_pure_outputs(self) -> int:
        return self.num_outputs - self.num_in_out

    @property
    def num_in_out(self) -> int:
        return sum(p.in_out for p in self.params)

    @property
    def inputs(self) -> tuple[ArgSpec, ...]:
        return self.params[: self.num_inputs]

    @property
    def outputs(self) -> tuple[ArgSpec, ...]:
        return self.params[self.num_inputs :]

    @property
    def in_out(self) -> tuple[ArgSpec, ...]:
        return tuple(p for p in self.inputs if p.in_out)


def make_signature(
    params: Sequence[tuple[str, Any]],
    num_outputs: int,
    in_out_argnames: tuple[str, ...],
    *,
    what: str,
    structures: bool = False,
) -> Signature:
    """Validate the output options against a parameter list and build a `Signature`.

    Raises:
        ValueError / TypeError naming the offending option.
    """
    names = [name for name, _ in params]
    if isinstance(num_outputs, bool) or not isinstance(num_outputs, int):
        raise TypeError(f"{what}: num_outputs must be an int, got {num_outputs!r}.")
    if num_outputs < 1:
        raise ValueError(f"{what}: num_outputs must be at least 1 (a kernel needs an output), got {num_outputs}.")
    if num_outputs > len(params):
        raise ValueError(
            f"{what}: num_outputs={num_outputs} exceeds the number of parameters ({len(params)}: {names})."
        )
    if len(set(in_out_argnames)) != len(in_out_argnames):
        # Warp's wording ("must not contain duplicate names", "did not match any function argument names",
        # "should be placed before output-only arguments") is kept, so code ported from Warp's bridge that
        # matches on it keeps working.
        raise ValueError(
            f"{what}: in_out_argnames must not contain duplicate names, got {list(in_out_argnames)}; "
            "name each in-out argument once."
        )
    for name in in_out_argnames:
        if name not in names:
            raise ValueError(
                f"{what}: in_out_argnames {name!r} did not match any function argument names (have {names})."
            )
    num_inputs = len(params) - num_outputs + len(in_out_argnames)
    if len(in_out_argnames) > num_outputs:
        raise ValueError(
            f"{what}: in_out_argnames has {len(in_out_argnames)} names but num_outputs={num_outputs}; "
            "num_outputs counts in-out arguments too."
        )
    specs = []
    for i, (name, warp_type) in enumerate(params):
        in_out = name in in_out_argnames
        if in_out and i >= num_inputs:
            raise ValueError(
                f"{what}: in_out_argnames names {name!r}, which comes after the pure outputs; in_out arguments "
                f"should be placed before output-only arguments (the last {num_outputs - len(in_out_argnames)} "
                "parameters), or raise num_outputs."
            )
        spec = param_spec(name, warp_type, in_out=in_out, what=what, structures=structures)
        if (i >= num_inputs or in_out) and spec.is_struct:
            raise TypeError(
                f"{what}: output parameter {name!r} is a {spec.phrase()}; jarp does not return structs. Make "
                "the struct an input and its arrays pure outputs (separate array parameters), or lower num_outputs."
            )
        if (i >= num_inputs or in_out) and not spec.is_array:
            raise TypeError(f"{what}: output parameter {name!r} must be a wp.array, got {spec.phrase()}.")
        specs.append(spec)
    return Signature(tuple(specs), num_outputs)
