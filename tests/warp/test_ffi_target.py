"""The FFI target `jarp_warp_call` trusts nothing it did not make (`jarp/warp/_target.py`, `_callback`).

Every frame jarp did not lower in this process (a serialised executable from another process, a hand-written
``jax.ffi.ffi_call("jarp_warp_call", ...)``) must end in a Python exception naming what was wrong, never a
crash. Each hostile call runs in a subprocess with a timeout, so a regression shows as a failed test that names
the case (and the signal) instead of killing the suite.
"""

from __future__ import annotations

import json
import os
import pickle
import re
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

from .support import kernels as k

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)

_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_TIMEOUT = 300


def _run(script: str, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` in a fresh interpreter from the repository root (so it imports this checkout's jarp)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script), *args],
        cwd=_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=_TIMEOUT,
    )


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

# Each case: (attributes, operand shapes and dtypes, result shape and dtype). ``H`` is the handle of a real plan
# (triple_kernel on float32[8]), ``S`` this process's session token.
_DIRECT = """
import json, re, sys
import jax, jax.numpy as jnp, numpy as np
from jarp.warp import jax_kernel
from jarp.warp._ffi import _target
from jarp.warp._ffi import _registry
from jarp.warp._plan import _values
from tests.warp.support import kernels as k

m = jax_kernel(k.triple_kernel)
x = jnp.arange(8, dtype=jnp.float32)
f = jax.jit(lambda x: m(x)[0])
H = int(re.search(r"plan = (-?[0-9]+)", f.lower(x).as_text()).group(1))
S = int(_target.SESSION)
np.testing.assert_array_equal(np.asarray(f(x)), 3 * np.arange(8, dtype=np.float32))


def released_handle():
    # the handle of a plan released with its kernel: lowered, dropped, then replaced in Warp's module
    import gc
    from tests.warp.test_lifetimes import _make_kernel

    g = jax.jit(lambda x, m=jax_kernel(_make_kernel(2)): m(x)[0])
    handle = int(re.search(r"plan = (-?[0-9]+)", g.lower(x).as_text()).group(1))
    del g
    jax.clear_caches()
    jax_kernel(_make_kernel(3))(x)  # Warp's module keeps this kernel of the same key instead; a safe point
    gc.collect()
    assert handle not in _registry.registry
    return handle


R = released_handle()
f32 = jnp.float32
CASES = {
    "no_attributes": ({}, [((8,), f32)], ((8,), f32)),
    "string_plan": ({"plan": str(H), "session": np.int64(S)}, [((8,), f32)], ((8,), f32)),
    "float_plan": ({"plan": np.float32(H), "session": np.int64(S)}, [((8,), f32)], ((8,), f32)),
    "int32_plan": ({"plan": np.int32(H), "session": np.int64(S)}, [((8,), f32)], ((8,), f32)),
    "negative_handle": ({"plan": np.int64(-1), "session": np.int64(S)}, [((8,), f32)], ((8,), f32)),
    "handle_past_the_end": (
        {"plan": np.int64(max(H, R) + 1000), "session": np.int64(S)}, [((8,), f32)], ((8,), f32)
    ),
    "released_handle": ({"plan": np.int64(R), "session": np.int64(S)}, [((8,), f32)], ((8,), f32)),
    "extra_attribute": (
        {"aaa": np.int64(H), "plan": np.int64(H), "session": np.int64(S)}, [((8,), f32)], ((8,), f32)
    ),
    "plan_only": ({"plan": np.int64(H)}, [((8,), f32)], ((8,), f32)),
    "wrong_session": ({"plan": np.int64(H), "session": np.int64(S ^ 1)}, [((8,), f32)], ((8,), f32)),
    "too_few_operands": ({"plan": np.int64(H), "session": np.int64(S)}, [], ((8,), f32)),
    "wrong_operand_dtype": ({"plan": np.int64(H), "session": np.int64(S)}, [((8,), jnp.int32)], ((8,), f32)),
    "smaller_operand": ({"plan": np.int64(H), "session": np.int64(S)}, [((4,), f32)], ((8,), f32)),
    "smaller_result": ({"plan": np.int64(H), "session": np.int64(S)}, [((8,), f32)], ((4,), f32)),
    "operand_of_other_rank": ({"plan": np.int64(H), "session": np.int64(S)}, [((2, 4), f32)], ((8,), f32)),
    "correct_call": ({"plan": np.int64(H), "session": np.int64(S)}, [((8,), f32)], ((8,), f32)),
}
for name in sys.argv[1:]:
    attrs, operands, (rshape, rdtype) = CASES[name]
    print(json.dumps({"case": name, "started": True}), flush=True)
    call = jax.ffi.ffi_call("jarp_warp_call", jax.ShapeDtypeStruct(rshape, rdtype))
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

# (case, XLA error code, fragments the message must contain)
_EXPECTED = [
    ("no_attributes", "INVALID_ARGUMENT", ["exactly the attributes plan and session", "'plan' is missing"]),
    ("string_plan", "INVALID_ARGUMENT", ["attribute 'plan' must be an int64 scalar, got string"]),
    ("float_plan", "INVALID_ARGUMENT", ["attribute 'plan' must be an int64 scalar, got float32"]),
    ("int32_plan", "INVALID_ARGUMENT", ["attribute 'plan' must be an int64 scalar, got int32"]),
    ("negative_handle", "INVALID_ARGUMENT", ["plan handle -1 is not one this process made"]),
    ("handle_past_the_end", "INVALID_ARGUMENT", ["is not one this process made"]),
    ("released_handle", "FAILED_PRECONDITION", ["was released", "call the jarp module again"]),
    ("extra_attribute", "INVALID_ARGUMENT", ["attribute 'aaa' is not one of them"]),
    ("plan_only", "INVALID_ARGUMENT", ["attribute 'session' is missing"]),
    ("wrong_session", "FAILED_PRECONDITION", ["session token mismatch", "recompile it in this process"]),
    ("too_few_operands", "INVALID_ARGUMENT", ["expects 1 operand and 1 result, the call passes 0 operands"]),
    ("wrong_operand_dtype", "INVALID_ARGUMENT", ["operand 0 of kernel", "is int32[8], the plan expects float32[8]"]),
    ("smaller_operand", "INVALID_ARGUMENT", ["operand 0 of kernel", "is float32[4], the plan expects float32[8]"]),
    ("smaller_result", "INVALID_ARGUMENT", ["result 0 of kernel", "is float32[4], the plan expects float32[8]"]),
    ("operand_of_other_rank", "INVALID_ARGUMENT", ["is float32[2, 4], the plan expects float32[8]"]),
]


@pytest.fixture(scope="module")
def direct_calls() -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, Any]]]:
    """Run the hand-written calls in one subprocess; if one kills it, record that and go on with the rest."""
    remaining = [case for case, _, _ in _EXPECTED] + ["correct_call"]
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
    assert records["correct_call"]["error"] is None
    np.testing.assert_array_equal(records["correct_call"]["result"], 3 * np.arange(8, dtype=np.float32))
    assert records["still_works_after"]["error"] is None


# ----------------------------------------------------------------------------------------------------------------------
# Serialised executables
# ----------------------------------------------------------------------------------------------------------------------

_LOAD = """
import pickle, sys
import jax, jax.numpy as jnp, numpy as np
from jax.experimental import serialize_executable
from jarp.warp import jax_kernel
from tests.warp.support import kernels as k

# this process makes its own plans first: handle 0 here is a different kernel on different shapes
x = jnp.arange(4, dtype=jnp.float32)
np.testing.assert_array_equal(np.asarray(jax_kernel(k.add_kernel)(x, x)[0]), 2 * np.arange(4, dtype=np.float32))
with open(sys.argv[1], "rb") as f:
    payload, in_tree, out_tree = pickle.load(f)
compiled = serialize_executable.deserialize_and_load(payload, in_tree, out_tree)
try:
    out = jax.block_until_ready(compiled(jnp.arange(8, dtype=jnp.float32)))
    print("NO ERROR", np.asarray(out).tolist(), flush=True)
except Exception as e:
    print("ERROR", type(e).__name__, str(e), flush=True)
"""


def _serialised_triple(tmp_path: Any) -> tuple[str, Any]:
    m = jax_kernel(k.triple_kernel)
    compiled = jax.jit(lambda x: m(x)[0]).lower(jnp.arange(8, dtype=jnp.float32)).compile()
    path = tmp_path / "executable.pkl"
    path.write_bytes(pickle.dumps(serialize_executable.serialize(compiled)))
    return str(path), compiled


def test_serialised_executable_loaded_in_another_process_fails_cleanly(tmp_path: Any):
    path, _ = _serialised_triple(tmp_path)
    proc = _run(_LOAD, path)
    assert proc.returncode == 0, _died(proc)
    line = next((line for line in proc.stdout.splitlines() if line.startswith(("ERROR", "NO ERROR"))), None)
    assert line is not None, proc.stdout + proc.stderr[-3000:]
    assert line.startswith("ERROR JaxRuntimeError FAILED_PRECONDITION: jarp_warp_call: "), line
    assert "compiled in another process (session token mismatch); recompile it in this process" in line


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
    text = f.lower(a, b).as_text()
    assert re.search(r"plan = [0-9]+ : i64, session = [0-9]+ : i64", text), text


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
