"""CPU thread settings: how many threads a CPU launch may be split over, and their limits.

The settings act where launches run (the FFI stage, `_ffi._threads`); this is their public face.
"""

from ._ffi._threads import cpu_linger_us as cpu_linger_us
from ._ffi._threads import cpu_private_bytes as cpu_private_bytes
from ._ffi._threads import cpu_threads as cpu_threads
from ._ffi._threads import set_cpu_linger_us as set_cpu_linger_us
from ._ffi._threads import set_cpu_private_bytes as set_cpu_private_bytes
from ._ffi._threads import set_cpu_threads as set_cpu_threads

__all__ = [
    "cpu_linger_us",
    "cpu_private_bytes",
    "cpu_threads",
    "set_cpu_linger_us",
    "set_cpu_private_bytes",
    "set_cpu_threads",
]
