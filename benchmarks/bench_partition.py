"""The batch-partitioning target: ``jit(vmap(kernel))`` over a batch sharded 4 ways vs the same batch replicated.

Sets up four CPU devices itself (``--xla_force_host_platform_device_count=4``). A batch of independent rows is
run through a jarp kernel (with an input broadcast across the batch) under ``jax.jit(jax.vmap(...))``, once with
the batch sharded over the four devices (``NamedSharding(mesh, P("b"))``: XLA partitions the call, each device
runs its quarter of the slices) and once replicated (every device runs every slice). The two are timed
interleaved, medians reported, with the ratio sharded / replicated (target <= 0.35) and whether the sharded
program's compiled text has an all-gather (it must not). The four CPU "devices" share this machine's cores, so the
ratio can only approach 0.25 with at least four idle cores.

Run: ``python benchmarks/bench_partition.py [--rows 16] [--size 100000] [--shardy|--gspmd]``.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax
import numpy as np
import warp as wp
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

wp.config.log_level = wp.LOG_WARNING  # no banner, no per-module load lines

from jarp.warp import jax_kernel  # noqa: E402


@wp.kernel
def relax(x: wp.array(dtype=float), w: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    v = x[i]
    for _ in range(16):
        v = wp.sin(v) * w[i] + 0.5 * v
    out[i] = v


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=16)
    parser.add_argument("--size", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=15)
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--shardy", action="store_true", help="Shardy (JAX's default)")
    group.add_argument("--gspmd", action="store_true", help="GSPMD sharding propagation")
    args = parser.parse_args()
    if args.gspmd:
        jax.config.update("jax_use_shardy_partitioner", False)
    assert jax.device_count() == 4, "needs four CPU devices"
    kernel = jax_kernel(relax)
    rng = np.random.default_rng(0)
    xs = rng.standard_normal((args.rows, args.size)).astype(np.float32)
    w = rng.standard_normal(args.size).astype(np.float32)
    mesh = jax.make_mesh((4,), ("b",), axis_types=(jax.sharding.AxisType.Auto,))
    sharded = jax.device_put(xs, NamedSharding(mesh, P("b")))
    replicated = jax.device_put(xs, NamedSharding(mesh, P()))
    f = jax.jit(jax.vmap(lambda x: kernel(x, w)[0]))
    gathers = "all-gather" in f.lower(sharded).compile().as_text()
    out_s, out_r = f(sharded), f(replicated)
    np.testing.assert_allclose(np.asarray(out_s), np.asarray(out_r), rtol=1e-6)
    times: dict[str, list[float]] = {"sharded": [], "replicated": []}
    inputs = {"sharded": sharded, "replicated": replicated}
    for _ in range(args.repeats):
        for name in random.sample(list(times), 2):
            t = time.perf_counter()
            jax.block_until_ready(f(inputs[name]))
            times[name].append(time.perf_counter() - t)
    med = {name: statistics.median(v) for name, v in times.items()}
    ratio = med["sharded"] / med["replicated"]
    partitioner = "gspmd" if args.gspmd else "shardy"
    print(
        f"jit(vmap(kernel)) over {args.rows} x {args.size} float32 on 4 CPU devices ({os.cpu_count()} cores, {partitioner})"
    )
    for name, m in med.items():
        print(f"  {name:10s} {m * 1e3:9.2f} ms")
    print(f"  sharded / replicated: {ratio:.2f} (target <= 0.35: {'PASS' if ratio <= 0.35 else 'FAIL'})")
    print(f"  all-gather in the sharded program: {gathers} ({'FAIL' if gathers else 'PASS'})")
    sys.exit(0)


if __name__ == "__main__":
    main()
