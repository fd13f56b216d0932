"""Warp kernels and Warp-launching functions as JAX-callable Equinox modules.

The files at this level are what users touch: the modules (`_kernel`, `_callable`, their abstract base
`_base`, their shared option fields `_option_fields`, the factories' module cache `_factory`), eager dispatch
(`_eager`), energies (`_energy`), options (`_options`), structs and conversions (`_struct`, `_to_warp`, `types`), Warp's geometry as pytrees (the `_geometry`
package: the structures, their call, their builds inside the call), plan listing (`_inspect`) and
generated source / ahead-of-time builds (`_codegen`), and the switch that points Warp's own bridge entry points at
jarp's (`_bridge`). A call goes through the stages, one subpackage each: the plan is built (`_plan`), carried by
jarp's primitive and lowered (`_jax`), and run inside the custom call (`_ffi`). The stages are listed lowest first;
a stage imports only itself and the stages listed above it (`tests/warp/test_layout.py` checks it):

- `_upstream`: every private Warp, JAX and XLA name, and nothing of jarp;
- `_plan`: binds the arguments (`_plan/_binding.py`) and builds the hashable plan (`_plan/_builder.py`), and its
  content text for compiled programs (`_plan/_content/`);
- `_ffi`: what runs inside the custom call: the target and its callback (`_ffi/_target.py`), frame checks,
  executors, the native handler, the plan registry;
- `_jax`: the primitive (`_jax/_primitive.py`), its lowering to the FFI target (`_jax/_lowering.py`),
  reverse mode (`_jax/_adjoint.py`) and the modules' ``jvp=``/``vjp=`` rules (`_jax/_user_rules.py`).
"""

from . import types as types
from ._bridge import UnsupportedWarpOptionError as UnsupportedWarpOptionError
from ._bridge import WarpPatch as WarpPatch
from ._bridge import patch_warp as patch_warp
from ._bridge import unpatch_warp as unpatch_warp
from ._caches import clear_caches as clear_caches
from ._callable import JaxCallable as JaxCallable
from ._callable import jax_callable as jax_callable
from ._codegen import CudaLaunchCheck as CudaLaunchCheck
from ._codegen import CudaLaunchMismatchError as CudaLaunchMismatchError
from ._codegen import check_cuda_launches as check_cuda_launches
from ._codegen import compile_aot as compile_aot
from ._codegen import kernel_source as kernel_source
from ._energy import Energy as Energy
from ._energy import energy as energy
from ._export import export_checks as export_checks
from ._ffi._checking import CheckingModeError as CheckingModeError
from ._ffi._checking import checking_mode as checking_mode
from ._ffi._checking import set_checking_mode as set_checking_mode
from ._ffi._threads import cpu_linger_us as cpu_linger_us
from ._ffi._threads import cpu_private_bytes as cpu_private_bytes
from ._ffi._threads import cpu_threads as cpu_threads
from ._ffi._threads import set_cpu_linger_us as set_cpu_linger_us
from ._ffi._threads import set_cpu_private_bytes as set_cpu_private_bytes
from ._ffi._threads import set_cpu_threads as set_cpu_threads
from ._ffi._user_callback import register_ffi_callback as register_ffi_callback
from ._geometry import AbstractStructure as AbstractStructure
from ._geometry import Bvh as Bvh
from ._geometry import HashGrid as HashGrid
from ._geometry import Mesh as Mesh
from ._geometry import Volume as Volume
from ._inspect import BufferInfo as BufferInfo
from ._inspect import ParamInfo as ParamInfo
from ._inspect import PlanInfo as PlanInfo
from ._inspect import list_plans as list_plans
from ._kernel import JaxKernel as JaxKernel
from ._kernel import jax_kernel as jax_kernel
from ._options import FfiCallableProtocol as FfiCallableProtocol
from ._options import FfiKernelProtocol as FfiKernelProtocol
from ._options import JaxCallableCallOptions as JaxCallableCallOptions
from ._options import JaxCallableOptions as JaxCallableOptions
from ._options import JaxKernelCallOptions as JaxKernelCallOptions
from ._options import JaxKernelOptions as JaxKernelOptions
from ._plan._launch_checks import LaunchDimsWarning as LaunchDimsWarning
from ._struct import struct as struct
from ._to_warp import to_warp as to_warp

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
    from ._upstream import _warp_internals

    _warp_internals.init_quietly()
    _target.ensure_registered()


_register_on_import()
del _register_on_import
