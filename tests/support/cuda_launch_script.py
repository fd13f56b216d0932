"""Prepare a CUDA launch of every kernel in the suite's kernel files and check each against its compiled kernel.

Run as ``python -m tests.support.cuda_launch_script`` (``tests/warp/cuda/test_launch_params.py`` does, in a fresh
float64-enabled process, so the plans made here are the only ones checked). For every Warp kernel the files
define (every registered overload of a generic one), it makes up arguments from the kernel's signature
(arrays, scalars, vector and matrix values, structs, nested structs) and lowers for CUDA, without a GPU:

* the forward launch, with scalars and struct value fields static (baked into the argument block);
* the same with scalars and struct value fields as JAX values (the runtime-scalar variant, its own kernel);
* the backward launch (``jax.grad`` of the sum of the floating outputs over the floating array inputs);
* for ``kernels_bounds``, all of the above again with ``bounds_check=True`` (the debug-mode build).

Then ``jarp.warp.check_cuda_launches()`` compiles each module with NVRTC and compares every plan's parameter
block with the ``.param`` list of its compiled entry point. Prints one JSON object (the last line, after ``RESULT``): the checks, and for
each kernel which launches were prepared (or why one could not be).
"""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

import jax

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import warp as wp  # noqa: E402

import jarp.warp as jw  # noqa: E402
from jarp.warp._plan._analysis import _writes  # noqa: E402
from jarp.warp._upstream import _warp_types  # noqa: E402

wp.config.log_level = wp.LOG_WARNING  # no banner, no per-module load lines

MODULES = (
    "tests.support.kernels",
    "tests.support.kernels64",
    "tests.support.kernels_ad",
    "tests.support.kernels_block_dim",  # a tile kernel with its block dim
    "tests.support.kernels_bounds",
    "tests.support.kernels_corner_cases",
    "tests.support.kernels_dtypes",
    "tests.support.kernels_energy",
    "tests.support.kernels_fem",
    "tests.support.kernels_hostile",
    "tests.support.kernels_spellings",
    "tests.support.kernels_static_keys",
    "tests.support.kernels_struct",
    "tests.support.kernels_struct_runtime",
    "tests.warp.modules.test_block_dim",  # tile kernels and block dims
)
N = 3  # the extent of every made-up array dim


def _np_dtype(t: Any) -> Any:
    scalar = getattr(t, "_wp_scalar_type_", t)
    if scalar is wp.bfloat16:
        return jnp.bfloat16
    return np.dtype(wp.dtype_to_numpy(scalar))


def _value(t: Any) -> Any:
    """A made-up argument of Warp type ``t``: JAX arrays for arrays, NumPy values for values, dicts for structs."""
    if wp.types.is_array(t):
        return jnp.ones((N,) * t.ndim + tuple(getattr(t.dtype, "_shape_", ())), _np_dtype(t.dtype))
    if _warp_types.is_struct_type(t):
        return {name: _value(field) for name, field in _warp_types.struct_fields(t)}
    if hasattr(t, "_shape_"):
        return np.ones(t._shape_, _np_dtype(t))
    return np.asarray(1, _np_dtype(t))[()]


def _split(args: list[Any], runtime: bool) -> tuple[list[Any], Callable[[list[Any]], list[Any]]]:
    """The leaves to trace (JAX arrays; with ``runtime``, values too) and a function putting the arguments back."""
    leaves, treedef = jax.tree.flatten(args)
    traced = [i for i, leaf in enumerate(leaves) if runtime or isinstance(leaf, jax.Array)]

    def rebuild(values: list[Any]) -> list[Any]:
        merged = list(leaves)
        for i, v in zip(traced, values, strict=True):
            merged[i] = v
        return jax.tree.unflatten(treedef, merged)

    return [jnp.asarray(leaves[i]) for i in traced], rebuild


_LOWERED: list[Any] = []  # a lowered program holds its plans: keep them until they are checked


def _lower(f: Callable[..., Any], args: list[Any]) -> None:
    _LOWERED.append(jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",)))


def _prepare(kernel: wp.Kernel, **extra: Any) -> dict[str, str]:
    """Lower the forward, runtime-scalar and backward launches of one concrete kernel for CUDA; what happened."""
    names = tuple(a.label for a in kernel.adj.args)
    written = set(_writes.written_inputs(kernel, names))
    n_out = 1
    while n_out < len(names) - 1 and names[-1 - n_out] in written:
        n_out += 1
    inputs = kernel.adj.args[: len(names) - n_out]
    in_out = tuple(a.label for a in inputs if a.label in written)
    output_dims = {a.label: (N,) * a.type.ndim for a in kernel.adj.args[len(inputs) :] if wp.types.is_array(a.type)}
    args = [_value(a.type) for a in inputs]
    options: dict[str, Any] = {"num_outputs": n_out + len(in_out), "in_out_argnames": in_out}
    options["output_dims"] = output_dims
    options["module_preload_mode"] = wp.JaxModulePreloadMode.NONE  # nothing runs here: no CPU builds
    options.update(extra)
    if not any(wp.types.is_array(a.type) for a in inputs):
        options["launch_dims"] = (N,)
    outcome = {}
    for backward in (True, False):  # Warp's adjoint cannot differentiate in-out overwrites: then forward only
        try:
            jk = jw.jax_kernel(kernel, enable_backward=backward, **options)
        except ValueError as e:
            if backward and "overwritten" in str(e):
                outcome["backward"] = f"refused: {str(e)[:120]}"
                continue
            raise
        break
    for kind, runtime in (("forward", False), ("runtime", True)):
        traced, rebuild = _split(args, runtime)
        if runtime and len(traced) == len(_split(args, False)[0]):
            outcome[kind] = "no values"
            continue
        try:
            _lower(lambda *t, rebuild=rebuild: jk(*rebuild(list(t))), traced)
            outcome[kind] = "ok"
        except Exception as e:  # recorded, and the test decides which refusals are expected
            outcome[kind] = f"{type(e).__name__}: {str(e)[:160]}"
    if "backward" in outcome:
        return outcome
    traced, rebuild = _split(args, False)
    floats = [i for i, t in enumerate(traced) if jnp.issubdtype(t.dtype, jnp.floating)]
    if not floats:
        outcome["backward"] = "no floating inputs"
        return outcome

    def loss(*xs: Any) -> Any:
        values = list(traced)
        for i, x in zip(floats, xs, strict=True):
            values[i] = x
        outs = jk(*rebuild(values))
        return sum(jnp.sum(o.astype(jnp.float64)) for o in outs if jnp.issubdtype(o.dtype, jnp.floating))

    try:
        _lower(jax.grad(loss, argnums=tuple(range(len(floats)))), [traced[i] for i in floats])
        outcome["backward"] = "ok"
    except Exception as e:
        outcome["backward"] = f"{type(e).__name__}: {str(e)[:160]}"
    return outcome


def main() -> None:
    prepared: dict[str, dict[str, str]] = {}
    for name in MODULES:
        module = importlib.import_module(name)
        for attr, kernel in vars(module).items():
            if not isinstance(kernel, wp.Kernel) or kernel.module.name != name:
                continue
            overloads = list(kernel.overloads.values()) if kernel.is_generic else [kernel]
            for i, overload in enumerate(overloads):
                key = f"{name.rsplit('.', 1)[-1]}.{attr}" + (f"[{i}]" if kernel.is_generic else "")
                variants = {key: {}}
                if name.endswith("kernels_bounds"):  # and the bounds-checked build (Warp's debug mode)
                    variants[key + "+bounds_check"] = {"bounds_check": True}
                for label, extra in variants.items():
                    try:
                        prepared[label] = _prepare(overload, **extra)
                    except Exception as e:
                        prepared[label] = {"forward": f"{type(e).__name__}: {str(e)[:160]}"}
    checks = jw.check_cuda_launches()
    kinds = {info.handle: info.kind for info in jw.list_plans()}  # one listing: it describes every plan
    sys.stdout.write("\nRESULT ")  # Warp logs to stdout: the result is the last line
    json.dump(
        {
            "prepared": prepared,
            "checks": [
                {"name": c.name, "entry": c.entry, "ok": c.ok, "nparams": len(c.compiled), "kind": kinds[c.handle]}
                for c in checks
            ],
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
