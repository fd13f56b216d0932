"""Every kind of kernel parameter Warp has is either passed or refused when the signature is parsed.

``wp.types.is_array`` is true of all of Warp's array classes, but only ``wp.array`` is an ``array_t`` argument:
packing an ``array_t`` for a ``wp.indexedarray`` parameter made the kernel read past it (SIGSEGV on the CPU).
The refused kinds (`tests.support.kernels_kinds.CASES`: indexed and Fabric arrays as parameters, struct fields
and ``jax_callable`` annotations) are built, and called if the build succeeded, in child processes, so a crash
fails its test instead of pytest; each must fail at construction with an error naming the parameter (or struct
field), its kind and a plain ``wp.array`` as what to use instead.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from typing import Any

import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

import jarp.warp as jw
from jarp.warp._plan._arg_spec import arg_spec
from jarp.warp._plan._signature import param_spec
from jarp.warp._plan._struct_layout import struct_layout
from jarp.warp._upstream import _warp_types
from tests.support import forked
from tests.support import kernels_kinds as kk
from tests.support.kernels_kinds import CASES
from tests.support.paths import REPO, child_environment

TIMEOUT = 240


@pytest.fixture(scope="module")
def outcomes() -> dict[str, tuple[int, str, str]]:
    """``(returncode, outcome line, stderr)`` of each case, run one after another in a child process.

    A case that crashes its child (the defect these tests guard against) gets that child's exit code and output;
    the cases after it run in a new child, so each case is judged on its own.
    """
    env = child_environment()
    env["JAX_PLATFORMS"] = "cpu"
    results: dict[str, tuple[int, str, str]] = {}
    pending = list(CASES)
    deadline = time.monotonic() + TIMEOUT
    while pending:
        proc = forked.start([sys.executable, "-m", "tests.support.kernels_kinds", *pending], cwd=REPO, env=env)
        try:
            stdout, stderr = proc.communicate(timeout=max(1.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            stderr += f"\nHUNG: killed after {TIMEOUT} s"
        for line in stdout.splitlines():
            if line.startswith("{"):
                outcome = json.loads(line)
                results[outcome["case"]] = (0, line, stderr)
        pending = [name for name in pending if name not in results]
        if pending:  # the child ended inside the first case without an outcome: that case's result
            results[pending.pop(0)] = (proc.returncode or -1, stdout, stderr)
    return results


@pytest.mark.parametrize("name", sorted(CASES))
def test_refused_at_construction_without_a_crash(name: str, outcomes: dict[str, tuple[int, str, str]]) -> None:
    returncode, stdout, stderr = outcomes[name]
    assert returncode == 0, f"the child crashed (exit code {returncode}):\n{stdout[-2000:]}\n{stderr[-3000:]}"
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    assert lines, f"the child printed no outcome:\n{stdout[-2000:]}\n{stderr[-3000:]}"
    outcome = json.loads(lines[-1])
    assert outcome["stage"] == "construct", f"{name}: built without an error, then the call gave {outcome}"
    case = CASES[name]
    message = outcome["error"]
    assert f"{case.subject} is a {case.kind} (" in message
    assert "plain wp.array" in message
    if "indexedarray" in case.kind and "fabric" not in case.kind:
        assert "jnp.take" in message


# -- in-process checks of the parsing itself (no call, so no crash) --


@pytest.mark.parametrize(
    ("annotation", "kind"),
    [
        (wp.indexedarray(dtype=wp.vec3), "wp.indexedarray (1-d, of vec3f)"),
        (wp.indexedarray2d(dtype=float), "wp.indexedarray (2-d, of float32)"),
        (wp.fabricarray(dtype=float), "wp.fabricarray (1-d, of float"),
        (wp.indexedfabricarray[wp.float64], "wp.indexedfabricarray (1-d, of float64)"),
        (wp.fixedarray(dtype=float, shape=3), "wp.fixedarray (1-d, of float32)"),
    ],
)
def test_non_plain_arrays_are_refused_by_kind(annotation: Any, kind: str) -> None:
    with pytest.raises(TypeError, match=r"^kernel parameter 'p' is a ") as info:
        arg_spec("p", annotation)
    assert kind in str(info.value)


def test_plain_array_spellings_are_still_arrays() -> None:
    for annotation in (wp.array(dtype=float), wp.array[float], wp.array2d[wp.vec3], wp.array(dtype=Any)):
        assert _warp_types.array_kind(annotation) == "array"
        assert param_spec("p", annotation).is_array


def test_struct_field_of_subscript_array_is_a_plain_array() -> None:
    """``wp.array[float]`` in a struct is an ``_ArrayAnnotation``, not a ``wp.array`` instance: still a plain array."""
    layout = struct_layout(kk.Subscripted, "s")
    assert [(leaf.name, leaf.is_array) for leaf in layout.leaves] == [("s.a", True), ("s.k", False)]
    (out,) = jw.jax_kernel(kk.subscripted_scale_kernel)({"a": jnp.arange(4.0, dtype=jnp.float32), "k": 3.0})
    np.testing.assert_allclose(np.asarray(out), 3.0 * np.arange(4.0))


@pytest.mark.parametrize(
    ("annotation", "named", "advice"),
    [
        (wp.Texture2D, "wp.Texture2D", "pass the texels as a wp.array"),
        (wp.Mesh, "wp.Mesh", "annotate the parameter as wp.uint64 and pass a jarp.warp.Mesh(...) pytree"),
        (wp.Volume, "wp.Volume", "wp.uint64"),
        (wp.handle, "wp.handle", "annotate an object id as wp.uint64"),
        (wp.Float, "Float", "typing.Any and pick the overload with arg_types_factory"),
        (tuple[float, float], "tuple", "separate parameters"),
        (wp.tile(dtype=float, shape=(4,)), "tile", "wp.tile_load"),
    ],
)
def test_other_kinds_are_refused_with_advice(annotation: Any, named: str, advice: str) -> None:
    with pytest.raises(TypeError, match=r"^kernel parameter 'p' has type ") as info:
        param_spec("p", annotation)
    message = str(info.value)
    assert named in message
    assert advice in message


@pytest.mark.parametrize(
    "annotation",
    [float, int, bool, wp.float16, wp.bfloat16, wp.uint64, wp.vec3d, wp.mat33, wp.quatf, wp.transformd, Any],
)
def test_value_kinds_are_passed(annotation: Any) -> None:
    spec = param_spec("p", annotation)
    assert not spec.is_array
    assert not spec.is_struct
