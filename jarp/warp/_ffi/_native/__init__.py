"""The native launch path: build, load and feed jarp's C++ XLA FFI handler (``_handler.cpp``).

The handler is compiled at first use with the Clang/LLVM in the warp-lang wheel (the compiler Warp builds
every CPU kernel with), against the XLA FFI C header that jaxlib ships, so installing jarp needs no
compiler and the handler reads XLA's call frame through XLA's own declarations. The object file is
cached next to Warp's kernels (keyed on the source, the header, and the Warp, jaxlib and machine
versions) and loaded into Warp's LLVM JIT once per process.

Python then prepares, once per (plan, device), an immutable `LaunchDescriptor` (the argument-block
templates, the pointer slots and their per-slice offsets, the zero-fill list, the entry point, the launch
bounds and the expected buffers) and publishes it in a table the handler reads with atomic loads, without
a lock and without the GIL. A frame the handler does not recognise exactly goes to the Python callback,
which checks it in full and answers, so the native path adds no error messages of its own.

Set ``JARP_LAUNCH=python`` to force the Python callback path (read once, when jarp registers its FFI
targets). When the handler cannot be built or loaded, jarp warns once and uses the Python path.

One concern a file: `_abi` (the ctypes mirrors of the handler's structs), `_descriptor` (`LaunchDescriptor`),
`_handler` (`NativeHandler`, the loaded handler, and the layout check), `_build` (compiling and caching the C++
objects), `_process` (the process's handler and launch path), `_ranged` (jarp's ranged CPU entry points, compiled
beside Warp's module), `_guard` (bounds-checked CPU launches), `_fp_env` (the C floating-point environment).
"""

from ._abi import Descriptor as Descriptor
from ._build import build as build
from ._build import cached_object as cached_object
from ._descriptor import LaunchDescriptor as LaunchDescriptor
from ._descriptor import NativeStructure as NativeStructure
from ._handler import NativeHandler as NativeHandler
from ._handler import expected_layout as expected_layout
from ._process import ENV as ENV
from ._process import activate as activate
from ._process import active as active
from ._process import handler as handler
from ._process import status as status
