"""The machinery `JaxKernel` and `JaxCallable` share, and the one description of a call's path.

A call flows one way, top to bottom; each step imports only the steps below it (`tests/warp/test_layout.py`):

1. **The module** (`_base.AbstractWarpModule`, the base of the final classes `_kernel.JaxKernel` and
   `_callable.JaxCallable` at the package's top): an immutable Equinox module whose static fields hold the target
   and its options (declared once, `_option_fields`; a user callable compared by value, `_value_callables`; options
   a call ignores warned about once, `_option_warnings`). The factories share one live module per equal arguments
   (`_factory`). ``__call__`` resolves the target for the argument dtypes (a generic kernel's overload, a generic
   callable's specialisation) and either runs eagerly through one cached executable per module and signature
   (`_eager`) or, under a trace, builds the plan. A call given Warp structures goes through the geometry package
   (`_geometry.launch`), which replaces each structure by its arrays and calls a `jax_callable` that builds them.
2. **The plan stage** (`_plan`): one binding pass over the signature (`_plan._binding`: operands, struct fields,
   static values, runtime scalars, dtypes, launch and output dims, and their checks), the analysis of what the
   kernel reads and writes, judged on the C++ Warp generates (`_plan._analysis`), and the hashable `Plan`
   (`_plan._builder`, `_plan._values`), with its content text for compiled programs (`_plan._content`).
3. **The JAX stage** (`_jax`): jarp's primitive carries the plan (`_jax._primitive`: abstract evaluation,
   batching, ``jvp=``/``vjp=`` rules, `_jax._user_rules`), reverse mode builds the adjoint plan (`_jax._adjoint`),
   and the lowering emits one FFI custom call whose attributes mean the same launch in every process
   (`_jax._lowering`).
4. **The FFI stage** (`_ffi`): inside the call, the target turns the attributes back into the plan (`_ffi._target`),
   checks the frame, and runs it through an executor per (plan, device): the native handler for kernels (no
   Python; batch slices and race-free index ranges on XLA's CPU threads, `_ffi._native`; on the CPU also a call
   given meshes or BVHs, whose structures the handler builds and refits, `_ffi._structure_launches`), the Python
   path for callables (`_ffi._callable_executor`) and as the fallback (`_ffi._executors`).
5. **The upstream stage** (`_upstream`): every private Warp, JAX and XLA name jarp uses, behind one module each,
   each with a self-check a test runs; it imports nothing of jarp.

The stages never import this package or the geometry package; what they need travels in the binding or the plan,
or through a hook a feature installs (`_ffi._callable_executor.set_taped_run`).
"""
