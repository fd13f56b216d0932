"""More than one process: a jarp kernel under `shard_map` over a mesh that spans two `jax.distributed` processes.

Two workers (`tests/support/distributed_worker.py`) run on localhost with two CPU devices each and gloo CPU collectives;
their global mesh has four devices. The test checks that the forward value and the gradient (including that of a
replicated scalar, summed across the process boundary) equal a NumPy reference and a single-process jarp call, and
that each process lowered, registered and ran its own plans.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jarp.warp import jax_kernel
from jarp.warp._ffi import _target
from tests.support import distributed_worker as worker
from tests.support import kernels as k
from tests.support.paths import REPO

pytestmark = pytest.mark.launch_paths

_TIMEOUT = 120.0  # seconds for both workers together; a run takes about 10 s here


def _run_workers(logs: Path) -> list[dict[str, Any]]:
    """Start both workers and wait for them; return their parsed ``RESULT`` lines.

    If one worker fails, the other (which would wait for it at the next collective) is killed at once; if they do not
    finish within `_TIMEOUT`, both are killed. Either way the test fails with both workers' stderr.
    """
    with contextlib.ExitStack() as files:  # closed once started: the children hold their own copies
        streams = [
            (files.enter_context(open(logs / f"out{i}", "w")), files.enter_context(open(logs / f"err{i}", "w")))
            for i in range(worker.N_PROCESSES)
        ]
        procs = worker.start_workers(REPO, os.environ, streams)
    deadline = time.monotonic() + _TIMEOUT
    while any(p.poll() is None for p in procs) and all(p.poll() in (None, 0) for p in procs):
        if time.monotonic() > deadline:
            break
        time.sleep(0.05)
    problem = ""
    if any(p.poll() is None for p in procs):
        timed_out = time.monotonic() > deadline
        problem = f"did not finish within {_TIMEOUT:.0f} s" if timed_out else "were stopped after one failed"
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    codes = [p.returncode for p in procs]
    if problem or any(codes):
        stderr = "\n".join(f"--- process {i} ---\n{(logs / f'err{i}').read_text()[-3000:]}" for i in range(len(procs)))
        pytest.fail(f"the jax.distributed workers {problem or 'failed'} (exit codes {codes}); their stderr:\n{stderr}")
    results = []
    for i in range(len(procs)):
        lines = [line for line in (logs / f"out{i}").read_text().splitlines() if line.startswith("RESULT ")]
        assert len(lines) == 1, f"process {i} printed no result:\n{(logs / f'err{i}').read_text()[-3000:]}"
        results.append(json.loads(lines[0].removeprefix("RESULT ")))
    return results


@pytest.fixture(scope="module")
def results(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Both workers' results, from one run shared by the tests below."""
    return _run_workers(tmp_path_factory.mktemp("distributed"))


def test_shard_map_across_two_processes_matches_one_process(results: list[dict[str, Any]]) -> None:
    assert [r["process"] for r in results] == [0, 1]

    # Independent reference: out = (a s + b)^2, d/da = 2 (a s + b) s, d/db = 2 (a s + b), d/ds = sum 2 (a s + b) a.
    a, b, s = (np.asarray(v, np.float64) for v in worker.inputs())
    r = a * s + b
    expected = {"out": r**2, "value": [np.sum(r**2)], "ga": 2 * r * s, "gb": 2 * r, "gs": [np.sum(2 * r * a)]}
    # The same computation in this one process, on one device, through the same jarp kernel.
    layer = jax_kernel(k.scale_sum_square, enable_backward=True)
    a32, b32, s32 = jnp.asarray(a, jnp.float32), jnp.asarray(b, jnp.float32), jnp.float32(s)
    single_out = jax.jit(lambda a, b, s: layer(a, b, s)[0])(a32, b32, s32)
    value, grads = jax.jit(jax.value_and_grad(lambda a, b, s: jnp.sum(layer(a, b, s)[0]), argnums=(0, 1, 2)))(
        a32, b32, s32
    )
    single = {"out": single_out, "value": [value], "ga": grads[0], "gb": grads[1], "gs": [grads[2]]}

    for result in results:
        for name, want in expected.items():
            got = np.asarray(result[name])
            assert got.shape == np.shape(want), (result["process"], name, got.shape)
            np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6, err_msg=f"process {result['process']} {name}")
            np.testing.assert_allclose(got, np.asarray(single[name]), rtol=1e-6, atol=0, err_msg=name)


def test_each_process_registers_and_runs_its_own_plans(results: list[dict[str, Any]]) -> None:
    jax.jit(lambda x: jax_kernel(k.triple_kernel)(x)[0])(jnp.ones(1, jnp.float32)).block_until_ready()
    # Both processes lowered the same program to the same calls: each names its plan by content (forward and
    # adjoint of the runtime-scalar variant, in the forward and the value_and_grad program), nothing process-local.
    descriptions = [r["descriptions"] for r in results]
    assert len(descriptions[0]) == 3, descriptions[0]
    assert descriptions[0] == descriptions[1]
    assert not any('"local"' in d for d in descriptions[0]), descriptions[0]
    for result in results:
        assert result["launch_path"] == _target.launch_path()  # the workers inherit this process's JARP_LAUNCH
        # The forward kernel and Warp's adjoint each ran in this process on its own CPU devices, on one shard
        # (launch dims 16 / 4 devices = 4), not on the gathered array.
        kinds = sorted({p["kind"] for p in result["plans"]})
        assert kinds == ["adjoint", "kernel"], result["plans"]
        for plan in result["plans"]:
            assert plan["launch_dims"] == [worker.N // 4], plan
            assert plan["devices"] == ["cpu"], plan
