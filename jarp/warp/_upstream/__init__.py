"""Upstream stage: every private Warp, JAX and XLA name jarp uses, one module per upstream.

- `_warp_internals`: Warp's private builders, loaders, launch structures and locks.
- `_jax_internals`: JAX's effects, cache clearing, varying manual axes.
- `_xla_ffi`: the XLA FFI C ABI (call frames, attributes, buffers, errors, the one dtype-code table).
- `_python_ast`: Python's parser, the one ``ast.parse`` jarp calls (serialised, and retried on CPython 3.11's
  spurious ``AST constructor recursion depth mismatch`` under threads).

Each module has a ``check_*()`` that a test runs, so an upgrade that changes the shape of these internals
fails loudly, and is a one-file change here.

Receives: nothing from jarp. Hands on: thin, typed wrappers. Never imports: anything of jarp.
"""
