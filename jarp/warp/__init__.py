"""Warp kernels and Warp-launching functions as JAX-callable Equinox modules.

The files at this level are the public face, one per family: the modules (`_kernel`, `_callable`), energies
(`_energy`), their options (`_options`), structs, conversions and types (`_struct`, `_to_warp`, `types`), Warp's
geometry as pytrees (the `_geometry` package), plan listing (`_inspect`), generated source and ahead-of-time builds
(`_codegen`), export checks (`_export`), checking mode (`_checking`), CPU thread settings (`_threads`), FFI
callbacks (`_callbacks`), warnings (`_warnings`), the caches (`_caches`) and the switch that points Warp's own bridge
entry points at jarp's (`_bridge`). The machinery the two module kinds share is the `_module` package, whose
docstring is the one description of a call's path through the stages (`_plan`, `_jax`, `_ffi`, `_upstream`).
"""

from . import types as types
from ._bridge import UnsupportedWarpOptionError as UnsupportedWarpOptionError
from ._bridge import WarpPatch as WarpPatch
from ._bridge import patch_warp as patch_warp
from ._bridge import unpatch_warp as unpatch_warp
from ._caches import clear_caches as clear_caches
from ._callable import JaxCallable as JaxCallable
from ._callable import jax_callable as jax_callable
from ._callbacks import register_ffi_callback as register_ffi_callback
from ._checking import CheckingModeError as CheckingModeError
from ._checking import checking_mode as checking_mode
from ._checking import set_checking_mode as set_checking_mode
from ._codegen import CudaLaunchCheck as CudaLaunchCheck
from ._codegen import CudaLaunchMismatchError as CudaLaunchMismatchError
from ._codegen import check_cuda_launches as check_cuda_launches
from ._codegen import compile_aot as compile_aot
from ._codegen import kernel_source as kernel_source
from ._energy import Energy as Energy
from ._energy import energy as energy
from ._export import export_checks as export_checks
from ._geometry import AbstractStructure as AbstractStructure
from ._geometry import Bvh as Bvh
from ._geometry import HashGrid as HashGrid
from ._geometry import Mesh as Mesh
from ._geometry import Volume as Volume
from ._inspect import BufferInfo as BufferInfo
from ._inspect import ParamInfo as ParamInfo
from ._inspect import PlanInfo as PlanInfo
from ._inspect import list_plans as list_plans
from ._inspect import runtime_info as runtime_info
from ._kernel import JaxKernel as JaxKernel
from ._kernel import jax_kernel as jax_kernel
from ._options import FfiCallableProtocol as FfiCallableProtocol
from ._options import FfiKernelProtocol as FfiKernelProtocol
from ._options import JaxCallableCallOptions as JaxCallableCallOptions
from ._options import JaxCallableOptions as JaxCallableOptions
from ._options import JaxKernelCallOptions as JaxKernelCallOptions
from ._options import JaxKernelOptions as JaxKernelOptions
from ._struct import struct as struct
from ._threads import cpu_linger_us as cpu_linger_us
from ._threads import cpu_private_bytes as cpu_private_bytes
from ._threads import cpu_threads as cpu_threads
from ._threads import set_cpu_linger_us as set_cpu_linger_us
from ._threads import set_cpu_private_bytes as set_cpu_private_bytes
from ._threads import set_cpu_threads as set_cpu_threads
from ._to_warp import to_warp as to_warp
from ._warnings import LaunchDimsWarning as LaunchDimsWarning

__all__ = [
    "AbstractStructure",
    "BufferInfo",
    "Bvh",
    "CheckingModeError",
    "CudaLaunchCheck",
    "CudaLaunchMismatchError",
    "Energy",
    "FfiCallableProtocol",
    "FfiKernelProtocol",
    "HashGrid",
    "JaxCallable",
    "JaxCallableCallOptions",
    "JaxCallableOptions",
    "JaxKernel",
    "JaxKernelCallOptions",
    "JaxKernelOptions",
    "LaunchDimsWarning",
    "Mesh",
    "ParamInfo",
    "PlanInfo",
    "UnsupportedWarpOptionError",
    "Volume",
    "WarpPatch",
    "check_cuda_launches",
    "checking_mode",
    "clear_caches",
    "compile_aot",
    "cpu_linger_us",
    "cpu_private_bytes",
    "cpu_threads",
    "energy",
    "export_checks",
    "jax_callable",
    "jax_kernel",
    "kernel_source",
    "list_plans",
    "patch_warp",
    "register_ffi_callback",
    "runtime_info",
    "set_checking_mode",
    "set_cpu_linger_us",
    "set_cpu_private_bytes",
    "set_cpu_threads",
    "struct",
    "to_warp",
    "types",
    "unpatch_warp",
]


def _register_on_import() -> None:
    """Register jarp's FFI targets with XLA, as custom-call libraries do on import.

    A process that loads a compiled program with jarp calls (a deserialised export or executable) finds them.
    That initialises Warp, quietly (its banner would land in the importing program's output). The imports are
    local so that the package namespace holds only its public names (tests/test_public_api.py).
    """
    from ._ffi import _target
    from ._upstream import _warp_kernels

    _warp_kernels.init_quietly()
    _target.ensure_registered()


_register_on_import()
del _register_on_import
