"""Support modules of the test suite: imported or run by the tests, never collected (no name starts with ``test_``).

A Warp module is named after its Python module, so the kernels below belong to Warp modules
``tests.support.kernels`` and so on (``tests/warp/modules/test_inspect.py`` checks such names, and a plan's description
names them).

Warp kernels and annotated functions, one Warp module per file, each built once per process (a file of its own
where a Warp module's options, its use of tiles or its name matter):

* ``kernels.py``: the shared float32 kernels and annotated functions, and the data and references that go with them.
* ``kernels64.py``: float64 kernels and the generic kernels (a new overload rebuilds only this small module).
* ``kernels_ad.py``: float64 kernels for the autodiff and derivative-rule tests.
* ``kernels_bounds.py``: kernels indexing arrays with their thread index over cells (and ``edge_mesh``, their
  arguments), for ``tests/warp/plan/test_launch_checks.py``.
* ``kernels_content.py``: kernels and functions for ``tests/warp/plan/test_content.py``.
* ``kernels_corner_cases.py``: kernels and functions for corner cases of several stages (annotations that are
  objects, guards through locals, several structs in one signature, clashing flattened field names).
* ``kernels_deterministic.py``: a Warp module built in deterministic mode, for
  ``tests/warp/cuda/test_deterministic.py``.
* ``kernels_buffer_sizes.py``: kernels whose plans the buffer-size check is given wrong
  (``tests/warp/ffi/test_buffer_sizes.py``).
* ``kernels_dtypes.py``: kernels over every scalar type JAX has, for ``tests/warp/plan/test_dtypes.py``.
* ``kernels_energy.py``: spring energies with their gradient, Hessian-product and projected-Hessian kernels.
* ``kernels_fake_tid.py``: a user function named ``tid``, reached by a dotted name from ``kernels_races.py``.
* ``kernels_fem.py``: a tetrahedral FEM energy written as a Warp FEM library writes it
  (``tests/warp/compat/test_fem_port.py``).
* ``kernels_generated_writes.py``: kernels writing an input through spellings only the generated code shows
  (``tests/warp/plan/test_writes.py``).
* ``kernels_geometry.py``: kernels that query Warp's geometry structures by id.
* ``kernels_hostile.py``: the representative kernels of the hostile-input tests (``tests/warp/hostile/test_*.py``).
* ``kernels_kinds.py``: parameters of the Warp array kinds jarp refuses, for ``tests/warp/plan/test_param_kinds.py``.
* ``kernels_options.py``: a Warp module with options of its own, for ``tests/warp/plan/test_runtime_scalars.py``.
* ``kernels_private.py``: accumulating kernels for the privatised split launches
  (``tests/warp/ffi/test_privatised.py``).
* ``kernels_races.py``: one construct per kernel deciding the race-freedom proof (``tests/warp/plan/test_analysis.py``;
  never built).
* ``kernels_ranged.py``: kernels for jarp's ranged CPU entry points (``tests/warp/ffi/test_ranged_entry.py``).
* ``kernels_spellings.py``: structs and kernels for ``tests/warp/modules/test_struct_spellings.py``.
* ``kernels_static_keys.py``: kernels and functions for ``tests/warp/plan/test_static_keys.py``.
* ``kernels_struct.py``: structs and kernels for ``tests/warp/modules/test_struct_params.py``.
* ``kernels_struct_runtime.py``: kernels reading struct value fields given JAX values
  (``tests/warp/modules/test_struct_runtime.py``).
* ``kernels_types.py``: copy and fill kernels specialised for every Warp element type and 1 to 4 array dims
  (``tests/warp/modules/test_warp_types.py``).
* ``kernels_tiles.py``: tile kernels in a module of their own (no ranged entry point for its kernels).
* ``kernels_write_escapes.py``, ``kernels_write_spellings.py``, ``kernels_writes.py`` (with the dotted-name helpers
  of ``kernels_writes_helpers.py``): the kernels of the write check (``tests/warp/plan/test_writes.py``).
* ``string_annotations.py``: kernels and callables written with ``from __future__ import annotations``.

A package written as a third-party library would be:

* ``bridge_library/``: a small rigid-body library written against Warp's bridge (``from warp import jax_callable``,
  ``wp.jax_kernel`` at import time), run on both bridges by ``tests/warp/compat/test_bridge_switch.py``.

Test machinery:

* ``examples.py``: importing an example script as a module and running a fit end to end (``test_flagship.py``,
  ``test_hyperelastic.py``).
* ``forked.py``: child processes forked from a server that imported NumPy, JAX, Warp and Equinox once
  (``subprocess.run``/``Popen``-like; ``JARP_TESTS_FORK=0`` starts them afresh), checked by ``test_forked_children.py``.
* ``geometry.py``: the geometry tests' scene (a height field and downward rays) and its NumPy references.
* ``gpu.py``: whether a CUDA device is visible, the ``requires_gpu`` mark and the ``cuda_device`` fixture.
* ``hostile.py``: the case table, hypothesis settings and checks shared by the hostile-input tests.
* ``kinds.py``: the two module kinds (``JaxKernel``, ``JaxCallable``) for tests parametrised over both.
* ``lowered.py``: reading jarp's custom calls (and their plan handles) out of lowered program text.
* ``paths.py``: the repository root and this directory, for the tests that start child processes.
* ``programs.py``: the kernel module ``tests/warp/transforms/test_compiled_programs.py`` writes into a tmp directory.
* ``retrace.py``: counting the traces of a model rebuilt afresh.

Scripts run in child processes, as modules from the repository root (``python -m tests.support.<name>``) or, for
``content_script.py`` and ``programs_script.py``, by path:

* ``bridge_switch_script.py``: imports ``bridge_library`` fresh on Warp's bridge or after `jarp.warp.patch_warp`, runs
  it and saves its states (``tests/warp/compat/test_bridge_switch.py``).
* ``content_script.py``: writes or rebuilds plans' content text in a fresh process
  (``tests/warp/plan/test_content.py``).
* ``cuda_launch_script.py``: every CUDA launch of the suite's kernels against its compiled kernel
  (``tests/warp/cuda/test_launch_params.py``).
* ``distributed_worker.py``: one of two ``jax.distributed`` processes (``tests/warp/transforms/test_distributed.py``).
* ``geometry_sharding_script.py``: a batch of meshes sharded over two CPU devices
  (``tests/warp/modules/test_geometry.py``).
* ``multi_device_script.py``: a kernel under ``pmap``, ``shard_map`` and sharded ``jit`` on four CPU devices
  (``tests/warp/ffi/test_launch_path.py``; ``tools/check_exit.py`` counts its exits).
* ``partition_script.py``: batched calls partitioned over four CPU devices
  (``tests/warp/transforms/test_partitioning.py``).
* ``programs_script.py``: compiled programs across processes (``tests/warp/transforms/test_compiled_programs.py``).
* ``unawaited_at_exit_script.py``: kernel calls that reach jarp's callback after the script ends
  (``tests/warp/ffi/test_native.py``).
* ``warp_kernel_verdicts.py``: jarp's write, race and fill verdicts on Warp's own kernels against ``wp.launch``
  (built on ``warp_kernel_sweep``; ``tests/warp/compat/test_warp_kernel_verdicts.py``, the whole sweep marked
  ``slow``; also ``python -m tests.support.warp_kernel_verdicts``). ``verdict_over_refusals.txt``: its over-refusal
  candidates, each with its reason.
* ``warp_kernel_sweep.py``: harvests the warp-lang wheel's own kernels and compares ``jax_kernel`` with ``wp.launch``
  on fabricated arguments, each kernel in a worker forked from one child (``tests/warp/compat/test_warp_kernel_sweep.py``;
  also ``python -m tests.support.warp_kernel_sweep``).
* ``warp_suite_runner.py``: runs Warp's own JAX interop tests against jarp in a child process
  (``tests/warp/compat/test_warp_suite.py``).
"""
