"""The every-CPU-core targets: jarp calls on two cores against one core (``taskset -c 0``).

The cases, each a jitted jarp call on the CPU:

- ``vmapped``: ``jit(vmap(kernel))`` over 16 x 100,000 float32 (16 batch slices, run concurrently on XLA's pool);
- ``single``: one launch of a race-free elementwise kernel over 1.6e6 float32 (split into index ranges);
- ``single-light``: the same with a memory-bound kernel (one multiply-add per element), for honesty;
- ``fem-1e5``, ``fem-1e4``: the FEM benchmark's energy + gradient (``examples/hyperelastic.py``'s Stable
  Neo-Hookean kernels, float64, scattering into the vertices with ``wp.atomic_add`` as written) on beams of 100,386
  and 9,936 tetrahedra: split with private copies of the accumulated arrays (timed over 10 and 50 consecutive calls:
  a solver calls them back to back; the first call after the cores were idle also waits for a helper to wake);
- ``neighbours``: a per-particle loop over all 10,000 particles (a cutoff pair energy): few, long threads, split by
  the measured cost of a launch (the work threshold);
- ``adjoint``: ``jit(grad)`` of a mass-spring energy through Warp's adjoint (float64, 400,000 springs between nearby
  vertices of 100,000, the energy summed with ``wp.atomic_add``): the backward launch accumulates into the gradient
  of the positions, split with a private copy of it;
- ``small``: one launch over 1,000 elements (below the pool threshold: its time must not move);
- ``capacity``: a probe of what the cores give together for pure arithmetic (eight independent multiply-add chains
  per thread, no memory traffic), to read the other rows against: on a shared machine, two virtual CPUs need not be
  two independent cores at every moment.

Each of ``--rounds`` child processes times every case in several modes, interleaved call by call in random order
(a shared machine's speed drifts within seconds, so comparing separate processes would compare moments): on every
core with every thread; with every thread of the process pinned to core c (``os.sched_setaffinity`` on each thread,
as ``taskset -c c``) and one jarp thread, for each core c; and on every core with ``jarp.warp.set_cpu_threads(1)``
(the in-process ratio). The table gives medians over rounds. "1 core" is the faster core (the cores of a shared
machine need not be equally fast); "ideal" is what the cores could do together at the speeds each showed alone
(targets: ``vmapped``, ``single``, ``fem-1e5`` and ``neighbours`` <= 0.6, ``fem-1e4`` <= 0.7).

``--busy`` measures the machine under load instead: two busy processes spin on every core while one child times
``single`` with every thread against one thread, interleaved (target: threaded <= 1.05 x one thread).

``--probe`` asks the machine instead of jarp: one-thread processes of the FEM, neighbour-loop and capacity cases,
pinned one to a core, alone and side by side at the same moment. A ratio near 1 says the cores can run the case
together at full speed, so a split launch's shortfall is jarp's (or the moment's); well above 1 says the machine
cannot give more.

Run: ``python benchmarks/bench_threads.py [--rounds 3] [--repeats 15] [--busy | --probe]``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import random
import statistics
import subprocess
import sys
import time

CASES = ("vmapped", "single", "single-light", "fem-1e5", "fem-1e4", "neighbours", "adjoint", "small", "capacity")
# Cases whose threaded result may differ from one thread's by rounding (sums combined from private copies).
ROUNDED = ("fem-1e5", "fem-1e4", "adjoint")
# The cases `probe` runs (those whose targets depend on the machine's memory system as much as on jarp).
PROBED = ("fem-1e5", "fem-1e4", "neighbours", "capacity")
TARGETS = {"vmapped": 0.6, "single": 0.6, "fem-1e5": 0.6, "fem-1e4": 0.7, "neighbours": 0.6}


def _fem(cells: tuple[int, int, int]) -> tuple[object, tuple[object, ...]]:
    """``jit(value_and_grad(E))`` of the FEM benchmark's energy on a beam, and its arguments."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import bench_fem

    mod = bench_fem.example(jnp.float64)
    beam = bench_fem.fem64.make_beam(*cells, regions=bench_fem.REGIONS)
    rng = np.random.default_rng(0)
    x = beam.rest @ np.array([[1.1, 0.2, 0.0], [0.0, 0.8, 0.1], [0.05, 0.0, 1.2]])
    x = x + 0.002 * rng.standard_normal(x.shape)
    mesh = mod.MeshArrays(jnp.asarray(beam.tets), jnp.asarray(beam.Dm_inv), jnp.asarray(beam.vol))
    material = mod.MaterialArrays(jnp.asarray(beam.region), 0.3)
    log_youngs = jnp.log(jnp.linspace(1.0e6, 4.0e6, bench_fem.REGIONS))
    energy = mod.snh_energy(beam.rest.shape[0], beam.tets.shape[0])
    return jax.jit(jax.value_and_grad(energy)), (jnp.asarray(x), mesh, material, log_youngs)


def _gradient(f: object, args: tuple[object, ...], _: object) -> object:
    return f(*args)[1]  # type: ignore[operator]


def _call(f: object, args: tuple[object, ...], _: object) -> object:
    return f(*args)  # type: ignore[operator]


def _environment() -> None:
    """JAX's settings for the cases, before JAX is imported."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ.setdefault("JAX_ENABLE_X64", "1")  # the FEM cases are float64 (the others pass float32 arrays)


def _cases(cases: tuple[str, ...]) -> tuple[dict[str, object], dict[str, object]]:
    """The jitted function of each case and its input (``funcs[case](inputs[case])`` runs it)."""
    _environment()
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

    @wp.kernel
    def pair_energy(x: wp.array(dtype=wp.vec3), cutoff: float, e: wp.array(dtype=float)):
        i = wp.tid()
        p = x[i]
        s = wp.float32(0.0)
        for j in range(x.shape[0]):
            r = wp.length(x[j] - p)
            if j != i and r < cutoff:
                s += (cutoff - r) * (cutoff - r)
        e[i] = s

    @wp.kernel
    def chains(x: wp.array(dtype=float), out: wp.array(dtype=float)):
        i = wp.tid()
        v = x[i]
        a, b, c, d = v, v + 1.0, v + 2.0, v + 3.0
        e, f, g, h = v + 4.0, v + 5.0, v + 6.0, v + 7.0
        for _ in range(256):
            a, b, c, d = a * 0.999 + 0.001, b * 0.998 + 0.002, c * 0.997 + 0.003, d * 0.996 + 0.004
            e, f, g, h = e * 0.995 + 0.005, f * 0.994 + 0.006, g * 0.993 + 0.007, h * 0.992 + 0.008
        out[i] = a + b + c + d + e + f + g + h

    @wp.kernel
    def spring_energy(
        edges: wp.array(dtype=wp.vec2i),
        x: wp.array(dtype=wp.vec3d),
        rest: wp.array(dtype=wp.float64),
        k: wp.float64,
        energy: wp.array(dtype=wp.float64),
    ):
        e = wp.tid()
        a = edges[e]
        d = wp.length(x[a[1]] - x[a[0]]) - rest[e]
        wp.atomic_add(energy, 0, wp.float64(0.5) * k * d * d)

    heavy, light, pairs = jw.jax_kernel(relax), jw.jax_kernel(axpy), jw.jax_kernel(pair_energy)
    springs = jw.jax_kernel(spring_energy, output_dims=1, enable_backward=True)
    throughput = jw.jax_kernel(chains)
    key = jax.random.key(0)
    inputs = {
        "vmapped": jax.random.normal(key, (16, 100_000), jnp.float32),
        "single": jax.random.normal(key, (1_600_000,), jnp.float32),
        "single-light": jax.random.normal(key, (1_600_000,), jnp.float32),
        "small": jax.random.normal(key, (1_000,), jnp.float32),
        "neighbours": jax.random.uniform(key, (10_000, 3), jnp.float32),
        "capacity": jax.random.normal(key, (400_000,), jnp.float32),
    }
    funcs = {
        "vmapped": jax.jit(jax.vmap(lambda x: heavy(x)[0])),
        "single": jax.jit(lambda x: heavy(x)[0]),
        "single-light": jax.jit(lambda x: light(x)[0]),
        "small": jax.jit(lambda x: light(x)[0]),
        "neighbours": jax.jit(lambda x: pairs(x, 0.05)[0]),
        "capacity": jax.jit(lambda x: throughput(x)[0]),
    }
    if "adjoint" in cases:
        rng = np.random.default_rng(0)
        n_verts, n_springs = 100_000, 400_000
        start = np.arange(n_springs) // 4
        edges = np.stack([start, (start + rng.integers(1, 64, n_springs)) % n_verts], axis=1).astype(np.int32)
        x = jnp.asarray(rng.standard_normal((n_verts, 3)), jnp.float64)
        rest = jnp.asarray(rng.uniform(0.5, 1.5, n_springs), jnp.float64)
        grad = jax.jit(jax.grad(lambda x, edges, rest: springs(edges, x, rest, 2.0)[0][0]))
        funcs["adjoint"], inputs["adjoint"] = functools.partial(_call, grad, (x, jnp.asarray(edges), rest)), None
    for case, cells in (("fem-1e5", (99, 13, 13)), ("fem-1e4", (46, 6, 6))):
        if case in cases:
            f, args = _fem(cells)
            funcs[case], inputs[case] = functools.partial(_gradient, f, args), None
    return funcs, inputs


# Calls per sample: a solver or a training loop calls the FEM energy and gradient back to back, so those cases time a
# few consecutive calls (the steady state of a loop, helpers already awake); ``small`` is timed over many calls
# because one is shorter than the clock's resolution allows to time well.
INNER = {"small": 200, "fem-1e4": 50, "fem-1e5": 10}


def _sample(f: object, x: object, case: str) -> float:
    """Seconds per call of ``f(x)``, over `INNER` consecutive calls."""
    import jax

    k = INNER.get(case, 1)
    jax.block_until_ready(f(x))  # type: ignore[operator]  # settle on the cores (threads migrate at their next run)
    t = time.perf_counter()
    for _ in range(k):
        y = f(x)  # type: ignore[operator]
    jax.block_until_ready(y)
    return (time.perf_counter() - t) / k


def child(repeats: int, cases: tuple[str, ...] = CASES, wanted: tuple[str, ...] = ()) -> None:
    _environment()
    import jax
    import numpy as np

    funcs, inputs = _cases(cases)
    cores = sorted(os.sched_getaffinity(0))
    # The modes, timed interleaved call by call in this one process (a shared machine's speed drifts within
    # seconds, so comparing separate processes compares moments): "all" (every core, every thread), "core c"
    # (every thread of the process pinned to core c, as ``taskset -c c``, and one jarp thread) and "one thread"
    # (every core free, ``set_cpu_threads(1)``).
    settings = {"all": (cores, 0), "one thread": (cores, 1)}
    settings.update({f"core {c}": ([c], 1) for c in cores})
    modes = [m for m in settings if m in wanted] if wanted else list(settings)
    times: dict[tuple[str, str], list[float]] = {(c, m): [] for c in cases for m in modes}
    reference = {}
    for case in cases:
        for mode in ("one thread", "all", "all", "all"):  # the handler times a launch's first whole runs
            _pin(*settings[mode])
            out = np.asarray(jax.block_until_ready(funcs[case](inputs[case])))
            if mode == "one thread":
                reference[case] = out
            elif case in ROUNDED:
                np.testing.assert_allclose(out, reference[case], rtol=1e-9, atol=1e-9 * np.abs(out).max())
            elif out.tobytes() != reference[case].tobytes():
                raise SystemExit(f"{case}: the threaded result differs from the one-thread result")
    for _ in range(repeats):
        for case, mode in random.sample(list(times), len(times)):
            _pin(*settings[mode])
            times[(case, mode)].append(_sample(funcs[case], inputs[case], case))
    _pin(cores, 0)
    print(json.dumps({f"{c}/{m}": statistics.median(v) for (c, m), v in times.items()}))


def probe_child(case: str, core: int, seconds: float) -> None:
    """One thread of ``case`` pinned to ``core``: ready, then (at a line on stdin) samples for ``seconds``."""
    funcs, inputs = _cases((case,))
    _pin([core], 1)
    _sample(funcs[case], inputs[case], case)
    print("ready", flush=True)
    sys.stdin.readline()
    times, end = [], time.perf_counter() + seconds
    while time.perf_counter() < end:
        times.append(_sample(funcs[case], inputs[case], case))
    print(json.dumps({"median": statistics.median(times)}), flush=True)


def run_probe(case: str, cores: list[int], seconds: float) -> list[float]:
    """Median seconds per call of ``case`` on one thread on each of ``cores``, all started at the same moment."""
    code = (
        f"import runpy; m = runpy.run_path({__file__!r}, run_name='bench_threads_child'); "
        + "m['probe_child']({!r}, {}, {})"
    )
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code.format(case, c, seconds)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        for c in cores
    ]
    for p in procs:
        if p.stdout is None or not p.stdout.readline().startswith("ready"):
            raise SystemExit(f"probe child of {case} failed")
    for p in procs:
        assert p.stdin is not None
        p.stdin.write("go\n")
        p.stdin.flush()
    out = [json.loads(p.communicate()[0].strip().splitlines()[-1])["median"] for p in procs]
    return out


def probe(rounds: int, cores: list[int], cases: tuple[str, ...] = PROBED, seconds: float = 5.0) -> None:
    """What the machine gives two threads of each case at once, with no jarp split involved.

    Each case runs on one thread in separate processes pinned to one core each: alone on each core in turn, then one
    process per core at the same moment. "Together / alone" near 1 means the cores run the case side by side at full
    speed, so a split launch's ratio above 1 / cores is jarp's (or the moment's); well above 1 means the machine
    (shared caches, memory, a busy neighbour) cannot give more.
    """
    print(f"the machine alone: {len(cores)} one-thread processes of each case at once against one ({rounds} rounds)")
    for case in cases:
        slowdowns = []
        for _ in range(rounds):
            alone = [run_probe(case, [c], seconds)[0] for c in cores]
            together = run_probe(case, cores, seconds)
            slowdowns.append(max(t / a for t, a in zip(together, alone, strict=True)))
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        shown = ", ".join(f"{x:.2f}" for x in slowdowns)
        print(f"  {case:13s} together / alone (slower core, per round): {shown}  (load average {load:.2f})")


def _pin(cores: list[int], threads: int) -> None:
    """Put every thread of this process (XLA's pool included) on ``cores`` and cap jarp's threads per call."""
    import jarp.warp as jw

    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(OSError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cores)
    jw.set_cpu_threads(threads)


def run_child(repeats: int, cases: tuple[str, ...] = CASES, modes: tuple[str, ...] = ()) -> dict[str, float]:
    code = (
        f"import sys; sys.argv = [''] ; import runpy; m = runpy.run_path({__file__!r}, run_name='bench_threads_child'); "
        + f"m['child']({repeats}, {cases!r}, {modes!r})"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"child failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--busy", action="store_true", help="time `single` with two busy processes on the cores")
    parser.add_argument(
        "--probe", action="store_true", help="what the machine gives one-thread processes of a case side by side"
    )
    args = parser.parse_args()
    if not hasattr(os, "sched_setaffinity") or not os.path.isdir("/proc/self/task"):
        raise SystemExit("needs Linux (os.sched_setaffinity, /proc/self/task) to pin threads to one core")
    cores = sorted(os.sched_getaffinity(0))
    if args.busy:
        busy(args.rounds, args.repeats, len(cores))
        return
    if args.probe:
        probe(args.rounds, cores)
        return
    runs = [run_child(args.repeats) for _ in range(args.rounds)]

    def med(key: str) -> float:
        return statistics.median(x[key] for x in runs)

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"jarp on the CPU: {len(cores)} cores against 1 (load average {load:.2f}; medians of {args.rounds} rounds)")
    print(
        f"  {'case':13s} {'1 core':>10s} {f'{len(cores)} cores':>10s} {'ratio':>6s} {'ideal':>6s}   "
        "threads=0 / threads=1 (every core)"
    )
    failed = False
    for case in CASES:
        # One core: the faster of the cores, each pinned in turn (the cores of a shared machine need not be equally
        # fast). Ideal: what the cores could do together at the speeds each showed alone, 1 / sum(1 / t_core),
        # against the faster (0.5 for two equal cores).
        alone = [med(f"{case}/core {c}") for c in cores]
        one, all_ = min(alone), med(f"{case}/all")
        ratio = all_ / one
        ideal = 1.0 / sum(1.0 / t for t in alone) / one
        inproc = all_ / med(f"{case}/one thread")
        verdict = ""
        if case in TARGETS:
            ok = ratio <= TARGETS[case]
            failed |= not ok
            verdict = f"(target <= {TARGETS[case]}: {'PASS' if ok else 'FAIL'})"
        unit, scale = ("us", 1e6) if case == "small" else ("ms", 1e3)
        print(
            f"  {case:13s} {one * scale:8.2f}{unit} {all_ * scale:8.2f}{unit} {ratio:6.2f} {ideal:6.2f}   "
            f"{inproc:.2f} {verdict}"
        )
    print(f"  targets: {'FAIL' if failed else 'PASS'}")


def busy(rounds: int, repeats: int, cores: int) -> None:
    """`single` with every thread against one thread while two processes keep every core busy."""
    spin = "import time\nwhile True:\n    pass\n"
    hogs = [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(2)]
    try:
        time.sleep(1.0)
        results = [run_child(repeats, ("single",), ("all", "one thread")) for _ in range(rounds)]
    finally:
        for hog in hogs:
            hog.kill()
    ratio = statistics.median(r["single/all"] / r["single/one thread"] for r in results)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    threaded = statistics.median(r["single/all"] for r in results) * 1e3
    alone = statistics.median(r["single/one thread"] for r in results) * 1e3
    print(f"jarp on a busy CPU: {cores} cores, two busy processes (load average {load:.2f}; {rounds} rounds)")
    print(f"  single: threads=0 {threaded:.2f} ms, threads=1 {alone:.2f} ms, ratio {ratio:.3f} ", end="")
    print(f"(target <= 1.05: {'PASS' if ratio <= 1.05 else 'FAIL'})")


if __name__ == "__main__":
    main()
