"""The FFI target `jarp_warp_call` trusts nothing it did not make (`jarp/warp/_ffi/_target.py`).

A call names its plan by content: attributes ``abi`` (jarp's call-ABI version) and ``desc`` (the plan's
description), which the instantiate stage resolves once per loaded executable, keeping the plan handle as the
call's XLA FFI state for the execute stage. Anything jarp did not lower (a hand-written
``jax.ffi.ffi_call("jarp_warp_call", ...)`` with wrong, missing or garbled attributes, a description of a kernel
this process does not define, an execute stage without jarp's state) must end in a Python exception naming what
was wrong, never a crash; a serialised executable loaded in another process resolves its calls there and runs. Each hostile call runs in a subprocess with a timeout, so a regression shows as a failed test that names
the case (and the signal) instead of killing the suite.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from jax.experimental import serialize_executable

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._ffi import _target
from jarp.warp._ffi._registry import registry
from tests.support import forked
from tests.support import kernels as k
from tests.support.lowered import custom_calls
from tests.support.paths import REPO

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)

_TIMEOUT = 300


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter (forked: `tests.support.forked`) from the repository root (so it imports this checkout's jarp)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return forked.run([sys.executable, "-c", textwrap.dedent(script), *args], cwd=REPO, env=env, timeout=_TIMEOUT)


def _died(proc: subprocess.CompletedProcess[str]) -> str:
    how = f"signal {-proc.returncode}" if proc.returncode < 0 else f"exit code {proc.returncode}"
    return f"the subprocess died ({how}); stderr tail:\n{proc.stderr[-3000:]}"


def _records(proc: subprocess.CompletedProcess[str]) -> dict[str, dict[str, Any]]:
    """The JSON lines the script printed, by case name."""
    out = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            record = json.loads(line)
            out.setdefault(record["case"], {}).update(record)
    return out


# ----------------------------------------------------------------------------------------------------------------------
# Hand-written calls of the target
# ----------------------------------------------------------------------------------------------------------------------

# Each case: (attributes, operand shapes and dtypes, result shape and dtype). ``D`` is the description of a real
# plan (triple_kernel on float32[8]) as jarp lowers it, ``A`` jarp's call-ABI version. A description is untrusted
# input: the instantiate stage resolves it (once per loaded executable) and refuses anything but jarp's own.
_DIRECT = """
import json, sys
import jax, jax.numpy as jnp, numpy as np
from jarp.warp import jax_kernel
from jarp.warp._ffi import _native, _registry, _target, _trampoline
from tests.support import kernels as k
from tests.support.lowered import custom_calls

m = jax_kernel(k.triple_kernel)
x = jnp.arange(8, dtype=jnp.float32)
f = jax.jit(lambda x: m(x)[0])
(CALL,) = custom_calls(f.lower(x).as_text())
D, A = CALL["desc"], np.int64(_target.ABI_VERSION)
np.testing.assert_array_equal(np.asarray(f(x)), 3 * np.arange(8, dtype=np.float32))


def edited(edit):
    doc = json.loads(D)
    edit(doc)
    return json.dumps(doc)


def local(process, handle):
    # the description of a plan only its own process resolves (a lambda's, a closure's): process token and handle
    why = "a function defined inside another function cannot be found by name in another process"
    doc = {"abi": _target.ABI_VERSION, "local": {"process": process, "handle": handle, "name": "f", "why": why}}
    return json.dumps(doc, sort_keys=True, separators=(",", ":"))


def released_handle():
    # the handle of a plan released with its kernel: lowered, dropped, then replaced in Warp's module
    import gc
    from tests.support.kernels_lifetimes import make_scale_kernel

    g = jax.jit(lambda x, m=jax_kernel(make_scale_kernel(2)): m(x)[0])
    (handle,) = [c["plan"] for c in custom_calls(g.lower(x).as_text())]
    del g
    jax.clear_caches()
    jax_kernel(make_scale_kernel(3))(x)  # Warp's module keeps this kernel of the same key instead; a safe point
    gc.collect()
    assert handle not in _registry.registry
    return handle


R = released_handle()
KEEP = f.lower(x)  # a lease on the plan again (jax.clear_caches above dropped every executable's)
H = custom_calls(KEEP.as_text())[0]["plan"]
f32 = jnp.float32
OK = ([((8,), f32)], ((8,), f32))
CASES = {
    "no_attributes": ({}, *OK),
    "string_abi": ({"abi": "1", "desc": D}, *OK),
    "float_abi": ({"abi": np.float32(A), "desc": D}, *OK),
    "int32_abi": ({"abi": np.int32(A), "desc": D}, *OK),
    "other_abi": ({"abi": A + 1, "desc": D}, *OK),
    "int_desc": ({"abi": A, "desc": np.int64(H)}, *OK),
    "extra_attribute": ({"aaa": A, "abi": A, "desc": D}, *OK),
    "abi_only": ({"abi": A}, *OK),
    "desc_only": ({"desc": D}, *OK),
    "old_plan_and_session": ({"plan": np.int64(H), "session": np.int64(1)}, *OK),
    "garbled_desc": ({"abi": A, "desc": D[: len(D) // 2]}, *OK),
    "empty_desc": ({"abi": A, "desc": ""}, *OK),
    "oversized_desc": ({"abi": A, "desc": " " * ((1 << 20) + 1)}, *OK),
    "desc_of_other_abi": ({"abi": A, "desc": edited(lambda d: d.update(abi=_target.ABI_VERSION + 1))}, *OK),
    "desc_of_bad_field": ({"abi": A, "desc": edited(lambda d: d.update(launch_dims=[-1]))}, *OK),
    "unknown_kernel": ({"abi": A, "desc": edited(lambda d: d["target"].update(module="my_project.kernels"))}, *OK),
    "changed_kernel": ({"abi": A, "desc": edited(lambda d: d["target"].update(hash="0" * 64))}, *OK),
    "local_of_another_process": ({"abi": A, "desc": local("0" * 16, H)}, *OK),
    "local_released_handle": ({"abi": A, "desc": local(_registry._LOCAL, R)}, *OK),
    "local_handle_past_the_end": ({"abi": A, "desc": local(_registry._LOCAL, max(H, R) + 1000)}, *OK),
    "too_few_operands": ({"abi": A, "desc": D}, [], ((8,), f32)),
    "wrong_operand_dtype": ({"abi": A, "desc": D}, [((8,), jnp.int32)], ((8,), f32)),
    "smaller_operand": ({"abi": A, "desc": D}, [((4,), f32)], ((8,), f32)),
    "smaller_result": ({"abi": A, "desc": D}, [((8,), f32)], ((4,), f32)),
    "operand_of_other_rank": ({"abi": A, "desc": D}, [((2, 4), f32)], ((8,), f32)),
    "correct_call": ({"abi": A, "desc": D}, *OK),
    "correct_local_call": ({"abi": A, "desc": local(_registry._LOCAL, H)}, *OK),
}

# The execute stage registered alone, without jarp's instantiate stage: its frames carry no jarp state.
native = _native.handler()
EXECUTE_ONLY = {
    "execute_only_python": _trampoline.trampoline(lambda frame: _target._callback(frame, "cpu", True, -1)),
    "execute_only_native": None if native is None else native.address("cpu", True),
}
for name, address in EXECUTE_ONLY.items():
    if address is not None:
        jax.ffi.register_ffi_target("jarp_test_" + name, jax.ffi.pycapsule(address), platform="cpu")
        CASES[name] = ({"abi": A, "desc": D}, *OK)

for name in sys.argv[1:]:
    if name not in CASES:
        print(json.dumps({"case": name, "skipped": True}), flush=True)
        continue
    attrs, operands, (rshape, rdtype) = CASES[name]
    print(json.dumps({"case": name, "started": True}), flush=True)
    target = "jarp_test_" + name if name in EXECUTE_ONLY else "jarp_warp_call"
    call = jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(rshape, rdtype))
    args = [jnp.arange(int(np.prod(s)), dtype=d).reshape(s) for s, d in operands]
    try:
        out = jax.block_until_ready(jax.jit(lambda *a: call(*a, **attrs))(*args))
        record = {"case": name, "error": None, "result": np.asarray(out).tolist()}
    except Exception as e:
        record = {"case": name, "error": type(e).__name__, "message": str(e)}
    print(json.dumps(record), flush=True)
# after all of that, the process still runs jarp's own calls
np.testing.assert_array_equal(np.asarray(f(x + 1)), 3 * np.arange(1, 9, dtype=np.float32))
print(json.dumps({"case": "still_works_after", "error": None}), flush=True)
"""

_ATTRS = "exactly the attributes abi (int64) and desc (string)"
# (case, XLA error code, fragments the message must contain)
_EXPECTED = [
    ("no_attributes", "INVALID_ARGUMENT", [_ATTRS, "'abi' is missing", "'desc' is missing", "got no attributes"]),
    ("string_abi", "INVALID_ARGUMENT", ["attribute 'abi' must be an int64 scalar, got string"]),
    ("float_abi", "INVALID_ARGUMENT", ["attribute 'abi' must be an int64 scalar, got float32"]),
    ("int32_abi", "INVALID_ARGUMENT", ["attribute 'abi' must be an int64 scalar, got int32"]),
    ("other_abi", "FAILED_PRECONDITION", ["call ABI version 2", "(jarp.warp call ABI 1) cannot run it"]),
    ("int_desc", "INVALID_ARGUMENT", ["attribute 'desc' must be a string, got int64"]),
    ("extra_attribute", "INVALID_ARGUMENT", ["attribute 'aaa' is not one of them"]),
    ("abi_only", "INVALID_ARGUMENT", ["attribute 'desc' is missing"]),
    ("desc_only", "INVALID_ARGUMENT", ["attribute 'abi' is missing"]),
    (
        "old_plan_and_session",
        "INVALID_ARGUMENT",
        ["attribute 'plan' is not one of them", "attribute 'session' is not one of them"],
    ),
    ("garbled_desc", "INVALID_ARGUMENT", ["invalid jarp plan description: the plan description is not JSON"]),
    ("empty_desc", "INVALID_ARGUMENT", ["the plan description is not JSON"]),
    ("oversized_desc", "INVALID_ARGUMENT", ["attribute 'desc' is 1048577 bytes; jarp's descriptions are at most"]),
    ("desc_of_other_abi", "FAILED_PRECONDITION", ["described for jarp call ABI 2, and this jarp reads ABI 1"]),
    ("desc_of_bad_field", "INVALID_ARGUMENT", ["'launch_dims[0]' must be in [0, "]),
    ("unknown_kernel", "NOT_FOUND", ["Warp kernel 'triple_kernel' (Warp module 'my_project.kernels')"]),
    ("changed_kernel", "FAILED_PRECONDITION", ["Warp kernel 'triple_kernel'", "has other code than the kernel"]),
    ("local_of_another_process", "NOT_FOUND", ["compiled in another process and cannot be rebuilt here"]),
    ("local_released_handle", "NOT_FOUND", ["was released"]),
    ("local_handle_past_the_end", "NOT_FOUND", ["is not one this process made"]),
    ("too_few_operands", "INVALID_ARGUMENT", ["expects 1 operand and 1 result, the call passes 0 operands"]),
    ("wrong_operand_dtype", "INVALID_ARGUMENT", ["operand 0 of kernel", "is int32[8], the plan expects float32[8]"]),
    ("smaller_operand", "INVALID_ARGUMENT", ["operand 0 of kernel", "is float32[4], the plan expects float32[8]"]),
    ("smaller_result", "INVALID_ARGUMENT", ["result 0 of kernel", "is float32[4], the plan expects float32[8]"]),
    ("operand_of_other_rank", "INVALID_ARGUMENT", ["is float32[2, 4], the plan expects float32[8]"]),
    ("execute_only_python", "FAILED_PRECONDITION", ["this call has no jarp state"]),
    ("execute_only_native", "FAILED_PRECONDITION", ["this call has no jarp state"]),
]
_CORRECT = ["correct_call", "correct_local_call"]


@pytest.fixture(scope="module")
def direct_calls() -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]]:
    """Run the hand-written calls in one subprocess; if one kills it, record that and go on with the rest."""
    remaining = [case for case, _, _ in _EXPECTED] + _CORRECT
    records: dict[str, dict[str, Any]] = {}
    while True:
        proc = _run(_DIRECT, *remaining)
        records.update(_records(proc))
        dead = [case for case in remaining if records.get(case, {}).get("started") and "error" not in records[case]]
        if proc.returncode == 0 or not dead:
            return proc, records
        records[dead[0]]["died"] = _died(proc)
        remaining = remaining[remaining.index(dead[0]) + 1 :]
        if not remaining:
            return proc, records


@pytest.mark.parametrize(("case", "code", "fragments"), _EXPECTED, ids=[c for c, _, _ in _EXPECTED])
def test_hand_written_call_is_refused_with_a_message(direct_calls: Any, case: str, code: str, fragments: list[str]):
    proc, records = direct_calls
    record = records.get(case)
    assert record is not None, f"case {case} never ran; " + _died(proc)
    if record.get("skipped"):
        pytest.skip("the native handler cannot be built here")
    assert "error" in record, f"the interpreter died during case {case}: " + record.get("died", _died(proc))
    assert record["error"] is not None, f"case {case} ran without an error: {record}"
    assert record["error"] == "JaxRuntimeError", record
    message = record["message"]
    assert message.startswith(f"{code}: jarp_warp_call: "), message
    for fragment in fragments:
        assert fragment in message, message


def test_a_correct_hand_written_call_runs_and_errors_leave_no_trace(direct_calls: Any):
    proc, records = direct_calls
    assert proc.returncode == 0, _died(proc)
    for case in _CORRECT:  # a description jarp lowered, and a local one naming a live plan of this process
        assert records[case]["error"] is None, records[case]
        np.testing.assert_array_equal(records[case]["result"], 3 * np.arange(8, dtype=np.float32))
    assert records["still_works_after"]["error"] is None


# ----------------------------------------------------------------------------------------------------------------------
# Serialised executables
# ----------------------------------------------------------------------------------------------------------------------

_LOAD = """
import pickle, sys
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import serialize_executable
import jarp.warp
from jarp.warp._ffi._registry import registry

if sys.argv[2] == "import":
    # this process makes its own plans first: handle 0 here is a different kernel on different shapes
    from jarp.warp import jax_kernel
    from tests.support import kernels as k

    x = jnp.arange(4, dtype=jnp.float32)
    np.testing.assert_array_equal(np.asarray(jax_kernel(k.add_kernel)(x, x)[0]), 2 * np.arange(4, dtype=np.float32))
with open(sys.argv[1], "rb") as f:
    payload, in_tree, out_tree = pickle.load(f)
try:
    compiled = serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
    out = jax.block_until_ready(compiled(jnp.arange(8, dtype=jnp.float32)))
    print("NO ERROR", np.asarray(out).tolist(), flush=True)
    print("PLANS", [plan.name for plan in registry.plans()], flush=True)
except Exception as e:
    print("ERROR", type(e).__name__, str(e), flush=True)
"""


def _serialised_triple(tmp_path: Any) -> tuple[str, Any]:
    m = jax_kernel(k.triple_kernel)
    compiled = jax.jit(lambda x: m(x)[0]).lower(jnp.arange(8, dtype=jnp.float32)).compile()
    path = tmp_path / "executable.pkl"
    path.write_bytes(pickle.dumps(serialize_executable.serialize(compiled)))
    return str(path), compiled


def _load_line(proc: subprocess.CompletedProcess[str], start: str) -> str:
    assert proc.returncode == 0, _died(proc)
    line = next((line for line in proc.stdout.splitlines() if line.startswith(start)), None)
    assert line is not None, proc.stdout + proc.stderr[-3000:]
    return line


def test_serialised_executable_loaded_in_another_process_runs(tmp_path: Any):
    # The calls name their plan by content: the loading process rebuilds the plan from the description (its
    # kernel's module is imported there) and runs it, after plans of its own took the first handles.
    path, _ = _serialised_triple(tmp_path)
    proc = _run(_LOAD, path, "import")
    line = _load_line(proc, ("ERROR", "NO ERROR"))
    assert line == f"NO ERROR {(3 * np.arange(8.0)).tolist()}", line
    plans = _load_line(proc, "PLANS")
    assert "jax_kernel(triple_kernel)" in plans, plans  # rebuilt there, and held by the loaded executable's state


def test_serialised_executable_loaded_without_its_kernel_fails_cleanly(tmp_path: Any):
    # A process that never imported the kernel's module cannot rebuild the plan: an error naming the module.
    path, _ = _serialised_triple(tmp_path)
    line = _load_line(_run(_LOAD, path, "no-import"), ("ERROR", "NO ERROR"))
    assert line.startswith("ERROR JaxRuntimeError NOT_FOUND: jarp_warp_call: "), line
    assert "Warp kernel 'triple_kernel'" in line, line
    assert "import the Python module that defines it, 'tests.support.kernels'" in line, line


def test_serialised_executable_loaded_in_this_process_runs(tmp_path: Any):
    path, compiled = _serialised_triple(tmp_path)
    with open(path, "rb") as f:
        payload, in_tree, out_tree = pickle.load(f)
    loaded = serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
    x = jnp.linspace(-1.0, 1.0, 8, dtype=jnp.float32)
    np.testing.assert_allclose(np.asarray(loaded(x)), 3 * np.asarray(x), rtol=1e-6)
    np.testing.assert_array_equal(np.asarray(loaded(x)), np.asarray(compiled(x)))


# ----------------------------------------------------------------------------------------------------------------------
# The checks accept every frame jarp itself lowers
# ----------------------------------------------------------------------------------------------------------------------


def test_a_normal_jitted_call_still_works():
    m = jax_kernel(k.add_kernel)
    a = jnp.arange(6, dtype=jnp.float32)
    b = jnp.full(6, 0.5, jnp.float32)
    f = jax.jit(lambda a, b: m(a, b)[0])
    for _ in range(3):  # the first call prepares the executor, the next ones take the fast path
        np.testing.assert_array_equal(np.asarray(f(a, b)), np.arange(6, dtype=np.float32) + 0.5)
    (call,) = custom_calls(f.lower(a, b).as_text())
    assert call["abi"] == _target.ABI_VERSION
    assert registry.plan(call["plan"]).target is k.add_kernel


def test_batched_plans_pass_the_buffer_checks():
    add = jax_kernel(k.add_kernel)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    b = np.linspace(0.0, 1.0, 4, dtype=np.float32)
    # a batched and an unbatched operand: only the first carries the batch dim in its shape
    out = jax.jit(jax.vmap(lambda a, b: add(a, b)[0], in_axes=(0, None)))(a, b)
    np.testing.assert_allclose(np.asarray(out), a + b[None, :], rtol=1e-6)
    # nested vmap: two batch dims, batched on axis 1 of the input
    c = np.arange(24, dtype=np.float32).reshape(2, 4, 3)
    nested = jax.jit(jax.vmap(jax.vmap(lambda a, b: add(a, b)[0], in_axes=(1, None)), in_axes=(0, 0)))
    expected = np.transpose(c, (0, 2, 1)) + np.arange(2, dtype=np.float32).reshape(2, 1, 1)
    np.testing.assert_allclose(
        np.asarray(nested(c, np.repeat(np.arange(2, dtype=np.float32)[:, None], 4, axis=1))), expected, rtol=1e-6
    )
    # vector dtypes carry their inner dims; a static scalar adds no buffer
    vec = jax_kernel(k.scale_vec2)
    v = np.arange(20, dtype=np.float32).reshape(5, 2, 2)
    out = jax.jit(jax.vmap(lambda v: vec(v, 2.5)[0]))(v)
    np.testing.assert_allclose(np.asarray(out), 2.5 * v, rtol=1e-6)
    # Warp's broadcast_all folds the batch into the launch
    folded = jax_kernel(k.add_kernel, vmap_method="broadcast_all")
    out = jax.jit(jax.vmap(lambda a, b: folded(a, b)[0]))(a, a)
    np.testing.assert_allclose(np.asarray(out), 2 * a, rtol=1e-6)


def test_batched_adjoint_and_callable_plans_pass_the_buffer_checks():
    triple = jax_kernel(k.triple_kernel, enable_backward=True)
    x = np.linspace(-1.0, 1.0, 12, dtype=np.float32).reshape(3, 4)
    grad = jax.jit(jax.vmap(jax.grad(lambda x: jnp.sum(triple(x)[0] ** 2))))(x)
    np.testing.assert_allclose(np.asarray(grad), 18 * x, rtol=1e-5)

    def twice(a: wp.array(dtype=float), out: wp.array(dtype=float)):
        wp.launch(k.triple_kernel, dim=a.shape, inputs=[a], outputs=[out], device=a.device)

    call = jax_callable(twice)
    out = jax.jit(jax.vmap(lambda x: call(x)[0]))(x)
    np.testing.assert_allclose(np.asarray(out), 3 * x, rtol=1e-6)
