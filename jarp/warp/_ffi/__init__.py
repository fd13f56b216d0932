"""FFI stage: what runs inside the custom call.

- `_target`: registers jarp's FFI targets and holds the callback XLA calls (frame -> executor -> run).
- `_frame`: reading and checking a call frame (attributes are untrusted; buffers must match the plan).
- `_executors`: the per-(plan, device) executors, prepared once and dropped with their plan; the executors are
  `_kernel_executors` (CPU and CUDA launches) and `_callable_executor`, on `_executor_base`; `_locks`: its two locks (the order of all: `_upstream._locks`).
- `_structure_launches`: a callable that builds Warp meshes or BVHs and launches one kernel (a call given jarp's
  geometry structures) as a native launch: the handler builds and refits the structures itself on the CPU.
- `_arg_blocks`: a kernel launch's argument blocks and CUDA parameter list, from the plan alone.
- `_struct_bytes`: the bytes of struct arguments (and Warp struct instances for callables).
- `_registry`: the live plans by handle, and the leases executables hold on them.
- `_native`: the native path (a C++ handler that launches with no Python): the handler, its C++ source, the
  descriptor it reads, the object builds and their cache, jarp's ranged CPU entry points (`_native._ranged`), the
  guard of bounds-checked CPU launches (`_native._guard`) and the C floating-point environment (`_native._fp_env`).
- `_threads`: how many CPU threads a call may use (``JARP_CPU_THREADS``, `set_cpu_threads`), and the thresholds.
- `_trampoline`: the one ctypes-callback-to-FFI-target helper, shared with `_user_callback`.
- `_user_callback`: `register_ffi_callback`, user functions as FFI targets.
- `_errors`: exceptions as XLA FFI errors, and recovering them at the call site.

Receives: plans from the JAX stage's lowering, and call frames from XLA that name their plan by content (resolved
to a handle once per loaded executable). Hands on: launches of Warp's compiled code. Never
imports: the JAX stage or the public modules (it reads plan values from the plan stage).
"""
