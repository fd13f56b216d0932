"""A tile kernel, in a module of its own: jarp gives the kernels of a module that uses tiles no ranged entry point."""

import warp as wp


@wp.kernel
def tile_copy(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    i = wp.tid()
    t = wp.tile_load(x, shape=8, offset=i * 8)
    wp.tile_store(out, t * 2.0, offset=i * 8)


@wp.func
def doubled_tile(x: wp.array(dtype=float), out: wp.array(dtype=float), i: int):
    wp.tile_store(out, wp.tile_load(x, shape=8, offset=i * 8) * 2.0, offset=i * 8)


@wp.kernel
def tile_through_function(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    # no tile call of its own: the function it calls uses tiles
    i = wp.tid()
    doubled_tile(x, out, i)
