"""FFI callbacks: a Python function registered as an XLA FFI target, as Warp's ``register_ffi_callback`` does.

The target lives in the FFI stage (`_ffi._user_callback`); this is its public face.
"""

from ._ffi._user_callback import register_ffi_callback as register_ffi_callback

__all__ = ["register_ffi_callback"]
