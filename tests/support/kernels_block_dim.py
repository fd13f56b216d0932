"""The row-sum tile kernel of `tests/warp/modules/test_block_dim.py` (the GPU tests launch it on CUDA too)."""

import warp as wp

TILE = 8  # row length of the row-sum tiles
BLOCK = 64  # the block dim the tests launch it with


@wp.kernel
def row_sum_kernel(a: wp.array2d(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    t = wp.tile_load(a[i], shape=TILE)
    wp.tile_store(out, wp.tile_sum(t), offset=i)
