"""A tile kernel, in a module of its own: jarp gives the kernels of a module that uses tiles no ranged entry point."""

import warp as wp


@wp.kernel
def tile_copy(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    t = wp.tile_load(x, shape=8, offset=i * 8)
    wp.tile_store(out, t * 2.0, offset=i * 8)
