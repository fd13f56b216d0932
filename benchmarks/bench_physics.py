"""Physics benchmark: a mass-spring energy and its gradient in pure `jax.numpy` vs jarp Warp kernels.

The energy is ``sum_e 0.5 k_e (|x_i - x_j| - L_e)^2`` over random springs between ``n = m / 2`` nodes in 3D (the edge
list is sorted by first node, as a mesh's usually is). Each variant is jitted and timed as the median of many calls
with ``jax.block_until_ready``:

* energy: ``jnp`` expression vs the Warp energy kernel (accumulating with ``wp.atomic_add``);
* gradient: ``jax.grad`` of the ``jnp`` expression vs the hand-written Warp gradient kernel, and vs ``jax.grad`` of
  the Warp energy kernel (Warp's generated adjoint, ``enable_backward=True``).

The kernels are generic over the float type (``typing.Any`` parameters resolved by ``arg_types_factory``), so one
source serves float32 and float64. Every result is checked against the ``jnp`` one before it is timed.

Run: ``python benchmarks/bench_physics.py`` (about a minute on 2 CPU cores; ``--sizes 10000 --repeat 20`` for a quick
look). Prints a Markdown table; ratios are jarp / jnp, so below 1 means the Warp kernel is faster.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import warp as wp

import jarp.warp

jax.config.update("jax_enable_x64", True)  # float64 must be available; every array below has an explicit dtype
wp.config.log_level = wp.LOG_WARNING  # no banner, no per-module load lines


@wp.kernel
def spring_energy(
    x: wp.array(dtype=Any),
    edges: wp.array(dtype=wp.vec2i),
    k: wp.array(dtype=Any),
    rest: wp.array(dtype=Any),
    energy: wp.array(dtype=Any),
):
    """Accumulate ``0.5 k (|x_i - x_j| - L)^2`` of spring ``e`` into ``energy[0]``."""
    e = wp.tid()
    d = x[edges[e][0]] - x[edges[e][1]]
    s = wp.length(d) - rest[e]
    wp.atomic_add(energy, 0, type(s)(0.5) * k[e] * s * s)


@wp.kernel
def spring_grad(
    x: wp.array(dtype=Any),
    edges: wp.array(dtype=wp.vec2i),
    k: wp.array(dtype=Any),
    rest: wp.array(dtype=Any),
    grad: wp.array(dtype=Any),
):
    """Scatter the gradient of spring ``e``'s energy onto its two end nodes."""
    e = wp.tid()
    i = edges[e][0]
    j = edges[e][1]
    d = x[i] - x[j]
    length = wp.length(d)
    f = k[e] * (length - rest[e]) / length * d
    wp.atomic_add(grad, i, f)
    wp.atomic_sub(grad, j, f)


def energy_types(x: Any, edges: Any, k: Any, rest: Any) -> list[Any]:
    """``arg_types_factory`` of `spring_energy`: the Warp scalar dtype of each runtime argument -> argument types."""
    vec = wp.types.vector(3, x)
    return [wp.array(dtype=vec), wp.array(dtype=wp.vec2i), wp.array(dtype=k), wp.array(dtype=k), wp.array(dtype=k)]


def grad_types(x: Any, edges: Any, k: Any, rest: Any) -> list[Any]:
    """``arg_types_factory`` of `spring_grad`."""
    vec = wp.types.vector(3, x)
    return [wp.array(dtype=vec), wp.array(dtype=wp.vec2i), wp.array(dtype=k), wp.array(dtype=k), wp.array(dtype=vec)]


# Declare both overloads up front: a new overload rebuilds the Warp module, which should not happen mid-run.
for _scalar in (wp.float32, wp.float64):
    wp.overload(spring_energy, energy_types(_scalar, wp.int32, _scalar, _scalar))
    wp.overload(spring_grad, grad_types(_scalar, wp.int32, _scalar, _scalar))


def jnp_energy(x: jax.Array, edges: jax.Array, k: jax.Array, rest: jax.Array) -> jax.Array:
    """The same energy in pure `jax.numpy`."""
    d = x[edges[:, 0]] - x[edges[:, 1]]
    s = jnp.sqrt(jnp.sum(d * d, axis=-1)) - rest
    return jnp.sum(0.5 * k * s * s)


def problem(m: int, dtype: Any, seed: int = 0) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """``m`` random springs between ``m // 2`` random points in the unit cube: x, edges, k, rest."""
    rng = np.random.default_rng(seed)
    n = max(m // 2, 2)
    x = rng.random((n, 3))
    i = rng.integers(0, n, m)
    j = (i + rng.integers(1, n, m)) % n  # never i itself
    edges = np.stack([i, j], axis=-1)
    edges = edges[np.argsort(edges[:, 0], kind="stable")].astype(np.int32)
    k = 0.5 + rng.random(m)
    rest = np.linalg.norm(x[edges[:, 0]] - x[edges[:, 1]], axis=-1) * (0.8 + 0.4 * rng.random(m))
    return jnp.asarray(x, dtype), jnp.asarray(edges), jnp.asarray(k, dtype), jnp.asarray(rest, dtype)


def median_times(fns: dict[str, Callable[..., Any]], *args: Any, repeat: int, budget: float) -> dict[str, float]:
    """Median wall time of each ``fn(*args)`` over ``repeat`` rounds (fewer if ``budget`` seconds run out, at least 5).

    The functions are timed in turn within each round, so a change in the machine's load hits all of them alike and
    the ratios stay meaningful on a shared machine. Each is called once first to compile and warm up.
    """
    for fn in fns.values():
        jax.block_until_ready(fn(*args))
    samples: dict[str, list[float]] = {name: [] for name in fns}
    deadline = time.perf_counter() + budget
    for r in range(repeat):
        if r >= 5 and time.perf_counter() > deadline:
            break
        for name, fn in fns.items():
            t0 = time.perf_counter()
            jax.block_until_ready(fn(*args))
            samples[name].append(time.perf_counter() - t0)
    return {name: statistics.median(ts) for name, ts in samples.items()}


def bench(m: int, dtype: Any, repeat: int, budget: float) -> dict[str, float]:
    """Time the five variants on ``m`` springs after checking that they agree.

    Returns the median times by variant name, and the relative error of each energy against a float64 evaluation
    (``"energy jnp error"``, ``"energy jarp error"``).
    """
    x, edges, k, rest = problem(m, dtype)
    n = x.shape[0]
    energy_mod = jarp.warp.jax_kernel(
        spring_energy, arg_types_factory=energy_types, launch_dims=m, output_dims=1, enable_backward=True
    )
    grad_mod = jarp.warp.jax_kernel(spring_grad, arg_types_factory=grad_types, launch_dims=m, output_dims=n)

    variants: dict[str, Callable[..., Any]] = {
        "energy jnp": jax.jit(jnp_energy),
        "energy jarp": jax.jit(lambda *a: energy_mod(*a)[0][0]),
        "grad jnp": jax.jit(jax.grad(jnp_energy)),
        "grad jarp": jax.jit(lambda *a: grad_mod(*a)[0]),
        "grad adjoint": jax.jit(jax.grad(lambda *a: energy_mod(*a)[0][0])),
    }
    # Agreement first. The energy is also compared with a float64 evaluation of the same inputs: in float32 a single
    # atomic accumulator (Warp) drifts further than XLA's tree reduction as the spring count grows.
    args = (x, edges, k, rest)
    exact = float(jax.jit(jnp_energy)(*(a.astype(jnp.float64) if a.dtype == dtype else a for a in args)))
    errors = {name: abs(float(variants[name](*args)) - exact) / abs(exact) for name in ("energy jnp", "energy jarp")}
    limit = 1e-2 if dtype == jnp.float32 else 1e-10
    if max(errors.values()) > limit:
        raise AssertionError(f"energy disagrees with the float64 reference: {errors}")
    g_ref = variants["grad jnp"](*args)
    atol = (1e-4 if dtype == jnp.float32 else 1e-10) * float(jnp.max(jnp.abs(g_ref)))
    for name in ("grad jarp", "grad adjoint"):
        np.testing.assert_allclose(variants[name](*args), g_ref, atol=atol, err_msg=name)
    times = median_times(variants, *args, repeat=repeat, budget=budget)
    return times | {f"{name} error": err for name, err in errors.items()}


def fmt(seconds: float) -> str:
    """A duration in ms or us."""
    return f"{seconds * 1e3:.2f} ms" if seconds >= 1e-3 else f"{seconds * 1e6:.0f} us"


def main() -> None:
    """Run every size and dtype and print the Markdown table."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000, 1_000_000], help="spring counts")
    parser.add_argument("--repeat", type=int, default=100, help="calls per median (fewer if --budget runs out)")
    parser.add_argument("--budget", type=float, default=15.0, help="seconds of timing per size and dtype, at most")
    args = parser.parse_args()

    header = (
        "| springs | dtype | energy: jnp | energy: jarp | ratio | gradient: jnp (`jax.grad`) | "
        "gradient: jarp kernel | ratio | gradient: `jax.grad` of the jarp energy (Warp adjoint) | ratio | "
        "energy rel. error jnp / jarp |"
    )
    rows = [header, "|" + "---|" * (header.count("|") - 1)]
    for m in args.sizes:
        for dtype in (jnp.float32, jnp.float64):
            t = bench(m, dtype, args.repeat, args.budget)
            rows.append(
                f"| {m:,} | {jnp.dtype(dtype).name} | {fmt(t['energy jnp'])} | {fmt(t['energy jarp'])} | "
                f"{t['energy jarp'] / t['energy jnp']:.2f} | {fmt(t['grad jnp'])} | {fmt(t['grad jarp'])} | "
                f"{t['grad jarp'] / t['grad jnp']:.2f} | {fmt(t['grad adjoint'])} | "
                f"{t['grad adjoint'] / t['grad jnp']:.2f} | {t['energy jnp error']:.0e} / {t['energy jarp error']:.0e} |"
            )
            print(rows[-1], flush=True)
    print()
    print("\n".join(rows))


if __name__ == "__main__":
    main()
