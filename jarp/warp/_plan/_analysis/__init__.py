"""What a kernel does, judged by the code Warp compiles (names resolved as Warp resolves them, branches on Python
constants folded), never by its text alone.

One concern a file:

- `_names`: names in kernel code resolved as Warp resolves them, the branches it folds, the compiled source every
  other analysis reads;
- `_writes`: which inputs and struct fields a kernel writes (Warp's own read/write record completed by the resolver
  and by `_generated`, the judgement of the C++ Warp generates: where each array parameter's pointer goes);
- `_overwrites`: which outputs every thread overwrites (the zero-fill a launch may skip) and which in-out arrays it
  stores into plainly;
- `_tid_access`: which arrays it indexes with its thread index (`_launch_checks` checks their lengths);
- `_ownership`: whether each thread of one function touches only its own elements, or shares them only by
  accumulating; `_builtins`: the builtins judged by name (tiles, printing, atomics);
- `_races`: those proofs followed into the ``@wp.func`` bodies a kernel calls (whether a CPU launch may be split,
  with private copies of what it accumulates, forward and adjoint; its estimated work);
- `_syntax`: the syntax-tree helpers they share.

The source-level analyses (pure functions of source text) are re-exported here; `_names`, `_writes` and `_races`,
which read Warp's objects, are imported as submodules (``from ._analysis import _races``), as is `_overwrites` for
`_overwrites.overwritten_in_code` (the source proof where the generated code agrees).
"""

from ._builtins import ACCUMULATING_ATOMICS as ACCUMULATING_ATOMICS
from ._builtins import called_names as called_names
from ._builtins import racy_call as racy_call
from ._builtins import sharing_call as sharing_call
from ._overwrites import overwritten_outputs as overwritten_outputs
from ._overwrites import plainly_stored as plainly_stored
from ._ownership import Accumulation as Accumulation
from ._ownership import accumulation_blocker as accumulation_blocker
from ._ownership import race_free_blocker as race_free_blocker
from ._syntax import attribute_path as attribute_path
from ._syntax import binding_pairs as binding_pairs
from ._tid_access import tid_indexed as tid_indexed
