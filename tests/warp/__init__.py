"""The ``jarp.warp`` tests, a folder per stage of a call or per property (support code: ``tests/support``).

* ``modules/``: the public module kinds and what a user builds with them (``jax_kernel``, ``jax_callable``, their
  options, structs, generic targets, tiles, energies, geometry, ``to_warp``, types, inspection, errors).
* ``plan/``: the plan stage: argument binding, dims, launch checks, static keys, dtypes, the analysis of what a
  kernel writes and whether its launch may be split, names, content text, struct layout, preloads.
* ``ffi/``: the FFI stage: the FFI target and user callbacks, the native handler, CPU threads, ranged and
  privatised launches, lifetimes, locks, stale state after errors.
* ``cuda/``: the CUDA path, checked without a GPU (faked devices, streams and driver calls, PTX from NVRTC) and
  on one (tests marked ``gpu``).
* ``transforms/``: the JAX stage: reverse mode, ``vmap``, derivative rules, compositions, partitioning, several
  processes, compiled programs that outlive their process.
* ``hostile/``: random and hostile input, and failures that must leave nothing stale behind.
* ``compat/``: against upstream: Warp's own JAX tests, its interop guide, a Warp FEM library's kernels, and the
  Warp/JAX internals jarp relies on.
* ``test_layout.py``: the package's stages import only downwards.
"""
