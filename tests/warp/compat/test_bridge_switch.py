"""`jarp.warp.patch_warp`: a library written for Warp's bridge runs on jarp's, and the switch undoes cleanly.

The library (``tests/support/bridge_library``) builds its wrappers at import time from ``from warp import
jax_callable`` and ``wp.jax_kernel``; ``tests/support/bridge_switch_script.py`` imports it fresh in a child process
once on Warp's own bridge and once after `jarp.warp.patch_warp`, runs it single and under ``vmap``, and the states
must agree bit for bit. The other tests switch in this process and check what is replaced and restored.
"""

from __future__ import annotations

import inspect
import json
import sys
import threading
import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
import warp._src.jax.ffi as warp_bridge

import jarp.warp
from jarp.warp import _bridge
from tests.support import forked
from tests.support import kernels as k
from tests.support.paths import REPO, child_environment

ORIGINALS = {name: getattr(warp_bridge, name) for name in ("jax_kernel", "jax_callable", "register_ffi_callback")}


def _warp_bindings() -> dict[str, Any]:
    """Every attribute of a loaded ``warp`` module that holds one of Warp's originals or one of jarp's adapters."""
    found = {}
    for name, module in list(sys.modules.items()):
        if (name == "warp" or name.startswith("warp.")) and isinstance(module, types.ModuleType):
            for attribute, value in list(vars(module).items()):
                if _bridge.is_adapter(value) or any(value is fn for fn in ORIGINALS.values()):
                    found[f"{name}.{attribute}"] = value
    return found


@pytest.fixture(autouse=True)
def _restored() -> Iterator[None]:
    assert wp.jax_kernel is ORIGINALS["jax_kernel"], "a test left the switch on"
    yield
    jarp.warp.unpatch_warp()
    assert all(getattr(warp_bridge, name) is fn for name, fn in ORIGINALS.items())
    assert wp.jax_kernel is ORIGINALS["jax_kernel"]
    assert wp.jax_callable is ORIGINALS["jax_callable"]


# ----------------------------------------------------------------------------------------------------------------------
# The library, on both bridges
# ----------------------------------------------------------------------------------------------------------------------


def _run_library(bridge: str, out: Path) -> dict[str, Any]:
    proc = forked.run(
        [sys.executable, "-m", "tests.support.bridge_switch_script", bridge, str(out)],
        env=child_environment(),
        cwd=REPO,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[dict[str, Any], dict[str, np.ndarray]]]:
    tmp = tmp_path_factory.mktemp("bridge")
    found = {}
    for bridge in ("warp", "jarp"):
        report = _run_library(bridge, tmp / f"{bridge}.npz")
        with np.load(tmp / f"{bridge}.npz") as saved:
            found[bridge] = (report, {name: saved[name] for name in saved.files})
    return found


def test_the_library_computes_the_same_bits_on_both_bridges(runs: dict[str, Any]) -> None:
    (_, warp_arrays), (_, jarp_arrays) = runs["warp"], runs["jarp"]
    assert sorted(warp_arrays) == sorted(jarp_arrays)
    assert {"single_x", "single_q", "shared_x", "batched_q", "batched_e"} <= set(warp_arrays)
    differ = [
        name
        for name in warp_arrays
        if warp_arrays[name].dtype != jarp_arrays[name].dtype
        or warp_arrays[name].shape != jarp_arrays[name].shape
        or warp_arrays[name].tobytes() != jarp_arrays[name].tobytes()
    ]
    assert differ == []
    # the states are what the library says: transforms (n, 7) and quaternions (n, 4), batched under vmap
    assert warp_arrays["single_x"].shape == (6, 7)
    assert warp_arrays["single_q"].shape == (6, 4)
    assert warp_arrays["batched_x"].shape == (3, 6, 7)
    assert warp_arrays["batched_e"].shape == (3, 12, 6)
    assert not np.array_equal(warp_arrays["single_x"], warp_arrays["init_x"])  # the bodies moved
    assert not np.array_equal(warp_arrays["batched_x"][1], warp_arrays["batched_x"][2])


def test_the_library_got_the_bridge_it_was_imported_under(runs: dict[str, Any]) -> None:
    (warp_report, _), (jarp_report, _) = runs["warp"], runs["jarp"]
    assert warp_report["bridge"] == ["warp"]
    assert warp_report["jax_callable"] == f"{warp_bridge.__name__}.jax_callable"
    assert jarp_report["bridge"] == ["jarp"]
    assert jarp_report["jax_callable"] == "jarp.warp._bridge.jax_callable"  # `from warp import jax_callable`
    assert jarp_report["wp_jax_kernel"] == "jarp.warp._bridge.jax_kernel"


def test_vmap_method_none_and_side_effects_behave_alike(runs: dict[str, Any]) -> None:
    (warp_report, _), (jarp_report, _) = runs["warp"], runs["jarp"]
    for report in (warp_report, jarp_report):
        assert report["plain_vmap_fails"]  # vmap_method=None: only the library's custom_vmap batches it
        assert report["grounded"] > 0  # the custom_vmap'd contact acted
        assert report["side_effect_calls"] >= 1  # has_side_effect=True: kept with its output unused
        assert report["dropped_calls"] == 0  # without: dropped


# ----------------------------------------------------------------------------------------------------------------------
# The switch itself
# ----------------------------------------------------------------------------------------------------------------------


def test_the_switch_repoints_every_binding_in_warp_and_restores_it() -> None:
    before = _warp_bindings()
    assert {"warp.jax_kernel", "warp.jax_callable", f"{warp_bridge.__name__}.register_ffi_callback"} <= set(before)
    assert not any(_bridge.is_adapter(v) for v in before.values())
    with jarp.warp.patch_warp() as patch:
        during = _warp_bindings()
        assert set(during) == set(before)
        assert all(_bridge.is_adapter(v) for v in during.values())  # no binding of Warp's functions is left
        assert set(patch.replaced) == set(before)
        assert inspect.signature(wp.jax_kernel) == inspect.signature(ORIGINALS["jax_kernel"])
    assert _warp_bindings() == before
    assert patch.replaced == ()
    assert not patch.active


def test_from_warp_import_after_the_switch_gets_jarps() -> None:
    jarp.warp.patch_warp()
    from warp import jax_callable, jax_kernel

    assert _bridge.is_adapter(jax_callable)
    assert _bridge.is_adapter(jax_kernel)
    assert isinstance(jax_callable(k.scale_func), jarp.warp.JaxCallable)
    assert isinstance(jax_kernel(k.triple_kernel), jarp.warp.JaxKernel)
    jarp.warp.unpatch_warp()
    from warp import jax_callable as restored

    assert restored is ORIGINALS["jax_callable"]


def test_the_switch_is_idempotent_and_nests() -> None:
    first = jarp.warp.patch_warp()
    adapter = wp.jax_kernel
    second = jarp.warp.patch_warp()
    assert wp.jax_kernel is adapter  # patched once: the same adapters
    assert first.replaced == second.replaced
    with jarp.warp.patch_warp():
        pass
    assert wp.jax_kernel is adapter  # the inner block's exit leaves the outer holds in effect
    first.undo()
    first.undo()
    assert wp.jax_kernel is adapter
    assert second.active
    second.undo()
    assert wp.jax_kernel is ORIGINALS["jax_kernel"]
    assert jarp.warp.unpatch_warp() is False
    third = jarp.warp.patch_warp()
    assert wp.jax_kernel is adapter  # adapters are built once per process
    assert jarp.warp.unpatch_warp() is True
    assert not third.active
    assert wp.jax_kernel is ORIGINALS["jax_kernel"]
    third.undo()  # after unpatch_warp: nothing to do
    assert wp.jax_kernel is ORIGINALS["jax_kernel"]


def test_the_switch_is_thread_safe() -> None:
    barrier = threading.Barrier(8)
    errors: list[BaseException] = []

    def worker() -> None:
        try:
            barrier.wait()
            for _ in range(20):
                with jarp.warp.patch_warp():
                    assert _bridge.is_adapter(wp.jax_kernel)
                    assert _bridge.is_adapter(warp_bridge.jax_callable)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert wp.jax_kernel is ORIGINALS["jax_kernel"]


def test_modules_repoints_a_library_imported_before_the_switch(monkeypatch: pytest.MonkeyPatch) -> None:
    library = types.ModuleType("early_warp_library")
    library.jax_callable = wp.jax_callable  # type: ignore[attr-defined]  # `from warp import jax_callable`
    library.wrapper = wp.jax_callable(k.scale_func)  # type: ignore[attr-defined]  # built before the switch
    monkeypatch.setitem(sys.modules, library.__name__, library)
    with jarp.warp.patch_warp(modules=[library.__name__]):
        assert _bridge.is_adapter(library.jax_callable)  # type: ignore[attr-defined]
        assert not isinstance(library.wrapper, jarp.warp.JaxCallable)  # type: ignore[attr-defined]  # stays Warp's
    assert library.jax_callable is ORIGINALS["jax_callable"]  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="not imported"):
        jarp.warp.patch_warp(modules=["no_such_library_imported"])


def test_restoring_leaves_a_binding_someone_else_changed(monkeypatch: pytest.MonkeyPatch) -> None:
    def theirs(*args: Any, **kwargs: Any) -> None:
        return None

    jarp.warp.patch_warp()
    monkeypatch.setattr(wp, "jax_kernel", theirs)
    jarp.warp.unpatch_warp()
    assert wp.jax_kernel is theirs
    assert warp_bridge.jax_kernel is ORIGINALS["jax_kernel"]
    with pytest.raises(RuntimeError, match="not Warp's own function"):
        jarp.warp.patch_warp()
    monkeypatch.undo()


# ----------------------------------------------------------------------------------------------------------------------
# The adapters: Warp's parameters, Warp's meaning
# ----------------------------------------------------------------------------------------------------------------------


def test_the_adapters_bind_warps_positional_parameters_and_defaults() -> None:
    with jarp.warp.patch_warp():
        default = wp.jax_kernel(k.grow_kernel, 1, in_out_argnames=["s"])
        positional = wp.jax_kernel(k.grow_kernel, 1, "sequential", (4,), None, ["s"])
        func = wp.jax_callable(k.scale_func, 1, wp.JaxCallableGraphMode.NONE)
    assert default.vmap_method == "broadcast_all"  # Warp's default, not jarp's
    assert (positional.vmap_method, positional.launch_dims, positional.in_out_argnames) == ("sequential", (4,), ("s",))
    assert func.graph_mode == wp.JaxCallableGraphMode.NONE
    assert func.vmap_method == "broadcast_all"
    assert func == jarp.warp.jax_callable(
        k.scale_func, graph_mode=wp.JaxCallableGraphMode.NONE, vmap_method="broadcast_all"
    )
    (y,) = positional(jnp.arange(4.0, dtype=jnp.float32), jnp.ones(4, dtype=jnp.float32))
    np.testing.assert_array_equal(np.asarray(y), 1.0 + np.arange(4.0, dtype=np.float32))


def test_compatibility_options_at_warps_default_are_not_forwarded() -> None:
    with jarp.warp.patch_warp():
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # graph_cache_max=32 (Warp's default) would make jarp warn
            plain = wp.jax_callable(k.scale_func)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            staged = wp.jax_callable(k.scale_func, graph_cache_max=8, stage_in_argnames=["a"])
    assert plain.graph_cache_max is None
    assert plain.stage_in_argnames == frozenset()
    assert staged.graph_cache_max == 8
    assert staged.stage_in_argnames == frozenset({"a"})


def test_side_effects_and_keywords_warp_lacks() -> None:
    with jarp.warp.patch_warp():
        assert wp.jax_kernel(k.triple_kernel, has_side_effect=True).has_side_effect is True
        assert wp.jax_kernel(k.triple_kernel).has_side_effect is False
        with pytest.raises(TypeError, match=r"wp.jax_kernel\(\): .*unexpected keyword.*Warp's parameters: kernel"):
            wp.jax_kernel(k.triple_kernel, bounds_check=True)  # a jarp option, not Warp's


def test_a_warp_parameter_the_table_lacks_is_refused_unless_default(monkeypatch: pytest.MonkeyPatch) -> None:
    # what a newer Warp's extra parameter meets: dropped at its default, refused otherwise
    entry = _bridge.ENTRY_POINTS["jax_kernel"]
    params = {name: spec for name, spec in entry.params.items() if name != "block_dim"}
    monkeypatch.setitem(_bridge.ENTRY_POINTS, "jax_kernel", _bridge._EntryPoint(entry.name, entry.jarp, params))
    signature = inspect.signature(ORIGINALS["jax_kernel"])
    narrowed = _bridge.ENTRY_POINTS["jax_kernel"]
    module = _bridge._forward(narrowed, signature, signature.bind(k.triple_kernel).arguments | {"block_dim": None})
    assert isinstance(module, jarp.warp.JaxKernel)
    with pytest.raises(jarp.warp.UnsupportedWarpOptionError, match="does not know"):
        _bridge._forward(narrowed, signature, {"kernel": k.triple_kernel, "block_dim": 64})


def test_register_ffi_callback_through_warps_name_registers_with_jarp() -> None:
    def double(inputs: list[Any], outputs: list[Any], attrs: dict[str, Any], ctx: Any) -> None:
        np.asarray(outputs[0])[...] = 2 * np.asarray(inputs[0])

    with jarp.warp.patch_warp():
        warp_bridge.register_ffi_callback("jarp_bridge_switch_double", double, True)
    x = jnp.arange(5, dtype=jnp.float32)
    (y,) = jax.ffi.ffi_call("jarp_bridge_switch_double", [jax.ShapeDtypeStruct(x.shape, x.dtype)])(x)
    np.testing.assert_array_equal(np.asarray(y), 2 * np.arange(5, dtype=np.float32))
