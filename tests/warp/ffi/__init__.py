"""The FFI stage (``jarp/warp/_ffi``): how a lowered call reaches Warp's code at run time.

The FFI target and its launch path, user FFI callbacks, the native handler and the Python fallback, CPU threads,
ranged and privatised split launches, what stays alive, the lock order and concurrent first builds, stale state after
a failed build, and the floating-point environment of XLA's threads.
"""
