"""Warp and XLA internals that jarp relies on still have the shape it expects.

These fail loudly after a Warp or jaxlib upgrade that moves them, pointing at
the ``jarp/warp/_upstream/`` module that reads them (``_warp_kernels.py``, ``_warp_launches.py``, ``_warp_builds.py``,
``_warp_types.py``, ``_warp_codegen.py``, ``_jax_internals.py``, ``_xla_ffi.py``), the only modules to update.
"""

from types import SimpleNamespace

import pytest
import warp as wp

from jarp.warp._upstream import _jax_internals, _warp_builds, _warp_kernels, _warp_launches, _xla_ffi
from tests.support import kernels as k


def test_xla_ffi_layout_matches_declarations():
    _xla_ffi.check_layout()


@pytest.mark.parametrize("module", ["kernels", "launches", "builds", "types", "codegen"])
def test_warp_internals_have_expected_shape(module: str) -> None:
    # each module checks the internals it reads, beside the code that reads them
    import importlib

    importlib.import_module(f"jarp.warp._upstream._warp_{module}").check_internals()


def test_kernel_params_and_source():
    params = _warp_kernels.kernel_params(k.scale_kernel)
    assert [name for name, _ in params] == ["a", "s", "output"]
    assert wp.types.is_array(params[0][1])
    assert "output[tid] = a[tid] * s" in _warp_kernels.kernel_source(k.scale_kernel)


def test_entry_points_load_on_cpu():
    entry = _warp_launches.load_entry_points(k.triple_kernel, wp.get_device("cpu"))
    assert entry.forward != 0
    assert entry.backward != 0  # modules are built with backward by default
    assert entry.block_dim == 1


def test_cuda_grid_checks_are_the_ones_wp_launch_makes():
    lean_kernel = SimpleNamespace(key="lean", grid_stride=False)  # what launches read of a loaded kernel
    entry = SimpleNamespace(block_dim=256, cluster_dim=1)
    capacity = ((1 << 24) // 256) * 65535 * 65535 * 256  # threads the lean 3D grid holds at 256 a block
    _warp_launches.check_cuda_grid(lean_kernel, entry, capacity)
    with pytest.raises(RuntimeError, match=r"Kernel 'lean' .* exceeding the lean 3D grid capacity"):
        _warp_launches.check_cuda_grid(lean_kernel, entry, capacity + 1)
    _warp_launches.check_cuda_grid(SimpleNamespace(key="loop", grid_stride=True), entry, capacity + 1)
    clustered = SimpleNamespace(block_dim=4, cluster_dim=2)
    _warp_launches.check_cuda_grid(k.triple_kernel, clustered, 8)  # 2 blocks: one cluster
    _warp_launches.check_cuda_grid(k.triple_kernel, clustered, 13)  # 4 blocks, the last one partly used
    with pytest.raises(ValueError, match=r"got 3 blocks \(dim=9, block_dim=4\) for cluster_dim=2"):
        _warp_launches.check_cuda_grid(k.triple_kernel, clustered, 9)


# -- inspection --


def test_module_codegen_generates_cpu_and_cuda_source():
    import re

    module = k.triple_kernel.module
    cpu = _warp_builds.module_codegen(module, "cpu")
    cuda = _warp_builds.module_codegen(module, "cuda", 90)
    assert re.search(r"triple_kernel_[0-9a-f]{8}_cpu_kernel_forward\(", cpu)
    assert re.search(r"__global__ void triple_kernel_[0-9a-f]{8}_cuda_kernel_forward\(", cuda)
    assert "__global__" not in cpu
    assert _warp_builds.module_codegen(module, "cpu") == cpu  # deterministic, no state left behind


def test_default_cuda_arch_is_one_warp_can_compile_for():
    arch = _warp_builds.default_cuda_arch()
    assert isinstance(arch, int)
    assert arch in wp.get_cuda_supported_archs()


def test_jax_internals_used_by_the_primitive():
    # jarp_warp_call declares its side effect and its manual-axis (shard_map) typing through these.
    _jax_internals.check_internals()


def test_jax_internals_are_only_imported_in_one_module():
    import pathlib

    package = pathlib.Path(_jax_internals.__file__).parent.parent
    users = sorted(
        str(p.relative_to(package))
        for p in package.rglob("*.py")
        if "jax._src" in p.read_text() and p.name != "_jax_internals.py"
    )
    assert users == []
