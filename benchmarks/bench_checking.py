"""Checking mode's cost: a call with every launch verified (`jarp.warp.set_checking_mode`) against the same call
without, in one process.

For each kernel and size, rounds alternate the mode (checking on, then off, in a fresh random order per round; a
switch rebuilds the executors, so each round first makes one untimed call) and time ``--calls`` calls per round;
the medians over all rounds of each mode give the ratio. Kernels: a race-free map (its fill skipped, its launch
checked as two ranges too), an accumulation (privatised) and a map with an in-out array. Run:
``python benchmarks/bench_checking.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import time

import jax
import jax.numpy as jnp
import warp as wp

wp.config.log_level = wp.LOG_WARNING

import jarp.warp  # noqa: E402


@wp.kernel
def saxpy(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = 2.0 * x[i] + 1.0


@wp.kernel
def total(x: wp.array(dtype=float), s: wp.array(dtype=float)):
    i = wp.tid()
    wp.atomic_add(s, 0, x[i])


@wp.kernel
def bump(x: wp.array(dtype=float), y: wp.array(dtype=float)):
    i = wp.tid()
    y[i] = y[i] + x[i]


def cases(n: int) -> dict[str, tuple]:
    x = jnp.linspace(0.0, 1.0, n, dtype=jnp.float32)
    return {
        "map (fill skipped, split)": (jax.jit(jarp.warp.jax_kernel(saxpy, num_outputs=1)), (x,)),
        "accumulation (privatised)": (
            jax.jit(jarp.warp.jax_kernel(total, num_outputs=1, output_dims={"s": 1})),
            (x,),
        ),
        "in-out map": (jax.jit(jarp.warp.jax_kernel(bump, in_out_argnames=("y",))), (x, jnp.zeros_like(x))),
    }


def timed(fn, args, calls: int) -> list[float]:
    jax.block_until_ready(fn(*args))  # the switch rebuilt the executor: not timed
    out = []
    for _ in range(calls):
        t0 = time.perf_counter()
        jax.block_until_ready(fn(*args))
        out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 100_000, 1_000_000])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=15)
    parser.add_argument("--json", help="write the medians here")
    args = parser.parse_args()
    rng = random.Random(0)
    results = []
    print(f"load average {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs")
    for n in args.sizes:
        for name, (fn, fargs) in cases(n).items():
            samples: dict[bool, list[float]] = {True: [], False: []}
            for _ in range(args.rounds):
                order = [True, False]
                rng.shuffle(order)
                for mode in order:
                    jarp.warp.set_checking_mode(mode)
                    samples[mode] += timed(fn, fargs, args.calls)
            jarp.warp.set_checking_mode(False)
            on, off = (statistics.median(samples[m]) for m in (True, False))
            results.append({"kernel": name, "n": n, "checked_s": on, "unchecked_s": off, "ratio": on / off})
            print(
                f"{name:28s} n={n:>9,d}  unchecked {off * 1e6:10.1f} us  checked {on * 1e6:10.1f} us  x{on / off:6.1f}"
            )
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
