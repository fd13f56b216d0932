"""The JAX stage (``jarp/warp/_jax``): a module's primitive under JAX's transformations.

Reverse mode, ``vmap``, user derivative rules, compositions (``jit``, control flow, ``checkpoint``, ``shard_map``),
batch partitioning, ``jax.distributed`` processes, and compiled programs that outlive their process.
"""
