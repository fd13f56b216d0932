"""Building the handler: C++ compiled with the Clang in the warp-lang wheel, cached in Warp's kernel cache, loaded
into Warp's LLVM JIT (`build`); `cached_object` serves the launch guard too."""

from __future__ import annotations

import hashlib
import importlib.resources
import os
import platform
import tempfile
import threading
from pathlib import Path

import jax
import jaxlib
import warp as wp

from ..._upstream import _warp_builds, _warp_kernels
from .. import _threads
from ._handler import NativeHandler

_SOURCE = importlib.resources.files(__package__).joinpath("_handler.cpp")  # pyright: ignore[reportArgumentType]  # a module of a package: __package__ is set

# The handler includes jaxlib's c_api.h, which includes these two; the wheel's Clang has no C library
# headers (and a user's machine may have none), so jarp provides the freestanding definitions it needs.
_SHIM_HEADERS = {
    "stddef.h": """#pragma once
typedef __SIZE_TYPE__ size_t;
typedef __PTRDIFF_TYPE__ ptrdiff_t;
#ifndef NULL
#define NULL nullptr
#endif
#define offsetof(type, member) __builtin_offsetof(type, member)
""",
    "stdint.h": """#pragma once
typedef __INT8_TYPE__ int8_t;
typedef __INT16_TYPE__ int16_t;
typedef __INT32_TYPE__ int32_t;
typedef __INT64_TYPE__ int64_t;
typedef __UINT8_TYPE__ uint8_t;
typedef __UINT16_TYPE__ uint16_t;
typedef __UINT32_TYPE__ uint32_t;
typedef __UINT64_TYPE__ uint64_t;
typedef __INTPTR_TYPE__ intptr_t;
typedef __UINTPTR_TYPE__ uintptr_t;
""",
}


def _cache_key(source: str) -> str:
    header = Path(jax.ffi.include_dir(), "xla", "ffi", "api", "c_api.h").read_bytes()
    h = hashlib.sha256()
    for part in (
        source.encode(),
        repr(sorted(_SHIM_HEADERS.items())).encode(),
        header,
        wp.config.version.encode(),
        jaxlib.__version__.encode(),  # pyright: ignore[reportPrivateImportUsage]  # public, though jaxlib does not re-export it
        platform.machine().encode(),
        platform.system().encode(),
    ):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def build(name: str | None = None) -> NativeHandler:
    """Compile the handler (unless its object file is cached) and load it into Warp's LLVM JIT.

    Args:
        name: the JIT module to load it as (default: one per cache key). Each name is a separate copy
            with its own table and configuration (tests drive such a copy with fake XLA and CUDA functions).
    """
    _warp_kernels.runtime_core()  # initialises Warp, which sets its kernel cache directory
    source = _SOURCE.read_text()
    key = _cache_key(source)
    obj = cached_object("jarp_native", key, source, str(_SOURCE), _SHIM_HEADERS, [jax.ffi.include_dir()])
    lookup = _warp_builds.load_cpu_object(str(obj), name or f"jarp_native_{key}")
    native = NativeHandler(lookup, obj)
    if name is None:  # the process's handler (not a test's private copy) follows jarp's thread setting
        _threads.attach(native.set_threads)
    return native


def cached_object(
    stem: str, key: str, source: str, source_path: str, headers: dict[str, str], include_dirs: list[str]
) -> Path:
    """The object file of C++ ``source`` in Warp's kernel cache (``<stem>_<key>/<stem>.o``), compiled if missing.

    It is compiled with the Clang in the warp-lang wheel, with ``headers`` (name -> text) written to a scratch
    include directory first, then ``include_dirs``. ``key`` must change with everything the object depends on.
    """
    _warp_kernels.runtime_core()  # initialises Warp, which sets its kernel cache directory
    cache = Path(wp.config.kernel_cache_dir) / f"{stem}_{key}"  # pyright: ignore[reportArgumentType]  # set by then
    obj = cache / f"{stem}.o"
    if not obj.exists():
        cache.mkdir(parents=True, exist_ok=True)
        # Compiled beside its final name and renamed into place: another process may build the same key.
        partial = obj.with_name(f"{obj.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        with tempfile.TemporaryDirectory(prefix=f"{stem}_") as shims:
            for name, text in headers.items():
                Path(shims, name).write_text(text)
            try:
                _warp_builds.compile_cpu_object(source, source_path, str(partial), [shims, *include_dirs])
                os.replace(partial, obj)
            finally:
                partial.unlink(missing_ok=True)
    return obj
