"""Support modules for the ``jarp.warp`` tests: imported or run by the tests in ``tests/warp``, never collected.

Their names do not start with ``test_``, so pytest collects none of them; keeping them here leaves only test files
directly in ``tests/warp``. A Warp module is named after its Python module, so the kernels below belong to Warp
modules ``tests.warp.support.kernels`` and so on (``test_inspect.py`` checks such names).

Warp kernels and annotated functions, one Warp module per file, each built once per process:

* ``kernels.py``: the shared float32 kernels and annotated functions, and the data and references that go with them.
* ``kernels64.py``: float64 kernels and the generic kernels (a new overload rebuilds only this small module).
* ``kernels_ad.py``: float64 kernels for the autodiff and derivative-rule tests.
* ``kernels_dtypes.py``: kernels over every scalar type JAX has, for ``test_dtypes.py``.
* ``kernels_energy.py``: spring energies with their gradient, Hessian-product and projected-Hessian kernels.
* ``kernels_hostile.py``: the representative kernels of the hostile-input tests (``test_hostile_*.py``).
* ``kernels_static_keys.py``: kernels and functions for ``test_static_keys.py``.
* ``kernels_struct.py``: structs and kernels for ``test_struct_params.py``.
* ``string_annotations.py``: kernels and callables written with ``from __future__ import annotations``.

Test machinery:

* ``kinds.py``: the two module kinds (``JaxKernel``, ``JaxCallable``) for tests parametrised over both.
* ``hostile.py``: the case table, hypothesis settings and checks shared by the hostile-input tests.

Scripts run in child processes, as modules from the repository root (``python -m tests.warp.support.<name>``):

* ``multi_device_script.py``: a kernel under ``pmap``, ``shard_map`` and sharded ``jit`` on four CPU devices
  (``test_bridge.py``; ``tools/check_exit.py`` counts its exits).
* ``unawaited_at_exit_script.py``: kernel calls that reach jarp's callback after the script ends (``test_native.py``).
* ``distributed_worker.py``: one of two ``jax.distributed`` processes (``test_distributed.py``).
* ``warp_suite_runner.py``: runs Warp's own JAX interop tests against jarp in a child process
  (``test_warp_suite.py``).
"""
