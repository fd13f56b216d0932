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
from tests.support.warp_suite_runner import SuiteRun, run_suite

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

#: Warp's tests that fail because jarp lacks a feature (or Warp's wording): test name -> the precise cause and fix.
MISSING: dict[str, str] = {}

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
    "test_ffi_jax_kernel_validates_all_target_block_dims_during_tracing_cpu": (
        "Items in the second set but not the first",
        "the test asserts that Warp's private bridge helper warp._src.jax.ffi._build_kernel_launch_bounds is called "
        "while tracing; jarp does not run Warp's bridge: it checks the launch itself (jarp.warp._plan._launch_checks.check_launch, "
        "Warp's rule and wording, for the CUDA block dim and the CPU one) and builds the launch bounds when it "
        "prepares the executor. The accepted and refused launches are the ones Warp accepts and refuses "
        "(tests/warp/plan/test_launch_limits.py)",
    ),
    "test_ffi_jax_module_load_failure": (
        "Exception not raised",
        "the test lets a first call load the module, then makes module.load() return None and expects the next call "
        "to fail. Warp reloads on every call; jarp loads a kernel's module once per (plan, device) and keeps it "
        "loaded (a compiled executable keeps running the code it was built with), so a later failed rebuild cannot "
        "reach it; a new plan whose load fails raises Warp's 'Failed to load Warp module' error at trace time "
        "(tests/warp/plan/test_launch_limits.py). A jax_callable's function launches its kernels with wp.launch, which "
        "jarp does not intercept",
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


def test_the_suite_child_exits_normally(warp_suite: SuiteRun) -> None:
    # no os._exit: the child tears its interpreter down like any script (jarp's exit guard, docs/multi-device.md)
    assert warp_suite.exit == "exit code 0", warp_suite.log[-4000:]


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
    # Warp: "JaxCallableGraphMode.<mode> is not supported for JAX CPU FFI calls". jarp: runs (no graphs on the CPU).
    f = jax_callable(_double, graph_mode=graph_mode)
    x = jnp.arange(32, dtype=jnp.float32)
    (y,) = jax.jit(f)(x)
    np.testing.assert_allclose(np.asarray(y), 2.0 * np.arange(32, dtype=np.float32) ** 2)
