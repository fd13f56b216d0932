"""JAX stage: jarp's primitive ``jarp_warp_call`` and its rules.

- `_primitive`: the primitive, abstract evaluation, eager implementation and batching (which rewrites the plan).
- `_lowering`: lowering a call to jarp's FFI target, with a lease on the plan for each executable.
- `_adjoint`: reverse mode: the adjoint plan that runs Warp's backward kernel.
- `_user_rules`: a module's ``jvp=``/``vjp=`` rules around its launch (a ``jax.custom_jvp``).
- `_linear`: the primitive ``jarp_linear``, a linear map with a user transpose (the tangent of those rules).

Receives: a `Plan` (from the plan stage) and operands. Hands on: a custom call of the FFI target naming the
plan. Never imports: the public modules (`jarp.warp._kernel`, `_callable`...), the `_module` or `_geometry` packages.
"""
