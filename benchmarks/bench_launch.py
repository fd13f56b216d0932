"""Launch-path benchmark: jarp vs Warp's own JAX FFI (``wp.jax_kernel``) in one process.

Prints medians and ratios (jarp / warp). Run: ``python benchmarks/bench_launch.py``.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
import tracemalloc
from pathlib import Path

import jax
import jax.numpy as jnp
import warp as wp

sys.path.insert(0, str(Path(__file__).parent))
wp.config.quiet = True

import _kernels as K  # noqa: E402

import jarp.warp  # noqa: E402


def median_time(fn, *args, repeat: int = 200, inner: int = 1) -> float:
    jax.block_until_ready(fn(*args))
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(inner):
            out = fn(*args)
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - t0) / inner)
    return statistics.median(samples)


def chain(k, n_launch):
    def f(x):
        for _ in range(n_launch):
            (x,) = k(x)
        return x

    return jax.jit(f)


def marginal_launch(warp_k, jarp_k, repeat):
    x = jnp.ones(8, jnp.float32)
    res = {}
    for name, k in (("warp", warp_k), ("jarp", jarp_k)):
        t1 = median_time(chain(k, 1), x, repeat=repeat)
        t21 = median_time(chain(k, 21), x, repeat=repeat)
        res[name] = (t21 - t1) / 20
    return res


def grad_cost(repeat):
    x = jnp.linspace(0.0, 1.0, 1000, dtype=jnp.float32)
    wk = wp.jax_kernel(K.square, enable_backward=True)
    jk = jarp.warp.jax_kernel(K.square, enable_backward=True)
    res = {}
    for name, k in (("warp", wk), ("jarp", jk)):
        g = jax.jit(jax.grad(lambda x, k=k: jnp.sum(k(x)[0])))
        res[name] = median_time(g, x, repeat=repeat)
    res["jnp"] = median_time(jax.jit(jax.grad(lambda x: jnp.sum(x * x))), x, repeat=repeat)
    return res


def vmap_cost(repeat):
    x = jnp.ones((16, 1000), jnp.float32)
    wk = wp.jax_kernel(K.axpy)  # Warp default: broadcast_all (folds the batch)
    jk = jarp.warp.jax_kernel(K.axpy)  # jarp default: sequential (correct for any kernel)
    res = {}
    for name, k in (("warp broadcast_all", wk), ("jarp sequential", jk)):
        res[name] = median_time(jax.jit(jax.vmap(lambda x, k=k: k(x)[0])), x, repeat=repeat)
    return res


def large_cost(repeat):
    x = jnp.ones(1_000_000, jnp.float32)
    res = {}
    for name, k in (("warp", wp.jax_kernel(K.axpy)), ("jarp", jarp.warp.jax_kernel(K.axpy))):
        res[name] = median_time(jax.jit(lambda x, k=k: k(x)[0]), x, repeat=repeat)
    return res


def trace_memory(n_traces):
    x = jnp.ones(8, jnp.float32)
    res = {}
    for name, k in (("warp", wp.jax_kernel(K.axpy)), ("jarp", jarp.warp.jax_kernel(K.axpy))):
        jax.jit(lambda x, k=k: k(x)[0]).lower(x)  # warm up caches
        gc.collect()
        tracemalloc.start()
        before = tracemalloc.take_snapshot()
        for _ in range(n_traces):
            jax.jit(lambda x, k=k: k(x)[0]).trace(x)  # a fresh function: a fresh trace every time
        gc.collect()
        after = tracemalloc.take_snapshot()
        tracemalloc.stop()
        res[name] = sum(s.size_diff for s in after.compare_to(before, "filename"))
    return res


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    r = args.repeat
    m = marginal_launch(wp.jax_kernel(K.axpy), jarp.warp.jax_kernel(K.axpy), r)
    print(
        f"marginal launch (chain of 20, n=8): warp {m['warp'] * 1e6:.2f} us, jarp {m['jarp'] * 1e6:.2f} us, "
        f"ratio {m['jarp'] / m['warp']:.3f} (target <= 0.333, aim 0.1)"
    )
    g = grad_cost(r)
    print(
        f"grad n=1000: warp {g['warp'] * 1e6:.1f} us, jarp {g['jarp'] * 1e6:.1f} us, jnp {g['jnp'] * 1e6:.1f} us, "
        f"ratio {g['jarp'] / g['warp']:.3f} (target <= 0.5, aim 0.2)"
    )
    v = vmap_cost(r)
    print(
        f"vmap 16x1000: warp broadcast_all {v['warp broadcast_all'] * 1e6:.1f} us, jarp sequential "
        f"{v['jarp sequential'] * 1e6:.1f} us, ratio {v['jarp sequential'] / v['warp broadcast_all']:.3f} "
        "(target <= 1.5)"
    )
    big = large_cost(max(20, r // 10))
    print(
        f"n=1e6: warp {big['warp'] * 1e3:.3f} ms, jarp {big['jarp'] * 1e3:.3f} ms, "
        f"ratio {big['jarp'] / big['warp']:.3f} (target <= 1.05)"
    )
    mem = trace_memory(400)
    print(
        f"400 fresh traces: warp {mem['warp'] / 1e3:.1f} kB, jarp {mem['jarp'] / 1e3:.1f} kB retained "
        "(target jarp < 150 kB)"
    )


if __name__ == "__main__":
    main()
