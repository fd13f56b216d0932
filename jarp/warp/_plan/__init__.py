"""Plan stage: from a module and its call arguments to a hashable `Plan` (trace time, pure values).

The flow, one file a step:

1. `_arg_spec` / `_signature`: a Warp kernel's (or annotated function's) parameters as argument specs;
   `_struct_layout` flattens a ``wp.struct`` type into leaves; `_annotations` resolves string annotations.
2. `_binding`: ONE binding pass over the call's arguments: operands, statics, runtime scalars, dtypes,
   with the binding-time value checks (`_struct_binding` for struct arguments).
3. `_dims`: launch dims and output shapes; `_launch_checks`: what ``wp.launch`` would refuse.
4. `_analysis` (which arrays a kernel writes), `_runtime_scalars`, `_static_keys`, `_preload`.
5. `_builder`: builds the `Plan` value (`_values`) the JAX stage carries.

Shared helpers: `_dtypes` (Warp, NumPy and JAX dtypes), `_weakcache`.

Receives: a module's static fields and the call's arguments (arrays or tracers). Hands on: a `Plan` and
the operands. Never imports: the JAX stage (`jarp.warp._jax`), the FFI stage (`jarp.warp._ffi`) or the
public modules; nothing here talks to XLA.
"""
