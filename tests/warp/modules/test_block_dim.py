"""``block_dim``: tile kernels through jarp, on the CPU (one thread per block, or cooperative CPU blocks) and for CUDA.

A tile kernel is launched as ``wp.launch_tiled`` does: over ``(*grid, block_dim)``, the trailing lane dim holding the
threads that share each tile. On the CPU Warp runs one thread per block unless ``wp.config.enable_cpu_blocks`` is on:
every lane then runs the whole tile alone (stores are repeated, harmlessly), and an accumulating adjoint would be
repeated too, so the gradient tests launch such kernels over the grid alone, or with cooperative CPU blocks.

Kernels that need cooperative CPU blocks live in modules of their own (``module="unique"``): jarp prepares a plan's
CPU launch once, when it first runs, with the value ``wp.config.enable_cpu_blocks`` has then.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import warp as wp
from jax.test_util import check_grads

from jarp.warp import jax_kernel
from jarp.warp._codegen import compile_aot, kernel_source
from jarp.warp._ffi._registry import registry
from jarp.warp._inspect import list_plans
from jarp.warp._upstream import _warp_launches
from tests.support.kernels_block_dim import BLOCK, TILE, row_sum_kernel
from tests.support.lowered import plan_handles as _plan_handles

pytestmark = pytest.mark.launch_paths  # also run on the Python launch path (noxfile.py)

TM, TN = 2, 8  # tile shape of the elementwise kernel


@wp.kernel
def tiled_sin2_kernel(a: wp.array2d(dtype=float), b: wp.array2d(dtype=float)):
    i, j = wp.tid()
    t = wp.tile_load(a, shape=(TM, TN), offset=(i * TM, j * TN))
    wp.tile_store(b, wp.tile_map(wp.sin, t) * 2.0, offset=(i * TM, j * TN))


@wp.kernel
def row_weighted_kernel(a: wp.array2d(dtype=float), out: wp.array(dtype=float)):
    # reads through a row view: Warp's adjoint accumulates into the view's gradient, i.e. a's
    i = wp.tid()
    row = a[i]
    out[i] = 1.0 * row[0] + 2.0 * row[1] + 3.0 * row[2]


@wp.kernel
def scale_by_block_dim_kernel(a: wp.array(dtype=float), b: wp.array(dtype=float)):
    i = wp.tid()
    b[i] = a[i] * float(wp.block_dim())


# -- kernels run with cooperative CPU blocks (own modules, see the module docstring) --


@wp.kernel(module="unique")
def block_sum_cpu_blocks_kernel(out: wp.array(dtype=int)):
    # Warp's own block_dim test: each block sums its threads' indices into its first element
    i = wp.tid()
    out[i] = 0
    s = wp.tile_sum(wp.tile(i))
    wp.tile_store(out, s, offset=i)


@wp.kernel(module="unique")
def scale_by_block_dim_cpu_blocks_kernel(a: wp.array(dtype=float), b: wp.array(dtype=float)):
    i = wp.tid()
    b[i] = a[i] * float(wp.block_dim())


@wp.kernel(module="unique")
def tiled_sin2_cpu_blocks_kernel(a: wp.array2d(dtype=float), b: wp.array2d(dtype=float)):
    i, j = wp.tid()
    t = wp.tile_load(a, shape=(TM, TN), offset=(i * TM, j * TN))
    wp.tile_store(b, wp.tile_map(wp.sin, t) * 2.0, offset=(i * TM, j * TN))


@wp.kernel(module="unique")
def row_sum_aot_kernel(a: wp.array2d(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    wp.tile_store(out, wp.tile_sum(wp.tile_load(a[i], shape=TILE)), offset=i)


def _matrix(rows: int, cols: int, seed: int = 0) -> jax.Array:
    return jnp.asarray(np.random.default_rng(seed).uniform(-1.0, 1.0, (rows, cols)).astype(np.float32))


def _sin2(a: jax.Array) -> jax.Array:
    return 2.0 * jnp.sin(a)


# ======================================================================================================================
# Tile kernels on the CPU against jax.numpy
# ======================================================================================================================


def test_row_sum_tile_kernel_matches_jnp_eager_and_jit() -> None:
    a = _matrix(5, TILE)
    row_sum = jax_kernel(row_sum_kernel, launch_dims=(5, BLOCK), output_dims=5, block_dim=BLOCK)
    expected = np.asarray(jnp.sum(a, axis=1))
    np.testing.assert_allclose(row_sum(a)[0], expected, rtol=1e-6)
    np.testing.assert_allclose(jax.jit(lambda a: row_sum(a)[0])(a), expected, rtol=1e-6)


def test_tiled_elementwise_kernel_matches_jnp() -> None:
    a = _matrix(3 * TM, 2 * TN)
    sin2 = jax_kernel(tiled_sin2_kernel, launch_dims=(3, 2, BLOCK), output_dims=a.shape, block_dim=BLOCK)
    np.testing.assert_allclose(jax.jit(lambda a: sin2(a)[0])(a), _sin2(a), rtol=1e-6, atol=1e-6)


def test_per_call_block_dim_overrides_the_module_option() -> None:
    a = _matrix(4, TILE, seed=1)
    row_sum = jax_kernel(row_sum_kernel, output_dims=4, block_dim=BLOCK)

    def f(a: jax.Array) -> jax.Array:
        return row_sum(a, launch_dims=(4, 32), block_dim=32)[0]

    np.testing.assert_allclose(jax.jit(f)(a), jnp.sum(a, axis=1), rtol=1e-6)
    (handle,) = _plan_handles(jax.jit(f).trace(a).lower().as_text())
    assert registry.plan(handle).block_dim == 32
    assert {p.handle: p for p in list_plans()}[handle].block_dim == 32
    (default,) = _plan_handles(jax.jit(lambda a: row_sum(a, launch_dims=(4, BLOCK))[0]).trace(a).lower().as_text())
    assert registry.plan(default).block_dim == BLOCK


def test_tile_kernels_under_vmap() -> None:
    batch = jnp.stack([_matrix(3 * TM, TN, seed=s) for s in range(3)])
    sin2 = jax_kernel(tiled_sin2_kernel, launch_dims=(3, 1, BLOCK), output_dims=(3 * TM, TN), block_dim=BLOCK)
    out = jax.jit(jax.vmap(lambda a: sin2(a)[0]))(batch)
    np.testing.assert_allclose(out, _sin2(batch), rtol=1e-6, atol=1e-6)
    rows = jnp.stack([_matrix(4, TILE, seed=s) for s in range(3)])
    row_sum = jax_kernel(row_sum_kernel, launch_dims=(4, BLOCK), output_dims=4, block_dim=BLOCK)
    np.testing.assert_allclose(jax.vmap(lambda a: row_sum(a)[0])(rows), jnp.sum(rows, axis=2), rtol=1e-6)


def test_grad_through_tile_kernels_one_thread_per_block() -> None:
    # Without cooperative CPU blocks each CPU thread runs a whole tile, so the launch is the grid alone.
    a = _matrix(4, TILE, seed=2)
    w = jnp.arange(1.0, 5.0, dtype=jnp.float32)
    row_sum = jax_kernel(row_sum_kernel, launch_dims=4, output_dims=4, block_dim=BLOCK, enable_backward=True)
    grad = jax.grad(lambda a: jnp.dot(w, row_sum(a)[0]))(a)
    np.testing.assert_allclose(grad, jnp.broadcast_to(w[:, None], a.shape))
    sin2 = jax_kernel(tiled_sin2_kernel, launch_dims=(2, 1), output_dims=(2 * TM, TN), enable_backward=True)
    b = _matrix(2 * TM, TN, seed=3)
    check_grads(lambda b: sin2(b)[0], (b,), order=1, modes=["rev"], atol=1e-2, rtol=1e-2)
    np.testing.assert_allclose(
        jax.grad(lambda b: jnp.sum(sin2(b)[0]))(b), jax.grad(lambda b: jnp.sum(_sin2(b)))(b), rtol=1e-5
    )


def test_grad_through_an_array_view() -> None:
    # Not tile-specific: the adjoint of a read through a view (a[i]) goes to the primal array's gradient field,
    # which jarp's adjoint launch points at the input's cotangent, as wp.Tape does.
    a = _matrix(4, 3, seed=5)
    weighted = jax_kernel(row_weighted_kernel, enable_backward=True, launch_dims=4, output_dims=4)
    np.testing.assert_allclose(weighted(a)[0], a @ jnp.array([1.0, 2.0, 3.0]), rtol=1e-6, atol=1e-6)
    check_grads(lambda a: weighted(a)[0], (a,), order=1, modes=["rev"], atol=1e-2, rtol=1e-2)
    w = jnp.arange(1.0, 5.0, dtype=jnp.float32)
    grad = jax.grad(lambda a: jnp.dot(w, weighted(a)[0]))(a)
    np.testing.assert_allclose(grad, np.outer(w, [1.0, 2.0, 3.0]))


def test_wp_block_dim_is_one_on_the_cpu_without_cpu_blocks() -> None:
    # Warp's rule: a CPU block dim above 1 needs wp.config.enable_cpu_blocks; the module variant says which ran.
    x = jnp.arange(1.0, 9.0, dtype=jnp.float32)
    scale = jax_kernel(scale_by_block_dim_kernel, block_dim=BLOCK, enable_backward=True)
    np.testing.assert_array_equal(scale(x)[0], x)
    np.testing.assert_array_equal(jax.grad(lambda x: jnp.sum(scale(x)[0]))(x), np.ones(8, np.float32))


# ======================================================================================================================
# Cooperative CPU blocks (wp.config.enable_cpu_blocks): the CPU honours block_dim as CUDA does
# ======================================================================================================================


@pytest.fixture
def cpu_blocks(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(wp.config, "enable_cpu_blocks", True)


@pytest.mark.usefixtures("cpu_blocks")
def test_block_sums_follow_the_block_dim_with_cpu_blocks() -> None:
    n = 256
    block_sum = jax_kernel(block_sum_cpu_blocks_kernel, launch_dims=n, output_dims=n, block_dim=BLOCK)
    for block_dim in (BLOCK, 2 * BLOCK):
        (out,) = jax.jit(lambda bd=block_dim: block_sum(block_dim=bd))()
        expected = np.zeros(n, np.int32)
        for start in range(0, n, block_dim):
            expected[start] = np.arange(start, start + block_dim).sum()
        np.testing.assert_array_equal(out, expected)


@pytest.mark.usefixtures("cpu_blocks")
def test_wp_block_dim_and_its_gradient_with_cpu_blocks() -> None:
    x = jnp.arange(1.0, 33.0, dtype=jnp.float32)
    scale = jax_kernel(scale_by_block_dim_cpu_blocks_kernel, block_dim=16, enable_backward=True)
    np.testing.assert_array_equal(scale(x)[0], 16.0 * x)
    np.testing.assert_array_equal(jax.grad(lambda x: jnp.sum(scale(x)[0]))(x), np.full(32, 16.0, np.float32))


@pytest.mark.usefixtures("cpu_blocks")
def test_grad_through_a_tiled_launch_with_cpu_blocks() -> None:
    # With cooperative blocks the (grid, block_dim) launch is the CUDA one: one tile per block, adjoint included.
    a = _matrix(2 * TM, 2 * TN, seed=4)
    sin2 = jax_kernel(
        tiled_sin2_cpu_blocks_kernel, launch_dims=(2, 2, 32), output_dims=a.shape, block_dim=32, enable_backward=True
    )
    np.testing.assert_allclose(sin2(a)[0], _sin2(a), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(
        jax.grad(lambda a: jnp.sum(sin2(a)[0]))(a), jax.grad(lambda a: jnp.sum(_sin2(a)))(a), rtol=1e-5
    )


# ======================================================================================================================
# Validation (Warp's rules and wording)
# ======================================================================================================================


@pytest.mark.parametrize("value", [True, False, 1.5, "64", (64,)])
def test_block_dim_must_be_an_integer(value: Any) -> None:
    with pytest.raises(TypeError, match="block_dim must be an integer or None"):
        jax_kernel(row_sum_kernel, block_dim=value)
    module = jax_kernel(row_sum_kernel, output_dims=2)
    with pytest.raises(TypeError, match="block_dim must be an integer or None"):
        module(_matrix(2, TILE), block_dim=value)


@pytest.mark.parametrize(
    ("value", "match"), [(0, "must be positive"), (-1, "must be positive"), (2048, "must be at most 1024")]
)
def test_block_dim_must_be_in_range(value: int, match: str) -> None:
    with pytest.raises(ValueError, match=f"block_dim {match}"):
        jax_kernel(row_sum_kernel, block_dim=value)
    module = jax_kernel(row_sum_kernel, output_dims=2)
    with pytest.raises(ValueError, match=f"block_dim {match}"):
        module(_matrix(2, TILE), block_dim=value)


def test_block_dim_is_a_static_int_field() -> None:
    m = jax_kernel(row_sum_kernel, block_dim=np.int64(64))
    assert m.block_dim == 64
    assert type(m.block_dim) is int
    assert m == jax_kernel(row_sum_kernel, block_dim=64)
    assert hash(m) == hash(jax_kernel(row_sum_kernel, block_dim=64))
    assert m != jax_kernel(row_sum_kernel, block_dim=128)
    assert jax_kernel(row_sum_kernel).block_dim is None


def test_preload_loads_the_block_dim_variant(monkeypatch: pytest.MonkeyPatch) -> None:
    loads: list[tuple[str, Any]] = []
    real = _warp_launches.load_entry_points

    def recording(kernel: wp.Kernel, device: Any, block_dim: int | None = None) -> Any:
        loads.append((kernel.key, block_dim))
        return real(kernel, device, block_dim)

    monkeypatch.setattr(_warp_launches, "load_entry_points", recording)
    row_sum = jax_kernel(row_sum_kernel, output_dims=3, block_dim=48)
    jax.jit(lambda a: row_sum(a, launch_dims=(3, 48))[0]).trace(_matrix(3, TILE)).lower()
    assert ("row_sum_kernel", 48) in loads


# ======================================================================================================================
# CUDA: lowering and ahead-of-time builds for a block dim, without a GPU
# ======================================================================================================================


def test_tile_kernel_lowers_for_cuda_with_its_block_dim() -> None:
    a = _matrix(3 * TM, 2 * TN)
    sin2 = jax_kernel(tiled_sin2_kernel, launch_dims=(3, 2, 128), output_dims=a.shape, block_dim=128)
    lowered = jax.jit(lambda a: sin2(a)[0]).trace(a).lower(lowering_platforms=("cuda",))
    (handle,) = _plan_handles(lowered.as_text())
    plan = registry.plan(handle)
    assert (plan.block_dim, plan.launch_dims) == (128, (3, 2, 128))
    info = {p.handle: p for p in list_plans()}[handle]
    assert info.block_dim == 128
    assert "block dim 128" in str(info)


def test_kernel_source_shows_the_block_dim_variant() -> None:
    assert "#define WP_TILE_BLOCK_DIM 64" in kernel_source(row_sum_kernel, "cuda", arch=90, block_dim=64)
    assert "#define WP_TILE_BLOCK_DIM 256" in kernel_source(row_sum_kernel, "cuda", arch=90)
    # a JaxKernel's own block_dim is the default
    module = jax_kernel(row_sum_kernel, block_dim=96)
    assert "#define WP_TILE_BLOCK_DIM 96" in kernel_source(module, "cuda", arch=90)
    assert "#define WP_TILE_BLOCK_DIM 1" in kernel_source(module, "cpu")  # no cooperative CPU blocks
    with pytest.raises(ValueError, match="block_dim must be positive"):
        kernel_source(row_sum_kernel, "cuda", arch=90, block_dim=0)


def test_compile_aot_for_a_block_dim(tmp_path: Path) -> None:
    default = compile_aot(row_sum_aot_kernel, arch=90, module_dir=tmp_path)
    paths = compile_aot(jax_kernel(row_sum_aot_kernel, block_dim=64), arch=90, module_dir=tmp_path)
    assert list(paths) == [90]
    assert paths[90] != default[90]  # each block dim is its own build, with its own module hash
    for path in (paths[90], default[90]):
        assert path.exists()
        assert path.name.endswith(".sm90.cubin")
        binary = path.read_bytes()
        assert binary[:4] == b"\x7fELF"
        assert re.search(rb"row_sum_aot_kernel_[0-9a-f]{8}_cuda_kernel_forward", binary)
    (cu64,) = [p for p in tmp_path.glob("*.cu") if p.stem == paths[90].name.split(".")[0]]
    assert cu64.read_text() == kernel_source(row_sum_aot_kernel, "cuda", arch=90, block_dim=64)
    again = compile_aot(row_sum_aot_kernel, arch=90, module_dir=tmp_path, block_dim=64)
    assert again == paths
