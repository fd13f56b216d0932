"""Timing shared by the benchmarks: interleaved calls, medians."""

from __future__ import annotations

import random
import statistics
import time

import jax


def interleaved(variants: dict, repeat: int) -> dict[str, float]:
    """Median seconds per call of each ``name: (fn, args)``, one call of each per repeat in a random order."""
    names = list(variants)
    for fn, args in variants.values():
        jax.block_until_ready(fn(*args))
    samples: dict[str, list[float]] = {n: [] for n in names}
    # A fresh random order each round: with a rotation, a variant follows the same neighbour in most rounds
    # (one after Warp's bridge, whose Python callback leaves the next call slower, measured 14.8 vs 20.8 us).
    rng = random.Random(0)
    for _ in range(repeat):
        order = names[:]
        rng.shuffle(order)
        for name in order:
            fn, args = variants[name]
            t0 = time.perf_counter()
            _wait(fn(*args))
            samples[name].append(time.perf_counter() - t0)
    return {n: statistics.median(v) for n, v in samples.items()}


def _wait(out):
    """Block until ``out`` is computed. A single array waits through its own method: `jax.block_until_ready`
    flattens a pytree in Python first, which costs ~5 us a call and would count against the call timed."""
    if isinstance(out, jax.Array):
        return out.block_until_ready()
    return jax.block_until_ready(out)
