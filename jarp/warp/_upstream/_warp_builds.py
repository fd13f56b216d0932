"""Native code built as Warp builds it: objects compiled with the Clang in Warp's wheel, the source and options of a
loaded CPU build, CPU objects of jarp's own (the ranged entry points), and source and ahead-of-time builds for
inspection (`jarp.warp.kernel_source`, `compile_aot`).

Part of the upstream stage (its ``__init__`` lists the modules): `check_internals`, run by
`tests/warp/compat/test_upstream_internals.py`, fails loudly when an internal this module reads changes shape.
"""

# pyright: reportAttributeAccessIssue=false
# (a module where jarp reads Warp's private internals, through ``wp._src`` and private attributes, which Warp's type
# stubs leave out; the checker still checks everything else here)

from __future__ import annotations

import ctypes
import inspect
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import warp as wp
from warp._src import build as _build
from warp._src.context import (
    _get_cpu_target_hash,
    _validate_cuda_arch_suffix,
)

from . import _warp_kernels, _warp_launches

# -- native code built with Warp's bundled Clang --


def compile_cpu_object(source: str, source_path: str, object_path: str, include_dirs: Sequence[str]) -> None:
    """Compile C++ ``source`` to an object file with the Clang/LLVM in the warp-lang wheel (as Warp builds CPU kernels).

    Raises:
        RuntimeError: if this Warp build has no CPU compiler, or the compilation failed (Clang's
            diagnostics are printed to stderr by Warp's compiler library).
    """
    _warp_launches.check_cpu_support("jarp's native launch handler")
    _warp_kernels.runtime_core()
    runtime = wp._src.context.runtime
    flags = [f"-I{d}" for d in include_dirs]
    flags_array = (ctypes.c_char_p * (len(flags) + 1))(*[f.encode() for f in flags], None)
    with _warp_kernels.warp_lock():
        err = runtime.llvm.wp_compile_cpp(
            source.encode("utf-8"),
            source_path.encode("utf-8"),
            os.path.join(_build.warp_home, "native").encode("utf-8"),
            object_path.encode("utf-8"),
            False,  # debug
            False,  # verify_fp
            True,  # fuse_fp
            True,  # enable_tiles_in_stack_memory (irrelevant here)
            flags_array,
            2,  # optimization level
            False,  # verbose
            False,  # use_precompiled_headers
            None,  # pch_dir
            1,  # block_dim (irrelevant here)
        )
    if err != 0:
        raise RuntimeError(f"Warp's bundled Clang failed to compile {source_path} (error code {err})")


def load_cpu_object(object_path: str, name: str) -> Callable[[str], int]:
    """Load an object file into Warp's LLVM JIT as module ``name``; return a symbol lookup (address, 0 if missing).

    The code stays loaded for the life of the process (nothing unloads ``name``).
    """
    _warp_kernels.runtime_core()
    llvm = wp._src.context.runtime.llvm
    with _warp_kernels.warp_lock():
        if llvm.wp_load_obj(object_path.encode("utf-8"), name.encode("utf-8"), wp.config.legacy_cpu_linker) != 0:
            raise RuntimeError(f"Warp's LLVM JIT failed to load {object_path}")

    def lookup(symbol: str) -> int:
        with _warp_kernels.warp_lock():
            return int(llvm.wp_lookup(name.encode("utf-8"), symbol.encode("utf-8")) or 0)

    return lookup


# -- a loaded CPU build's source and options, and CPU objects built as Warp builds them --
#
# jarp's ranged entry points (`jarp.warp._ffi._native._ranged`) are compiled from the exact source of a loaded module build,
# with the build's own options; these are the pieces of Warp that takes.


# The kwargs (besides the two paths) Warp's ``Module._compile`` passes ``build_cpu``; jarp passes the same.
_BUILD_CPU_KWARGS = frozenset(
    {
        "mode",
        "fast_math",
        "verify_fp",
        "fuse_fp",
        "extra_flags",
        "optimization_level",
        "verbose",
        "use_precompiled_headers",
        "pch_dir",
        "block_dim",
        "enable_tiles_in_stack_memory",
        "extra_include_dirs",
    }
)


def mangled_name(kernel: wp.Kernel, entry: _warp_launches.EntryPoints) -> str:
    """``kernel``'s mangled name in the module build ``entry`` came from (the stem of its C++ names)."""
    with _warp_kernels.warp_lock():
        return entry.module_exec.get_kernel_mangled_name(kernel)


def loaded_build(kernel: wp.Kernel, entry: _warp_launches.EntryPoints) -> tuple[str, dict[str, Any]]:
    """The C++ source Warp compiled the module build ``entry`` came from, and the ``build_cpu`` options it used.

    Raises:
        RuntimeError: if the source or the options cannot be recovered (the module changed since an entry made
            outside `load_entry_points` was loaded).
    """
    module = kernel.module
    with _warp_kernels.warp_lock():
        module_exec = entry.module_exec
        current = module_exec.module_hash == module.get_module_hash(entry.block_dim)
        options = entry.build_options
        if options is None:
            if not current:
                raise RuntimeError(
                    f"Warp module '{module.name}' changed since kernel {kernel.key!r} was loaded, and the options of "
                    "the loaded build are unknown: load the kernel with load_entry_points to get its ranged entry point."
                )
            options = dict(module.resolved_options[entry.block_dim])
        return _build_source(module, module_exec, options, current), _cpu_build_options(options)


def _build_source(module: wp.Module, module_exec: object, options: dict[str, Any], current: bool) -> str:
    """The C++ source Warp compiled ``module_exec`` from.

    Warp writes it next to the binary in its kernel cache (``wp_<module>_<hash7>.cpp`` beside
    ``wp_<module>_<hash7>[.cpu<target>].o``), in a directory named by the module hash, so it is that build's source
    whichever process compiled it. Under the ``strip_hash`` module option the names carry no hash and a later build
    overwrites them; there (or if the file is gone) the source is generated again, as ``Module._compile`` does, which
    needs the module to be unchanged since the build.
    """
    binary = getattr(module_exec, "binary_path", None)
    if binary and not module.options["strip_hash"]:
        stem = re.sub(r"(\.cpu[0-9a-f]+)?\.o$", "", os.path.basename(binary))
        try:
            with open(os.path.join(os.path.dirname(binary), stem + ".cpp"), encoding="utf-8") as f:
                return f.read()
        except OSError:
            pass
    if not current:
        raise RuntimeError(
            f"The C++ source of a loaded build of Warp module '{module.name}' is not in Warp's kernel cache, and the "
            "module changed since, so jarp cannot build its ranged CPU entry points."
        )
    _warp_kernels.runtime_core()
    source, _ext, _meta, _ltoirs, _fatbins = module._run_codegen(options | {"output_arch": None}, True)
    return source


def _cpu_build_options(options: dict[str, Any]) -> dict[str, Any]:
    """The ``build_cpu`` options ``Module._compile`` compiles a CPU build with, from its resolved module options."""
    opt = options["optimization_level"]
    return {
        "mode": options["mode"],
        "fast_math": options["fast_math"],
        "verify_fp": options["verify_fp"],
        "fuse_fp": options["fuse_fp"],
        "extra_flags": options["cpu_compiler_flags"],
        "optimization_level": 2 if opt is None else opt,  # Warp's CPU default
        "use_precompiled_headers": options["use_precompiled_headers"],
        "block_dim": options["block_dim"],
        "enable_tiles_in_stack_memory": options["enable_tiles_in_stack_memory"],
        "extra_include_dirs": tuple(options["extra_cpu_include_dirs"] or ()),
    }


def cpu_target_hash(extra_flags: Any) -> str:
    """The hash of the CPU target Warp compiles for with these extra compiler flags (part of a build's identity)."""
    return _get_cpu_target_hash(extra_flags)


def kernel_cache_dir() -> Path:
    """Warp's kernel cache directory (``wp.config.kernel_cache_dir``)."""
    return Path(wp.config.kernel_cache_dir)  # pyright: ignore[reportArgumentType]  # set once Warp is initialised


def build_cpu_object(object_path: str, source_path: str, build: dict[str, Any]) -> None:
    """Compile the C++ file ``source_path`` to ``object_path`` as Warp compiles a module (``build_cpu``, ``build``
    from `loaded_build`), with the bundled Clang."""
    runtime = wp._src.context.runtime
    _build.build_cpu(
        object_path,
        source_path,
        verbose=False,
        pch_dir=runtime.get_clang_pch_dir() if build["use_precompiled_headers"] else None,
        **build,
    )


def cpu_codegen_templates() -> dict[str, str]:
    """Warp's CPU code templates a ranged entry point copies the shape of: per-task functions and task loops."""
    codegen = wp._src.codegen
    return {
        "kernel_forward": codegen.cpu_kernel_template_forward,
        "kernel_backward": codegen.cpu_kernel_template_backward,
        "module_forward": codegen.cpu_module_template_forward,
        "module_backward": codegen.cpu_module_template_backward,
    }


def check_internals() -> None:
    """Raise `AssertionError` if a Warp internal this module relies on has changed shape (Warp's CPU build where
    `loaded_build` and `build_cpu_object` depend on it, its Clang library, its code generator's entry names)."""
    parameters = set(inspect.signature(_build.build_cpu).parameters) - {"obj_path", "cpp_path"}
    assert parameters == _BUILD_CPU_KWARGS, f"build_cpu's parameters changed: {sorted(parameters)}"
    call = re.search(r"\bbuild_cpu\((.*?)\n\s*\)\n", inspect.getsource(wp.Module._compile), re.DOTALL)
    assert call is not None, "Module._compile no longer calls build_cpu"
    passed = set(re.findall(r"^\s+(\w+)=", call[1], re.MULTILINE))
    assert passed == _BUILD_CPU_KWARGS, f"Module._compile calls build_cpu with other options: {sorted(passed)}"
    assert "binary_path" in inspect.signature(wp._src.context.ModuleExec.__init__).parameters, (
        "ModuleExec lost binary_path"
    )
    templates = cpu_codegen_templates()
    assert all(isinstance(t, str) for t in templates.values()), "Warp's CPU code templates changed"
    assert callable(getattr(wp.Module, "_run_codegen", None)), "wp.Module lost _run_codegen (loaded_build)"
    with _warp_kernels.warp_lock():
        resolved = wp.get_module("jarp._probe_builds").resolve_options(wp.config, block_dim=1)
    _cpu_build_options(resolved)  # raises KeyError if a module option it reads is gone
    assert "strip_hash" in resolved, "the module option 'strip_hash' is gone"
    for fn in ("cuda_kernel_forward_name", "cuda_kernel_backward_name"):  # cuda_entry_names
        assert callable(getattr(wp._src.codegen, fn, None)), f"warp codegen lost {fn}"
    llvm = wp._src.context.runtime.llvm
    for attr in ("wp_compile_cpp", "wp_load_obj", "wp_lookup"):
        assert llvm is None or hasattr(llvm, attr), f"warp-clang library lost {attr}"
    assert llvm is None or len(llvm.wp_compile_cpp.argtypes) == 14, "wp_compile_cpp's parameters changed"
    assert llvm is None or len(llvm.wp_load_obj.argtypes) == 3, "wp_load_obj's parameters changed"
    assert os.path.isdir(os.path.join(_build.warp_home, "native")), "warp's native include directory moved"


# -- source and ahead-of-time builds for inspection --


def module_codegen(module: wp.Module, target: str, arch: int | None = None, block_dim: int | None = None) -> str:
    """Warp's generated C++ (``target="cpu"``) or CUDA (``target="cuda"``) source of a Warp module.

    The source is the one a build of ``module`` compiles: it covers every kernel of
    the module (each registered overload of a generic kernel) with the block dim
    jarp loads it with for a requested ``block_dim`` (see `resolve_block_dim`: by
    default 1 on the CPU, 256 on CUDA). ``arch`` is the CUDA output architecture
    (e.g. 90); it only changes the code of tile kernels that link NVIDIA's math
    libraries, and is ignored for the CPU.
    """
    _warp_kernels.runtime_core()  # Warp must be initialised before code generation
    is_cpu = target == "cpu"
    if is_cpu:
        block_dim = _warp_kernels.resolve_block_dim(wp.get_device("cpu"), block_dim)
    elif block_dim is None:
        block_dim = _warp_kernels.CUDA_BLOCK_DIM
    with _warp_kernels.warp_lock():
        module.get_module_hash(block_dim)  # resolve wp.static() expressions and cache the variant's hasher
        options = module.resolve_options(wp.config, block_dim=block_dim) | {"output_arch": None if is_cpu else arch}
        source, _ext, _meta, _ltoirs, _fatbins = module._run_codegen(options, is_cpu)
    return source


def default_cuda_arch() -> int:
    """The CUDA arch Warp compiles for on the first CUDA device, or Warp's default PTX arch without a GPU."""
    _warp_kernels.runtime_core()
    if wp.is_cuda_available():
        return int(wp.get_cuda_device().get_cuda_compile_arch())  # pyright: ignore[reportArgumentType]  # a CUDA device's: set
    return int(wp._src.context.runtime.default_ptx_arch)


def compile_aot_variant(
    module: wp.Module,
    archs: Sequence[int],
    module_dir: str | os.PathLike[str] | None,
    use_ptx: bool,
    block_dim: int,
) -> list[Path]:
    """Compile ``module``'s CUDA build for ``block_dim`` ahead of time, once per arch; return the binaries' paths.

    ``wp.compile_aot_module`` always builds the module's default block dim; this builds
    the variant a launch with ``block_dim`` loads, with the same file layout
    (``<dir>/wp_<module>_<hash>.sm<arch>.cubin``, the hash covering the block dim).
    """
    _warp_kernels.runtime_core()
    with _warp_kernels.warp_lock():
        module.get_module_hash(block_dim)  # resolve wp.static() expressions and cache the variant's hasher
        options = module.resolve_options(wp.config, block_dim=block_dim)
        runtime = wp._src.context.runtime
        if module_dir is None:
            out_dir = Path(wp.config.kernel_cache_dir) / module.get_module_identifier(block_dim=block_dim)  # pyright: ignore[reportArgumentType]  # set by then
        else:
            out_dir = Path(module_dir)
        paths = []
        for arch in archs:
            module._compile(
                None,
                None if module_dir is None else os.fspath(module_dir),
                output_arch=arch,
                use_ptx=use_ptx,
                options=options,
            )
            suffix = _validate_cuda_arch_suffix(
                arch, device_arch=arch, toolkit_version=runtime.toolkit_version, device_name=None
            )
            name = module._get_compile_output_name(None, arch, arch_suffix=suffix, use_ptx=use_ptx, block_dim=block_dim)
            paths.append(out_dir / name)
    return paths


def cuda_entry_names(kernel: wp.Kernel, block_dim: int | None) -> tuple[str, str | None]:
    """The symbols of ``kernel``'s CUDA forward and backward entry points in its module's build for ``block_dim``.

    A kernel's symbol carries its hash in that build (``<key>_<hash8>_cuda_kernel_forward``), which differs
    between the builds of different block dims, as ``ModuleExec.get_kernel_mangled_name`` resolves it
    when Warp loads the module. The backward name is None when the module is built without backward code.
    """
    block_dim = _warp_kernels.CUDA_BLOCK_DIM if block_dim is None else block_dim
    with _warp_kernels.warp_lock():
        kernel.module.get_module_hash(block_dim)
        kernel_hash = kernel.module.hashers[block_dim].kernel_hashes[kernel]
    name = kernel.get_mangled_name(kernel_hash=kernel_hash)
    forward = wp._src.codegen.cuda_kernel_forward_name(kernel, name=name)
    options = kernel.module.options | kernel.options
    backward = wp._src.codegen.cuda_kernel_backward_name(kernel, name=name) if options["enable_backward"] else None
    return forward, backward
