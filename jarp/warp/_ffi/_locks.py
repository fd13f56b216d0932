"""The FFI stage's two locks, and the order in which jarp takes all of its locks.

Lock order. A thread that takes several of jarp's locks takes them in this order, and never waits for one of them
while it holds one that comes later (re-acquiring one it already holds is fine: all of them are re-entrant):

    `callables`  ->  `executors`  ->  Warp's lock (`_warp_internals.warp_lock`)  ->  Warp's `_codegen_lock`

`_executors.get_executor` and `_PartitionedExecutor._part` take `executors`, then Warp's lock (an executor loads its
module); a callable's first run takes both in the same order before its function runs (`CallableExecutor.run`: the
function may launch another jarp module, whose executor takes `executors`), and so does `_executors.build_lock` for
the user code jarp runs under Warp's lock (a generic callable's factory); `_warp_internals` takes Warp's
`_codegen_lock` only under Warp's lock. The registry's lock and the native handler's lock come after all of these and
are held for a moment. Code reads these as module attributes (``_locks.executors``), so a test can wrap them.
"""

import threading

# The executors' lock: guards `_executors.executors`, `_executors.cpu_executors` and the building of an executor.
# Re-entrant: releasing plans drops executors, and a callable's function may call another jarp module (which
# prepares its executor).
executors = threading.RLock()
# Held while a callable's function runs. Warp's current device (``wp.ScopedDevice``) is one for the whole process and
# a device's current stream (``wp.ScopedStream``) one per device, not per thread: two threads running callables at
# once (pmap, or Python threads) would launch on each other's device or stream, and restore each other's on exit.
# Warp's bridge serialises its callables with one lock too. Kernel executors switch nothing and take no lock.
callables = threading.RLock()
