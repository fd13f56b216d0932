"""One of two `jax.distributed` processes that run a jarp kernel under `shard_map` over a global mesh.

`tests/warp/transforms/test_distributed.py` starts this module twice on localhost (process ids 0 and 1), each with two
CPU devices, so the global mesh has four devices split across two processes; cross-process collectives go through gloo.
Each process defines the same kernel (it imports `tests.support.kernels`), lowers its own program and registers its own
plans, then computes ``sum((a * s + b) ** 2)`` with the kernel on each shard, and its gradient in ``a``, ``b`` and the
replicated scalar ``s`` (whose cotangent is summed over all four devices, across the process boundary). It prints one
``RESULT <json>`` line with the gathered values and what it registered.

    XLA_FLAGS=--xla_force_host_platform_device_count=2 JAX_PLATFORMS=cpu \
        python -m tests.support.distributed_worker <coordinator port> <process id>
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.experimental import multihost_utils
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

# Importing jarp and defining kernels does not start a JAX backend, so it may come before jax.distributed.initialize.
from jarp.warp import jax_kernel, list_plans
from jarp.warp._ffi import _target

from . import kernels as k
from .lowered import custom_calls

N_PROCESSES = 2
LOCAL_DEVICES = 2
N = 16  # global length: four elements per device


def start_workers(cwd: Path, env: Mapping[str, str], streams: Sequence[tuple[Any, Any]]) -> list[subprocess.Popen]:
    """Start the `N_PROCESSES` workers on a free localhost port, each with `LOCAL_DEVICES` CPU devices.

    Args:
        cwd: the checkout whose ``tests.support.distributed_worker`` (and ``jarp``) the workers import.
        env: the environment; the device count and ``JAX_PLATFORMS=cpu`` are set on top of it.
        streams: ``(stdout, stderr)`` for each process, as `subprocess.Popen` takes them.

    Returns:
        The started processes, in process-id order.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    env = dict(env, XLA_FLAGS=f"--xla_force_host_platform_device_count={LOCAL_DEVICES}", JAX_PLATFORMS="cpu")
    return [
        subprocess.Popen(
            [sys.executable, "-m", "tests.support.distributed_worker", str(port), str(i)],
            cwd=cwd,
            env=env,
            stdout=out,
            stderr=err,
            text=True,
        )
        for i, (out, err) in enumerate(streams)
    ]


def inputs() -> tuple[list[float], list[float], float]:
    """The global inputs ``a``, ``b`` and the scalar ``s``, the same in every process (and in the test)."""
    a = [-2.0 + 0.25 * i for i in range(N)]
    b = [0.5 - 0.125 * i for i in range(N)]
    return a, b, 1.5


def main(port: int, process_id: int) -> dict[str, object]:
    """Join the two-process job, run the sharded kernel forward and backward, and return what to report."""
    # --8<-- [start:distributed]
    jax.config.update("jax_cpu_collectives_implementation", "gloo")  # JAX's default for CPU processes
    jax.distributed.initialize(
        coordinator_address=f"127.0.0.1:{port}",
        num_processes=N_PROCESSES,
        process_id=process_id,
        initialization_timeout=60,
    )

    assert jax.process_count() == N_PROCESSES, jax.process_count()
    assert jax.local_device_count() == LOCAL_DEVICES, jax.local_devices()
    assert jax.device_count() == N_PROCESSES * LOCAL_DEVICES, jax.devices()

    layer = jax_kernel(k.scale_sum_square, enable_backward=True)
    mesh = jax.make_mesh((jax.device_count(),), ("d",))
    sharded = NamedSharding(mesh, P("d"))
    a_host, b_host, s_host = (np.asarray(v, np.float32) for v in inputs())
    # Each process places only its own shards; the global arrays span both processes.
    a = jax.make_array_from_callback((N,), sharded, lambda index: a_host[index])
    b = jax.make_array_from_callback((N,), sharded, lambda index: b_host[index])
    s = jax.device_put(jnp.float32(s_host), NamedSharding(mesh, P()))  # replicated over the global mesh

    per_shard = jax.shard_map(
        lambda a, b, s: layer(a, b, s)[0], mesh=mesh, in_specs=(P("d"), P("d"), P()), out_specs=P("d")
    )

    def loss(a: jax.Array, b: jax.Array, s: jax.Array) -> jax.Array:
        return jnp.sum(per_shard(a, b, s))

    forward = jax.jit(per_shard)
    value_and_grad = jax.jit(jax.value_and_grad(loss, argnums=(0, 1, 2)))
    out = forward(a, b, s)
    value, (ga, gb, gs) = value_and_grad(a, b, s)
    # --8<-- [end:distributed]
    assert len(out.addressable_shards) == LOCAL_DEVICES
    assert not out.is_fully_addressable

    def gathered(x: jax.Array) -> list[float]:
        return np.asarray(multihost_utils.process_allgather(x, tiled=True), np.float64).ravel().tolist()

    # Gather first: it waits for the computations, so every plan has run by the time the registry is listed.
    result: dict[str, object] = {
        "out": gathered(out),
        "value": gathered(value),
        "ga": gathered(ga),
        "gb": gathered(gb),
        "gs": gathered(gs),
    }
    plans = [
        {"kind": p.kind, "launch_dims": list(p.launch_dims), "devices": list(p.devices)}
        for p in list_plans()
        if p.kernel.startswith(k.scale_sum_square.key)  # jarp's runtime-scalar variant of the kernel
    ]
    # Each call names its plan by content (its description), the same in every process of the job.
    calls = [c for f in (forward, value_and_grad) for c in custom_calls(f.lower(a, b, s).as_text())]
    descriptions = sorted(c["desc"] for c in calls if c["target"].startswith("jarp_warp_call"))
    # jarp releases a plan once no executable uses it; the two jitted functions hold theirs until here.
    del forward, value_and_grad
    result.update(
        process=jax.process_index(), descriptions=descriptions, launch_path=_target.launch_path(), plans=plans
    )
    return result


if __name__ == "__main__":
    try:
        result = main(int(sys.argv[1]), int(sys.argv[2]))
        jax.distributed.shutdown()  # a barrier: neither process leaves while the other still needs the coordinator
    except BaseException:
        # Exit now: a normal exit would wait for the other process at jax.distributed's shutdown barrier.
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    print("RESULT " + json.dumps(result), flush=True)
