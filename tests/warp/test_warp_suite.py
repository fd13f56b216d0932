"""NVIDIA Warp's own JAX interop tests (shipped in the warp-lang wheel), run through jarp.

``warp/tests/interop/test_jax.py`` is the executable specification of the semantics users port from Warp's bridge
(``wp.jax_kernel``, ``wp.jax_callable``, ``register_ffi_callback``) to jarp. `warp_suite_runner` runs it in one child
process on two CPU devices with Warp's entry points replaced by jarp's; each of Warp's tests is one test here:

- by default it must pass, and must have called jarp at least once (unless listed in `NOT_THROUGH_JARP`);
- `MISSING` lists the tests that fail because jarp lacks a feature or Warp's wording: strict ``xfail``, so a fix
  turns them into XPASS and forces this table to be updated;
- `DELIBERATE_DIFFERENCES` lists the tests asserting a Warp limitation that jarp lifts on purpose: they must fail
  in the expected way, and the jarp behaviour is checked by the ``test_jarp_way_*`` tests below
  (and documented in ``docs/warp-differences.md``);
- `WARP_SKIPS` lists the tests Warp itself skips on a CPU-only machine: they must stay skipped.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from jax.test_util import check_grads

from jarp.warp import jax_callable, jax_kernel

from .warp_suite_runner import SuiteRun, run_suite

# Everything Warp's test_jax.py registers on this machine (CPU only, two JAX CPU devices), Warp 1.19.0.
# A new Warp version that adds or renames tests fails `test_the_suite_is_the_one_triaged` until this is updated.
WARP_TESTS = (
    "test_bf16_interop_jax_cpu",
    "test_device_conversion_cpu",
    "test_device_from_jax_uses_process_local_ordinal",
    "test_device_lookup_jax_distributed_cpu",
    "test_device_lookup_jax_distributed_cuda",
    "test_device_to_jax_returns_process_local_devices",
    "test_dtype_from_jax",
    "test_dtype_to_jax",
    "test_ffi_jax_callable_cache_argnames_cpu",
    "test_ffi_jax_callable_cache_stage_argnames_cpu",
    "test_ffi_jax_callable_cpu_graph_modes",
    "test_ffi_jax_callable_in_out_cpu",
    "test_ffi_jax_callable_integer_graph_mode",
    "test_ffi_jax_callable_pmap_mul",
    "test_ffi_jax_callable_pmap_multi_output",
    "test_ffi_jax_callable_pmap_multi_stage",
    "test_ffi_jax_callable_scale_constant_cpu",
    "test_ffi_jax_callable_scale_static_cpu",
    "test_ffi_jax_cpu_requires_cpu_support",
    "test_ffi_jax_cpu_subprocess",
    "test_ffi_jax_kernel_add_cpu",
    "test_ffi_jax_kernel_autodiff_2d_cpu",
    "test_ffi_jax_kernel_autodiff_jit_of_grad_multi_output_cpu",
    "test_ffi_jax_kernel_autodiff_jit_of_grad_simple_cpu",
    "test_ffi_jax_kernel_autodiff_mat22_cpu",
    "test_ffi_jax_kernel_autodiff_multi_output_cpu",
    "test_ffi_jax_kernel_autodiff_per_call_override_rejected_cpu",
    "test_ffi_jax_kernel_autodiff_pmap_multi_output",
    "test_ffi_jax_kernel_autodiff_pmap_triple",
    "test_ffi_jax_kernel_autodiff_simple_cpu",
    "test_ffi_jax_kernel_autodiff_static_required_cpu",
    "test_ffi_jax_kernel_autodiff_vec2_cpu",
    "test_ffi_jax_kernel_block_dim_autodiff_cpu",
    "test_ffi_jax_kernel_block_dim_autodiff_cpu_blocks_cpu",
    "test_ffi_jax_kernel_block_dim_tile_cpu",
    "test_ffi_jax_kernel_block_dim_validation",
    "test_ffi_jax_kernel_cache_argnames_cpu",
    "test_ffi_jax_kernel_cpu_shaped_tile_store",
    "test_ffi_jax_kernel_diagonal_cpu",
    "test_ffi_jax_kernel_in_out_cpu",
    "test_ffi_jax_kernel_launch_dims_autodiff_basic_cpu",
    "test_ffi_jax_kernel_launch_dims_autodiff_gradient_cpu",
    "test_ffi_jax_kernel_launch_dims_autodiff_separate_cache_cpu",
    "test_ffi_jax_kernel_launch_dims_autodiff_vmap_cpu",
    "test_ffi_jax_kernel_launch_dims_custom_cpu",
    "test_ffi_jax_kernel_launch_dims_default_cpu",
    "test_ffi_jax_kernel_output_dims_autodiff_still_blocked_cpu",
    "test_ffi_jax_kernel_rejects_oversized_explicit_scalar_tid_launch_dims_cpu",
    "test_ffi_jax_kernel_rejects_oversized_explicit_tuple_tid_launch_dims_cpu",
    "test_ffi_jax_kernel_rejects_oversized_inferred_scalar_tid_launch_dims_cpu",
    "test_ffi_jax_kernel_rejects_oversized_inferred_tuple_tid_launch_dims_cpu",
    "test_ffi_jax_kernel_scale_vec_constant_cpu",
    "test_ffi_jax_kernel_scale_vec_static_cpu",
    "test_ffi_jax_kernel_sincos_cpu",
    "test_ffi_jax_kernel_subscript_autodiff_cpu",
    "test_ffi_jax_kernel_subscript_scalar_cpu",
    "test_ffi_jax_kernel_subscript_vec_cpu",
    "test_ffi_jax_kernel_validates_all_target_block_dims_during_tracing_cpu",
    "test_ffi_jax_module_load_failure",
    "test_ffi_module_preload_all_devices_block_dim",
    "test_ffi_module_preload_load_error",
    "test_ffi_module_preload_modes",
    "test_ffi_shard_map_aggregates_input_vma",
    "test_ffi_shard_map_preserves_vma",
    "test_ffi_shard_map_vma_rank_change",
    "test_ffi_vmap_add_broadcast_all_cpu",
    "test_ffi_vmap_add_sequential_cpu",
    "test_ffi_vmap_lookup_broadcast_all_cpu",
    "test_ffi_vmap_lookup_sequential_cpu",
    "test_ffi_vmap_rowsum_broadcast_all_cpu",
    "test_ffi_vmap_rowsum_sequential_cpu",
    "test_jax_kernel_accepts_oversized_compile_time_dead_scalar_tid_launch_dims_ffi_cpu",
    "test_jax_kernel_basic_ffi_cpu",
    "test_jax_kernel_launch_dims_ffi_cpu",
    "test_jax_kernel_multiarg_ffi_cpu",
    "test_jax_kernel_scalar_ffi_cpu",
    "test_jax_kernel_vecmat_ffi_cpu",
)

_BLOCK_DIM = (
    "jarp.warp.jax_kernel has no block_dim option (TypeError: unexpected keyword argument 'block_dim'); "
    "fix: accept block_dim in jax_kernel()/JaxKernel (jarp/warp/_kernel.py), validate it with Warp's wording "
    "('block_dim must be positive', 'block_dim must be an integer or None'), expose it as .block_dim, and load and "
    "launch with it (jarp/warp/_internals.py load_entry_points, jarp/warp/_ffi.py executors)"
)
_OUTPUT_FROM_INPUT = (
    "the kernel's output has more dims than the explicit launch_dims (3-d wp.tid() over a 4-d array; Warp's "
    "differentiable jax_kernel is built on jax_callable, whose outputs default to the first array input's shape): "
    "jarp defaults output dims to the launch dims and refuses them (ValueError from _signature.output_dims_for: "
    "'must have 4 dims, got (8, 8, 8)'); fix: in jarp/warp/_call.py resolve_output_buffers, when the default "
    "(launch) dims have the wrong rank for an output, fall back to the first array input's Warp shape"
)
_TID_EXTENT = (
    "jarp refuses every launch_dims extent above 2**31 - 1 when the JaxKernel is built (ValueError from "
    "_signature.normalize_dims via _kernel._optional_dims), with its own wording; Warp allows them, and only refuses "
    "at trace time, with 'Warp cannot launch a kernel using wp.tid() with extent E in dimension D', the dims that a "
    "live wp.tid() indexes (kernel.adj.kernel_dim, tid_extent_limit_candidate, module._get_kernel_tid_extent_limit); "
    "fix: drop the MAX_EXTENT check for launch_dims in jarp/warp/_kernel.py (_optional_dims), and in trace_call "
    "(jarp/warp/_kernel.py) check the launch dims with Warp's rule and wording (a new helper in "
    "jarp/warp/_internals.py), before _call.resolve_output_buffers checks output sizes"
)
#: Warp's tests that fail because jarp lacks a feature (or Warp's wording): test name -> the precise cause and fix.
MISSING: dict[str, str] = {
    "test_jax_kernel_scalar_ffi_cpu": (
        "jnp.bfloat16 arrays are refused for a wp.bfloat16 kernel parameter (TypeError from _call._check_array: "
        "'has dtype bfloat16, but the kernel expects uint16'); fix: ArgSpec.np_dtype (jarp/warp/_signature.py) "
        "goes through wp.dtype_to_numpy, which maps wp.bfloat16 to uint16; map it to jnp.bfloat16 (ml_dtypes) instead"
    ),
    "test_jax_kernel_vecmat_ffi_cpu": (
        "jnp.bfloat16 arrays are refused for wp.vec2bf/mat22bf... kernel parameters (TypeError from "
        "_call._check_array: 'has dtype bfloat16, but the kernel expects uint16'); fix: as for scalars, map "
        "wp.bfloat16 to jnp.bfloat16 for vector/matrix element types"
    ),
    "test_ffi_jax_kernel_block_dim_validation": _BLOCK_DIM,
    "test_ffi_jax_kernel_block_dim_tile_cpu": _BLOCK_DIM + " (with wp.config.enable_cpu_blocks=True on CPU)",
    "test_ffi_jax_kernel_block_dim_autodiff_cpu": _BLOCK_DIM + ", adjoint launches included",
    "test_ffi_jax_kernel_block_dim_autodiff_cpu_blocks_cpu": _BLOCK_DIM + ", adjoint launches included",
    "test_ffi_jax_kernel_validates_all_target_block_dims_during_tracing_cpu": (
        _BLOCK_DIM + "; then it still needs launch_dims above 2**31 - 1 (see the wp.tid() extent rows), and it "
        "asserts that Warp's private warp._src.jax.ffi._build_kernel_launch_bounds is called with block dims {1, 64} "
        "while tracing, which jarp can only satisfy by validating through that private helper, looked up on its "
        "module at call time (jarp/warp/_internals.py)"
    ),
    "test_ffi_jax_kernel_launch_dims_autodiff_basic_cpu": _OUTPUT_FROM_INPUT,
    "test_ffi_jax_kernel_launch_dims_autodiff_gradient_cpu": _OUTPUT_FROM_INPUT,
    "test_ffi_jax_kernel_launch_dims_autodiff_separate_cache_cpu": _OUTPUT_FROM_INPUT,
    "test_ffi_jax_kernel_launch_dims_autodiff_vmap_cpu": _OUTPUT_FROM_INPUT + " (2-d wp.tid() over a 3-d array)",
    "test_ffi_jax_kernel_rejects_oversized_explicit_scalar_tid_launch_dims_cpu": _TID_EXTENT,
    "test_ffi_jax_kernel_rejects_oversized_explicit_tuple_tid_launch_dims_cpu": _TID_EXTENT,
    "test_ffi_jax_kernel_rejects_oversized_inferred_scalar_tid_launch_dims_cpu": (
        "the launch dims inferred from a (1 + 2**31)-element input are refused by jarp's output-size check first "
        "('output y has dims (1,), smaller than the launch dims', _call.resolve_output_buffers), not with Warp's "
        "'Warp cannot launch a kernel using wp.tid() with extent 2147483649 in dimension 0'; fix: " + _TID_EXTENT
    ),
    "test_ffi_jax_kernel_rejects_oversized_inferred_tuple_tid_launch_dims_cpu": (
        "as the scalar case, in dimension 1 of a 2-d wp.tid(): jarp's output-size check fires before any "
        "wp.tid() extent check; fix: " + _TID_EXTENT
    ),
    "test_jax_kernel_accepts_oversized_compile_time_dead_scalar_tid_launch_dims_ffi_cpu": (
        "launch_dims (2**31 + 1,) is refused at construction although the kernel's wp.tid() is dead after "
        "codegen (behind a compile-time False constant), where Warp accepts and lowers it; fix: " + _TID_EXTENT
    ),
    "test_ffi_jax_module_load_failure": (
        "a module whose load() returns None (a failed rebuild) after an earlier successful load is not reported: "
        "jax_kernel: jarp loads the entry points once per (plan, device) and caches the executor "
        "(jarp/warp/_ffi.py _get_executor), so it never sees the failure (Warp reloads, cheaply, on every call; a "
        "fresh plan does raise, now with Warp's 'Failed to load Warp module' wording, _internals.load_entry_points); "
        "jax_callable: jarp never loads the function's Warp module, and wp.launch of an unloadable module silently "
        "does nothing; fix: in the callable executor (jarp/warp/_ffi.py) load wp.get_module(func.__module__) on the "
        "device before calling func and raise RuntimeError('Failed to load Warp module ...') on None, and in the "
        "kernel executor re-check module.load() per call or document the pinning"
    ),
}

#: Warp's tests asserting a Warp limitation that jarp lifts on purpose: test name -> (what the failure must say,
#: why jarp differs). See docs/warp-differences.md; the jarp behaviour is checked by the test_jarp_way_* tests.
DELIBERATE_DIFFERENCES: dict[str, tuple[str, str]] = {
    "test_ffi_jax_kernel_autodiff_per_call_override_rejected_cpu": (
        "TypeError not raised",
        "Warp's differentiable jax_kernel refuses per-call launch_dims, output_dims and vmap_method (its custom_vjp "
        "closure fixes them at construction); jarp's adjoint plan is derived from each call's plan, so per-call "
        "options are differentiable (test_jarp_way_per_call_options_with_enable_backward)",
    ),
    "test_ffi_jax_kernel_output_dims_autodiff_still_blocked_cpu": (
        "NotImplementedError not raised",
        "Warp raises NotImplementedError for output_dims with enable_backward=True; jarp supports it "
        "(test_jarp_way_output_dims_with_enable_backward)",
    ),
    "test_ffi_jax_callable_cpu_graph_modes": (
        "Exception not raised",
        "Warp refuses JaxCallableGraphMode.WARP/WARP_STAGED/WARP_STAGED_EX on CPU (they capture Warp CUDA graphs); "
        "jarp never captures Warp graphs and runs these modes like NONE on every device, CPU included "
        "(test_jarp_way_warp_graph_modes_run_on_cpu)",
    ),
}

#: Warp's tests that Warp itself skips on a CPU-only machine: test name -> the start of Warp's skip reason.
WARP_SKIPS: dict[str, str] = {
    "test_device_lookup_jax_distributed_cuda": "Requires at least two CUDA devices",
    "test_ffi_jax_callable_pmap_mul": "Flaky: race condition in multi-device JAX pmap",
    "test_ffi_jax_callable_pmap_multi_output": "Flaky: race condition in multi-device JAX pmap",
    "test_ffi_jax_callable_pmap_multi_stage": "Flaky: race condition in multi-device JAX pmap",
    "test_ffi_jax_kernel_autodiff_pmap_multi_output": "Flaky: race condition in multi-device JAX pmap",
}

#: Warp's tests that check Warp's own utilities (dtype and device conversion, Warp's private preloading helper) and
#: never call an entry point jarp replaces: they must pass, but say nothing about jarp.
NOT_THROUGH_JARP = frozenset(
    {
        "test_bf16_interop_jax_cpu",
        "test_device_conversion_cpu",
        "test_device_from_jax_uses_process_local_ordinal",
        "test_device_lookup_jax_distributed_cpu",
        "test_device_to_jax_returns_process_local_devices",
        "test_dtype_from_jax",
        "test_dtype_to_jax",
        "test_ffi_module_preload_all_devices_block_dim",
        "test_ffi_module_preload_load_error",
        "test_ffi_module_preload_modes",
    }
)

# The whole suite, shared by every test of this file. About a minute on an idle 2-core machine (half of it one of
# Warp's tests that recompiles its module into a fresh kernel cache in a grandchild process).
_SUITE_TIMEOUT = 300.0


@pytest.fixture(scope="module")
def warp_suite() -> SuiteRun:
    return run_suite(timeout=_SUITE_TIMEOUT)


def _param(name: str) -> object:
    if name in MISSING:
        return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=MISSING[name]))
    return name


def test_tables_are_consistent() -> None:
    tables = [set(MISSING), set(DELIBERATE_DIFFERENCES), set(WARP_SKIPS), set(NOT_THROUGH_JARP)]
    for i, a in enumerate(tables):
        assert a <= set(WARP_TESTS), a - set(WARP_TESTS)
        for b in tables[i + 1 :]:
            assert not a & b, a & b


def test_the_suite_is_the_one_triaged(warp_suite: SuiteRun) -> None:
    assert warp_suite.collected, f"Warp's suite did not run:\n{warp_suite.log}"
    assert sorted(warp_suite.collected) == sorted(WARP_TESTS), (
        "Warp's test_jax.py registers other tests than the ones triaged here (a new Warp version?): "
        f"new {sorted(set(warp_suite.collected) - set(WARP_TESTS))}, "
        f"gone {sorted(set(WARP_TESTS) - set(warp_suite.collected))}"
    )
    assert "warp.jax_kernel" in warp_suite.replaced
    assert "warp.jax_callable" in warp_suite.replaced
    import jarp.warp

    if hasattr(jarp.warp, "register_ffi_callback"):
        assert "warp._src.jax.ffi.register_ffi_callback" in warp_suite.replaced


@pytest.mark.parametrize("name", [_param(n) for n in WARP_TESTS if n not in DELIBERATE_DIFFERENCES])
def test_warp_suite(warp_suite: SuiteRun, name: str) -> None:
    outcome = warp_suite.outcomes[name]
    if name in WARP_SKIPS:
        assert outcome.outcome == "skipped", outcome.detail
        assert outcome.detail.startswith(WARP_SKIPS[name]), outcome.detail
        return
    assert outcome.outcome == "passed", f"{outcome.outcome}:\n{outcome.detail}"
    if name not in NOT_THROUGH_JARP:
        assert outcome.jarp_calls > 0, "the test passed without calling jarp: the entry points were not replaced"


@pytest.mark.parametrize("name", sorted(DELIBERATE_DIFFERENCES))
def test_warp_suite_deliberate_difference(warp_suite: SuiteRun, name: str) -> None:
    # Warp's test asserts a limitation jarp lifts: it must fail, and only because jarp did not refuse.
    expected, _why = DELIBERATE_DIFFERENCES[name]
    outcome = warp_suite.outcomes[name]
    assert outcome.outcome == "failed", f"{outcome.outcome}:\n{outcome.detail}"
    assert outcome.jarp_calls > 0
    failures = [line for line in outcome.detail.splitlines() if line.startswith("AssertionError")]
    assert failures, outcome.detail
    assert all(expected in line for line in failures), outcome.detail


# -- the jarp side of each deliberate difference, on the same calls as Warp's tests ------------------------------------


@wp.kernel
def _copy_kernel(a: wp.array1d[wp.float32], b: wp.array1d[wp.float32]):
    i = wp.tid()
    b[i] = a[i]


@wp.kernel
def _scale_kernel(a: wp.array1d[wp.float32], b: wp.array1d[wp.float32]):
    i = wp.tid()
    b[i] = 2.0 * a[i] * a[i]


def _double(a: wp.array1d[wp.float32], b: wp.array1d[wp.float32]):
    wp.launch(_scale_kernel, dim=a.shape, inputs=[a], outputs=[b])


def test_jarp_way_per_call_options_with_enable_backward() -> None:
    # Warp: TypeError "launch_dims cannot be overridden per-call" / "output_dims is not supported" /
    # "vmap_method cannot be overridden per-call". jarp: all three work, and differentiate.
    n = 8
    m = jax_kernel(_scale_kernel, num_outputs=1, launch_dims=(n,), enable_backward=True)
    a = jnp.linspace(-1.0, 1.0, n, dtype=jnp.float32)
    (full,) = m(a, launch_dims=(n,))
    np.testing.assert_allclose(np.asarray(full), 2.0 * np.asarray(a) ** 2, rtol=1e-6)
    # half the launch, a larger output: the tail stays zero-filled
    (half,) = m(a, launch_dims=(n // 2,), output_dims={"b": (n,)})
    ref = np.where(np.arange(n) < n // 2, 2.0 * np.asarray(a) ** 2, 0.0)
    np.testing.assert_allclose(np.asarray(half), ref, rtol=1e-6)
    batch = jnp.stack([a, 2 * a])
    (vm,) = jax.vmap(lambda x: m(x, vmap_method="sequential"))(batch)
    np.testing.assert_allclose(np.asarray(vm), 2.0 * np.asarray(batch) ** 2, rtol=1e-6)
    check_grads(
        lambda x: m(x, launch_dims=(n // 2,), output_dims={"b": (n,)})[0],
        (a,),
        order=1,
        modes=["rev"],
        atol=1e-2,
        rtol=1e-2,
    )
    grad = jax.grad(lambda x: jnp.sum(m(x, launch_dims=(n // 2,))[0]))(a)
    np.testing.assert_allclose(np.asarray(grad), np.where(np.arange(n) < n // 2, 4.0 * np.asarray(a), 0.0), rtol=1e-6)


def test_jarp_way_output_dims_with_enable_backward() -> None:
    # Warp: NotImplementedError. jarp: accepted, and differentiable.
    m = jax_kernel(_copy_kernel, num_outputs=1, output_dims={"b": (8,)}, enable_backward=True)
    a = jnp.arange(8, dtype=jnp.float32)
    (b,) = m(a)
    np.testing.assert_array_equal(np.asarray(b), np.arange(8, dtype=np.float32))
    grad = jax.grad(lambda x: jnp.vdot(jnp.arange(8, dtype=jnp.float32), m(x)[0]))(a)
    np.testing.assert_array_equal(np.asarray(grad), np.arange(8, dtype=np.float32))


@pytest.mark.parametrize(
    "graph_mode",
    [wp.JaxCallableGraphMode.WARP, wp.JaxCallableGraphMode.WARP_STAGED, wp.JaxCallableGraphMode.WARP_STAGED_EX],
)
def test_jarp_way_warp_graph_modes_run_on_cpu(graph_mode: wp.JaxCallableGraphMode) -> None:
    # Warp: "JaxCallableGraphMode.<mode> is not supported for JAX CPU FFI calls". jarp: runs like NONE.
    f = jax_callable(_double, graph_mode=graph_mode)
    x = jnp.arange(32, dtype=jnp.float32)
    (y,) = jax.jit(f)(x)
    np.testing.assert_allclose(np.asarray(y), 2.0 * np.arange(32, dtype=np.float32) ** 2)
