"""The every-CPU-core targets: jarp calls on two cores against one core (``taskset -c 0``).

Three cases, each a jitted jarp call on the CPU:

- ``vmapped``: ``jit(vmap(kernel))`` over 16 x 100,000 float32 (16 batch slices, run concurrently on XLA's pool);
- ``single``: one launch of a race-free elementwise kernel over 1.6e6 float32 (split into index ranges);
- ``single-light``: the same with a memory-bound kernel (one multiply-add per element), for honesty;
- ``small``: one launch over 1,000 elements (below the pool threshold: its time must not move).

The parent process runs child processes alternately pinned to one core (``os.sched_setaffinity``, as
``taskset -c 0``) and free on every core, for ``--rounds`` rounds; each child reports the median time of each
case. The ratio all-cores / one-core is the median over rounds (targets: ``vmapped`` and ``single`` <= 0.6). In each
child the same cases also run with ``jarp.warp.set_cpu_threads(1)``, interleaved, for the in-process ratio.

Run: ``python benchmarks/bench_threads.py [--rounds 3] [--repeats 15]``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

CASES = ("vmapped", "single", "single-light", "small")


def child(repeats: int) -> None:
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp
    import numpy as np
    import warp as wp

    wp.config.log_level = wp.LOG_WARNING  # no per-module load lines

    import jarp.warp as jw

    @wp.kernel
    def relax(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        v = x[i]
        for _ in range(16):
            v = wp.sin(v) * 0.9 + 0.5 * v
        out[i] = v

    @wp.kernel
    def axpy(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        out[i] = 1.0001 * x[i] + 0.5

    heavy, light = jw.jax_kernel(relax), jw.jax_kernel(axpy)
    key = jax.random.key(0)
    inputs = {
        "vmapped": jax.random.normal(key, (16, 100_000), jnp.float32),
        "single": jax.random.normal(key, (1_600_000,), jnp.float32),
        "single-light": jax.random.normal(key, (1_600_000,), jnp.float32),
        "small": jax.random.normal(key, (1_000,), jnp.float32),
    }
    funcs = {
        "vmapped": jax.jit(jax.vmap(lambda x: heavy(x)[0])),
        "single": jax.jit(lambda x: heavy(x)[0]),
        "single-light": jax.jit(lambda x: light(x)[0]),
        "small": jax.jit(lambda x: light(x)[0]),
    }
    times: dict[tuple[str, int], list[float]] = {(c, n): [] for c in CASES for n in (0, 1)}
    reference = {}
    for case in CASES:
        for n in (1, 0):
            jw.set_cpu_threads(n)
            out = np.asarray(jax.block_until_ready(funcs[case](inputs[case])))
            if n == 1:
                reference[case] = out
            elif not np.array_equal(out.view(np.uint32), reference[case].view(np.uint32)):
                raise SystemExit(f"{case}: the threaded result differs from the one-thread result")
    inner = {"small": 200}
    for _ in range(repeats):
        for case, n in random.sample(list(times), len(times)):
            jw.set_cpu_threads(n)
            f, x, k = funcs[case], inputs[case], inner.get(case, 1)
            t = time.perf_counter()
            for _ in range(k):
                y = f(x)
            jax.block_until_ready(y)
            times[(case, n)].append((time.perf_counter() - t) / k)
    jw.set_cpu_threads(0)
    print(json.dumps({f"{c}/{n}": statistics.median(v) for (c, n), v in times.items()}))


def run_child(pinned: bool, repeats: int) -> dict[str, float]:
    code = (
        "import os, sys; "
        + ("os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]}); " if pinned else "")
        + f"sys.argv = [''] ; import runpy; m = runpy.run_path({__file__!r}, run_name='bench_threads_child'); "
        + f"m['child']({repeats})"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15)
    args = parser.parse_args()
    if not hasattr(os, "sched_setaffinity"):
        raise SystemExit("needs os.sched_setaffinity (Linux) to pin a process to one core")
    cores = len(os.sched_getaffinity(0))
    runs: dict[str, list[dict[str, float]]] = {"one core": [], "all cores": []}
    for _ in range(args.rounds):
        for mode in random.sample(list(runs), 2):
            runs[mode].append(run_child(mode == "one core", args.repeats))

    def med(mode: str, key: str) -> float:
        return statistics.median(r[key] for r in runs[mode])

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"jarp on the CPU: {cores} cores against 1 (load average {load:.2f}; medians of {args.rounds} rounds)")
    print(f"  {'case':13s} {'1 core':>10s} {f'{cores} cores':>10s} {'ratio':>6s}   in-process threads=0 / threads=1")
    targets = {"vmapped": 0.6, "single": 0.6}
    failed = False
    for case in CASES:
        one, all_ = med("one core", f"{case}/0"), med("all cores", f"{case}/0")
        ratio = all_ / one
        inproc = med("all cores", f"{case}/0") / med("all cores", f"{case}/1")
        verdict = ""
        if case in targets:
            ok = ratio <= targets[case]
            failed |= not ok
            verdict = f"(target <= {targets[case]}: {'PASS' if ok else 'FAIL'})"
        unit, scale = ("us", 1e6) if case == "small" else ("ms", 1e3)
        print(f"  {case:13s} {one * scale:8.2f}{unit} {all_ * scale:8.2f}{unit} {ratio:6.2f}   {inproc:.2f} {verdict}")
    print(f"  targets: {'FAIL' if failed else 'PASS'}")


if __name__ == "__main__":
    main()
