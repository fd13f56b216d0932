"""jarp: NVIDIA Warp kernels as first-class citizens of JAX."""

from . import tree as tree
from . import warp as warp
from .warp import JaxCallable as JaxCallable
from .warp import JaxKernel as JaxKernel
from .warp import jax_callable as jax_callable
from .warp import jax_kernel as jax_kernel
from .warp import register_ffi_callback as register_ffi_callback
from .warp import struct as struct
from .warp import to_warp as to_warp

__all__ = [
    "JaxCallable",
    "JaxKernel",
    "jax_callable",
    "jax_kernel",
    "register_ffi_callback",
    "struct",
    "to_warp",
    "tree",
    "warp",
]

__version__ = "0.2.0"
