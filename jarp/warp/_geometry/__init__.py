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

The gradient checks and the kernel variant whose mesh builtins read the vertices as arrays are judged on the code
Warp generates, in the plan stage (`_plan._geometry_adjoints`, `_plan._geometry_variants`, whose Warp functions are in `_plan._geometry_funcs`).
"""

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
from ._structures import AbstractStructure as AbstractStructure
from ._structures import Bvh as Bvh
from ._structures import HashGrid as HashGrid
from ._structures import Mesh as Mesh
from ._structures import Recipe as Recipe
from ._structures import Volume as Volume
