"""Inspection: `list_plans`, `kernel_source` and the argument checks of `compile_aot`.

The ahead-of-time builds themselves (sm_80 / sm_90 binaries of every test kernel) are checked in ``cuda/test_gpu.py``.
Plans are found by the handle their lowered custom call carries, so the tests do not depend on what other tests
registered before them.
"""

from __future__ import annotations

import dataclasses
import math
import re
import warnings
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

from jarp.warp import jax_callable, jax_kernel
from jarp.warp._codegen import compile_aot, kernel_source
from jarp.warp._ffi._registry import registry
from jarp.warp._inspect import BufferInfo, ParamInfo, PlanInfo, list_plans
from tests.support import kernels as k
from tests.support import kernels64 as k64
from tests.support.lowered import plan_handles

F32 = "array(ndim=1, dtype=float32)"


def _handles(f: Callable[..., Any], *args: Any) -> list[int]:
    """The plan handles of the jarp custom calls in ``jit(f)``'s lowering, in program order."""
    text = jax.jit(f).trace(*args).lower().as_text()
    return plan_handles(text)


def _info(f: Callable[..., Any], *args: Any) -> list[PlanInfo]:
    handles = _handles(f, *args)  # lowering registers the plans; list them afterwards
    plans = {p.handle: p for p in list_plans()}
    return [plans[h] for h in handles]


# ======================================================================================================================
# list_plans
# ======================================================================================================================


def test_list_plans_is_a_snapshot_in_handle_order() -> None:
    # keep the jitted function (and so its executable's lease on the plan): listing is a safe point that releases
    # plans no executable uses, so a plan of a dropped function may already be gone (after test_lifetimes, all are)
    f = jax.jit(lambda x: jax_kernel(k.triple_kernel)(x)[0])
    f(jnp.ones(3, jnp.float32))
    plans = list_plans()
    assert isinstance(plans, list)
    assert len(plans) == len(registry) > 0
    handles = [p.handle for p in plans]
    assert handles == sorted(set(handles))  # increasing; released handles are skipped, never reused
    assert all(isinstance(p, PlanInfo) for p in plans)


def test_forward_kernel_plan_record() -> None:
    triple = jax_kernel(k.triple_kernel)
    f = lambda x: triple(x)[0]  # noqa: E731
    x = jnp.ones(13, jnp.float32)
    (info,) = _info(f, x)
    assert info.kind == "kernel"
    assert info.kernel == "triple_kernel"
    assert info.module == "tests.support.kernels"
    assert info.name == "jax_kernel(triple_kernel)"
    assert info.target is k.triple_kernel
    assert info.params == (ParamInfo("input", F32, "operand 0"), ParamInfo("output", F32, "result 0"))
    assert info.launch_dims == (13,)
    assert info.operands == (BufferInfo((13,), "float32"),)
    assert info.results == (BufferInfo((13,), "float32"),)
    assert info.batch_shape == ()
    assert info.zero_results == ()  # every thread overwrites its own element: no fill
    assert info.aliases == ()
    assert info.scalar_operands == ()
    assert (info.has_side_effect, info.graph_compatible) == (False, True)


def test_devices_list_where_a_plan_ran() -> None:
    triple = jax_kernel(k.triple_kernel)
    f = lambda x: triple(x)[0]  # noqa: E731
    x = jnp.ones(17, jnp.float32)
    (lowered_only,) = _info(f, x)
    if "cpu" not in lowered_only.devices:  # another test may have run this exact plan already
        assert lowered_only.devices == ()
    jax.block_until_ready(jax.jit(f)(x))
    (ran,) = _info(f, x)
    assert ran.handle == lowered_only.handle
    assert ran.devices == ("cpu",)


def test_scalar_static_parameter_and_zero_filled_accumulator() -> None:
    scale = jax_kernel(k.scale_kernel)
    (info,) = _info(lambda a: scale(a, 2.5)[0], jnp.ones(6, jnp.float32))
    assert info.params[1] == ParamInfo("s", "float32", "static 2.5")
    hist = jax_kernel(k.scatter_add_kernel, output_dims=k.N_BINS)
    (info,) = _info(lambda i, w: hist(i, w)[0], jnp.asarray(k.BINS), jnp.asarray(k.BIN_WEIGHTS))
    assert info.zero_results == (0,)  # atomic accumulation: the output must start at zero
    assert info.results == (BufferInfo((k.N_BINS,), "float32"),)
    assert info.operands == (BufferInfo((8,), "int32"), BufferInfo((8,), "float32"))


def test_runtime_scalar_plan_record() -> None:
    scale = jax_kernel(k.scale_kernel)
    (info,) = _info(lambda a, s: scale(a, s)[0], jnp.ones(6, jnp.float32), jnp.float32(2.5))  # traced scalar
    assert info.scalar_operands == (1,)
    assert info.operands == (BufferInfo((6,), "float32"), BufferInfo((1,), "float32"))
    assert info.kernel.startswith("scale_kernel")
    assert info.target is not k.scale_kernel  # a variant that reads the scalar from a one-element array
    assert [p.primal for p in info.params] == ["operand 0", "operand 1", "result 0"]
    assert "runtime scalar operands (1,)" in str(info)
    assert re.search(r"_cpu_kernel_forward\(", kernel_source(info.target))


def test_adjoint_plan_record() -> None:
    m = jax_kernel(k.scale_sum_square, enable_backward=True)
    f = jax.value_and_grad(lambda a, b: jnp.sum(m(a, b, 2.0)[0]), argnums=(0, 1))
    forward, adjoint = _info(f, jnp.ones(4, jnp.float32), jnp.ones(4, jnp.float32))
    assert (forward.kind, adjoint.kind) == ("kernel", "adjoint")
    assert adjoint.kernel == forward.kernel == "scale_sum_square"
    # operands: a, b, cotangent of out; results: a_bar, b_bar, a zero stand-in for out, a copy of its cotangent
    assert len(adjoint.operands) == 3
    assert len(adjoint.results) == 4
    assert adjoint.aliases == ((2, 3),)
    assert adjoint.zero_results == (0, 1, 2)
    assert [(p.name, p.primal, p.adjoint) for p in adjoint.params] == [
        ("a", "operand 0", "result 0"),
        ("b", "operand 1", "result 1"),
        ("s", "static 2.0", "static 0.0"),
        ("out", "result 2", "result 3"),
    ]
    assert all(p.adjoint == "" for p in forward.params)


def test_callable_adjoint_plan_record_names_its_adjoint_bindings() -> None:
    m = jax_callable(k.scale_func, enable_backward=True)
    f = jax.value_and_grad(lambda a: jnp.sum(m(a, 2.0)[0]))
    forward, adjoint = _info(f, jnp.ones(4, jnp.float32))
    assert (forward.kind, adjoint.kind) == ("callable", "callable_adjoint")
    assert [(p.name, p.primal, p.adjoint) for p in adjoint.params] == [
        # the taped replay writes what the function writes: a private copy of the protected input
        ("a", "result 5", "result 0"),
        ("s", "static 2.0", "static 0.0"),
        # results: a_bar, out, the protected copy of a, out_bar, its cotangent, then the replay's copy of a
        ("out", "result 1", "result 3"),
    ]


def test_vmap_plans_record_the_batch_layout() -> None:
    triple = jax_kernel(k.triple_kernel)
    (seq,) = _info(jax.vmap(lambda x: triple(x)[0]), jnp.ones((3, 5), jnp.float32))
    assert (seq.batch_shape, seq.launch_dims) == ((3,), (5,))
    assert seq.operands == (BufferInfo((3, 5), "float32"),)
    assert seq.results == (BufferInfo((3, 5), "float32"),)
    add = jax_kernel(k.add_kernel)
    (unbatched_b,) = _info(
        jax.vmap(lambda a, b: add(a, b)[0], in_axes=(0, None)), jnp.ones((2, 5), jnp.float32), jnp.ones(5, jnp.float32)
    )
    assert unbatched_b.operands == (BufferInfo((2, 5), "float32"), BufferInfo((5,), "float32"))
    folded = jax_kernel(k.add_kernel, vmap_method="broadcast_all")
    (fold,) = _info(
        jax.vmap(lambda a, b: folded(a, b)[0], in_axes=(0, None)), jnp.ones((3, 5), jnp.float32), jnp.ones(5)
    )
    assert (fold.batch_shape, fold.launch_dims) == ((), (15,))


def test_in_out_kernel_plan_record() -> None:
    m = jax_kernel(k.rowsum_count_kernel, num_outputs=2, in_out_argnames=["sums"], output_dims={"counts": 2})
    (info,) = _info(lambda a, s: m(a, s), jnp.ones((2, 3), jnp.float32), jnp.zeros(2, jnp.float32))
    assert info.aliases == ((1, 0),)
    assert info.zero_results == (1,)
    assert info.launch_dims == (2, 3)
    assert [(p.name, p.type, p.primal) for p in info.params] == [
        ("matrix", "array(ndim=2, dtype=float32)", "operand 0"),
        ("sums", F32, "result 0"),
        ("counts", F32, "result 1"),
    ]


def test_callable_plan_record() -> None:
    cb = jax_callable(k.scale_func, graph_mode=wp.JaxCallableGraphMode.NONE, has_side_effect=True)
    (info,) = _info(lambda a: cb(a, 3.0)[0], jnp.ones(9, jnp.float32))
    assert info.kind == "callable"
    assert (info.kernel, info.module) == ("scale_func", "tests.support.kernels")
    assert info.target is k.scale_func
    assert info.launch_dims == ()
    assert info.params[1] == ParamInfo("s", "float32", "static 3.0")
    assert (info.has_side_effect, info.graph_compatible) == (True, False)


@pytest.mark.parametrize(
    ("graph_mode", "captured"),
    [
        (wp.JaxCallableGraphMode.JAX, True),
        (wp.JaxCallableGraphMode.NONE, False),
        # Warp's own capture modes: captured by XLA's command buffers, never a Python launch at every call
        (wp.JaxCallableGraphMode.WARP, True),
        (wp.JaxCallableGraphMode.WARP_STAGED, True),
        (wp.JaxCallableGraphMode.WARP_STAGED_EX, True),
    ],
)
def test_graph_modes_that_capture_are_graph_compatible(graph_mode: wp.JaxCallableGraphMode, captured: bool) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the Warp-side modes say at construction what runs instead
        cb = jax_callable(k.scale_func, graph_mode=graph_mode)
    (info,) = _info(lambda a: cb(a, 3.0)[0], jnp.ones(9, jnp.float32))
    assert info.graph_compatible is captured


def test_records_are_frozen_hashable_and_print_readably() -> None:
    vec = jax_kernel(k.scale_vec2)
    (info,) = _info(lambda a: vec(a, 2.0)[0], jnp.ones((4, 2), jnp.float32))
    assert info.params[0].type == "array(ndim=1, dtype=vec2f)"
    assert info.operands == (BufferInfo((4, 2), "float32"),)  # vector elements are trailing JAX dims
    with pytest.raises(dataclasses.FrozenInstanceError):
        info.kind = "adjoint"  # type: ignore[misc]
    assert hash(info) == hash(dataclasses.replace(info))
    text = str(info)
    assert text.startswith(f"plan {info.handle}: kernel scale_vec2 (module tests.support.kernels)")
    assert "float32[4, 2]" in text
    assert "a: array(ndim=1, dtype=vec2f) <- operand 0" in text
    assert "s: float32 <- static 2.0" in text


# ======================================================================================================================
# kernel_source
# ======================================================================================================================


def test_kernel_source_cpu_for_every_accepted_argument() -> None:
    source = kernel_source(k.triple_kernel)
    assert re.search(r"triple_kernel_[0-9a-f]{8}_cpu_kernel_forward\(", source)
    assert re.search(r"triple_kernel_[0-9a-f]{8}_cpu_kernel_backward\(", source)
    # the whole Warp module: every kernel of kernels.py
    for name in ("sincos_kernel", "spring_kernel", "matmul_kernel"):
        assert re.search(name + r"_[0-9a-f]{8}_cpu_kernel_forward\(", source), name
    assert "__global__" not in source
    for same in (jax_kernel(k.triple_kernel), k.triple_kernel.module, k, kernel_source(k.add_kernel, "cpu")):
        assert (same if isinstance(same, str) else kernel_source(same)) == source


def test_kernel_source_cuda_with_generic_overloads() -> None:
    source = kernel_source(jax_kernel(k64.generic_add_kernel, arg_types_factory=k64.generic_add_arg_types_list), "cuda")
    forwards = re.findall(r"__global__ void (generic_add_kernel_[0-9a-f]{8})_cuda_kernel_forward\(", source)
    assert len(set(forwards)) == len(k64.generic_add_kernel.overloads) == 3
    assert "cpu_kernel_forward" not in source
    assert kernel_source(k64, "cuda", arch=90) == kernel_source(k64.generic_add_kernel.module, "cuda", arch=90)


def test_kernel_source_default_arch_is_warps() -> None:
    from jarp.warp._upstream import _warp_builds

    assert kernel_source(k64, "cuda") == kernel_source(k64, "cuda", arch=_warp_builds.default_cuda_arch())


@pytest.mark.parametrize(
    ("arg", "kwargs", "error", "match"),
    [
        (k.triple_kernel, {"device": "tpu"}, ValueError, "device must be 'cpu' or 'cuda'"),
        (k.triple_kernel, {"device": "cuda", "arch": "90"}, TypeError, "arch must be an int"),
        (jax_callable(k.scale_func), {}, TypeError, "JaxCallable launches whatever kernels"),
        (42, {}, TypeError, "got int"),
        (math, {}, ValueError, "defines no Warp kernels"),
        (wp.get_module("jarp_test_inspect_empty_module"), {}, ValueError, "has no kernels"),
    ],
    ids=["device", "arch", "jax-callable", "int", "no-kernels-module", "empty-warp-module"],
)
def test_kernel_source_rejects_bad_arguments(arg: Any, kwargs: dict[str, Any], error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        kernel_source(arg, **kwargs)


# ======================================================================================================================
# compile_aot: argument checks (the builds are in cuda/test_gpu.py)
# ======================================================================================================================


@pytest.mark.parametrize(
    ("arg", "arch", "error", "match"),
    [
        (k.triple_kernel, (), ValueError, "at least one CUDA architecture"),
        (k.triple_kernel, (80, "90"), TypeError, "arch must be an int"),
        (k.triple_kernel, True, TypeError, "arch must be an int"),
        (k.triple_kernel, 12, ValueError, r"arch \[12\] not supported"),
        (jax_callable(k.scale_func), 90, TypeError, "JaxCallable"),
        (np.float32, 90, TypeError, "expected a JaxKernel"),
    ],
    ids=["empty", "str-arch", "bool-arch", "unsupported-arch", "jax-callable", "not-a-kernel"],
)
def test_compile_aot_rejects_bad_arguments(arg: Any, arch: Any, error: type, match: str, tmp_path: Any) -> None:
    with pytest.raises(error, match=match):
        compile_aot(arg, arch=arch, module_dir=tmp_path)
    assert list(tmp_path.iterdir()) == []  # nothing was built
