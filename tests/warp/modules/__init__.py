"""The public module kinds (``JaxKernel``, ``JaxCallable``) and what a user builds with them.

The module contract both kinds share (``test_base.py``), what only one kind has (``test_kernel.py``,
``test_callable.py``), options, generic targets, tile kernels, structs end to end, rebuilt modules comparing equal,
errors from inside a call, float64 models, and the public helpers: ``energy``, geometry, ``to_warp``, ``types``,
inspection, and jarp inside the JAX scientific stack.
"""
