"""The FFI stage's two locks (their places in the one lock order: `_upstream._locks.ORDER`).

`_executors.get_executor` and `_PartitionedExecutor._part` take `executors`, then Warp's lock (an executor loads its
module); a callable's first run takes both in the same order before its function runs (`CallableExecutor.run`: the
function may launch another jarp module, whose executor takes `executors`), and so does `_executors.build_lock` for
the user code jarp runs under Warp's lock (a generic callable's factory). Code reads these as module attributes
(``_locks.executors``), so a test can wrap them.
"""

from .._upstream import _locks

# The executors' lock: guards `_executors.executors`, `_executors.cpu_executors` and the building of an executor.
# Re-entrant: releasing plans drops executors, and a callable's function may call another jarp module (which
# prepares its executor).
executors = _locks.make("executors")
# Held while a callable's function runs. Warp's current device (``wp.ScopedDevice``) is one for the whole process and
# a device's current stream (``wp.ScopedStream``) one per device, not per thread: two threads running callables at
# once (pmap, or Python threads) would launch on each other's device or stream, and restore each other's on exit.
# Warp's bridge serialises its callables with one lock too. Kernel executors switch nothing and take no lock.
callables = _locks.make("callables")
