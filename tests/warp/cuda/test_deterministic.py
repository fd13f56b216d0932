"""Warp's deterministic mode: kernels it adds hidden CUDA parameters to run on the CPU and are refused for CUDA.

In deterministic mode Warp appends buffers to the CUDA signatures of some kernels and supplies them from its own
launcher (``warp._src.deterministic.launch_deterministic``); a jarp launch would pass too few parameters. Which
kernels get them is `_warp_launches.cuda_hidden_params`; the tests check its answer against the CUDA source
Warp generates (no GPU needed), that those kernels are refused when lowered for CUDA and when a CUDA executor is
built, and that the CPU, whose signatures are unchanged, runs them with correct values.
"""

import re
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp

import jarp.warp as jw
from jarp.warp._ffi import _executors
from jarp.warp._ffi._registry import registry
from jarp.warp._upstream import _warp_kernels, _warp_launches
from tests.support import kernels as plain
from tests.support import kernels_deterministic as kd
from tests.support.lowered import plan_handles

A = jnp.asarray(np.random.default_rng(0).normal(size=64), dtype=jnp.float32)
INDEX = jnp.asarray(np.random.default_rng(1).integers(0, 5, size=64), dtype=jnp.int32)


@pytest.fixture
def config_mode() -> Iterator[Any]:
    """Set ``wp.config.deterministic`` for one test (yields a setter) and restore it after."""
    saved = wp.config.deterministic

    def set_mode(mode: Any) -> None:
        wp.config.deterministic = mode

    yield set_mode
    wp.config.deterministic = saved


def _forward_param_count(kernel: wp.Kernel, device: str) -> int:
    """The number of parameters of ``kernel``'s forward entry point in the source Warp generates for ``device``."""
    source = jw.kernel_source(kernel, device)
    found = re.findall(rf"\b{kernel.key}_\w+_{device}_kernel_forward\(([^)]*)\)", source)
    assert len(found) == 1, f"{kernel.key}: {len(found)} forward signatures in the {device} source"
    return len(found[0].split(","))


@pytest.mark.parametrize(
    ("kernel", "hidden"),
    [
        (kd.sum_kernel, True),
        (kd.scatter_add_kernel, True),
        (kd.triple_kernel, True),  # no atomic in its source, but its adjoint accumulates adj_a
        (kd.iota_kernel, False),
        (kd.int_triple_kernel, False),
        (plain.triple_kernel, False),  # not a deterministic module
    ],
    ids=lambda v: getattr(v, "key", v),
)
def test_hidden_params_are_those_in_the_generated_cuda_signature(kernel: wp.Kernel, hidden: bool) -> None:
    params = len(_warp_kernels.kernel_params(kernel))
    cuda = _forward_param_count(kernel, "cuda")  # the launch bounds, the parameters, then any hidden ones
    assert (cuda > params + 1) is hidden
    feature = _warp_launches.cuda_hidden_params(kernel)
    assert (feature == "deterministic mode (RUN_TO_RUN)") if hidden else feature is None
    assert _forward_param_count(kernel, "cpu") == 3  # bounds, task index, the argument block: unchanged


def test_deterministic_kernels_run_on_the_cpu() -> None:
    (total,) = jw.jax_kernel(kd.sum_kernel, output_dims=1)(A)
    np.testing.assert_allclose(np.asarray(total), [np.sum(np.asarray(A))], rtol=1e-5)
    (out,) = jw.jax_kernel(kd.scatter_add_kernel, output_dims=5)(A, INDEX)
    expected = np.zeros(5, np.float32)
    np.add.at(expected, np.asarray(INDEX), np.asarray(A))
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-5)
    (tripled,) = jax.jit(jw.jax_kernel(kd.triple_kernel))(A)
    np.testing.assert_allclose(np.asarray(tripled), 3.0 * np.asarray(A), rtol=1e-6)


def test_deterministic_kernels_differentiate_on_the_cpu() -> None:
    triple = jw.jax_kernel(kd.triple_kernel, enable_backward=True)
    grad = jax.grad(lambda a: jnp.sum(triple(a)[0] ** 2))(A)
    np.testing.assert_allclose(np.asarray(grad), 18.0 * np.asarray(A), rtol=1e-5)


def test_config_deterministic_is_refused_for_cuda_and_runs_on_the_cpu(config_mode: Any) -> None:
    config_mode(wp.DeterministicMode.GPU_TO_GPU)
    kernel = kd.make_config_sum_kernel()  # its module is created now, in GPU_TO_GPU mode
    config_mode(wp.DeterministicMode.NOT_GUARANTEED)  # the module keeps its mode
    assert _warp_launches.cuda_hidden_params(kernel) == "deterministic mode (GPU_TO_GPU)"
    module = jw.jax_kernel(kernel, output_dims=1)
    (total,) = module(A)
    np.testing.assert_allclose(np.asarray(total), [np.sum(np.asarray(A))], rtol=1e-5)
    with pytest.raises(NotImplementedError, match=r"deterministic mode \(GPU_TO_GPU\)"):
        jax.jit(lambda a: module(a)).trace(A).lower(lowering_platforms=("cuda",))


def _lower_for_cuda(fn: Any, *args: Any) -> str:
    return jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()


@pytest.mark.parametrize(
    ("kernel", "args", "options"),
    [
        (kd.sum_kernel, (A,), {"output_dims": 1}),
        (kd.scatter_add_kernel, (A, INDEX), {"output_dims": 5}),
        (kd.triple_kernel, (A,), {}),
    ],
    ids=lambda v: getattr(v, "key", None),
)
def test_lowering_for_cuda_is_refused(kernel: wp.Kernel, args: tuple[Any, ...], options: dict[str, Any]) -> None:
    module = jw.jax_kernel(kernel, **options)
    with pytest.raises(NotImplementedError) as info:
        _lower_for_cuda(lambda *a: module(*a), *args)
    message = str(info.value)
    assert f"kernel {kernel.key!r}" in message
    assert "deterministic mode (RUN_TO_RUN)" in message
    assert "hidden parameters to its CUDA entry points" in message
    assert "wp.DeterministicMode.NOT_GUARANTEED" in message
    assert "run it on the CPU" in message
    assert "jax_callable" in message


def test_lowering_the_adjoint_for_cuda_is_refused() -> None:
    triple = jw.jax_kernel(kd.triple_kernel, enable_backward=True)
    with pytest.raises(NotImplementedError, match=r"kernel 'triple_kernel'.*deterministic mode \(RUN_TO_RUN\)"):
        _lower_for_cuda(jax.grad(lambda a: jnp.sum(triple(a)[0])), A)


def test_kernels_without_hidden_params_lower_for_cuda() -> None:
    iota = jw.jax_kernel(kd.iota_kernel, launch_dims=8)
    assert "jarp" in _lower_for_cuda(lambda: iota()[0])
    int_triple = jw.jax_kernel(kd.int_triple_kernel)
    assert "jarp" in _lower_for_cuda(lambda a: int_triple(a)[0], INDEX)


def test_callables_launching_deterministic_kernels_lower_for_cuda() -> None:
    """``wp.launch`` supplies the hidden parameters itself, so a `jax_callable` around it is not refused."""

    def total(a: wp.array(dtype=float), out: wp.array(dtype=float)) -> None:
        wp.launch(kd.sum_kernel, dim=a.shape[0], inputs=[a], outputs=[out])

    module = jw.jax_callable(total)
    assert "jarp" in _lower_for_cuda(lambda a: module(a, output_dims=1)[0], A)


def test_a_cuda_executor_refuses_before_loading_anything() -> None:
    module = jw.jax_kernel(kd.sum_kernel, output_dims=1)
    text = jax.jit(lambda a: module(a)[0]).lower(A).as_text()  # lowered for the CPU: a plan is registered
    (handle,) = set(plan_handles(text))
    plan = registry.plan(handle)
    with pytest.raises(NotImplementedError, match=r"kernel 'sum_kernel'.*deterministic mode \(RUN_TO_RUN\)"):
        _executors.CudaKernelExecutor(plan, object())  # refused before the device is touched
