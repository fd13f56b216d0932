"""Upstream stage: every private Warp, JAX and XLA name jarp uses, one module per concern.

- Warp, by what jarp reads of it: `_warp_kernels` (kernels and their modules, code hashes, Warp's build lock and
  start-up), `_warp_launches` (loaded entry points, launch bounds, CUDA launches, copies, captures),
  `_warp_builds` (native code built with Warp's Clang, loaded CPU builds and their templates, ahead-of-time and
  inspection builds), `_warp_types` (array kinds, vectors, structs and their ctypes, spatial structures),
  `_warp_codegen` (the C++ Warp generates and its record of array accesses: every assumption about Warp's
  generated code).
- `_jax_internals`: JAX's effects, cache clearing, varying manual axes.
- `_xla_ffi`: the XLA FFI C ABI (call frames, attributes, buffers, errors, the one dtype-code table).
- `_locks`: every lock jarp takes, and the order threads take them in.
- `_python_ast`: Python's parser, the one ``ast.parse`` jarp calls (serialised, and retried on CPython 3.11's
  spurious ``AST constructor recursion depth mismatch`` under threads).

Each module has a ``check_*()`` beside the code it checks, which a test runs, so an upgrade that changes the shape
of these internals fails loudly, and is a change to the one module that reads them.

Receives: nothing from jarp. Hands on: thin, typed wrappers. Never imports: anything of jarp outside this stage.
"""
