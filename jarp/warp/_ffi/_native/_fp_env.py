"""The C default floating-point environment for host code that runs on XLA's CPU threads.

XLA runs CPU computations, and so jarp's FFI callback, with subnormals flushed to
zero (FTZ/DAZ in the x86 MXCSR, FZ in the AArch64 FPCR). Every Python conversion
of a float to ``float32`` there (ctypes, ``struct``, NumPy, Warp's struct packing)
then turns a subnormal into ``0.0``, so a static ``1e-45`` would reach a kernel as
zero, unlike the same value in an input array (which XLA passes unchanged).
`default_fp_env` runs a block (building an executor's argument block, once per
plan and device) under the C default environment and puts the caller's back after.
Kernels themselves still run under XLA's environment, as XLA's own operations do.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import sys
from collections.abc import Iterator

_FENV_BYTES = 256  # larger than any fenv_t (32 bytes on x86-64 glibc, 8 on AArch64)
_FE_DFL_ENV = ctypes.c_void_p(-1)  # glibc and musl: FE_DFL_ENV is ((const fenv_t *) -1)


def _libm() -> ctypes.CDLL | None:
    if not sys.platform.startswith("linux"):
        return None  # FE_DFL_ENV is a symbol elsewhere; no-op there
    try:
        lib = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        for name in ("fegetenv", "fesetenv"):
            getattr(lib, name).argtypes = [ctypes.c_void_p]
            getattr(lib, name).restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return lib


_LIBM = _libm()


@contextlib.contextmanager
def default_fp_env() -> Iterator[None]:
    """Run the block under the C default floating-point environment (no flush to zero), then restore the caller's.

    A no-op where the C library's environment functions are not available (outside Linux).

    Example:
        >>> with default_fp_env():
        ...     assert ctypes.c_float(1e-45).value > 0.0  # even on an XLA CPU thread
    """
    if _LIBM is None:
        yield
        return
    saved = ctypes.create_string_buffer(_FENV_BYTES)
    if _LIBM.fegetenv(saved) != 0:
        yield
        return
    _LIBM.fesetenv(_FE_DFL_ENV)
    try:
        yield
    finally:
        _LIBM.fesetenv(saved)
