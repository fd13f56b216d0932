"""Warp array kinds jarp refuses, as kernel, struct and function parameters (``tests/warp/plan/test_param_kinds.py``).

Each of ``wp.indexedarray``, ``wp.fabricarray`` and ``wp.indexedfabricarray`` appears as a top-level kernel
parameter (the call-style ``wp.indexedarray(dtype=float)`` and the subscript ``wp.indexedarray[float]``
annotations), as a struct field, and as a ``jax_callable`` annotation. `CASES` names each one and builds the jarp
module, which must fail (`build` raises) before anything is packed. `run_case` is what the test's child process
runs: if the module were built, it would be called, which packed an ``array_t`` where the kernel reads a larger
struct (a crash).
"""

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import jax.numpy as jnp
import warp as wp

import jarp.warp as jw

# ----------------------------------------------------------------------------------------------------------------------
# Top-level parameters
# ----------------------------------------------------------------------------------------------------------------------


@wp.kernel
def indexed_kernel(a: wp.indexedarray(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i]


@wp.kernel
def indexed_subscript_kernel(a: wp.indexedarray[float], out: wp.array[float]):
    i = wp.tid()
    out[i] = a[i]


@wp.kernel
def indexed_generic_kernel(a: wp.indexedarray(dtype=Any), out: wp.array(dtype=Any)):
    i = wp.tid()
    out[i] = a[i]


@wp.kernel
def fabric_kernel(a: wp.fabricarray(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i]


@wp.kernel
def indexed_fabric_kernel(a: wp.indexedfabricarray(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i]


# ----------------------------------------------------------------------------------------------------------------------
# Struct fields
# ----------------------------------------------------------------------------------------------------------------------


@wp.struct
class IndexedHolder:
    k: float
    a: wp.indexedarray(dtype=float)


@wp.struct
class FabricHolder:
    a: wp.fabricarray(dtype=float)


@wp.struct
class IndexedFabricHolder:
    a: wp.indexedfabricarray(dtype=float)


@wp.struct
class Outer:
    inner: IndexedHolder


@wp.kernel
def indexed_field_kernel(s: IndexedHolder, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = s.a[i] * s.k


@wp.kernel
def fabric_field_kernel(s: FabricHolder, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = s.a[i]


@wp.kernel
def indexed_fabric_field_kernel(s: IndexedFabricHolder, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = s.a[i]


@wp.kernel
def nested_indexed_field_kernel(o: Outer, out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = o.inner.a[i]


@wp.struct
class Subscripted:
    """A plain array field in the subscript spelling (an ``_ArrayAnnotation``, not a ``wp.array``): passed."""

    a: wp.array[float]
    k: float


@wp.kernel
def subscripted_scale_kernel(s: Subscripted, out: wp.array[float]):
    i = wp.tid()
    out[i] = s.a[i] * s.k


# ----------------------------------------------------------------------------------------------------------------------
# jax_callable annotations
# ----------------------------------------------------------------------------------------------------------------------


def indexed_func(a: wp.indexedarray(dtype=float), out: wp.array(dtype=float)):
    wp.launch(indexed_kernel, dim=out.shape[0], inputs=[a], outputs=[out])


def fabric_func(a: wp.fabricarray(dtype=float), out: wp.array(dtype=float)):
    wp.launch(fabric_kernel, dim=out.shape[0], inputs=[a], outputs=[out])


def indexed_fabric_func(a: wp.indexedfabricarray(dtype=float), out: wp.array(dtype=float)):
    wp.launch(indexed_fabric_kernel, dim=out.shape[0], inputs=[a], outputs=[out])


def indexed_field_func(s: IndexedHolder, out: wp.array(dtype=float)):
    wp.launch(indexed_field_kernel, dim=out.shape[0], inputs=[s], outputs=[out])


# ----------------------------------------------------------------------------------------------------------------------
# Cases
# ----------------------------------------------------------------------------------------------------------------------


def _values() -> jnp.ndarray:
    return jnp.arange(4.0, dtype=jnp.float32)


@dataclass(frozen=True)
class Case:
    """One refused parameter: how to build the module, how a call would look, and what the error must name."""

    build: Callable[[], Any]
    call_args: Callable[[], tuple[Any, ...]]
    subject: str  # "parameter 'a'" or "struct field 's.a'"
    kind: str  # "wp.indexedarray"...


def _struct_arg() -> tuple[Any, ...]:
    return ({"k": 2.0, "a": _values()},)


CASES: dict[str, Case] = {
    "kernel-indexedarray": Case(
        lambda: jw.jax_kernel(indexed_kernel), lambda: (_values(),), "parameter 'a'", "wp.indexedarray"
    ),
    "kernel-indexedarray-subscript": Case(
        lambda: jw.jax_kernel(indexed_subscript_kernel), lambda: (_values(),), "parameter 'a'", "wp.indexedarray"
    ),
    "kernel-indexedarray-generic": Case(
        lambda: jw.jax_kernel(
            indexed_generic_kernel, arg_types_factory=lambda t: [wp.indexedarray(dtype=t), wp.array(dtype=t)]
        ),
        lambda: (_values(),),
        "parameter 'a'",
        "wp.indexedarray",
    ),
    "kernel-fabricarray": Case(
        lambda: jw.jax_kernel(fabric_kernel), lambda: (_values(),), "parameter 'a'", "wp.fabricarray"
    ),
    "kernel-indexedfabricarray": Case(
        lambda: jw.jax_kernel(indexed_fabric_kernel), lambda: (_values(),), "parameter 'a'", "wp.indexedfabricarray"
    ),
    "field-indexedarray": Case(
        lambda: jw.jax_kernel(indexed_field_kernel), _struct_arg, "struct field 's.a'", "wp.indexedarray"
    ),
    "field-fabricarray": Case(
        lambda: jw.jax_kernel(fabric_field_kernel), _struct_arg, "struct field 's.a'", "wp.fabricarray"
    ),
    "field-indexedfabricarray": Case(
        lambda: jw.jax_kernel(indexed_fabric_field_kernel), _struct_arg, "struct field 's.a'", "wp.indexedfabricarray"
    ),
    "field-nested-indexedarray": Case(
        lambda: jw.jax_kernel(nested_indexed_field_kernel),
        lambda: ({"inner": {"k": 2.0, "a": _values()}},),
        "struct field 'o.inner.a'",
        "wp.indexedarray",
    ),
    "callable-indexedarray": Case(
        lambda: jw.jax_callable(indexed_func), lambda: (_values(),), "parameter 'a'", "wp.indexedarray"
    ),
    "callable-fabricarray": Case(
        lambda: jw.jax_callable(fabric_func), lambda: (_values(),), "parameter 'a'", "wp.fabricarray"
    ),
    "callable-indexedfabricarray": Case(
        lambda: jw.jax_callable(indexed_fabric_func), lambda: (_values(),), "parameter 'a'", "wp.indexedfabricarray"
    ),
    "callable-field-indexedarray": Case(
        lambda: jw.jax_callable(indexed_field_func), _struct_arg, "struct field 's.a'", "wp.indexedarray"
    ),
}


def run_case(name: str) -> None:
    """Build case ``name``'s module and, if that succeeds, call it; print what happened as one JSON line (flushed,
    so that a crash in a later case keeps it)."""
    case = CASES[name]
    try:
        module = case.build()
    except TypeError as e:
        print(json.dumps({"case": name, "stage": "construct", "error": str(e)}), flush=True)
        return
    try:
        result = module(*case.call_args(), launch_dims=4)
        print(
            json.dumps({"case": name, "stage": "call", "result": [[float(v) for v in r] for r in result]}), flush=True
        )
    except Exception as e:  # a refusal this late is still a defect (the test says so), but no crash
        print(json.dumps({"case": name, "stage": "call", "error": f"{type(e).__name__}: {e}"}), flush=True)


if __name__ == "__main__":
    for arg in sys.argv[1:]:  # in order: the test runs the cases after a crash in a new process
        run_case(arg)
