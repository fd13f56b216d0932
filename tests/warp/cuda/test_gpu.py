"""GPU readiness, checked as far as a machine without a GPU allows, plus real GPU tests for a GPU machine.

* Every Warp kernel the suite uses (``kernels.py``, ``kernels64.py`` with every registered overload of its generic
  kernels, and the generic struct kernels of ``support/kernels_generic_struct.py``) compiles for sm_80 and sm_90 through Warp's
  ahead-of-time compiler (NVRTC, no driver needed), forward and backward entry points alike.
* Representative jitted functions (forward, grad, both vmap methods, in-out arguments, ``jax_callable``) lower for
  CUDA to jarp's custom call with the plan handle as its only attribute and the expected buffer aliases, and the
  handle resolves to the expected plan.
* Tests marked ``gpu`` run on a CUDA device; without one they skip (or fail, with ``JARP_REQUIRE_GPU=1``):
  ``JARP_REQUIRE_GPU=1 pytest -m gpu`` on a GPU machine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._codegen import compile_aot, kernel_source
from jarp.warp._ffi._registry import registry
from jarp.warp._inspect import list_plans
from jarp.warp._plan import _runtime_scalars
from jarp.warp._plan._content import ABI_VERSION
from jarp.warp._upstream import _warp_launches
from tests.support import kernels as k
from tests.support import kernels64 as k64
from tests.support import kernels_ad, kernels_energy, kernels_generic_struct, kernels_hostile, kernels_struct
from tests.support.gpu import cuda_device as cuda_device  # the fixture
from tests.support.gpu import requires_gpu
from tests.support.lowered import custom_calls
from tests.support.paths import REPO

ARCHS = (80, 90)


# ======================================================================================================================
# Ahead-of-time compilation for sm_80 and sm_90
# ======================================================================================================================

KERNEL_MODULES = {
    "kernels": k,
    "kernels64": k64,
    "kernels_ad": kernels_ad,
    "kernels_energy": kernels_energy,
    "kernels_hostile": kernels_hostile,
    "kernels_struct": kernels_struct,
    "kernels_generic_struct": kernels_generic_struct,
}


def _module_kernels(module: types.ModuleType) -> dict[str, wp.Kernel]:
    """The Warp kernels a Python module defines, by attribute name."""
    return {name: v for name, v in vars(module).items() if isinstance(v, wp.Kernel)}


def _entry_symbols(binary: bytes, direction: str) -> list[str]:
    return sorted({s.decode() for s in re.findall(rb"(\w+)_cuda_kernel_" + direction.encode() + rb"\b", binary)})


@pytest.fixture(scope="module")
def aot_build() -> Callable[[str], tuple[Path, dict[int, Path]]]:
    """Compile a test module's Warp module for ARCHS into Warp's kernel cache, once per module: (dir, paths).

    The cache's directory is named by the module's hash (its source and options): a binary found there was built
    from exactly this code, so a second run of the suite checks it without running NVRTC again.
    """
    builds: dict[str, tuple[Path, dict[int, Path]]] = {}

    def build(name: str) -> tuple[Path, dict[int, Path]]:
        if name not in builds:
            paths = compile_aot(KERNEL_MODULES[name], arch=ARCHS)
            builds[name] = (paths[ARCHS[0]].parent, paths)
        return builds[name]

    return build


@pytest.mark.parametrize("name", list(KERNEL_MODULES))
def test_every_test_kernel_compiles_for_sm80_and_sm90(
    name: str, aot_build: Callable[[str], tuple[Path, dict[int, Path]]]
) -> None:
    module = KERNEL_MODULES[name]
    kernels = _module_kernels(module)
    assert kernels, f"{module.__name__} defines no Warp kernels"
    warp_modules = {kernel.module.name for kernel in kernels.values()}
    assert warp_modules == {module.__name__}, f"kernels of {module.__name__} span Warp modules {warp_modules}"
    expected = {}
    for attr, kernel in kernels.items():
        if kernel.is_generic:
            assert kernel.overloads, f"generic kernel {attr} has no registered overload, so nothing of it compiles"
        expected[kernel.key] = len(kernel.overloads) if kernel.is_generic else 1

    out, paths = aot_build(name)

    assert list(paths) == list(ARCHS)
    warp_module = next(iter(kernels.values())).module
    backward = bool(warp_module.options["enable_backward"])
    for arch, path in paths.items():
        assert path.parent == out
        assert path.name.endswith(f".sm{arch}.cubin"), path
        binary = path.read_bytes()
        assert binary[:4] == b"\x7fELF", f"{path} is not a CUBIN (ELF) file"
        for direction in ("forward", "backward") if backward else ("forward",):
            symbols = _entry_symbols(binary, direction)
            for key, count in expected.items():
                found = [s for s in symbols if re.fullmatch(re.escape(key) + r"_[0-9a-f]{8}", s)]
                assert len(found) == count, f"sm_{arch} {direction}: {key} has entry points {found}, expected {count}"


def test_kernel_source_is_the_cuda_source_warp_compiles(tmp_path: Path) -> None:
    # A fresh build (a cached one may come from another process or checkout: the module hash leaves out the source
    # paths in Warp's line comments and the numbering of generated functions), of the module with structs.
    paths = compile_aot(kernels_struct, arch=ARCHS[-1], module_dir=tmp_path)
    (cu,) = tmp_path.glob("*.cu")
    assert paths[ARCHS[-1]].parent == tmp_path
    assert cu.read_text() == kernel_source(kernels_struct, "cuda", arch=ARCHS[-1])


def test_compile_aot_reuses_a_build_and_returns_one_path_per_arch(
    aot_build: Callable[[str], tuple[Path, dict[int, Path]]],
) -> None:
    out, paths = aot_build("kernels64")
    stamp = paths[90].stat().st_mtime_ns
    again = compile_aot(jax_kernel(k64.triple64_kernel), arch=[90, 90], module_dir=out)
    assert again == {90: paths[90]}
    assert again[90].stat().st_mtime_ns == stamp  # Warp found the binary for the module's hash and did not rebuild
    assert compile_aot(k64.generic_add_kernel.module, arch=(90, 80), module_dir=out) == {90: paths[90], 80: paths[80]}


# ======================================================================================================================
# Lowering for CUDA without a GPU
# ======================================================================================================================


def _lower_for_cuda(f: Callable[..., Any], *args: Any) -> Any:
    return jax.jit(f).trace(*args).lower(lowering_platforms=("cuda",))


def _x(n: int = 5) -> jax.Array:
    return jnp.linspace(0.5, 2.0, n, dtype=jnp.float32)


_triple = jax_kernel(k.triple_kernel)
_scale_sum_square = jax_kernel(k.scale_sum_square, enable_backward=True)
_add_broadcast = jax_kernel(k.add_kernel, vmap_method="broadcast_all")
_rowsum_count = jax_kernel(k.rowsum_count_kernel, num_outputs=2, in_out_argnames=["sums"], output_dims={"counts": 2})
_scale_func = jax_callable(k.scale_func)
_rowsum_func = jax_callable(k.rowsum_func, in_out_argnames=["sums"])
_scale_func_no_graph = jax_callable(k.scale_func, graph_mode=wp.JaxCallableGraphMode.NONE, has_side_effect=True)


_scale_differentiable = jax_kernel(k.scale_kernel, enable_backward=True)
_scale_runtime_variant = _runtime_scalars.variant(k.scale_kernel, ("s",))
_scale_func_differentiable = jax_callable(k.scale_func, enable_backward=True)
# triple is linear: its tangent map is triple again
_triple_with_rule = jax_kernel(k.triple_kernel, jvp=lambda x, t: _triple(t))


def _value_and_grad_of_runtime_scalar(a: jax.Array, s: jax.Array) -> Any:
    return jax.value_and_grad(lambda s: jnp.sum(_scale_differentiable(a, s)[0]))(s)


def _value_and_grad_of_callable(a: jax.Array) -> Any:
    return jax.value_and_grad(lambda a: jnp.sum(_scale_func_differentiable(a, 2.0)[0]))(a)


def _value_and_grad_of_scale_sum_square(a: jax.Array, b: jax.Array) -> Any:
    # value_and_grad keeps the forward launch (plain grad of a sum needs only the adjoint launch)
    return jax.value_and_grad(lambda a, b: jnp.sum(_scale_sum_square(a, b, 2.0)[0]), argnums=(0, 1))(a, b)


# name -> (function, args, expected calls: (FFI target, plan kind, launched object, aliases as written in the IR))
LOWERING_CASES: dict[str, tuple[Callable[..., Any], tuple[Any, ...], list[tuple[str, str, Any, list[Any]]]]] = {
    "forward": (lambda x: _triple(x)[0], (_x(),), [("jarp_warp_call", "kernel", k.triple_kernel, [])]),
    "grad": (
        _value_and_grad_of_scale_sum_square,
        (_x(), _x()),
        [
            ("jarp_warp_call", "kernel", k.scale_sum_square, []),
            # adjoint: operands (a, b, cotangent), results (a_bar, b_bar, out stand-in, cotangent copy)
            ("jarp_warp_call", "adjoint", k.scale_sum_square, [((3,), 2)]),
        ],
    ),
    "vmap-default": (
        jax.vmap(lambda x: _triple(x)[0]),
        (jnp.ones((3, 5), jnp.float32),),
        [("jarp_warp_call", "kernel", k.triple_kernel, [])],
    ),
    "vmap-broadcast-all": (
        jax.vmap(lambda a, b: _add_broadcast(a, b)[0], in_axes=(0, None)),
        (jnp.ones((3, 5), jnp.float32), _x()),
        [("jarp_warp_call", "kernel", k.add_kernel, [])],
    ),
    "in-out-kernel": (
        lambda m, s: _rowsum_count(m, s),
        (jnp.ones((2, 3), jnp.float32), jnp.ones(2, jnp.float32)),
        [("jarp_warp_call", "kernel", k.rowsum_count_kernel, [((0,), 1)])],
    ),
    "jax-callable": (
        lambda x: _scale_func(x, 3.0)[0],
        (_x(),),
        # the pure input's private copy (protect_inputs): result 1 aliases operand 0
        [("jarp_warp_call", "callable", k.scale_func, [((1,), 0)])],
    ),
    "runtime-scalar-value-and-grad": (
        _value_and_grad_of_runtime_scalar,
        (_x(), jnp.float32(1.5)),
        [
            ("jarp_warp_call", "kernel", _scale_runtime_variant, []),
            ("jarp_warp_call", "adjoint", _scale_runtime_variant, [((3,), 2)]),
        ],
    ),
    "callable-value-and-grad": (
        _value_and_grad_of_callable,
        (_x(),),
        [
            ("jarp_warp_call", "callable", k.scale_func, [((1,), 0)]),
            # the cotangents' copies, then the replay's copy of the protected input
            ("jarp_warp_call", "callable_adjoint", k.scale_func, [((3,), 1), ((4,), 2), ((5,), 0)]),
        ],
    ),
    "jvp-rule": (
        lambda x: jax.jvp(lambda x: _triple_with_rule(x)[0], (x,), (x,)),
        (_x(),),
        [
            ("jarp_warp_call", "kernel", k.triple_kernel, []),
            ("jarp_warp_call", "kernel", k.triple_kernel, []),
        ],
    ),
    "jax-callable-in-out": (
        lambda m, s: _rowsum_func(m, s)[0],
        (jnp.ones((2, 3), jnp.float32), jnp.ones(2, jnp.float32)),
        [("jarp_warp_call", "callable", k.rowsum_func, [((0,), 1), ((1,), 0)])],  # in-out, then the input's copy
    ),
    "jax-callable-no-graph": (
        lambda x: _scale_func_no_graph(x, 3.0)[0],
        (_x(),),
        [("jarp_warp_call_no_graph", "callable", k.scale_func, [((1,), 0)])],
    ),
}


def _same_target(actual: Any, expected: Any) -> bool:
    if isinstance(expected, wp.Kernel):
        return isinstance(actual, wp.Kernel) and actual.key == expected.key and actual.module is expected.module
    return actual is expected


def _check_lowering(
    f: Callable[..., Any], args: tuple[Any, ...], expected: list[tuple[str, str, Any, list[Any]]]
) -> None:
    lowered = _lower_for_cuda(f, *args)
    calls = custom_calls(lowered.as_text())
    assert len(calls) == len(expected), calls
    hlo = lowered.as_text(dialect="hlo")
    assert hlo.count("API_VERSION_TYPED_FFI") == len(expected), "jarp's calls must use the typed XLA FFI"
    for call, (target, kind, launched, aliases) in zip(calls, expected, strict=True):
        assert call["target"] == target
        assert call["abi"] == ABI_VERSION, f"custom call without jarp's call-ABI version: {call}"
        assert call["plan"] is not None, f"custom call whose description is not a plan of this process: {call}"
        assert call["aliases"] == aliases
        plan = registry.plan(call["plan"])
        assert plan.label == kind
        assert _same_target(plan.target, launched), (plan.target, launched)
        assert call["side_effect"] == plan.has_side_effect
        assert (target == "jarp_warp_call") == plan.graph_compatible
        # the IR's aliases are the plan's (operand, result) pairs; a single result is not a tuple
        single = len(plan.results) == 1
        assert [(() if single else (r,), o) for o, r in plan.aliases] == call["aliases"]
        info = {p.handle: p for p in list_plans()}[call["plan"]]
        assert info.handle == call["plan"]
        assert info.kind == kind


@pytest.mark.parametrize("name", list(LOWERING_CASES))
def test_jitted_function_lowers_for_cuda_to_jarp_custom_call(name: str) -> None:
    f, args, expected = LOWERING_CASES[name]
    _check_lowering(f, args, expected)


def test_lowering_for_cuda_bakes_the_plan_layout() -> None:
    # vmap default keeps the batch in the plan; broadcast_all folds it into the launch dims.
    (seq,) = custom_calls(_lower_for_cuda(jax.vmap(lambda x: _triple(x)[0]), jnp.ones((3, 5), jnp.float32)).as_text())
    plan = registry.plan(seq["plan"])
    assert (plan.batch_shape, plan.launch_dims) == ((3,), (5,))
    (fold,) = custom_calls(
        _lower_for_cuda(
            jax.vmap(lambda a, b: _add_broadcast(a, b)[0], in_axes=(0, None)), jnp.ones((3, 5), jnp.float32), _x()
        ).as_text()
    )
    plan = registry.plan(fold["plan"])
    assert (plan.batch_shape, plan.launch_dims) == ((), (15,))


def test_lowering_for_cuda_and_cpu_share_one_plan() -> None:
    f = jax.jit(lambda x: _triple(x)[0])
    (cuda,) = custom_calls(f.trace(_x(7)).lower(lowering_platforms=("cuda",)).as_text())
    (cpu,) = custom_calls(f.trace(_x(7)).lower().as_text())
    assert cuda["plan"] == cpu["plan"]


def test_runtime_scalar_variant_lowers_and_compiles_for_cuda(tmp_path: Path) -> None:
    # A traced scalar argument makes jarp launch a variant of the kernel, in a Warp module of its own.
    scale = jax_kernel(k.scale_kernel)
    (call,) = custom_calls(_lower_for_cuda(lambda a, s: scale(a, s)[0], _x(), jnp.float32(3.0)).as_text())
    plan = registry.plan(call["plan"])
    assert plan.scalar_operands == (1,)
    variant = plan.target
    assert isinstance(variant, wp.Kernel)
    assert variant.module is not k.scale_kernel.module
    paths = compile_aot(variant, arch=ARCHS, module_dir=tmp_path)
    for arch, path in paths.items():
        symbols = _entry_symbols(path.read_bytes(), "forward")
        assert [s for s in symbols if re.fullmatch(re.escape(variant.key) + r"_[0-9a-f]{8}", s)], (arch, symbols)


@pytest.mark.x64
def test_float64_function_lowers_for_cuda() -> None:
    m = jax_kernel(k64.sin_mul64, enable_backward=True)
    a = jnp.linspace(0.0, 1.0, 4, dtype=jnp.float64)
    f = jax.value_and_grad(lambda a, b: jnp.sum(m(a, b)[0]))
    _check_lowering(
        f,
        (a, a),
        [
            ("jarp_warp_call", "kernel", k64.sin_mul64, []),
            ("jarp_warp_call", "adjoint", k64.sin_mul64, [((3,), 2)]),
        ],
    )
    assert "tensor<4xf64>" in _lower_for_cuda(f, a, a).as_text()


# ======================================================================================================================
# Real GPU runs (marked `gpu`; skipped without a CUDA device unless JARP_REQUIRE_GPU=1)
# ======================================================================================================================


@pytest.mark.gpu
@requires_gpu
def test_gpu_forward_and_jit_match_numpy(cuda_device: Any) -> None:
    x = jax.device_put(np.arange(1000, dtype=np.float32), cuda_device)
    (eager,) = _triple(x)
    jitted = jax.jit(lambda x: _triple(x)[0])(x)
    for y in (eager, jitted):
        assert y.devices() == {cuda_device}
        np.testing.assert_allclose(np.asarray(y), 3.0 * np.arange(1000, dtype=np.float32))
    infos = [i for i in list_plans() if i.kernel == "triple_kernel" and i.launch_dims == (1000,)]
    assert any(f"cuda:{cuda_device.id}" in i.devices for i in infos), infos


@pytest.mark.gpu
@requires_gpu
def test_gpu_grad_matches_closed_form(cuda_device: Any) -> None:
    a = jax.device_put(np.linspace(0.5, 2.0, 64, dtype=np.float32), cuda_device)
    b = jax.device_put(np.linspace(-1.0, 1.0, 64, dtype=np.float32), cuda_device)
    value, (ga, gb) = jax.jit(_value_and_grad_of_scale_sum_square)(a, b)
    inner = 2.0 * np.asarray(a) + np.asarray(b)
    np.testing.assert_allclose(float(value), np.sum(inner**2), rtol=1e-5)
    np.testing.assert_allclose(np.asarray(ga), 2.0 * inner * 2.0, rtol=1e-5)
    np.testing.assert_allclose(np.asarray(gb), 2.0 * inner, rtol=1e-5)


@pytest.mark.gpu
@requires_gpu
def test_gpu_vmap_default_and_broadcast_all(cuda_device: Any) -> None:
    rng = np.random.default_rng(0)
    xs = rng.random((4, 33), dtype=np.float32)
    b = rng.random(33, dtype=np.float32)
    seq = jax.jit(jax.vmap(lambda x: _triple(x)[0]))(jax.device_put(xs, cuda_device))
    fold = jax.jit(jax.vmap(lambda a, b: _add_broadcast(a, b)[0], in_axes=(0, None)))(
        jax.device_put(xs, cuda_device), jax.device_put(b, cuda_device)
    )
    np.testing.assert_allclose(np.asarray(seq), 3.0 * xs, rtol=1e-6)
    np.testing.assert_allclose(np.asarray(fold), xs + b, rtol=1e-6)
    # a kernel that is not elementwise: each slice gathers from its own table (default vmap)
    gather = jax_kernel(k.gather_kernel)
    tables = rng.random((4, 10), dtype=np.float32)
    idx = np.array([9, 0, 3, 3, 7], np.int32)
    out = jax.jit(jax.vmap(lambda t: gather(jnp.asarray(idx), t)[0]))(jax.device_put(tables, cuda_device))
    np.testing.assert_allclose(np.asarray(out), tables[:, idx])


# A callable run inside XLA's command buffers (CUDA graphs): the flags must be set before JAX starts its backend, so
# it runs in a process of its own. It checks the values of two calls, and that the call was captured (the executor
# kept Warp's external capture).
_COMMAND_BUFFER_SCRIPT = """
import jax, jax.numpy as jnp, numpy as np
from jarp.warp import jax_callable
from jarp.warp._ffi import _executors
from tests.support import kernels as k

f = jax.jit(lambda x: jax_callable(k.scale_func)(x, 3.0)[0] + 1.0)
x = jnp.arange(1000, dtype=jnp.float32)
for _ in range(2):
    np.testing.assert_allclose(np.asarray(f(x)), 3.0 * np.arange(1000) + 1.0, rtol=1e-6)
captures = [e.capture for e in _executors.executors.values() if isinstance(e, _executors.CallableExecutor)]
assert captures and all(c is not None for c in captures), captures
print("ok", len(captures))
"""


@pytest.mark.gpu
@requires_gpu
def test_gpu_callable_in_xla_command_buffers_is_captured_and_right_twice(cuda_device: Any) -> None:
    flags = "--xla_gpu_enable_command_buffer=CUSTOM_CALL --xla_gpu_graph_min_graph_size=1"
    env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {flags}".strip())
    proc = subprocess.run(
        [sys.executable, "-c", _COMMAND_BUFFER_SCRIPT], capture_output=True, text=True, timeout=300, env=env, cwd=REPO
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().startswith("ok"), proc.stdout


@wp.kernel(module="unique")
def _preload_probe_kernel(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    out[i] = a[i] * 7.0 - 0.25  # constants no other test kernel has: a module of its own


@pytest.mark.gpu
@requires_gpu
def test_gpu_current_device_preload_loads_on_jaxs_current_device_only(cuda_device: Any) -> None:
    cpu = wp.get_device("cpu")
    gpus = [wp.device_from_jax(d) for d in jax.local_devices(backend="cuda")]
    probe = jax_kernel(_preload_probe_kernel, module_preload_mode=wp.JaxModulePreloadMode.CURRENT_DEVICE)
    x = jnp.zeros(16, jnp.float32)
    with jax.default_device(cuda_device):
        jax.jit(lambda x: probe(x)[0]).trace(x).lower()
    current = wp.device_from_jax(cuda_device)
    assert _warp_launches.module_loaded(_preload_probe_kernel, current)
    assert not _warp_launches.module_loaded(_preload_probe_kernel, cpu)
    for gpu in gpus:
        assert _warp_launches.module_loaded(_preload_probe_kernel, gpu) == (gpu == current), gpu


@pytest.mark.gpu
@requires_gpu
def test_gpu_struct_runtime_scalar_and_tile_launches_match_the_cpu(cuda_device: Any) -> None:
    # The parameter blocks `check_cuda_launches` compares with the PTX, run for real: a struct parameter (an array and
    # a value field), a runtime scalar (its own variant kernel) and a tile kernel with its block dim, against NumPy.
    from tests.support import kernels_block_dim as tb

    rng = np.random.default_rng(3)
    w = rng.random(64, dtype=np.float32)
    x = rng.random(64, dtype=np.float32)
    scale = jax_kernel(kernels_struct.scale_kernel)
    on_gpu = jax.device_put((w, x), cuda_device)
    (out,) = jax.jit(lambda w, x, k: scale({"k": k, "w": w}, x))(*on_gpu, jnp.float32(1.5))
    assert out.devices() == {cuda_device}
    np.testing.assert_allclose(np.asarray(out), 1.5 * w * x * x, rtol=1e-6)
    a = rng.random((5, tb.TILE), dtype=np.float32)
    row_sum = jax_kernel(tb.row_sum_kernel, launch_dims=(5, tb.BLOCK), output_dims=5, block_dim=tb.BLOCK)
    (sums,) = jax.jit(lambda a: row_sum(a))(jax.device_put(a, cuda_device))
    np.testing.assert_allclose(np.asarray(sums), a.sum(axis=1), rtol=1e-5)


@pytest.mark.gpu
@requires_gpu
def test_gpu_deterministic_mode_kernel_is_refused_with_the_feature_named(cuda_device: Any) -> None:
    from tests.support import kernels_deterministic as kd

    triple = jax_kernel(kd.triple_kernel)
    with pytest.raises(NotImplementedError, match="deterministic mode"):
        jax.jit(lambda a: triple(a)[0])(jax.device_put(np.ones(8, np.float32), cuda_device))
