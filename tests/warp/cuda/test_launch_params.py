"""`jarp.warp.check_cuda_launches`: every CUDA launch jarp prepares against its compiled kernel, without a GPU.

The CUDA path's tests elsewhere (``test_native_handler.py``) fake Warp's loaded module, so the parameter sizes they
see come from jarp's own model of the kernel. Here the model meets the compiled kernel: Warp compiles each module
to PTX with NVRTC (no driver), and the ``.param`` list of each entry point is compared with the parameter
block jarp's launches pass (`_arg_blocks.cuda_params`, the list both launch paths use). The suite-wide check
runs in a fresh process (``tests/support/cuda_launch_script.py``) over every kernel of the suite's kernel files,
forward and backward, runtime-scalar variants, struct parameters, tiles and the bounds-checked build.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import jax
import jax.numpy as jnp
import pytest
import warp as wp

import jarp.warp as jw
from jarp.warp import _codegen
from jarp.warp._ffi import _arg_blocks
from tests.support import kernels as k

# Kernels of the suite's files that jax_kernel refuses by design, and why (the script must see exactly these).
# The script declares in-out every input the write check sees written, so writers are prepared like the rest.
REFUSED = {
    "kernels_hostile.five_d_kernel": "5-d array",
    "kernels_struct.struct_output_kernel": "is a struct Mat; jarp does not return structs",
}
RUNTIME_REFUSED = {"kernels_struct_runtime.energy_through_func": "uses the struct 'mat' whole"}
BACKWARD_REFUSED = {"kernels_hostile.overwrite_input_kernel", "kernels_hostile.vec_component_input_kernel"}


@pytest.fixture(scope="module")
def suite_check() -> dict[str, Any]:
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.cuda_launch_script"],
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.rsplit("RESULT ", 1)[1])


def test_no_cuda_launch_of_the_suites_kernels_disagrees_with_its_compiled_kernel(suite_check: dict[str, Any]) -> None:
    checks = suite_check["checks"]
    assert all(c["ok"] for c in checks)  # check_cuda_launches raises otherwise; this guards the script
    kinds = {c["kind"] for c in checks}
    assert kinds == {"kernel", "adjoint"}
    entries = [c["entry"] for c in checks]
    assert all(e.endswith(("_cuda_kernel_forward", "_cuda_kernel_backward")) for e in entries)
    # runtime-scalar variants, structs, nested structs and tiles: each present among the checked launches
    assert any("__jarp_rt_" in e for e in entries), "no runtime-scalar variant was checked"
    for kernel in ("snh_energy", "nested_kernel", "tiled_sin2_kernel", "row_sum_kernel", "edge_energy"):
        assert any(e.startswith(kernel + "_") for e in entries), f"{kernel} (struct / tile) was not checked"
        assert any(e.startswith(kernel + "_") and e.endswith("backward") for e in entries), kernel


def test_every_kernel_of_the_suites_files_was_prepared_for_cuda(suite_check: dict[str, Any]) -> None:
    prepared = suite_check["prepared"]
    assert len(prepared) > 100  # every kernel file, every overload of the generic kernels
    refused = {name: o["forward"] for name, o in prepared.items() if o["forward"] != "ok"}
    assert set(refused) == set(REFUSED), refused
    for name, why in REFUSED.items():
        assert why in refused[name]
    runtime = {name: o["runtime"] for name, o in prepared.items() if o.get("runtime") not in (None, "ok", "no values")}
    assert set(runtime) == set(RUNTIME_REFUSED), runtime
    assert sum(o.get("runtime") == "ok" for o in prepared.values()) >= 20
    backward = {
        name: o["backward"]
        for name, o in prepared.items()
        if o.get("backward") not in (None, "ok", "no floating inputs")
    }
    assert set(backward) == BACKWARD_REFUSED, backward
    assert sum(o.get("backward") == "ok" for o in prepared.values()) >= 80
    forward_ok = sum(o["forward"] == "ok" for o in prepared.values())
    assert sum(c["kind"] == "kernel" for c in suite_check["checks"]) >= forward_ok


# ----------------------------------------------------------------------------------------------------------------------
# The check itself, in this process
# ----------------------------------------------------------------------------------------------------------------------

PTX = """
.visible .entry k_1234abcd_cuda_kernel_forward(
\t.param .align 8 .b8 k_1234abcd_cuda_kernel_forward_param_0[24],
\t.param .align 8 .b8 k_1234abcd_cuda_kernel_forward_param_1[56],
\t.param .f32 k_1234abcd_cuda_kernel_forward_param_2,
\t.param .u64 .ptr .global .align 4 k_1234abcd_cuda_kernel_forward_param_3,
\t.param .u8 k_1234abcd_cuda_kernel_forward_param_4
)
{
\tret;
}
.visible .entry empty_cuda_kernel_forward()
{
\tret;
}
"""


def test_ptx_entry_params_reads_every_kind_of_parameter_declaration() -> None:
    assert _codegen.ptx_entry_params(PTX) == {
        "k_1234abcd_cuda_kernel_forward": [24, 56, 4, 8, 1],
        "empty_cuda_kernel_forward": [],
    }


def test_ptx_entry_params_refuses_what_it_does_not_know() -> None:
    with pytest.raises(ValueError, match="unexpected PTX parameter declaration"):
        _codegen.ptx_entry_params(".entry e(\n\t.reg .f32 x\n)")


@pytest.fixture
def lowered() -> Iterator[list[Any]]:
    keep: list[Any] = []  # a lowered program holds its plans
    return keep


def _lower_scale(keep: list[Any], *, grad: bool = False) -> None:
    scale = jw.jax_kernel(k.scale_kernel, enable_backward=True)

    def f(a: jax.Array) -> jax.Array:
        return scale(a, 2.0)[0]

    g = jax.value_and_grad(lambda a: f(a).sum()) if grad else f
    keep.append(jax.jit(g).trace(jnp.ones(8, jnp.float32)).lower(lowering_platforms=("cuda",)))


def _handles(kernel: wp.Kernel) -> list[int]:
    # by identity: other test files define kernels of the same names, and a worker may have run them first
    return [i.handle for i in jw.list_plans() if i.target is kernel]


def test_a_forward_and_a_backward_launch_pass_the_parameters_of_their_entry_points(lowered: list[Any]) -> None:
    _lower_scale(lowered, grad=True)
    checks = jw.check_cuda_launches(_handles(k.scale_kernel))
    by_kind = {c.entry.rsplit("_", 1)[-1]: c for c in checks}
    assert set(by_kind) == {"forward", "backward"}
    fwd, bwd = by_kind["forward"], by_kind["backward"]
    # scale_kernel(a: array, s: float, output: array): the launch bounds, then the arguments; backward adds their adjoints
    assert fwd.passed == (("bounds", 24), ("a", 56), ("s", 4), ("output", 56))
    assert [n for n, _ in bwd.passed] == ["bounds", "a", "s", "output", "adj_a", "adj_s", "adj_output"]
    assert fwd.ok
    assert bwd.ok
    assert fwd.compiled == (24, 56, 4, 56)
    assert "takes 4 parameters, as jarp passes" in str(fwd)


def test_a_launch_that_passes_other_parameters_than_the_compiled_kernel_is_an_error(
    lowered: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    _lower_scale(lowered)
    real = _arg_blocks.plan_cuda_params

    def one_short(plan: Any, block_dim: int) -> list[_arg_blocks.CudaParam]:
        return real(plan, block_dim)[:-1]  # as a kernel with a hidden parameter would be launched

    monkeypatch.setattr(_arg_blocks, "plan_cuda_params", one_short)
    with pytest.raises(jw.CudaLaunchMismatchError) as info:
        jw.check_cuda_launches(_handles(k.scale_kernel))
    message = str(info.value)
    assert "jax_kernel(scale_kernel)" in message
    assert "declares 4 parameters of [24, 56, 4, 56] bytes, but jarp's launch passes 3" in message


def _triple_callable(a: wp.array(dtype=float), out: wp.array(dtype=float)) -> None:
    wp.launch(k.triple_kernel, dim=a.shape, inputs=[a], outputs=[out])


def test_callable_plans_are_skipped_and_a_bad_arch_is_refused(lowered: list[Any]) -> None:
    call = jw.jax_callable(_triple_callable, num_outputs=1)
    lowered.append(jax.jit(lambda a: call(a)[0]).trace(jnp.ones(4)).lower(lowering_platforms=("cuda",)))
    handles = [i.handle for i in jw.list_plans() if i.kind == "callable" and i.kernel.endswith("_triple_callable")]
    assert handles
    assert jw.check_cuda_launches(handles) == []
    with pytest.raises(ValueError, match="arch"):
        jw.check_cuda_launches(handles, arch=1)


def test_the_check_catches_the_hidden_parameters_of_a_deterministic_kernel(
    lowered: list[Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without jarp's refusal at lowering for CUDA, a deterministic-mode kernel would be launched with too few
    # parameters on a GPU; the PTX comparison sees it on a machine without one.
    from jarp.warp._plan import _launch_checks
    from tests.support import kernels_deterministic as kd

    monkeypatch.setattr(_launch_checks, "check_cuda_signature", lambda *args: None)
    triple = jw.jax_kernel(kd.triple_kernel, module_preload_mode=wp.JaxModulePreloadMode.NONE)
    f = jax.jit(lambda a: triple(a)[0])
    lowered.append(f.trace(jnp.ones(4, jnp.float32)).lower(lowering_platforms=("cuda",)))
    with pytest.raises(jw.CudaLaunchMismatchError, match=r"triple_kernel_\w+_cuda_kernel_forward .* declares 7"):
        jw.check_cuda_launches(_handles(kd.triple_kernel))
