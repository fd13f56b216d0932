"""FEM benchmark: a Stable Neo-Hookean energy's gradient and Hessian product, jarp vs `jax.numpy` vs ``wp.launch``.

The energy, its kernels and the mesh are those of ``examples/hyperelastic.py`` (imported, not copied): a tetrahedral
beam from `make_beam`, the Warp kernels over the ``Mesh``/``Material`` structs, `snh_energy` (the `jarp.warp.Energy`)
and `snh_energy_ref` (the same energy in `jax.numpy`). Two operations, each in three variants:

* **energy + gradient**: jarp ``jax.jit(jax.value_and_grad(E))`` (the energy kernel and the gradient kernel);
  ``jax.numpy``: ``jax.jit(jax.value_and_grad(snh_energy_ref))``; floor: the same two Warp kernels launched with
  ``wp.launch`` on preallocated ``wp.array``s (outputs zeroed first, as jarp zero-fills them);
* **Hessian-vector product**: jarp ``jax.jit`` of the tangent of ``jax.jvp(E.grad, (x,), (v,))`` (the Hessian-product
  kernel; XLA drops the unused primal gradient); ``jax.numpy``: the tangent of ``jax.jvp(jax.grad(snh_energy_ref))``;
  floor: ``wp.launch`` of the Hessian-product kernel.

The floor is what any bridge could reach at best: the kernels' own cost plus Warp's launch, with no JAX in the way.
Its launches are recorded once (``wp.launch(..., record_cmd=True)``) and replayed, which skips ``wp.launch``'s
argument packing (the plain call costs ~10 to 20 us more per launch; ``--plain-launch`` times that instead).

The example's kernels are float64. The float32 variant is the example's own source with Warp's float64 types
(``wp.float64``, ``wp.vec2d``, ``wp.vec3d``, ``wp.mat33d``) replaced by the float32 ones, written to a temporary file
and imported (Warp compiles kernels from their source file), so both precisions run the same code.

All six variants of one (size, precision) are timed interleaved: one call of each per round, in an order that rotates
from round to round, so a change in the machine's load hits them alike; the table gives medians. Every result is
checked against the ``jax.numpy`` one before it is timed.

Run: ``python benchmarks/bench_fem.py`` (a few minutes on 2 CPU cores), ``--quick`` for a smoke run on tiny meshes,
``--plot PATH`` for a PNG of time against size, ``--json PATH`` to keep the numbers (``--replot JSON`` redraws a
saved run without timing). Ratios below 1 mean jarp is faster.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import warp as wp

jax.config.update("jax_enable_x64", True)  # float64 must be available; every array below has an explicit dtype
wp.config.log_level = wp.LOG_WARNING  # no banner, no per-module load lines

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
sys.path.insert(0, str(EXAMPLES))

import hyperelastic as fem64  # noqa: E402

from jarp.warp._ffi import _target  # noqa: E402

# Beam cells (nx, ny, nz), 6 tetrahedra each, about 5 : 1 : 1 like the example's beam.
SIZES = {"1e3": (18, 3, 3), "1e4": (46, 6, 6), "1e5": (99, 13, 13)}  # 972, 9,936 and 100,386 tetrahedra
QUICK_SIZES = [(4, 1, 1), (6, 2, 2)]  # 24 and 144 tetrahedra
VARIANTS = ["jarp", "jnp", "floor"]
OPS = {"eg": "energy + gradient", "hvp": "Hessian-vector product"}
REGIONS = 4

# The example's float64 Warp types and their float32 counterparts, for the float32 copy of its kernels.
_TO_FLOAT32 = {"wp.float64": "wp.float32", "wp.vec2d": "wp.vec2f", "wp.vec3d": "wp.vec3f", "wp.mat33d": "wp.mat33f"}
_FLOAT64_LEFT = re.compile(
    r"\bwp\.(?:types\.)?(?:float64|(?:vec|mat|quat|transform|spatial_vector|spatial_matrix)\w*d)\b"
)


def float32_example() -> ModuleType:
    """The example's source with its Warp float64 types swapped for float32 ones, imported from a temporary file."""
    source = Path(fem64.__file__).read_text()
    for old, new in _TO_FLOAT32.items():
        source = source.replace(old, new)
    left = sorted(set(_FLOAT64_LEFT.findall(source)))
    if left:
        raise RuntimeError(
            f"bench_fem: examples/hyperelastic.py uses float64 Warp types this benchmark does not map to float32: "
            f"{left}. Add them to _TO_FLOAT32."
        )
    path = Path(tempfile.mkdtemp(prefix="jarp_bench_fem_")) / "hyperelastic_f32.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("hyperelastic_f32", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # eqx.Module dataclasses look their module up while the class body runs
    spec.loader.exec_module(module)
    return module


def example(dtype: Any) -> ModuleType:
    """The example module whose kernels take ``dtype`` (``jnp.float32`` or ``jnp.float64``)."""
    if dtype == jnp.float64:
        return fem64
    if "hyperelastic_f32" not in sys.modules:
        float32_example()
    return sys.modules["hyperelastic_f32"]


def interleaved(variants: dict[str, Callable[[], Any]], repeat: int, budget: float) -> dict[str, float]:
    """Median seconds per call of each variant, one call of each per round in rotating order.

    Stops after ``repeat`` rounds, or earlier when ``budget`` seconds have passed (but never before 5 rounds).
    """
    names = list(variants)
    samples: dict[str, list[float]] = {n: [] for n in names}
    deadline = time.perf_counter() + budget
    for r in range(repeat):
        if r >= 5 and time.perf_counter() > deadline:
            break
        for j in range(len(names)):
            name = names[(r + j) % len(names)]
            t0 = time.perf_counter()
            jax.block_until_ready(variants[name]())
            samples[name].append(time.perf_counter() - t0)
    return {n: statistics.median(v) for n, v in samples.items()}


def bench(dims: tuple[int, int, int], dtype: Any, repeat: int, budget: float, plain_launch: bool) -> dict[str, Any]:
    """Check, then time the six variants on a beam of ``dims`` cells in ``dtype``; medians in seconds by name."""
    mod = example(dtype)
    f64 = dtype == jnp.float64
    scalar, vec3, mat33 = (wp.float64, wp.vec3d, wp.mat33d) if f64 else (wp.float32, wp.vec3f, wp.mat33f)
    np_dtype = np.float64 if f64 else np.float32

    beam = fem64.make_beam(*dims, regions=REGIONS)
    n_nodes, n_tets = beam.rest.shape[0], beam.tets.shape[0]
    rng = np.random.default_rng(0)
    # a general deformation (a stretch, a shear and noise: J away from 1) and a random direction
    x_np = beam.rest @ np.array([[1.1, 0.2, 0.0], [0.0, 0.8, 0.1], [0.05, 0.0, 1.2]])
    x_np = (x_np + 0.002 * rng.standard_normal(x_np.shape)).astype(np_dtype)
    v_np = rng.standard_normal(x_np.shape).astype(np_dtype)
    log_youngs_np = np.log(np.linspace(1.0e6, 4.0e6, REGIONS)).astype(np_dtype)

    # JAX side
    x, v, log_youngs = jnp.asarray(x_np), jnp.asarray(v_np), jnp.asarray(log_youngs_np)
    mesh = mod.MeshArrays(jnp.asarray(beam.tets), jnp.asarray(beam.Dm_inv, dtype), jnp.asarray(beam.vol, dtype))
    material = mod.MaterialArrays(jnp.asarray(beam.region), 0.3)
    params = (mesh, material, log_youngs)
    E = mod.snh_energy(n_nodes, n_tets)
    ref = mod.snh_energy_ref

    eg_jarp = jax.jit(jax.value_and_grad(E))
    eg_jnp = jax.jit(jax.value_and_grad(ref))
    hvp_jarp = jax.jit(lambda x, v, *p: jax.jvp(lambda y: E.grad(y, *p), (x,), (v,))[1])
    hvp_jnp = jax.jit(lambda x, v, *p: jax.jvp(lambda y: jax.grad(ref)(y, *p), (x,), (v,))[1])

    # Warp side: the same kernels on preallocated arrays
    wmesh = mod.Mesh()
    wmesh.tets = wp.array(beam.tets, dtype=wp.vec4i, device="cpu")
    wmesh.Dm_inv = wp.array(beam.Dm_inv.astype(np_dtype), dtype=mat33, device="cpu")
    wmesh.vol = wp.array(beam.vol.astype(np_dtype), dtype=scalar, device="cpu")
    wmat = mod.Material()
    wmat.region = wp.array(beam.region, dtype=wp.int32, device="cpu")
    wmat.poisson = 0.3
    wx = wp.array(x_np, dtype=vec3, device="cpu")
    wv = wp.array(v_np, dtype=vec3, device="cpu")
    wly = wp.array(log_youngs_np, dtype=scalar, device="cpu")
    w_energy = wp.zeros(1, dtype=scalar, device="cpu")
    w_grad = wp.zeros(n_nodes, dtype=vec3, device="cpu")
    w_hv = wp.zeros(n_nodes, dtype=vec3, device="cpu")

    def launch(kernel: wp.Kernel, inputs: list[Any]) -> Callable[[], Any]:
        if plain_launch:
            return lambda: wp.launch(kernel, dim=n_tets, inputs=inputs, device="cpu")
        return wp.launch(kernel, dim=n_tets, inputs=inputs, device="cpu", record_cmd=True).launch

    launch_energy = launch(mod.snh_energy_kernel, [wx, wmesh, wmat, wly, w_energy])
    launch_grad = launch(mod.snh_grad_kernel, [wx, wmesh, wmat, wly, w_grad])
    launch_hv = launch(mod.snh_hess_prod_kernel, [wx, wmesh, wmat, wly, wv, w_hv])

    def eg_floor() -> None:
        w_energy.zero_()
        w_grad.zero_()
        launch_energy()
        launch_grad()
        wp.synchronize()

    def hvp_floor() -> None:
        w_hv.zero_()
        launch_hv()
        wp.synchronize()

    # agreement first
    e_ref, g_ref = eg_jnp(x, *params)
    hv_ref = hvp_jnp(x, v, *params)
    e, g = eg_jarp(x, *params)
    hv = hvp_jarp(x, v, *params)
    eg_floor()
    hvp_floor()
    rtol = 1e-9 if f64 else 2e-3
    for name, got, want in [
        ("energy jarp", e, e_ref),
        ("gradient jarp", g, g_ref),
        ("hvp jarp", hv, hv_ref),
        ("energy floor", w_energy.numpy()[0], e_ref),
        ("gradient floor", w_grad.numpy(), g_ref),
        ("hvp floor", w_hv.numpy(), hv_ref),
    ]:
        got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
        err = np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-300)
        if not err < rtol:
            raise AssertionError(f"bench_fem: {name} differs from jax.numpy by {err:.2e} (relative to max), {dims}")

    variants: dict[str, Callable[[], Any]] = {
        "eg jarp": lambda: eg_jarp(x, *params),
        "eg jnp": lambda: eg_jnp(x, *params),
        "eg floor": eg_floor,
        "hvp jarp": lambda: hvp_jarp(x, v, *params),
        "hvp jnp": lambda: hvp_jnp(x, v, *params),
        "hvp floor": hvp_floor,
    }
    for fn in variants.values():  # warm-up
        jax.block_until_ready(fn())
    load0 = os.getloadavg()[0]
    times = interleaved(variants, repeat, budget)
    load1 = os.getloadavg()[0]
    return {
        "dtype": "float64" if f64 else "float32",
        "dims": list(dims),
        "tets": n_tets,
        "nodes": n_nodes,
        "times": times,
        "load": [load0, load1],
    }


def table(results: list[dict[str, Any]]) -> str:
    """The results as a Markdown table: medians in microseconds, ratios jarp / jnp and jarp / floor."""
    lines = [
        "| precision | tets | operation | jarp (us) | jax.numpy (us) | wp.launch floor (us) | jarp / jnp | jarp / floor |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        t = r["times"]
        for op, label in OPS.items():
            a, b, c = (t[f"{op} {v}"] * 1e6 for v in VARIANTS)
            lines.append(
                f"| {r['dtype']} | {r['tets']:,} | {label} | {a:.0f} | {b:.0f} | {c:.0f} | {a / b:.2f} | {a / c:.2f} |"
            )
    return "\n".join(lines)


def plot(results: list[dict[str, Any]], path: str) -> None:
    """Log-log time against tetrahedra, one panel per precision, one line per variant and operation."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dtypes = [d for d in ("float32", "float64") if any(r["dtype"] == d for r in results)]
    fig, axes = plt.subplots(1, len(dtypes), figsize=(5.5 * len(dtypes), 4.2), sharey=True, squeeze=False)
    colors = {"jarp": "tab:blue", "jnp": "tab:orange", "floor": "tab:gray"}
    names = {"jarp": "jarp", "jnp": "jax.numpy", "floor": "wp.launch (floor)"}
    styles = {"eg": ("-", "o"), "hvp": ("--", "s")}
    for ax, dtype in zip(axes[0], dtypes, strict=True):
        rs = sorted((r for r in results if r["dtype"] == dtype), key=lambda r: r["tets"])
        tets = [r["tets"] for r in rs]
        for op, (ls, marker) in styles.items():
            for var in VARIANTS:
                ms = [r["times"][f"{op} {var}"] * 1e3 for r in rs]
                width = 1.0 if var == "floor" else 1.8  # the floor under jarp's line, where they meet
                ax.loglog(tets, ms, ls, marker=marker, color=colors[var], lw=width, label=f"{names[var]}, {OPS[op]}")
        ax.set_title(dtype)
        ax.set_xlabel("tetrahedra")
        ax.grid(True, which="both", alpha=0.3)
    axes[0][0].set_ylabel("median time per call (ms)")
    axes[0][-1].legend(fontsize=7, loc="upper left")
    fig.suptitle("Stable Neo-Hookean FEM energy on CPU: jarp vs jax.numpy vs wp.launch", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="tiny meshes and few repeats (a smoke run)")
    parser.add_argument("--sizes", default="1e3,1e4,1e5", help="comma-separated, of 1e3, 1e4, 1e5 (tetrahedra)")
    parser.add_argument("--dtypes", default="float32,float64", help="comma-separated: float32, float64")
    parser.add_argument("--repeat", type=int, default=200, help="rounds at most per (size, precision)")
    parser.add_argument("--budget", type=float, default=8.0, help="seconds of timing per (size, precision)")
    parser.add_argument("--plain-launch", action="store_true", help="floor: call wp.launch each time (no replay)")
    parser.add_argument("--plot", metavar="PATH", help="write a PNG of time against size")
    parser.add_argument("--json", metavar="PATH", help="write the results as JSON")
    parser.add_argument("--replot", metavar="JSON", help="only redraw --plot (and the table) from a saved --json")
    args = parser.parse_args()

    if args.replot:
        results = json.loads(Path(args.replot).read_text())["results"]
        print(table(results))
        if args.plot:
            plot(results, args.plot)
        return

    sizes = QUICK_SIZES if args.quick else [SIZES[k.strip()] for k in args.sizes.split(",")]
    repeat, budget = (5, 0.5) if args.quick else (args.repeat, args.budget)
    dtypes = [{"float32": jnp.float32, "float64": jnp.float64}[d.strip()] for d in args.dtypes.split(",")]
    print(
        f"jax {jax.__version__}, warp {wp.config.version}, {os.cpu_count()} CPUs, load {' '.join(f'{a:.2f}' for a in os.getloadavg())}"
    )
    results = []
    for dtype in dtypes:
        for dims in sizes:
            r = bench(dims, dtype, repeat, budget, args.plain_launch)
            t = r["times"]
            print(
                f"{r['dtype']} {r['tets']:>7,} tets: eg jarp/jnp {t['eg jarp'] / t['eg jnp']:.2f} "
                f"jarp/floor {t['eg jarp'] / t['eg floor']:.2f}; hvp jarp/jnp {t['hvp jarp'] / t['hvp jnp']:.2f} "
                f"jarp/floor {t['hvp jarp'] / t['hvp floor']:.2f} (load {r['load'][0]:.1f} -> {r['load'][1]:.1f})",
                flush=True,
            )
            results.append(r)
    print()
    print(table(results))
    print(f"\nlaunch path {_target.launch_path()}; load at the end: {' '.join(f'{a:.2f}' for a in os.getloadavg())}")
    if args.json:
        meta = {"jax": jax.__version__, "warp": wp.config.version, "launch_path": _target.launch_path()}
        Path(args.json).write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    if args.plot:
        plot(results, args.plot)


if __name__ == "__main__":
    main()
