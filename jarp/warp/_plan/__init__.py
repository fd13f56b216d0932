"""Plan stage: from a module and its call arguments to a hashable `Plan` (trace time, pure values).

The flow, one file a step:

1. `_arg_spec` / `_signature`: a Warp kernel's (or annotated function's) parameters as argument specs;
   `_struct_layout` flattens a ``wp.struct`` type into leaves; `_annotations` resolves string annotations.
2. `_binding`: ONE binding pass over the call's arguments (struct arguments of every spelling included):
   operands, statics, runtime values (scalars and struct value fields given JAX values), dtypes for generic
   targets; `_arg_checks` holds the checks of one value against its spec.
3. `_dims`: launch dims and output shapes; `_launch_checks`: what ``wp.launch`` would refuse, and launches
   longer than an array the kernel indexes with ``wp.tid()``.
4. What a kernel does, judged by the code Warp compiles: the `_analysis` package (names resolved as Warp resolves
   them and the branches it folds; which inputs and struct fields it writes; which outputs it overwrites; which
   arrays it indexes with its thread index; whether a CPU launch may be split across threads, with private copies
   of what it accumulates, and its estimated work), `_runtime_scalars` (the kernel variants that read runtime
   values, and the bounds-checked build), `_static_keys`,
   `_preload`.
5. `_builder`: builds the `Plan` value (`_values`) the JAX stage carries.
6. `_content`: a plan's content text (canonical, nothing process-local) for compiled programs
   that outlive the process, and the plan rebuilt from it in another process (checked as untrusted input).

Shared helpers: `_normalize` (option values: dims, the vmap method), `_dtypes` (Warp, NumPy and JAX dtypes),
`_weakcache`.

Receives: a module's static fields and the call's arguments (arrays or tracers). Hands on: a `Plan` and
the operands. Never imports: the JAX stage (`jarp.warp._jax`), the FFI stage (`jarp.warp._ffi`) or the
public modules; nothing here talks to XLA.
"""
