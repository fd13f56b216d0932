"""Compiled programs with jarp calls, across processes (run by ``tests/warp/transforms/test_compiled_programs.py``).

Each mode prints one line ``>>> <JSON>`` with what it found; errors the test expects are caught and reported in
that JSON, so a child that crashes (or exits non-zero) is a failure of the test. The kernel module
``prog_kernels`` (`programs.write_kernels`) is imported from ``PYTHONPATH`` unless ``--no-import`` is given.

- ``cache DIR NAME...``: with JAX's persistent compilation cache in ``DIR``, compile each named function
  (`functions`) and run it; per function: cache hits and misses (JAX's monitoring events) and the value.
- ``export DIR``: ``jax.export`` each function (``vjp_order=1``) into ``DIR/<name>.bin``.
- ``load DIR``: deserialise each export and call it (and ``jax.grad`` / ``jax.vmap`` of it where it applies).
- ``serialize FILE`` / ``deserialize FILE``: ``jax.experimental.serialize_executable`` there and back.
- ``crafted``: hand-written ``jax.ffi.ffi_call``s of jarp's target with garbled or crafted attributes.
- ``leases DIR``: the state leases held while a loaded export lives, and after it is deleted.
- ``lambda``: ``jax.export`` of a lambda and of a closure ``jax_callable``.
"""

from __future__ import annotations

import collections
import gc
import json
import pickle
import sys
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import warp as wp

import jarp.warp
from jarp.warp import jax_callable, jax_kernel
from jarp.warp._ffi._registry import registry
from tests.support.programs import XS, W, X

NO_IMPORT = "--no-import" in sys.argv
ARGS = [a for a in sys.argv[1:] if a != "--no-import"]


def functions() -> dict[str, tuple[Any, tuple[np.ndarray, ...]]]:
    """Name -> (function, its arguments), each calling the kernels of ``prog_kernels``."""
    import prog_kernels as pk

    square = jax_kernel(pk.square_kernel, enable_backward=True)
    scale = jax_kernel(pk.struct_kernel, enable_backward=True)
    call = jax_callable(pk.square_func)

    def fwd(x: jax.Array) -> jax.Array:
        return square(x)[0]

    def struct(w: jax.Array, x: jax.Array) -> jax.Array:
        return scale({"k": 3.0, "w": w}, x)[0]

    return {
        "fwd": (fwd, (X,)),
        "grad": (jax.grad(lambda x: fwd(x).sum()), (X,)),
        "struct": (struct, (W, X)),
        "struct_grad": (jax.grad(lambda w, x: struct(w, x).sum(), argnums=(0, 1)), (W, X)),
        "vmap": (jax.vmap(fwd), (XS,)),
        "callable": (lambda x: call(x)[0], (X,)),
    }


def _value(out: Any) -> Any:
    return jax.tree.map(lambda a: np.asarray(a).tolist(), out)


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def cache(directory: str, names: list[str]) -> dict[str, Any]:
    jax.config.update("jax_compilation_cache_dir", directory)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
    events: collections.Counter[str] = collections.Counter()
    jax.monitoring.register_event_listener(lambda event, **_: events.update([event]))
    funcs = functions()
    if "closure" in names:
        funcs["closure"] = (_closure_callable(), (X,))
    report = {}
    for name in names:
        f, args = funcs[name]
        args = tuple(jnp.asarray(a) for a in args)  # transferred before counting: only f's compilation counts
        events.clear()
        compiled = jax.jit(f).lower(*args).compile()
        hits, misses = events["/jax/compilation_cache/cache_hits"], events["/jax/compilation_cache/cache_misses"]
        report[name] = {"hits": hits, "misses": misses, "value": _value(compiled(*args))}
    return report


def export(directory: str) -> dict[str, Any]:
    report = {}
    funcs = functions()
    # vjp_order=1: the program carries its reverse-mode derivative (Warp's adjoint), so jax.grad of the loaded
    # function works; the jax_callable has no derivative.
    for name, vjp_order in (("fwd", 1), ("struct", 1), ("vmap", 1), ("callable", 0)):
        f, args = funcs[name]
        exported = jax.export.export(jax.jit(f), disabled_checks=jarp.warp.export_checks())(*args)
        Path(directory, f"{name}.bin").write_bytes(exported.serialize(vjp_order=vjp_order))
        report[name] = _value(f(*args))
    return report


def load(directory: str) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for name, args in (("fwd", (X,)), ("struct", (W, X)), ("vmap", (XS,)), ("callable", (X,))):
        try:
            exported = jax.export.deserialize(bytearray(Path(directory, f"{name}.bin").read_bytes()))
            report[name] = _value(exported.call(*args))
            if name == "fwd":
                report["fwd_grad"] = _value(jax.grad(lambda x, e=exported: e.call(x).sum())(X))
                report["fwd_jit"] = _value(jax.jit(exported.call)(X))
            if name == "struct":
                report["struct_grad"] = _value(
                    jax.grad(lambda w, x, e=exported: e.call(w, x).sum(), argnums=(0, 1))(W, X)
                )
        except Exception as e:
            report[name] = {"error": _error(e)}
    return report


def serialize(path: str) -> dict[str, Any]:
    from jax.experimental import serialize_executable

    f, args = functions()["fwd"]
    compiled = jax.jit(f).lower(*args).compile()
    Path(path).write_bytes(pickle.dumps(serialize_executable.serialize(compiled)))
    return {"fwd": _value(compiled(*args))}


def deserialize(path: str) -> dict[str, Any]:
    from jax.experimental import serialize_executable

    try:
        payload, in_tree, out_tree = pickle.loads(Path(path).read_bytes())
        compiled = serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
        return {"fwd": _value(compiled(jnp.asarray(X)))}
    except Exception as e:
        return {"fwd": {"error": _error(e)}}


def leases(directory: str) -> dict[str, Any]:
    before = registry.state_leases()
    exported = jax.export.deserialize(bytearray(Path(directory, "fwd.bin").read_bytes()))
    loaded = jax.jit(exported.call)
    value = _value(loaded(X))
    held = registry.state_leases()
    del exported, loaded
    gc.collect()
    jax.clear_caches()
    gc.collect()
    return {"before": before, "held": held, "after": registry.state_leases(), "value": value}


def _closure_callable() -> Any:
    def closure_func(x: wp.array(dtype=wp.float32), y: wp.array(dtype=wp.float32)):  # type: ignore[valid-type]
        y.assign(x)

    call = jax_callable(closure_func)
    return lambda x: call(x)[0]


def refuse_lambda() -> dict[str, Any]:
    lam = lambda x, y: y.assign(x)  # noqa: E731 (a lambda is the point)
    lam.__annotations__ = {"x": wp.array(dtype=wp.float32), "y": wp.array(dtype=wp.float32)}
    report = {}
    for name, f in (("lambda", lambda x: jax_callable(lam)(x)[0]), ("closure", _closure_callable())):
        in_process = _value(jax.jit(f)(X))  # it runs in this process
        try:
            jax.export.export(jax.jit(f), disabled_checks=jarp.warp.export_checks())(X)
            report[name] = {"value": in_process, "error": None}
        except Exception as e:
            report[name] = {"value": in_process, "error": _error(e)}
    return report


def _edit(text: str, edit: Any) -> str:
    doc = json.loads(text)
    edit(doc)
    return json.dumps(doc)


def _set(path: tuple[Any, ...], value: Any) -> Any:
    def edit(doc: Any) -> None:
        for key in path[:-1]:
            doc = doc[key]
        doc[path[-1]] = value

    return edit


def crafted() -> dict[str, Any]:
    """Each case: a hand-written call of jarp's target with the attributes it names; the error it gives, as text."""
    from tests.support.lowered import custom_calls

    f, args = functions()["fwd"]
    (call,) = custom_calls(jax.jit(f).lower(*args).as_text())
    good = call["desc"]
    one = np.int64(1)
    cases: dict[str, tuple[str, dict[str, Any], int]] = {  # name -> (target, attributes, number of operands)
        "valid": ("jarp_warp_call", {"abi": one, "desc": good}, 1),
        "garbage": ("jarp_warp_call", {"abi": one, "desc": "{not json"}, 1),
        "not_object": ("jarp_warp_call_no_graph", {"abi": one, "desc": "[1, 2]"}, 1),
        "operand_shape": ("jarp_warp_call", {"abi": one, "desc": _edit(good, _set(("operands", 0, "shape"), [16]))}, 1),
        "launch_dims": ("jarp_warp_call", {"abi": one, "desc": _edit(good, _set(("launch_dims",), [4096]))}, 1),
        "dim_range": ("jarp_warp_call", {"abi": one, "desc": _edit(good, _set(("launch_dims",), [-1]))}, 1),
        "unknown_kernel": ("jarp_warp_call", {"abi": one, "desc": _edit(good, _set(("target", "key"), "nope"))}, 1),
        "unknown_module": (
            "jarp_warp_call",
            {"abi": one, "desc": _edit(good, _set(("target", "module"), "evil_module"))},
            1,
        ),
        "wrong_python_module": (
            "jarp_warp_call",
            {"abi": one, "desc": _edit(good, _set(("target", "python_module"), "os"))},
            1,
        ),
        "wrong_hash": ("jarp_warp_call", {"abi": one, "desc": _edit(good, _set(("target", "hash"), "0" * 64))}, 1),
        "abi_attr": ("jarp_warp_call", {"abi": np.int64(2), "desc": good}, 1),
        "abi_desc": ("jarp_warp_call", {"abi": one, "desc": _edit(good, _set(("abi",), 2))}, 1),
        "abi_string": ("jarp_warp_call", {"abi": "1", "desc": good}, 1),
        "desc_int": ("jarp_warp_call", {"abi": one, "desc": np.int64(5)}, 1),
        "missing_desc": ("jarp_warp_call", {"abi": one}, 1),
        "no_attrs": ("jarp_warp_call_no_graph", {}, 1),
        "extra_attr": ("jarp_warp_call", {"abi": one, "desc": good, "plan": np.int64(0)}, 1),
        "operand_count": ("jarp_warp_call", {"abi": one, "desc": good}, 2),
    }
    report: dict[str, Any] = {}
    for name, (target, attrs, n_operands) in cases.items():
        ffi = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(X.shape, np.float32))
        try:
            report[name] = _value(jax.jit(lambda *xs, ffi=ffi, attrs=attrs: ffi(*xs, **attrs))(*[X] * n_operands))
        except Exception as e:
            report[name] = {"error": _error(e)}
    report["imported"] = sorted(m for m in ("evil_module", "nope") if m in sys.modules)
    report["after"] = _value(jax.jit(f)(*args))  # the target still works
    return report


def main() -> None:
    mode, rest = ARGS[0], ARGS[1:]
    if not NO_IMPORT:
        import prog_kernels  # noqa: F401 (the kernels a loaded program launches)
    report = {
        "cache": lambda: cache(rest[0], rest[1:]),
        "export": lambda: export(rest[0]),
        "load": lambda: load(rest[0]),
        "serialize": lambda: serialize(rest[0]),
        "deserialize": lambda: deserialize(rest[0]),
        "leases": lambda: leases(rest[0]),
        "lambda": refuse_lambda,
        "crafted": crafted,
    }[mode]()
    report["launch_path"] = jarp.warp._ffi._target.launch_path()
    print(">>> " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main()
