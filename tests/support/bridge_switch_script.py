"""Runs ``tests/support/bridge_library`` fresh on Warp's own bridge or on jarp's, and saves what it computed.

Run as a module from the repository root (``tests/warp/compat/test_bridge_switch.py`` does), naming the bridge and
the ``.npz`` file to write:

    python -m tests.support.bridge_switch_script warp /tmp/warp.npz
    python -m tests.support.bridge_switch_script jarp /tmp/jarp.npz

With ``jarp`` it calls `jarp.warp.patch_warp` before the library is imported. It runs ``STEPS`` steps of ``N``
bodies, then the same under ``jax.vmap`` (parameters shared, and parameters batched too), saves every state array
and energy, and prints one JSON line: which bridge the library's wrappers came from, whether a plain ``vmap`` of its
``vmap_method=None`` callable fails, how many bodies ended on the ground, and how many custom calls stay in a program that drops the outputs of its
``has_side_effect=True`` callable and of a callable without side effects.
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np

N = 6
STEPS = 12
BATCH = 3


def _custom_calls(fn: object, *args: jax.Array) -> int:
    return jax.jit(fn).lower(*args).as_text().count("stablehlo.custom_call")  # type: ignore[arg-type]


def main(mode: str, out: str) -> None:
    if mode == "jarp":
        import jarp.warp

        jarp.warp.patch_warp()
    elif mode != "warp":
        raise SystemExit(f"unknown bridge {mode!r}: warp or jarp")

    import warp

    import tests.support.bridge_library as lib
    from tests.support.bridge_library import state as lib_state
    from tests.support.bridge_library import step as lib_step

    seed = jnp.linspace(0.0, 1.0, N, dtype=jnp.float32)
    params = jnp.stack([jnp.full(N, 2.0), jnp.full(N, 0.1), jnp.linspace(-1.0, 1.0, N)], axis=1, dtype=jnp.float32)
    seeds = jnp.stack([seed, 0.5 * seed, seed + 0.25])
    batch_params = jnp.stack([params, 1.5 * params, params + 0.5])

    saved: dict[str, np.ndarray] = {}
    s0 = lib.init_state(seed)
    for name, value in zip(lib.State._fields, s0, strict=True):
        saved[f"init_{name}"] = np.asarray(value)
    state, energies = lib.simulate(s0, params, STEPS)
    for name, value in zip(lib.State._fields, state, strict=True):
        saved[f"single_{name}"] = np.asarray(value)
    saved["single_e"] = np.asarray(energies)

    def run(sd: jax.Array, p: jax.Array) -> tuple[lib.State, jax.Array]:
        return lib.simulate(lib.init_state(sd), p, STEPS)

    for label, axes, p in (("shared", (0, None), params), ("batched", (0, 0), batch_params)):
        state, energies = jax.vmap(run, in_axes=axes)(seeds, p)
        for name, value in zip(lib.State._fields, state, strict=True):
            saved[f"{label}_{name}"] = np.asarray(value)
        saved[f"{label}_e"] = np.asarray(energies)
    np.savez(out, **saved)

    xb, vb = jnp.stack([s0.x] * BATCH), jnp.stack([s0.v] * BATCH)
    try:
        jax.vmap(lambda x, v: lib_step._ground_call(0.0, x, v))(xb, vb)
        plain_vmap_fails = False
    except Exception:
        plain_vmap_fails = True

    def keep(v: jax.Array, w: jax.Array) -> jax.Array:
        lib_step._energy_call(v, w)  # has_side_effect=True: stays although its output is dropped
        return v

    def drop(x: jax.Array, v: jax.Array) -> jax.Array:
        lib_step._ground_call(0.0, x, v)  # no side effect: its output dropped, the call goes
        return v

    report = {
        "bridge": sorted({type(w).__module__.split(".")[0] for w in (lib_state._init, lib_step._substeps_call)}),
        "jax_callable": f"{lib_step.jax_callable.__module__}.{lib_step.jax_callable.__qualname__}",
        "wp_jax_kernel": f"{warp.jax_kernel.__module__}.{warp.jax_kernel.__qualname__}",
        "plain_vmap_fails": plain_vmap_fails,
        "grounded": int(np.sum(saved["single_x"][:, 1] == lib_step.GROUND)),
        "side_effect_calls": _custom_calls(keep, s0.v, s0.w),
        "dropped_calls": _custom_calls(drop, s0.x, s0.v),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
