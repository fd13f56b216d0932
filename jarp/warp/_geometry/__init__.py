"""Warp's spatial structures as pytrees, and the module call that builds them inside the call.

A call given a structure (`jarp.warp.Mesh`, `Bvh`, `HashGrid`, `Volume`) flows through this package:

1. `_structures`: the pytrees. Each owns its arrays as leaves and its build options as static fields, checks its
   shapes and options at construction, says which arrays it hands to the call (`AbstractStructure.operands`) and
   how to build or refit its Warp object from them inside the call (`build`, `update`; a mesh's triangle indices
   are checked in range there).
2. `_calls`: the module call. The module kind resolves its target (a kernel also binds and checks the launch as a
   call without structures would, `_kernel.JaxKernel._call_with_structures`); `launch` checks where the structures
   go, refuses gradients Warp's adjoint would drop, replaces each structure by its arrays and calls a `jax_callable`
   whose function (a `Launcher`) builds the structures and runs the target. Before that, `check_structure_uses`
   refuses a kernel writing a structure's arrays or letting its id escape, and `match_query_precision` builds a hash
   grid in the precision the kernel queries it in.
3. `_builds`: inside the call (jarp's Python path, `_ffi._executors.current_call`), `obtain` builds or refits each
   structure and keeps it in the call's store as long as a compiled program can launch it.
4. The gradients, judged on the code Warp generates: `_adjoints` finds the reads of a structure whose gradient
   Warp's adjoint drops; `_variants` derives the kernel variant whose mesh builtins read the vertices as arrays
   (calling the Warp functions of `_funcs` instead), so that every query differentiates; `_replays` is the taped
   run of a callable's reverse pass, which keeps the structures a function builds itself until the tape is played
   back (the FFI stage reaches it through `_ffi._callable_executor.set_taped_run`, installed below, never by an
   import).
"""

from .._ffi import _callable_executor
from ._adjoints import Drop as Drop
from ._adjoints import dropped as dropped
from ._builds import counts as counts
from ._calls import CALLABLE_DROPS as CALLABLE_DROPS
from ._calls import Launcher as Launcher
from ._calls import check_places as check_places
from ._calls import check_structure_uses as check_structure_uses
from ._calls import has_structures as has_structures
from ._calls import is_structure as is_structure
from ._calls import launch as launch
from ._calls import match_query_precision as match_query_precision
from ._calls import output_dims as output_dims
from ._replays import taped_run
from ._structures import AbstractStructure as AbstractStructure
from ._structures import Bvh as Bvh
from ._structures import HashGrid as HashGrid
from ._structures import Mesh as Mesh
from ._structures import Recipe as Recipe
from ._structures import Volume as Volume
from ._variants import vertex_reads as vertex_reads

# The FFI stage runs a callable's reverse pass through this hook: functions may build structures of their own.
_callable_executor.set_taped_run(taped_run)
